// bench.mjs: the benchmark scenarios of `tools/sbx bench`. Each scenario names a baseline
// measured in the same run and prints the ratio. Benchmarks never fail on a number: they print.
//
//   node tools/bench/bench.mjs <build dir> <output dir> [scenario ...]
//
// Scenarios: ingestion, warm, overlap, burst, cold, expiry, scale, streaming, postgres, images,
// prestart, callbacks (default: all). The postgres scenario needs a PostgreSQL server: run under tests/pg-run.sh (tools/sbx
// bench does); images builds the Debian + python3 test image (tests/images/build-test-images.sh,
// cached in <build dir>/image-archives) and needs root.
//
// Profiling: SBX_BENCH_PERF=<dir> runs every daemon under `perf record` (lib.mjs);
// SBX_BENCH_PERF_BURST=<file> records the whole machine during the burst alone;
// SBX_BENCH_WARM_RUNS=<n> sets the warm scenario's number of activations.
// SBX_BENCH_PRESTART_RUNS=<n> sets the prestart scenario's (20 a side).
import { spawn, execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync, appendFileSync, existsSync, mkdtempSync, rmSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import net from 'node:net';
import { Sbx, runWrk, runWrkAsync, summarize, sleep, freePort, writeJson } from './lib.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const buildDir = resolve(process.argv[2] || 'build');
const outDir = resolve(process.argv[3] || join(buildDir, 'bench'));
const wanted = process.argv.slice(4);
const all = ['ingestion', 'warm', 'overlap', 'burst', 'cold', 'expiry', 'scale', 'streaming', 'postgres', 'images', 'prestart', 'callbacks'];
const scenarios = wanted.length ? wanted : all;
// wrk run length per connection count (SBX_BENCH_SECONDS), short enough for a few-minute run.
const wrkSeconds = Number(process.env.SBX_BENCH_SECONDS) || 5;
mkdirSync(outDir, { recursive: true });

const rows = [];
const results = { machine: `${process.platform} ${execFileSync('nproc').toString().trim()} cores`, date: new Date().toISOString(), scenarios: {} };
const samples = {}; // latency samples for the plot

// ratio is value / baseline; with lowerIsBetter (latencies compared against a target ratio of
// "no worse than"), it is baseline / value so that 1 is "as good" and below 1 is worse.
function row(scenario, measure, value, baselineName, baseline, unit, note = '', lowerIsBetter = false) {
  const ratio = baseline ? (lowerIsBetter ? baseline / value : value / baseline) : NaN;
  const r = { scenario, measure, value, unit, baselineName, baseline, ratio, note };
  rows.push(r);
  appendFileSync(join(outDir, 'results.jsonl'), JSON.stringify({ at: new Date().toISOString(), ...r }) + '\n');
  const f = (v) => (Number.isFinite(v) ? (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2)) : '-');
  console.log(
    `${scenario.padEnd(11)} ${measure.padEnd(30)} ${(f(value) + ' ' + unit).padEnd(16)} ${(baselineName || '-').padEnd(22)} ${(f(baseline) + ' ' + (baseline ? unit : '')).padEnd(16)} ${f(ratio).padStart(7)}  ${note}`,
  );
}

// results.md: the rows of results.json as the markdown table docs/performance.md holds as its
// latest run, so that the page is this file pasted rather than a table typed by hand.
function resultsMarkdown(res) {
  const f = (v) => (Number.isFinite(v) ? (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2)) : '-');
  const cell = (t) => String(t ?? '').replace(/\|/g, '\\|');
  // No date or machine line: the page describes the machine in words and holds no dates.
  const lines = [
    '| scenario | measure | value | baseline | ratio | note |',
    '|---|---|---|---|---|---|',
  ];
  for (const r of res.rows) {
    const base = r.baselineName && r.baselineName !== '-' ? `${r.baselineName}: ${f(r.baseline)}${r.baseline ? ' ' + r.unit : ''}` : '-';
    lines.push(`| ${cell(r.scenario)} | ${cell(r.measure)} | ${f(r.value)} ${cell(r.unit)} | ${cell(base)} | ${f(r.ratio)} | ${cell(r.note)} |`);
  }
  for (const [name, s] of Object.entries(res.scenarios)) {
    if (s && s.error) lines.push(`| ${cell(name)} | FAILED | - | - | - | ${cell(s.error)} |`);
  }
  return lines.join('\n') + '\n';
}

function header() {
  console.log(
    `${'scenario'.padEnd(11)} ${'measure'.padEnd(30)} ${'sbx'.padEnd(16)} ${'baseline'.padEnd(22)} ${'baseline value'.padEnd(16)} ${'ratio'.padStart(7)}`,
  );
  console.log('-'.repeat(110));
}

// ---- CPU time of processes (for CPU per request) ----

const clockTicks = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

// utime + stime of pid and of its children that are still running (nginx's workers), in seconds.
function cpuSeconds(pid) {
  let ticks = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // Fields after the command name (which may hold spaces): state ppid ... utime(14) stime(15).
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(entry) === pid || Number(f[1]) === pid) ticks += Number(f[11]) + Number(f[12]);
  }
  return ticks / clockTicks;
}

// ---- baselines ----

async function startNginx() {
  const port = await freePort();
  const prefix = mkdtempSync(join(tmpdir(), 'sbx-bench-nginx-'));
  const conf = join(prefix, 'nginx.conf');
  writeFileSync(
    conf,
    `worker_processes 2;
daemon off;
pid ${prefix}/nginx.pid;
error_log ${prefix}/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${prefix}/body;
  server {
    listen 127.0.0.1:${port};
    location / {
      default_type application/json;
      return 202 '{"id":"msg_00000000000000000000","sessionId":"ses_00000000000000000000","seq":1,"state":"queued"}';
    }
  }
}
`,
  );
  const p = spawn('nginx', ['-p', prefix, '-c', conf], { stdio: 'ignore' });
  for (let i = 0; i < 100; i++) {
    try {
      await fetch(`http://127.0.0.1:${port}/`);
      break;
    } catch {
      await sleep(50);
    }
  }
  return {
    url: `http://127.0.0.1:${port}`,
    pid: p.pid,
    stop: async () => {
      p.kill('SIGTERM');
      await new Promise((r) => p.on('exit', r));
      rmSync(prefix, { recursive: true, force: true });
    },
  };
}

// One JSON line to the echo agent and back over a pipe, no sbx in between.
async function pipeBaseline(runs) {
  const agent = spawn(join(buildDir, 'agent/sbx-echo-agent'), [], { stdio: ['pipe', 'pipe', 'ignore'] });
  let buf = '';
  let waiter = null;
  agent.stdout.on('data', (d) => {
    buf += d;
    const i = buf.indexOf('\n');
    if (i >= 0 && waiter) {
      buf = buf.slice(i + 1);
      const w = waiter;
      waiter = null;
      w();
    }
  });
  const out = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await new Promise((r) => {
      waiter = r;
      agent.stdin.write(JSON.stringify({ id: `msg_${i}`, seq: i + 1, body: { hello: 'world' } }) + '\n');
    });
    out.push(performance.now() - t0);
  }
  agent.kill();
  return out;
}

// ---- scenarios ----

