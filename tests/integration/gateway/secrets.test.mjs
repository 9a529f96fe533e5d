// secrets.test.mjs: App secrets through the real gateway (docs/secrets.md): write-only (no answer,
// log or event ever holds a value), rotation by PUT, the 422s naming the field, the clash between
// an App's env and its secrets, and at rest only ciphertext: the database file and its WAL never
// hold the value, and the key is a 0600 file outside it. One gateway for the whole file.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, statSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { startGateway, removeDataDir, req, sql, newApp, assertProblem, onPostgres } from './harness.mjs';

const VALUE = 'sk-test-' + 'Zq7'.repeat(10) + '-do-not-leak';
const ROTATED = 'sk-rotated-' + 'Wy4'.repeat(10);
let gw;
let app;
let key;

before(async () => {
  gw = await startGateway();
  ({ app, key } = await newApp(gw, 'secrets-app', { env: { PLAIN: 'visible' } }));
});

after(async () => {
  const { code } = await gw.stop();
  const logs = gw.stderr + gw.stdout;
  removeDataDir(gw.dataDir);
  assert.equal(code, 0, gw.stderr);
  assert.ok(!logs.includes(VALUE) && !logs.includes(ROTATED), 'a secret value is in the logs');
});

const path = (name) => `/v1/apps/${app.id}/secrets/${name}`;

test('PUT creates, then replaces; reads give names, hosts and times, never the value', async () => {
  const put = await req(gw, 'PUT', path('MODEL_KEY'), {
    token: gw.admin, body: { value: VALUE, hosts: ['API.Example.com', '*.example.org', 'api.example.com'] },
  });
  assert.equal(put.status, 201, put.text);
  assert.equal(put.headers.get('location'), path('MODEL_KEY'));
  assert.deepEqual(Object.keys(put.json).sort(), ['appId', 'createdAt', 'hosts', 'name', 'updatedAt']);
  assert.equal(put.json.name, 'MODEL_KEY');
  assert.deepEqual(put.json.hosts, ['api.example.com', '*.example.org']);
  assert.ok(!put.text.includes(VALUE));

  const one = await req(gw, 'GET', path('MODEL_KEY'), { token: gw.admin });
  assert.equal(one.status, 200);
  assert.deepEqual(one.json, put.json);
  const list = await req(gw, 'GET', `/v1/apps/${app.id}/secrets`, { token: gw.admin });
  assert.equal(list.status, 200);
  assert.deepEqual(list.json.items, [put.json]);
  assert.equal(list.json.nextCursor, null);

  // Rotation: 200, same createdAt, a later updatedAt.
  const again = await req(gw, 'PUT', path('MODEL_KEY'), {
    token: gw.admin, body: { value: ROTATED, hosts: ['api.example.com'] },
  });
  assert.equal(again.status, 200, again.text);
  assert.equal(again.json.createdAt, put.json.createdAt);
  assert.ok(again.json.updatedAt >= put.json.updatedAt);
  assert.deepEqual(again.json.hosts, ['api.example.com']);

  // The App itself shows its env, not its secrets.
  const a = await req(gw, 'GET', `/v1/apps/${app.id}`, { token: gw.admin });
  assert.ok(!a.text.includes(VALUE) && !a.text.includes(ROTATED) && !a.text.includes('MODEL_KEY'));

  // Admin only.
  assertProblem(assert, await req(gw, 'GET', `/v1/apps/${app.id}/secrets`, { token: key }), 403, 'forbidden');
  assertProblem(assert, await req(gw, 'PUT', path('OTHER'), { token: key, body: { value: 'x', hosts: ['a.example.com'] } }), 403, 'forbidden');

  // Events: names only.
  const events = sql(gw, `SELECT kind || ' ' || data FROM events WHERE kind LIKE 'secret.%' ORDER BY id`).split('\n');
  assert.equal(events.length, 2);
  assert.match(events[0], /^secret\.put \{"name":"MODEL_KEY","created":true\}$/);
  assert.match(events[1], /^secret\.put \{"name":"MODEL_KEY","created":false\}$/);
});

