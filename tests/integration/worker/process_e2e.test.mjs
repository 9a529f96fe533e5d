// process_e2e.test.mjs: end to end on the real gateway + sbx-worker + process driver + echo agent:
// the agent's reply; two Sessions, two Sandboxes; keep-alive expiry removes the jail directory and
// the cgroup and the next message gets a new Sandbox; /workspace survives while /tmp does not; a
// Sandbox cannot see another Sandbox's processes or files; a clean SIGTERM.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { startSbx, req } from './harness.mjs';

const uname = execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim();

test('echo reply, Sandbox per Session, keep-alive expiry cleans up, /workspace vs /tmp, isolation', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { key } = await sbx.app('e2e', { keepAliveSeconds: 1, maxAttempts: 1 });
    const ws = await req(sbx.gw, 'POST', '/v1/workspaces', { token: key, body: {} });
    assert.equal(ws.status, 201, ws.text);
    const s1 = await sbx.session(key, { workspaceId: ws.json.id });
    const s2 = await sbx.session(key);

    // The pool is warm, so the first activation is a warm one and fast.
    await sbx.until(() => Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state = 'warm'`)) >= 1, 30000, 'a warm Sandbox');
    const m1 = await sbx.roundTrip(key, s1.id, { hello: 'world', writeFile: { path: '/workspace/kept.txt', data: 'durable' } });
    assert.equal(m1.state, 'completed', m1.error);
    assert.deepEqual(m1.reply.echo.hello, 'world');
    assert.equal(m1.reply.kernel, uname);
    assert.deepEqual(m1.reply.writeFile, { ok: true });
    assert.notEqual(m1.reply.uid, 0, 'the agent runs as root');
    const sb1 = await sbx.getSandbox(key, m1.sandboxId);
    assert.equal(sb1.cold, false);
    const jail1 = sbx.sql(`SELECT jail_dir FROM sandboxes WHERE id = '${m1.sandboxId}'`);
    const cg1 = sbx.sql(`SELECT cgroup_path FROM sandboxes WHERE id = '${m1.sandboxId}'`);
    assert.ok(existsSync(jail1), `jail ${jail1} missing while running`);

    const tmp = await sbx.roundTrip(key, s1.id, { writeFile: { path: '/tmp/gone.txt', data: 'scratch' } });
    assert.deepEqual(tmp.reply.writeFile, { ok: true });
    assert.equal(tmp.sandboxId, m1.sandboxId, 'an active Session changed Sandbox');

    // Another Session: another Sandbox, which sees neither the first one's processes nor files.
    const m2 = await sbx.roundTrip(key, s2.id, { run: ['/bin/ps', '-A'], readFile: { path: '/tmp/gone.txt' } });
    assert.equal(m2.state, 'completed', m2.error);
    assert.notEqual(m2.sandboxId, m1.sandboxId);
    assert.ok(m2.reply.readFile.error, 'a Sandbox read another Sandbox\'s /tmp');
    const psLines = m2.reply.run.output.trim().split('\n').slice(1);
    assert.ok(psLines.length <= 4, `a Sandbox sees foreign processes:\n${m2.reply.run.output}`);
    const hostPid = Number(sbx.sql(`SELECT pid FROM sandboxes WHERE id = '${m1.sandboxId}'`));
    const peek = await sbx.roundTrip(key, s2.id, { readFile: { path: `${jail1}/root/tmp/gone.txt` } });
    assert.ok(peek.reply.readFile.error, 'a Sandbox read a file through the host path of another jail');
    assert.ok(hostPid > 0);

    // Keep-alive: terminated, jail directory and cgroup gone, Session idle.
    const ended = await sbx.until(async () => {
      const s = await sbx.getSandbox(key, m1.sandboxId);
      return s.state === 'terminated' ? s : null;
    }, 15000, 'keep-alive expiry');
    assert.equal(ended.terminationReason, 'keep-alive expired');
    // Not before the deadline; after it, as soon as a busy machine lets the worker.
    const late = Date.parse(ended.terminatedAt) - (Date.parse(tmp.completedAt) + 1000);
    assert.ok(late >= -50 && late < 10000, `expired ${late} ms after its deadline`);
    assert.ok(!existsSync(jail1), `jail ${jail1} left behind`);
    if (cg1) assert.ok(!existsSync(cg1), `cgroup ${cg1} left behind`);
    const idle = await sbx.getSession(key, s1.id);
    assert.equal(idle.state, 'idle');
    // Usage: this host has cgroup v2 cpu.stat, so CPU time is measured and added to the Session.
    assert.equal(typeof ended.usage.cpuUsec, 'number', JSON.stringify(ended.usage));
    assert.ok(ended.usage.cpuUsec > 0);
    assert.ok(idle.usage.cpuUsec >= ended.usage.cpuUsec);

    // The next message: a new Sandbox; /workspace kept its file, /tmp did not.
    const m3 = await sbx.roundTrip(key, s1.id, { readFile: { path: '/workspace/kept.txt' } });
    assert.notEqual(m3.sandboxId, m1.sandboxId);
    assert.deepEqual(m3.reply.readFile, { data: 'durable' });
    const m4 = await sbx.roundTrip(key, s1.id, { readFile: { path: '/tmp/gone.txt' } });
    assert.equal(m4.sandboxId, m3.sandboxId);
    assert.ok(m4.reply.readFile.error, '/tmp survived the Sandbox');
    const ses = await sbx.getSession(key, s1.id);
    assert.equal(ses.activationCount, 2);

    // The firewall's drop counters (per reason) reach /metrics: a worker publishes them through
    // the store, since the gateway never touches the firewall.
    const metrics = await sbx.until(async () => {
      const r = await fetch(`${sbx.gw.url}/metrics`);
      const text = await r.text();
      return /sbx_firewall_dropped_packets_total\{reason="private"\} \d+/.test(text) ? text : null;
    }, 10000, 'firewall counters in /metrics');
    for (const reason of ['host', 'private', 'metadata', 'special', 'ipv6', 'inbound'])
      assert.match(metrics, new RegExp(`sbx_firewall_dropped_packets_total\\{reason="${reason}"\\}`));
    // The pool per shape, and the boot and lifetime histograms of the Sandboxes above.
    assert.match(metrics, /sbx_pool_sandboxes\{driver="process",image="default",vcpus="1",mem_mib="256",state="warm"\} \d+/);
    const boots = Number(/sbx_sandbox_boot_seconds_count (\d+)/.exec(metrics)?.[1]);
    assert.ok(boots >= 3, `boot histogram counts ${boots} Sandboxes`);
    const lived = Number(/sbx_sandbox_lifetime_seconds_count (\d+)/.exec(metrics)?.[1]);
    assert.ok(lived >= 1, `lifetime histogram counts ${lived} ended Sandboxes`);

    const results = await sbx.stop();
    assert.deepEqual(results[0], { code: 0, signal: null });
    assert.equal(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE state NOT IN ('terminated','failed')`), '0');
    assert.deepEqual(readdirSync(sbx.jailRoot('process')), [], 'jail dirs left after SIGTERM');
    for (const cg of sbx.sql(`SELECT cgroup_path FROM sandboxes WHERE cgroup_path IS NOT NULL`).split('\n').filter(Boolean))
      assert.ok(!existsSync(cg), `cgroup ${cg} left after SIGTERM`);
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});