async function ingestion() {
  // synchronous=FULL is the default; set it anyway so the figure always means "202 = on disk".
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '0', SBX_SYNCHRONOUS: 'FULL' });
  await sbx.start({ gatewayOnly: true });
  await sbx.app();
  const ids = [];
  for (let i = 0; i < 100; i++) ids.push((await sbx.session()).id);
  const sessionsFile = join(outDir, 'sessions.txt');
  writeFileSync(sessionsFile, ids.join('\n') + '\n');
  const nginx = await startNginx();
  const out = {};
  const countRows = () => sbx.sql('SELECT count(*) AS n FROM messages')[0].n;
  for (const c of [1, 16, 64]) {
    const env = { SBX_BENCH_KEY: sbx.key, SBX_BENCH_SESSIONS: sessionsFile };
    const rowsBefore = countRows();
    const cpu0 = cpuSeconds(sbx.gateway.pid);
    const s = runWrk({ url: sbx.base, connections: c, seconds: wrkSeconds, script: join(here, 'post.lua'), env });
    s.cpuUsPerRequest = ((cpuSeconds(sbx.gateway.pid) - cpu0) * 1e6) / s.requests;
    // Every 202 wrk counted must be a row: the gateway answers only after the commit. Rows may
    // exceed the 202s by the requests still in flight when wrk stopped.
    const accepted = s.requests - s.non2xx;
    const stored = countRows() - rowsBefore;
    s.accepted = accepted;
    s.stored = stored;
    const durability = stored >= accepted ? `${accepted} 202s, ${stored} rows` : `ONLY ${stored} rows for ${accepted} 202s!`;
    const errs = (s.non2xx ? `${s.non2xx} non-2xx! ` : '') + (s.errors ? s.errors + ' ' : '');
    let n = null;
    if (nginx) {
      const n0 = cpuSeconds(nginx.pid);
      n = runWrk({ url: nginx.url, connections: c, seconds: wrkSeconds, script: join(here, 'post.lua'), env });
      n.cpuUsPerRequest = ((cpuSeconds(nginx.pid) - n0) * 1e6) / n.requests;
    }
    out[c] = { sbx: s, nginx: n };
    if (nginx) {
      row('ingestion', `POST msg c=${c} throughput`, s.rps, 'nginx fixed 202', n.rps, 'req/s', errs + durability);
      row('ingestion', `POST msg c=${c} p50`, s.p50, 'nginx fixed 202', n.p50, 'ms');
      row('ingestion', `POST msg c=${c} p99`, s.p99, 'nginx fixed 202', n.p99, 'ms');
      // Gateway CPU seconds (utime + stime, /proc) per request; nginx's summed over its workers.
      row('ingestion', `POST msg c=${c} CPU/request`, s.cpuUsPerRequest, 'nginx fixed 202', n.cpuUsPerRequest, 'us', 'ratio = nginx/sbx', true);
    }
  }
  if (nginx) await nginx.stop();
  const durable = countRows();
  await sbx.stop();
  storeAlone(out); // with the gateway stopped: the machine is the store's alone
  results.scenarios.ingestion = { ...out, messagesOnDisk: durable };
  return out;
}

// The store-alone baseline (tools/bench/store_enqueue.c): the gateway's own enqueue (the group
// commit and its statements, synchronous=FULL) with c requests in flight and no HTTP, on a fresh
// SQLite file or, given a postgres:// URL, on that (empty) database. What the gateway spends beyond
// it per request is the HTTP side's; its throughput is the most one gateway's store takes on this
// machine, whatever the HTTP side does. Null when the tool is not built.
function storeAloneRun(c, messages, pgUrl) {
  const tool = join(buildDir, 'tools', 'bench', 'sbx-bench-store-enqueue');
  if (!existsSync(tool)) {
    console.log(`(${tool} is missing: no store-alone baseline)`);
    return null;
  }
  const dir = pgUrl ? null : mkdtempSync(join(tmpdir(), 'sbx-bench-store-'));
  try {
    const db = pgUrl || join(dir, 'sbx.db');
    return JSON.parse(execFileSync(tool, [db, '100', String(Math.max(20000, Math.round(messages))), String(c)], { stdio: ['ignore', 'pipe', 'ignore'] }).toString());
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}

// The ingestion scenario's store-alone rows, for the same number of messages as wrk sent.
function storeAlone(out) {
  for (const c of [16, 64]) {
    const s = out[c].sbx;
    const r = storeAloneRun(c, s.rps * wrkSeconds);
    if (!r) return;
    out[c].storeAlone = r;
    row('ingestion', `POST msg c=${c} vs store alone`, s.rps, `store alone c=${c}`, r.perSecond, 'req/s', `${r.messages} messages, ${r.failed} failed; no HTTP`);
    row('ingestion', `c=${c} CPU/request vs store`, s.cpuUsPerRequest, `store alone c=${c}`, r.cpuUsPerMessage, 'us', `ratio = store/sbx: the store's share; HTTP side ${(s.cpuUsPerRequest - r.cpuUsPerMessage).toFixed(1)} us`, true);
  }
}

async function warmRuns(sbx, runs) {
  const out = [];
  for (let i = 0; i < runs; i++) {
    const s = await sbx.session({ keepAliveSeconds: 1 });
    await sbx.waitWarm(1);
    const m = await sbx.timedRoundTrip(s.id);
    out.push(m.latencyMs);
    if (m.state !== 'completed') throw new Error(`message ${m.id} ended ${m.state}: ${m.error}`);
  }
  return out;
}

// One warm block: a fresh gateway, worker and pool (env added to theirs); the latencies and the
// number of cold Sandboxes (none expected).
async function warmBlock(runs, warmup, env = {}) {
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '2', ...env });
  await sbx.start();
  await sbx.app({ keepAliveSeconds: 1 });
  await warmRuns(sbx, warmup); // the first activations pay for page faults and statement preparation
  const lat = await warmRuns(sbx, runs);
  const coldN = sbx.sql('SELECT count(*) AS n FROM sandboxes WHERE cold = 1')[0].n;
  await sbx.stop();
  return { lat, coldN };
}

// SBX_BENCH_WARM_RUNS overrides the warm scenario's run count (a longer run to profile). 200 in
// blocks of at most 50, each on a fresh gateway, worker and pool: the p99 of 200 is the
// third-slowest round trip (percentile() takes the ceiling rank; of 50 it was the slowest one),
// and no block runs long enough for the Sandboxes ending behind it (keep-alive 1 s, a few dozen
// activations a second) to pile up: in one block of 200 the p50 rose from about 3 ms over the
// first 60 round trips to 4-5.6 ms once some 40 Sandboxes were ending around them.
async function warm(runs = Number(process.env.SBX_BENCH_WARM_RUNS) || 200, warmup = 3, bound = true) {
  const lat = [];
  let coldN = 0;
  for (let done = 0; done < runs; ) {
    const n = Math.min(50, runs - done);
    const blk = await warmBlock(n, warmup);
    lat.push(...blk.lat);
    coldN += blk.coldN;
    done += n;
  }
  const base = await pipeBaseline(runs);
  const s = summarize(lat), b = summarize(base);
  samples.warm = lat;
  samples['pipe baseline'] = base;
  const blocks = Math.ceil(runs / 50);
  const warmNote = `n=${runs}${blocks > 1 ? ` in ${blocks} blocks` : ''}${coldN ? `, ${coldN} cold!` : ', all warm'}`;
  row('warm', 'POST to reply p50', s.p50, 'echo agent over pipe', b.p50, 'ms', `overhead ${(s.p50 - b.p50).toFixed(2)} ms; target < 2 ms`);
  row('warm', 'POST to reply p99', s.p99, 'echo agent over pipe', b.p99, 'ms', `${warmNote}; target < 10 ms`);
  s.note = warmNote;
  results.scenarios.warm = { sbx: s, pipe: b };
  if (bound) {
    // A bound, not a mode to run: the same round trips with the gateway's commits not synced
    // (synchronous=NORMAL gives up the durable 202). What is left is what every other step of
    // the path costs together: a target below it cannot be reached by removing the fsync alone.
    const boundRuns = Math.min(runs, 50); // a p50 only
    const nb = await warmBlock(boundRuns, warmup, { SBX_SYNCHRONOUS: 'NORMAL' });
    const n = summarize(nb.lat);
    samples['warm, 202 not synced (bound)'] = nb.lat;
    row('warm', 'p50, 202 not synced (bound)', n.p50, 'POST to reply p50', s.p50, 'ms', `synchronous=NORMAL, only to bound the rest of the path; the fsync's share ${(s.p50 - n.p50).toFixed(2)} ms; n=${boundRuns}${nb.coldN ? `, ${nb.coldN} cold!` : ''}`);
    results.scenarios.warm.notSynced = n;
  }
  return s;
}

