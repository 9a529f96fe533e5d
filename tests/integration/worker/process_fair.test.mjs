// process_fair.test.mjs: Apps share a worker's Sandboxes (docs/worker.md, "Sharing Sandboxes
// between Apps"), on the real process driver with max_sandboxes 4. A hostile App key that takes
// every slot with Sessions kept alive for a day does not keep another App from being served: an
// idle Sandbox of the hostile App is evicted for it, never one with a message in flight, and only
// down to the fair share. An App at its live-Sandbox quota waits (queued, no attempt counted)
// while another App proceeds. One gateway and worker for the whole file.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startSbx, req } from './harness.mjs';

let sbx;
before(async () => {
  sbx = await startSbx({ workers: 1, env: { SBX_MAX_SANDBOXES: '4', SBX_MESSAGE_TIMEOUT: '30' } });
});
after(async () => {
  await sbx.stop();
  sbx.cleanup();
});

const count = (q) => Number(sbx.sql(q));

test('a hostile App holding every slot: another App is served within its fair share', async () => {
  const hostile = await sbx.app('hostile', { keepAliveSeconds: 86400 });
  const other = await sbx.app('other', { keepAliveSeconds: 86400 });
  // The hostile App fills the worker's 4 slots with messages in flight, and queues more.
  const hs = [];
  for (let i = 0; i < 8; i++) hs.push(await sbx.session(hostile.key));
  const hm = [];
  for (const [i, s] of hs.entries()) hm.push([s.id, (await sbx.post(hostile.key, s.id, { i, sleepMs: i < 4 ? 1500 : 0 })).id]);
  await sbx.until(() => count(`SELECT COUNT(*) FROM messages WHERE app_id = '${hostile.app.id}' AND state = 'delivering'`) === 4, 30000, 'the hostile App in every slot');

  // While all four are busy the other App's messages wait; once they are idle, two of them are
  // evicted (4 slots over 2 Apps), the longest idle first, and the other App's two Sessions run.
  const os = [await sbx.session(other.key), await sbx.session(other.key)];
  const om = [];
  for (const s of os) om.push([s.id, (await sbx.post(other.key, s.id, { hello: s.id })).id]);
  for (const [sid, mid] of om) {
    const m = await sbx.wait(other.key, sid, mid, 60);
    assert.equal(m.state, 'completed', `${mid}: ${m.error}`);
    assert.equal(m.attempts, 1);
  }
  // The hostile App's first messages all completed: none lost its Sandbox while in flight.
  for (const [sid, mid] of hm.slice(0, 4)) {
    const m = await sbx.wait(hostile.key, sid, mid, 60);
    assert.equal(m.state, 'completed', `${mid}: ${m.error}`);
    assert.equal(m.attempts, 1);
  }
  await sbx.until(() => count(`SELECT COUNT(*) FROM sandboxes WHERE app_id = '${hostile.app.id}' AND state = 'terminated'`) === 2, 30000, 'two hostile Sandboxes to end');
  const ended = sbx.sql(`SELECT termination_reason FROM sandboxes WHERE app_id = '${hostile.app.id}' AND state = 'terminated'`).split('\n');
  for (const r of ended) assert.match(r, new RegExp(`^evicted: ${other.app.id} was waiting; this App held 4 of 4 Sandboxes|^evicted: ${other.app.id} was waiting; this App held 3 of 4 Sandboxes`));
  assert.equal(count(`SELECT COUNT(*) FROM events WHERE kind = 'sandbox.terminated' AND app_id = '${hostile.app.id}' AND data LIKE '%evicted%'`), 2);
  assert.equal(count(`SELECT COUNT(*) FROM messages WHERE error LIKE '%evicted%'`), 0);

  // A third Session of the other App is beyond its share (2 of 4): it waits rather than evict a
  // third hostile Sandbox. Its message stays queued, unattempted; the hostile App keeps its 2.
  const third = await sbx.session(other.key);
  const tm = await sbx.post(other.key, third.id, { third: true });
  // Its Sessions that hold a Sandbox are still served (the claims on the way passed over it).
  const again = await sbx.roundTrip(other.key, os[0].id, { again: true }, 30);
  assert.equal(again.state, 'completed');
  assert.equal(sbx.sql(`SELECT state || ' ' || attempts FROM messages WHERE id = '${tm.id}'`), 'queued 0');
  assert.equal(count(`SELECT COUNT(*) FROM sandboxes WHERE app_id = '${hostile.app.id}' AND state = 'terminated'`), 2);
  // Once the other App lets one of its Sandboxes go, the third Session is served.
  const sb = (await sbx.getSession(other.key, os[1].id)).sandboxId;
  assert.ok(sb, 'the second Session holds a Sandbox');
  const stop = await req(sbx.gw, 'DELETE', `/v1/sandboxes/${sb}`, { token: other.key });
  assert.equal(stop.status, 202, stop.text);
  const m3 = await sbx.wait(other.key, third.id, tm.id, 60);
  assert.equal(m3.state, 'completed', `${tm.id}: ${m3.error}`);
  assert.equal(m3.attempts, 1);

  // Clean slate for the next test: the hostile App's Sandboxes end.
  for (const s of hs) await req(sbx.gw, 'DELETE', `/v1/sessions/${s.id}`, { token: hostile.key });
  for (const s of [...os, third]) await req(sbx.gw, 'DELETE', `/v1/sessions/${s.id}`, { token: other.key });
  await sbx.until(() => count(`SELECT COUNT(*) FROM sessions WHERE state IN ('activating', 'active')`) === 0, 30000, 'every Sandbox to let go');
});

test('an App at its live-Sandbox quota waits while another App proceeds', async () => {
  const capped = await sbx.app('capped', { keepAliveSeconds: 86400 });
  const free = await sbx.app('free', { keepAliveSeconds: 60 });
  sbx.sql(`UPDATE apps SET quota_live_sandboxes = 1 WHERE id = '${capped.app.id}'`);
  const a = await sbx.session(capped.key);
  const b = await sbx.session(capped.key);
  const first = await sbx.roundTrip(capped.key, a.id, { first: true }, 30);
  assert.equal(first.state, 'completed');
  const waiting = await sbx.post(capped.key, b.id, { second: true });
  // Another App is served meanwhile, from the slots the capped App may not take.
  const f = await sbx.session(free.key);
  const served = await sbx.roundTrip(free.key, f.id, { free: true }, 30);
  assert.equal(served.state, 'completed');
  // The capped App's first Session, which holds its one Sandbox, is still served.
  const more = await sbx.roundTrip(capped.key, a.id, { more: true }, 30);
  assert.equal(more.state, 'completed');
  assert.equal(sbx.sql(`SELECT state || ' ' || attempts FROM messages WHERE id = '${waiting.id}'`), 'queued 0');
  // Its Sandbox goes: the waiting message gets one, on its first attempt.
  const r = await req(sbx.gw, 'DELETE', `/v1/sessions/${a.id}`, { token: capped.key });
  assert.ok(r.status < 300, `delete: ${r.status} ${r.text}`);
  const m = await sbx.wait(capped.key, b.id, waiting.id, 60);
  assert.equal(m.state, 'completed', `${waiting.id}: ${m.error}`);
  assert.equal(m.attempts, 1);
});
