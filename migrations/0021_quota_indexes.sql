-- 0021_quota_indexes: the counts behind an App's quotas (docs/tenants.md) read only live rows:
-- its live Sessions, its Workspaces and their sizes, its claimed and running Sandboxes. The
-- App-wide indexes would walk its whole history of deleted Sessions and ended Sandboxes.
CREATE INDEX sessions_app_live ON sessions (app_id) WHERE state <> 'deleted';
CREATE INDEX workspaces_app_live ON workspaces (app_id, size_mib) WHERE deleted_at IS NULL;
CREATE INDEX sandboxes_app_live ON sandboxes (app_id) WHERE state IN ('claimed', 'running');