// The claim that overlaps the enqueue's fsync (claim_overlap): the warm scenario's blocks with it
// and without it, turn about (A B A B ...: the machine's speed drifts over minutes), the medians of
// the blocks' p50 and p99 compared.
async function overlap(pairs = 3, runs = 50) {
  const off = [], on = [];
  for (let i = 0; i < pairs; i++) {
    off.push(summarize((await warmBlock(runs, 3, { SBX_CLAIM_OVERLAP: '0' })).lat));
    on.push(summarize((await warmBlock(runs, 3, { SBX_CLAIM_OVERLAP: '1' })).lat));
  }
  const median = (v) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)];
  const m = (side, k) => median(side.map((r) => r[k]));
  const blocks = (side) => side.map((r) => r.p50.toFixed(2)).join(' ');
  row('overlap', 'warm p50, claim overlaps fsync', m(on, 'p50'), 'without (same run)', m(off, 'p50'), 'ms', `${pairs} pairs of ${runs}, alternated; block p50s ${blocks(on)} vs ${blocks(off)}`);
  row('overlap', 'warm p99, claim overlaps fsync', m(on, 'p99'), 'without (same run)', m(off, 'p99'), 'ms', 'medians of the blocks');
  results.scenarios.overlap = { on, off };
}

// An agent whose start-up takes about 300 ms before it reads stdin (imports, then a sleep standing
// in for an SDK's start), in the Debian + python3 test image on the process driver: warm
// activation with `prestart` (the App's command started in the pool's Sandboxes ahead of any
// Session) against without, beside the echo agent's warm p50; and the memory a pool of 10
// pre-started agents holds (the Sandboxes' cgroup memory.current summed) against 10 booted ones
// without. Prints "prestart not supported" when the API refuses the field.
const SLOW_AGENT = [
  'import json, sys, time, decimal, email.parser, http.client, asyncio, urllib.request',
  'time.sleep(0.3)',
  'for line in sys.stdin:',
  '    m = json.loads(line)',
  "    if 'id' not in m: continue",
  "    print(json.dumps({'id': m['id'], 'reply': {'python': sys.version.split()[0]}}), flush=True)",
].join('\n');

// The summed memory of the live Sandboxes of an App: cgroup memory.current, else the RSS of the
// Sandbox's process tree.
function sandboxesMemory(sbx, appFilter) {
  const rows = sbx.sql(`SELECT id, pid, cgroup_path AS cg FROM sandboxes WHERE state IN ('warm', 'claimed', 'running') ${appFilter}`);
  let bytes = 0, how = 'cgroup memory.current';
  for (const r of rows) {
    try {
      bytes += Number(readFileSync(join(r.cg, 'memory.current'), 'utf8'));
    } catch {
      how = 'RSS of the process tree';
      bytes += treeRss(r.pid);
    }
  }
  return { bytes, n: rows.length, how };
}

function treeRss(pid) {
  let total = 0;
  const kids = new Map();
  for (const e of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const st = readFileSync(`/proc/${e}/stat`, 'utf8');
      const ppid = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(e));
    } catch {}
  }
  const todo = [pid];
  while (todo.length) {
    const p = todo.pop();
    try {
      const m = readFileSync(`/proc/${p}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
      if (m) total += Number(m[1]) * 1024;
    } catch {}
    todo.push(...(kids.get(p) || []));
  }
  return total;
}

async function prestart(runs = Number(process.env.SBX_BENCH_PRESTART_RUNS) || 20) {
  const imagesDir = join(buildDir, 'image-archives');
  execFileSync(join(here, '..', '..', 'tests', 'images', 'build-test-images.sh'), [imagesDir], { stdio: ['ignore', 'ignore', 'inherit'] });
  const w = await warmBaseline();
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '2', SBX_POLL_MS: '100' });
  await sbx.start();
  try {
    const body = readFileSync(join(imagesDir, 'py.docker.tar'));
    const r = await fetch(`${sbx.base}/v1/images?name=py`, {
      method: 'POST', headers: { Authorization: `Bearer ${sbx.adminToken}`, 'Content-Type': 'application/x-tar' }, body,
    });
    const im = await r.json();
    if (r.status !== 202) throw new Error(`upload: ${r.status} ${JSON.stringify(im)}`);
    for (;;) {
      const got = await sbx.req('GET', `/v1/images/${im.id}`, { token: sbx.adminToken });
      if (got.state === 'ready') break;
      if (got.state !== 'importing') throw new Error(`import ${got.state}`);
      await sleep(50);
    }
    const fields = { image: 'py', command: ['python3', '-c', SLOW_AGENT], keepAliveSeconds: 1, maxAttempts: 1 };
    // Without prestart: the pool holds booted Sandboxes; the agent starts at the claim.
    const plain = await sbx.app(fields);
    const without = [];
    for (let i = 0; i < runs + 1; i++) {
      const s = await sbx.session({ keepAliveSeconds: 1 });
      await sbx.waitWarm(2);
      const m = await sbx.timedRoundTrip(s.id);
      if (m.state !== 'completed') throw new Error(`without prestart: ${m.state}: ${m.error}`);
      if (i > 0) without.push(m.latencyMs);
    }
    const wo = summarize(without);
    row('prestart', 'python agent warm p50, no prestart', wo.p50, 'echo agent warm p50', w.p50, 'ms', `n=${runs}; the agent's ~300 ms start-up at every activation`);
    const memBooted = await poolMemory(sbx, plain, 10, false);

    // With prestart: the pool's Sandboxes of this App run its command already.
    let pre;
    try {
      pre = await sbx.app({ ...fields, prestart: true, warmPool: 2 });
    } catch (e) {
      console.log(`prestart    prestart not supported (${String(e.message).slice(0, 160)})`);
      row('prestart', 'memory of 10 booted, not started', memBooted.bytes / 1048576, '', 0, 'MiB', `the pool without prestart (${memBooted.how}); pre-started: not supported`);
      results.scenarios.prestart = { without: wo, memory: { booted: memBooted }, supported: false };
      return;
    }
    const withp = [];
    for (let i = 0; i < runs + 1; i++) {
      const s = await sbx.session({ keepAliveSeconds: 1 });
      await waitAppWarm(sbx, pre, 2);
      await sleep(500); // the agents' own start-up, when they do not say `ready`
      const m = await sbx.timedRoundTrip(s.id);
      if (m.state !== 'completed') throw new Error(`with prestart: ${m.state}: ${m.error}`);
      if (i > 0) withp.push(m.latencyMs);
    }
    const wp = summarize(withp);
    row('prestart', 'python agent warm p50, prestart', wp.p50, 'no prestart (same run)', wo.p50, 'ms', `n=${runs}; echo agent warm p50 ${w.p50.toFixed(2)} ms: ${(wp.p50 - w.p50).toFixed(2)} ms above it (target within 2 ms)`);
    row('prestart', 'python agent warm p99, prestart', wp.p99, 'no prestart (same run)', wo.p99, 'ms', '');
    const memPre = await poolMemory(sbx, pre, 10, true);
    row('prestart', 'memory of 10 pre-started agents', memPre.bytes / 1048576, '10 booted, not started', memBooted.bytes / 1048576, 'MiB', `${memPre.n} Sandboxes (${memPre.how}); ${(memPre.bytes / 1048576 / Math.max(1, memPre.n)).toFixed(1)} MiB each`);
    results.scenarios.prestart = { without: wo, with: wp, memory: { prestarted: memPre, booted: memBooted }, supported: true };
  } finally {
    await sbx.stop();
  }
}

// Waits for n warm Sandboxes serving no Session that were pre-started for the App: those that
// carry its id; or, should pre-started Sandboxes not record their App before a claim, warm ones
// of its image beyond what the worker's pool keeps per shape (pool_size, 2 here).
async function waitAppWarm(sbx, app, n, timeoutMs = 120000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const [own] = sbx.sql(`SELECT count(*) AS n FROM sandboxes WHERE state = 'warm' AND app_id = '${app.id}'`);
    if (own.n >= n) return;
    const [shape] = sbx.sql(`SELECT count(*) AS n FROM sandboxes WHERE state = 'warm' AND app_id IS NULL AND image = '${app.imageDigest}'`);
    if (own.n === 0 && shape.n >= n + 2) return;
    if (Date.now() > until) throw new Error(`no ${n} warm Sandboxes for ${app.id} in ${timeoutMs} ms`);
    await sleep(20);
  }
}