test('bad input answers 422 naming the field', async () => {
  const good = { value: 'v', hosts: ['api.example.com'] };
  const cases = [
    ['1KEY', good, 'name'],
    ['MODEL-KEY', good, 'name'],
    ['SBX_TOKEN', good, 'name'],
    ['SBX_MINE', good, 'name'],
    ['SSL_CERT_FILE', good, 'name'],
    ['NODE_EXTRA_CA_CERTS', good, 'name'],
    ['K', { value: 'x'.repeat(65537), hosts: ['api.example.com'] }, 'value'],
    ['K', { value: 'v', hosts: [] }, 'hosts'],
    ['K', { value: 'v', hosts: ['api.example.com', '10.1.2.3'] }, 'hosts[1]'],
    ['K', { value: 'v', hosts: ['169.254.169.254'] }, 'hosts[0]'],
    ['K', { value: 'v', hosts: ['93.184.216.34'] }, 'hosts[0]'],
    ['K', { value: 'v', hosts: ['[::1]'] }, 'hosts[0]'],
    ['K', { value: 'v', hosts: ['localhost'] }, 'hosts[0]'],
    ['K', { value: 'v', hosts: ['metadata.google.internal'] }, 'hosts[0]'],
    ['K', { value: 'v', hosts: ['not a host'] }, 'hosts[0]'],
    ['K', { value: 'v', hosts: ['*.com'] }, 'hosts[0]'],
    ['PLAIN', good, 'name'], // the App's env has it
  ];
  for (const [name, body, field] of cases) {
    const res = await req(gw, 'PUT', path(name), { token: gw.admin, body });
    assertProblem(assert, res, 422, 'invalid-value', field);
  }
  // A 64 KiB value is fine.
  const big = await req(gw, 'PUT', path('BIG'), { token: gw.admin, body: { value: 'b'.repeat(65536), hosts: ['x.example.net'] } });
  assert.equal(big.status, 201, big.text);
  // Missing or mistyped members.
  assertProblem(assert, await req(gw, 'PUT', path('K'), { token: gw.admin, body: { hosts: ['a.example.com'] } }), 400, 'invalid-field', 'value');
  assertProblem(assert, await req(gw, 'PUT', path('K'), { token: gw.admin, body: { value: 'v' } }), 400, 'invalid-field', 'hosts');
  assertProblem(assert, await req(gw, 'PUT', path('K'), { token: gw.admin, body: { value: 'v', hosts: ['a.example.com'], x: 1 } }), 400, 'unknown-field');
  // An unknown App.
  assertProblem(assert, await req(gw, 'PUT', '/v1/apps/app_nosuchapp0000000000/secrets/K', { token: gw.admin, body: good }), 404, 'not-found');
  // An App update whose env names a secret, or a CA bundle variable of an App with secrets.
  assertProblem(assert, await req(gw, 'PATCH', `/v1/apps/${app.id}`, { token: gw.admin, body: { env: { MODEL_KEY: 'x' } } }), 422, 'invalid-value', 'env');
  assertProblem(assert, await req(gw, 'PATCH', `/v1/apps/${app.id}`, { token: gw.admin, body: { env: { SSL_CERT_FILE: '/x' } } }), 422, 'invalid-value', 'env');
  const ok = await req(gw, 'PATCH', `/v1/apps/${app.id}`, { token: gw.admin, body: { env: { PLAIN: 'still' } } });
  assert.equal(ok.status, 200, ok.text);
});

test('at rest: the database holds no value, the key is a 0600 file outside it', { skip: onPostgres }, async () => {
  const keyFile = join(gw.dataDir, 'ca', 'secrets.key');
  assert.equal(statSync(keyFile).mode & 0o777, 0o600);
  assert.match(readFileSync(keyFile, 'utf8'), /^[0-9a-f]{64}\n$/);
  // What the store keeps: nonce, ciphertext (value + 16-byte tag), the key's id.
  const row = sql(gw, `SELECT length(nonce), length(ciphertext), key_id FROM app_secrets WHERE name = 'MODEL_KEY'`);
  assert.equal(row, `12|${ROTATED.length + 16}|${row.split('|')[2]}`);
  assert.match(row.split('|')[2], /^[0-9a-f]{16}$/);
  for (const f of ['sbx.db', 'sbx.db-wal']) {
    const p = join(gw.dataDir, f);
    if (!existsSync(p)) continue;
    const bytes = readFileSync(p);
    assert.equal(bytes.indexOf(VALUE), -1, `${f} holds the first value`);
    assert.equal(bytes.indexOf(ROTATED), -1, `${f} holds the rotated value`);
  }
});

test('DELETE removes it; deleting the App deletes its secrets', async () => {
  assert.equal((await req(gw, 'DELETE', path('BIG'), { token: gw.admin })).status, 204);
  assertProblem(assert, await req(gw, 'GET', path('BIG'), { token: gw.admin }), 404, 'not-found');
  assertProblem(assert, await req(gw, 'DELETE', path('BIG'), { token: gw.admin }), 404, 'not-found');
  const ev = sql(gw, `SELECT data FROM events WHERE kind = 'secret.deleted'`);
  assert.equal(ev, '{"name":"BIG"}');

  const { app: other } = await newApp(gw, 'secrets-gone');
  const put = await req(gw, 'PUT', `/v1/apps/${other.id}/secrets/K`, { token: gw.admin, body: { value: 'v', hosts: ['a.example.com'] } });
  assert.equal(put.status, 201);
  const del = await req(gw, 'DELETE', `/v1/apps/${other.id}`, { token: gw.admin });
  assert.equal(del.status, 204, del.text);
  assert.equal(sql(gw, `SELECT count(*) FROM app_secrets WHERE app_id = '${other.id}'`), '0');
});
