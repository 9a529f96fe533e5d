-- 0020_worker_drivers: the Sandbox drivers a worker can run on its host, as it found them at
-- start (and again when that changes): a JSON object from driver name to true, or to the reason
-- it cannot ("qemu binary ... not found"). NULL: not said (a worker older than this column). The
-- gateway refuses an App whose driver no live worker can run (docs/worker.md).
ALTER TABLE workers ADD COLUMN drivers TEXT;