// The memory held by a pool of n for the App: warmPool n when pre-started (its Sandboxes carry
// the App's id); without prestart, the pool's booted Sandboxes of the App's shape (no App yet),
// per Sandbox times n.
async function poolMemory(sbx, app, n, prestarted) {
  if (prestarted) {
    await sbx.req('PATCH', `/v1/apps/${app.id}`, { token: sbx.adminToken, body: { warmPool: n } });
    await waitAppWarm(sbx, app, n, 300000);
    await sleep(2000); // every agent past its start-up
    const own = sandboxesMemory(sbx, `AND state = 'warm' AND app_id = '${app.id}'`);
    return own.n ? own : sandboxesMemory(sbx, `AND state = 'warm' AND image = '${app.imageDigest}'`);
  }
  await sleep(1000);
  const m = sandboxesMemory(sbx, `AND state = 'warm' AND app_id IS NULL AND image = '${app.imageDigest}'`);
  return { bytes: (m.bytes / Math.max(1, m.n)) * n, n, how: `${m.how}, ${m.n} measured` };
}

// The warm activation figures of this run; measured here (20 runs) when the warm scenario was
// not part of this invocation, so every scenario has its baseline from the same run.
async function warmBaseline() {
  if (!results.scenarios.warm || !results.scenarios.warm.sbx) await warm(20, 3, false);
  return results.scenarios.warm.sbx;
}

async function burst() {
  const n = 100;
  const w = await warmBaseline();
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: String(n), SBX_MAX_SANDBOXES: String(n + 10) });
  await sbx.start();
  await sbx.app({ keepAliveSeconds: 5 });
  const sessions = [];
  for (let i = 0; i < n; i++) sessions.push((await sbx.session()).id);
  const tBoot = performance.now();
  await sbx.waitWarm(n, 300000);
  // The pool counts the shape's warm Sandboxes whatever App asked for them: give the refill a
  // moment to settle so the burst starts on a full, quiet pool.
  await sleep(500);
  const bootAll = performance.now() - tBoot;
  // SBX_BENCH_PERF_BURST=<file>: a system-wide `perf record -g` of the burst alone (from just
  // before the first POST to the last reply), for docs/performance.md.
  const perfFile = process.env.SBX_BENCH_PERF_BURST;
  const perf = perfFile && spawn('perf', ['record', '-q', '-a', '-g', '-F', '4000', '-o', perfFile], { stdio: 'ignore' });
  if (perf) await sleep(300); // perf's own start-up, before the burst
  const { done, total, wall0 } = await sbx.timedRoundTrips(sessions);
  if (perf) {
    perf.kill('SIGINT');
    await new Promise((r) => perf.on('close', r));
  }
  const failed = done.filter((m) => m.state !== 'completed').length;
  const cold = sbx.sql('SELECT count(*) AS n FROM sandboxes WHERE cold = 1')[0].n;
  // Where the time went, from the store's own times (ms after the first POST was sent): the last
  // of the 100 POSTs committed, the last claim (message.delivering) and the last completion.
  const [tl] = sbx.sql(`SELECT MAX(created_at) AS posted, MAX(completed_at) AS completed,
    (SELECT MAX(at) FROM events WHERE kind = 'message.delivering') AS claimed FROM messages`);
  const timeline = { postedMs: tl.posted - wall0, claimedMs: tl.claimed - wall0, completedMs: tl.completed - wall0 };
  await sbx.stop();
  const p = summarize(done.map((m) => m.latencyMs));
  row('burst', `${n} at once: last reply`, total, `${n} x warm p50, one by one`, w.p50 * n, 'ms', `${(n / (total / 1000)).toFixed(0)} activations/s, ${cold} cold, ${failed} failed, pool fill ${(bootAll / 1000).toFixed(1)} s`);
  row('burst', `${n} at once: reply p50`, p.p50, 'warm p50 (alone)', w.p50, 'ms', `p99 ${p.p99.toFixed(0)} ms; all POSTs committed at ${timeline.postedMs} ms, claimed at ${timeline.claimedMs}, completed at ${timeline.completedMs}`);
  samples['burst (100 at once)'] = done.map((m) => m.latencyMs);
  results.scenarios.burst = { n, totalMs: total, activationsPerSecond: n / (total / 1000), cold, failed, poolFillMs: bootAll, timeline };
}

async function cold() {
  const runs = 20;
  const w = await warmBaseline();
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '0' });
  await sbx.start();
  await sbx.app({ keepAliveSeconds: 1 });
  const lat = [];
  for (let i = 0; i < runs + 2; i++) {
    const s = await sbx.session({ keepAliveSeconds: 1 });
    const m = await sbx.timedRoundTrip(s.id);
    if (i >= 2) lat.push(m.latencyMs);
    if (m.state !== 'completed') throw new Error(`cold message ended ${m.state}`);
  }
  await sbx.stop();
  const c = summarize(lat);
  samples['process cold'] = lat;
  row('cold', 'process: cold POST to reply p50', c.p50, 'process warm p50', w.p50, 'ms', `n=${runs}, p99 ${c.p99.toFixed(0)} ms`);
  results.scenarios.cold = { process: { cold: c, warm: w } };

  // The qemu driver, when its guest image has been built and qemu exists (TCG: slow boots).
  const guest = join(buildDir, 'guest');
  let haveQemu = false;
  try {
    execFileSync('which', ['qemu-system-x86_64']);
    haveQemu = existsSync(join(guest, 'vmlinuz'));
  } catch {}
  if (!haveQemu) {
    console.log('cold        qemu: skipped (no qemu-system-x86_64 or no guest image in build/guest)');
    return;
  }
  const qruns = 3;
  for (const pool of ['0', '1']) {
    const q = new Sbx(buildDir, { SBX_POOL_SIZE: pool, SBX_GUEST_DIR: guest, SBX_QEMU_ACCEL: 'tcg', SBX_MESSAGE_TIMEOUT: '120' });
    await q.start();
    await q.app({ driver: 'qemu', keepAliveSeconds: 1, memSizeMib: 256, vcpuCount: 1 });
    const l = [];
    for (let i = 0; i < qruns; i++) {
      const s = await q.session({ keepAliveSeconds: 1 });
      if (pool === '1') await q.waitWarm(1, 180000, 'qemu');
      const m = await q.timedRoundTrip(s.id);
      l.push(m.latencyMs);
      if (m.state !== 'completed') throw new Error(`qemu message ended ${m.state}: ${m.error}`);
    }
    const coldRows = q.sql(`SELECT count(*) AS n FROM sandboxes WHERE driver = 'qemu' AND cold = 1 AND session_id IS NOT NULL`)[0].n;
    await q.stop();
    if ((pool === '0') !== (coldRows === qruns)) console.log(`cold        qemu pool=${pool}: ${coldRows} of ${qruns} activations were cold`);
    results.scenarios.cold['qemu_pool' + pool] = summarize(l);
    samples[pool === '0' ? 'qemu cold' : 'qemu warm'] = l;
  }
  const qc = results.scenarios.cold.qemu_pool0, qw = results.scenarios.cold.qemu_pool1;
  row('cold', 'qemu: cold POST to reply p50', qc.p50, 'qemu warm p50', qw.p50, 'ms', `n=${qruns} each, TCG (no KVM)`);
}

