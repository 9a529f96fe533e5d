// nfs_e2e.test.mjs: it.nfs.qemu_e2e, issue 6 end to end on real TCG microVMs: the real gateway
// and sbx-worker, an App with driver qemu and a Workspace. The Session's echo agent writes a file
// in /workspace of its microVM (mounted from sbx's own NFS export); while it runs the Sandbox has
// its export and its TCP 2049 firewall element; after keep-alive expiry both are gone and the data
// is still on the host; the next message lands in a new VM that reads the same file. Another
// App's Session cannot attach the Workspace (404). The next message goes to a pre-started VM (the
// App turned to prestart meanwhile), whose guest agent mounts the Workspace on the context line,
// before the first message. Three VMs in all.
//
// Uses the worker tests' harness (SBX_GATEWAY_BIN, SBX_WORKER_BIN), the guest_image fixture, root
// (firewall, taps) and nfs-ganesha.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { startSbx, req } from '../worker/harness.mjs';

// Whether the firewall's `nfs` set (TCP 2049 allowed) holds addr.
function nfsElement(addr) {
  const out = execFileSync('nft', ['list', 'set', 'inet', 'sbx', 'nfs'], { encoding: 'utf8' });
  return out.includes(`${addr} `) || out.includes(`${addr},`) || out.includes(`${addr}\n`) || out.includes(`${addr} }`);
}

// The pid of sbx's ganesha for dataDir while it runs, else 0.
function ganeshaPid(dataDir) {
  const pidFile = join(dataDir, 'run', 'ganesha', 'ganesha.pid');
  if (!existsSync(pidFile)) return 0;
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').startsWith('ganesha') ? pid : 0;
  } catch {
    return 0;
  }
}

// Stops a ganesha the test left running (a failed assertion) and waits until it has exited: it
// writes into its directory until then, and the data dir is removed next.
async function stopGanesha(dataDir) {
  const pid = ganeshaPid(dataDir);
  if (!pid) return;
  try {
    process.kill(pid, 'SIGTERM');
  } catch {}
  for (let i = 0; i < 100 && ganeshaPid(dataDir) === pid; i++) await new Promise((r) => setTimeout(r, 100));
  try {
    process.kill(pid, 'SIGKILL');
  } catch {}
}

