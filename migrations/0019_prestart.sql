-- 0019_prestart: pre-started agents (docs/worker.md, "Pre-started agents"). An App with prestart
-- keeps warm_pool Sandboxes per worker whose agent already runs its command; readiness 'line'
-- holds each back from claims until the agent printed {"type":"ready"}. definition_rev counts the
-- changes of what a pre-started Sandbox was started from (driver, image, size, command, env): a
-- Sandbox records the revision it was started with (prestart_rev; NULL: not pre-started) and is
-- claimed only while that is still the App's.
ALTER TABLE apps ADD COLUMN prestart INTEGER NOT NULL DEFAULT 0 CHECK (prestart IN (0, 1));
ALTER TABLE apps ADD COLUMN warm_pool INTEGER NOT NULL DEFAULT 0 CHECK (warm_pool >= 0);
ALTER TABLE apps ADD COLUMN readiness TEXT NOT NULL DEFAULT 'none'
    CHECK (readiness IN ('none', 'line'));
ALTER TABLE apps ADD COLUMN definition_rev INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sandboxes ADD COLUMN prestart_rev INTEGER;
CREATE INDEX sandboxes_prestarted ON sandboxes (app_id, state) WHERE prestart_rev IS NOT NULL;
