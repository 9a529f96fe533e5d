// api.test.mjs: every endpoint of API.md against a live gateway, with the problems each can answer.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startGateway, removeDataDir, req, sql, newApp, assertProblem, tempDataDir } from './harness.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => {
  const { code } = await gw.stop();
  removeDataDir(gw.dataDir);
  assert.equal(code, 0, `gateway did not stop cleanly:\n${gw.stderr}`);
});

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

test('first start printed an admin token, an echo App key and a curl example', async () => {
  assert.match(gw.admin, /^sbx_admin_[A-Za-z0-9_-]{43}$/);
  assert.match(gw.key, /^sbx_[A-Za-z0-9_-]{43}$/);
  assert.match(gw.stdout, /curl -s -H "Authorization: Bearer \$KEY"/);
  const apps = await req(gw, 'GET', '/v1/apps', { token: gw.admin });
  assert.equal(apps.status, 200);
  const echo = apps.json.items.find((a) => a.name === 'echo');
  assert.deepEqual(echo.command, ['/usr/bin/sbx-echo-agent']);
  // Only hashes are stored.
  assert.equal(sql(gw, `SELECT count(*) FROM settings WHERE value LIKE '%${gw.admin}%'`), '0');
  assert.equal(sql(gw, "SELECT length(value) FROM settings WHERE key='admin_token_sha256'"), '64');
  assert.equal(sql(gw, 'SELECT count(*) FROM api_keys WHERE length(hash) = 32'), '1');
});

