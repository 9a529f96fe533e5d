// egress_established.test.mjs: narrowing an App's egress policy ends the connections its live
// Sandboxes opened before, not only new ones. On the real gateway + sbx-worker + process driver
// in the packet world of tests/integration/network/egress_world.sh, with an echo server of this
// test's own on a public test address: a TCP connection opened from inside a Sandbox (a client
// started in the Sandbox's network namespace) keeps echoing under `public`; after a PATCH to
// `none` it stops passing data within a bounded wait, while the Sandbox itself (its link to the
// host's callback API) keeps working.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSbx, req, assertWorkersExited } from './harness.mjs';

const WORLD = process.env.SBX_EGRESS_WORLD;
const PROBE = process.env.SBX_NET_PROBE;
const ADDR = '11.11.11.14';
const PORT = 7000;

// An echo server in the world namespace, on ADDR:PORT.
const SERVER = `require('net').createServer((s) => s.pipe(s)).listen(${PORT}, '${ADDR}', () => console.log('listening'));`;
// A client that writes a line every 100 ms and prints a line per echo it gets back.
const CLIENT = `const c = require('net').connect(${PORT}, '${ADDR}', () => { console.log('connected'); setInterval(() => c.write('ping\\n'), 100); });
c.on('data', (d) => { for (const l of String(d).split('\\n')) if (l) console.log('echo'); });
c.on('error', (e) => console.log('error ' + e.code));`;

function started(child, line) {
  return new Promise((ok, fail) => {
    let out = '';
    child.stdout.on('data', (d) => { out += d; if (out.includes(line)) ok(); });
    child.on('exit', (code) => fail(new Error(`exited ${code} before "${line}": ${out}`)));
  });
}

test('narrowing an App\'s egress ends the connections its Sandboxes opened before', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-egress-est-'));
  execFileSync('bash', [WORLD, 'up', dir, PROBE], { stdio: 'inherit' });
  execFileSync('ip', ['-n', 'sbxew', 'addr', 'add', `${ADDR}/32`, 'dev', 'lo']);
  const server = spawn('ip', ['netns', 'exec', 'sbxew', process.execPath, '-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  let client = null;
  const sbx = await startSbx({ workers: 1, env: { SBX_DNS_RESOLVERS: '11.11.11.53', SBX_EGRESS_PORTS: `80,443,${PORT}` } });
  let bodyFailed = true;
  try {
    await started(server, 'listening');
    const a = await sbx.app('established', { keepAliveSeconds: 120, maxAttempts: 1 });
    const sa = await sbx.session(a.key);
    const first = await sbx.roundTrip(a.key, sa.id, { run: ['/bin/busybox', 'true'] });
    assert.equal(first.state, 'completed', first.error);
    const pid = sbx.sql(`SELECT pid FROM sandboxes WHERE id = '${first.sandboxId}'`);

    // Under public: a connection from inside the Sandbox, echoing.
    client = spawn('nsenter', ['-t', pid, '-n', process.execPath, '-e', CLIENT], { stdio: ['ignore', 'pipe', 'inherit'] });
    let echoes = 0;
    let lastEcho = performance.now();
    client.stdout.on('data', (d) => {
      const n = String(d).split('\n').filter((l) => l === 'echo').length;
      if (n) { echoes += n; lastEcho = performance.now(); }
    });
    await started(client, 'connected');
    await sbx.until(() => echoes >= 10, 10000, 'echoes under public');

    // To none: the established connection stops passing data.
    const p = await req(sbx.gw, 'PATCH', `/v1/apps/${a.app.id}`, { token: sbx.gw.admin, body: { network: { egress: 'none' } } });
    assert.equal(p.status, 200, p.text);
    await sbx.until(() => performance.now() - lastEcho > 2000, 20000, 'the established connection to stop');
    const stoppedAt = echoes;
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(echoes, stoppedAt, 'echoes came back after the connection had stopped');
    assert.equal(client.exitCode, null, 'the client is still writing');

    // The Sandbox itself still works (its callback API on the host stays reachable).
    const after = await sbx.roundTrip(a.key, sa.id, { run: ['/bin/busybox', 'true'] });
    assert.equal(after.state, 'completed', after.error);
    assert.equal(after.sandboxId, first.sandboxId, 'the policy changed without a new Sandbox');
    bodyFailed = false;
  } finally {
    if (client) client.kill();
    server.kill();
    const results = await sbx.stop();
    execFileSync('bash', [WORLD, 'down', dir]);
    rmSync(dir, { recursive: true, force: true });
    sbx.cleanup();
    assertWorkersExited(results, bodyFailed);
  }
});
