// fork_faults.test.mjs: faults on the fork test driver: crashing and hanging agents are retried on
// fresh Sandboxes then failed with a reason while other Sessions keep flowing; kill -9 of a worker
// with messages in flight, then a restart: every accepted message ends completed exactly once and
// nothing of the dead worker's Sandboxes is left.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { startSbx, sleep, assertWorkersExited } from './harness.mjs';

test('a crashing agent is retried on fresh Sandboxes, then failed with the reason', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { key } = await sbx.app('crash', { keepAliveSeconds: 5, maxAttempts: 3 });
    const bad = await sbx.session(key);
    const good = await sbx.session(key);
    const crash = await sbx.post(key, bad.id, { crash: true });
    const other = await sbx.roundTrip(key, good.id, { fine: true });
    assert.equal(other.state, 'completed');
    const m = await sbx.wait(key, bad.id, crash.id);
    assert.equal(m.state, 'failed');
    assert.equal(m.attempts, 3);
    assert.match(m.error, /agent exited with status 3|agent channel closed/);
    // Each attempt ran in its own fresh Sandbox, each now terminated.
    // (The message fails before its last Sandbox's teardown is recorded; that follows at once.)
    await sbx.until(() => sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE session_id = '${bad.id}' AND state = 'terminated'`) === '3', 10000, 'three terminated Sandboxes');
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE session_id = '${bad.id}'`), '3');
    const next = await sbx.roundTrip(key, bad.id, { after: 'crash' });
    assert.equal(next.state, 'completed');
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('a hanging agent times out, is retried, then failed with the reason', async () => {
  const sbx = await startSbx({ workers: 1, env: { SBX_MESSAGE_TIMEOUT: '1' } });
  try {
    const { key } = await sbx.app('hang', { keepAliveSeconds: 5, maxAttempts: 2 });
    const s = await sbx.session(key);
    const m = await sbx.roundTrip(key, s.id, { hang: true }, 20);
    assert.equal(m.state, 'failed');
    assert.equal(m.attempts, 2);
    assert.match(m.error, /message timeout: no answer within 1s/);
    // The message fails before its last Sandbox is torn down; the teardown follows at once.
    await sbx.until(() => sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE session_id = '${s.id}' AND state = 'terminated' AND termination_reason LIKE 'message timeout%'`) === '2', 5000, 'both timed-out Sandboxes terminated');
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('kill -9 of a worker mid-flight, restart: every message completed exactly once', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { key } = await sbx.app('k9', { keepAliveSeconds: 30 });
    const sessions = [];
    for (let i = 0; i < 6; i++) sessions.push(await sbx.session(key));
    const posted = [];
    for (let round = 0; round < 4; round++)
      for (const s of sessions) posted.push([s.id, (await sbx.post(key, s.id, { round, sleepMs: 150 })).id]);
    // Let deliveries get under way, then kill the worker without warning.
    await sbx.until(() => Number(sbx.sql(`SELECT COUNT(*) FROM messages WHERE state = 'delivering'`)) >= 3, 10000, 'deliveries in flight');
    const victim = sbx.workers[0];
    const pids = sbx.sql(`SELECT pid FROM sandboxes WHERE state NOT IN ('terminated','failed') AND pid IS NOT NULL`).split('\n').filter(Boolean).map(Number);
    victim.kill('SIGKILL');
    await victim.exited;
    assert.ok(Number(sbx.sql(`SELECT COUNT(*) FROM messages WHERE state = 'delivering'`)) > 0, 'nothing was in flight');

    sbx.startWorker();
    for (const [sid, mid] of posted) {
      const m = await sbx.wait(key, sid, mid, 60);
      assert.equal(m.state, 'completed', `${mid}: ${m.state} ${m.error}`);
    }
    // Exactly once: one completion event per message, and in seq order within each Session.
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM (SELECT object_id FROM events WHERE kind = 'message.completed' GROUP BY object_id HAVING COUNT(*) <> 1) AS sub`), '0');
    assert.equal(Number(sbx.sql(`SELECT COUNT(*) FROM events WHERE kind = 'message.completed'`)), posted.length);
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM messages a JOIN messages b ON a.session_id = b.session_id AND a.seq < b.seq AND a.completed_at > b.completed_at`), '0');
    // The dead worker's Sandboxes were reaped: terminated with reason "worker restart", processes gone.
    const reaped = Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE termination_reason = 'worker restart' AND state = 'terminated'`));
    assert.ok(reaped >= 1, 'no Sandbox recorded as reaped');
    for (const pid of pids) {
      let stat = '';
      try { stat = readFileSync(`/proc/${pid}/stat`, 'utf8'); } catch {}
      assert.ok(!/\(sbx-fake-agent\) [^Z]/.test(stat), `agent process ${pid} survived its worker`);
    }
    const results = await sbx.stop();
    assert.deepEqual(results[1], { code: 0, signal: null });
    assert.deepEqual(readdirSync(sbx.jailRoot('fork')), [], 'jail dirs left behind');
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('kill -9 of one of three workers: the others adopt its work at once', async () => {
  const sbx = await startSbx({ workers: 3 });
  try {
    const { key } = await sbx.app('peers', { keepAliveSeconds: 30 });
    const sessions = [];
    for (let i = 0; i < 9; i++) sessions.push(await sbx.session(key));
    const posted = [];
    for (let round = 0; round < 3; round++)
      for (const s of sessions) posted.push([s.id, (await sbx.post(key, s.id, { round, sleepMs: 200 })).id]);
    // Kill a worker that holds leases.
    const owner = await sbx.until(() => sbx.sql(`SELECT w.pid FROM messages m JOIN workers w ON w.id = m.lease_owner WHERE m.state = 'delivering' LIMIT 1`), 10000, 'a lease');
    const victim = sbx.workers.find((p) => p.pid === Number(owner));
    assert.ok(victim, `no test worker has pid ${owner}`);
    victim.kill('SIGKILL');
    await victim.exited;
    for (const [sid, mid] of posted) {
      const m = await sbx.wait(key, sid, mid, 60);
      assert.equal(m.state, 'completed', `${mid}: ${m.error}`);
    }
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM events WHERE kind = 'worker.adopted'`), '1');
    assert.equal(Number(sbx.sql(`SELECT COUNT(*) FROM events WHERE kind = 'message.completed'`)), posted.length);
    // Its Sandboxes were reaped by the adopter (recorded "worker restart"), nothing left behind.
    await sbx.until(() => Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE termination_reason = 'worker restart'`)) >= 1, 10000, 'the dead worker\'s Sandboxes to be reaped');
    const results = await sbx.stop();
    assert.equal(results.filter((r) => r.code === 0).length, 2);
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state NOT IN ('terminated','failed')`), '0');
    assert.deepEqual(readdirSync(sbx.jailRoot('fork')), []);
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('a boot stuck past its deadline fails with its step, the message is retried, and SIGTERM does not wait for it', async () => {
  // The first two boots hang for good once their agent runs; the driver's deadline is 5 s.
  const sbx = await startSbx({ workers: 1, env: { SBX_FAKE_BOOT_HANG: '2', SBX_FAKE_BOOT_DEADLINE_MS: '5000' } });
  let bodyFailed = true;
  try {
    const { key } = await sbx.app('stuck', { keepAliveSeconds: 5, maxAttempts: 5 });
    const s = await sbx.session(key);
    const m = await sbx.roundTrip(key, s.id, { after: 'stuck boots' }, 90);
    assert.equal(m.state, 'completed');
    await sbx.until(() => sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state = 'failed' AND termination_reason LIKE '%not done within 5 s, stuck at fake hang%'`) === '2', 60000, 'both stuck boots failed with their step');
    bodyFailed = false;
  } finally {
    // The two stuck boot threads never return: the worker still exits (0) on SIGTERM.
    const results = await sbx.stop();
    sbx.cleanup();
    assertWorkersExited(results, bodyFailed);
  }
});
