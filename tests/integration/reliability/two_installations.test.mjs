// two_installations.test.mjs: two sbx installations on one host (two data directories, as
// staging beside production), each with a live Sandbox on the process driver, sharing the host's
// links and `table inet sbx`. Restarting either one's worker (whose start-up reconciliation
// removes the links and firewall elements of Sandboxes its store does not know as live) leaves
// the other's Sandbox its link, its firewall element and its Workspace, and the other's Session
// is still served by that same Sandbox. Runs in a network namespace of its own.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { writeFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSbx, req } from '../worker/harness.mjs';

const running = [];
after(async () => {
  for (const sbx of running) {
    await sbx.stop();
    sbx.cleanup();
  }
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
  const sbx = await startSbx({ env: { SBX_POOL_SIZE: '1' } });
  running.push(sbx);
  await sbx.until(() => /worker \S+ started on host/.test(sbx.workers[0].log), 20000, `${name}'s worker`);
  const { app, key } = await sbx.app(name, { keepAliveSeconds: 300 });
  sbx.key = key;
  sbx.appId = app.id;
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
  return { session: s.id, sandboxId: m.sandboxId, dir };
}

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

  const w = await restartWorker(staging);
  await stillWhole(prod, prodLive, 'after restarting staging');
  assert.doesNotMatch(w.log, /removed \d+ links/, 'staging removed links');

  const stagingAgain = await liveSandbox(staging); // staging's Sandboxes ended with its worker
  await restartWorker(prod);
  await stillWhole(staging, stagingAgain, 'after restarting production');
});
