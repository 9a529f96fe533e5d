// workspace_delete.test.mjs: DELETE /v1/workspaces/{id} while a Sandbox may still have the
// Workspace. DELETE /v1/sessions answers 204 before the Session's Sandbox has stopped; until that
// Sandbox is terminated (or failed) the Workspace delete is refused with 409 and its data stays.
// The removal does not follow symlinks a Sandbox planted in the Workspace.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, writeFileSync, symlinkSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { startGateway, removeDataDir, req, sql, newApp, assertProblem, tempDataDir } from '../gateway/harness.mjs';

test('a Workspace whose Sandbox has not stopped is not deleted (409); then it is, without following symlinks', async () => {
  const gw = await startGateway();
  const outside = tempDataDir(); // a directory outside the data directory the agent points at
  try {
    const { app, key } = await newApp(gw, 'ws-app');
    const w = await req(gw, 'POST', '/v1/workspaces', { token: key });
    assert.equal(w.status, 201);
    const dir = join(gw.dataDir, 'workspaces', app.id, w.json.id);
    const s = await req(gw, 'POST', '/v1/sessions', { token: key, body: { workspaceId: w.json.id } });
    assert.equal(s.status, 201);
    // The Session's Sandbox, as a worker records it while it serves the Session.
    const now = Date.now();
    const sbx = 'sbx_wsdelete' + String(now).slice(-8);
    sql(gw, `INSERT INTO sandboxes (id, state, driver, image, vcpu_count, mem_size_mib, worker_id, app_id, session_id, created_at, updated_at)
             VALUES ('${sbx}', 'running', 'process', 'default', 1, 256, 'wrk_test', '${app.id}', '${s.json.id}', ${now}, ${now})`);
    // What the agent left in /workspace: data, and symlinks to the outside.
    writeFileSync(join(outside, 'precious'), 'keep me');
    mkdirSync(join(dir, 'sub'));
    writeFileSync(join(dir, 'sub', 'precious'), 'workspace data');
    symlinkSync(outside, join(dir, 'escape'));
    symlinkSync(join(outside, 'precious'), join(dir, 'sub', 'link'));

    assert.equal((await req(gw, 'DELETE', `/v1/sessions/${s.json.id}`, { token: key })).status, 204);
    for (const state of ['running', 'stopping']) {
      sql(gw, `UPDATE sandboxes SET state = '${state}' WHERE id = '${sbx}'`);
      const r = await req(gw, 'DELETE', `/v1/workspaces/${w.json.id}`, { token: key });
      assertProblem(assert, r, 409, 'conflict');
      assert.match(r.json.detail, /Sandbox/);
      assert.ok(existsSync(join(dir, 'sub', 'precious')), `the data went while the Sandbox was ${state}`);
      assert.equal((await req(gw, 'GET', `/v1/workspaces/${w.json.id}`, { token: key })).status, 200);
    }
    sql(gw, `UPDATE sandboxes SET state = 'terminated', terminated_at = ${Date.now()} WHERE id = '${sbx}'`);
    assert.equal((await req(gw, 'DELETE', `/v1/workspaces/${w.json.id}`, { token: key })).status, 204);
    assert.ok(!existsSync(dir), 'the Workspace directory is gone');
    assert.deepEqual(readdirSync(outside), ['precious'], 'the removal followed a planted symlink');
    assertProblem(assert, await req(gw, 'GET', `/v1/workspaces/${w.json.id}`, { token: key }), 404, 'not-found');
  } finally {
    await gw.stop();
    removeDataDir(gw.dataDir);
    removeDataDir(outside);
  }
});
