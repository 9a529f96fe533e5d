-- 0016_app_quotas (PostgreSQL): the same as migrations/0016_app_quotas.sql for SQLite: an
-- App's quotas; NULL takes the host-wide default, 0 is no bound (docs/tenants.md).
ALTER TABLE apps ADD COLUMN quota_live_sandboxes BIGINT CHECK (quota_live_sandboxes >= 0);
ALTER TABLE apps ADD COLUMN quota_sessions BIGINT CHECK (quota_sessions >= 0);
ALTER TABLE apps ADD COLUMN quota_workspaces BIGINT CHECK (quota_workspaces >= 0);
ALTER TABLE apps ADD COLUMN quota_workspace_mib BIGINT CHECK (quota_workspace_mib >= 0);
ALTER TABLE apps ADD COLUMN quota_keep_alive_seconds BIGINT CHECK (quota_keep_alive_seconds >= 0);
