// auth_matrix.test.mjs: every operation in openapi.yaml, with every kind of caller: no token, a
// malformed token, a well-formed unknown key, a revoked key, the admin token, the owning App's key
// and another App's key. Expectations follow API.md: missing/invalid/revoked -> 401 with
// WWW-Authenticate: Bearer; the wrong kind of token -> 403; another App's object -> 404. The list
// comes from the spec, so an endpoint added there is tried here without editing this file, and an
// operation the gateway does not route (404 "no route" / 405) fails the test.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { removeDataDir, req, sql, newApp } from '../gateway/harness.mjs';
import { startGateway } from './rel_harness.mjs';
import { openapiOperations } from './openapi_ops.mjs';

const SPEC = process.env.SBX_OPENAPI ?? join(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '../../../openapi.yaml');
const ops = openapiOperations(SPEC);

let gw, a, b, revokedKey, ids;
before(async () => {
  // The matrix makes hundreds of failed auths from 127.0.0.1: lift the 429 limiter for it
  // (it.gateway.limits covers the limiter itself).
  gw = await startGateway({ extraArgs: ['--auth-fail-limit', '1000000'] });
  a = await newApp(gw, 'matrix-a');
  b = await newApp(gw, 'matrix-b');
  const k = await req(gw, 'POST', `/v1/apps/${a.app.id}/keys`, { token: gw.admin, body: { name: 'to-revoke' } });
  revokedKey = k.json.key;
  assert.equal((await req(gw, 'DELETE', `/v1/apps/${a.app.id}/keys/${k.json.id}`, { token: gw.admin })).status, 204);
  const ses = (await req(gw, 'POST', '/v1/sessions', { token: a.key, body: { name: 'm' } })).json;
  const msg = (await req(gw, 'POST', `/v1/sessions/${ses.id}/messages`, { token: a.key, body: { body: 1 } })).json;
  const ws = (await req(gw, 'POST', '/v1/workspaces', { token: a.key })).json;
  // Finished, so that its stream (GET .../stream) replays and ends rather than waiting.
  sql(gw, `UPDATE messages SET state = 'completed', reply = '1', completed_at = 1 WHERE id = '${msg.id}'`);
  // An endpoint at a public address (no worker runs here: nothing is sent to it).
  const hook = (await req(gw, 'POST', `/v1/apps/${a.app.id}/webhooks`, { token: gw.admin, body: { url: 'https://203.0.113.5/matrix', eventTypes: ['*'] } })).json;
  sql(gw, `INSERT INTO sandboxes (id, state, driver, image, vcpu_count, mem_size_mib, worker_id, app_id, session_id,
             created_at, updated_at) VALUES ('sbx_matrix00000000000001', 'running', 'process', 'default', 1, 256,
             'wrk_x', '${a.app.id}', '${ses.id}', 1, 1)`);
  // App A's objects, by path parameter name; every {param} in the spec must be one of these.
  // An Image (admin-only routes; no worker runs here: the row stands for a finished import).
  sql(gw, `INSERT INTO images (id, name, state, source, digest, layer_count, unpacked_bytes, created_at, ready_at)
           VALUES ('img_matrix000000000001', 'matrix-image', 'ready', 'upload', 'sha256:${'cd'.repeat(32)}', 1, 1, 1, 1)`);
  // An App secret (admin only; its value is never answered).
  const put = await req(gw, 'PUT', `/v1/apps/${a.app.id}/secrets/MATRIX_KEY`, { token: gw.admin, body: { value: 'matrix-value', hosts: ['api.example.com'] } });
  assert.equal(put.status, 201, put.text);
  ids = { appId: a.app.id, keyId: a.keyId, sessionId: ses.id, messageId: msg.id, workspaceId: ws.id,
          sandboxId: 'sbx_matrix00000000000001', webhookId: hook.id, imageId: 'img_matrix000000000001',
          secretName: 'MATRIX_KEY' };
});
after(async () => {
  const { code } = await gw.stop();
  removeDataDir(gw.dataDir);
  assert.equal(code, 0, gw.stderr);
});

function fill(path) {
  return path.replace(/\{(\w+)\}/g, (_, name) => {
    assert.ok(ids[name], `openapi.yaml uses path parameter {${name}} that this test cannot fill`);
    return ids[name];
  });
}

// A body the operation accepts syntactically, so that auth (not validation) decides the answer.
function bodyFor(op) {
  if (op.method === 'GET' || op.method === 'DELETE') return undefined;
  if (op.path === '/v1/apps') return { name: 'matrix-new' };
  if (op.path.endsWith('/messages')) return { body: 'x' };
  return {};
}

