-- 0021_quota_indexes (PostgreSQL): the same as migrations/0021_quota_indexes.sql for SQLite:
-- partial indexes of the live rows an App's quota counts read (docs/tenants.md).
CREATE INDEX sessions_app_live ON sessions (app_id) WHERE state <> 'deleted';
CREATE INDEX workspaces_app_live ON workspaces (app_id, size_mib) WHERE deleted_at IS NULL;
CREATE INDEX sandboxes_app_live ON sandboxes (app_id) WHERE state IN ('claimed', 'running');