async function expiry() {
  const n = 200;
  // 200 waiting long polls and the posts beside them, all from 127.0.0.1: past conn_per_client.
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '20', SBX_CONN_PER_CLIENT: '1000' });
  await sbx.start();
  await sbx.app({ keepAliveSeconds: 1 });
  const ids = [];
  for (let i = 0; i < n; i++) ids.push((await sbx.session({ keepAliveSeconds: 1 + (i % 5) })).id);
  await Promise.all(ids.map((id) => sbx.roundTrip(id, { expiry: true })));
  // Wait for the last deadline (5 s) plus margin, then read the lateness from the audit data.
  for (let i = 0; i < 100; i++) {
    await sleep(500);
    const live = sbx.sql(`SELECT count(*) AS n FROM sandboxes WHERE session_id IS NOT NULL AND state NOT IN ('terminated','failed')`)[0].n;
    if (live === 0) break;
  }
  // The deadline is the last completion + the Session's keep-alive (the worker arms its timer
  // just after that commit, so this slightly overstates lateness). "Late" is when the worker
  // decided to end the Sandbox (its sandbox.stopping event); teardown is reported apart.
  const rowsLate = sbx.sql(`
    SELECT st.at - (m.last_done + s.keep_alive_seconds * 1000) AS late_ms,
           b.terminated_at - st.at AS teardown_ms, b.termination_reason AS reason
    FROM sandboxes b
    JOIN sessions s ON s.id = b.session_id
    JOIN (SELECT sandbox_id, max(completed_at) AS last_done FROM messages GROUP BY sandbox_id) m ON m.sandbox_id = b.id
    JOIN (SELECT object_id, min(at) AS at FROM events WHERE kind = 'sandbox.stopping' GROUP BY object_id) st ON st.object_id = b.id
    WHERE b.terminated_at IS NOT NULL`);
  if (process.env.SBX_BENCH_KEEP) console.log(`expiry data kept in ${sbx.dataDir}`);
  await sbx.stop({ keep: !!process.env.SBX_BENCH_KEEP });
  const expired = rowsLate.filter((r) => r.reason === 'keep-alive expired');
  const late = expired.map((r) => r.late_ms);
  const s = summarize(late);
  const t = summarize(expired.map((r) => r.teardown_ms));
  const other = rowsLate.length - expired.length;
  const early = late.filter((v) => v < 0);
  row('expiry', 'keep-alive lateness p50', s.p50, 'deadline', 0, 'ms', `n=${s.n}${other ? `, ${other} ended otherwise` : ''}; ${early.length} fired early, by up to ${early.length ? -Math.min(...early) : 0} ms`);
  row('expiry', 'keep-alive lateness p99', s.p99, 'target 100 ms', 100, 'ms', `max ${s.max} ms`);
  row('expiry', 'teardown after stop p50', t.p50, '-', 0, 'ms', `p99 ${t.p99} ms (not part of lateness)`);
  results.scenarios.expiry = s;
}

// The scale scenario's ingestion: c=16 on the scale database and on an empty one (each with its
// own gateway, App and 100 Sessions), three wrk runs each, taken turn about. Single 5 s runs on
// this 2-core VM move by up to 2x from one to the next whatever the database, so the ratio is of
// the medians. The messages are then marked completed in both databases, so that the warm runs
// after it find no queue.
async function scaleIngestion(dataDir) {
  const open = async (name, dir) => {
    const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '0', SBX_SYNCHRONOUS: 'FULL' });
    await sbx.start({ gatewayOnly: true, dataDir: dir });
    await sbx.app();
    const ids = [];
    for (let i = 0; i < 100; i++) ids.push((await sbx.session()).id);
    const file = join(outDir, `sessions-${name}.txt`);
    writeFileSync(file, ids.join('\n') + '\n');
    return { name, sbx, env: { SBX_BENCH_KEY: sbx.key, SBX_BENCH_SESSIONS: file } };
  };
  const empty = await open('empty', undefined);
  const scaled = await open('scale', dataDir);
  const out = { empty: [], scale: [], emptyDir: empty.sbx.dataDir };
  const rowsOf = (t) => Number(t.sbx.sql('SELECT count(*) AS n FROM messages')[0].n);
  try {
    // Turn about as A B B A A B, so that a drift of the machine during the runs weighs on both
    // alike; each run starts after `sync`, so that none pays for writing back another's pages.
    for (const t of [empty, scaled, scaled, empty, empty, scaled]) {
      execFileSync('sync');
      const before = rowsOf(t);
      const r = runWrk({ url: t.sbx.base, connections: 16, seconds: wrkSeconds, script: join(here, 'post.lua'), env: t.env });
      r.accepted = r.requests - r.non2xx;
      r.stored = rowsOf(t) - before;
      out[t.name].push(r);
    }
    for (const t of [empty, scaled])
      t.sbx.sql("UPDATE messages SET state = 'completed', reply = '{}', completed_at = updated_at WHERE state = 'queued'");
  } finally {
    await empty.sbx.stop({ keep: true });
    await scaled.sbx.stop({ keep: true });
  }
  return out;
}

// The scale scenario's warm activations: blocks of 50 on the scale database and on the empty one
// of scaleIngestion, taken turn about (a fresh worker and pool for each block), three blocks each:
// 150 a side, so that the p99 is the second-slowest round trip (of the 30 it was until
// 2026-12-03, it was the slowest, and one outlier decided the p99 ratio).
async function scaleWarm(dataDir, emptyDir) {
  const lat = { empty: [], scale: [] };
  let cold = 0;
  for (let i = 0; i < 3; i++) {
    for (const [name, dir] of [['empty', emptyDir], ['scale', dataDir]]) {
      const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '2' });
      await sbx.start({ dataDir: dir });
      try {
        await sbx.app({ keepAliveSeconds: 1 });
        await warmRuns(sbx, 1);
        const before = Number(sbx.sql('SELECT count(*) AS n FROM sandboxes WHERE cold = 1')[0].n);
        lat[name].push(...(await warmRuns(sbx, 50)));
        cold += Number(sbx.sql('SELECT count(*) AS n FROM sandboxes WHERE cold = 1')[0].n) - before;
      } finally {
        await sbx.stop({ keep: true });
      }
    }
  }
  samples['warm (scale)'] = lat.scale;
  const n = lat.scale.length;
  return { empty: summarize(lat.empty), scale: summarize(lat.scale), note: `n=${n} each, 3 alternated blocks${cold ? `, ${cold} cold!` : ', all warm'}` };
}

