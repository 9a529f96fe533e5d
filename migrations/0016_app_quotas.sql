-- 0016_app_quotas: an App's quotas, set by the admin (docs/tenants.md). NULL: the host-wide
-- default (SBX_QUOTA_* settings); 0: no bound for this App. Live Sandboxes are those claimed for
-- or running its Sessions (the warm pool is not counted); Workspace MiB is the sum of their
-- sizeMib; the keep-alive bound caps the App's and its Sessions' keepAliveSeconds.
ALTER TABLE apps ADD COLUMN quota_live_sandboxes INTEGER CHECK (quota_live_sandboxes >= 0);
ALTER TABLE apps ADD COLUMN quota_sessions INTEGER CHECK (quota_sessions >= 0);
ALTER TABLE apps ADD COLUMN quota_workspaces INTEGER CHECK (quota_workspaces >= 0);
ALTER TABLE apps ADD COLUMN quota_workspace_mib INTEGER CHECK (quota_workspace_mib >= 0);
ALTER TABLE apps ADD COLUMN quota_keep_alive_seconds INTEGER CHECK (quota_keep_alive_seconds >= 0);
