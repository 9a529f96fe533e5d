// quotas.test.mjs: an App's quotas against the real gateway (docs/tenants.md): Sessions,
// Workspaces, Workspace MiB and keep-alive refused past their bound with a problem naming the
// quota (429, or 422 for keepAliveSeconds), concurrent creates never both passing the last slot,
// the host's defaults for Apps without their own, GET /v1/apps/{id} showing use beside each quota,
// /metrics' per-App series; and Workspace sizes reserved against a small filesystem (507,
// nothing created or mounted).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { startGateway, removeDataDir, req, assertProblem, newApp, tempDataDir } from './harness.mjs';

async function withGateway(opts, fn) {
  const gw = await startGateway(opts);
  try {
    await fn(gw);
  } finally {
    const { code } = await gw.stop();
    removeDataDir(gw.dataDir);
    assert.equal(code, 0, gw.stderr);
  }
}

const admin = (gw, method, path, body) => req(gw, method, path, { token: gw.admin, body });

// The mount points under dir, from this process's mount table (the gateway shares it).
function mountsUnder(dir) {
  return readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
    .map((l) => l.split(' ')[4]).filter((m) => m && m.startsWith(dir + '/'));
}

test('quotas: 429/422 naming the quota, host defaults, usage on GET and /metrics', async () => {
  const args = ['--quota-sessions', '2', '--quota-keep-alive-seconds', '600'];
  await withGateway({ extraArgs: args }, async (gw) => {
    const { app, key } = await newApp(gw, 'bounded', {
      quotas: { sessions: 3, workspaces: 2, workspaceMib: 100, keepAliveSeconds: 300 },
    });
    assert.deepEqual(app.quotas,
      { liveSandboxes: 0, sessions: 3, workspaces: 2, workspaceMib: 100, keepAliveSeconds: 300 });
    assert.deepEqual(app.defaultedQuotas, ['liveSandboxes']);
    const other = await newApp(gw, 'defaulted');
    assert.deepEqual(other.app.quotas,
      { liveSandboxes: 0, sessions: 2, workspaces: 0, workspaceMib: 0, keepAliveSeconds: 600 });
    assert.equal(other.app.defaultedQuotas.length, 5);

    // Sessions: three, then 429; a name that exists is found, not refused; a delete frees one.
    const ses = (body) => req(gw, 'POST', '/v1/sessions', { token: key, body });
    const made = [];
    for (let i = 0; i < 3; i++) {
      const r = await ses({ name: `s${i}` });
      assert.equal(r.status, 201, r.text);
      made.push(r.json);
    }
    assertProblem(assert, await ses({}), 429, 'quota-sessions');
    assert.equal((await ses({ name: 's1' })).status, 200);
    assert.equal((await req(gw, 'DELETE', `/v1/sessions/${made[0].id}`, { token: key })).status, 204);
    // Keep-alive: above the App's quota is 422 on create and patch, at it is fine.
    assertProblem(assert, await ses({ keepAliveSeconds: 301 }), 422, 'quota-keep-alive-seconds', 'keepAliveSeconds');
    const at = await ses({ keepAliveSeconds: 300 });
    assert.equal(at.status, 201, at.text);
    assertProblem(assert, await req(gw, 'PATCH', `/v1/sessions/${at.json.id}`,
      { token: key, body: { keepAliveSeconds: 400 } }), 422, 'quota-keep-alive-seconds', 'keepAliveSeconds');
    // The host's default (2) for the App without a quota of its own.
    for (let i = 0; i < 2; i++)
      assert.equal((await req(gw, 'POST', '/v1/sessions', { token: other.key, body: {} })).status, 201);
    assertProblem(assert, await req(gw, 'POST', '/v1/sessions', { token: other.key, body: {} }), 429, 'quota-sessions');

    // The App's own keep-alive: above its quota is 422 naming the field the request changed; a
    // lowered quota lowers its Sessions' overrides with it.
    assertProblem(assert, await admin(gw, 'PATCH', `/v1/apps/${app.id}`, { keepAliveSeconds: 500 }),
      422, 'quota-keep-alive-seconds', 'keepAliveSeconds');
    assertProblem(assert, await admin(gw, 'PATCH', `/v1/apps/${app.id}`, { quotas: { keepAliveSeconds: 30 } }),
      422, 'quota-keep-alive-seconds', 'quotas.keepAliveSeconds');
    const lowered = await admin(gw, 'PATCH', `/v1/apps/${app.id}`, { keepAliveSeconds: 30, quotas: { keepAliveSeconds: 30 } });
    assert.equal(lowered.status, 200, lowered.text);
    assert.equal(lowered.json.quotas.keepAliveSeconds, 30);
    assert.equal((await req(gw, 'GET', `/v1/sessions/${at.json.id}`, { token: key })).json.keepAliveSeconds, 30);
    assertProblem(assert, await admin(gw, 'POST', '/v1/apps', { name: 'greedy', keepAliveSeconds: 700 }),
      422, 'quota-keep-alive-seconds', 'keepAliveSeconds');
    const short = await admin(gw, 'POST', '/v1/apps', { name: 'short', quotas: { keepAliveSeconds: 20 } });
    assert.equal(short.status, 201, short.text);
    assert.equal(short.json.keepAliveSeconds, 20, 'the default keep-alive is lowered to the quota');
    assertProblem(assert, await admin(gw, 'PATCH', `/v1/apps/${app.id}`, { quotas: { sessions: -1 } }),
      422, 'invalid-value', 'quotas.sessions');

    // Workspaces: their number and their MiB; sizeMib above the host's largest is 422.
    const ws = (body) => req(gw, 'POST', '/v1/workspaces', { token: key, body });
    assertProblem(assert, await ws({ sizeMib: 65537 }), 422, 'invalid-value', 'sizeMib');
    assert.equal((await ws({ sizeMib: 64 })).status, 201);
    const mib = await ws({ sizeMib: 64 });
    assertProblem(assert, mib, 429, 'quota-workspace-mib', 'sizeMib');
    assert.match(mib.json.detail, /64 MiB of its quota of 100/);
    assert.equal((await ws({ sizeMib: 32 })).status, 201);
    assertProblem(assert, await ws({ sizeMib: 16 }), 429, 'quota-workspaces');

    // Use beside each quota.
    const got = await admin(gw, 'GET', `/v1/apps/${app.id}`);
    assert.equal(got.status, 200);
    assert.deepEqual(got.json.usage, { liveSandboxes: 0, sessions: 3, workspaces: 2, workspaceMib: 96 });
    assert.equal(got.json.quotas.sessions, 3);

    // Concurrent creates for the last slot: exactly one passes.
    assert.equal((await admin(gw, 'PATCH', `/v1/apps/${app.id}`, { quotas: { sessions: 4 } })).status, 200);
    const racing = await Promise.all(Array.from({ length: 6 }, () => ses({})));
    assert.deepEqual(racing.map((r) => r.status).sort(), [201, 429, 429, 429, 429, 429]);
    // null: back to the host's default.
    const reset = await admin(gw, 'PATCH', `/v1/apps/${app.id}`, { quotas: { sessions: null } });
    assert.equal(reset.json.quotas.sessions, 2);
    assert.ok(reset.json.defaultedQuotas.includes('sessions'));

    const metrics = (await req(gw, 'GET', '/metrics')).text;
    for (const line of [
      `sbx_app_quota_usage{app="${app.id}",quota="sessions"} 4`,
      `sbx_app_quota_usage{app="${app.id}",quota="workspaceMib"} 96`,
      `sbx_app_quota_usage{app="${app.id}",quota="liveSandboxes"} 0`,
      `sbx_app_quota{app="${app.id}",quota="sessions"} 2`,
      `sbx_app_quota{app="${app.id}",quota="workspaces"} 2`,
      `sbx_app_quota{app="${other.app.id}",quota="keepAliveSeconds"} 600`,
    ]) assert.ok(metrics.split('\n').includes(line), `no line ${line} in /metrics`);
  });
});

