// harness.mjs: a live sbx for the worker tests: the real sbx-gateway (via the gateway tests'
// harness) plus N worker processes (SBX_WORKER_BIN: sbx-worker, or sbx-worker-fork for the
// lifecycle tests on the fork test driver) sharing one temporary data directory.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { startGateway, req, sql, removeDataDir } from '../gateway/harness.mjs';

export { req, sql };
export const WORKER_BIN = process.env.SBX_WORKER_BIN;
if (!WORKER_BIN) throw new Error('SBX_WORKER_BIN must name the worker binary');

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Settings small enough for a 2-core machine and quick tests.
export const FAST = {
  SBX_POOL_SIZE: '1',
  SBX_POLL_MS: '200',
  SBX_HEARTBEAT_MS: '200',
  SBX_WORKER_STALE_MS: '10000',
  SBX_RETRY_BASE_MS: '50',
  SBX_RETRY_MAX_MS: '400',
  SBX_MESSAGE_TIMEOUT: '3',
  SBX_LEASE_MS: '10000',
  SBX_SHUTDOWN_GRACE: '5',
  SBX_JOB_THREADS: '4',
  SBX_SYNCHRONOUS: 'NORMAL',
};

// What a process and its descendants are blocked in, from /proc: each thread's name, state and
// wait channel, and each descendant's command line.
function readProc(path) {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return '?';
  }
}
function stuckReport(pid) {
  const children = new Map();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const stat = readProc(`/proc/${d}/stat`);
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (!children.has(ppid)) children.set(ppid, []);
    children.get(ppid).push(Number(d));
  }
  const descendants = [];
  const lines = [];
  const describe = (p, depth) => {
    const cmd = readProc(`/proc/${p}/cmdline`).replaceAll('\0', ' ');
    lines.push(`${'  '.repeat(depth)}pid ${p}: ${cmd.slice(0, 200)}`);
    let tasks = [];
    try {
      tasks = readdirSync(`/proc/${p}/task`);
    } catch {
      /* gone */
    }
    for (const t of tasks) {
      const stat = readProc(`/proc/${p}/task/${t}/stat`);
      const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
      lines.push(`${'  '.repeat(depth + 1)}thread ${t} ${readProc(`/proc/${p}/task/${t}/comm`)} ` +
        `state ${state} wchan ${readProc(`/proc/${p}/task/${t}/wchan`)} syscall ${readProc(`/proc/${p}/task/${t}/syscall`).split(' ')[0]}`);
    }
    for (const c of children.get(p) || []) {
      descendants.push(c);
      describe(c, depth + 1);
    }
  };
  describe(pid, 0);
  return { text: `the worker did not exit within 20 s of SIGTERM:\n${lines.join('\n')}`, descendants };
}

// Asserts every worker exited 0; one that was stuck shows what it was waiting in and its log.
// After a test body that failed (bodyFailed), it only prints that, so that the body's own error,
// the first cause, is the one the test reports.
export function assertWorkersExited(results, bodyFailed = false) {
  for (const r of results) {
    const what = `worker exit ${JSON.stringify({ code: r.code, signal: r.signal })}${r.stuck ? `\n${r.stuck}` : ''}`;
    if (bodyFailed) {
      if (r.code !== 0) console.log(what);
    } else {
      assert.equal(r.code, 0, what);
    }
  }
}

