// lib.mjs: what the benchmark scenarios share: starting sbx (gateway + workers) on a fresh data
// directory, a small REST client, percentiles and the results table.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

export function summarize(samplesMs) {
  const s = [...samplesMs].sort((a, b) => a - b);
  return { n: s.length, p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1] };
}

// One sbx instance: a gateway and N workers on a temporary data directory.
export class Sbx {
  constructor(buildDir, env = {}) {
    this.buildDir = buildDir;
    this.env = env;
    this.procs = [];
    this.adminToken = 'sbx_admin_bench_' + Math.random().toString(36).slice(2);
  }

  async start({ workers = 1, gatewayOnly = false, dataDir } = {}) {
    this.port = await freePort();
    this.dataDir = dataDir || mkdtempSync(join(tmpdir(), 'sbx-bench-'));
    this.base = `http://127.0.0.1:${this.port}`;
    const env = {
      ...process.env,
      SBX_DATA_DIR: this.dataDir,
      SBX_LISTEN: `127.0.0.1:${this.port}`,
      SBX_ADMIN_TOKEN: this.adminToken,
      SBX_LOG_LEVEL: process.env.SBX_BENCH_LOG_LEVEL || 'warn',
      ...this.env,
    };
    this.procEnv = env;
    this.gateway = this.spawn(join(this.buildDir, 'gateway/sbx-gateway'), env);
    await this.waitHealthy();
    if (!gatewayOnly) for (let i = 0; i < workers; i++) this.startWorker();
    return this;
  }

  // SBX_BENCH_PERF=<dir> runs every daemon under `perf record --call-graph dwarf`, one
  // <dir>/<daemon>-<n>.data each, for profiling a scenario (docs/performance.md).
  spawn(bin, env) {
    const perfDir = process.env.SBX_BENCH_PERF;
    const [cmd, args] = perfDir
      ? ['perf', ['record', '-q', '--call-graph', 'dwarf,16384', '-F', '4000', '-o', join(perfDir, `${bin.split('/').pop()}-${this.procs.length}.data`), '--', bin]]
      : [bin, []];
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    p.stderr.on('data', (d) => {
      if (process.env.SBX_BENCH_VERBOSE) process.stderr.write(d);
    });
    this.procs.push(p);
    return p;
  }

  startWorker() {
    return this.spawn(join(this.buildDir, 'worker/sbx-worker'), this.procEnv);
  }

  // Another gateway on the same store (stateless gateways: PostgreSQL); returns its base URL.
  async addGateway() {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    this.spawn(join(this.buildDir, 'gateway/sbx-gateway'), { ...this.procEnv, SBX_LISTEN: `127.0.0.1:${port}` });
    for (let i = 0; i < 200; i++) {
      try {
        if ((await fetch(base + '/healthz')).ok) return base;
      } catch {}
      await sleep(50);
    }
    throw new Error('an added gateway did not become healthy');
  }

  async waitHealthy() {
    for (let i = 0; i < 200; i++) {
      try {
        const r = await fetch(this.base + '/healthz');
        if (r.ok) return;
      } catch {}
      await sleep(50);
    }
    throw new Error('gateway did not become healthy');
  }

  async stop({ keep = false } = {}) {
    for (const p of this.procs) if (p.exitCode === null) p.kill('SIGTERM');
    await Promise.all(
      this.procs.map(
        (p) =>
          new Promise((r) => {
            if (p.exitCode !== null) return r();
            const t = setTimeout(() => p.kill('SIGKILL'), 15000);
            p.on('exit', () => {
              clearTimeout(t);
              r();
            });
          }),
      ),
    );
    this.procs = [];
    if (!keep) rmSync(this.dataDir, { recursive: true, force: true });
  }