test('healthz, metrics, request ids', async () => {
  const h = await req(gw, 'GET', '/healthz');
  assert.equal(h.status, 200);
  assert.deepEqual(h.json, { status: 'ok', schemaVersion: h.json.schemaVersion });
  assert.ok(h.json.schemaVersion >= 1);
  assert.match(h.headers.get('x-request-id'), /^req_[0-9a-z]{20}$/);
  const given = await req(gw, 'GET', '/healthz', { headers: { 'X-Request-Id': 'client.id-1' } });
  assert.equal(given.headers.get('x-request-id'), 'client.id-1');
  const bad = await req(gw, 'GET', '/healthz', { headers: { 'X-Request-Id': 'has space' } });
  assert.match(bad.headers.get('x-request-id'), /^req_/);

  const m = await req(gw, 'GET', '/metrics');
  assert.equal(m.status, 200);
  assert.match(m.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  assert.match(m.text, /sbx_http_requests_total\{route="\/healthz",method="GET",status="200"\} \d+/);
  assert.match(m.text, /sbx_http_request_duration_seconds_bucket\{route="\/healthz",le="\+Inf"\} \d+/);
  assert.match(m.text, /sbx_queue_depth\{state="queued"\} \d+/);
  assert.match(m.text, /sbx_queue_oldest_age_seconds /);
  assert.match(m.text, /sbx_sessions\{state="idle"\} \d+/);
  assert.match(m.text, /sbx_sandboxes\{state="warm"\} \d+/);
  assert.match(m.text, /sbx_messages\{state="completed"\} \d+/);
  assert.match(m.text, /^# TYPE sbx_callback_requests_total counter\nsbx_callback_requests_total 0$/m);
  assert.match(m.text, /^# TYPE sbx_callback_refused_total counter$/m);
  // Route labels are templates, never raw ids.
  assert.doesNotMatch(m.text, /route="[^"]*(ses|msg|app)_[0-9a-z]{20}/);
});

test('identity: the published signing key and the issuer, without a token, cacheable', async () => {
  const jwks = await req(gw, 'GET', '/.well-known/jwks.json');
  assert.equal(jwks.status, 200);
  assert.equal(jwks.headers.get('cache-control'), 'max-age=300');
  assert.equal(jwks.json.keys.length, 1);
  const [key] = jwks.json.keys;
  assert.deepEqual(Object.keys(key).sort(), ['alg', 'crv', 'kid', 'kty', 'use', 'x']);
  assert.equal(key.kty, 'OKP');
  assert.equal(key.crv, 'Ed25519');
  assert.equal(key.alg, 'EdDSA');
  assert.equal(key.use, 'sig');
  assert.match(key.x, /^[A-Za-z0-9_-]{43}$/);
  assert.match(key.kid, /^[A-Za-z0-9_-]{22}$/);
  // The kid is the key's own: base64url of the first 16 bytes of SHA-256 of the public key.
  const digest = createHash('sha256').update(Buffer.from(key.x, 'base64url')).digest();
  assert.equal(key.kid, digest.subarray(0, 16).toString('base64url'));

  const oidc = await req(gw, 'GET', '/.well-known/openid-configuration');
  assert.equal(oidc.status, 200);
  assert.equal(oidc.headers.get('cache-control'), 'max-age=300');
  // Without public_url the issuer is made of listen.
  assert.match(oidc.json.issuer, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.equal(oidc.json.jwks_uri, `${oidc.json.issuer}/.well-known/jwks.json`);
  assert.deepEqual(oidc.json.id_token_signing_alg_values_supported, ['EdDSA']);
  assert.deepEqual(oidc.json.response_types_supported, ['id_token']);
  assert.deepEqual(oidc.json.subject_types_supported, ['public']);
  // Other answers stay uncacheable.
  assert.equal((await req(gw, 'GET', '/healthz')).headers.get('cache-control'), 'no-store');

  // The keys were made at first start in <data_dir>/ca.
  for (const f of ['ca.key', 'ca.pem', 'jwt.key']) assert.ok(existsSync(join(gw.dataDir, 'ca', f)), f);
});

test('identity: the issuer is public_url; a restart publishes the same key', async () => {
  const dataDir = tempDataDir();
  let b = await startGateway({ dataDir, env: { SBX_PUBLIC_URL: 'https://sbx.example.com/' } });
  try {
    const oidc = await req(b, 'GET', '/.well-known/openid-configuration');
    assert.equal(oidc.json.issuer, 'https://sbx.example.com/');
    assert.equal(oidc.json.jwks_uri, 'https://sbx.example.com/.well-known/jwks.json');
    const before = (await req(b, 'GET', '/.well-known/jwks.json')).json;
    assert.equal((await b.stop()).code, 0);
    b = await startGateway({ dataDir });
    assert.deepEqual((await req(b, 'GET', '/.well-known/jwks.json')).json, before);
  } finally {
    await b.stop();
    removeDataDir(dataDir);
  }
});

test('identity: a damaged ca.key stops the gateway at start, naming the file', async () => {
  const dataDir = tempDataDir();
  const b = await startGateway({ dataDir });
  assert.equal((await b.stop()).code, 0);
  writeFileSync(join(dataDir, 'ca', 'ca.key'), 'not a key\n');
  try {
    await assert.rejects(startGateway({ dataDir }), /cannot open the installation's keys: .*ca\.key/);
  } finally {
    removeDataDir(dataDir);
  }
});

test('routing: 404 for unknown paths, 405 with Allow', async () => {
  assertProblem(assert, await req(gw, 'GET', '/v2/nothing'), 404, 'not-found');
  assertProblem(assert, await req(gw, 'GET', '/v1/sessions/'), 404, 'not-found');
  const r = await req(gw, 'PUT', '/v1/apps', { token: gw.admin });
  assertProblem(assert, r, 405, 'method-not-allowed');
  assert.equal(r.headers.get('allow'), 'POST, GET');
  const r2 = await req(gw, 'POST', '/v1/sessions/ses_x/messages/msg_y', { token: gw.key });
  assertProblem(assert, r2, 405, 'method-not-allowed');
  assert.equal(r2.headers.get('allow'), 'GET');
});

test('auth: 401 with WWW-Authenticate, 403 for the wrong kind of token', async () => {
  const none = await req(gw, 'GET', '/v1/sessions');
  assertProblem(assert, none, 401, 'unauthorized');
  assert.equal(none.headers.get('www-authenticate'), 'Bearer');
  assertProblem(assert, await req(gw, 'GET', '/v1/sessions', { token: 'sbx_' + 'A'.repeat(43) }), 401, 'unauthorized');
  assertProblem(assert, await req(gw, 'GET', '/v1/apps', { token: 'nonsense' }), 401, 'unauthorized');
  assertProblem(assert, await req(gw, 'GET', '/v1/apps', { headers: { Authorization: 'Basic abc' } }), 401, 'unauthorized');
  assertProblem(assert, await req(gw, 'GET', '/v1/apps', { token: gw.key }), 403, 'forbidden');
  assertProblem(assert, await req(gw, 'GET', '/v1/sessions', { token: gw.admin }), 403, 'forbidden');
  assertProblem(assert, await req(gw, 'POST', '/v1/workspaces', { token: gw.admin }), 403, 'forbidden');
  // Either kind may read sandboxes, the pool and events.
  for (const p of ['/v1/sandboxes', '/v1/pool', '/v1/events']) {
    assert.equal((await req(gw, 'GET', p, { token: gw.admin })).status, 200, p);
    assert.equal((await req(gw, 'GET', p, { token: gw.key })).status, 200, p);
  }
});

test('apps: create, defaults, validation, conflict, list, get, patch, delete', async () => {
  const c = await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'api-app.1', vcpuCount: 2 } });
  assert.equal(c.status, 201);
  const app = c.json;
  assert.equal(c.headers.get('location'), `/v1/apps/${app.id}`);
  assert.match(app.id, /^app_/);
  assert.equal(app.keepAliveSeconds, 60);
  assert.equal(app.vcpuCount, 2);
  assert.equal(app.memSizeMib, 256);
  assert.equal(app.driver, 'process');
  assert.equal(app.image, 'default');
  assert.equal(app.maxAttempts, 3);
  assert.deepEqual(app.command, ['/usr/bin/sbx-echo-agent']);
  assert.match(app.createdAt, ISO);

  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'api-app.1' } }), 409, 'conflict');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: {} }), 400, 'invalid-field', 'name');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'bad name' } }), 400, 'invalid-field', 'name');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'x', vcpuCount: '2' } }), 400, 'invalid-field', 'vcpuCount');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'x', vcpuCount: 33 } }), 422, 'invalid-value', 'vcpuCount');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'x', keepAliveSeconds: 0 } }), 422, 'invalid-value', 'keepAliveSeconds');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'x', memSizeMib: 16 } }), 422, 'invalid-value', 'memSizeMib');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'x', driver: 'docker' } }), 422, 'invalid-value', 'driver');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'x', command: [] } }), 422, 'invalid-value', 'command');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'x', command: ['a', 1] } }), 400, 'invalid-field', 'command');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'x', colour: 'red' } }), 400, 'unknown-field', 'colour');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: '{"name":' }), 400, 'malformed-json');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: '[1,2]' }), 400, 'malformed-json');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: '{"name":"a","name":"b"}' }), 400, 'malformed-json');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: '{"name":"x"}', headers: { 'Content-Type': 'text/plain' } }), 415, 'unsupported-media-type');
  assert.equal((await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'charset-ok' }, headers: { 'Content-Type': 'application/json; charset=utf-8' } })).status, 201);

  const g = await req(gw, 'GET', `/v1/apps/${app.id}`, { token: gw.admin });
  assert.equal(g.status, 200);
  assert.deepEqual(g.json, app);
  assertProblem(assert, await req(gw, 'GET', '/v1/apps/app_doesnotexist00000000', { token: gw.admin }), 404, 'not-found');

  // An App's image names an Image (or default): an unknown one is refused.
  assertProblem(assert, await req(gw, 'PATCH', `/v1/apps/${app.id}`, { token: gw.admin, body: { image: 'img2' } }), 422, 'invalid-value', 'image');
  const p = await req(gw, 'PATCH', `/v1/apps/${app.id}`, { token: gw.admin, body: { keepAliveSeconds: 5, command: ['/bin/cat'], image: 'default' } });
  assert.equal(p.status, 200);
  assert.equal(p.json.keepAliveSeconds, 5);
  assert.deepEqual(p.json.command, ['/bin/cat']);
  assert.equal(p.json.vcpuCount, 2);
  assertProblem(assert, await req(gw, 'PATCH', `/v1/apps/${app.id}`, { token: gw.admin, body: { id: 'app_x' } }), 400, 'unknown-field', 'id');
  assertProblem(assert, await req(gw, 'PATCH', `/v1/apps/${app.id}`, { token: gw.admin, body: { name: 'echo' } }), 409, 'conflict');
  assertProblem(assert, await req(gw, 'PATCH', `/v1/apps/${app.id}`, { token: gw.admin, body: { maxAttempts: 101 } }), 422, 'invalid-value', 'maxAttempts');
  assertProblem(assert, await req(gw, 'PATCH', '/v1/apps/app_nope', { token: gw.admin, body: {} }), 404, 'not-found');

  assert.equal((await req(gw, 'DELETE', `/v1/apps/${app.id}`, { token: gw.admin })).status, 204);
  assertProblem(assert, await req(gw, 'GET', `/v1/apps/${app.id}`, { token: gw.admin }), 404, 'not-found');
  assertProblem(assert, await req(gw, 'DELETE', `/v1/apps/${app.id}`, { token: gw.admin }), 404, 'not-found');
  assert.equal(sql(gw, `SELECT kind FROM events WHERE object_id='${app.id}' ORDER BY id`).split('\n').join(','),
    'app.created,app.updated,app.deleted');
});

