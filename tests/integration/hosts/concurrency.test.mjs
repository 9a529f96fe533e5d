// concurrency.test.mjs: several gateways and worker hosts writing to one PostgreSQL database at
// once, with no lock between their writers (docs/postgres.md, "Concurrent writers"). Three
// gateways post to the same Sessions at the same moment (each Session gets messages through every
// gateway in the same instant, with and without Idempotency-Key, and one key sent through all
// three at once), two hosts deliver them, and a reader pages GET /v1/events by its cursor all the
// while. Afterwards: every 202 is exactly one row and one completion (exactly once), each Session's
// seqs are 1..n without a gap and were delivered and completed in seq order, each client's posts
// got increasing seqs, the one key made one message, and the reader saw every event exactly once,
// in id order, without skipping any (an id that committed after a larger one was already read
// would be a skip).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, STORE } from './harness.mjs';

const GATEWAYS = 3;
const SESSIONS = 12;
const ROUNDS = 8;

const onPostgres = /^postgres(ql)?:\/\//.test(STORE);

test('three gateways and two hosts on one database: exactly once, per-Session order, no event skipped', { skip: !onPostgres && 'PostgreSQL only (run under tests/pg-run.sh)' }, async () => {
  const c = startCluster({ env: { SBX_POOL_SIZE: '2', SBX_MAX_SANDBOXES: '16' } });
  try {
    const gws = [];
    for (let g = 0; g < GATEWAYS; g++) gws.push(await c.startGateway(String(g + 1), { host: g === 0 ? 'a' : g === 1 ? 'b' : undefined }));
    c.startHost('a', { workers: 1 });
    c.startHost('b', { workers: 1 });
    await c.until(() => c.num(`SELECT COUNT(*) FROM hosts`) === 2, 15000, 'both hosts registered');
    const { key } = await c.app(gws[0], 'concurrency', { keepAliveSeconds: 2 });
    const sessions = [];
    for (let i = 0; i < SESSIONS; i++) sessions.push(await c.session(gws[i % GATEWAYS], key));

    // The events reader: pages by cursor (the last id it was given) from the third gateway until
    // told to stop, then once more to the end.
    const start = c.num(`SELECT COALESCE(MAX(id), 0) FROM events`);
    const seen = [];
    let readerDone = false;
    const readPage = async (cursor) => {
      const r = await c.req(gws[2], 'GET', `/v1/events?limit=200&cursor=${cursor}`, { token: c.admin });
      assert.equal(r.status, 200, r.text);
      return r.json.items.map((e) => e.id);
    };
    const reader = (async () => {
      let cursor = start;
      for (;;) {
        const stop = readerDone;
        const ids = await readPage(cursor);
        seen.push(...ids);
        if (ids.length) cursor = ids[ids.length - 1];
        if (stop && ids.length === 0) return;
        if (!ids.length) await new Promise((r) => setTimeout(r, 20));
      }
    })();
    reader.catch(() => {}); // awaited below; a failure here must not hide the posters' own

    // A post; a replay of a key answers 200 with the message the key made.
    const post = async (gw, sid, body, idem, replayOk = false) => {
      const headers = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
      if (idem) headers['Idempotency-Key'] = idem;
      const res = await fetch(`${gw.url}/v1/sessions/${sid}/messages`, { method: 'POST', headers, body: JSON.stringify({ body }) });
      const text = await res.text();
      if (!(replayOk && res.status === 200)) assert.equal(res.status, 202, text);
      return { ...JSON.parse(text), status: res.status };
    };

    // Every round, every gateway posts to every Session at once; a client is one (gateway,
    // Session) pair and posts its rounds one after the other. Odd rounds carry a key.
    const accepted = [];
    await Promise.all(sessions.flatMap((s) => gws.map(async (gw, g) => {
      for (let n = 0; n < ROUNDS; n++) {
        const body = { g, n };
        const m = await post(gw, s.id, body, n % 2 ? `k-${g}-${n}` : undefined);
        accepted.push({ sid: s.id, g, n, id: m.id, seq: m.seq });
      }
    })));
    // One key through every gateway at the same moment: one message, the others replays of it.
    const same = await Promise.all(gws.map((gw) => post(gw, sessions[0].id, { once: true }, 'the-one-key', true)));
    assert.equal(new Set(same.map((m) => m.id)).size, 1, `one key made ${new Set(same.map((m) => m.id)).size} messages`);
    assert.deepEqual(same.map((m) => m.status).sort(), [200, 200, 202]);
    const total = SESSIONS * GATEWAYS * ROUNDS + 1;

    await c.until(() => c.num(`SELECT COUNT(*) FROM messages WHERE state IN ('completed', 'failed')`) >= total, 60000, 'every message to end');
    readerDone = true;
    await reader;

    // Exactly once: one row per 202, each completed once.
    assert.equal(new Set(accepted.map((a) => a.id)).size, accepted.length);
    assert.equal(c.num(`SELECT COUNT(*) FROM messages`), total);
    assert.equal(c.num(`SELECT COUNT(*) FROM messages WHERE state = 'completed'`), total,
      c.sql(`SELECT id || ' ' || state || ' ' || COALESCE(error, '') FROM messages WHERE state <> 'completed' LIMIT 5`));
    assert.equal(c.num(`SELECT COUNT(*) FROM events WHERE kind = 'message.completed'`), total);
    assert.equal(c.num(`SELECT COUNT(*) FROM (SELECT object_id FROM events WHERE kind = 'message.completed' GROUP BY object_id HAVING COUNT(*) <> 1) x`), 0);
    assert.equal(c.num(`SELECT COUNT(*) FROM events WHERE kind = 'message.queued'`), total);
    for (const row of c.sql(`SELECT seq || '|' || body || '|' || reply FROM messages WHERE session_id <> '${sessions[0].id}' OR body NOT LIKE '%once%'`).split('\n')) {
      const [seq, body, reply] = row.split('|');
      assert.deepEqual(JSON.parse(reply).echo, JSON.parse(body), `seq ${seq}: the reply is not its own message's`);
    }

    // Per-Session order: seqs 1..n, delivered and completed in seq order, and each client's
    // messages in the order it posted them.
    assert.equal(c.num(`SELECT COUNT(*) FROM (SELECT session_id FROM messages GROUP BY session_id HAVING MIN(seq) <> 1 OR MAX(seq) <> COUNT(*) OR COUNT(DISTINCT seq) <> COUNT(*)) x`), 0, 'a Session has a gap or a duplicate in its seqs');
    assert.equal(c.num(`SELECT COUNT(*) FROM messages a JOIN messages b ON a.session_id = b.session_id AND a.seq < b.seq AND a.completed_at > b.completed_at`), 0, 'a later message completed first');
    assert.equal(c.num(`SELECT COUNT(*) FROM events a JOIN messages ma ON ma.id = a.object_id JOIN events b ON b.kind = a.kind JOIN messages mb ON mb.id = b.object_id AND mb.session_id = ma.session_id AND mb.seq > ma.seq WHERE a.kind = 'message.delivering' AND b.id < a.id`), 0, 'a later message was delivered first');
    for (const s of sessions)
      for (let g = 0; g < GATEWAYS; g++) {
        const seqs = accepted.filter((a) => a.sid === s.id && a.g === g).sort((x, y) => x.n - y.n).map((a) => a.seq);
        assert.deepEqual(seqs, [...seqs].sort((x, y) => x - y), `gateway ${g}'s posts to ${s.id} out of order: ${seqs}`);
      }

    // The reader: every event between its start and where its cursor ended, once, in id order
    // (an event committed with an id below the cursor after the reader passed it is a skip; the
    // Sessions going idle write events after the reader's last page).
    const cursor = seen.length ? seen[seen.length - 1] : start;
    const all = c.sql(`SELECT id FROM events WHERE id > ${start} AND id <= ${cursor} ORDER BY id`).split('\n').filter(Boolean).map(Number);
    assert.ok(all.length >= total * 3, `only ${all.length} events`);
    assert.deepEqual(seen.filter((id, i) => i > 0 && id <= seen[i - 1]), [], 'the reader got ids out of order or twice');
    const got = new Set(seen);
    const missed = all.filter((id) => !got.has(id));
    assert.deepEqual(missed, [], `the reader skipped ${missed.length} of ${all.length} events`);

    const results = await c.stop();
    for (const r of [...results.a, ...results.b]) assert.deepEqual(r, { code: 0, signal: null });
  } finally {
    await c.stop();
    c.cleanup();
  }
});
