// stream.test.mjs: an agent's partial output, end to end on the real gateway, sbx-worker and
// process driver. The App is busybox sh in the default image: for each message it prints three
// chunks a second apart, then its reply. A stream client sees chunk 0 about two seconds before
// the reply (chunks are not held back until the end); a client cut off after chunk 0 resumes with
// Last-Event-ID without gaps or repeats; a late client gets the replay and the end at once; bad
// requests get their problem before any stream starts; the per-caller limit answers 429; an idle
// stream gets keep-alive comments; chunks past the bound are dropped and counted, the reply kept.
import { test } from 'node:test';
import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import { startSbx, req } from '../worker/harness.mjs';
import { assertProblem } from '../gateway/harness.mjs';
import { openStream } from './sse_client.mjs';

const AGENT = readFileSync(new URL('./chunk_agent.sh', import.meta.url), 'utf8');

const chunkIds = (events) => events.filter((e) => e.event === 'chunk').map((e) => Number(e.id));
const ended = (events) => events.some((e) => e.event === 'completed' || e.event === 'failed');

test('chunks stream as printed, resume without gaps or repeats, late replay, errors, limits', async () => {
  const sbx = await startSbx({
    workers: 1,
    env: { SBX_STREAM_LIMIT: '4', SBX_STREAM_KEEPALIVE: '1', SBX_CHUNK_MAX_COUNT: '50', SBX_MESSAGE_TIMEOUT: '20' },
  });
  try {
    const { key } = await sbx.app('chunky', { command: ['/bin/sh', '-c', AGENT], keepAliveSeconds: 60, maxAttempts: 1 });
    const other = await sbx.app('other', { command: ['/bin/sh', '-c', AGENT] });
    const ses = await sbx.session(key);
    await sbx.until(() => Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state = 'warm'`)) >= 1, 30000, 'a warm Sandbox');

    // 1. Live: chunk 0 arrives about 2 s before the reply, in order, then the end.
    const m1 = await sbx.post(key, ses.id, { hello: 1 });
    const s1 = await openStream(sbx.gw, `/v1/sessions/${ses.id}/messages/${m1.id}/stream`, { token: key });
    assert.equal(s1.status, 200, s1.text);
    assert.match(s1.headers['content-type'], /^text\/event-stream/);
    await s1.ended;
    const ev1 = s1.events;
    assert.deepEqual(chunkIds(ev1), [0, 1, 2]);
    assert.deepEqual(ev1.filter((e) => e.event === 'chunk').map((e) => e.json.n), [0, 1, 2]);
    assert.equal(ev1[0].json.text, 'caf\u00e9 "quoted"\nline', 'a chunk value comes back as the agent printed it');
    const end1 = ev1[ev1.length - 1];
    assert.equal(end1.event, 'completed');
    assert.equal(end1.json.id, m1.id);
    assert.equal(end1.json.state, 'completed');
    assert.deepEqual(end1.json.reply, { done: true });
    assert.equal(end1.json.chunksDropped, 0);
    const lead = end1.at - ev1[0].at;
    // Live: chunk 0 came as printed, about 2 s before the reply, not with it.
    assert.ok(lead >= 1500, `chunk 0 came ${lead} ms before the reply (expected about 2000)`);
    assert.equal(s1.retry, 1000);

    // 2. Cut off after chunk 0, resumed with Last-Event-ID: 0: chunks 1 and 2, then the end.
    const m2 = await sbx.post(key, ses.id, { hello: 2 });
    const s2 = await openStream(sbx.gw, `/v1/sessions/${ses.id}/messages/${m2.id}/stream`, { token: key });
    await s2.until((e) => chunkIds(e).includes(0), 15000, 'chunk 0');
    s2.close();
    const firstPart = chunkIds(s2.events);
    const s2b = await openStream(sbx.gw, `/v1/sessions/${ses.id}/messages/${m2.id}/stream`,
      { token: key, lastEventId: firstPart[firstPart.length - 1] });
    assert.equal(s2b.status, 200);
    await s2b.ended;
    assert.deepEqual([...firstPart, ...chunkIds(s2b.events)], [0, 1, 2], 'a gap or a repeat across the resume');
    assert.equal(s2b.events[s2b.events.length - 1].event, 'completed');

    // 3. A late client: the replay and the end at once.
    const t0 = performance.now();
    const s3 = await openStream(sbx.gw, `/v1/sessions/${ses.id}/messages/${m1.id}/stream`, { token: key });
    await s3.ended;
    assert.ok(performance.now() - t0 < 10000, `the replay took ${Math.round(performance.now() - t0)} ms`);
    assert.deepEqual(chunkIds(s3.events), [0, 1, 2]);
    assert.deepEqual(s3.events.map((e) => e.data), ev1.map((e) => e.data));
    // ... and from a Last-Event-ID: only what follows it.
    const s3b = await openStream(sbx.gw, `/v1/sessions/${ses.id}/messages/${m1.id}/stream`, { token: key, lastEventId: 1 });
    await s3b.ended;
    assert.deepEqual(chunkIds(s3b.events), [2]);
    // The auditor view shows them, in order, with their sizes.
    assert.equal(sbx.sql(`SELECT chunk_index FROM message_output WHERE message_id = '${m1.id}' ORDER BY chunk_index`).split('\n').join(','), '0,1,2');

    // 4. Bad requests: problems, before any stream.
    assertProblem(assert, await req(sbx.gw, 'GET', `/v1/sessions/${ses.id}/messages/msg_nope/stream`, { token: key }), 404, 'not-found');
    assertProblem(assert, await req(sbx.gw, 'GET', `/v1/sessions/${ses.id}/messages/${m1.id}/stream`, { token: other.key }), 404, 'not-found');
    assertProblem(assert, await req(sbx.gw, 'GET', `/v1/sessions/${ses.id}/messages/${m1.id}/stream`,
      { token: key, headers: { 'Last-Event-ID': 'abc' } }), 400, 'invalid-parameter', 'Last-Event-ID');
    assertProblem(assert, await req(sbx.gw, 'GET', `/v1/events`,
      { token: key, headers: { Accept: 'text/event-stream', 'Last-Event-ID': '-3' } }), 400, 'invalid-parameter', 'Last-Event-ID');

    // 5. The per-caller limit (4 here), counted over both kinds of stream; an idle stream gets
    // keep-alive comments (every second here).
    const idle = await sbx.session(key);
    const open = [];
    for (let i = 0; i < 4; i++) {
      const s = await openStream(sbx.gw, `/v1/events?sessionId=${idle.id}`, { token: key });
      assert.equal(s.status, 200, s.text);
      open.push(s);
    }
    const refused = await req(sbx.gw, 'GET', `/v1/sessions/${ses.id}/messages/${m1.id}/stream`, { token: key });
    assertProblem(assert, refused, 429, 'too-many-streams');
    assert.equal(refused.headers.get('retry-after'), '1');
    // Another caller is not held to this one's streams.
    const otherFeed = await openStream(sbx.gw, '/v1/events', { token: other.key });
    assert.equal(otherFeed.status, 200);
    otherFeed.close();
    await new Promise((r) => setTimeout(r, 2500));
    assert.ok(open[0].comments.filter((c) => c.text === 'keep-alive').length >= 1, 'no keep-alive comment on an idle stream');
    assert.equal(open[0].events.length, 0);
    for (const s of open) s.close();
    // Once closed (noticed at the next keep-alive at the latest), the caller may open streams again.
    await sbx.until(async () => {
      const s = await openStream(sbx.gw, `/v1/sessions/${ses.id}/messages/${m1.id}/stream`, { token: key });
      if (s.status === 200) { await s.ended; return true; }
      return false;
    }, 5000, 'streams to be released');

    // 6. Bounds: 80 chunks printed, 50 stored, 30 counted as dropped; the reply is whole.
    const m4 = await sbx.post(key, ses.id, { many: 80 });
    const done4 = await sbx.wait(key, ses.id, m4.id);
    assert.equal(done4.state, 'completed', done4.error);
    assert.deepEqual(done4.reply, { printed: 80 });
    const s4 = await openStream(sbx.gw, `/v1/sessions/${ses.id}/messages/${m4.id}/stream`, { token: key });
    await s4.ended;
    assert.deepEqual(chunkIds(s4.events), [...Array(50).keys()]);
    assert.deepEqual(s4.events.filter((e) => e.event === 'chunk').map((e) => e.json), [...Array(50).keys()]);
    assert.equal(s4.events[s4.events.length - 1].json.chunksDropped, 30);
    assert.equal(sbx.sql(`SELECT chunks_dropped FROM messages WHERE id = '${m4.id}'`), '30');
    // The count is part of the Message wherever it is rendered: GET, the list, the long poll.
    const got4 = await req(sbx.gw, 'GET', `/v1/sessions/${ses.id}/messages/${m4.id}`, { token: key });
    assert.equal(got4.json.chunksDropped, 30, got4.text);
    const list4 = await req(sbx.gw, 'GET', `/v1/sessions/${ses.id}/messages`, { token: key });
    assert.equal(list4.json.items.find((i) => i.id === m4.id).chunksDropped, 30);
    assert.equal(list4.json.items.find((i) => i.id === m1.id).chunksDropped, 0);
    const wait4 = await req(sbx.gw, 'GET', `/v1/sessions/${ses.id}/messages/${m4.id}?wait=1`, { token: key });
    assert.equal(wait4.json.chunksDropped, 30);
    // Batched: the chunks of one commit share its time, and the burst took a few commits, not
    // one per chunk.
    const commits = Number(sbx.sql(`SELECT COUNT(DISTINCT at) FROM message_chunks WHERE message_id = '${m4.id}'`));
    assert.ok(commits >= 1 && commits <= 10, `50 chunks stored in ${commits} commits`);
    // Deleting the Session takes its chunks with its replies.
    assert.equal((await req(sbx.gw, 'DELETE', `/v1/sessions/${ses.id}`, { token: key })).status, 204);
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM message_chunks`), '0');
    assertProblem(assert, await req(sbx.gw, 'GET', `/v1/sessions/${ses.id}/messages/${m1.id}/stream`, { token: key }), 404, 'not-found');
    assert.ok(ended(ev1));

    const results = await sbx.stop();
    assert.deepEqual(results[0], { code: 0, signal: null });
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});