test('apps: network egress policy, normal form, 422 naming the field, PATCH (issue 15)', async () => {
  const c = await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'egress-default' } });
  assert.equal(c.status, 201);
  assert.deepEqual(c.json.network, { egress: 'public' });
  const a = await req(gw, 'POST', '/v1/apps', {
    token: gw.admin,
    body: { name: 'egress-list', network: { egress: 'allowlist', allow: ['API.Example.com:443', '*.example.org', '11.22.33.0/24', '8.8.8.8', 'example.net.'] } },
  });
  assert.equal(a.status, 201);
  assert.deepEqual(a.json.network, { egress: 'allowlist', allow: ['api.example.com:443', '*.example.org', '11.22.33.0/24', '8.8.8.8/32', 'example.net'] });
  assert.deepEqual((await req(gw, 'GET', `/v1/apps/${a.json.id}`, { token: gw.admin })).json.network, a.json.network);

  const bad = async (network, status, code, field) =>
    assertProblem(assert, await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'egress-bad', network } }), status, code, field);
  await bad({ egress: 'some' }, 422, 'invalid-value', 'network.egress');
  await bad({ egress: 7 }, 400, 'invalid-field', 'network.egress');
  await bad('none', 400, 'invalid-field', 'network');
  await bad({ egress: 'none', colour: 1 }, 400, 'unknown-field', 'network.colour');
  await bad({ egress: 'allowlist' }, 422, 'invalid-value', 'network.allow');
  await bad({ egress: 'public', allow: ['11.22.33.0/24'] }, 422, 'invalid-value', 'network.allow');
  await bad({ egress: 'allowlist', allow: 'x.example.com' }, 400, 'invalid-field', 'network.allow');
  await bad({ egress: 'allowlist', allow: ['a.example.com', 5] }, 400, 'invalid-field', 'network.allow[1]');
  await bad({ egress: 'allowlist', allow: ['11.22.33.0/33'] }, 422, 'invalid-value', 'network.allow[0]');
  await bad({ egress: 'allowlist', allow: ['11.22.33.1/24'] }, 422, 'invalid-value', 'network.allow[0]');
  await bad({ egress: 'allowlist', allow: ['300.1.1.1'] }, 422, 'invalid-value', 'network.allow[0]');
  await bad({ egress: 'allowlist', allow: ['ok.example.com', 'bad_name.example.com'] }, 422, 'invalid-value', 'network.allow[1]');
  await bad({ egress: 'allowlist', allow: ['a.*.example.com'] }, 422, 'invalid-value', 'network.allow[0]');
  await bad({ egress: 'allowlist', allow: ['localhost'] }, 422, 'invalid-value', 'network.allow[0]');
  await bad({ egress: 'allowlist', allow: ['api.example.com:0'] }, 422, 'invalid-value', 'network.allow[0]');
  await bad({ egress: 'allowlist', allow: ['api.example.com:65536'] }, 422, 'invalid-value', 'network.allow[0]');
  await bad({ egress: 'allowlist', allow: ['2001:db8::/32'] }, 422, 'invalid-value', 'network.allow[0]');
  for (const blocked of ['10.1.0.0/16', '172.20.0.1', '192.168.0.0/24', '169.254.169.254', '127.0.0.1', '100.64.0.0/10', '0.0.0.0/0', '8.0.0.0/4', '224.0.0.1'])
    await bad({ egress: 'allowlist', allow: ['api.example.com', blocked] }, 422, 'invalid-value', 'network.allow[1]');
  const many = Array.from({ length: 65 }, (_, i) => `h${i}.example.com`);
  await bad({ egress: 'allowlist', allow: many }, 422, 'invalid-value', 'network.allow');
  assert.equal((await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'egress-64', network: { egress: 'allowlist', allow: many.slice(0, 64) } } })).status, 201);
  const problem = await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'egress-bad', network: { egress: 'allowlist', allow: ['169.254.0.0/16'] } } });
  assert.match(problem.json.detail, /blocked metadata range 169\.254\.0\.0\/16/);

  const p = await req(gw, 'PATCH', `/v1/apps/${c.json.id}`, { token: gw.admin, body: { network: { egress: 'none' } } });
  assert.equal(p.status, 200);
  assert.deepEqual(p.json.network, { egress: 'none' });
  const p2 = await req(gw, 'PATCH', `/v1/apps/${c.json.id}`, { token: gw.admin, body: { keepAliveSeconds: 9 } });
  assert.deepEqual(p2.json.network, { egress: 'none' }, 'a PATCH without network keeps the policy');
  assertProblem(assert, await req(gw, 'PATCH', `/v1/apps/${c.json.id}`, { token: gw.admin, body: { network: { egress: 'allowlist', allow: ['10.0.0.1'] } } }), 422, 'invalid-value', 'network.allow[0]');
  assert.deepEqual((await req(gw, 'GET', `/v1/apps/${c.json.id}`, { token: gw.admin })).json.network, { egress: 'none' }, 'a refused PATCH changes nothing');
  assert.equal(sql(gw, `SELECT network FROM apps WHERE id='${c.json.id}'`), '{"egress":"none"}');
  assert.match(sql(gw, `SELECT data FROM events WHERE object_id='${c.json.id}' AND kind='app.updated' ORDER BY id LIMIT 1`), /"network"/);
});