async function scale() {
  // A database with 100,000 Sessions and 1,000,000 messages, generated here, then the ingestion
  // and warm activation figures on it against an empty database measured turn about with it
  // (scaleIngestion, scaleWarm).
  const dataDir = mkdtempSync(join(tmpdir(), 'sbx-bench-scale-'));
  const seed = new Sbx(buildDir, { SBX_POOL_SIZE: '0' });
  await seed.start({ gatewayOnly: true, dataDir });
  const app = await seed.app({ keepAliveSeconds: 1 });
  await seed.stop({ keep: true });
  const t0 = performance.now();
  execFileSync('sqlite3', [join(dataDir, 'sbx.db')], {
    input: `PRAGMA journal_mode=WAL; BEGIN;
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
      INSERT INTO sessions (id, app_id, state, next_seq, created_at, updated_at)
        SELECT printf('ses_scale%011d', i), '${app.id}', 'idle', 11, 0, 0 FROM n;
      WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 999999)
      INSERT INTO messages (id, session_id, app_id, seq, state, body, reply, attempts, max_attempts, created_at, updated_at, completed_at)
        SELECT printf('msg_scale%011d', i), printf('ses_scale%011d', i / 10 + 1), '${app.id}', i % 10 + 1, 'completed', '{"n":1}', '{"echo":{"n":1}}', 1, 3, 0, 0, 0 FROM n;
      COMMIT;`,
  });
  const genMs = performance.now() - t0;
  console.log(`scale       generated 100,000 Sessions and 1,000,000 messages in ${(genMs / 1000).toFixed(1)} s`);
  const ing = await scaleIngestion(dataDir);
  const median = (a) => summarize(a).p50;
  const ir = ing.scale.map((r) => r.rps), er = ing.empty.map((r) => r.rps);
  const durable = (runs) => runs.every((r) => r.stored >= r.accepted);
  const sum = (runs, k) => runs.reduce((a, r) => a + r[k], 0);
  row('scale', 'POST msg c=16 throughput', median(ir), 'empty database', median(er), 'req/s',
    `target ratio >= 0.8; medians of ${ir.length} alternated runs each (scale ${ir.map(Math.round).join(', ')}; empty ${er.map(Math.round).join(', ')}); ` +
    (durable([...ing.scale, ...ing.empty]) ? `${sum(ing.scale, 'accepted')} 202s, ${sum(ing.scale, 'stored')} rows` : 'FEWER ROWS THAN 202s!'));
  const w = await scaleWarm(dataDir, ing.emptyDir);
  row('scale', 'warm POST to reply p50', w.scale.p50, 'empty database', w.empty.p50, 'ms', `ratio = empty/scale, target >= 0.8; ${w.note}`, true);
  row('scale', 'warm POST to reply p99', w.scale.p99, 'empty database', w.empty.p99, 'ms', 'ratio = empty/scale', true);
  rmSync(ing.emptyDir, { recursive: true, force: true });

  // Gateway memory while 10,000 long polls wait.
  // One client address holds all of them: conn_per_client is raised with conn_limit.
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '0', SBX_CONN_LIMIT: '12000', SBX_CONN_PER_CLIENT: '12000' });
  await sbx.start({ gatewayOnly: true, dataDir });
  await sbx.app();
  const s = await sbx.session();
  const m = await sbx.post(s.id, { waiting: true });
  const before = sbx.rssBytes();
  const sockets = [];
  const n = 10000;
  const path = `/v1/sessions/${s.id}/messages/${m.id}?wait=60`;
  for (let i = 0; i < n; i++) {
    const sock = net.connect(sbx.port, '127.0.0.1');
    sock.on('error', () => {});
    sock.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${sbx.key}\r\n\r\n`);
    sockets.push(sock);
    if (i % 500 === 499) await sleep(20);
  }
  await sleep(2000);
  const after = sbx.rssBytes();
  const answered = sockets.filter((x) => x.bytesRead > 0).length;
  for (const x of sockets) x.destroy();
  await sbx.stop();
  rmSync(dataDir, { recursive: true, force: true });
  const per = (after - before) / n;
  row('scale', 'gateway RSS per waiting poll', per, '-', 0, 'bytes', `${n} waiting, ${answered} answered early, RSS ${(after / 1048576).toFixed(1)} MiB`);
  results.scenarios.scale = { generateMs: genMs, ingestion: { empty: ing.empty, scale: ing.scale }, warm: w, rssBefore: before, rssAfter: after, bytesPerWaitingPoll: per };
}

// Streaming: an agent (busybox sh in the default image) prints 20 chunks 50 ms apart, each with
// the time it printed it ($EPOCHREALTIME: the Sandbox shares the host's clock), then its reply
// with its time. A stream client reads every chunk; the latency of a chunk is its arrival minus
// its print time, beside the reply's (printed to read through the stream's final event, and to
// read through a waiting long poll). Then the gateway's memory per open stream beside per
// waiting long poll, 1,000 of each.
const STREAM_AGENT = [
  'while IFS= read -r line; do',
  '  id=${line#*\\"id\\":\\"}; id=${id%%\\"*}; i=0',
  '  while [ $i -lt 20 ]; do echo "{\\"id\\":\\"$id\\",\\"chunk\\":{\\"i\\":$i,\\"t\\":$EPOCHREALTIME}}"; i=$((i+1)); usleep 50000; done',
  '  echo "{\\"id\\":\\"$id\\",\\"reply\\":{\\"t\\":$EPOCHREALTIME}}"',
  'done',
].join('\n');

async function readStream(base, path, token, onEvent, onOpen = () => {}) {
  const r = await fetch(base + path, { headers: { Authorization: `Bearer ${token}`, Accept: 'text/event-stream' } });
  onOpen(Date.now());
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    const now = Date.now() + (performance.now() % 1); // sub-ms part for sorting only
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const ev = { event: 'message', data: null };
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) ev.event = line.slice(7);
        else if (line.startsWith('data: ')) ev.data = JSON.parse(line.slice(6));
      }
      if (ev.data !== null) onEvent(ev, now);
    }
  }
}

async function streaming() {
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '2' });
  await sbx.start();
  await sbx.app({ keepAliveSeconds: 60, command: ['/bin/sh', '-c', STREAM_AGENT] });
  const s = await sbx.session();
  await sbx.waitWarm(1);
  const chunkLat = [], endLat = [], pollLat = [];
  const runs = Number(process.env.SBX_BENCH_STREAM_RUNS) || 10;
  for (let run = 0; run < runs + 1; run++) {
    const m = await sbx.post(s.id, { run });
    const path = `/v1/sessions/${s.id}/messages/${m.id}`;
    let replyAt = 0, polledAt = 0, endAt = 0;
    const poll = (async () => {
      for (;;) {
        const r = await sbx.req('GET', `${path}?wait=30`);
        if (r.state === 'completed' || r.state === 'failed') { polledAt = Date.now(); return r; }
      }
    })();
    const lat = [];
    let openedAt = Infinity;
    // Only chunks printed once the stream was open: an earlier one waited for the client, not
    // for sbx.
    await readStream(sbx.base, `${path}/stream`, sbx.key, (ev, at) => {
      if (ev.event === 'chunk') { if (ev.data.t * 1000 > openedAt) lat.push(at - ev.data.t * 1000); }
      else { endAt = at; replyAt = ev.data.reply.t * 1000; }
    }, (t) => { openedAt = t; });
    await poll;
    if (run === 0) continue; // the first message pays for the agent's start
    chunkLat.push(...lat);
    endLat.push(endAt - replyAt);
    pollLat.push(polledAt - replyAt);
  }
  await sbx.stop();
  const c = summarize(chunkLat), e = summarize(endLat), p = summarize(pollLat);
  samples['chunk print to stream read'] = chunkLat;
  row('streaming', 'chunk print to read p50', c.p50, 'reply to long poll', p.p50, 'ms', `n=${chunkLat.length} chunks (printed after the stream opened), ${runs} messages`, true);
  row('streaming', 'chunk print to read p99', c.p99, 'reply to long poll', p.p99, 'ms', 'ratio = long poll / stream', true);
  row('streaming', 'reply to stream end p50', e.p50, 'reply to long poll', p.p50, 'ms', 'the final event', true);

  // Memory: 1,000 waiting long polls, then 1,000 open streams, on the gateway alone.
  // Every socket comes from 127.0.0.1: conn_per_client must admit them all.
  const g = new Sbx(buildDir, { SBX_POOL_SIZE: '0', SBX_CONN_LIMIT: '5000', SBX_STREAM_LIMIT: '5000', SBX_CONN_PER_CLIENT: '5000' });
  await g.start({ gatewayOnly: true });
  await g.app();
  const gs = await g.session();
  const gm = await g.post(gs.id, { waiting: true });
  const n = 1000;
  const open = (path, extra) => {
    const socks = [];
    for (let i = 0; i < n; i++) {
      const sock = net.connect(g.port, '127.0.0.1');
      sock.on('error', () => {});
      sock.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${g.key}\r\n${extra}\r\n`);
      socks.push(sock);
    }
    return socks;
  };
  await sleep(500);
  const r0 = g.rssBytes();
  const polls = open(`/v1/sessions/${gs.id}/messages/${gm.id}?wait=60`, '');
  await sleep(2000);
  const r1 = g.rssBytes();
  const streams = open(`/v1/sessions/${gs.id}/messages/${gm.id}/stream`, 'Accept: text/event-stream\r\n');
  await sleep(2000);
  const r2 = g.rssBytes();
  const started = streams.filter((x) => x.bytesRead > 0).length;
  for (const x of [...polls, ...streams]) x.destroy();
  await g.stop();
  const perPoll = (r1 - r0) / n, perStream = (r2 - r1) / n;
  row('streaming', 'gateway RSS per open stream', perStream / 1024, 'per waiting long poll', perPoll / 1024, 'KiB', `${n} each, ${started} streams started`);
  results.scenarios.streaming = { chunk: c, streamEnd: e, longPoll: p, rssPerStream: perStream, rssPerPoll: perPoll };
}

