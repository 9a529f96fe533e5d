// two_installations.test.mjs: two sbx installations on one host (two data directories, as
// staging beside production), each with a live Sandbox on the process driver, sharing the host's
// links and `table inet sbx`. Restarting either one's worker (whose start-up reconciliation
// removes the links and firewall elements of Sandboxes its store does not know as live) leaves
// the other's Sandbox its link, its firewall element and its Workspace, and the other's Session
// is still served by that same Sandbox. Both share one chroot_base (jails) and the host's cgroup
// tree: each Sandbox's jail and cgroup are named "<installation>-<sandboxId>", the other's stay
// whole, and the restarted worker's start-up sweep removes the leftovers tagged with its own
// installation (planted here as a worker killed mid-cleanup leaves them: an empty process jail,
// a qemu jail with its files, a cgroup) and no one else's, nor untagged ones. Runs in a network
// namespace of its own.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { writeFileSync, readFileSync, mkdirSync, mkdtempSync, existsSync, rmSync, rmdirSync } from 'node:fs';
import { join, basename, dirname } from 'node:path';
import { startSbx, req } from '../worker/harness.mjs';

const running = [];
const chrootBase = mkdtempSync('/tmp/sbx-it-two-jails-');
const planted = [];
after(async () => {
  for (const sbx of running) {
    await sbx.stop();
    sbx.cleanup();
  }
  for (const dir of planted.reverse()) {
    if (dir.startsWith(join(chrootBase, 'qemu'))) {
      rmSync(dir, { recursive: true, force: true }); // plain files, no cgroup
      continue;
    }
    for (const sub of ['workspace', 'root']) if (existsSync(join(dir, sub))) rmdirSync(join(dir, sub));
    if (existsSync(dir)) rmdirSync(dir);
  }
  rmSync(chrootBase, { recursive: true, force: true });
});

// The host's links: alias (the owner the kernel records) by interface name.
function links() {
  const out = JSON.parse(execFileSync('ip', ['-j', '-d', 'link', 'show'], { encoding: 'utf8' }));
  return out.filter((l) => /^sbx\d+$/.test(l.ifname)).map((l) => ({ ifname: l.ifname, alias: l.ifalias ?? '' }));
}
const ownedBy = (owner, id) => owner === id || owner.endsWith(`/${id}`);
const linkOf = (id) => links().find((l) => ownedBy(l.alias, id));
const elementOf = (id) => execFileSync('nft', ['list', 'set', 'inet', 'sbx', 'sandboxes'], { encoding: 'utf8' })
  .split('\n').find((l) => new RegExp(`comment "([a-z0-9]+/)?${id}"`).test(l));

async function installation(name) {
  const sbx = await startSbx({ env: { SBX_POOL_SIZE: '1', SBX_CHROOT_BASE: chrootBase } });
  running.push(sbx);
  await sbx.until(() => /worker \S+ started on host/.test(sbx.workers[0].log), 20000, `${name}'s worker`);
  const { app, key } = await sbx.app(name, { keepAliveSeconds: 300 });
  sbx.key = key;
  sbx.appId = app.id;
  sbx.installation = await sbx.sql("SELECT value FROM settings WHERE key = 'installation_id'");
  assert.match(sbx.installation, /^[a-z0-9]{8}$/);
  return sbx;
}

// A live Sandbox of sbx: a Session with a Workspace (holding a file), served once.
async function liveSandbox(sbx) {
  const ws = await req(sbx.gw, 'POST', '/v1/workspaces', { token: sbx.key, body: {} });
  assert.equal(ws.status, 201, ws.text);
  const dir = join(sbx.dataDir, 'workspaces', sbx.appId, ws.json.id);
  writeFileSync(join(dir, 'kept.txt'), 'kept');
  const s = await sbx.session(sbx.key, { workspaceId: ws.json.id });
  const m = await sbx.roundTrip(sbx.key, s.id, { n: 1 }, 30);
  assert.equal(m.state, 'completed', m.error);
  assert.ok(linkOf(m.sandboxId), `no link for ${m.sandboxId}: ${JSON.stringify(links())}`);
  assert.ok(elementOf(m.sandboxId), `no firewall element for ${m.sandboxId}`);
  const jail = await sbx.sql(`SELECT jail_dir FROM sandboxes WHERE id = '${m.sandboxId}'`);
  const cgroup = await sbx.sql(`SELECT coalesce(cgroup_path, '') FROM sandboxes WHERE id = '${m.sandboxId}'`);
  assert.equal(jail, join(chrootBase, 'process', `${sbx.installation}-${m.sandboxId}`));
  assert.ok(existsSync(jail), `no jail ${jail}`);
  if (cgroup) {
    assert.equal(basename(cgroup), `${sbx.installation}-${m.sandboxId}`, 'the cgroup is not tagged');
    assert.ok(existsSync(cgroup), `no cgroup ${cgroup}`);
  }
  return { session: s.id, sandboxId: m.sandboxId, dir, jail, cgroup };
}