test('app delete is refused while it has live Sessions, and revokes its keys', async () => {
  const { app, key } = await newApp(gw, 'deletable');
  const s = await req(gw, 'POST', '/v1/sessions', { token: key, body: {} });
  assert.equal(s.status, 201);
  assertProblem(assert, await req(gw, 'DELETE', `/v1/apps/${app.id}`, { token: gw.admin }), 409, 'conflict');
  assert.equal((await req(gw, 'DELETE', `/v1/sessions/${s.json.id}`, { token: key })).status, 204);
  assert.equal((await req(gw, 'DELETE', `/v1/apps/${app.id}`, { token: gw.admin })).status, 204);
  assertProblem(assert, await req(gw, 'GET', '/v1/sessions', { token: key }), 401, 'unauthorized');
});

test('keys: created once with the secret, listed without it, revoked at once', async () => {
  const { app } = await newApp(gw, 'keys-app');
  const k = await req(gw, 'POST', `/v1/apps/${app.id}/keys`, { token: gw.admin, body: { name: 'ci' } });
  assert.equal(k.status, 201);
  assert.match(k.json.key, /^sbx_[A-Za-z0-9_-]{43}$/);
  assert.equal(k.json.key.length, 47);
  assert.equal(k.json.prefix, k.json.key.slice(0, 10));
  assert.equal(k.json.name, 'ci');
  assert.equal(k.json.appId, app.id);
  assert.equal(k.json.revokedAt, null);
  const noBody = await req(gw, 'POST', `/v1/apps/${app.id}/keys`, { token: gw.admin });
  assert.equal(noBody.status, 201);
  assert.equal(noBody.json.name, null);
  assertProblem(assert, await req(gw, 'POST', `/v1/apps/${app.id}/keys`, { token: gw.admin, body: { name: 5 } }), 400, 'invalid-field', 'name');
  assertProblem(assert, await req(gw, 'POST', `/v1/apps/${app.id}/keys`, { token: gw.admin, body: 'x', headers: { 'Content-Type': 'text/plain' } }), 415, 'unsupported-media-type');
  assertProblem(assert, await req(gw, 'POST', '/v1/apps/app_nope/keys', { token: gw.admin }), 404, 'not-found');

  const l = await req(gw, 'GET', `/v1/apps/${app.id}/keys`, { token: gw.admin });
  assert.equal(l.status, 200);
  assert.equal(l.json.nextCursor, null);
  assert.equal(l.json.items.length, 3);
  for (const item of l.json.items) assert.equal(item.key, undefined);

  assert.equal((await req(gw, 'GET', '/v1/sessions', { token: k.json.key })).status, 200);
  assert.equal((await req(gw, 'DELETE', `/v1/apps/${app.id}/keys/${k.json.id}`, { token: gw.admin })).status, 204);
  assert.equal((await req(gw, 'DELETE', `/v1/apps/${app.id}/keys/${k.json.id}`, { token: gw.admin })).status, 204);
  assertProblem(assert, await req(gw, 'GET', '/v1/sessions', { token: k.json.key }), 401, 'unauthorized');
  assertProblem(assert, await req(gw, 'DELETE', `/v1/apps/${app.id}/keys/key_nope`, { token: gw.admin }), 404, 'not-found');
  const after = await req(gw, 'GET', `/v1/apps/${app.id}/keys`, { token: gw.admin });
  assert.match(after.json.items.find((i) => i.id === k.json.id).revokedAt, ISO);
});