function assert401(res, what) {
  assert.equal(res.status, 401, `${what}: ${res.status} ${res.text}`);
  assert.equal(res.json?.code, 'unauthorized', what);
  assert.equal(res.headers.get('www-authenticate'), 'Bearer', what);
}

test('openapi.yaml lists the operations this test expects to walk', () => {
  assert.ok(ops.length >= 25, `only ${ops.length} operations parsed from ${SPEC}`);
  for (const o of ops) for (const s of o.security) assert.ok(['adminToken', 'appKey'].includes(s), `${o.method} ${o.path}: ${s}`);
});

test('no token, a malformed token, an unknown key and a revoked key answer 401 everywhere', async () => {
  let checked = 0;
  for (const op of ops) {
    const path = fill(op.path), body = bodyFor(op);
    const name = `${op.method} ${op.path}`;
    if (op.security.length === 0) {
      const res = await req(gw, op.method, path);
      assert.equal(res.status, 200, `${name} needs no token: ${res.status}`);
      continue;
    }
    assert401(await req(gw, op.method, path, { body }), `${name} without a token`);
    assert401(await req(gw, op.method, path, { body, token: 'not-a-token' }), `${name} malformed token`);
    assert401(await req(gw, op.method, path, { body, headers: { Authorization: `Basic ${a.key}` } }), `${name} Basic scheme`);
    assert401(await req(gw, op.method, path, { body, token: 'sbx_' + 'Q'.repeat(43) }), `${name} unknown key`);
    assert401(await req(gw, op.method, path, { body, token: 'sbx_admin_' + 'Q'.repeat(43) }), `${name} wrong admin token`);
    assert401(await req(gw, op.method, path, { body, token: revokedKey }), `${name} revoked key`);
    checked++;
  }
  assert.ok(checked >= 20);
});

test('the wrong kind of token answers 403; the right kind is let through', async () => {
  for (const op of ops) {
    if (op.security.length === 0) continue;
    const path = fill(op.path), body = bodyFor(op), name = `${op.method} ${op.path}`;
    const adminOk = op.security.includes('adminToken'), keyOk = op.security.includes('appKey');
    if (!adminOk) {
      const res = await req(gw, op.method, path, { body, token: gw.admin });
      assert.equal(res.status, 403, `${name} with the admin token: ${res.status} ${res.text}`);
      assert.equal(res.json.code, 'forbidden');
    }
    if (!keyOk) {
      const res = await req(gw, op.method, path, { body, token: a.key });
      assert.equal(res.status, 403, `${name} with an App key: ${res.status} ${res.text}`);
      assert.equal(res.json.code, 'forbidden');
    }
    // Reads by an allowed caller succeed: the route exists and auth lets it through.
    if (op.method === 'GET') {
      const res = await req(gw, op.method, path, { token: keyOk ? a.key : gw.admin });
      assert.equal(res.status, 200, `${name} by its owner: ${res.status} ${res.text}`);
      if (adminOk && keyOk) assert.equal((await req(gw, op.method, path, { token: gw.admin })).status, 200, `${name} admin`);
    }
  }
});

test("another App's key gets 404 on every object of App A, and never sees it in a list", async () => {
  const secrets = Object.values(ids).filter((v) => v !== a.app.id && v !== a.keyId);
  for (const op of ops) {
    if (!op.security.includes('appKey')) continue;
    const name = `${op.method} ${op.path}`;
    if (/\{\w+\}/.test(op.path)) {
      const res = await req(gw, op.method, fill(op.path), { body: bodyFor(op), token: b.key });
      assert.equal(res.status, 404, `${name} with App B's key: ${res.status} ${res.text}`);
      assert.equal(res.json.code, 'not-found', name);
    } else if (op.method === 'GET') {
      const res = await req(gw, op.method, op.path, { token: b.key });
      assert.equal(res.status, 200, name);
      for (const id of secrets) assert.ok(!res.text.includes(id), `${name} shows App A's ${id} to App B`);
    }
  }
  // App A's objects are all still there: nothing B sent (PATCH, DELETE, POST) touched them.
  assert.equal((await req(gw, 'GET', `/v1/sessions/${ids.sessionId}`, { token: a.key })).status, 200);
  assert.equal((await req(gw, 'GET', `/v1/workspaces/${ids.workspaceId}`, { token: a.key })).status, 200);
  assert.equal(sql(gw, "SELECT count(*) FROM sandboxes WHERE stop_requested_at IS NOT NULL"), '0');
});
