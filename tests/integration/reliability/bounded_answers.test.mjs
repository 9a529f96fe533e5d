// bounded_answers.test.mjs: one App key cannot exhaust the gateway's memory. 60 messages with a
// 1 MiB body of `[0,0,...]` (about 20x larger once parsed into a tree), listed
// by four clients at once with ?limit=200: every page stays bounded in bytes (it ends early with a
// cursor), the stored JSON is copied, not re-parsed, and the gateway's peak RSS stays under the
// bound below. And one client address cannot hold more than conn_per_client connections.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { startGateway, removeDataDir, req, sql, newApp, onPostgres } from '../gateway/harness.mjs';

const MIB = 1024 * 1024;
// The bound: the gateway's peak RSS (VmHWM) during the four lists, under ASan with a small
// quarantine. Before pages were bounded in bytes and stored JSON was copied as text, one such
// list parsed 200 bodies of 1 MiB into trees of about 20 MiB each (4 GiB).
const PEAK_RSS_BOUND = 320 * MIB;
// 60 are enough: one list that parsed them all would take 60 x ~20 MiB, well above the bound.
const MESSAGES = 60;
const PAGE_BYTES_BOUND = 4 * MIB + 1 * MIB + 64 * 1024; // STORE_PAGE_BYTES plus one message
const ASAN = 'quarantine_size_mb=16:thread_local_quarantine_size_kb=256:detect_leaks=1';

const status = (pid, field) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;

// A memory cgroup of its own for the gateway when this machine lets us make one (cgroup v2, or
// v1's memory hierarchy), so that a gateway that does not bound its answers is stopped there
// instead of starving the machine. Only files the kernel made are written ('r+').
function confine(pid) {
  const name = `sbx-it-bounded-${process.pid}`;
  // Below this process's own cgroup (so that its limits still apply), in either hierarchy.
  const own = readFileSync('/proc/self/cgroup', 'utf8');
  const v2 = /^0::(\S*)$/m.exec(own)?.[1] ?? '/';
  const v1 = /^\d+:memory:(\S*)$/m.exec(own)?.[1] ?? '/';
  const under = (root, path) => `${root}${path === '/' ? '' : path}/${name}`;
  for (const [dir, limit] of [[under('/sys/fs/cgroup', v2), 'memory.max'], [under('/sys/fs/cgroup/memory', v1), 'memory.limit_in_bytes']]) {
    const parent = dir.slice(0, dir.lastIndexOf('/'));
    if (!existsSync(`${parent}/cgroup.procs`)) continue; // not a cgroup file system
    try {
      mkdirSync(dir);
      writeFileSync(`${dir}/${limit}`, String(1024 * MIB), { flag: 'r+' });
      writeFileSync(`${dir}/cgroup.procs`, String(pid), { flag: 'r+' });
      return () => {
        // The gateway has exited; its cgroup is empty and can go.
        try { rmdirSync(dir); } catch { /* ignore */ }
      };
    } catch {
      try { rmdirSync(dir); } catch { /* ignore */ }
    }
  }
  return () => {};
}

