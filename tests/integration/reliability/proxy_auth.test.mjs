// proxy_auth.test.mjs: the failed-auth limiter behind a load balancer. The test client on
// 127.0.0.1 plays the proxy: with trusted_proxies naming it, the limiter keys on the client that
// X-Forwarded-For names, so one client's bad tokens lock out neither the other Apps nor the
// admin; X-Forwarded-For from a peer that is not trusted is ignored; and failures are counted
// per presented key prefix as well, from every address, without locking out the key's owner.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startGateway, removeDataDir, req, newApp, assertProblem } from '../gateway/harness.mjs';

const LIMIT = 20;
const badToken = (prefix = 'sbx_') => (prefix + randomBytes(40).toString('base64url')).slice(0, 47);
const via = (client) => ({ 'X-Forwarded-For': `${client}, 127.0.0.1` }); // client, then an inner proxy hop

async function withGateway(env, fn) {
  const gw = await startGateway({ env: { SBX_AUTH_FAIL_LIMIT: String(LIMIT), ...env } });
  try {
    await fn(gw);
  } finally {
    await gw.stop();
    removeDataDir(gw.dataDir);
  }
}

test('behind a trusted proxy, one client\'s bad tokens block that client only', async () => {
  await withGateway({ SBX_TRUSTED_PROXIES: '127.0.0.0/8, ::1' }, async (gw) => {
    const a = await newApp(gw, 'tenant-a');
    for (let i = 0; i < LIMIT; i++) {
      const r = await req(gw, 'GET', '/v1/sessions', { token: badToken(), headers: via('203.0.113.7') });
      assertProblem(assert, r, 401, 'unauthorized');
    }
    const blocked = await req(gw, 'GET', '/v1/sessions', { token: a.key, headers: via('203.0.113.7') });
    assertProblem(assert, blocked, 429, 'rate-limited');
    assert.match(blocked.json.detail, /203\.0\.113\.7/);
    assert.ok(Number(blocked.headers.get('retry-after')) > 0);
    // Every other client behind the same proxy, and the proxy's own requests, still get in.
    assert.equal((await req(gw, 'GET', '/v1/sessions', { token: a.key, headers: via('203.0.113.8') })).status, 200);
    assert.equal((await req(gw, 'GET', '/v1/apps', { token: gw.admin, headers: via('198.51.100.1') })).status, 200);
    assert.equal((await req(gw, 'GET', '/v1/apps', { token: gw.admin })).status, 200);
    // A forged address on the left of the real client's does not escape the block.
    const forged = await req(gw, 'GET', '/v1/sessions', {
      token: a.key, headers: { 'X-Forwarded-For': '192.0.2.99, 203.0.113.7' },
    });
    assertProblem(assert, forged, 429, 'rate-limited');
  });
});

test('X-Forwarded-For from a peer that is not a trusted proxy is ignored', async () => {
  await withGateway({ SBX_TRUSTED_PROXIES: '10.255.255.1' }, async (gw) => {
    // Rotating the header does not spread the failures: the peer (127.0.0.1) is what counts.
    for (let i = 0; i < LIMIT; i++)
      await req(gw, 'GET', '/v1/sessions', { token: badToken(), headers: { 'X-Forwarded-For': `203.0.113.${i}` } });
    const r = await req(gw, 'GET', '/v1/apps', { token: gw.admin, headers: { 'X-Forwarded-For': '198.51.100.77' } });
    assertProblem(assert, r, 429, 'rate-limited');
    assert.match(r.json.detail, /127\.0\.0\.1/);
  });
});

test('failures are counted per presented key prefix, from every address; the owner keeps access', async () => {
  await withGateway({ SBX_TRUSTED_PROXIES: '127.0.0.1' }, async (gw) => {
    const a = await newApp(gw, 'guessed-at');
    const b = await newApp(gw, 'bystander');
    const prefix = a.key.slice(0, 10);
    // A guesser with many addresses, each under the per-address limit, aiming at one key.
    for (let i = 0; i < LIMIT; i++) {
      const r = await req(gw, 'GET', '/v1/sessions', { token: badToken(prefix), headers: via(`198.51.100.${i + 1}`) });
      assertProblem(assert, r, 401, 'unauthorized');
    }
    const more = await req(gw, 'GET', '/v1/sessions', { token: badToken(prefix), headers: via('198.51.100.200') });
    assertProblem(assert, more, 429, 'rate-limited');
    assert.ok(more.json.detail.includes(prefix), more.json.detail);
    // The key's owner, from any address, and other keys are unaffected.
    assert.equal((await req(gw, 'GET', '/v1/sessions', { token: a.key, headers: via('198.51.100.3') })).status, 200);
    assert.equal((await req(gw, 'GET', '/v1/sessions', { token: b.key, headers: via('198.51.100.201') })).status, 200);
    // A wrong token with another prefix from a fresh address is an ordinary 401.
    assertProblem(assert, await req(gw, 'GET', '/v1/sessions', { token: badToken('sbx_zz'), headers: via('192.0.2.50') }), 401, 'unauthorized');
  });
});