function plot() {
  const names = Object.keys(samples).filter((k) => samples[k].length);
  if (!names.length) return;
  const files = names.map((k, i) => {
    const f = join(outDir, `samples-${i}.dat`);
    const s = [...samples[k]].sort((a, b) => a - b);
    writeFileSync(f, s.map((v, j) => `${v} ${(j + 1) / s.length}`).join('\n') + '\n');
    return [k, f];
  });
  const plots = files.map(([k, f]) => `'${f}' using 1:2 with steps title '${k}'`).join(', ');
  for (const [term, ext] of [['pngcairo size 1100,600', 'png'], ['svg size 1100,600', 'svg']]) {
    const script = `set terminal ${term}\nset output '${join(outDir, 'latency.' + ext)}'\nset logscale x\nset xlabel 'latency (ms, log scale)'\nset ylabel 'fraction of requests'\nset key outside right\nset grid\nset title 'sbx latency distributions (CDF)'\nplot ${plots}\n`;
    try {
      execFileSync('gnuplot', [], { input: script });
    } catch (e) {
      console.log(`plot: gnuplot failed for ${ext}: ${e.message}`);
    }
  }
}

// ---- PostgreSQL beside SQLite ----

// One ingestion run on a fresh store: c connections spread over `gateways` gateways (one wrk per
// gateway, at once); the sum of their throughput, the worst of their percentiles, and the check
// that every 202 is a row.
async function ingestOnce(store, c, gateways = 1) {
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '0', SBX_SYNCHRONOUS: 'FULL', SBX_STORE: store });
  await sbx.start({ gatewayOnly: true });
  try {
    await sbx.app();
    const ids = [];
    for (let i = 0; i < 100; i++) ids.push((await sbx.session()).id);
    const sessionsFile = join(outDir, 'sessions.txt');
    writeFileSync(sessionsFile, ids.join('\n') + '\n');
    const bases = [sbx.base];
    while (bases.length < gateways) bases.push(await sbx.addGateway());
    const before = Number(sbx.sql('SELECT count(*) AS n FROM messages')[0].n);
    const env = { SBX_BENCH_KEY: sbx.key, SBX_BENCH_SESSIONS: sessionsFile };
    const runs = await Promise.all(bases.map((url, i) =>
      runWrkAsync({ url, connections: Math.max(1, Math.round(c / gateways)), seconds: wrkSeconds, script: join(here, 'post.lua'),
        env: { ...env, SBX_BENCH_PART: `${i}/${gateways}` } })));
    const stored = Number(sbx.sql('SELECT count(*) AS n FROM messages')[0].n) - before;
    const accepted = runs.reduce((a, r) => a + r.requests - r.non2xx, 0);
    return {
      rps: runs.reduce((a, r) => a + r.rps, 0),
      p50: Math.max(...runs.map((r) => r.p50)),
      p99: Math.max(...runs.map((r) => r.p99)),
      accepted, stored, runs,
      note: stored >= accepted ? `${accepted} 202s, ${stored} rows` : `ONLY ${stored} rows for ${accepted} 202s!`,
    };
  } finally {
    await sbx.stop();
  }
}

async function warmOn(store, runs) {
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '2', SBX_STORE: store });
  await sbx.start();
  try {
    await sbx.app({ keepAliveSeconds: 1 });
    await warmRuns(sbx, 3);
    const lat = await warmRuns(sbx, runs);
    const cold = Number(sbx.sql('SELECT count(*) AS n FROM sandboxes WHERE cold = 1')[0].n);
    return { ...summarize(lat), lat, cold };
  } finally {
    await sbx.stop();
  }
}

// The ingestion and warm scenarios on PostgreSQL (one gateway, then two and four on the same
// database, each of those also against one gateway), each against the same scenario on SQLite in
// this run. Each PostgreSQL run gets a fresh database of the cluster tests/pg-run.sh started for
// the benchmark.
async function postgres() {
  if (!process.env.SBX_TEST_PG_URL) {
    console.log(`${'postgres'.padEnd(11)} skipped: no PostgreSQL (run the benchmark under tests/pg-run.sh, as tools/sbx bench does)`);
    return;
  }
  const freshDb = () => execFileSync(join(here, '../../tests/pg-run.sh'), ['--createdb'], { encoding: 'utf8' }).trim();
  const out = {};
  for (const c of [16, 64]) {
    const lite = await ingestOnce('sqlite', c);
    const pg1 = await ingestOnce(freshDb(), c);
    const pg2 = await ingestOnce(freshDb(), c, 2);
    const pg4 = await ingestOnce(freshDb(), c, 4);
    out[c] = { sqlite: lite, pg1, pg2, pg4 };
    row('postgres', `POST msg c=${c} PG throughput`, pg1.rps, 'SQLite, same run', lite.rps, 'req/s', `${pg1.note}; SQLite ${lite.note}`);
    row('postgres', `POST msg c=${c} PG p99`, pg1.p99, 'SQLite, same run', lite.p99, 'ms');
    row('postgres', `POST msg c=${c} PG 2 gateways`, pg2.rps, 'SQLite, same run', lite.rps, 'req/s', pg2.note);
    row('postgres', `POST msg c=${c} PG 2 gw p99`, pg2.p99, 'SQLite, same run', lite.p99, 'ms');
    row('postgres', `POST msg c=${c} PG 2 gw / 1 gw`, pg2.rps, 'PG 1 gateway, same run', pg1.rps, 'req/s');
    row('postgres', `POST msg c=${c} PG 4 gateways`, pg4.rps, 'SQLite, same run', lite.rps, 'req/s', pg4.note);
    row('postgres', `POST msg c=${c} PG 4 gw p99`, pg4.p99, 'SQLite, same run', lite.p99, 'ms');
    row('postgres', `POST msg c=${c} PG 4 gw / 1 gw`, pg4.rps, 'PG 1 gateway, same run', pg1.rps, 'req/s');
    // The stores alone (no HTTP, one submitting process): PostgreSQL's ceiling for one gateway
    // beside SQLite's, with the server on the same cores as everything else.
    const liteAlone = storeAloneRun(c, lite.rps * wrkSeconds);
    const pgAlone = liteAlone && storeAloneRun(c, pg1.rps * wrkSeconds, freshDb());
    if (pgAlone) {
      out[c].storeAlone = { sqlite: liteAlone, pg: pgAlone };
      row('postgres', `c=${c} PG store alone`, pgAlone.perSecond, 'SQLite store alone', liteAlone.perSecond, 'req/s', `${pgAlone.messages} and ${liteAlone.messages} messages, ${pgAlone.failed + liteAlone.failed} failed; no HTTP`);
      row('postgres', `c=${c} PG 1 gw / PG store alone`, pg1.rps, 'PG store alone', pgAlone.perSecond, 'req/s');
    }
  }
  const runs = 30;
  const lite = await warmOn('sqlite', runs);
  const pg = await warmOn(freshDb(), runs);
  samples['warm (PostgreSQL)'] = pg.lat;
  out.warm = { sqlite: { ...lite, lat: undefined }, postgres: { ...pg, lat: undefined } };
  const note = (w) => `n=${runs}${w.cold ? `, ${w.cold} cold!` : ', all warm'}`;
  row('postgres', 'warm POST to reply p50', pg.p50, 'SQLite, same run', lite.p50, 'ms', note(pg));
  row('postgres', 'warm POST to reply p99', pg.p99, 'SQLite, same run', lite.p99, 'ms', note(lite));
  results.scenarios.postgres = out;
}

