// key_cache.test.mjs: the gateways cache the API keys they authenticate (auth_cache_ms), and a
// cached key never outlives its revocation: a revoke or an App delete is refused at once by the
// gateway that made it and, through the "keys" wake-up, by another gateway on the same store
// (both with a cache life of a minute, so only the wake-up can explain the refusal); a key
// revoked in the database behind the gateways' back stops working within auth_cache_ms.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, removeDataDir, req, sql, newApp, assertProblem } from './harness.mjs';

const sessions = (gw, key) => req(gw, 'GET', '/v1/sessions', { token: key });

// Polls until the key is refused; returns the ms it took, or null after limitMs.
async function refusedWithin(gw, key, limitMs) {
  const t0 = performance.now();
  for (;;) {
    const r = await sessions(gw, key);
    if (r.status === 401) return performance.now() - t0;
    assert.equal(r.status, 200, r.text);
    if (performance.now() - t0 > limitMs) return null;
    await new Promise((res) => setTimeout(res, 10));
  }
}

test('a revoke or an App delete ends a cached key at once on every gateway', async () => {
  const minute = ['--auth-cache-ms', '60000'];
  const a = await startGateway({ extraArgs: minute });
  const b = await startGateway({ dataDir: a.dataDir, extraArgs: minute });
  b.admin = a.admin;
  try {
    const one = await newApp(a, 'cached-one');
    const two = await newApp(a, 'cached-two');
    // Both gateways have looked both keys up (and cached them).
    for (const gw of [a, b])
      for (const k of [one.key, two.key]) assert.equal((await sessions(gw, k)).status, 200);

    const del = await req(b, 'DELETE', `/v1/apps/${one.app.id}/keys/${one.keyId}`, { token: b.admin });
    assert.equal(del.status, 204);
    // The gateway that revoked it refuses it in its very next request.
    assertProblem(assert, await sessions(b, one.key), 401, 'unauthorized');
    // The other one as soon as the wake-up arrives: far sooner than its minute of cache.
    const late = await refusedWithin(a, one.key, 20000);
    assert.notEqual(late, null, 'gateway a still accepted the revoked key after 20 s');
    // The other key of the other App is untouched.
    assert.equal((await sessions(a, two.key)).status, 200);

    // Deleting an App ends its keys the same way.
    assert.equal((await req(a, 'DELETE', `/v1/apps/${two.app.id}`, { token: a.admin })).status, 204);
    assertProblem(assert, await sessions(a, two.key), 401, 'unauthorized');
    assert.notEqual(await refusedWithin(b, two.key, 20000), null, 'gateway b kept the deleted App\'s key');
  } finally {
    const [sa, sb] = await Promise.all([a.stop(), b.stop()]);
    removeDataDir(a.dataDir);
    assert.equal(sa.code, 0, a.stderr);
    assert.equal(sb.code, 0, b.stderr);
  }
});

test('a key revoked in the database behind the gateway stops working within auth_cache_ms', async () => {
  const bound = 1500;
  const gw = await startGateway({ extraArgs: ['--auth-cache-ms', String(bound)] });
  try {
    const { key, keyId } = await newApp(gw, 'revoked-by-hand');
    assert.equal((await sessions(gw, key)).status, 200);
    // As an operator would with the sqlite3 shell: no gateway hears of it.
    sql(gw, `UPDATE api_keys SET revoked_at = 1 WHERE id = '${keyId}'`);
    // Generous past the bound (requests under ASan on busy cores), far short of a cache that
    // ignored it (the keys' minute above).
    const took = await refusedWithin(gw, key, bound + 10000);
    assert.notEqual(took, null, `the key still worked ${bound + 10000} ms after its revocation`);
    assert.ok(took <= bound + 10000, `refused after ${took} ms, the bound is ${bound} ms`);
  } finally {
    const { code } = await gw.stop();
    removeDataDir(gw.dataDir);
    assert.equal(code, 0, gw.stderr);
  }
});

test('auth_cache_ms 0: every request reads the store', async () => {
  const gw = await startGateway({ extraArgs: ['--auth-cache-ms', '0'] });
  try {
    const { key, keyId } = await newApp(gw, 'uncached');
    assert.equal((await sessions(gw, key)).status, 200);
    sql(gw, `UPDATE api_keys SET revoked_at = 1 WHERE id = '${keyId}'`);
    assertProblem(assert, await sessions(gw, key), 401, 'unauthorized');
  } finally {
    const { code } = await gw.stop();
    removeDataDir(gw.dataDir);
    assert.equal(code, 0, gw.stderr);
  }
});
