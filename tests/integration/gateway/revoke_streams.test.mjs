// revoke_streams.test.mjs: what an API key opened stays open only while the key is valid. An
// event feed (SSE) whose key is revoked, or whose App is deleted, ends with a final
// `event: revoked` (a 401 Problem) and is closed; a long poll parked with such a key answers 401
// before its wait runs out. Both on the gateway that made the change and, through the "keys"
// wake-up, on another gateway on the same store; the gateways cache keys for a minute, so only
// the wake-up can explain an end within the test's bound. Other keys' streams go on.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, removeDataDir, req, newApp, assertProblem } from './harness.mjs';
import { openStream } from '../streaming/sse_client.mjs';

// The bound this test allows a revoked stream to end within: far under the key cache's minute.
const BOUND_MS = 10000;

// Resolves true once the stream has ended by the server, or false after ms.
const endedWithin = (s, ms) => Promise.race([s.ended.then(() => true), new Promise((ok) => setTimeout(() => ok(false), ms))]);

async function expectRevokedEnd(s, what) {
  await s.until((e) => e.some((x) => x.event === 'revoked'), BOUND_MS, `the revoked event on ${what}`);
  const last = s.events[s.events.length - 1];
  assert.equal(last.event, 'revoked', `the revoked event is not the last one on ${what}`);
  assert.equal(last.json.code, 'unauthorized');
  assert.equal(last.json.status, 401);
  assert.ok(await endedWithin(s, BOUND_MS), `${what} was not closed after its revoked event`);
}

test('a revoke or an App delete ends the key\'s open feeds and long polls on every gateway', async () => {
  const minute = ['--auth-cache-ms', '60000'];
  const a = await startGateway({ extraArgs: minute });
  const b = await startGateway({ dataDir: a.dataDir, extraArgs: minute });
  b.admin = a.admin;
  const open = [];
  try {
    const one = await newApp(a, 'revoked-key');
    const two = await newApp(a, 'deleted-app');
    const three = await newApp(a, 'bystander');

    // Feeds on both gateways for each App, and a long poll with the first App's key.
    const feed = async (gw, key) => {
      const s = await openStream(gw, '/v1/events', { token: key });
      assert.equal(s.status, 200, s.text);
      open.push(s);
      return s;
    };
    const oneA = await feed(a, one.key), oneB = await feed(b, one.key);
    const twoA = await feed(a, two.key), twoB = await feed(b, two.key);
    const threeB = await feed(b, three.key);
    const ses = await req(a, 'POST', '/v1/sessions', { token: one.key });
    assert.equal(ses.status, 201, ses.text);
    const msg = await req(a, 'POST', `/v1/sessions/${ses.json.id}/messages`, { token: one.key, body: { body: { q: 1 } } });
    assert.equal(msg.status, 202, msg.text);
    // No worker runs: the message stays queued and the poll parks for its whole minute.
    const t0 = performance.now();
    const poll = req(b, 'GET', `/v1/sessions/${ses.json.id}/messages/${msg.json.id}?wait=60`, { token: one.key });
    await new Promise((r) => setTimeout(r, 300));

    // A revoke on gateway a: its own feed and, by the wake-up, b's feed and b's long poll.
    assert.equal((await req(a, 'DELETE', `/v1/apps/${one.app.id}/keys/${one.keyId}`, { token: a.admin })).status, 204);
    await expectRevokedEnd(oneA, 'the revoking gateway\'s feed');
    await expectRevokedEnd(oneB, 'the other gateway\'s feed');
    const polled = await poll;
    assertProblem(assert, polled, 401, 'unauthorized');
    assert.ok(performance.now() - t0 < 60000 - 1000, 'the long poll ran its whole wait instead of ending at the revoke');

    // Deleting an App (from gateway b) ends its key's feeds the same way.
    assert.equal((await req(b, 'DELETE', `/v1/apps/${two.app.id}`, { token: b.admin })).status, 204);
    await expectRevokedEnd(twoB, 'the deleting gateway\'s feed');
    await expectRevokedEnd(twoA, 'the other gateway\'s feed of the deleted App');

    // The other App's feed is untouched: still open, and it still delivers.
    assert.equal(threeB.events.filter((e) => e.event === 'revoked').length, 0);
    const s3 = await req(a, 'POST', '/v1/sessions', { token: three.key });
    assert.equal(s3.status, 201, s3.text);
    await threeB.until((e) => e.some((x) => x.json?.kind === 'session.created' && x.json.sessionId === s3.json.id), BOUND_MS, 'the bystander\'s event');

    // A new stream with the revoked key is refused like any request.
    const again = await openStream(a, '/v1/events', { token: one.key });
    open.push(again);
    assert.equal(again.status, 401);
  } finally {
    for (const s of open) s.close();
    const [sa, sb] = await Promise.all([a.stop(), b.stop()]);
    removeDataDir(a.dataDir);
    assert.equal(sa.code, 0, a.stderr);
    assert.equal(sb.code, 0, b.stderr);
  }
});
