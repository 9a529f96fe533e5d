// placement.test.mjs: two worker hosts (fork test driver, different host ids and jail roots) on
// one store: an idle Session goes to the host holding a warm Sandbox of its App's shape; without
// one, to the least loaded host; a full host is skipped even when it holds a warm Sandbox.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster } from './harness.mjs';

// The placement grace is long here, so that only placement decides who takes a message.
const PLACED = { SBX_PLACEMENT_GRACE_MS: '20000' };

test('an idle Session goes to the host with a warm Sandbox of its shape', async () => {
  const c = startCluster({ env: PLACED });
  try {
    const gw = await c.startGateway('1', { host: 'a' });
    // Only host b keeps a warm pool.
    c.startHost('a', { env: { SBX_POOL_SIZE: '0' } });
    c.startHost('b', { env: { SBX_POOL_SIZE: '1' } });
    const { app, key } = await c.app(gw, 'warm', { keepAliveSeconds: 60 });
    const warmOnB = () => c.num(`SELECT COUNT(*) FROM sandboxes b JOIN workers w ON w.id = b.worker_id WHERE w.host_id = 'b' AND b.state = 'warm'`) >= 1;
    for (let i = 0; i < 3; i++) {
      await c.until(warmOnB, 15000, 'a warm Sandbox on host b');
      const s = await c.session(gw, key);
      const m = await c.post(gw, key, s.id, { i });
      const done = await c.wait(gw, key, s.id, m.id);
      assert.equal(done.state, 'completed');
      const sb = c.sql(`SELECT sandbox_id FROM messages WHERE id = '${m.id}'`);
      assert.equal(c.hostOfSandbox(sb), 'b', `Session ${i} was not placed on the host with the warm Sandbox`);
      assert.equal(c.sql(`SELECT cold FROM sandboxes WHERE id = '${sb}'`), '0');
    }
    // Host a booted nothing for this App: it never took one of these Sessions.
    assert.equal(c.num(`SELECT COUNT(*) FROM sandboxes b JOIN workers w ON w.id = b.worker_id WHERE w.host_id = 'a' AND b.app_id = '${app.id}'`), 0);
    const results = await c.stop();
    for (const r of [...results.a, ...results.b]) assert.deepEqual(r, { code: 0, signal: null });
  } finally {
    await c.stop();
    c.cleanup();
  }
});

test('without warm Sandboxes the least loaded host is chosen; a full host is skipped', async () => {
  const c = startCluster({ env: { ...PLACED, SBX_POOL_SIZE: '0' } });
  try {
    const gw = await c.startGateway('1', { host: 'a' });
    c.startHost('a', { env: { SBX_HOST_CAPACITY: '10' } });
    c.startHost('b', { env: { SBX_HOST_CAPACITY: '10' } });
    await c.until(() => c.num(`SELECT COUNT(*) FROM hosts`) === 2, 10000, 'both hosts registered');
    const { key } = await c.app(gw, 'load', { keepAliveSeconds: 60 });
    // Sessions stay active (keep-alive 60 s), so each one adds to its host's load. Equal loads
    // go to the smaller host id: a, then b (a has 1 of 10), then a, then b.
    const placedOn = [];
    for (let i = 0; i < 4; i++) {
      const s = await c.session(gw, key);
      const m = await c.post(gw, key, s.id, { i });
      assert.equal((await c.wait(gw, key, s.id, m.id)).state, 'completed');
      placedOn.push(c.hostOfSandbox(c.sql(`SELECT sandbox_id FROM messages WHERE id = '${m.id}'`)));
    }
    assert.deepEqual(placedOn, ['a', 'b', 'a', 'b']);
    const hosts = c.sql(`SELECT id || ':' || (SELECT COUNT(*) FROM sessions s JOIN workers w ON w.id = s.worker_id WHERE w.host_id = h.id AND s.state = 'active') FROM hosts h ORDER BY id`);
    assert.equal(hosts, 'a:2\nb:2');
  } finally {
    await c.stop();
    c.cleanup();
  }
});

test('a full host is skipped even with a warm Sandbox of the shape', async () => {
  const c = startCluster({ env: PLACED });
  try {
    const gw = await c.startGateway('1', { host: 'a' });
    c.startHost('a', { env: { SBX_POOL_SIZE: '0' } });
    c.startHost('b', { env: { SBX_POOL_SIZE: '1', SBX_HOST_CAPACITY: '1' } });
    const { key } = await c.app(gw, 'full', { keepAliveSeconds: 60 });
    const warmOnB = () => c.num(`SELECT COUNT(*) FROM sandboxes b JOIN workers w ON w.id = b.worker_id WHERE w.host_id = 'b' AND b.state = 'warm'`) >= 1;
    await c.until(warmOnB, 15000, 'a warm Sandbox on host b');
    const first = await c.session(gw, key);
    const m1 = await c.post(gw, key, first.id, { n: 1 });
    assert.equal((await c.wait(gw, key, first.id, m1.id)).state, 'completed');
    assert.equal(c.hostOfSandbox(c.sql(`SELECT sandbox_id FROM messages WHERE id = '${m1.id}'`)), 'b');
    // Host b serves 1 of 1 now, and its pool makes a new warm Sandbox: it is still full.
    await c.until(warmOnB, 15000, 'host b warm again');
    for (let i = 0; i < 2; i++) {
      const s = await c.session(gw, key);
      const m = await c.post(gw, key, s.id, { i });
      assert.equal((await c.wait(gw, key, s.id, m.id)).state, 'completed');
      assert.equal(c.hostOfSandbox(c.sql(`SELECT sandbox_id FROM messages WHERE id = '${m.id}'`)), 'a', 'a full host took a Session');
    }
    // The active Session stays with its host: its next message is delivered by host b.
    const m2 = await c.post(gw, key, first.id, { n: 2 });
    assert.equal((await c.wait(gw, key, first.id, m2.id)).state, 'completed');
    assert.equal(c.sql(`SELECT sandbox_id FROM messages WHERE id = '${m2.id}'`), c.sql(`SELECT sandbox_id FROM messages WHERE id = '${m1.id}'`));
  } finally {
    await c.stop();
    c.cleanup();
  }
});