test('a Workspace file survives Sandbox replacement through the NFS export; another App cannot attach it', { timeout: 280000 }, async () => {
  const sbx = await startSbx({
    workers: 1,
    env: { SBX_POOL_SIZE: '1', SBX_MESSAGE_TIMEOUT: '60', SBX_LEASE_MS: '90000', SBX_QEMU_ACCEL: 'tcg' },
  });
  try {
    const { app, key } = await sbx.app('vmws', { driver: 'qemu', keepAliveSeconds: 6, memSizeMib: 256, vcpuCount: 1, maxAttempts: 1 });
    const ws = await req(sbx.gw, 'POST', '/v1/workspaces', { token: key, body: {} });
    assert.equal(ws.status, 201, ws.text);
    const session = await sbx.session(key, { workspaceId: ws.json.id });

    // Attached to a live Session: deleting it is refused.
    const del = await req(sbx.gw, 'DELETE', `/v1/workspaces/${ws.json.id}`, { token: key });
    assert.equal(del.status, 409, `deleting an attached Workspace: ${del.status} ${del.text}`);

    // Another App: the Workspace does not exist for it.
    const other = await sbx.app('other', { driver: 'qemu' });
    const denied = await req(sbx.gw, 'POST', '/v1/sessions', { token: other.key, body: { workspaceId: ws.json.id } });
    assert.equal(denied.status, 404, `another App's Session attached the Workspace: ${denied.status} ${denied.text}`);

    const m1 = await sbx.roundTrip(key, session.id, { writeFile: { path: '/workspace/kept.txt', data: 'durable over NFS' } }, 120);
    assert.equal(m1.state, 'completed', m1.error);
    assert.equal(m1.reply.writeFile?.ok, true, JSON.stringify(m1.reply));
    const addr1 = sbx.sql(`SELECT net_address FROM sandboxes WHERE id = '${m1.sandboxId}'`);
    // Named "<installation>-<sandboxId>.export": tagged with the installation id (settings).
    const installation = sbx.sql("SELECT value FROM settings WHERE key = 'installation_id'");
    const export1 = join(sbx.dataDir, 'run', 'ganesha', 'exports', `${installation}-${m1.sandboxId}.export`);
    // While the Sandbox runs (keep-alive): its export admits its address, its 2049 element exists.
    const running = sbx.sql(`SELECT state FROM sandboxes WHERE id = '${m1.sandboxId}'`);
    assert.notEqual(running, 'terminated', 'the Sandbox ended before its keep-alive (6 s)');
    assert.ok(existsSync(export1), `no export for the running Sandbox ${m1.sandboxId}`);
    assert.match(readFileSync(export1, 'utf8'), new RegExp(`Clients = ${addr1.replace(/\./g, '\\.')};`));
    assert.ok(nfsElement(addr1), `no TCP 2049 element for ${addr1} while attached`);
    const hostDir = sbx.sql(`SELECT path FROM workspaces WHERE id = '${ws.json.id}'`);
    const ended = await sbx.until(async () => {
      const s = await sbx.getSandbox(key, m1.sandboxId);
      return s.state === 'terminated' ? s : null;
    }, 60000, 'keep-alive expiry');
    assert.equal(ended.terminationReason, 'keep-alive expired');
    assert.ok(!existsSync(export1), 'the export outlived its Sandbox');
    assert.ok(!nfsElement(addr1), `the TCP 2049 element of ${addr1} outlived its Sandbox`);
    const file = join(hostDir, 'kept.txt');
    assert.ok(existsSync(file), `${file} is not in the Workspace directory on the host`);
    assert.equal(readFileSync(file, 'utf8'), 'durable over NFS');
    assert.equal(statSync(file).uid, 65534, 'the file is not owned by the Sandbox uid');

    // The next message: a new VM, pre-started for the App (its agent ran before the Session was
    // known), the same file, mounted by the guest agent before the context line reached the agent.
    const pre = await req(sbx.gw, 'PATCH', `/v1/apps/${app.id}`, { token: sbx.gw.admin, body: { prestart: true, warmPool: 1 } });
    assert.equal(pre.status, 200, pre.text);
    await sbx.until(() => sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE app_id = '${app.id}' AND state = 'warm'
                                   AND prestart_rev IS NOT NULL`) === '1', 200000, 'a pre-started VM');
    const m2 = await sbx.roundTrip(key, session.id, { readFile: { path: '/workspace/kept.txt' } }, 150);
    assert.equal(m2.state, 'completed', m2.error);
    assert.notEqual(m2.sandboxId, m1.sandboxId, 'the second message reused the first VM');
    assert.equal(m2.reply.readFile?.data, 'durable over NFS', JSON.stringify(m2.reply));
    assert.equal((await sbx.getSandbox(key, m2.sandboxId)).prestarted, true);
    assert.equal(m2.reply.context?.sessionId, session.id, JSON.stringify(m2.reply));
    assert.ok(m2.reply.workspaceAtContext.includes('kept.txt'), JSON.stringify(m2.reply));

    const results = await sbx.stop();
    assert.deepEqual(results[0], { code: 0, signal: null });
    assert.equal(readdirExports(sbx.dataDir).length, 0, 'exports left after the worker stopped');
    // The last worker of the host stopped the NFS server: nothing of sbx holds TCP 2049 now.
    assert.equal(ganeshaPid(sbx.dataDir), 0, 'ganesha still runs after the last worker stopped');
  } finally {
    await sbx.stop();
    await stopGanesha(sbx.dataDir);
    sbx.cleanup();
  }
});

function readdirExports(dataDir) {
  const dir = join(dataDir, 'run', 'ganesha', 'exports');
  if (!existsSync(dir)) return [];
  return execFileSync('ls', [dir], { encoding: 'utf8' }).split('\n').filter((n) => n.endsWith('.export'));
}
