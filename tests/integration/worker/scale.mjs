// scale.mjs: the multi-worker scale test, run by fork_scale.test.mjs (fork test driver) and
// process_scale.test.mjs (the real process driver and echo agent): 4 worker processes on one
// database, 2,000 messages across 200 Sessions (keep-alive 1 s so Sessions move between
// workers): no message lost, none delivered twice, none out of order within its Session, no
// Sandbox shared by two Sessions, and no jail left behind.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { startSbx } from './harness.mjs';

const SESSIONS = 200;
const PER_SESSION = 10;

export function testScale(driver) {
  test(`4 workers, 2,000 messages across 200 Sessions (${driver} driver): none lost, none out of order`, async () => {
    const sbx = await startSbx({ workers: 4, env: { SBX_MAX_SANDBOXES: '16', SBX_POOL_SIZE: '2' } });
    try {
      const { key } = await sbx.app('scale', { keepAliveSeconds: 1 });
      const sessions = [];
      for (let i = 0; i < SESSIONS; i++) sessions.push(await sbx.session(key));
      // Each Session's messages are posted in order; Sessions are posted concurrently.
      for (let chunk = 0; chunk < SESSIONS; chunk += 50) {
        await Promise.all(sessions.slice(chunk, chunk + 50).map(async (s) => {
          for (let n = 1; n <= PER_SESSION; n++) await sbx.post(key, s.id, { n });
        }));
      }
      const total = SESSIONS * PER_SESSION;
      assert.equal(Number(sbx.sql(`SELECT COUNT(*) FROM messages m JOIN sessions s ON s.id = m.session_id WHERE s.app_id = (SELECT id FROM apps WHERE name = 'scale')`)), total);
      await sbx.until(() => Number(sbx.sql(`SELECT COUNT(*) FROM messages WHERE state IN ('completed','failed')`)) >= total, 240000, 'all messages to end');

      assert.equal(sbx.sql(`SELECT COUNT(*) FROM messages WHERE state = 'completed'`), String(total), 'some message failed');
      // Exactly once.
      assert.equal(Number(sbx.sql(`SELECT COUNT(*) FROM events WHERE kind = 'message.completed'`)), total);
      // In order: completion events of a Session come in seq order, and each reply echoes its body.
      assert.equal(sbx.sql(`SELECT COUNT(*) FROM events e1 JOIN events e2 ON e1.session_id = e2.session_id AND e1.kind = 'message.completed' AND e2.kind = 'message.completed' AND e1.id < e2.id JOIN messages m1 ON m1.id = e1.object_id JOIN messages m2 ON m2.id = e2.object_id WHERE m1.seq > m2.seq`), '0');
      assert.equal(sbx.sql(`SELECT COUNT(*) FROM messages WHERE json_extract(reply, '$.echo.n') <> seq`), '0');
      // Sandboxes never shared between Sessions; the work was spread over the workers.
      assert.equal(sbx.sql(`SELECT COUNT(*) FROM (SELECT sandbox_id FROM messages GROUP BY sandbox_id HAVING COUNT(DISTINCT session_id) > 1) AS sub`), '0');
      const workersUsed = Number(sbx.sql(`SELECT COUNT(DISTINCT worker_id) FROM sandboxes WHERE session_id IS NOT NULL`));
      assert.ok(workersUsed >= 2, `only ${workersUsed} worker(s) served Sessions`);

      const results = await sbx.stop();
      for (const r of results.slice(0, 4)) assert.deepEqual(r, { code: 0, signal: null });
      assert.equal(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state NOT IN ('terminated','failed')`), '0');
      assert.deepEqual(readdirSync(sbx.jailRoot(driver)), []);
    } finally {
      await sbx.stop();
      sbx.cleanup();
    }
  });
}