// What a worker killed between a Sandbox's end and its cleanup leaves, named with tag ('' for an
// untagged one of an older sbx): an empty process jail, a qemu jail with the files the qemu driver
// puts there (its log, the console's), and, where Sandboxes have cgroups, a cgroup.
function leftover(tag, cgroupOfSomeSandbox) {
  const id = `sbx_left${Math.random().toString(36).slice(2, 10).replace(/[^a-z0-9]/g, '0')}`;
  const name = tag ? `${tag}-${id}` : id;
  const jail = join(chrootBase, 'process', name);
  mkdirSync(join(jail, 'root'), { recursive: true });
  mkdirSync(join(jail, 'workspace'));
  planted.push(jail);
  const qemuJail = join(chrootBase, 'qemu', `${name}q`);
  mkdirSync(join(qemuJail, 'root'), { recursive: true });
  writeFileSync(join(qemuJail, 'qemu.log'), 'qemu-system-x86_64: terminating on signal 9\n');
  writeFileSync(join(qemuJail, 'root', 'console.log'), '[    0.000000] Linux version\n');
  planted.push(qemuJail);
  let cgroup = '';
  if (cgroupOfSomeSandbox) {
    cgroup = join(dirname(cgroupOfSomeSandbox), name);
    mkdirSync(cgroup);
    planted.push(cgroup);
  }
  return { jail, qemuJail, cgroup };
}
const present = (l) => existsSync(l.jail) && existsSync(join(l.qemuJail, 'qemu.log')) && (!l.cgroup || existsSync(l.cgroup));
const gone = (l) => !existsSync(l.jail) && !existsSync(l.qemuJail) && (!l.cgroup || !existsSync(l.cgroup));

async function restartWorker(sbx) {
  const old = sbx.workers.pop();
  old.kill('SIGTERM');
  assert.deepEqual(await old.exited, { code: 0, signal: null }, old.log.slice(-2000));
  const w = sbx.startWorker();
  // Reconciliation runs right after "started"; the pool's refill comes after it.
  await sbx.until(() => /worker \S+ started on host/.test(w.log), 20000, 'the restarted worker');
  await sbx.until(async () => (await sbx.sql("SELECT count(*) FROM sandboxes WHERE state = 'warm'")) === '1', 20000, 'its warm pool');
  return w;
}

async function stillWhole(sbx, live, what) {
  assert.ok(linkOf(live.sandboxId), `${what}: the link of ${live.sandboxId} was removed: ${JSON.stringify(links())}`);
  assert.ok(elementOf(live.sandboxId), `${what}: the firewall element of ${live.sandboxId} was removed`);
  assert.ok(existsSync(live.jail), `${what}: the jail of ${live.sandboxId} was removed`);
  if (live.cgroup) assert.ok(existsSync(live.cgroup), `${what}: the cgroup of ${live.sandboxId} was removed`);
  assert.equal(readFileSync(join(live.dir, 'kept.txt'), 'utf8'), 'kept', `${what}: the Workspace`);
  const m = await sbx.roundTrip(sbx.key, live.session, { n: 2 }, 30);
  assert.equal(m.state, 'completed', `${what}: ${m.error}`);
  assert.equal(m.sandboxId, live.sandboxId, `${what}: served by another Sandbox`);
}

test('restarting either installation\'s worker leaves the other\'s links, rules and Workspaces alone', { timeout: 180000 }, async () => {
  const prod = await installation('production');
  const staging = await installation('staging');
  const prodLive = await liveSandbox(prod);
  const stagingLive = await liveSandbox(staging);
  // Each installation tags what it made with its own id.
  const tag = (id) => linkOf(id).alias.split('/')[0];
  assert.notEqual(tag(prodLive.sandboxId), tag(stagingLive.sandboxId));
  assert.match(prod.workers[0].log, new RegExp(`installation ${tag(prodLive.sandboxId)}`));

  assert.equal(basename(prodLive.jail).split('-')[0], tag(prodLive.sandboxId), 'jail and link tags differ');

  const prodLeft = leftover(prod.installation, prodLive.cgroup);
  const stagingLeft = leftover(staging.installation, prodLive.cgroup);
  const untagged = leftover('', prodLive.cgroup);
  const w = await restartWorker(staging);
  await stillWhole(prod, prodLive, 'after restarting staging');
  assert.doesNotMatch(w.log, /removed \d+ links/, 'staging removed links');
  assert.ok(gone(stagingLeft), `staging's own leftovers were not swept: ${w.log.slice(-2000)}`);
  assert.match(w.log, new RegExp(`removed the cgroups of ${prodLive.cgroup ? 1 : 0} and the jails of 2 Sandboxes`));
  assert.ok(present(prodLeft), "staging swept production's leftovers");
  assert.ok(present(untagged), 'staging swept an untagged jail or cgroup');

  const stagingAgain = await liveSandbox(staging); // staging's Sandboxes ended with its worker
  const p = await restartWorker(prod);
  await stillWhole(staging, stagingAgain, 'after restarting production');
  assert.ok(gone(prodLeft), `production's own leftovers were not swept: ${p.log.slice(-2000)}`);
  assert.ok(present(untagged), 'production swept an untagged jail or cgroup');
});