  async req(method, path, { token, body, headers = {} } = {}) {
    const h = { Authorization: `Bearer ${token ?? this.key}`, ...headers };
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const r = await fetch(this.base + path, {
      method,
      headers: h,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {}
    if (r.status >= 400) throw new Error(`${method} ${path}: ${r.status} ${text}`);
    return json;
  }

  // An App (admin) and a key for it; later requests use the key.
  async app(fields = {}) {
    const app = await this.req('POST', '/v1/apps', {
      token: this.adminToken,
      body: { name: 'bench' + Math.random().toString(36).slice(2, 8), ...fields },
    });
    const key = await this.req('POST', `/v1/apps/${app.id}/keys`, { token: this.adminToken, body: {} });
    this.appId = app.id;
    this.key = key.key;
    return app;
  }

  session(fields = {}) {
    return this.req('POST', '/v1/sessions', { body: fields });
  }

  post(sessionId, body) {
    return this.req('POST', `/v1/sessions/${sessionId}/messages`, { body: { body } });
  }

  // The timed round trips of every scenario, through sbx-bench-burst (tools/bench/burst_client.c,
  // built with the project): Node's fetch took about 40 % of this machine's CPU in a burst, more
  // than sbx itself, so a timing through it measured the client as much as sbx. Posts one message
  // to each Session at once and long-polls each to its end; returns each one's time from the first
  // POST (ms), state and id, the last one's time, and the Unix time the first POST went out.
  async timedRoundTrips(sessionIds) {
    const client = join(this.buildDir, 'tools', 'bench', 'sbx-bench-burst');
    if (!existsSync(client)) throw new Error(`${client} is missing: build the project first`);
    const out = await new Promise((resolve, reject) => {
      const p = spawn(client, ['127.0.0.1', String(this.port), this.key, ...sessionIds], { stdio: ['ignore', 'pipe', 'inherit'] });
      let text = '';
      p.stdout.on('data', (d) => (text += d));
      p.on('error', reject);
      p.on('close', (code) => (code === 0 ? resolve(text) : reject(new Error(`sbx-bench-burst exited ${code}`))));
    });
    const lines = out.trim().split('\n');
    return {
      wall0: Number(lines[0].split(' ')[1]),
      total: Number(lines.at(-1).split(' ')[1]),
      done: lines.slice(1, -1).map((l) => {
        const [ms, state, id] = l.split(' ');
        return { id, state, latencyMs: Number(ms) };
      }),
    };
  }

  // One Session's round trip, timed as above: the final message (read afterwards, untimed) with
  // its latencyMs.
  async timedRoundTrip(sessionId) {
    const [d] = (await this.timedRoundTrips([sessionId])).done;
    const m = await this.req('GET', `/v1/sessions/${sessionId}/messages/${d.id}`);
    return { ...m, latencyMs: d.latencyMs };
  }

  // Posts a message and long-polls until it ends; returns the final message (untimed uses).
  async roundTrip(sessionId, body) {
    const m = await this.post(sessionId, body);
    for (;;) {
      const r = await this.req('GET', `/v1/sessions/${sessionId}/messages/${m.id}?wait=30`);
      if (r.state === 'completed' || r.state === 'failed') return r;
    }
  }

  async pool() {
    return this.req('GET', '/v1/pool', { token: this.adminToken });
  }

  // Waits until the pool holds n warm Sandboxes of the driver (the bootstrap echo App and the
  // bench App share the process shape, so only the driver tells shapes apart here).
  async waitWarm(n, timeoutMs = 120000, driver = 'process') {
    const until = Date.now() + timeoutMs;
    let warm = 0;
    while (Date.now() < until) {
      const p = await this.pool();
      warm = (p.shapes || []).filter((s) => s.driver === driver).reduce((a, s) => a + s.warm, 0);
      if (warm >= n) return warm;
      await sleep(10);
    }
    throw new Error(`pool did not reach ${n} warm ${driver} Sandboxes in ${timeoutMs} ms (${warm} warm)`);
  }

  // Rows of a query as objects, from the sqlite3 CLI or, on a PostgreSQL store, psql.
  sql(query) {
    const store = this.env.SBX_STORE;
    if (store && store !== 'sqlite') {
      const out = execFileSync('psql', ['-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', store, '-c',
        `SELECT coalesce(json_agg(t), '[]') FROM (${query}) t`], { encoding: 'utf8', maxBuffer: 64 << 20 });
      return JSON.parse(out.trim() || '[]');
    }
    const out = execFileSync('sqlite3', ['-json', join(this.dataDir, 'sbx.db'), query], {
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    return out.trim() ? JSON.parse(out) : [];
  }

  rssBytes() {
    const status = readFileSync(`/proc/${this.gateway.pid}/status`, 'utf8');
    const m = status.match(/VmRSS:\s+(\d+) kB/);
    return m ? Number(m[1]) * 1024 : NaN;
  }
}

// Runs wrk against url with the POST script; returns requests/s and latency percentiles in ms.
export function runWrk({ url, connections, seconds, script, env }) {
  const threads = Math.min(2, connections);
  const out = execFileSync(
    'wrk',
    ['-t', String(threads), '-c', String(connections), '-d', `${seconds}s`, '--latency', '-s', script, url],
    { encoding: 'utf8', env: { ...process.env, ...env } },
  );
  return parseWrk(out);
}

// The same run without blocking, so that several wrk processes (one per gateway) run at once.
export function runWrkAsync({ url, connections, seconds, script, env }) {
  const threads = Math.min(2, connections);
  return new Promise((resolve, reject) => {
    const p = spawn(
      'wrk',
      ['-t', String(threads), '-c', String(connections), '-d', `${seconds}s`, '--latency', '-s', script, url],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    // 'close', not 'exit': a process can exit before its stdout has been read to the end, and a
    // table parsed from half of wrk's report has no figures.
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve(parseWrk(out)) : reject(new Error(`wrk exited ${code}`))));
  });
}

function parseWrk(out) {
  const rps = Number((out.match(/Requests\/sec:\s+([\d.]+)/) || [])[1]);
  const lat = (p) => {
    const m = out.match(new RegExp(`\\s${p}%\\s+([\\d.]+)(us|ms|s)`));
    if (!m) return NaN;
    const v = Number(m[1]);
    return m[2] === 'us' ? v / 1000 : m[2] === 's' ? v * 1000 : v;
  };
  const non2xx = Number((out.match(/Non-2xx or 3xx responses:\s+(\d+)/) || [0, 0])[1]);
  const errors = (out.match(/Socket errors:[^\n]*/) || [''])[0];
  const requests = Number((out.match(/(\d+) requests in/) || [0, 0])[1]);
  return { rps, p50: lat(50), p99: lat(99), requests, non2xx, errors };
}

export function writeJson(path, value) {
  writeFileSync(path, JSON.stringify(value, null, 2) + '\n');
}
