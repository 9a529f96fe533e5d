// exposure.test.mjs: what files and endpoints show, and to whom. The data directory and the
// database (with its -wal and -shm) are private to sbx's user (and its group only where a unit
// file's UMask asks for it); an App key sees only its own App's pool shape; /metrics takes an
// optional bearer token (metrics_token) and a listener of its own (metrics_listen).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { startGateway, tempDataDir, removeDataDir, req, newApp, assertProblem, onPostgres, sql } from '../gateway/harness.mjs';

const mode = (p) => statSync(p).mode & 0o777;

// A gateway on a data directory that does not exist yet, started under the given umask.
async function freshGateway(umask, env = {}) {
  const parent = tempDataDir();
  const old = process.umask(umask);
  try {
    const gw = await startGateway({ dataDir: join(parent, 'data'), env });
    gw.parent = parent;
    return gw;
  } finally {
    process.umask(old);
  }
}

for (const [umask, dirMode, fileMode, why] of [
  [0o022, 0o700, 0o600, 'the usual umask 022: private to the user'],
  [0o007, 0o770, 0o660, 'a unit with UMask=0007: shared with the group, never others'],
]) {
  test(`data directory and database modes under ${why}`, { skip: onPostgres && 'SQLite files only' }, async () => {
    const gw = await freshGateway(umask);
    try {
      // A write, so that the -wal and -shm files exist.
      await newApp(gw, 'modes');
      const db = join(gw.dataDir, 'sbx.db');
      assert.equal(mode(gw.dataDir).toString(8), dirMode.toString(8), 'data directory');
      for (const f of [db, db + '-wal', db + '-shm']) {
        assert.ok(existsSync(f), `${f} missing`);
        assert.equal(mode(f).toString(8), fileMode.toString(8), f);
      }
    } finally {
      await gw.stop();
      removeDataDir(gw.parent);
    }
  });
}

test('an App key sees only its own pool shape; the admin sees every one', async () => {
  const gw = await startGateway();
  try {
    // Another App's Image, ready (no worker runs here: the row stands for a finished import).
    const secret = 'sha256:' + 'ab'.repeat(32);
    sql(gw, `INSERT INTO images (id, name, state, source, digest, layer_count, unpacked_bytes, created_at, ready_at)
             VALUES ('img_exposure0000000001', 'acme-internal', 'ready', 'upload', '${secret}', 1, 1, 1, 1)`);
    const a = await newApp(gw, 'small', { vcpuCount: 1, memSizeMib: 128, image: 'default' });
    const b = await newApp(gw, 'secret-shape', { vcpuCount: 2, memSizeMib: 512, image: 'acme-internal', command: ['/agent'] });
    const own = await req(gw, 'GET', '/v1/pool', { token: a.key });
    assert.equal(own.status, 200, own.text);
    assert.deepEqual(own.json.shapes.map((s) => [s.vcpuCount, s.memSizeMib, s.image]), [[1, 128, 'default']]);
    assert.ok(!own.text.includes(secret) && !own.text.includes('acme-internal'), 'another App\'s image is visible to an App key');
    const theirs = await req(gw, 'GET', '/v1/pool', { token: b.key });
    assert.deepEqual(theirs.json.shapes.map((s) => s.image), [secret]);
    const all = await req(gw, 'GET', '/v1/pool', { token: gw.admin });
    const images = all.json.shapes.map((s) => s.image);
    assert.ok(images.includes(secret) && images.includes('default'), all.text);
  } finally {
    await gw.stop();
    removeDataDir(gw.dataDir);
  }
});

test('/metrics with metrics_token needs that bearer token', async () => {
  const token = 'metrics-secret-' + Date.now();
  const gw = await startGateway({ env: { SBX_METRICS_TOKEN: token } });
  try {
    assertProblem(assert, await req(gw, 'GET', '/metrics'), 401, 'unauthorized');
    assertProblem(assert, await req(gw, 'GET', '/metrics', { token: 'wrong' }), 401, 'unauthorized');
    assertProblem(assert, await req(gw, 'GET', '/metrics', { token: gw.admin }), 401, 'unauthorized');
    const ok = await req(gw, 'GET', '/metrics', { token });
    assert.equal(ok.status, 200);
    assert.match(ok.text, /^# HELP /m);
    assert.equal((await req(gw, 'GET', '/healthz')).status, 200, '/healthz stays open');
  } finally {
    await gw.stop();
    removeDataDir(gw.dataDir);
  }
});

test('/metrics on a listener of its own (metrics_listen) and only there', async () => {
  const gw = await startGateway({ env: { SBX_METRICS_LISTEN: '127.0.0.1:0' } });
  try {
    const m = /\/metrics served on 127\.0\.0\.1:(\d+)/.exec(gw.stderr);
    assert.ok(m, `no metrics listener in the log:\n${gw.stderr}`);
    const metrics = { url: `http://127.0.0.1:${m[1]}` };
    const ok = await req(metrics, 'GET', '/metrics');
    assert.equal(ok.status, 200);
    assert.match(ok.text, /sbx_http_requests_total|# HELP/);
    assert.equal((await req(metrics, 'GET', '/healthz')).status, 200);
    assertProblem(assert, await req(gw, 'GET', '/metrics'), 404, 'not-found');
    assertProblem(assert, await req(metrics, 'GET', '/v1/pool', { token: gw.admin }), 404, 'not-found');
    assert.equal((await req(gw, 'GET', '/v1/pool', { token: gw.admin })).status, 200);
    assert.deepEqual(await gw.stop(), { code: 0, signal: null }, 'a clean stop of both listeners');
  } finally {
    await gw.stop();
    removeDataDir(gw.dataDir);
  }
});