// A filesystem of 256 MiB at <data dir>/workspaces, where the Workspaces' images go: their sizes
// are promised against it less disk_reserve_mib (32), whatever the sizes' quotas allow.
test('Workspace sizes are reserved against the data filesystem: 507, nothing made or mounted',
  { skip: process.getuid() !== 0 && 'mounts a filesystem and Workspaces: needs root' }, async () => {
    const dataDir = tempDataDir();
    const wsDir = join(dataDir, 'workspaces');
    mkdirSync(wsDir, { mode: 0o711 });
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256m,mode=0711', 'sbx-test-quota', wsDir]);
    // removeDataDir unmounts it (and any Workspace in it) with the data directory, also when the
    // gateway does not come up.
    const args = ['--workspace-max-mib', '1048576', '--disk-reserve-mib', '32'];
    try {
      await withGateway({ dataDir, extraArgs: args }, async (gw) => {
        const ws = (sizeMib) => req(gw, 'POST', '/v1/workspaces', { token: gw.key, body: { sizeMib } });
        const tib = await ws(1048576);
        assertProblem(assert, tib, 507, 'workspace-disk-full', 'sizeMib');
        assert.doesNotMatch(tib.json.detail, new RegExp(dataDir), 'no host path in the answer');
        for (let i = 0; i < 4; i++) assertProblem(assert, await ws(65536), 507, 'workspace-disk-full');
        assert.deepEqual(readdirSync(wsDir), [], 'nothing made for a refused Workspace');
        assert.deepEqual(mountsUnder(wsDir), []);

        const first = await ws(128);
        assert.equal(first.status, 201, first.text);
        assertProblem(assert, await ws(128), 507, 'workspace-disk-full');
        const second = await ws(64);
        assert.equal(second.status, 201, second.text);
        const list = await req(gw, 'GET', '/v1/workspaces', { token: gw.key });
        assert.deepEqual(list.json.items.map((w) => w.id).sort(), [first.json.id, second.json.id].sort());
        assert.equal(mountsUnder(wsDir).length, 2, 'the two accepted Workspaces are mounted, no other');
        // A deleted Workspace gives its size back.
        assert.equal((await req(gw, 'DELETE', `/v1/workspaces/${first.json.id}`, { token: gw.key })).status, 204);
        assert.equal((await ws(128)).status, 201);
      });
    } finally {
      removeDataDir(dataDir);
    }
  });
