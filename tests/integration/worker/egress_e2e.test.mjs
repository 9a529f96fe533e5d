// egress_e2e.test.mjs: per-App egress policies on the real gateway + sbx-worker + process driver
// (issue 15). A world of public addresses (tests/integration/network/egress_world.sh) behind the
// host; the echo agent runs the image's busybox nc and nslookup inside its Sandbox. Proves: public
// mode (egress_ports and dns_resolvers), a PATCH to none and to an allowlist changing a live
// Sandbox's reach without a restart (same Sandbox id), two Apps with different lists on one host
// each reaching only their own addresses, and the policy drops counted for /metrics.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSbx, req } from './harness.mjs';

const WORLD = process.env.SBX_EGRESS_WORLD;
const PROBE = process.env.SBX_NET_PROBE;

test('egress: public, none and allowlist applied live; two Apps isolated', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-egress-e2e-'));
  execFileSync('bash', [WORLD, 'up', dir, PROBE], { stdio: 'inherit' });
  const sbx = await startSbx({ workers: 1, env: { SBX_DNS_RESOLVERS: '11.11.11.53', SBX_EGRESS_PORTS: '80,443' } });
  try {
    const a = await sbx.app('egress-a', { keepAliveSeconds: 120, maxAttempts: 1 });
    const sa = await sbx.session(a.key);
    // What the agent's own tools see: "hello ..." from the world's listener, or nothing.
    const run = async (key, sid, argv) => {
      const m = await sbx.roundTrip(key, sid, { run: argv });
      assert.equal(m.state, 'completed', m.error);
      return { out: m.reply.run.output || '', sandboxId: m.sandboxId };
    };
    const nc = (key, sid, addr, port) => run(key, sid, ['/bin/busybox', 'nc', '-w', '1', addr, String(port)]);
    const reaches = async (key, sid, addr, port) => (await nc(key, sid, addr, port)).out.includes(`hello ${addr}`);
    const patch = async (network) => {
      const p = await req(sbx.gw, 'PATCH', `/v1/apps/${a.app.id}`, { token: sbx.gw.admin, body: { network } });
      assert.equal(p.status, 200, p.text);
    };

    // public: the host-wide rule
    const first = await nc(a.key, sa.id, '11.11.11.11', 443);
    assert.match(first.out, /hello 11\.11\.11\.11 from 11\.0\.0\.1/);
    const sandboxId = first.sandboxId;
    assert.ok(await reaches(a.key, sa.id, '11.11.11.11', 80), 'TCP 80 is in egress_ports');
    assert.ok(!(await reaches(a.key, sa.id, '11.11.11.11', 8080)), 'TCP 8080 is not in egress_ports');
    const ns = await run(a.key, sa.id, ['/bin/busybox', 'nslookup', 'api.test']);
    assert.match(ns.out, /11\.11\.11\.11/, 'DNS through the configured resolver');

    // none, live: the same Sandbox loses its egress within a poll or two
    await patch({ egress: 'none' });
    await sbx.until(async () => !(await reaches(a.key, sa.id, '11.11.11.11', 443)), 10000, 'egress none applied');
    const ns2 = await run(a.key, sa.id, ['/bin/busybox', 'timeout', '2', '/bin/busybox', 'nslookup', 'api.test']);
    assert.doesNotMatch(ns2.out, /Address: 11\.11\.11\.11/, 'DNS in none mode');

    // allowlist, live
    await patch({ egress: 'allowlist', allow: ['11.11.11.12:443'] });
    await sbx.until(() => reaches(a.key, sa.id, '11.11.11.12', 443), 10000, 'allowlist applied');
    assert.ok(!(await reaches(a.key, sa.id, '11.11.11.11', 443)), 'not on the list');
    assert.ok(!(await reaches(a.key, sa.id, '11.11.11.12', 80)), 'the entry names port 443 only');
    const still = await nc(a.key, sa.id, '11.11.11.12', 443);
    assert.equal(still.sandboxId, sandboxId, 'the policy changed without a new Sandbox');

    // a second App with another list, from its first Sandbox on
    const b = await sbx.app('egress-b', { keepAliveSeconds: 120, maxAttempts: 1, network: { egress: 'allowlist', allow: ['11.11.11.11/32'] } });
    const sb = await sbx.session(b.key);
    assert.ok(await reaches(b.key, sb.id, '11.11.11.11', 443), "B reaches B's address");
    assert.ok(!(await reaches(b.key, sb.id, '11.11.11.12', 443)), "B does not reach A's address");
    assert.ok(await reaches(a.key, sa.id, '11.11.11.12', 443), "A reaches A's address");
    assert.ok(!(await reaches(a.key, sa.id, '11.11.11.11', 443)), "A does not reach B's address");

    // back to public
    await patch({ egress: 'public' });
    await sbx.until(() => reaches(a.key, sa.id, '11.11.11.11', 443), 10000, 'public again');
    assert.equal((await nc(a.key, sa.id, '11.11.11.11', 443)).sandboxId, sandboxId);

    // the drops are counted per reason for /metrics (published by the worker through the store)
    await sbx.until(() => /reason="policy"} [1-9]/.test(sbx.sql(`SELECT value FROM settings WHERE key = 'firewall_metrics'`)), 10000, 'policy drops published');
    assert.match(sbx.sql(`SELECT value FROM settings WHERE key = 'firewall_metrics'`), /reason="egress"} [1-9]/);
  } finally {
    const results = await sbx.stop();
    execFileSync('bash', [WORLD, 'down', dir]);
    rmSync(dir, { recursive: true, force: true });
    sbx.cleanup();
    for (const r of results) assert.equal(r.code, 0, `worker exit ${JSON.stringify(r)}`);
  }
});
