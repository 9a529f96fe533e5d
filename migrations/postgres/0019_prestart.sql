-- 0019_prestart (PostgreSQL): the same as migrations/0019_prestart.sql for SQLite: an App's
-- pre-started agents (prestart, warm_pool, readiness, definition_rev) and the revision of the App
-- a pre-started Sandbox was started with (prestart_rev; NULL: not pre-started).
ALTER TABLE apps ADD COLUMN prestart BIGINT NOT NULL DEFAULT 0 CHECK (prestart IN (0, 1));
ALTER TABLE apps ADD COLUMN warm_pool BIGINT NOT NULL DEFAULT 0 CHECK (warm_pool >= 0);
ALTER TABLE apps ADD COLUMN readiness TEXT NOT NULL DEFAULT 'none'
    CHECK (readiness IN ('none', 'line'));
ALTER TABLE apps ADD COLUMN definition_rev BIGINT NOT NULL DEFAULT 1;
ALTER TABLE sandboxes ADD COLUMN prestart_rev BIGINT;
CREATE INDEX sandboxes_prestarted ON sandboxes (app_id, state) WHERE prestart_rev IS NOT NULL;
