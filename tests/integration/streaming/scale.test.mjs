// scale.test.mjs: 1,000 open message streams beside 1,000 waiting long polls on one gateway. It
// measures what each costs in the gateway's resident memory (printed as a diagnostic, and bounded:
// a waiting stream must cost about what a waiting long poll does), that they hold no thread and
// no busy loop while they wait (the gateway's CPU time over a few idle seconds), and that one
// wake-up ("chunk <id>", as a worker sends it) reaches all 1,000 streams at once. No worker runs:
// the message stays queued, so every request waits; the chunk is written as a worker would.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { startSbx, req } from '../worker/harness.mjs';
import { openStream } from './sse_client.mjs';

const N = 1000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rssKiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
const cpuMs = (pid) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) * 10; // utime + stime, in clock ticks of 10 ms
};

test(`${N} open streams and ${N} long polls: memory per stream, no polling, one wake-up for all`, { skip: !process.env.SBX_NOTIFY_BIN }, async (t) => {
  const sbx = await startSbx({ workers: 0, env: { SBX_STREAM_LIMIT: String(N + 50), SBX_CONN_PER_CLIENT: String(2 * N + 100), SBX_HTTP_THREADS: '4', SBX_STREAM_KEEPALIVE: '60', SBX_TEST_RECHECK_MS: '60000' } });
  const held = [];
  try {
    const { key } = await sbx.app('scale', {});
    const ses = await sbx.session(key);
    const m = await sbx.post(key, ses.id, { waits: true });
    const pid = sbx.gw.proc.pid;
    // Warm up the threads' store connections and buffers with a few of each request.
    for (let i = 0; i < 20; i++) {
      const s = await openStream(sbx.gw, `/v1/sessions/${ses.id}/messages/${m.id}/stream`, { token: key });
      s.close();
      await req(sbx.gw, 'GET', `/v1/sessions/${ses.id}/messages/${m.id}`, { token: key });
    }
    await sleep(500);
    const rss0 = rssKiB(pid);

    const polls = [];
    for (let i = 0; i < N; i++) {
      const rq = http.get(`${sbx.gw.url}/v1/sessions/${ses.id}/messages/${m.id}?wait=60`,
        { headers: { Authorization: `Bearer ${key}` }, agent: false });
      rq.on('error', () => {});
      polls.push(rq);
      held.push(rq);
    }
    // Parked once the gateway's metrics count them in flight (or after a pause).
    await sleep(3000);
    const rss1 = rssKiB(pid);

    const streams = [];
    for (let i = 0; i < N; i += 50) {
      const batch = await Promise.all(Array.from({ length: Math.min(50, N - i) }, () =>
        openStream(sbx.gw, `/v1/sessions/${ses.id}/messages/${m.id}/stream`, { token: key })));
      for (const s of batch) { assert.equal(s.status, 200, s.text); streams.push(s); held.push(s); }
    }
    await sbx.until(() => streams.every((s) => s.retry === 1000), 10000, 'every stream started');
    await sleep(1000);
    const rss2 = rssKiB(pid);

    // Idle: no busy loop, no per-stream polling beyond the once-a-second re-read.
    const cpu0 = cpuMs(pid);
    await sleep(5000);
    const idleCpu = cpuMs(pid) - cpu0;

    const perPoll = (rss1 - rss0) / N;
    const perStream = (rss2 - rss1) / N;
    t.diagnostic(`gateway RSS: ${rss0} KiB idle, +${rss1 - rss0} KiB for ${N} long polls (${perPoll.toFixed(1)} KiB each), +${rss2 - rss1} KiB for ${N} streams (${perStream.toFixed(1)} KiB each)`);
    t.diagnostic(`gateway CPU while ${2 * N} requests wait: ${idleCpu} ms over 5 s`);
    // A started response keeps about half of libmicrohttpd's per-connection pool resident (a long
    // poll is parked before its response exists): with http_conn_memory at 8 KiB, measured in a
    // Release build a long poll costs 7.6 KiB and a stream 12.1 KiB (with libmicrohttpd's own
    // 32 KiB pool, 24.3 KiB). Under ASan both are several times larger and vary from run to run
    // by 10 KiB and more (27-34 and 54-64 KiB here), too much to bound that difference in CI; this
    // bound catches a regression (a buffer or a thread per stream).
    assert.ok(perStream <= 4 * perPoll + 12, `a waiting stream costs ${perStream.toFixed(1)} KiB, a long poll ${perPoll.toFixed(1)} KiB`);
    assert.ok(idleCpu < 2500, `the gateway used ${idleCpu} ms of CPU in 5 s with everything waiting`);

    // One chunk, written as a worker writes it, and one wake-up: every stream has it at once.
    execFileSync('sqlite3', [join(sbx.dataDir, 'sbx.db'),
      `INSERT INTO message_chunks (message_id, idx, value, at) VALUES ('${m.id}', 0, '{"hello":"all"}', 0)`]);
    const woke = Date.now();
    execFileSync(process.env.SBX_NOTIFY_BIN, [join(sbx.dataDir, 'run'), 'gateway', `chunk ${m.id}`, sbx.gw.store]);
    await sbx.until(() => streams.every((s) => s.events.length === 1), 10000, 'chunk 0 on every stream');
    const spread = Math.max(...streams.map((s) => s.events[0].at)) - woke;
    t.diagnostic(`one wake-up reached all ${N} streams within ${spread} ms`);
    // The hub's re-read is once a minute here (SBX_TEST_RECHECK_MS): sooner is the wake-up.
    assert.ok(spread < 30000, `the last stream had the chunk ${spread} ms after the wake-up (the re-read is 60 s)`);
    for (const s of streams) assert.deepEqual(s.events[0].json, { hello: 'all' });

    for (const s of streams) s.close();
    for (const p of polls) p.destroy();
    held.length = 0;
    const results = await sbx.stop();
    assert.deepEqual(results, []);
    assert.deepEqual(await sbx.gw.exited, { code: 0, signal: null });
  } finally {
    for (const h of held) (h.close ? h.close() : h.destroy());
    await sbx.stop();
    sbx.cleanup();
  }
});
