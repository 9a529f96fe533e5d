// longpoll.test.mjs: GET .../messages/{id}?wait=N answers as soon as the message ends, answers the
// current state when the wait runs out, is capped by max_wait, and holds no thread while waiting.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { startGateway, removeDataDir, req, sql } from './harness.mjs';

let gw;
before(async () => { gw = await startGateway({ extraArgs: ['--http-threads', '1'] }); });
after(async () => {
  const { code } = await gw.stop();
  removeDataDir(gw.dataDir);
  assert.equal(code, 0, gw.stderr);
});

async function newMessage(body = { q: 1 }) {
  const s = (await req(gw, 'POST', '/v1/sessions', { token: gw.key })).json;
  const m = (await req(gw, 'POST', `/v1/sessions/${s.id}/messages`, { token: gw.key, body: { body } })).json;
  return { sid: s.id, mid: m.id, path: `/v1/sessions/${s.id}/messages/${m.id}` };
}

// Completes a message the way a worker does, but straight in the database, without a wake-up:
// the gateway must notice through its fallback recheck. SQL both SQLite and PostgreSQL run.
function completeInDb(mid, reply) {
  const now = Date.now();
  sql(gw, `UPDATE messages SET state='completed', reply='${JSON.stringify(reply)}', attempts=1,
           completed_at=${now}, updated_at=${now} WHERE id='${mid}'`);
}

test('a waiting GET returns early once the message is completed', async () => {
  const { mid, path } = await newMessage();
  const started = performance.now();
  const pending = req(gw, 'GET', `${path}?wait=20`, { token: gw.key });
  await new Promise((r) => setTimeout(r, 300));
  completeInDb(mid, { echo: 'done' });
  const res = await pending;
  const elapsed = performance.now() - started;
  assert.equal(res.status, 200);
  assert.equal(res.json.state, 'completed');
  assert.deepEqual(res.json.reply, { echo: 'done' });
  assert.match(res.json.completedAt, /Z$/);
  assert.ok(elapsed >= 300, `answered before completion (${elapsed} ms)`);
  assert.ok(elapsed < 10000, `did not return early (${elapsed} ms of a 20 s wait)`);
});

// The fallback recheck is put off for ten minutes (the gateway's SBX_TEST_RECHECK_MS hook) in the
// wake-up tests below: a wait of 60 s that answers within 30 s was woken, whatever the load.
const NO_RECHECK = { SBX_TEST_RECHECK_MS: '600000' };

test('a worker\'s "msg <id>" wake-up wakes the wait at once (not the fallback recheck)', { skip: !process.env.SBX_NOTIFY_BIN }, async () => {
  // The wake-up goes the way the store says: a datagram on SQLite, a NOTIFY on PostgreSQL.
  const woken = await startGateway({ env: NO_RECHECK });
  try {
    for (let round = 0; round < 3; round++) {
      const s = (await req(woken, 'POST', '/v1/sessions', { token: woken.key })).json;
      const m = (await req(woken, 'POST', `/v1/sessions/${s.id}/messages`, { token: woken.key, body: { body: { round } } })).json;
      const pending = req(woken, 'GET', `/v1/sessions/${s.id}/messages/${m.id}?wait=60`, { token: woken.key });
      await new Promise((r) => setTimeout(r, 150));
      const now = Date.now();
      sql(woken, `UPDATE messages SET state='completed', reply='{"round":${round}}', attempts=1,
                  completed_at=${now}, updated_at=${now} WHERE id='${m.id}'`);
      const t0 = performance.now();
      execFileSync(process.env.SBX_NOTIFY_BIN, [join(woken.dataDir, 'run'), 'gateway', `msg ${m.id}`, woken.store]);
      const res = await pending;
      const elapsed = performance.now() - t0;
      assert.equal(res.json.state, 'completed');
      assert.deepEqual(res.json.reply, { round });
      assert.ok(elapsed < 30000, `round ${round}: answered ${elapsed} ms after the wake-up: it was lost`);
    }
  } finally {
    const { code } = await woken.stop();
    removeDataDir(woken.dataDir);
    assert.equal(code, 0, woken.stderr);
  }
});

test('a wake-up that comes between the read of the store and the park still wakes the wait', { skip: !process.env.SBX_NOTIFY_BIN }, async () => {
  // The gateway's test hook holds each park 400 ms after its read of the store; the message
  // completes, with its wake-up, 150 ms into that. Without the wake-ups a park checks, the
  // wake-up would find no waiter and the answer would wait for the end of the 60 s wait (the
  // fallback recheck is put off for ten minutes).
  const slow = await startGateway({ extraArgs: ['--http-threads', '2'], env: { SBX_TEST_PARK_DELAY_MS: '400', ...NO_RECHECK } });
  try {
    for (let round = 0; round < 3; round++) {
      const s = (await req(slow, 'POST', '/v1/sessions', { token: slow.key })).json;
      const m = (await req(slow, 'POST', `/v1/sessions/${s.id}/messages`, { token: slow.key, body: { body: { round } } })).json;
      const t0 = performance.now();
      const pending = req(slow, 'GET', `/v1/sessions/${s.id}/messages/${m.id}?wait=60`, { token: slow.key });
      await new Promise((r) => setTimeout(r, 150));
      const now = Date.now();
      sql(slow, `UPDATE messages SET state='completed', reply='{"round":${round}}', attempts=1,
                 completed_at=${now}, updated_at=${now} WHERE id='${m.id}'`);
      execFileSync(process.env.SBX_NOTIFY_BIN, [join(slow.dataDir, 'run'), 'gateway', `msg ${m.id}`, slow.store]);
      const res = await pending;
      const elapsed = performance.now() - t0;
      assert.equal(res.json.state, 'completed');
      assert.deepEqual(res.json.reply, { round });
      assert.ok(elapsed >= 400, `round ${round}: answered after ${elapsed} ms, before the park`);
      assert.ok(elapsed < 30000, `round ${round}: answered ${elapsed} ms after the GET: the wake-up was lost`);
    }
  } finally {
    const { code } = await slow.stop();
    removeDataDir(slow.dataDir);
    assert.equal(code, 0, slow.stderr);
  }
});