test('sessions: create, by name, list, get, patch, delete', async () => {
  const { key } = await newApp(gw, 'sessions-app', { keepAliveSeconds: 30 });
  const empty = await req(gw, 'POST', '/v1/sessions', { token: key });
  assert.equal(empty.status, 201);
  const s = empty.json;
  assert.equal(empty.headers.get('location'), `/v1/sessions/${s.id}`);
  assert.match(s.id, /^ses_/);
  assert.equal(s.state, 'idle');
  assert.equal(s.name, null);
  assert.equal(s.sandboxId, null);
  assert.equal(s.keepAliveSeconds, 30);
  assert.equal(s.keepAliveOverride, null);
  assert.equal(s.workspaceId, null);
  assert.deepEqual(s.metadata, {});
  assert.equal(s.activationCount, 0);
  assert.deepEqual(s.usage, { cpuUsec: 0, memPeakBytes: null });
  assert.equal(s.lastActivityAt, null);

  const named = await req(gw, 'POST', '/v1/sessions', { token: key, body: { name: 'alice', keepAliveSeconds: 10, metadata: { plan: 'pro' } } });
  assert.equal(named.status, 201);
  assert.equal(named.json.keepAliveSeconds, 10);
  assert.equal(named.json.keepAliveOverride, 10);
  assert.deepEqual(named.json.metadata, { plan: 'pro' });
  const again = await req(gw, 'POST', '/v1/sessions', { token: key, body: { name: 'alice' } });
  assert.equal(again.status, 200);
  assert.equal(again.json.id, named.json.id);

  assertProblem(assert, await req(gw, 'POST', '/v1/sessions', { token: key, body: { metadata: [] } }), 400, 'invalid-field', 'metadata');
  assertProblem(assert, await req(gw, 'POST', '/v1/sessions', { token: key, body: { keepAliveSeconds: 86401 } }), 422, 'invalid-value', 'keepAliveSeconds');
  assertProblem(assert, await req(gw, 'POST', '/v1/sessions', { token: key, body: { keepAliveSeconds: 1.5 } }), 400, 'invalid-field', 'keepAliveSeconds');
  assertProblem(assert, await req(gw, 'POST', '/v1/sessions', { token: key, body: { workspaceId: 'wsp_nope' } }), 404, 'not-found', 'workspaceId');
  assertProblem(assert, await req(gw, 'POST', '/v1/sessions', { token: key, body: { sandboxId: 'x' } }), 400, 'unknown-field', 'sandboxId');
  assertProblem(assert, await req(gw, 'POST', '/v1/sessions', { token: key, body: '{}', headers: { 'Content-Type': 'application/xml' } }), 415, 'unsupported-media-type');

  const g = await req(gw, 'GET', `/v1/sessions/${s.id}`, { token: key });
  assert.equal(g.status, 200);
  assert.deepEqual(g.json, s);

  const p = await req(gw, 'PATCH', `/v1/sessions/${named.json.id}`, { token: key, body: { metadata: { plan: 'free' }, keepAliveSeconds: null } });
  assert.equal(p.status, 200);
  assert.deepEqual(p.json.metadata, { plan: 'free' });
  assert.equal(p.json.keepAliveOverride, null);
  assert.equal(p.json.keepAliveSeconds, 30);
  const p2 = await req(gw, 'PATCH', `/v1/sessions/${named.json.id}`, { token: key, body: { keepAliveSeconds: 99 } });
  assert.equal(p2.json.keepAliveSeconds, 99);
  assert.deepEqual(p2.json.metadata, { plan: 'free' });
  assertProblem(assert, await req(gw, 'PATCH', `/v1/sessions/${named.json.id}`, { token: key, body: { name: 'bob' } }), 400, 'unknown-field', 'name');
  assertProblem(assert, await req(gw, 'PATCH', `/v1/sessions/${named.json.id}`, { token: key, body: { metadata: 'x' } }), 400, 'invalid-field', 'metadata');
  assertProblem(assert, await req(gw, 'PATCH', `/v1/sessions/${named.json.id}`, { token: key, body: '' }), 400, 'malformed-json');
  assertProblem(assert, await req(gw, 'PATCH', `/v1/sessions/${named.json.id}`, { token: key }), 415, 'unsupported-media-type');

  const list = await req(gw, 'GET', '/v1/sessions', { token: key });
  assert.equal(list.status, 200);
  assert.deepEqual(list.json.items.map((x) => x.id), [s.id, named.json.id]);
  assert.equal(list.json.nextCursor, null);

  assert.equal((await req(gw, 'DELETE', `/v1/sessions/${named.json.id}`, { token: key })).status, 204);
  assertProblem(assert, await req(gw, 'GET', `/v1/sessions/${named.json.id}`, { token: key }), 404, 'not-found');
  assertProblem(assert, await req(gw, 'DELETE', `/v1/sessions/${named.json.id}`, { token: key }), 404, 'not-found');
  assert.deepEqual((await req(gw, 'GET', '/v1/sessions', { token: key })).json.items.map((x) => x.id), [s.id]);
  // The name is free again after delete.
  assert.equal((await req(gw, 'POST', '/v1/sessions', { token: key, body: { name: 'alice' } })).status, 201);
  const kinds = sql(gw, `SELECT kind FROM events WHERE object_id='${named.json.id}' ORDER BY id`).split('\n').join(',');
  assert.equal(kinds, 'session.created,session.updated,session.updated,session.deleted');
});