export async function startSbx({ workers = 1, env = {} } = {}) {
  // The admin token is set rather than read from the gateway's first-start output, which may
  // still sit in its stdout buffer when the gateway starts listening.
  const admin = 'sbx_admin_worker_it_' + randomBytes(12).toString('hex');
  const gw = await startGateway({ env: { ...FAST, ...env, SBX_ADMIN_TOKEN: admin } });
  gw.admin = admin;
  const sbx = {
    gw,
    dataDir: gw.dataDir,
    workers: [],
    env: { ...process.env, ...FAST, SBX_DATA_DIR: gw.dataDir, SBX_STORE: gw.store, SBX_LOG_LEVEL: 'info', ...env },
    // wrapper: a command line the worker binary is appended to (e.g. to run it in a namespace).
    startWorker(wrapper = []) {
      const argv = [...wrapper, WORKER_BIN];
      const p = spawn(argv[0], argv.slice(1), { env: this.env, stdio: ['ignore', 'ignore', 'pipe'] });
      p.log = '';
      p.stderr.on('data', (d) => {
        p.log += d;
        if (process.env.SBX_TEST_VERBOSE) process.stderr.write(d);
      });
      p.exited = new Promise((resolve) => p.on('exit', (code, signal) => resolve({ code, signal })));
      this.workers.push(p);
      return p;
    },
    async stop() {
      const results = [];
      for (const p of this.workers) {
        if (p.exitCode === null && p.signalCode === null) p.kill('SIGTERM');
      }
      for (const p of this.workers) {
        // A worker still there 20 s after SIGTERM is stuck: what its threads and children wait
        // in goes with its result, and its descendants go with it, since they would otherwise
        // keep its stderr pipe (and so this test) open until ctest's timeout.
        let stuck = null;
        const t = setTimeout(() => {
          stuck = stuckReport(p.pid);
          p.kill('SIGKILL');
          for (const pid of stuck.descendants) {
            try {
              process.kill(pid, 'SIGKILL');
            } catch {
              /* gone already */
            }
          }
        }, 20000);
        const r = await p.exited;
        clearTimeout(t);
        if (stuck) r.stuck = `${stuck.text}\nits log ends:\n${p.log.slice(-3000)}`;
        results.push(r);
      }
      await gw.stop();
      return results;
    },
    cleanup() {
      removeDataDir(gw.dataDir);
    },
    sql(q) {
      return sql(gw, q);
    },
    async app(name, fields = {}) {
      const a = await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name, ...fields } });
      if (a.status !== 201) throw new Error(`app: ${a.status} ${a.text}`);
      const k = await req(gw, 'POST', `/v1/apps/${a.json.id}/keys`, { token: gw.admin, body: {} });
      if (k.status !== 201) throw new Error(`key: ${k.status} ${k.text}`);
      return { app: a.json, key: k.json.key };
    },
    async session(key, fields = {}) {
      const r = await req(gw, 'POST', '/v1/sessions', { token: key, body: fields });
      if (r.status !== 201 && r.status !== 200) throw new Error(`session: ${r.status} ${r.text}`);
      return r.json;
    },
    async post(key, sid, body) {
      const r = await req(gw, 'POST', `/v1/sessions/${sid}/messages`, { token: key, body: { body } });
      if (r.status !== 202) throw new Error(`post: ${r.status} ${r.text}`);
      return r.json;
    },
    async wait(key, sid, mid, timeoutS = 30) {
      const until = performance.now() + timeoutS * 1000;
      for (;;) {
        const r = await req(gw, 'GET', `/v1/sessions/${sid}/messages/${mid}?wait=5`, { token: key });
        if (r.status !== 200) throw new Error(`get: ${r.status} ${r.text}`);
        if (r.json.state === 'completed' || r.json.state === 'failed') return r.json;
        if (performance.now() > until) {
          // What the workers said is the only clue to why nothing moved: keep it with the failure.
          const logs = this.workers.map((p, i) => `worker ${i} (${p.exitCode ?? p.signalCode ?? 'running'}): ${p.log.slice(-1500)}`);
          throw new Error(`message ${mid} still ${r.json.state}\n${logs.join('\n')}`);
        }
      }
    },
    async roundTrip(key, sid, body, timeoutS) {
      const m = await this.post(key, sid, body);
      return this.wait(key, sid, m.id, timeoutS);
    },
    async getSession(key, sid) {
      return (await req(gw, 'GET', `/v1/sessions/${sid}`, { token: key })).json;
    },
    async getSandbox(key, id) {
      return (await req(gw, 'GET', `/v1/sandboxes/${id}`, { token: key })).json;
    },
    // Polls fn until it returns a truthy value or timeoutMs passes.
    async until(fn, timeoutMs = 10000, what = 'condition') {
      const end = performance.now() + timeoutMs;
      for (;;) {
        const v = await fn();
        if (v) return v;
        if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
        await sleep(50);
      }
    },
    jailRoot(driver) {
      return join(gw.dataDir, 'jail', driver);
    },
  };
  for (let i = 0; i < workers; i++) sbx.startWorker();
  return sbx;
}