test('four concurrent lists of 60 messages of 1 MiB stay within the memory bound', { skip: onPostgres && 'seeds the SQLite file directly', timeout: 240000 }, async () => {
  const gw = await startGateway({ env: { ASAN_OPTIONS: ASAN } });
  const release = confine(gw.proc.pid);
  try {
    const { app, key } = await newApp(gw, 'big-pages');
    const s = await req(gw, 'POST', '/v1/sessions', { token: key, body: {} });
    const now = Date.now();
    const big = "'[' || replace(hex(zeroblob(524287)), '00', '0,') || '0]'"; // 1 MiB of [0,0,...]
    sql(gw, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${MESSAGES})
             INSERT INTO messages (id, session_id, app_id, seq, state, body, reply, attempts, max_attempts, created_at, updated_at, completed_at)
             SELECT printf('msg_rss%013d', i), '${s.json.id}', '${app.id}', i, 'completed', ${big}, '{"ok":true}', 1, 3, ${now}, ${now}, ${now} FROM n`);
    const before = status(gw.proc.pid, 'VmHWM');

    const lister = async () => {
      let cursor = null, seen = 0, pages = 0, largest = 0;
      do {
        const r = await fetch(`${gw.url}/v1/sessions/${s.json.id}/messages?limit=200${cursor ? `&cursor=${cursor}` : ''}`,
          { headers: { Authorization: `Bearer ${key}` } });
        assert.equal(r.status, 200);
        const text = await r.text();
        largest = Math.max(largest, text.length);
        const page = JSON.parse(text);
        for (const m of page.items) {
          assert.equal(m.seq, ++seen);
          assert.equal(m.body.length, 524288);
          assert.deepEqual(m.reply, { ok: true });
        }
        cursor = page.nextCursor;
        pages++;
      } while (cursor);
      return { seen, pages, largest };
    };
    const t0 = performance.now();
    const results = await Promise.all([lister(), lister(), lister(), lister()]);
    const peak = status(gw.proc.pid, 'VmHWM');
    console.log(`peak RSS ${(before / MIB).toFixed(0)} MiB before, ${(peak / MIB).toFixed(0)} MiB after four lists ` +
      `(${results[0].pages} pages each, largest ${(results[0].largest / MIB).toFixed(1)} MiB, ${Math.round(performance.now() - t0)} ms)`);
    for (const r of results) {
      assert.equal(r.seen, MESSAGES);
      assert.ok(r.pages > 1, 'a page of 60 x 1 MiB was not split');
      assert.ok(r.largest <= PAGE_BYTES_BOUND, `a page of ${r.largest} bytes`);
    }
    assert.ok(peak < PEAK_RSS_BOUND, `gateway peak RSS ${(peak / MIB).toFixed(0)} MiB, bound ${PEAK_RSS_BOUND / MIB} MiB`);
    // A single message's GET copies its stored JSON too.
    const one = await req(gw, 'GET', `/v1/sessions/${s.json.id}/messages/msg_rss0000000000007`, { token: key });
    assert.equal(one.status, 200);
    assert.equal(one.json.body.length, 524288);
    // A damaged stored value shows as null, never as broken JSON.
    sql(gw, `UPDATE messages SET reply = '{"ok":tru' WHERE seq = 8`);
    const damaged = await req(gw, 'GET', `/v1/sessions/${s.json.id}/messages/msg_rss0000000000008`, { token: key });
    assert.equal(damaged.status, 200);
    assert.equal(damaged.json.reply, null);
    assert.deepEqual(await gw.stop(), { code: 0, signal: null });
  } finally {
    await gw.stop();
    release();
    removeDataDir(gw.dataDir);
  }
});

// Opens n idle connections to the gateway; resolves once each is established.
async function openIdle(gw, n) {
  const socks = [];
  for (let i = 0; i < n; i++)
    socks.push(await new Promise((resolve, reject) => {
      const c = net.connect(gw.port, '127.0.0.1', () => resolve(c));
      c.on('error', reject);
    }));
  return socks;
}

// Whether one more request on a fresh connection is answered.
async function served(gw) {
  try {
    const r = await fetch(`${gw.url}/healthz`, { headers: { Connection: 'close' }, signal: AbortSignal.timeout(3000) });
    return r.status === 200;
  } catch {
    return false;
  }
}

test('one client address holds at most conn_per_client connections; trusted proxies are not limited', async () => {
  const gw = await startGateway({ env: { SBX_CONN_PER_CLIENT: '8' } });
  try {
    const idle = await openIdle(gw, 8);
    await new Promise((r) => setTimeout(r, 200)); // the gateway has counted them
    assert.equal(await served(gw), false, 'a ninth connection was served');
    assert.match(gw.stderr, /refusing connections from 127\.0\.0\.1: it holds 8 \(conn_per_client\)/);
    for (const c of idle.splice(0, 4)) c.destroy();
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await served(gw), true, 'not served again after connections closed');
    for (const c of idle) c.destroy();
  } finally {
    await gw.stop();
    removeDataDir(gw.dataDir);
  }
  const proxied = await startGateway({ env: { SBX_CONN_PER_CLIENT: '8', SBX_TRUSTED_PROXIES: '127.0.0.1' } });
  try {
    const idle = await openIdle(proxied, 12);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(await served(proxied), true, 'a trusted proxy was limited');
    for (const c of idle) c.destroy();
  } finally {
    await proxied.stop();
    removeDataDir(proxied.dataDir);
  }
});
