// feed.test.mjs: the live event feed (GET /v1/events with Accept: text/event-stream) end to end on
// the real gateway, sbx-worker and process driver: an App's feed delivers its Session's and
// Sandbox's whole lifecycle in commit order, exactly the events of the JSON list, each within
// moments of its commit (woken, not polled); Last-Event-ID resumes after an event; the sessionId
// filter holds; an App never sees another App's events while the admin feed sees all.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startSbx, req } from '../worker/harness.mjs';
import { openStream } from './sse_client.mjs';

async function jsonEvents(sbx, token, query = '') {
  const out = [];
  let cursor = '';
  for (;;) {
    const r = await req(sbx.gw, 'GET', `/v1/events?limit=200${query}${cursor ? `&cursor=${cursor}` : ''}`, { token });
    assert.equal(r.status, 200, r.text);
    out.push(...r.json.items);
    if (!r.json.nextCursor) return out;
    cursor = r.json.nextCursor;
  }
}

// Whether the kinds appear in this order (others may come between).
function inOrder(kinds, wanted) {
  let i = 0;
  for (const k of kinds) if (k === wanted[i]) i++;
  return i === wanted.length;
}

test('the event feed delivers a Sandbox\'s whole lifecycle in order, resumable, scoped', async (t) => {
  // The hub's fallback re-read once a minute (SBX_TEST_RECHECK_MS, a test hook): an event that
  // reaches the feed sooner was woken, however busy the machine.
  const sbx = await startSbx({ workers: 1, env: { SBX_STREAM_KEEPALIVE: '2', SBX_TEST_RECHECK_MS: '60000' } });
  try {
    const { key } = await sbx.app('feed', { keepAliveSeconds: 1, maxAttempts: 1 });
    const other = await sbx.app('other', {});
    // From the start of the App's history (Last-Event-ID: 0), then live.
    const feed = await openStream(sbx.gw, '/v1/events', { token: key, lastEventId: 0 });
    assert.equal(feed.status, 200, feed.text);
    const admin = await openStream(sbx.gw, '/v1/events', { token: sbx.gw.admin });
    assert.equal(admin.status, 200, admin.text);
    await sbx.until(() => Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state = 'warm'`)) >= 1, 30000, 'a warm Sandbox');

    const ses = await sbx.session(key);
    const only = await openStream(sbx.gw, `/v1/events?sessionId=${ses.id}`, { token: key, lastEventId: 0 });
    const m = await sbx.roundTrip(key, ses.id, { hello: 'feed' });
    assert.equal(m.state, 'completed', m.error);
    // Keep-alive 1 s: the Sandbox ends and the Session goes idle.
    await feed.until((e) => e.some((x) => x.json.kind === 'sandbox.terminated' && x.json.objectId === m.sandboxId), 15000, 'sandbox.terminated');
    await feed.until((e) => e.some((x) => x.json.kind === 'session.idle' && x.json.sessionId === ses.id), 15000, 'session.idle');

    // Exactly the JSON list, in the same order, ids rising.
    const list = await jsonEvents(sbx, key);
    await feed.until((e) => e.length >= list.length, 5000, 'the whole list');
    assert.deepEqual(feed.events.map((e) => e.json), list);
    assert.deepEqual(feed.events.map((e) => Number(e.id)), list.map((e) => e.id));
    for (let i = 1; i < list.length; i++) assert.ok(list[i].id > list[i - 1].id);

    const mine = feed.events.map((e) => e.json).filter((e) => e.sessionId === ses.id || e.objectId === m.sandboxId || e.objectId === m.id);
    const kinds = mine.map((e) => e.kind);
    const lifecycle = ['session.created', 'message.queued', 'sandbox.claimed', 'session.activating', 'message.delivering',
      'sandbox.running', 'session.active', 'message.completed', 'sandbox.stopping', 'session.idle', 'sandbox.terminated'];
    for (const k of lifecycle) assert.ok(kinds.includes(k), `no ${k} in ${kinds.join(', ')}`);
    assert.ok(inOrder(kinds, ['session.created', 'message.queued', 'message.delivering', 'message.completed']), kinds.join(', '));
    assert.ok(inOrder(kinds, ['sandbox.claimed', 'sandbox.running', 'sandbox.stopping', 'sandbox.terminated']), kinds.join(', '));
    assert.ok(inOrder(kinds, ['session.activating', 'session.active', 'session.idle']), kinds.join(', '));

    // Woken, not polled: each live event arrived within moments of its commit.
    const lags = feed.events.filter((e) => mine.includes(e.json)).map((e) => e.at - Date.parse(e.json.at));
    const worst = Math.max(...lags);
    t.diagnostic(`feed lag per event: max ${worst} ms, median ${lags.sort((a, b) => a - b)[lags.length >> 1]} ms`);
    assert.ok(worst < 30000, `an event reached the feed ${worst} ms after its commit: polled, not woken`);

    // The sessionId filter: only that Session's events, the same as the filtered list.
    await only.until((e) => e.some((x) => x.json.kind === 'session.idle'), 5000, 'session.idle on the filtered feed');
    assert.deepEqual(only.events.map((e) => e.json), await jsonEvents(sbx, key, `&sessionId=${ses.id}`));

    // Resume after the k-th event: exactly the ones after it.
    const k = Math.floor(list.length / 2);
    const resumed = await openStream(sbx.gw, '/v1/events', { token: key, lastEventId: list[k - 1].id });
    await resumed.until((e) => e.length >= list.length - k, 5000, 'the rest');
    assert.deepEqual(resumed.events.map((e) => e.json.id), list.slice(k).map((e) => e.id));
    resumed.close();
    // ?cursor= starts the feed the same way.
    const cursored = await openStream(sbx.gw, `/v1/events?cursor=${list[k - 1].id}`, { token: key });
    await cursored.until((e) => e.length >= list.length - k, 5000, 'the rest by cursor');
    assert.equal(Number(cursored.events[0].id), list[k].id);
    cursored.close();

    // Scoped: the other App's feed has none of these; the admin feed has them and the pool's.
    const otherFeed = await openStream(sbx.gw, '/v1/events', { token: other.key, lastEventId: 0 });
    await new Promise((r) => setTimeout(r, 300));
    assert.ok(otherFeed.events.every((e) => e.json.appId !== feed.events[0].json.appId));
    otherFeed.close();
    await admin.until((e) => e.some((x) => x.json.kind === 'sandbox.terminated' && x.json.objectId === m.sandboxId), 5000, 'admin: sandbox.terminated');
    assert.ok(admin.events.some((e) => e.json.kind === 'sandbox.warm' || e.json.kind === 'sandbox.booting'), 'the admin feed lacks the pool\'s events');

    feed.close();
    admin.close();
    only.close();
    const results = await sbx.stop();
    assert.deepEqual(results[0], { code: 0, signal: null });
    assert.deepEqual(await sbx.gw.exited, { code: 0, signal: null });
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});
