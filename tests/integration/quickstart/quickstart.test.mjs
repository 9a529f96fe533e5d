// quickstart.test.mjs: what the README's quickstart does, on the embedded defaults: a gateway and
// a worker started with no settings but a free port, in a fresh working directory (so the data
// directory is the relative ./data), the bootstrap's admin token, echo App key and curl lines on
// stdout, and the echo App answering through a warm process Sandbox.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';

const GATEWAY = process.env.SBX_GATEWAY_BIN;
const WORKER = process.env.SBX_WORKER_BIN;

function freePort() {
  return new Promise((resolve) => {
    const srv = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function start(bin, cwd, env) {
  const p = spawn(bin, [], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  p.out = '';
  p.log = ''; // stderr: the JSON log lines, shown when the test fails
  p.stdout.on('data', (d) => (p.out += d));
  p.stderr.on('data', (d) => (p.log += d));
  p.exited = new Promise((r) => p.on('exit', (code, signal) => r({ code, signal })));
  return p;
}

test('the quickstart on the embedded defaults: bootstrap output, then an echo reply', async () => {
  const cwd = mkdtempSync(join(tmpdir(), 'sbx-it-quickstart-'));
  const port = await freePort();
  const env = { ...process.env, SBX_LISTEN: `127.0.0.1:${port}` };
  for (const k of Object.keys(env)) if (k.startsWith('SBX_') && k !== 'SBX_LISTEN') delete env[k];
  // As tools/sbx up does: both at once, the worker possibly before the data directory exists.
  const worker = start(WORKER, cwd, env);
  const gateway = start(GATEWAY, cwd, env);
  try {
    const base = `http://127.0.0.1:${port}`;
    for (let i = 0; i < 200 && !/\?wait=10/.test(gateway.out); i++) await new Promise((r) => setTimeout(r, 50));
    assert.match(gateway.out, /sbx_admin_[A-Za-z0-9_-]{20,}/, 'no admin token printed');
    const key = /KEY=(sbx_[A-Za-z0-9_-]+)/.exec(gateway.out)?.[1];
    assert.ok(key, `no echo App key printed:\n${gateway.out}`);
    assert.match(gateway.out, new RegExp(`curl .*127\\.0\\.0\\.1:${port}/v1/sessions`));
    assert.ok(existsSync(join(cwd, 'data', 'sbx.db')), 'the database is not under ./data');

    const h = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
    const s = await (await fetch(`${base}/v1/sessions`, { method: 'POST', headers: h, body: '{}' })).json();
    const m = await (await fetch(`${base}/v1/sessions/${s.id}/messages`, {
      method: 'POST', headers: h, body: JSON.stringify({ body: { hello: 'world' } }),
    })).json();
    assert.equal(m.state, 'queued');
    let r;
    for (let i = 0; i < 6; i++) {
      r = await (await fetch(`${base}/v1/sessions/${s.id}/messages/${m.id}?wait=10`, { headers: h })).json();
      if (r.state === 'completed' || r.state === 'failed') break;
    }
    assert.equal(r.state, 'completed', `the echo App did not answer: ${r.error}\nworker log:\n${worker.log.slice(-4000)}`);
    assert.deepEqual(r.reply.echo, { hello: 'world' });
    assert.notEqual(r.reply.uid, 0);
    const jails = readdirSync(join(cwd, 'data', 'jail', 'process'));
    assert.ok(jails.some((j) => j.endsWith(`-${r.sandboxId}`)), `the jail is not under ./data/jail: ${jails}`);
  } finally {
    gateway.kill('SIGTERM');
    worker.kill('SIGTERM');
    const [g, w] = await Promise.all([gateway.exited, worker.exited]);
    rmSync(cwd, { recursive: true, force: true });
    assert.deepEqual(g, { code: 0, signal: null }, `gateway log:\n${gateway.log.slice(-4000)}`);
    assert.deepEqual(w, { code: 0, signal: null }, `worker log:\n${worker.log.slice(-4000)}`);
  }
});
