// soak.mjs: the soak run behind tools/soak.sh (`tools/sbx soak`). Starts a real sbx-gateway and
// sbx-worker(s) on a temporary data directory, drives mixed traffic (messages with long polls,
// lists, Session and Workspace churn, events, metrics) for the given minutes, and every 10 s
// prints each daemon's resident memory and open file descriptors. At the end it compares the
// samples after warm-up with the last ones and exits 1 when either kept growing.
//
// Options (environment): SOAK_MINUTES (5), SOAK_WORKERS (1), SOAK_CONCURRENCY (4),
// SOAK_GATEWAY_BIN, SOAK_WORKER_BIN, SOAK_KEEP (keep the data directory).
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const minutes = Number(process.env.SOAK_MINUTES ?? 5);
const nWorkers = Number(process.env.SOAK_WORKERS ?? 1);
const concurrency = Number(process.env.SOAK_CONCURRENCY ?? 4);
const GATEWAY = process.env.SOAK_GATEWAY_BIN, WORKER = process.env.SOAK_WORKER_BIN;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pick = (a) => a[Math.floor(Math.random() * a.length)];

const dataDir = mkdtempSync(join(tmpdir(), 'sbx-soak-'));
const env = { ...process.env, SBX_ADMIN_TOKEN: '', SBX_DATA_DIR: dataDir, SBX_LOG_LEVEL: 'warn',
  SBX_POOL_SIZE: '2', SBX_MESSAGE_TIMEOUT: '10' };

function startGateway() {
  const p = spawn(GATEWAY, ['--data-dir', dataDir, '--listen', '127.0.0.1:0', '--log-level', 'info'],
    { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '', err = '';
  p.stdout.on('data', (d) => { out += d; });
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`gateway did not start:\n${err}`)), 30000);
    p.stderr.on('data', (d) => {
      if (err.length < 65536) err += d; // keep only the start-up log: this runs for minutes
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(err);
      if (m && !p.port) {
        clearTimeout(t);
        p.port = Number(m[1]);
        setTimeout(() => resolve({ p, url: `http://127.0.0.1:${p.port}`, admin: /sbx_admin_[A-Za-z0-9_-]+/.exec(out)?.[0] }), 200);
      }
    });
    p.on('exit', (code) => reject(new Error(`gateway exited ${code}:\n${err}`)));
  });
}

