// drivers.mjs: issue 4's driver benchmark. For each driver that can run here (process always; qemu
// when qemu-system-x86_64 and the guest image exist), in one run:
//   cold boot to agent-ready  the worker's boot_ms of every Sandbox it booted (create to "ready")
//   warm claim to first reply POST of a message to a new Session, with a warm Sandbox waiting,
//                             until its reply (long poll)
// and their ratio, p50/p99 over the stated number of runs. Prints a table; never fails on a number.
//
//   node tools/bench/drivers.mjs <build dir> [runs per driver (default process 20, qemu 5)]
//
// qemu runs under TCG here (nested KVM hangs): its boots are seconds, so it gets fewer runs.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Sbx, summarize, sleep } from './lib.mjs';

const buildDir = resolve(process.argv[2] || 'build');
const runsArg = Number(process.argv[3]) || 0;

function qemuAvailable() {
  try {
    execFileSync('which', ['qemu-system-x86_64'], { stdio: 'ignore' });
  } catch {
    return false;
  }
  return existsSync(join(buildDir, 'guest', 'vmlinuz'));
}

const warmOf = (sbx, driver) =>
  sbx.sql(`SELECT count(*) AS n FROM sandboxes WHERE driver = '${driver}' AND state = 'warm'`)[0].n;

async function waitWarm(sbx, driver, timeoutMs) {
  const until = Date.now() + timeoutMs;
  while (warmOf(sbx, driver) < 1) {
    if (Date.now() > until) throw new Error(`no warm ${driver} Sandbox after ${timeoutMs} ms`);
    await sleep(20);
  }
}

async function benchDriver(driver, runs) {
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '1', SBX_QEMU_ACCEL: 'tcg' });
  await sbx.start();
  try {
    await sbx.app({ driver, keepAliveSeconds: 1, memSizeMib: 256, vcpuCount: 1 });
    const bootTimeout = driver === 'process' ? 30000 : 180000;
    const warm = [];
    for (let i = 0; i < runs; i++) {
      const s = await sbx.session({ keepAliveSeconds: 1 });
      await waitWarm(sbx, driver, bootTimeout);
      const m = await sbx.timedRoundTrip(s.id);
      const ms = m.latencyMs;
      if (m.state !== 'completed') throw new Error(`${driver}: message ${m.id} ended ${m.state}: ${m.error}`);
      const cold = sbx.sql(`SELECT cold FROM sandboxes WHERE id = '${m.sandboxId}'`)[0].cold;
      if (cold) throw new Error(`${driver}: run ${i} was not a warm claim`);
      warm.push(ms);
    }
    const boots = sbx
      .sql(`SELECT boot_ms FROM sandboxes WHERE driver = '${driver}' AND boot_ms IS NOT NULL`)
      .map((r) => r.boot_ms);
    return { boot: summarize(boots), warm: summarize(warm) };
  } finally {
    await sbx.stop();
  }
}

const f = (v) => (Number.isFinite(v) ? v.toFixed(v >= 100 ? 0 : 1) : '-');
const drivers = [['process', runsArg || 20]];
if (qemuAvailable()) drivers.push(['qemu', runsArg || 5]);
else console.log('qemu: skipped (no qemu-system-x86_64 or no guest image in <build>/guest)');

console.log(`${'driver'.padEnd(8)} ${'runs'.padStart(4)}  ${'cold boot p50'.padStart(13)} ${'p99'.padStart(8)}  ${'warm reply p50'.padStart(14)} ${'p99'.padStart(8)}  ${'cold/warm p50'.padStart(13)}`);
for (const [driver, runs] of drivers) {
  const r = await benchDriver(driver, runs);
  console.log(
    `${driver.padEnd(8)} ${String(runs).padStart(4)}  ${(f(r.boot.p50) + ' ms').padStart(13)} ${(f(r.boot.p99) + ' ms').padStart(8)}  ${(f(r.warm.p50) + ' ms').padStart(14)} ${(f(r.warm.p99) + ' ms').padStart(8)}  ${f(r.boot.p50 / r.warm.p50).padStart(13)}` +
      `   (boots n=${r.boot.n})`,
  );
}