// Images: the import of the Debian + python3 test image (upload and import, docker-archive)
// beside `tar -x` of the same two layers onto the same disk; a second App on the same digest
// (no second import); and, where the drivers boot images, cold and warm activation of an App on
// the Python image beside the default image.
async function images() {
  const imagesDir = join(buildDir, 'image-archives');
  execFileSync(join(here, '..', '..', 'tests', 'images', 'build-test-images.sh'), [imagesDir], { stdio: ['ignore', 'ignore', 'inherit'] });
  const archive = join(imagesDir, 'py.docker.tar');
  const runs = 3;
  const imp = [], untar = [], importOnly = [];
  for (let i = 0; i < runs; i++) {
    const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '0', SBX_POLL_MS: '100' });
    await sbx.start();
    // The baseline on the same disk as the cache: the data directory's filesystem.
    const dest = join(sbx.dataDir, 'untar');
    mkdirSync(dest);
    let t0 = performance.now();
    execFileSync('tar', ['-xpf', join(imagesDir, 'layer1.tar'), '-C', dest, '--numeric-owner']);
    execFileSync('tar', ['-xpf', join(imagesDir, 'layer2.tar'), '-C', dest, '--numeric-owner']);
    untar.push(performance.now() - t0);
    rmSync(dest, { recursive: true, force: true });
    t0 = performance.now();
    const body = readFileSync(archive);
    const r = await fetch(`${sbx.base}/v1/images?name=py`, {
      method: 'POST', headers: { Authorization: `Bearer ${sbx.adminToken}`, 'Content-Type': 'application/x-tar' }, body,
    });
    const im = await r.json();
    if (r.status !== 202) throw new Error(`upload: ${r.status} ${JSON.stringify(im)}`);
    let got;
    for (;;) {
      got = await sbx.req('GET', `/v1/images/${im.id}`, { token: sbx.adminToken });
      if (got.state !== 'importing') break;
      await sleep(20);
    }
    imp.push(performance.now() - t0);
    if (got.state !== 'ready') throw new Error(`import ${got.state}: ${JSON.stringify(got.problem)}`);
    importOnly.push(Date.parse(got.readyAt) - Date.parse(got.createdAt));
    if (i === runs - 1) {
      // A second App on the same digest: resolved at once, no second import.
      const a1 = await sbx.app({ image: 'py', maxAttempts: 1 });
      t0 = performance.now();
      const a2 = await sbx.app({ image: im.id, maxAttempts: 1 });
      const secondMs = performance.now() - t0;
      const imports = sbx.sql(`SELECT count(*) AS n FROM events WHERE kind = 'image.imported'`)[0].n;
      const cacheDirs = readdirSync(join(sbx.dataDir, 'images', 'sha256')).length;
      row('images', 'second App on the digest: create', secondMs, '', 0, 'ms',
        `${imports} import, ${cacheDirs} cache dir, both Apps on ${a1.imageDigest === a2.imageDigest ? 'the same' : 'DIFFERENT'} digest`);
      results.scenarios.images = { ...(results.scenarios.images || {}), secondApp: { ms: secondMs, imports, cacheDirs } };
      // Activation on the image, where this build's drivers boot images.
      const s = await sbx.session({ keepAliveSeconds: 1 });
      const m = await sbx.roundTrip(s.id, { hello: 'image' });
      if (m.state === 'completed' && m.reply && m.reply.python) {
        const lat = [];
        for (let k = 0; k < 5; k++) {
          const s2 = await sbx.session({ keepAliveSeconds: 1 });
          lat.push((await sbx.timedRoundTrip(s2.id)).latencyMs);
        }
        const c = summarize(lat);
        const w = await warmBaseline();
        row('images', 'python image: cold POST to reply p50', c.p50, 'default image warm p50', w.p50, 'ms', `n=5, pool 0`);
        results.scenarios.images.pythonCold = c;
      } else {
        console.log(`images      activation on the image: skipped (the ${got.digest.slice(0, 19)}... App answered ${m.state}: ${m.error || 'no python in the reply'}; the drivers of this build do not boot images)`);
      }
    }
    await sbx.stop();
  }
  const a = summarize(imp), b = summarize(untar), o = summarize(importOnly);
  row('images', 'upload + import py.docker.tar p50', a.p50, 'tar -x of its layers', b.p50, 'ms', `n=${runs}, ${(statSync(archive).size / 1048576).toFixed(0)} MiB archive`, true);
  row('images', 'import alone (createdAt..readyAt)', o.p50, 'tar -x of its layers', b.p50, 'ms', `n=${runs}: staging + digests + layers + publish`, true);
  results.scenarios.images = { ...(results.scenarios.images || {}), uploadAndImport: a, importOnly: o, tarX: b };
}

// The callback API's round trip from inside a Sandbox (a metadata read: GET /sandbox/v1/session
// over HTTPS on one keep-alive connection, run in the Sandbox's network namespace with nsenter)
// beside the same Session read through the gateway from the host (plain HTTP, keep-alive). The
// worker listens on callback_listen (0.0.0.0:443) for the run; needs root (nsenter).
async function callbacks(n = 500) {
  // callback_rate well above what one client can send: the scenario times the path, not the limit.
  const sbx = new Sbx(buildDir, { SBX_POOL_SIZE: '1', SBX_CALLBACK_RATE: '100000' });
  await sbx.start();
  await sbx.app({ keepAliveSeconds: 600 });
  const s = await sbx.session({ metadata: { bench: true } });
  await sbx.roundTrip(s.id, { hello: 'callbacks' });
  const [sb] = sbx.sql(`SELECT id, pid FROM sandboxes WHERE session_id = '${s.id}' AND state = 'running'`);
  // The App's command has the context in its environment (the Sandbox's init has not).
  let env = null;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let text = '';
    try {
      text = readFileSync(`/proc/${pid}/environ`, 'utf8');
    } catch {
      continue;
    }
    if (text.includes(`SBX_SANDBOX_ID=${sb.id}\0`) && text.includes('SBX_TOKEN=')) {
      env = Object.fromEntries(text.split('\0').filter((kv) => kv.includes('=')).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
      break;
    }
  }
  if (!env) throw new Error('no process of the Sandbox has SBX_TOKEN');
  const client = join(here, 'callback_client.mjs');
  const inside = JSON.parse(execFileSync('nsenter', ['-t', String(sb.pid), '-n', process.execPath, client,
    env.SBX_API_URL + '/sandbox/v1/session', env.SBX_TOKEN, String(n), join(sbx.dataDir, 'ca', 'ca.pem')], { encoding: 'utf8' }));
  const rest = JSON.parse(execFileSync(process.execPath, [client, `${sbx.base}/v1/sessions/${s.id}`, sbx.key, String(n)], { encoding: 'utf8' }));
  await sleep(1500); // the counts are written in batches, about every second
  const calls = sbx.sql(`SELECT callback_calls AS n FROM sandboxes WHERE id = '${sb.id}'`)[0].n;
  await sbx.stop();
  const c = summarize(inside), r = summarize(rest);
  samples['callback metadata read'] = inside;
  samples['gateway GET Session'] = rest;
  row('callbacks', 'metadata read p50', c.p50, 'gateway GET Session', r.p50, 'ms', `n=${n}, HTTPS from the Sandbox, keep-alive`, true);
  row('callbacks', 'metadata read p99', c.p99, 'gateway GET Session', r.p99, 'ms', `${calls} of ${n + 1} calls counted in the store`, true);
  results.scenarios.callbacks = { callback: c, gateway: r, counted: calls };
}

header();
const fns = { ingestion, warm, overlap, burst, cold, expiry, scale, streaming, postgres, images, prestart, callbacks };
for (const name of scenarios) {
  if (!fns[name]) {
    console.error(`unknown scenario ${name}; known: ${all.join(', ')}`);
    process.exit(2);
  }
  try {
    await fns[name]();
  } catch (e) {
    console.log(`${name.padEnd(11)} FAILED: ${e.message}`);
    results.scenarios[name] = { error: e.message };
  }
}
plot();
results.rows = rows;
writeJson(join(outDir, 'results.json'), results);
writeFileSync(join(outDir, 'results.md'), resultsMarkdown(results));
console.log(`\nresults: ${join(outDir, 'results.json')} and results.md; plot: ${join(outDir, 'latency.png')} and latency.svg`);
