-- 0020_worker_drivers (PostgreSQL): the same as migrations/0020_worker_drivers.sql for SQLite:
-- the drivers a worker can run on its host, JSON (driver name: true or the reason it cannot).
ALTER TABLE workers ADD COLUMN drivers TEXT;
