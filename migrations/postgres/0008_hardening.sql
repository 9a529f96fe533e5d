-- 0008_hardening: a Workspace's size (it is a filesystem of its own, so the size is enforced),
-- an App's optional host caps for its microVMs' VMM processes, and what each worker cannot bound.
-- NULL size_mib: a Workspace created before this migration, a plain directory without a bound.
ALTER TABLE workspaces ADD COLUMN size_mib BIGINT;
-- NULL: no caps (the default). Else JSON {"vmmMemoryMib": N, "vmmCpus": N}, each optional.
ALTER TABLE apps ADD COLUMN limits TEXT;
-- The Sandbox bounds this worker's drivers cannot apply on its host, "driver:bound" comma-separated
-- ("process:cpu"); '' when every bound applies; NULL before the worker said.
ALTER TABLE workers ADD COLUMN unbounded TEXT;