function startWorker() {
  const p = spawn(WORKER, [], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  p.stderr.on('data', () => {}); // drained, not kept
  return p;
}

let gw;
async function call(method, path, token, body) {
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(gw.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

function usage(pid) {
  try {
    const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
    return { rssKiB: rss, fds: readdirSync(`/proc/${pid}/fd`).length };
  } catch {
    return { rssKiB: NaN, fds: NaN };
  }
}

const counts = { messages: 0, completed: 0, failed: 0, errors: 0, other: 0 };
async function traffic(key, sessions, until) {
  while (Date.now() < until) {
    try {
      const r = Math.random();
      if (r < 0.6) {
        const sid = pick(sessions);
        const m = await call('POST', `/v1/sessions/${sid}/messages`, key, { body: { n: counts.messages, sleepMs: 5 } });
        counts.messages++;
        if (m.status !== 202) { counts.errors++; continue; }
        const g = await call('GET', `/v1/sessions/${sid}/messages/${m.json.id}?wait=10`, key);
        if (g.json?.state === 'completed') counts.completed++;
        else if (g.json?.state === 'failed') counts.failed++;
      } else if (r < 0.75) {
        await call('GET', `/v1/sessions/${pick(sessions)}/messages?limit=20`, key);
        await call('GET', '/v1/events?limit=50', key);
        counts.other++;
      } else if (r < 0.85) {
        // Session churn: a short-lived Session gets one message, then is deleted.
        const s = await call('POST', '/v1/sessions', key, {});
        const m = await call('POST', `/v1/sessions/${s.json.id}/messages`, key, { body: 'churn' });
        if (m.status === 202) await call('GET', `/v1/sessions/${s.json.id}/messages/${m.json.id}?wait=10`, key);
        await call('DELETE', `/v1/sessions/${s.json.id}`, key);
        counts.other++;
      } else if (r < 0.92) {
        const w = await call('POST', '/v1/workspaces', key, {});
        if (w.status === 201) await call('DELETE', `/v1/workspaces/${w.json.id}`, key);
        counts.other++;
      } else {
        await fetch(`${gw.url}/metrics`).then((x) => x.text());
        await call('GET', '/v1/sandboxes?limit=50', key);
        counts.other++;
      }
    } catch {
      counts.errors++;
      await sleep(200);
    }
  }
}

async function main() {
  if (!GATEWAY || !WORKER) throw new Error('SOAK_GATEWAY_BIN and SOAK_WORKER_BIN are required');
  gw = await startGateway();
  const workers = Array.from({ length: nWorkers }, startWorker);
  const app = await call('POST', '/v1/apps', gw.admin, { name: 'soak', keepAliveSeconds: 20 });
  const key = (await call('POST', `/v1/apps/${app.json.id}/keys`, gw.admin, {})).json.key;
  const sessions = [];
  for (let i = 0; i < 4; i++) sessions.push((await call('POST', '/v1/sessions', key, {})).json.id);

  const until = Date.now() + minutes * 60000;
  const samples = [];
  const procs = [['gateway', gw.p], ...workers.map((w, i) => [`worker${i}`, w])];
  console.log(`soak: ${minutes} min, ${nWorkers} worker(s), ${concurrency} clients, data ${dataDir}`);
  console.log(['t(s)', ...procs.map(([n]) => `${n} rss(KiB)/fds`), 'msgs', 'done', 'fail', 'err'].join('\t'));
  const t0 = Date.now();
  const sampler = (async () => {
    while (Date.now() < until) {
      await sleep(10000);
      const row = procs.map(([, p]) => usage(p.pid));
      samples.push(row);
      console.log([Math.round((Date.now() - t0) / 1000), ...row.map((u) => `${u.rssKiB}/${u.fds}`),
        counts.messages, counts.completed, counts.failed, counts.errors].join('\t'));
    }
  })();
  await Promise.all([sampler, ...Array.from({ length: concurrency }, () => traffic(key, sessions, until))]);

  // Flat means: the last third of the run is not above the middle third by more than a margin
  // (RSS: 10% + 8 MiB for allocator noise; fds: 8, for connections and Sandboxes in flight).
  let ok = true;
  const third = Math.max(1, Math.floor(samples.length / 3));
  procs.forEach(([name], i) => {
    const avg = (rows, f) => rows.reduce((s, r) => s + r[i][f], 0) / rows.length;
    const mid = samples.slice(third, 2 * third), last = samples.slice(-third);
    if (!mid.length || !last.length) return;
    const rssMid = avg(mid, 'rssKiB'), rssLast = avg(last, 'rssKiB');
    const fdMid = avg(mid, 'fds'), fdLast = avg(last, 'fds');
    const rssOk = rssLast <= rssMid * 1.1 + 8192, fdOk = fdLast <= fdMid + 8;
    console.log(`${name}: rss ${Math.round(rssMid)} -> ${Math.round(rssLast)} KiB ${rssOk ? 'flat' : 'GROWING'}; ` +
      `fds ${fdMid.toFixed(1)} -> ${fdLast.toFixed(1)} ${fdOk ? 'flat' : 'GROWING'}`);
    ok &&= rssOk && fdOk;
  });
  console.log(`messages ${counts.messages}, completed ${counts.completed}, failed ${counts.failed}, errors ${counts.errors}`);
  for (const w of workers) w.kill('SIGTERM');
  gw.p.kill('SIGTERM');
  await sleep(3000);
  if (!process.env.SOAK_KEEP) rmSync(dataDir, { recursive: true, force: true });
  if (samples.length < 3) console.log('soak: too short to judge (run at least 1 minute)');
  process.exit(ok ? 0 : 1);
}
main().catch((e) => { console.error(`soak: ${e.message}`); process.exit(2); });
