// webhooks.test.mjs: webhooks end to end on the real gateway and worker (sbx-worker-fork: the
// worker's own code; webhooks do not depend on the driver), delivering to a receiver this test
// runs on loopback (webhook_allow_private=1 lets it). The receiver checks every request's
// Standard Webhooks signature. It answers 500 first: the first delivery is retried with growing
// gaps and the endpoint is marked failing; then 200: everything arrives, in event order. Then it
// answers slowly while the worker is killed with SIGKILL mid-delivery and restarted: every event
// arrives, duplicates only with the same webhook-id. A second endpoint that never answers is
// bounded by the timeout while the first keeps receiving. URLs that point inside are refused with
// 422 where webhook_allow_private is off.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { createHmac } from 'node:crypto';
import { startSbx, req, FAST } from '../worker/harness.mjs';
import { assertProblem, startGateway } from '../gateway/harness.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A receiver on 127.0.0.1. mode: 'ok' (200 at once), 'fail' (500), 'slow' (200 after 700 ms),
// 'hang' (never answers). Every request must carry a valid signature for `secret`.
async function receiver() {
  const r = { mode: 'ok', secret: null, got: [], badSignatures: [], inFlight: 0 };
  r.server = http.createServer((rq, rs) => {
    let body = '';
    rq.on('data', (d) => { body += d; });
    rq.on('end', () => {
      const id = rq.headers['webhook-id'];
      const ts = rq.headers['webhook-timestamp'];
      const sigs = String(rq.headers['webhook-signature'] ?? '').split(' ');
      const key = Buffer.from(String(r.secret).slice('whsec_'.length), 'base64');
      const want = `v1,${createHmac('sha256', key).update(`${id}.${ts}.${body}`).digest('base64')}`;
      const fresh = Math.abs(Date.now() / 1000 - Number(ts)) < 300;
      if (!sigs.includes(want) || !fresh) r.badSignatures.push({ id, ts, sigs, body });
      let json = null;
      try { json = JSON.parse(body); } catch { json = null; }
      r.got.push({ id, at: Date.now(), mode: r.mode, json, contentType: rq.headers['content-type'] });
      const mode = r.mode;
      if (mode === 'hang') return; // the connection stays open until the sender gives up
      r.inFlight++;
      const answer = () => { r.inFlight--; rs.writeHead(mode === 'fail' ? 500 : 200); rs.end(mode === 'fail' ? 'no' : 'ok'); };
      if (mode === 'slow') setTimeout(answer, 700); else answer();
    });
  });
  await new Promise((ok) => r.server.listen(0, '127.0.0.1', ok));
  r.url = `http://127.0.0.1:${r.server.address().port}/hook`;
  r.close = () => { r.server.closeAllConnections(); r.server.close(); };
  return r;
}

