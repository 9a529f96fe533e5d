// fork_lifecycle.test.mjs: the worker's Sandbox lifecycle on the fork test driver: replies, one
// Sandbox per Session, reuse while active, keep-alive expiry by timer, warm-pool activations,
// retries of agent errors, DELETE of a Sandbox, and a clean SIGTERM.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { startSbx, sleep } from './harness.mjs';

test('replies, Sandbox per Session, reuse, keep-alive expiry, pool, SIGTERM', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { key } = await sbx.app('life', { keepAliveSeconds: 1 });
    const s1 = await sbx.session(key);
    const s2 = await sbx.session(key);

    const m1 = await sbx.roundTrip(key, s1.id, { hello: 1 });
    assert.equal(m1.state, 'completed');
    assert.deepEqual(m1.reply.echo, { hello: 1 });
    assert.equal(m1.attempts, 1);
    const m2 = await sbx.roundTrip(key, s2.id, { hello: 2 });
    assert.equal(m2.state, 'completed');
    assert.notEqual(m1.sandboxId, m2.sandboxId, 'two Sessions share a Sandbox');
    assert.equal(m1.reply.hostname, m1.sandboxId);

    // While active, the same Session keeps its Sandbox.
    const m1b = await sbx.roundTrip(key, s1.id, { hello: 3 });
    assert.equal(m1b.sandboxId, m1.sandboxId);
    const ses = await sbx.getSession(key, s1.id);
    assert.equal(ses.state, 'active');
    assert.equal(ses.sandboxId, m1.sandboxId);

    // Keep-alive 1 s: terminated within ~1 s of the deadline, jail gone, Session idle.
    const done = Date.parse(m1b.completedAt);
    const sb = await sbx.until(async () => {
      const s = await sbx.getSandbox(key, m1.sandboxId);
      return s.state === 'terminated' ? s : null;
    }, 15000, 'keep-alive expiry');
    assert.equal(sb.terminationReason, 'keep-alive expired');
    // Not before the deadline; after it, as soon as a busy machine lets the worker.
    const lateness = Date.parse(sb.terminatedAt) - (done + 1000);
    assert.ok(lateness >= -50 && lateness < 10000, `expired ${lateness} ms after its deadline`);
    assert.ok(!existsSync(`${sbx.jailRoot('fork')}/${m1.sandboxId}`), 'jail dir left behind');
    const idle = await sbx.getSession(key, s1.id);
    assert.equal(idle.state, 'idle');
    assert.equal(idle.sandboxId, null);
    assert.equal(idle.activationCount, 1);

    // The next message gets a new Sandbox, from the warm pool.
    await sbx.until(async () => Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state = 'warm'`)) >= 1, 10000, 'warm pool');
    const m3 = await sbx.roundTrip(key, s1.id, { hello: 4 });
    assert.notEqual(m3.sandboxId, m1.sandboxId);
    const sb3 = await sbx.getSandbox(key, m3.sandboxId);
    assert.equal(sb3.cold, false);
    assert.equal((await sbx.getSession(key, s1.id)).activationCount, 2);

    // Every claimed Sandbox served exactly one Session.
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM (SELECT sandbox_id FROM messages GROUP BY sandbox_id HAVING COUNT(DISTINCT session_id) > 1) AS sub`), '0');

    const results = await sbx.stop();
    assert.deepEqual(results[0], { code: 0, signal: null }, sbx.workers[0].log.slice(-2000));
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state NOT IN ('terminated','failed')`), '0');
    assert.deepEqual(readdirSync(sbx.jailRoot('fork')), []);
    assert.equal(sbx.sql(`SELECT count(*) FROM workers WHERE stopped_at IS NOT NULL`), '1');
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('messages of one Session are delivered in order, one at a time', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { key } = await sbx.app('order', { keepAliveSeconds: 5 });
    const s = await sbx.session(key);
    const posted = [];
    for (let i = 0; i < 20; i++) posted.push(await sbx.post(key, s.id, { i, sleepMs: i % 3 }));
    const last = await sbx.wait(key, s.id, posted[19].id);
    assert.equal(last.state, 'completed');
    const rows = sbx.sql(`SELECT seq FROM messages WHERE session_id = '${s.id}' ORDER BY completed_at, seq`).split('\n').map(Number);
    assert.deepEqual(rows, [...Array(20).keys()].map((i) => i + 1));
    assert.equal(sbx.sql(`SELECT COUNT(DISTINCT sandbox_id) FROM messages WHERE session_id = '${s.id}'`), '1');
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('an agent error is retried with backoff, then failed with the reason', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { key } = await sbx.app('errs', { keepAliveSeconds: 5, maxAttempts: 3 });
    const s = await sbx.session(key);
    const m = await sbx.roundTrip(key, s.id, { fail: 'no such tool' });
    assert.equal(m.state, 'failed');
    assert.equal(m.attempts, 3);
    assert.equal(m.error, 'agent error: no such tool');
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM events WHERE object_id = '${m.id}' AND kind = 'message.retry'`), '2');
    // An agent error does not cost the Sandbox: all three attempts ran in the same one.
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE session_id = '${s.id}'`), '1');
    // The next message flows.
    const ok = await sbx.roundTrip(key, s.id, { after: true });
    assert.equal(ok.state, 'completed');
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('DELETE of a Sandbox terminates it promptly and the Session moves on', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { key } = await sbx.app('del', { keepAliveSeconds: 60 });
    const s = await sbx.session(key);
    const m = await sbx.roundTrip(key, s.id, { x: 1 });
    const r = await (await import('./harness.mjs')).req(sbx.gw, 'DELETE', `/v1/sandboxes/${m.sandboxId}`, { token: key });
    assert.equal(r.status, 202);
    const sb = await sbx.until(async () => {
      const x = await sbx.getSandbox(key, m.sandboxId);
      return x.state === 'terminated' ? x : null;
    }, 3000, 'stop request');
    assert.equal(sb.terminationReason, 'stop requested');
    const m2 = await sbx.roundTrip(key, s.id, { x: 2 });
    assert.notEqual(m2.sandboxId, m.sandboxId);
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('DELETE of a Session terminates its Sandbox', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { key } = await sbx.app('delses', { keepAliveSeconds: 60 });
    const s = await sbx.session(key);
    const m = await sbx.roundTrip(key, s.id, { x: 1 });
    const r = await (await import('./harness.mjs')).req(sbx.gw, 'DELETE', `/v1/sessions/${s.id}`, { token: key });
    assert.equal(r.status, 204);
    const sb = await sbx.until(async () => {
      const x = await sbx.getSandbox(key, m.sandboxId);
      return x.state === 'terminated' ? x : null;
    }, 3000, 'the deleted Session\'s Sandbox to end');
    assert.equal(sb.terminationReason, 'session deleted');
    assert.ok(!existsSync(`${sbx.jailRoot('fork')}/${m.sandboxId}`));
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('SIGTERM lets a delivery in flight finish, then exits 0 with nothing left', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { key } = await sbx.app('graceful', { keepAliveSeconds: 60 });
    const s = await sbx.session(key);
    const q = await sbx.session(key);
    const m = await sbx.post(key, s.id, { slow: true, sleepMs: 1500 });
    await sbx.until(() => sbx.sql(`SELECT state FROM messages WHERE id = '${m.id}'`) === 'delivering' &&
      sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE session_id = '${s.id}' AND state = 'running'`) === '1', 10000, 'delivery under way');
    const w = sbx.workers[0];
    w.kill('SIGTERM');
    // Accepted while stopping: stays queued for the next worker, never lost.
    const later = await sbx.post(key, q.id, { after: 'sigterm' });
    assert.deepEqual(await w.exited, { code: 0, signal: null });
    assert.equal(sbx.sql(`SELECT state FROM messages WHERE id = '${m.id}'`), 'completed');
    assert.equal(sbx.sql(`SELECT state FROM messages WHERE id = '${later.id}'`), 'queued');
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state NOT IN ('terminated','failed')`), '0');
    assert.deepEqual(readdirSync(sbx.jailRoot('fork')), []);
    sbx.startWorker();
    const done = await sbx.wait(key, q.id, later.id);
    assert.equal(done.state, 'completed');
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});
