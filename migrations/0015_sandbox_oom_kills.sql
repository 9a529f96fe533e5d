-- 0015_sandbox_oom_kills: how many processes the kernel's OOM killer ended inside each Sandbox
-- while its agent went on (its memory bound, memSizeMib), as the worker last read it; each rise
-- is also a sandbox.oom_killed event. An OOM kill of the agent itself still ends the Sandbox
-- with terminationReason "oom".
ALTER TABLE sandboxes ADD COLUMN oom_kills INTEGER NOT NULL DEFAULT 0;