test('messages: 202 durable enqueue, seq order, idempotency, list, get, errors', async () => {
  const { key } = await newApp(gw, 'messages-app', { maxAttempts: 5 });
  const s = (await req(gw, 'POST', '/v1/sessions', { token: key })).json;
  const base = `/v1/sessions/${s.id}/messages`;
  const m1 = await req(gw, 'POST', base, { token: key, body: { body: { hello: 'world' } } });
  assert.equal(m1.status, 202);
  assert.match(m1.json.id, /^msg_/);
  assert.equal(m1.json.sessionId, s.id);
  assert.equal(m1.json.seq, 1);
  assert.equal(m1.json.state, 'queued');
  assert.deepEqual(m1.json.body, { hello: 'world' });
  assert.equal(m1.json.reply, null);
  assert.equal(m1.json.error, null);
  assert.equal(m1.json.attempts, 0);
  assert.equal(m1.json.maxAttempts, 5);
  assert.equal(m1.json.sandboxId, null);
  assert.equal(m1.json.requestId, m1.headers.get('x-request-id'));
  assert.equal(m1.json.completedAt, null);
  assert.equal(m1.headers.get('location'), `${base}/${m1.json.id}`);
  // Any JSON value is a body.
  for (const [i, body] of [[2, 'text'], [3, 42], [4, null], [5, [1, { a: 2 }]]]) {
    const m = await req(gw, 'POST', base, { token: key, body: { body } });
    assert.equal(m.status, 202);
    assert.equal(m.json.seq, i);
    assert.deepEqual(m.json.body, body);
  }
  // Durable: the row is in the file when the 202 arrives.
  assert.equal(sql(gw, `SELECT state FROM messages WHERE id='${m1.json.id}'`), 'queued');

  const k1 = await req(gw, 'POST', base, { token: key, body: { body: { a: 1, b: 2 } }, headers: { 'Idempotency-Key': 'order-17' } });
  assert.equal(k1.status, 202);
  const k2 = await req(gw, 'POST', base, { token: key, body: '{"body":{"b":2,"a":1}}', headers: { 'Idempotency-Key': 'order-17' } });
  assert.equal(k2.status, 200);
  assert.equal(k2.json.id, k1.json.id);
  assert.equal(k2.json.seq, k1.json.seq);
  assertProblem(assert, await req(gw, 'POST', base, { token: key, body: { body: { a: 2 } }, headers: { 'Idempotency-Key': 'order-17' } }), 409, 'idempotency-conflict', 'Idempotency-Key');
  assertProblem(assert, await req(gw, 'POST', base, { token: key, body: { body: 1 }, headers: { 'Idempotency-Key': 'x'.repeat(256) } }), 400, 'invalid-parameter', 'Idempotency-Key');
  assertProblem(assert, await req(gw, 'POST', base, { token: key, body: { body: 1 }, headers: { 'Idempotency-Key': 'has space' } }), 400, 'invalid-parameter', 'Idempotency-Key');
  assert.equal(sql(gw, `SELECT count(*) FROM messages WHERE session_id='${s.id}'`), '6');

  assertProblem(assert, await req(gw, 'POST', base, { token: key, body: {} }), 400, 'invalid-field', 'body');
  assertProblem(assert, await req(gw, 'POST', base, { token: key, body: { body: 1, extra: 2 } }), 400, 'unknown-field', 'extra');
  assertProblem(assert, await req(gw, 'POST', base, { token: key }), 415, 'unsupported-media-type');
  assertProblem(assert, await req(gw, 'POST', base, { token: key, body: '' }), 400, 'malformed-json');
  assertProblem(assert, await req(gw, 'POST', base, { token: key, body: Buffer.from([0x7b, 0x22, 0x62, 0x6f, 0x64, 0x79, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]) }), 400, 'malformed-json');
  assertProblem(assert, await req(gw, 'POST', base, { token: key, body: '[' .repeat(5000) }), 400, 'malformed-json');
  assertProblem(assert, await req(gw, 'POST', '/v1/sessions/ses_nope/messages', { token: key, body: { body: 1 } }), 404, 'not-found');

  const g = await req(gw, 'GET', `${base}/${m1.json.id}`, { token: key });
  assert.equal(g.status, 200);
  assert.deepEqual(g.json, m1.json);
  assertProblem(assert, await req(gw, 'GET', `${base}/msg_nope`, { token: key }), 404, 'not-found');
  assertProblem(assert, await req(gw, 'GET', `${base}/${m1.json.id}?wait=abc`, { token: key }), 400, 'invalid-parameter', 'wait');
  assertProblem(assert, await req(gw, 'GET', `${base}/${m1.json.id}?wait=-1`, { token: key }), 400, 'invalid-parameter', 'wait');

  const l = await req(gw, 'GET', `${base}?limit=4`, { token: key });
  assert.equal(l.status, 200);
  assert.deepEqual(l.json.items.map((m) => m.seq), [1, 2, 3, 4]);
  assert.equal(typeof l.json.nextCursor, 'string');
  const l2 = await req(gw, 'GET', `${base}?limit=4&cursor=${l.json.nextCursor}`, { token: key });
  assert.deepEqual(l2.json.items.map((m) => m.seq), [5, 6]);
  assert.equal(l2.json.nextCursor, null);
  assertProblem(assert, await req(gw, 'GET', `${base}?limit=0`, { token: key }), 400, 'invalid-parameter', 'limit');
  assertProblem(assert, await req(gw, 'GET', `${base}?limit=201`, { token: key }), 400, 'invalid-parameter', 'limit');
  assertProblem(assert, await req(gw, 'GET', `${base}?cursor=zz`, { token: key }), 400, 'invalid-parameter', 'cursor');
  assertProblem(assert, await req(gw, 'GET', '/v1/sessions/ses_nope/messages', { token: key }), 404, 'not-found');

  // Session delete: the messages answer 404, the unfinished ones failed, bodies scrubbed.
  assert.equal((await req(gw, 'DELETE', `/v1/sessions/${s.id}`, { token: key })).status, 204);
  assertProblem(assert, await req(gw, 'GET', `${base}/${m1.json.id}`, { token: key }), 404, 'not-found');
  assertProblem(assert, await req(gw, 'GET', base, { token: key }), 404, 'not-found');
  assertProblem(assert, await req(gw, 'POST', base, { token: key, body: { body: 1 } }), 404, 'not-found');
  assert.equal(sql(gw, `SELECT count(*) FROM messages WHERE session_id='${s.id}' AND (state<>'failed' OR body<>'null')`), '0');
  assert.equal(sql(gw, `SELECT count(*) FROM events WHERE session_id='${s.id}' AND kind='message.queued'`), '6');
});

