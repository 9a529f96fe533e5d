// durability.test.mjs: a 202 means the message is on disk: kill -9 the gateway right after the
// answers, restart it on the same data dir, and every acknowledged message is there, queued.
// Enqueues wait for their commit without holding an HTTP thread, so many requests on one thread
// share a commit, and a stop in the middle of a burst still answers or closes every request.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { startGateway, removeDataDir, req, sql, tempDataDir, holdWriteLock } from './harness.mjs';

test('messages acknowledged with 202 survive kill -9 of the gateway', async () => {
  const dataDir = tempDataDir();
  const first = await startGateway({ dataDir });
  const { key, admin } = first;
  const s = (await req(first, 'POST', '/v1/sessions', { token: key, body: { name: 'durable' } })).json;
  const one = await req(first, 'POST', `/v1/sessions/${s.id}/messages`, { token: key, body: { body: { n: 0 } } });
  assert.equal(one.status, 202);
  // A burst of concurrent enqueues (they share group commits), then kill -9 at once.
  const burst = await Promise.all(Array.from({ length: 50 }, (_, i) =>
    req(first, 'POST', `/v1/sessions/${s.id}/messages`, { token: key, body: { body: { n: i + 1 } } })));
  assert.deepEqual(burst.map((r) => r.status), Array(50).fill(202));
  const { signal } = await first.kill9();
  assert.equal(signal, 'SIGKILL');

  const second = await startGateway({ dataDir });
  try {
    // Tokens are not printed again; the stored ones still work.
    assert.equal(second.admin, null);
    assert.equal(second.key, null);
    second.admin = admin;
    const got = await req(second, 'GET', `/v1/sessions/${s.id}/messages/${one.json.id}`, { token: key });
    assert.equal(got.status, 200);
    assert.equal(got.json.state, 'queued');
    assert.deepEqual(got.json.body, { n: 0 });
    const all = await req(second, 'GET', `/v1/sessions/${s.id}/messages?limit=200`, { token: key });
    assert.equal(all.json.items.length, 51);
    assert.deepEqual(all.json.items.map((m) => m.seq), Array.from({ length: 51 }, (_, i) => i + 1));
    const acked = new Set([one.json.id, ...burst.map((r) => r.json.id)]);
    assert.deepEqual(new Set(all.json.items.map((m) => m.id)), acked);
    for (const m of all.json.items) assert.equal(m.state, 'queued');
    // Sequence numbers continue after the restart.
    const next = await req(second, 'POST', `/v1/sessions/${s.id}/messages`, { token: key, body: { body: 'after' } });
    assert.equal(next.status, 202);
    assert.equal(next.json.seq, 52);
    assert.equal((await req(second, 'GET', '/v1/apps', { token: admin })).status, 200);
  } finally {
    const { code } = await second.stop();
    removeDataDir(dataDir);
    assert.equal(code, 0, second.stderr);
  }
});

test('enqueues waiting for their commit hold no HTTP thread and share it', async () => {
  const gw = await startGateway({ extraArgs: ['--http-threads', '1'] });
  const { key } = gw;
  try {
    const s = (await req(gw, 'POST', '/v1/sessions', { token: key, body: { name: 'one-thread' } })).json;
    const lock = await holdWriteLock(gw);
    const n = 40;
    const posts = Promise.all(Array.from({ length: n }, (_, i) =>
      req(gw, 'POST', `/v1/sessions/${s.id}/messages`, { token: key, body: { body: { i } } })));
    // All 40 wait for the lock; the only HTTP thread still answers other requests.
    await new Promise((r) => setTimeout(r, 300));
    // (With enqueues that block their thread, these reads would wait for the lock, which is held
    // until the release below: give up at 20 s.)
    const reads = Promise.all([req(gw, 'GET', '/healthz'),
      req(gw, 'GET', `/v1/sessions/${s.id}/messages`, { token: key })]);
    const timeout = new Promise((r) => setTimeout(() => r(null), 20000));
    const answered = await Promise.race([reads, timeout]);
    if (!answered) await lock.release();
    assert.ok(answered, 'reads waited behind enqueues that wait for the write lock');
    const [health, list] = answered;
    assert.equal(health.status, 200);
    assert.equal(list.status, 200);
    assert.equal(list.json.items.length, 0, 'nothing is visible before the commit');
    await lock.release();
    const res = await posts;
    assert.deepEqual(res.map((r) => r.status), Array(n).fill(202));
    assert.deepEqual(res.map((r) => r.json.seq).sort((a, b) => a - b),
      Array.from({ length: n }, (_, i) => i + 1));
    for (const r of res)
      assert.equal(r.headers.get('location'), `/v1/sessions/${s.id}/messages/${r.json.id}`);
    // On disk as soon as the 202s are out, each with its audit event.
    const { signal } = await gw.kill9();
    assert.equal(signal, 'SIGKILL');
    assert.equal(sql(gw, `SELECT count(*) FROM messages WHERE session_id = '${s.id}'`), String(n));
    assert.equal(sql(gw, `SELECT count(*) FROM events WHERE kind = 'message.queued'`), String(n));
  } finally {
    await gw.kill9();
    removeDataDir(gw.dataDir);
  }
});

test('a stop in the middle of an enqueue burst exits cleanly with every 202 on disk', async () => {
  const gw = await startGateway({ extraArgs: ['--http-threads', '2'] });
  const { key } = gw;
  try {
    const s = (await req(gw, 'POST', '/v1/sessions', { token: key, body: { name: 'stop' } })).json;
    const posts = Array.from({ length: 200 }, (_, i) =>
      req(gw, 'POST', `/v1/sessions/${s.id}/messages`, { token: key, body: { body: { i } } })
        .catch(() => null));
    await new Promise((r) => setTimeout(r, 20));
    const { code } = await gw.stop();
    assert.equal(code, 0, gw.stderr);
    const res = await Promise.all(posts);
    const acked = res.filter((r) => r && r.status === 202).map((r) => r.json.id);
    for (const r of res) if (r) assert.ok([202, 503].includes(r.status), `${r.status} ${r.text}`);
    const stored = new Set(sql(gw, `SELECT id FROM messages WHERE session_id = '${s.id}'`)
      .split('\n').filter(Boolean));
    for (const id of acked) assert.ok(stored.has(id), `acknowledged ${id} is not on disk`);
  } finally {
    await gw.kill9();
    removeDataDir(gw.dataDir);
  }
});
