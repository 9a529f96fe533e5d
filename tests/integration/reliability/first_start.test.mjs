// first_start.test.mjs: concurrent first opens of an empty store. As `tools/sbx up` does, a gateway
// and a worker start at the same moment on a fresh data directory (on PostgreSQL, a fresh
// database): both must come up and serve, every time. 40 data directories (SBX_FIRST_START_ROUNDS),
// a few at once so that the starts also contend with each other for the machine. The store's own
// concurrent first opens are hammered harder, and cheaper, by unit.store.first_open.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { tempDataDir, storeFor, removeDataDir, onPostgres } from '../gateway/harness.mjs';

const GATEWAY = process.env.SBX_GATEWAY_BIN;
const WORKER = process.env.SBX_WORKER_BIN;
const ROUNDS = Number(process.env.SBX_FIRST_START_ROUNDS || 40);
const AT_ONCE = 4;
const WORKERS = 2; // any number of processes of either kind: a gateway and two workers

function start(bin, args, env) {
  const p = spawn(bin, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  p.log = '';
  p.stderr.on('data', (d) => (p.log += d));
  p.exited = new Promise((r) => p.on('exit', (code, signal) => r({ code, signal })));
  return p;
}

// Resolves once re matches p's log; rejects if p exits first or after ms.
function waitFor(p, re, ms, what) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not start in ${ms} ms:\n${p.log}`)), ms);
    const check = () => {
      const m = re.exec(p.log);
      if (m) { clearTimeout(timer); resolve(m); }
    };
    p.stderr.on('data', check);
    check();
    p.exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${code ?? signal}) on a fresh store:\n${p.log}`));
    });
  });
}

async function oneFirstStart() {
  const dataDir = tempDataDir();
  removeDataDir(dataDir); // as on a first `tools/sbx up`: the data directory does not exist yet
  // On PostgreSQL the fresh store is a new, empty database (named in the data directory).
  if (onPostgres) mkdirSync(dataDir);
  const store = onPostgres ? storeFor(dataDir) : 'sqlite';
  const env = {
    ...process.env, SBX_DATA_DIR: dataDir, SBX_STORE: store, SBX_POOL_SIZE: '0',
    SBX_LOG_LEVEL: 'info', SBX_ADMIN_TOKEN: '', SBX_POLL_MS: '200', SBX_HEARTBEAT_MS: '200',
  };
  const gateway = start(GATEWAY, ['--listen', '127.0.0.1:0'], env);
  const workers = Array.from({ length: WORKERS }, () => start(WORKER, [], env));
  try {
    const [, port] = await waitFor(gateway, /listening on 127\.0\.0\.1:(\d+)/, 30000, 'the gateway');
    for (const w of workers) await waitFor(w, /worker \S+ started on host/, 30000, 'a worker');
    const r = await fetch(`http://127.0.0.1:${port}/healthz`);
    assert.equal(r.status, 200, `healthz: ${r.status}`);
  } finally {
    for (const p of [gateway, ...workers]) p.kill('SIGTERM');
    const [g, ...ws] = await Promise.all([gateway, ...workers].map((p) => p.exited));
    removeDataDir(dataDir);
    assert.deepEqual(g, { code: 0, signal: null }, `gateway log:\n${gateway.log.slice(-3000)}`);
    ws.forEach((w, i) => assert.deepEqual(w, { code: 0, signal: null }, `worker log:\n${workers[i].log.slice(-3000)}`));
  }
}

test(`a gateway and two workers started together on ${ROUNDS} fresh stores all serve`, { timeout: 170000 }, async () => {
  let next = 0;
  const failures = [];
  const lane = async () => {
    while (next < ROUNDS) {
      next++;
      try {
        await oneFirstStart();
      } catch (e) {
        failures.push(e.message);
      }
    }
  };
  await Promise.all(Array.from({ length: AT_ONCE }, lane));
  assert.equal(failures.length, 0, `${failures.length} of ${ROUNDS} first starts failed; the first:\n${failures[0]}`);
});