test('pagination walks every page exactly once', async () => {
  const { key } = await newApp(gw, 'paging-app');
  const ids = [];
  for (let i = 0; i < 7; i++) ids.push((await req(gw, 'POST', '/v1/sessions', { token: key })).json.id);
  const seen = [];
  let cursor = null;
  let pages = 0;
  do {
    const r = await req(gw, 'GET', `/v1/sessions?limit=3${cursor ? `&cursor=${cursor}` : ''}`, { token: key });
    assert.equal(r.status, 200);
    assert.ok(r.json.items.length <= 3);
    seen.push(...r.json.items.map((s) => s.id));
    cursor = r.json.nextCursor;
    pages++;
  } while (cursor);
  assert.deepEqual(seen, ids);
  assert.equal(pages, 3);
  // Apps page too (admin).
  const a = await req(gw, 'GET', '/v1/apps?limit=1', { token: gw.admin });
  assert.equal(a.json.items.length, 1);
  assert.equal(typeof a.json.nextCursor, 'string');
});

test('workspaces: directory created with owner and mode, attach, 409 while attached, delete', async () => {
  const { app, key } = await newApp(gw, 'ws-app');
  const c = await req(gw, 'POST', '/v1/workspaces', { token: key, body: { name: 'data' } });
  assert.equal(c.status, 201);
  const w = c.json;
  assert.match(w.id, /^wsp_/);
  assert.equal(w.appId, app.id);
  assert.equal(w.name, 'data');
  assert.equal(w.attachedSessions, 0);
  assert.equal(c.headers.get('location'), `/v1/workspaces/${w.id}`);
  const dir = join(gw.dataDir, 'workspaces', app.id, w.id);
  const st = statSync(dir);
  assert.ok(st.isDirectory());
  assert.equal(st.mode & 0o777, 0o770);
  if (process.getuid() === 0) {
    assert.equal(st.uid, 65534);
    assert.equal(st.gid, 65534);
  }
  writeFileSync(join(dir, 'file.txt'), 'kept');
  assert.equal((await req(gw, 'POST', '/v1/workspaces', { token: key })).status, 201);
  assertProblem(assert, await req(gw, 'POST', '/v1/workspaces', { token: key, body: { path: '/' } }), 400, 'unknown-field', 'path');

  const s = await req(gw, 'POST', '/v1/sessions', { token: key, body: { workspaceId: w.id } });
  assert.equal(s.status, 201);
  assert.equal(s.json.workspaceId, w.id);
  assert.equal((await req(gw, 'GET', `/v1/workspaces/${w.id}`, { token: key })).json.attachedSessions, 1);
  assertProblem(assert, await req(gw, 'DELETE', `/v1/workspaces/${w.id}`, { token: key }), 409, 'conflict');
  assert.ok(existsSync(join(dir, 'file.txt')));

  const l = await req(gw, 'GET', '/v1/workspaces', { token: key });
  assert.equal(l.json.items.length, 2);
  assert.equal((await req(gw, 'DELETE', `/v1/sessions/${s.json.id}`, { token: key })).status, 204);
  assert.equal((await req(gw, 'DELETE', `/v1/workspaces/${w.id}`, { token: key })).status, 204);
  assert.ok(!existsSync(dir));
  assertProblem(assert, await req(gw, 'GET', `/v1/workspaces/${w.id}`, { token: key }), 404, 'not-found');
  assertProblem(assert, await req(gw, 'DELETE', `/v1/workspaces/${w.id}`, { token: key }), 404, 'not-found');
  assert.equal(sql(gw, `SELECT kind FROM events WHERE object_id='${w.id}' ORDER BY id`).split('\n').join(','),
    'workspace.created,workspace.deleted');
});

test('workspaces: a failed create names no host path and keeps no row', async () => {
  const { app, key } = await newApp(gw, 'ws-fail');
  // The App's Workspace folder is a file: the directory cannot be made under it.
  mkdirSync(join(gw.dataDir, 'workspaces'), { recursive: true });
  writeFileSync(join(gw.dataDir, 'workspaces', app.id), 'not a directory');
  try {
    const r = await req(gw, 'POST', '/v1/workspaces', { token: key, body: { name: 'broken' } });
    assertProblem(assert, r, 500, 'internal');
    assert.ok(!r.text.includes(gw.dataDir), `the problem names a host path: ${r.text}`);
    assert.ok(!r.text.includes('/workspaces/'), `the problem names a host path: ${r.text}`);
    assert.match(r.json.detail, new RegExp(r.json.requestId));
    assert.equal((await req(gw, 'GET', '/v1/workspaces', { token: key })).json.items.length, 0);
  } finally {
    rmSync(join(gw.dataDir, 'workspaces', app.id));
  }
});

