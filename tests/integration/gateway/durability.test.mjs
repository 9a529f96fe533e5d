// durability.test.mjs: a 202 means the message is on disk: kill -9 the gateway right after the
// answers, restart it on the same data dir, and every acknowledged message is there, queued.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, removeDataDir, req, tempDataDir } from './harness.mjs';

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
