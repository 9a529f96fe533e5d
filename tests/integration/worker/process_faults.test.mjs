// process_faults.test.mjs: faults on the real process driver: a crashing agent and a hanging
// agent are retried on fresh Sandboxes then failed with a reason; kill -9 of the worker with
// messages in flight, then a restart: every accepted message completed exactly once, and no jail
// directory or cgroup is left.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { startSbx } from './harness.mjs';

test('crashing and hanging agents are retried, then failed with the reason', async () => {
  const sbx = await startSbx({ workers: 1, env: { SBX_MESSAGE_TIMEOUT: '2' } });
  try {
    const { key } = await sbx.app('faulty', { keepAliveSeconds: 5, maxAttempts: 2 });
    const a = await sbx.session(key);
    const b = await sbx.session(key);
    const c = await sbx.session(key);
    const crash = await sbx.post(key, a.id, { crash: true });
    const hang = await sbx.post(key, b.id, { sleepMs: 600000 });
    const fine = await sbx.roundTrip(key, c.id, { ok: 1 });
    assert.equal(fine.state, 'completed');
    const mc = await sbx.wait(key, a.id, crash.id, 30);
    assert.equal(mc.state, 'failed');
    assert.equal(mc.attempts, 2);
    assert.match(mc.error, /agent exited with status 3|agent channel closed/);
    const mh = await sbx.wait(key, b.id, hang.id, 30);
    assert.equal(mh.state, 'failed');
    assert.equal(mh.attempts, 2);
    assert.match(mh.error, /message timeout/);
    await sbx.until(() => sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE session_id IN ('${a.id}','${b.id}') AND state = 'terminated'`) === '4', 10000, 'the four failed Sandboxes to end');
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('kill -9 of the worker mid-flight, restart: exactly once, nothing left behind', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { key } = await sbx.app('k9', { keepAliveSeconds: 30 });
    const sessions = [];
    for (let i = 0; i < 4; i++) sessions.push(await sbx.session(key));
    const posted = [];
    for (let round = 0; round < 3; round++)
      for (const s of sessions) posted.push([s.id, (await sbx.post(key, s.id, { round, sleepMs: 300 })).id]);
    await sbx.until(() => Number(sbx.sql(`SELECT COUNT(*) FROM messages WHERE state = 'delivering'`)) >= 2, 30000, 'deliveries in flight');
    const jails = sbx.sql(`SELECT jail_dir FROM sandboxes WHERE state NOT IN ('terminated','failed')`).split('\n').filter(Boolean);
    const victim = sbx.workers[0];
    victim.kill('SIGKILL');
    await victim.exited;

    sbx.startWorker();
    for (const [sid, mid] of posted) {
      const m = await sbx.wait(key, sid, mid, 60);
      assert.equal(m.state, 'completed', `${mid}: ${m.error}`);
    }
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM (SELECT object_id FROM events WHERE kind = 'message.completed' GROUP BY object_id HAVING COUNT(*) <> 1) AS sub`), '0');
    assert.equal(Number(sbx.sql(`SELECT COUNT(*) FROM events WHERE kind = 'message.completed'`)), posted.length);
    assert.ok(Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE termination_reason = 'worker restart'`)) >= 1);
    for (const j of jails) assert.ok(!existsSync(j), `jail ${j} of the dead worker left behind`);
    await sbx.stop();
    assert.deepEqual(readdirSync(sbx.jailRoot('process')), [], 'jail dirs left behind');
    for (const cg of sbx.sql(`SELECT cgroup_path FROM sandboxes WHERE cgroup_path IS NOT NULL`).split('\n').filter(Boolean))
      assert.ok(!existsSync(cg), `cgroup ${cg} left behind`);
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});
