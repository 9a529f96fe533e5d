-- 0017_fair_claims: the queue by App, for fair claiming (docs/worker.md, "Sharing Sandboxes
-- between Apps"): a worker's claim finds the Apps with waiting messages by skipping from one App to
-- the next, and each App's oldest due message, without walking another App's backlog.
CREATE INDEX messages_queued_app ON messages (app_id, not_before, created_at) WHERE state = 'queued';
-- Each App's Sessions that hold a Sandbox (activating or active), which the claim counts against
-- its share and its quota: a walk of this index reads the live Sessions only.
CREATE INDEX sessions_live ON sessions (app_id) WHERE state IN ('activating', 'active');
-- The queued messages of a Session: a worker at its Sandbox limit (or an App at its quota) claims
-- only for Sessions it holds, found from them rather than by walking the whole queue.
CREATE INDEX messages_queued_session ON messages (session_id, seq) WHERE state = 'queued';
