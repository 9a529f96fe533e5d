// isolation.test.mjs: an App key never sees another App's objects: every id of App A answers App
// B's key exactly like an id that does not exist (same status, code, title and detail).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, removeDataDir, req, sql, newApp } from './harness.mjs';

let gw, a, b, ses, msg, ws;
before(async () => {
  gw = await startGateway();
  a = await newApp(gw, 'tenant-a');
  b = await newApp(gw, 'tenant-b');
  ses = (await req(gw, 'POST', '/v1/sessions', { token: a.key, body: { name: 'shared-name' } })).json;
  msg = (await req(gw, 'POST', `/v1/sessions/${ses.id}/messages`, { token: a.key, body: { body: 'secret' } })).json;
  ws = (await req(gw, 'POST', '/v1/workspaces', { token: a.key })).json;
  sql(gw, `INSERT INTO sandboxes (id, state, driver, image, vcpu_count, mem_size_mib, worker_id, app_id, session_id,
             created_at, updated_at) VALUES ('sbx_isolation0000000001', 'running', 'process', 'default', 1, 256,
             'wrk_x', '${a.app.id}', '${ses.id}', 1, 1)`);
});
after(async () => {
  const { code } = await gw.stop();
  removeDataDir(gw.dataDir);
  assert.equal(code, 0, gw.stderr);
});

// The parts of a problem that must not reveal whether the id exists elsewhere.
function shape(res) {
  return { status: res.status, code: res.json?.code, title: res.json?.title, detail: res.json?.detail, field: res.json?.field };
}

async function sameAsMissing(method, foreignPath, missingPath, body) {
  const foreign = await req(gw, method, foreignPath, { token: b.key, body });
  const missing = await req(gw, method, missingPath, { token: b.key, body });
  assert.equal(foreign.status, 404, `${method} ${foreignPath}: ${foreign.text}`);
  assert.deepEqual(shape(foreign), shape(missing), `${method} ${foreignPath}`);
}

test('another App\'s Session, messages, Workspace and Sandbox answer 404 like missing ids', async () => {
  const S = ses.id, M = msg.id, W = ws.id;
  const nS = 'ses_00000000000000000000', nM = 'msg_00000000000000000000', nW = 'wsp_00000000000000000000';
  await sameAsMissing('GET', `/v1/sessions/${S}`, `/v1/sessions/${nS}`);
  await sameAsMissing('PATCH', `/v1/sessions/${S}`, `/v1/sessions/${nS}`, { metadata: {} });
  await sameAsMissing('DELETE', `/v1/sessions/${S}`, `/v1/sessions/${nS}`);
  await sameAsMissing('GET', `/v1/sessions/${S}/messages`, `/v1/sessions/${nS}/messages`);
  await sameAsMissing('POST', `/v1/sessions/${S}/messages`, `/v1/sessions/${nS}/messages`, { body: 1 });
  await sameAsMissing('GET', `/v1/sessions/${S}/messages/${M}`, `/v1/sessions/${nS}/messages/${nM}`);
  await sameAsMissing('GET', `/v1/sessions/${S}/messages/${M}?wait=1`, `/v1/sessions/${nS}/messages/${nM}?wait=1`);
  await sameAsMissing('GET', `/v1/workspaces/${W}`, `/v1/workspaces/${nW}`);
  await sameAsMissing('DELETE', `/v1/workspaces/${W}`, `/v1/workspaces/${nW}`);
  await sameAsMissing('GET', '/v1/sandboxes/sbx_isolation0000000001', '/v1/sandboxes/sbx_00000000000000000000');
  await sameAsMissing('DELETE', '/v1/sandboxes/sbx_isolation0000000001', '/v1/sandboxes/sbx_00000000000000000000');
});

test('another App\'s Workspace cannot be attached (404 on workspaceId, like a missing one)', async () => {
  const foreign = await req(gw, 'POST', '/v1/sessions', { token: b.key, body: { workspaceId: ws.id } });
  const missing = await req(gw, 'POST', '/v1/sessions', { token: b.key, body: { workspaceId: 'wsp_00000000000000000000' } });
  assert.equal(foreign.status, 404);
  assert.equal(foreign.json.field, 'workspaceId');
  assert.deepEqual(shape(foreign), shape(missing));
});

test('lists, names and events are per App', async () => {
  for (const p of ['/v1/sessions', '/v1/workspaces', '/v1/sandboxes']) {
    const r = await req(gw, 'GET', p, { token: b.key });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.items.filter((x) => x.appId !== b.app.id), [], p);
  }
  assert.equal((await req(gw, 'GET', '/v1/sessions', { token: b.key })).json.items.length, 0);
  // The same Session name in another App is another Session.
  const own = await req(gw, 'POST', '/v1/sessions', { token: b.key, body: { name: 'shared-name' } });
  assert.equal(own.status, 201);
  assert.notEqual(own.json.id, ses.id);
  const ev = await req(gw, 'GET', `/v1/events?sessionId=${ses.id}`, { token: b.key });
  assert.equal(ev.status, 200);
  assert.deepEqual(ev.json.items, []);
  const all = await req(gw, 'GET', '/v1/events?limit=200', { token: b.key });
  assert.ok(all.json.items.length > 0);
  for (const e of all.json.items) assert.equal(e.appId, b.app.id);
  // Nothing of App A changed through B's attempts.
  const still = await req(gw, 'GET', `/v1/sessions/${ses.id}/messages/${msg.id}`, { token: a.key });
  assert.equal(still.status, 200);
  assert.equal(still.json.body, 'secret');
  assert.equal(sql(gw, "SELECT count(*) FROM sandboxes WHERE stop_requested_at IS NOT NULL"), '0');
});
