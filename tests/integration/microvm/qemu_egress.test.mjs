// qemu_egress.test.mjs: it.microvm.qemu_egress, issue 15 in a real TCG microVM: a qemu App in
// public mode resolves through the resolver the host configured (sbx's guest init wrote the
// guest's /etc/resolv.conf from sbx.dns=), connects to the resolved address on 443, and meets the
// same firewall as a process Sandbox (8080 dropped, DNS to another address dropped). The world of
// public addresses is tests/integration/network/egress_world.sh, in this test's own namespaces.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSbx } from '../worker/harness.mjs';

const WORLD = process.env.SBX_EGRESS_WORLD;
const PROBE = process.env.SBX_NET_PROBE;

test('a qemu guest resolves through the configured resolver and meets the egress rules', { timeout: 240000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-qemu-egress-'));
  execFileSync('bash', [WORLD, 'up', dir, PROBE], { stdio: 'inherit' });
  const sbx = await startSbx({
    workers: 1,
    env: {
      SBX_POOL_SIZE: '1', SBX_MESSAGE_TIMEOUT: '30', SBX_LEASE_MS: '60000', SBX_QEMU_ACCEL: 'tcg',
      SBX_DNS_RESOLVERS: '11.11.11.53', SBX_EGRESS_PORTS: '80,443',
    },
  });
  try {
    const { key } = await sbx.app('vm-egress', { driver: 'qemu', keepAliveSeconds: 120, memSizeMib: 256, vcpuCount: 1, maxAttempts: 1 });
    const session = await sbx.session(key);
    const run = async (argv) => {
      const m = await sbx.roundTrip(key, session.id, { run: argv }, 90);
      assert.equal(m.state, 'completed', m.error);
      return m.reply.run.output || '';
    };
    assert.match(await run(['/bin/cat', '/etc/resolv.conf']), /^nameserver 11\.11\.11\.53$/m);
    const ns = await run(['/bin/busybox', 'timeout', '5', '/bin/busybox', 'nslookup', 'api.test']);
    assert.match(ns, /Name:\s+api\.test\s+Address:\s+11\.11\.11\.11/, ns);
    assert.match(await run(['/bin/busybox', 'nc', '-w', '3', 'api.test', '443']), /hello 11\.11\.11\.11/);
    assert.doesNotMatch(await run(['/bin/busybox', 'nc', '-w', '2', '11.11.11.11', '8080']), /hello/);
    assert.doesNotMatch(await run(['/bin/busybox', 'timeout', '3', '/bin/busybox', 'nslookup', 'api.test', '11.11.11.12']), /Address:\s+11\.11\.11\.11/);
  } finally {
    await sbx.stop();
    execFileSync('bash', [WORLD, 'down', dir]);
    rmSync(dir, { recursive: true, force: true });
    sbx.cleanup();
  }
});