test('failed messages end the wait too', async () => {
  const { mid, path } = await newMessage();
  const pending = req(gw, 'GET', `${path}?wait=20`, { token: gw.key });
  await new Promise((r) => setTimeout(r, 200));
  sql(gw, `UPDATE messages SET state='failed', error='agent crashed', attempts=3 WHERE id='${mid}'`);
  const started = performance.now();
  const res = await pending;
  assert.equal(res.json.state, 'failed');
  assert.equal(res.json.error, 'agent crashed');
  assert.ok(performance.now() - started < 10000);
});

test('when the wait runs out it answers 200 with the current state', async () => {
  const { path } = await newMessage();
  const started = performance.now();
  const res = await req(gw, 'GET', `${path}?wait=1`, { token: gw.key });
  const elapsed = performance.now() - started;
  assert.equal(res.status, 200);
  assert.equal(res.json.state, 'queued');
  assert.ok(elapsed >= 900, `returned after ${elapsed} ms, before the wait ran out`);
  assert.ok(elapsed < 15000, `returned after ${elapsed} ms`);
  // wait=0 and no wait answer at once (not after max_wait, 60 s).
  const t0 = performance.now();
  assert.equal((await req(gw, 'GET', `${path}?wait=0`, { token: gw.key })).json.state, 'queued');
  assert.ok(performance.now() - t0 < 15000);
});

test('an already finished message answers at once despite wait', async () => {
  const { mid, path } = await newMessage();
  completeInDb(mid, 7);
  const t0 = performance.now();
  const res = await req(gw, 'GET', `${path}?wait=60`, { token: gw.key });
  assert.equal(res.json.reply, 7);
  assert.ok(performance.now() - t0 < 30000, 'waited for the end of the wait');
});

test('parked long polls hold no thread: one HTTP thread still serves others', async () => {
  const msgs = await Promise.all(Array.from({ length: 20 }, () => newMessage()));
  const waits = msgs.map((m) => req(gw, 'GET', `${m.path}?wait=6`, { token: gw.key }));
  let answered = 0;
  for (const w of waits) w.then(() => answered++, () => answered++);
  await new Promise((r) => setTimeout(r, 300));
  const h = await req(gw, 'GET', '/healthz');
  assert.equal(h.status, 200);
  assert.equal(answered, 0, 'healthz waited for the parked polls to end');
  // Completing some of them ends exactly those waits early.
  for (const m of msgs.slice(0, 5)) completeInDb(m.mid, 'ok');
  const results = await Promise.all(waits);
  assert.deepEqual(results.map((r) => r.status), Array(20).fill(200));
  assert.deepEqual(results.map((r) => r.json.state), [...Array(5).fill('completed'), ...Array(15).fill('queued')]);
});

test('wait is capped by max_wait', async () => {
  const capped = await startGateway({ extraArgs: ['--max-wait', '1'] });
  try {
    const s = (await req(capped, 'POST', '/v1/sessions', { token: capped.key })).json;
    const m = (await req(capped, 'POST', `/v1/sessions/${s.id}/messages`, { token: capped.key, body: { body: 1 } })).json;
    const t0 = performance.now();
    const res = await req(capped, 'GET', `/v1/sessions/${s.id}/messages/${m.id}?wait=3600`, { token: capped.key });
    assert.equal(res.status, 200);
    assert.equal(res.json.state, 'queued');
    assert.ok(performance.now() - t0 < 30000, `waited ${Math.round(performance.now() - t0)} ms with max_wait 1`);
  } finally {
    const { code } = await capped.stop();
    removeDataDir(capped.dataDir);
    assert.equal(code, 0, capped.stderr);
  }
});

test('SIGTERM answers parked long polls and stops cleanly', async () => {
  const g = await startGateway();
  const s = (await req(g, 'POST', '/v1/sessions', { token: g.key })).json;
  const m = (await req(g, 'POST', `/v1/sessions/${s.id}/messages`, { token: g.key, body: { body: 1 } })).json;
  const pending = req(g, 'GET', `/v1/sessions/${s.id}/messages/${m.id}?wait=30`, { token: g.key });
  await new Promise((r) => setTimeout(r, 300));
  const t0 = performance.now();
  const stopped = g.stop();
  const res = await pending.catch((e) => ({ status: 0, error: e }));
  const { code } = await stopped;
  removeDataDir(g.dataDir);
  assert.equal(code, 0, g.stderr);
  assert.ok(performance.now() - t0 < 20000, 'the parked poll waited for its 30 s');
  if (res.status !== 0) assert.equal(res.json.state, 'queued');
});
