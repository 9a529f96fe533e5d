// qemu_e2e.test.mjs: it.microvm.qemu_e2e, issue 4 end to end on real TCG microVMs: the real
// gateway and sbx-worker with an App whose driver is qemu. The reply comes from inside a guest
// (its kernel release is not the host's); the Sandbox was claimed warm; after keepAliveSeconds
// the QEMU process is gone and the jail directory removed; a second message boots nothing (a warm
// guest was already waiting) and lands in a different VM.
//
// Uses the worker tests' harness (SBX_GATEWAY_BIN, SBX_WORKER_BIN); the guest image comes from the
// guest_image fixture (<build>/guest, the worker's fallback guest_dir).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { startSbx } from '../worker/harness.mjs';

const hostKernel = execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim();

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code !== 'ESRCH';
  }
}

// Waits for fn like sbx.until, but fails at once, with the worker's last log lines, if the worker
// died (e.g. built without the qemu driver).
async function untilWorkerUp(sbx, fn, timeoutMs, what) {
  return sbx.until(() => {
    const w = sbx.workers[0];
    if (w.exitCode !== null || w.signalCode !== null)
      throw new Error(`the worker exited (${w.exitCode ?? w.signalCode}) while waiting for ${what}:\n${w.log.split('\n').slice(-5).join('\n')}`);
    return fn();
  }, timeoutMs, what);
}

// Sandboxes of the qemu driver in one state.
const qemuIn = (sbx, state) =>
  Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE driver = 'qemu' AND state = '${state}'`));

test('a qemu App answers from its own microVM, warm claims, keep-alive expiry, next message in a new VM', { timeout: 240000 }, async () => {
  // TCG boots take 5-10 s on a loaded 2-core host: generous timeouts, one warm guest.
  const sbx = await startSbx({
    workers: 1,
    env: { SBX_POOL_SIZE: '1', SBX_MESSAGE_TIMEOUT: '30', SBX_LEASE_MS: '60000', SBX_QEMU_ACCEL: 'tcg' },
  });
  try {
    const { key } = await sbx.app('vm', { driver: 'qemu', keepAliveSeconds: 2, memSizeMib: 256, vcpuCount: 1, maxAttempts: 1 });
    const session = await sbx.session(key);

    await untilWorkerUp(sbx, () => qemuIn(sbx, 'warm') >= 1, Number(process.env.SBX_WARM_WAIT_MS || 120000), 'a warm qemu Sandbox');
    const m1 = await sbx.roundTrip(key, session.id, { hello: 'guest' }, 90);
    assert.equal(m1.state, 'completed', m1.error);
    assert.equal(m1.reply.echo.hello, 'guest');
    assert.ok(m1.reply.kernel, 'the reply names no kernel');
    assert.notEqual(m1.reply.kernel, hostKernel, 'the reply came from the host kernel');
    assert.equal(m1.reply.hostname, 'sbx-guest');

    const sb1 = await sbx.getSandbox(key, m1.sandboxId);
    assert.equal(sb1.driver, 'qemu');
    assert.equal(sb1.cold, false, 'the first activation was not a warm claim');
    assert.match(sb1.imageHash || '', /^sha256:[0-9a-f]{64}$/);
    const pid1 = Number(sbx.sql(`SELECT pid FROM sandboxes WHERE id = '${m1.sandboxId}'`));
    const jail1 = sbx.sql(`SELECT jail_dir FROM sandboxes WHERE id = '${m1.sandboxId}'`);
    assert.ok(pid1 > 0 && alive(pid1), `QEMU pid ${pid1} is not running`);
    assert.match(execFileSync('cat', [`/proc/${pid1}/comm`], { encoding: 'utf8' }), /^qemu-system/);
    assert.ok(existsSync(jail1), `jail ${jail1} missing while running`);

    // Keep-alive: the Sandbox ends, its QEMU process and jail go.
    const ended = await sbx.until(async () => {
      const s = await sbx.getSandbox(key, m1.sandboxId);
      return s.state === 'terminated' ? s : null;
    }, 30000, 'keep-alive expiry');
    assert.equal(ended.terminationReason, 'keep-alive expired');
    await sbx.until(() => !alive(pid1), 10000, `QEMU pid ${pid1} to exit`);
    assert.ok(!existsSync(jail1), `jail ${jail1} left behind`);

    // The pool has replaced the claimed guest; the next message must not boot one.
    await untilWorkerUp(sbx, () => qemuIn(sbx, 'warm') >= 1, 120000, 'a replacement warm qemu Sandbox');
    const bootedBefore = Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE driver = 'qemu'`));
    const m2 = await sbx.roundTrip(key, session.id, { hello: 'again' }, 90);
    assert.equal(m2.state, 'completed', m2.error);
    assert.notEqual(m2.sandboxId, m1.sandboxId, 'the second activation reused a Sandbox');
    assert.notEqual(m2.reply.kernel, hostKernel);
    const sb2 = await sbx.getSandbox(key, m2.sandboxId);
    assert.equal(sb2.cold, false, 'the second activation booted a guest on demand');
    const pid2 = Number(sbx.sql(`SELECT pid FROM sandboxes WHERE id = '${m2.sandboxId}'`));
    assert.notEqual(pid2, pid1, 'the second message landed in the same VM');
    const createdBefore = Number(sbx.sql(
      `SELECT COUNT(*) FROM sandboxes WHERE id = '${m2.sandboxId}' AND created_at < (SELECT created_at FROM messages WHERE id = '${m2.id}')`));
    assert.equal(createdBefore, 1, 'the second VM was booted after the message arrived');
    assert.ok(Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE driver = 'qemu'`)) >= bootedBefore);

    const results = await sbx.stop();
    assert.deepEqual(results[0], { code: 0, signal: null });
    assert.ok(!alive(pid2), `QEMU pid ${pid2} outlived the worker's shutdown`);
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state NOT IN ('terminated','failed')`), '0');
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});