test('sandboxes and pool: list, get, stop request, 409 when ended', async () => {
  const { app, key } = await newApp(gw, 'sbx-app');
  const s = (await req(gw, 'POST', '/v1/sessions', { token: key })).json;
  // Sandboxes are written by workers; insert them as one would.
  sql(gw, `INSERT INTO sandboxes (id, state, driver, image, vcpu_count, mem_size_mib, worker_id, app_id, session_id,
             cold, boot_ms, created_at, ready_at, claimed_at, updated_at) VALUES
           ('sbx_itrunning00000000001', 'running', 'process', 'default', 1, 256, 'wrk_x', '${app.id}', '${s.id}', 1, 120,
            1700000000000, 1700000000100, 1700000000200, 1700000000200),
           ('sbx_itended0000000000001', 'terminated', 'process', 'default', 1, 256, 'wrk_x', '${app.id}', '${s.id}', 0, 80,
            1700000000000, 1700000000100, 1700000000200, 1700000000300),
           ('sbx_itwarm00000000000001', 'warm', 'process', 'default', 1, 256, 'wrk_x', NULL, NULL, 0, 90,
            1700000000000, 1700000000100, NULL, 1700000000100)`);
  const list = await req(gw, 'GET', '/v1/sandboxes', { token: key });
  assert.equal(list.status, 200);
  assert.deepEqual(list.json.items.map((b) => b.id).sort(), ['sbx_itended0000000000001', 'sbx_itrunning00000000001']);
  const all = await req(gw, 'GET', '/v1/sandboxes?limit=200', { token: gw.admin });
  assert.ok(all.json.items.some((b) => b.id === 'sbx_itwarm00000000000001'));

  const g = await req(gw, 'GET', '/v1/sandboxes/sbx_itrunning00000000001', { token: key });
  assert.equal(g.status, 200);
  assert.equal(g.json.state, 'running');
  assert.equal(g.json.appId, app.id);
  assert.equal(g.json.sessionId, s.id);
  assert.equal(g.json.cold, true);
  assert.equal(g.json.bootMs, 120);
  assert.deepEqual(g.json.usage, { cpuUsec: null, memPeakBytes: null, oomKills: 0 });
  assert.equal(g.json.terminatedAt, null);
  assert.equal(g.json.claimedAt, '2023-11-14T22:13:20.200Z');
  assertProblem(assert, await req(gw, 'GET', '/v1/sandboxes/sbx_itwarm00000000000001', { token: key }), 404, 'not-found');

  const d = await req(gw, 'DELETE', '/v1/sandboxes/sbx_itrunning00000000001', { token: key });
  assert.equal(d.status, 202);
  assert.equal(d.json.id, 'sbx_itrunning00000000001');
  assert.notEqual(sql(gw, "SELECT stop_requested_at FROM sandboxes WHERE id='sbx_itrunning00000000001'"), '');
  assertProblem(assert, await req(gw, 'DELETE', '/v1/sandboxes/sbx_itended0000000000001', { token: key }), 409, 'conflict');
  assertProblem(assert, await req(gw, 'DELETE', '/v1/sandboxes/sbx_nope', { token: gw.admin }), 404, 'not-found');

  const pool = await req(gw, 'GET', '/v1/pool', { token: key });
  assert.equal(pool.status, 200);
  assert.equal(pool.json.target, 2);
  const shape = pool.json.shapes.find((x) => x.driver === 'process' && x.image === 'default' && x.vcpuCount === 1 && x.memSizeMib === 256);
  assert.deepEqual(shape, { driver: 'process', image: 'default', vcpuCount: 1, memSizeMib: 256, warm: 1, booting: 0, claimed: 1, target: 2, coldActivations: 1, bootFailures: 0 });
});

test('events: audit trail in order, by session, with cursor', async () => {
  const { key } = await newApp(gw, 'events-app');
  const s = (await req(gw, 'POST', '/v1/sessions', { token: key, body: {} })).json;
  const m = (await req(gw, 'POST', `/v1/sessions/${s.id}/messages`, { token: key, body: { body: 1 }, headers: { 'X-Request-Id': 'it-events-1' } })).json;
  const r = await req(gw, 'GET', `/v1/events?sessionId=${s.id}`, { token: key });
  assert.equal(r.status, 200);
  assert.deepEqual(r.json.items.map((e) => e.kind), ['session.created', 'message.queued']);
  const ev = r.json.items[1];
  assert.equal(ev.objectType, 'message');
  assert.equal(ev.objectId, m.id);
  assert.equal(ev.sessionId, s.id);
  assert.equal(ev.requestId, 'it-events-1');
  assert.match(ev.actor, /^key:key_/);
  assert.deepEqual(ev.data, { seq: 1 });
  assert.match(ev.at, ISO);
  assert.ok(ev.id > r.json.items[0].id);
  const page = await req(gw, 'GET', `/v1/events?sessionId=${s.id}&limit=1`, { token: key });
  assert.equal(page.json.items.length, 1);
  assert.equal(page.json.nextCursor, String(page.json.items[0].id));
  const next = await req(gw, 'GET', `/v1/events?sessionId=${s.id}&limit=1&cursor=${page.json.nextCursor}`, { token: key });
  assert.equal(next.json.items[0].kind, 'message.queued');
  assertProblem(assert, await req(gw, 'GET', '/v1/events?limit=abc', { token: key }), 400, 'invalid-parameter', 'limit');
  assertProblem(assert, await req(gw, 'GET', '/v1/events?sessionId=bad', { token: key }), 400, 'invalid-parameter', 'sessionId');
  // Admin sees every App's events.
  const adm = await req(gw, 'GET', '/v1/events?limit=200', { token: gw.admin });
  assert.ok(adm.json.items.some((e) => e.kind === 'app.created'));
});

test('two gateways starting at once on one empty store agree on one admin token and one key', async () => {
  // Stateless gateways: several may start together on a fresh database (PostgreSQL, or one SQLite
  // file). Exactly one admin token may be printed, and it must work on both.
  const dataDir = tempDataDir();
  const [a, b] = await Promise.all([startGateway({ dataDir }), startGateway({ dataDir })]);
  try {
    const printed = [a.admin, b.admin].filter(Boolean);
    assert.equal(printed.length, 1, `admin tokens printed: ${printed.length}\n${a.stdout}\n${b.stdout}`);
    for (const gw of [a, b])
      assert.equal((await req(gw, 'GET', '/v1/apps', { token: printed[0] })).status, 200);
    assert.equal(sql(a, "SELECT count(*) FROM apps WHERE name = 'echo'"), '1');
    // They made the installation's keys at once in one ca_dir: both publish the same one.
    const [ka, kb] = await Promise.all([a, b].map((gw) => req(gw, 'GET', '/.well-known/jwks.json')));
    assert.deepEqual(ka.json, kb.json);
  } finally {
    await a.stop();
    await b.stop();
    removeDataDir(dataDir);
  }
});
