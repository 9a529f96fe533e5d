// hostile_agents_qemu.test.mjs: the hostile-agent rows that apply to the qemu driver, on real TCG
// microVMs. Inside a microVM the guest's own kernel is the boundary (the seccomp, namespace, uid
// and cgroup rows of hostile_agents.test.mjs are about the process driver's shared kernel); on
// the host the rows are the VMM's: the App's optional host caps (limits) become the VMM cgroup's
// memory and CPU bounds, and the guest's serial console cannot grow its log past its cap.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { startSbx, req } from '../worker/harness.mjs';

const LOG_CAP_KIB = 64;
let sbx, capped, open;

before(async () => {
  sbx = await startSbx({ workers: 1, env: { SBX_POOL_SIZE: '1', SBX_MESSAGE_TIMEOUT: '60',
    SBX_LEASE_MS: '120000', SBX_QEMU_ACCEL: 'tcg', SBX_VMM_LOG_MAX_KIB: String(LOG_CAP_KIB) } });
  const shape = { driver: 'qemu', memSizeMib: 256, vcpuCount: 2, keepAliveSeconds: 60, maxAttempts: 1 };
  capped = await sbx.app('capped', { ...shape, limits: { vmmMemoryMib: 768, vmmCpus: 1 } });
  open = await sbx.app('open', shape);
});

after(async () => {
  if (!sbx) return;
  await sbx.stop();
  sbx.cleanup();
});

// A value of one of the Sandbox's cgroup files: v2 (its recorded cgroup_path) when the file is
// there, else the v1 hierarchy's directory of the Sandbox (hybrid hosts such as this one), named
// as the v2 one is: "<installation>-<sandboxId>".
function cgroupValue(sandboxId, v2name, v1dir, v1name) {
  const v2 = sbx.sql(`SELECT cgroup_path FROM sandboxes WHERE id = '${sandboxId}'`);
  if (v2 && existsSync(join(v2, v2name))) return readFileSync(join(v2, v2name), 'utf8').trim();
  const installation = sbx.sql("SELECT value FROM settings WHERE key = 'installation_id'");
  return readFileSync(`/sys/fs/cgroup/${v1dir}/sbx/${installation}-${sandboxId}/${v1name}`, 'utf8').trim();
}

test('limits: bad values are refused with a clear problem; null removes them', async () => {
  const bad = await req(sbx.gw, 'POST', '/v1/apps', { token: sbx.gw.admin,
    body: { name: 'bad-limits', limits: { vmmMemoryMib: 1 } } });
  assert.equal(bad.status, 422, bad.text);
  assert.equal(bad.json.code, 'invalid-value');
  assert.equal(bad.json.field, 'limits.vmmMemoryMib');
  const unknown = await req(sbx.gw, 'POST', '/v1/apps', { token: sbx.gw.admin,
    body: { name: 'bad-limits', limits: { vmmDisk: 5 } } });
  assert.equal(unknown.json.code, 'unknown-field', unknown.text);
  assert.equal(unknown.json.field, 'limits.vmmDisk');
  assert.deepEqual(capped.app.limits, { vmmCpus: 1, vmmMemoryMib: 768 });
  assert.equal(open.app.limits, null);
  const tmp = await sbx.app('tmp-limits', { limits: { vmmCpus: 2 } });
  const cleared = await req(sbx.gw, 'PATCH', `/v1/apps/${tmp.app.id}`, { token: sbx.gw.admin, body: { limits: null } });
  assert.equal(cleared.status, 200, cleared.text);
  assert.equal(cleared.json.limits, null);
});

test('a VMM of an App with limits runs under the cgroup caps; a 2-vCPU spinner gets about one CPU', { timeout: 200000 }, async () => {
  const s = await sbx.session(capped.key);
  // Two guest processes spin for 5 s on the 2 vCPUs (TCG runs each vCPU on a host thread).
  const warm = await sbx.roundTrip(capped.key, s.id, { hello: 1 }, 150);
  assert.equal(warm.state, 'completed', warm.error);
  assert.equal(cgroupValue(warm.sandboxId, 'memory.max', 'memory', 'memory.limit_in_bytes'), String(768 * 1024 * 1024));
  const quota = cgroupValue(warm.sandboxId, 'cpu.max', 'cpu', 'cpu.cfs_quota_us');
  assert.match(quota, /^100000( 100000)?$/);
  const v2 = sbx.sql(`SELECT cgroup_path FROM sandboxes WHERE id = '${warm.sandboxId}'`);
  const usage = () => Number(/usage_usec (\d+)/.exec(readFileSync(`${v2}/cpu.stat`, 'utf8'))[1]);
  const before = usage();
  const t1 = performance.now();
  const m = await sbx.roundTrip(capped.key, s.id, { run: ['sh', '-c',
    'spin() { while :; do :; done; }; spin & a=$!; spin & b=$!; sleep 5; kill $a $b'] }, 120);
  assert.equal(m.state, 'completed', m.error);
  // The message took at least the 5 s of spinning; CPU per wall-clock second of the message.
  const wallMs = performance.now() - t1;
  const used = (usage() - before) / 1000;
  console.log(`VMM cap: ${used} ms of CPU in ${wallMs} ms while the guest spun 2 vCPUs (${(used / wallMs).toFixed(2)} CPUs)`);
  assert.ok(wallMs >= 5000, `the spin took ${wallMs} ms`);
  assert.ok(used / wallMs <= 1.15, `the capped VMM used ${(used / wallMs).toFixed(2)} CPUs`);

  // Without limits the VMM's cgroup has no caps.
  const so = await sbx.session(open.key);
  const mo = await sbx.roundTrip(open.key, so.id, { hello: 2 }, 150);
  assert.equal(mo.state, 'completed', mo.error);
  assert.notEqual(cgroupValue(mo.sandboxId, 'memory.max', 'memory', 'memory.limit_in_bytes'), String(768 * 1024 * 1024));
  assert.match(cgroupValue(mo.sandboxId, 'cpu.max', 'cpu', 'cpu.cfs_quota_us'), /^(-1|max 100000)$/);
});

test('flooding the serial console leaves its log at the cap (rotated once)', { timeout: 200000 }, async () => {
  const s = await sbx.session(open.key);
  const m = await sbx.roundTrip(open.key, s.id, { run: ['sh', '-c',
    'yes 0123456789abcdef0123456789abcdef0123456789abcdef > /dev/console & p=$!; sleep 8; kill $p; echo flooded'] }, 150);
  assert.equal(m.state, 'completed', m.error);
  assert.match(m.reply.run.output, /flooded/);
  const jail = sbx.sql(`SELECT jail_dir FROM sandboxes WHERE id = '${m.sandboxId}'`);
  const log = join(jail, 'root', 'console.log');
  const cap = LOG_CAP_KIB * 1024;
  assert.ok(existsSync(`${log}.1`), 'the console log was never rotated: the flood did not reach the cap');
  assert.ok(statSync(log).size <= cap, `console.log holds ${statSync(log).size} bytes, cap ${cap}`);
  assert.ok(statSync(`${log}.1`).size <= cap, `console.log.1 holds ${statSync(`${log}.1`).size} bytes`);
  assert.ok(statSync(join(jail, 'qemu.log')).size <= cap);
  // The VMM survived its flood (no SIGXFSZ): the Session's next message is served by it.
  const again = await sbx.roundTrip(open.key, s.id, { after: 'flood' }, 120);
  assert.equal(again.state, 'completed', again.error);
  assert.equal(again.sandboxId, m.sandboxId);
});