test('webhook URLs that point inside are refused (422) unless webhook_allow_private', async () => {
  const sbx = await startSbx({ workers: 0 });
  try {
    const { app } = await sbx.app('guarded', {});
    const admin = sbx.gw.admin;
    const post = (body) => req(sbx.gw, 'POST', `/v1/apps/${app.id}/webhooks`, { token: admin, body });
    for (const url of ['ftp://203.0.113.5/x', 'file:///etc/passwd', 'http://127.0.0.1:9/hook', 'http://localhost/hook',
      'http://[::1]/hook', 'http://10.1.2.3/hook', 'http://172.16.0.1/', 'http://192.168.1.1/', 'http://169.254.169.254/latest/meta-data',
      'http://0.0.0.0/', 'http://[fd00::1]/', 'http://[::ffff:127.0.0.1]/', 'http://user@203.0.113.5/', 'http://203.0.113.5:0/', 'http://203.0.113.5:99999/'])
      assertProblem(assert, await post({ url, eventTypes: ['*'] }), 422, 'invalid-value', 'url');
    assertProblem(assert, await post({ url: 'http://203.0.113.5/hook', eventTypes: ['Message.Completed'] }), 422, 'invalid-value', 'eventTypes');
    assertProblem(assert, await post({ url: 'http://203.0.113.5/hook', eventTypes: [] }), 422, 'invalid-value', 'eventTypes');
    assertProblem(assert, await post({ eventTypes: ['*'] }), 400, 'invalid-field', 'url');
    assertProblem(assert, await post({ url: 'http://203.0.113.5/hook', eventTypes: ['*'], extra: 1 }), 400, 'unknown-field');
    assertProblem(assert, await req(sbx.gw, 'POST', '/v1/apps/app_nope/webhooks', { token: admin, body: { url: 'http://203.0.113.5/', eventTypes: ['*'] } }), 404, 'not-found');
    // A public address is accepted (no worker runs here: nothing is sent to it).
    const ok = await post({ url: 'http://203.0.113.5/hook', eventTypes: ['message.completed', 'sandbox.*'] });
    assert.equal(ok.status, 201, ok.text);
    assert.match(ok.json.secret, /^whsec_[A-Za-z0-9+/]{32}$/);
    const got = await req(sbx.gw, 'GET', `/v1/apps/${app.id}/webhooks/${ok.json.id}`, { token: admin });
    assert.equal(got.status, 200);
    assert.equal(got.json.secret, undefined, 'the secret is shown only once');
    assert.deepEqual(got.json.eventTypes, ['message.completed', 'sandbox.*']);
    assert.equal((await req(sbx.gw, 'DELETE', `/v1/apps/${app.id}/webhooks/${ok.json.id}`, { token: admin })).status, 204);
    assertProblem(assert, await req(sbx.gw, 'GET', `/v1/apps/${app.id}/webhooks/${ok.json.id}`, { token: admin }), 404, 'not-found');
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});

test('signed, retried with backoff, marked failing, in order, at least once across kill -9, bounded when hanging', async (t) => {
  const rx = await receiver();
  const hang = await receiver();
  hang.mode = 'hang';
  const env = {
    SBX_WEBHOOK_ALLOW_PRIVATE: '1', SBX_WEBHOOK_TIMEOUT_MS: '1500', SBX_WEBHOOK_RETRY_BASE_MS: '200',
    SBX_WEBHOOK_RETRY_MAX_MS: '3000', SBX_WEBHOOK_FAILING_AFTER: '3', SBX_WEBHOOK_MAX_ATTEMPTS: '50', SBX_WEBHOOK_THREADS: '2',
  };
  const sbx = await startSbx({ workers: 1, env });
  let gw2 = null; // the gateway started again after the kill (sbx.stop() stops only the first)
  try {
    const { app, key } = await sbx.app('hooked', { keepAliveSeconds: 1 });
    const admin = sbx.gw.admin;
    const hook = await req(sbx.gw, 'POST', `/v1/apps/${app.id}/webhooks`, { token: admin, body: { url: rx.url, eventTypes: ['message.*', 'session.*'] } });
    assert.equal(hook.status, 201, hook.text);
    rx.secret = hook.json.secret;
    const hookPath = `/v1/apps/${app.id}/webhooks/${hook.json.id}`;
    const wanted = (kind) => kind.startsWith('message.') || kind.startsWith('session.');
    const expected = async () => (await req(sbx.gw, 'GET', '/v1/events?limit=200', { token: key })).json.items.filter((e) => wanted(e.kind) && e.id > 0);

    // 1. The receiver fails: the first delivery is retried with growing gaps; failing after 3.
    rx.mode = 'fail';
    const ses = await sbx.session(key);
    await sbx.until(() => rx.got.length >= 5, 15000, 'five attempts');
    const first = rx.got[0].id;
    const tries = rx.got.filter((g) => g.id === first);
    assert.ok(tries.length >= 5, 'head of line: the same delivery is retried before any later one');
    assert.ok(rx.got.every((g) => g.id === first), 'a later event was sent before the first was delivered');
    const gaps = tries.slice(1).map((g, i) => g.at - tries[i].at);
    t.diagnostic(`retry gaps while answering 500: ${gaps.join(', ')} ms`);
    // Attempt n is retried after a delay in [d/2, d], d = 200 ms * 2^(n-1) up to 3000 ms: each
    // gap is at least the floor of its own backoff. A busy machine only lengthens a gap, so the
    // gaps need not grow one by one; a delay that did not double misses the fourth's 800 ms.
    const floors = gaps.map((_, i) => Math.min(200 * 2 ** i, 3000) / 2);
    for (let i = 0; i < gaps.length; i++)
      assert.ok(gaps[i] >= floors[i] * 0.95, `gap ${i + 1} below its backoff's floor of ${floors[i]} ms: ${gaps}`);
    const failing = await req(sbx.gw, 'GET', hookPath, { token: admin });
    assert.equal(failing.json.state, 'failing');
    assert.ok(failing.json.consecutiveFailures >= 3);
    const d1 = await req(sbx.gw, 'GET', `${hookPath}/deliveries`, { token: admin });
    assert.equal(d1.status, 200, d1.text);
    assert.equal(d1.json.items[0].id, first);
    assert.equal(d1.json.items[0].state, 'pending');
    assert.ok(d1.json.items[0].attemptLog.length >= 3);
    assert.ok(d1.json.items[0].attemptLog.every((a) => a.status === 500 && a.error === 'HTTP 500'));

    // 2. It recovers: everything arrives, in event order, the endpoint is active again.
    rx.mode = 'ok';
    await sbx.roundTrip(key, ses.id, { n: 1 });
    await sbx.roundTrip(key, ses.id, { n: 2 });
    let want = await expected();
    await sbx.until(() => want.every((e) => rx.got.some((g) => g.mode === 'ok' && g.json?.data?.id === e.id)), 15000, 'every event delivered');
    const delivered = rx.got.filter((g) => g.mode === 'ok');
    const order = delivered.map((g) => g.json.data.id);
    assert.deepEqual(order, [...order].sort((a, b) => a - b), 'deliveries out of event order');
    for (const g of delivered) {
      assert.equal(g.contentType, 'application/json');
      assert.equal(g.json.type, g.json.data.kind);
      assert.equal(typeof g.json.timestamp, 'string');
      assert.equal(g.json.data.appId, app.id);
    }
    assert.equal((await req(sbx.gw, 'GET', hookPath, { token: admin })).json.state, 'active');

    // 3. A second endpoint that never answers: each attempt ends at the timeout, and the first
    // endpoint keeps receiving meanwhile.
    const slow = await req(sbx.gw, 'POST', `/v1/apps/${app.id}/webhooks`, { token: admin, body: { url: hang.url, eventTypes: ['message.completed'] } });
    hang.secret = slow.json.secret;
    const before = rx.got.length;
    const t0 = performance.now();
    await sbx.roundTrip(key, ses.id, { n: 3 });
    await sbx.until(() => rx.got.slice(before).some((g) => g.json?.data?.kind === 'message.completed'), 5000, 'the healthy endpoint\'s delivery');
    assert.ok(performance.now() - t0 < 4000);
    const hung = await sbx.until(async () => {
      const r = await req(sbx.gw, 'GET', `/v1/apps/${app.id}/webhooks/${slow.json.id}/deliveries`, { token: admin });
      return r.json.items[0]?.attemptLog.length >= 1 ? r.json.items[0] : null;
    }, 10000, 'a timed-out attempt');
    assert.equal(hung.attemptLog[0].status, null);
    assert.match(hung.attemptLog[0].error, /timed? ?out/i);
    // Ended by the 1.5 s timeout (not sooner; later only by as much as a busy machine adds).
    assert.ok(hung.attemptLog[0].durationMs >= 1400 && hung.attemptLog[0].durationMs < 10000, `attempt took ${hung.attemptLog[0].durationMs} ms`);
    assert.equal((await req(sbx.gw, 'DELETE', `/v1/apps/${app.id}/webhooks/${slow.json.id}`, { token: admin })).status, 204);

    // 4. kill -9 of sbx (worker and gateway) mid-delivery, then a restart: every event arrives;
    // a duplicate only with the same webhook-id.
    rx.mode = 'slow';
    const s2 = await sbx.session(key);
    for (let i = 0; i < 3; i++) await sbx.post(key, s2.id, { k: i });
    await sbx.until(() => rx.inFlight > 0, 10000, 'a delivery in flight');
    sbx.workers[0].kill('SIGKILL');
    await Promise.all([sbx.workers[0].exited, sbx.gw.kill9()]);
    rx.mode = 'ok';
    gw2 = await startGateway({ dataDir: sbx.dataDir, env: { ...FAST, ...env, SBX_ADMIN_TOKEN: admin } });
    gw2.admin = admin;
    sbx.gw = gw2;
    sbx.startWorker();
    await sbx.until(async () => {
      const q = Number(sbx.sql(`SELECT COUNT(*) FROM messages WHERE state NOT IN ('completed', 'failed')`));
      return q === 0;
    }, 30000, 'the messages to finish');
    want = await expected();
    await sbx.until(() => want.every((e) => rx.got.some((g) => g.json?.data?.id === e.id && g.mode !== 'fail')), 30000, 'every event delivered after the restart');
    const byEvent = new Map();
    for (const g of rx.got) {
      if (!g.json) continue;
      const ids = byEvent.get(g.json.data.id) ?? new Set();
      ids.add(g.id);
      byEvent.set(g.json.data.id, ids);
    }
    for (const [eventId, ids] of byEvent) assert.equal(ids.size, 1, `event ${eventId} came with several webhook-ids: ${[...ids]}`);
    const dups = rx.got.filter((g) => g.mode !== 'fail').length - byEvent.size;
    t.diagnostic(`${byEvent.size} events delivered, ${dups} duplicate requests (same webhook-id) around the kill -9`);
    const wantIds = want.map((e) => e.id).sort((a, b) => a - b);
    assert.deepEqual([...byEvent.keys()].filter((id) => wantIds.includes(id)).sort((a, b) => a - b), wantIds);
    assert.deepEqual(rx.badSignatures, [], 'a request without a valid signature');
    assert.deepEqual(hang.badSignatures, [], 'a request without a valid signature (hanging endpoint)');
    // Every delivery ends delivered (events still come: the Sessions' keep-alives expire).
    await sbx.until(async () => {
      const all = await req(sbx.gw, 'GET', `${hookPath}/deliveries?limit=200`, { token: admin });
      return all.json.items.length >= want.length && all.json.items.every((d) => d.state === 'delivered');
    }, 10000, 'every delivery delivered');
  } finally {
    await sbx.stop();
    if (gw2) assert.deepEqual(await gw2.stop(), { code: 0, signal: null });
    sbx.cleanup();
    rx.close();
    hang.close();
  }
});

// Woken, not polled: with the fallback poll at 30 s, events the gateway commits (session.created,
// message.queued) and events the worker commits (message.delivering, message.completed) each
// reach the receiver well within a second of being committed.
test('deliveries are woken by the store\'s wake-ups, the poll is only a fallback', async (t) => {
  const rx = await receiver();
  const env = { SBX_WEBHOOK_ALLOW_PRIVATE: '1', SBX_WEBHOOK_POLL_MS: '30000', SBX_WEBHOOK_THREADS: '2' };
  const sbx = await startSbx({ workers: 1, env });
  try {
    const { app, key } = await sbx.app('woken', { keepAliveSeconds: 30 });
    await sbx.until(() => /worker \S+ started on host/.test(sbx.workers[0].log), 20000, 'the worker');
    // The sender's first round is over (it now sleeps for the 30 s poll), and the gateway's list
    // of worker sockets, refreshed at most once a second (notify.c), has this worker's.
    await sleep(1200);
    const hook = await req(sbx.gw, 'POST', `/v1/apps/${app.id}/webhooks`, { token: sbx.gw.admin, body: { url: rx.url, eventTypes: ['message.*', 'session.created'] } });
    assert.equal(hook.status, 201, hook.text);
    rx.secret = hook.json.secret;
    const ses = await sbx.session(key);
    await sbx.until(() => rx.got.some((g) => g.json?.type === 'session.created'), 5000, 'session.created (a gateway commit)');
    for (let n = 0; n < 3; n++) {
      const m = await sbx.roundTrip(key, ses.id, { n });
      assert.equal(m.state, 'completed', m.error);
    }
    await sbx.until(() => rx.got.filter((g) => g.json?.type === 'message.completed').length === 3, 5000, 'three message.completed (worker commits)');
    const latencies = rx.got.map((g) => ({ kind: g.json.type, ms: g.at - Date.parse(g.json.data.at) }));
    t.diagnostic(`commit-to-receipt: ${latencies.map((l) => `${l.kind} ${l.ms} ms`).join(', ')}`);
    for (const kind of ['session.created', 'message.queued', 'message.delivering', 'message.completed'])
      assert.ok(latencies.some((l) => l.kind === kind), `no ${kind}`);
    // Woken: the sender's poll is 30 s away, so anything under 10 s (ASan, busy cores) was a wake-up.
    for (const l of latencies) assert.ok(l.ms < 10000, `${l.kind} took ${l.ms} ms: polled, not woken`);
    assert.deepEqual(rx.badSignatures, []);
  } finally {
    await sbx.stop();
    sbx.cleanup();
    rx.close();
  }
});

// A delivery in flight when the worker stops (SIGTERM): the attempt is either finished and
// recorded, or not recorded and sent again after the restart with the same webhook-id; every
// event arrives, none under two webhook-ids.
test('a delivery in flight when the worker is stopped is never lost', async (t) => {
  const rx = await receiver();
  const env = { SBX_WEBHOOK_ALLOW_PRIVATE: '1', SBX_WEBHOOK_TIMEOUT_MS: '1500', SBX_WEBHOOK_THREADS: '1', SBX_SHUTDOWN_GRACE: '1' };
  const sbx = await startSbx({ workers: 1, env });
  try {
    const { app, key } = await sbx.app('stopped', { keepAliveSeconds: 30 });
    const hookRes = await req(sbx.gw, 'POST', `/v1/apps/${app.id}/webhooks`, { token: sbx.gw.admin, body: { url: rx.url, eventTypes: ['session.*'] } });
    assert.equal(hookRes.status, 201, hookRes.text);
    rx.secret = hookRes.json.secret;
    const hookPath = `/v1/apps/${app.id}/webhooks/${hookRes.json.id}`;
    rx.mode = 'slow'; // answers after 700 ms: the worker is stopped while the POST is open
    const s1 = await sbx.session(key);
    await sbx.until(() => rx.inFlight > 0, 5000, 'the delivery in flight');
    const inFlight = rx.got[rx.got.length - 1].id;
    const old = sbx.workers.pop();
    old.kill('SIGTERM');
    assert.deepEqual(await old.exited, { code: 0, signal: null }, old.log.slice(-2000));
    const before = await req(sbx.gw, 'GET', `${hookPath}/deliveries`, { token: sbx.gw.admin });
    const d = before.json.items.find((i) => i.id === inFlight);
    const recorded = d.state === 'delivered';
    t.diagnostic(`the attempt in flight at SIGTERM was ${recorded ? 'finished and recorded' : 'cut, not recorded'}`);
    if (!recorded) assert.equal(d.attemptLog.length, 0, 'a cut attempt was recorded');
    rx.mode = 'ok';
    const gotBefore = rx.got.length;
    sbx.startWorker();
    const s2 = await sbx.session(key);
    await sbx.until(async () => {
      const all = await req(sbx.gw, 'GET', `${hookPath}/deliveries`, { token: sbx.gw.admin });
      return all.json.items.length >= 2 && all.json.items.every((i) => i.state === 'delivered');
    }, 20000, 'both deliveries delivered after the restart');
    const ids = (sessionId) => new Set(rx.got.filter((g) => g.json?.data?.objectId === sessionId).map((g) => g.id));
    assert.deepEqual([...ids(s1.id)], [inFlight], 'the stopped delivery came under another webhook-id');
    assert.equal(ids(s2.id).size, 1);
    const resent = rx.got.slice(gotBefore).filter((g) => g.id === inFlight).length;
    if (recorded) assert.equal(resent, 0, 'a recorded delivery was sent again');
    else assert.ok(resent >= 1, 'a cut delivery was not sent again');
    assert.deepEqual(rx.badSignatures, []);
  } finally {
    await sbx.stop();
    sbx.cleanup();
    rx.close();
  }
});
