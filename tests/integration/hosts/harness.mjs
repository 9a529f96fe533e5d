// harness.mjs: several worker hosts and gateways on one store, for the hosts tests. A "host" is a
// set of worker processes (SBX_WORKER_BIN, usually sbx-worker-fork) with one host id and a data
// directory of its own (its run/ wake-up sockets and its jail root), all sharing one database;
// gateways (SBX_GATEWAY_BIN) share it too, each with a data directory of its own. Several hosts
// on one machine behave like several machines here: the store is the only thing they share.
//
// The store is chosen like sbx chooses it: SBX_STORE unset or "sqlite" uses one SQLite file in the
// test's directory; a postgres:// URL (SBX_STORE, or SBX_TEST_PG_URL under tests/pg-run.sh) names
// a server on which each cluster makes a database of its own. sql() runs a query with the sqlite3 CLI or psql
// accordingly, so the tests' queries stay in the SQL both understand (no json_extract, no boolean
// results).
import { spawn, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const GATEWAY_BIN = process.env.SBX_GATEWAY_BIN;
export const WORKER_BIN = process.env.SBX_WORKER_BIN;
if (!GATEWAY_BIN || !WORKER_BIN) throw new Error('SBX_GATEWAY_BIN and SBX_WORKER_BIN must be set');
// Under tests/pg-run.sh (SBX_TEST_PG_URL set) PostgreSQL is the default.
export const STORE = process.env.SBX_STORE || process.env.SBX_TEST_PG_URL || 'sqlite';
const PG = /^postgres(ql)?:\/\//.test(STORE);

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Settings small enough for a 2-core machine and quick tests.
export const FAST = {
  SBX_POOL_SIZE: '1',
  SBX_POLL_MS: '200',
  SBX_HEARTBEAT_MS: '200',
  SBX_WORKER_STALE_MS: '10000',
  SBX_HOST_LOST_MS: '3000',
  SBX_PLACEMENT_GRACE_MS: '1000',
  SBX_RETRY_BASE_MS: '50',
  SBX_RETRY_MAX_MS: '400',
  SBX_MESSAGE_TIMEOUT: '5',
  SBX_LEASE_MS: '20000',
  SBX_SHUTDOWN_GRACE: '5',
  SBX_JOB_THREADS: '4',
  SBX_SYNCHRONOUS: 'NORMAL',
  SBX_BUSY_TIMEOUT_MS: '20000',
};

function spawnLogged(bin, args, env) {
  const p = spawn(bin, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  p.log = '';
  p.stderr.on('data', (d) => {
    p.log += d;
    if (process.env.SBX_TEST_VERBOSE) process.stderr.write(d);
  });
  p.exited = new Promise((resolve) => p.on('exit', (code, signal) => resolve({ code, signal })));
  return p;
}

// On PostgreSQL each cluster gets a database of its own, made on the server SBX_STORE names and
// dropped at cleanup, so that tests never see each other's hosts.
function pgCreateDatabase() {
  const name = 'sbx_it_hosts_' + randomBytes(6).toString('hex');
  execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', STORE, '-c', `CREATE DATABASE ${name}`]);
  const url = new URL(STORE);
  url.pathname = '/' + name;
  return { name, url: url.toString() };
}

export function startCluster({ env = {} } = {}) {
  const root = mkdtempSync(join(tmpdir(), 'sbx-it-hosts-'));
  const admin = 'sbx_admin_hosts_it_' + randomBytes(12).toString('hex');
  const dbPath = join(root, 'sbx.db');
  const pgdb = PG ? pgCreateDatabase() : null;
  const store = pgdb ? pgdb.url : STORE;
  const base = { ...process.env, ...FAST, SBX_LOG_LEVEL: 'info', SBX_STORE: store, SBX_DB_PATH: dbPath, SBX_ADMIN_TOKEN: admin, ...env };
  const cluster = {
    root, admin, dbPath, store, gateways: [], hosts: {},

    // A gateway; resolves once it listens. Its data directory is its own, or a host's (give
    // host: id): then it wakes that host's workers and they wake its long polls, as on one
    // machine; the other hosts' workers find its messages by their poll.
    async startGateway(name, { host } = {}) {
      const dataDir = host ? join(root, `host-${host}`) : join(root, `gw-${name}`);
      mkdirSync(dataDir, { recursive: true });
      const p = spawnLogged(GATEWAY_BIN, ['--data-dir', dataDir, '--listen', '127.0.0.1:0'], base);
      const port = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`gateway ${name} did not start:\n${p.log}`)), 20000);
        const onData = () => {
          const m = /listening on 127\.0\.0\.1:(\d+)/.exec(p.log);
          if (m) { clearTimeout(timer); p.stderr.off('data', onData); resolve(Number(m[1])); }
        };
        p.stderr.on('data', onData);
        p.exited.then(({ code }) => { clearTimeout(timer); reject(new Error(`gateway ${name} exited ${code}:\n${p.log}`)); });
      });
      const gw = { name, proc: p, dataDir, url: `http://127.0.0.1:${port}` };
      this.gateways.push(gw);
      return gw;
    },

    // Starts `workers` worker processes of host `id` (its data directory and jail root under
    // root/host-<id>); more can be added later with the same call.
    startHost(id, { workers = 1, env: hostEnv = {} } = {}) {
      const dataDir = join(root, `host-${id}`);
      mkdirSync(dataDir, { recursive: true });
      const h = this.hosts[id] ?? (this.hosts[id] = { id, dataDir, jailRoot: join(dataDir, 'jail', 'fork'), procs: [], env: {} });
      Object.assign(h.env, hostEnv);
      for (let i = 0; i < workers; i++)
        h.procs.push(spawnLogged(WORKER_BIN, [], { ...base, SBX_DATA_DIR: dataDir, SBX_HOST_ID: id, ...h.env }));
      return h;
    },

    // kill -9 of every worker process of the host, as when its machine dies.
    async killHost(id) {
      const h = this.hosts[id];
      for (const p of h.procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
      await Promise.all(h.procs.map((p) => p.exited));
    },

    // SIGTERM to everything; the exit statuses of the workers that were still running.
    async stop() {
      const results = {};
      const live = (p) => p.exitCode === null && p.signalCode === null;
      for (const h of Object.values(this.hosts))
        // SIGCONT too: a test may have paused a host (SIGSTOP) and failed before resuming it.
        for (const p of h.procs) if (live(p)) { p.kill('SIGTERM'); p.kill('SIGCONT'); (results[h.id] ??= []).push(p); }
      for (const [id, procs] of Object.entries(results)) {
        results[id] = [];
        for (const p of procs) {
          const t = setTimeout(() => p.kill('SIGKILL'), 20000);
          results[id].push(await p.exited);
          clearTimeout(t);
        }
      }
      for (const g of this.gateways) if (live(g.proc)) { g.proc.kill('SIGTERM'); await g.proc.exited; }
      return results;
    },

    cleanup() {
      rmSync(root, { recursive: true, force: true });
      // As the cluster's superuser where tests/pg-run.sh names one: FORCE must also end an
      // autovacuum worker that happens to be in the database, which the owner may not signal.
      const admin = STORE === process.env.SBX_TEST_PG_URL && process.env.SBX_TEST_PG_ADMIN_URL || STORE;
      if (pgdb) execFileSync('psql', ['-X', '-q', admin, '-c', `DROP DATABASE IF EXISTS ${pgdb.name} WITH (FORCE)`]);
    },

    // One query against the shared store; rows separated by newlines, columns by '|'.
    sql(q) {
      if (PG) return execFileSync('psql', ['-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1', store, '-c', q], { encoding: 'utf8' }).trim();
      return execFileSync('sqlite3', ['-cmd', '.timeout 10000', dbPath, q], { encoding: 'utf8' }).trim();
    },
    num(q) {
      return Number(this.sql(q));
    },

    async req(gw, method, path, { token, body } = {}) {
      const headers = {};
      if (token) headers.Authorization = `Bearer ${token}`;
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      const res = await fetch(gw.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await res.text();
      let json = null;
      try { json = text ? JSON.parse(text) : null; } catch { json = null; }
      return { status: res.status, json, text };
    },
    async app(gw, name, fields = {}) {
      const a = await this.req(gw, 'POST', '/v1/apps', { token: admin, body: { name, ...fields } });
      if (a.status !== 201) throw new Error(`app: ${a.status} ${a.text}`);
      const k = await this.req(gw, 'POST', `/v1/apps/${a.json.id}/keys`, { token: admin, body: {} });
      if (k.status !== 201) throw new Error(`key: ${k.status} ${k.text}`);
      return { app: a.json, key: k.json.key };
    },
    async session(gw, key) {
      const r = await this.req(gw, 'POST', '/v1/sessions', { token: key, body: {} });
      if (r.status !== 201) throw new Error(`session: ${r.status} ${r.text}`);
      return r.json;
    },
    async post(gw, key, sid, body) {
      const r = await this.req(gw, 'POST', `/v1/sessions/${sid}/messages`, { token: key, body: { body } });
      if (r.status !== 202) throw new Error(`post: ${r.status} ${r.text}`);
      return r.json;
    },
    async wait(gw, key, sid, mid, timeoutS = 30) {
      const until = performance.now() + timeoutS * 1000;
      for (;;) {
        const r = await this.req(gw, 'GET', `/v1/sessions/${sid}/messages/${mid}?wait=5`, { token: key });
        if (r.status !== 200) throw new Error(`get: ${r.status} ${r.text}`);
        if (r.json.state === 'completed' || r.json.state === 'failed') return r.json;
        if (performance.now() > until) throw new Error(`message ${mid} still ${r.json.state}`);
      }
    },
    // Polls fn until it returns a truthy value or timeoutMs passes. On PostgreSQL every query is
    // a psql process: poll less often, so that the test does not take the CPU sbx needs.
    async until(fn, timeoutMs = 10000, what = 'condition') {
      const end = performance.now() + timeoutMs;
      for (;;) {
        const v = await fn();
        if (v) return v;
        if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
        await sleep(PG ? 250 : 50);
      }
    },
    // The host whose worker booted the Sandbox.
    hostOfSandbox(sandboxId) {
      return this.sql(`SELECT w.host_id FROM sandboxes b JOIN workers w ON w.id = b.worker_id WHERE b.id = '${sandboxId}'`);
    },
  };
  return cluster;
}
