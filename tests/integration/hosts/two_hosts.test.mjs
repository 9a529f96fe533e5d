// two_hosts.test.mjs: two worker hosts (fork test driver; different host ids, data directories
// and jail roots) and two gateways on one store. 1,000 messages across 100 Sessions, posted through
// both gateways; mid-run every worker process of host b is killed with SIGKILL. After host_lost_ms
// host a declares b lost: b's Sandboxes are terminated "host lost", its leases requeued, its
// Sessions idle, and they complete on host a. Every accepted message completes exactly once, in
// order per Session. Host b then restarts: it comes back and reaps what its loss left in its own
// jail root, and nothing of it is touched by host a. A second test pauses a host (SIGSTOP) past
// host_lost_ms: its Session moves, and when it resumes it learns it was lost and exits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { startCluster, sleep } from './harness.mjs';

const SESSIONS = 100;
const PER_SESSION = 10;
const LOST_MS = 3000;

test('two hosts, two gateways, 1,000 messages; kill -9 of one host mid-run loses nothing', async () => {
  const c = startCluster({
    env: { SBX_HOST_LOST_MS: String(LOST_MS), SBX_MAX_SANDBOXES: '24', SBX_POOL_SIZE: '2' },
  });
  try {
    const gws = [await c.startGateway('1', { host: 'a' }), await c.startGateway('2', { host: 'b' })];
    c.startHost('a', { workers: 1 });
    c.startHost('b', { workers: 2, env: { SBX_WORKERS: '2' } });
    await c.until(() => c.num(`SELECT COUNT(*) FROM hosts`) === 2, 10000, 'both hosts registered');
    // A short keep-alive: Sessions go idle between bursts and are placed again.
    const { key } = await c.app(gws[0], 'two-hosts', { keepAliveSeconds: 2 });
    const sessions = [];
    for (let i = 0; i < SESSIONS; i++) sessions.push(await c.session(gws[i % 2], key));

    // Each Session's messages are posted in order, through its gateway; Sessions concurrently.
    const posted = [];
    const poster = (async () => {
      for (let chunk = 0; chunk < SESSIONS; chunk += 25) {
        await Promise.all(sessions.slice(chunk, chunk + 25).map(async (s, j) => {
          const gw = gws[(chunk + j) % 2];
          for (let n = 1; n <= PER_SESSION; n++) {
            posted.push((await c.post(gw, key, s.id, { n, sleepMs: 5 })).id);
            if (n % 3 === 0) await sleep(20);
          }
        }));
      }
    })();
    // Awaited below; when an assertion before that fails, the cluster's teardown fails the posts
    // still going, and that must not be reported in place of the assertion.
    poster.catch(() => {});

    // Mid-run, while host b is delivering: kill -9 all of its worker processes.
    await c.until(() => c.num(`SELECT COUNT(*) FROM messages WHERE state = 'completed'`) >= 250 &&
      c.num(`SELECT COUNT(*) FROM messages m JOIN workers w ON w.id = m.lease_owner WHERE m.state = 'delivering' AND w.host_id = 'b'`) > 0,
      120000, 'host b delivering mid-run');
    const killSentAt = Date.now();
    // The SIGKILLs go at once; their exits are awaited after the reads below. An ASan process can
    // take seconds to be torn down (2.9 s seen), and by then host a may have declared b lost
    // (host_lost_ms after b's last heartbeat) and ended its Sandboxes 'host lost'. A write of b's
    // already on its way to the store lands within moments: 100 ms.
    const killed = c.killHost('b');
    await sleep(100);
    // Host b's Sandboxes that were live, with no reason to stop yet, when it died: nothing but
    // host a's verdict may end them now. (Taken after the kill: until then b itself may stop one
    // on keep-alive, and one it was stopping keeps that reason, as it should.)
    const bLive = c.sql(`SELECT b.id FROM sandboxes b JOIN workers w ON w.id = b.worker_id WHERE w.host_id = 'b' AND b.state NOT IN ('terminated', 'failed') AND b.termination_reason IS NULL`).split('\n').filter(Boolean);
    assert.ok(bLive.length > 0, 'host b had no live Sandbox when killed');
    assert.ok(c.num(`SELECT COUNT(*) FROM messages m JOIN workers w ON w.id = m.lease_owner WHERE m.state = 'delivering' AND w.host_id = 'b'`) > 0, 'nothing of host b was in flight');
    await killed;

    // Host a declares b lost once its last heartbeat is LOST_MS old, not before. The rule is
    // checked on the store's own times: the moment b died is only known to this process after
    // the kernel has torn it down and Node has noticed (hundreds of ms for an ASan process on a
    // loaded machine), and b's last heartbeat may have been late (it waits for the write lock).
    await c.until(() => c.sql(`SELECT COUNT(*) FROM hosts WHERE id = 'b' AND lost_at IS NOT NULL`) === '1', LOST_MS + 10000, 'host b declared lost');
    const [beatAt, lostAtB] = c.sql(`SELECT heartbeat_at || ' ' || lost_at FROM hosts WHERE id = 'b'`).split(' ').map(Number);
    assert.ok(lostAtB - beatAt >= LOST_MS, `host b declared lost ${lostAtB - beatAt} ms after its last heartbeat`);
    assert.ok(beatAt >= killSentAt - LOST_MS, `host b's last heartbeat (${killSentAt - beatAt} ms before the kill) is too old: it was not beating while alive`);
    assert.equal(c.num(`SELECT COUNT(*) FROM hosts WHERE id = 'a' AND lost_at IS NULL`), 1);

    await poster;
    const total = SESSIONS * PER_SESSION;
    assert.equal(posted.length, total);
    await c.until(() => c.num(`SELECT COUNT(*) FROM messages WHERE state IN ('completed', 'failed')`) >= total, 240000, 'all messages to end'); // throughput on a shared machine

    // Nothing accepted is lost, and each completed exactly once, in order per Session.
    assert.equal(c.num(`SELECT COUNT(*) FROM messages`), total);
    assert.equal(c.num(`SELECT COUNT(*) FROM messages WHERE state = 'completed'`), total, c.sql(`SELECT id || ' ' || state || ' ' || COALESCE(error, '') FROM messages WHERE state <> 'completed' LIMIT 5`));
    assert.equal(c.num(`SELECT COUNT(*) FROM events WHERE kind = 'message.completed'`), total);
    assert.equal(c.num(`SELECT COUNT(*) FROM (SELECT object_id FROM events WHERE kind = 'message.completed' GROUP BY object_id HAVING COUNT(*) <> 1) x`), 0);
    assert.equal(c.num(`SELECT COUNT(*) FROM messages a JOIN messages b ON a.session_id = b.session_id AND a.seq < b.seq AND a.completed_at > b.completed_at`), 0);
    for (const row of c.sql(`SELECT seq || '|' || reply FROM messages`).split('\n')) {
      const bar = row.indexOf('|');
      assert.equal(JSON.parse(row.slice(bar + 1)).echo.n, Number(row.slice(0, bar)));
    }
    // No Sandbox served two Sessions.
    assert.equal(c.num(`SELECT COUNT(*) FROM (SELECT sandbox_id FROM messages GROUP BY sandbox_id HAVING COUNT(DISTINCT session_id) > 1) x`), 0);

    // Host b's Sandboxes ended "host lost" in the store; nothing was delivered on b after that;
    // its Sessions completed on host a.
    const lostAt = c.num(`SELECT lost_at FROM hosts WHERE id = 'b'`);
    for (const id of bLive)
      assert.equal(c.sql(`SELECT state || ' ' || COALESCE(termination_reason, '') FROM sandboxes WHERE id = '${id}'`), 'terminated host lost');
    assert.equal(c.num(`SELECT COUNT(*) FROM sandboxes b JOIN workers w ON w.id = b.worker_id WHERE w.host_id = 'b' AND b.state NOT IN ('terminated', 'failed')`), 0);
    assert.equal(c.num(`SELECT COUNT(*) FROM messages m JOIN sandboxes b ON b.id = m.sandbox_id JOIN workers w ON w.id = b.worker_id WHERE w.host_id = 'b' AND m.completed_at > ${lostAt}`), 0);
    const moved = c.num(`SELECT COUNT(DISTINCT s.session_id) FROM sandboxes s JOIN sandboxes t ON t.session_id = s.session_id JOIN workers wb ON wb.id = s.worker_id JOIN workers wa ON wa.id = t.worker_id WHERE s.termination_reason = 'host lost' AND wb.host_id = 'b' AND wa.host_id = 'a' AND COALESCE(t.claimed_at, t.created_at) > ${lostAt - 1000}`);
    assert.ok(moved >= 1, 'no Session of host b moved to host a');
    assert.equal(c.num(`SELECT COUNT(*) FROM events WHERE kind = 'host.lost' AND object_id = 'b'`), 1);
    assert.equal(c.num(`SELECT COUNT(*) FROM workers WHERE host_id = 'b' AND stopped_at IS NULL`), 0);
    // Host a never touched host b's jail root: the jails b left are still there.
    const leftOnB = readdirSync(c.hosts.b.jailRoot);
    assert.ok(leftOnB.length > 0, 'host b left no jail behind (nothing to reconcile)');

    // The gateways' /metrics and sbxctl (on SQLite, which it reads) show the same.
    const metrics = await (await fetch(`${gws[1].url}/metrics`)).text();
    assert.match(metrics, /^sbx_host_up\{host="a"\} 1$/m);
    assert.match(metrics, /^sbx_host_up\{host="b"\} 0$/m);
    assert.match(metrics, /^sbx_host_workers\{host="b"\} 0$/m);
    assert.match(metrics, /^sbx_callback_refused_total\{host="a"\} 0$/m);
    if (process.env.SBX_SBXCTL_BIN && c.store === 'sqlite') {
      const out = execFileSync(process.env.SBX_SBXCTL_BIN, ['--db', c.dbPath, '--json', 'hosts'], { encoding: 'utf8' });
      const hosts = Object.fromEntries(JSON.parse(out).map((h) => [h.host_id, h]));
      assert.equal(hosts.a.state, 'live');
      assert.equal(hosts.a.workers, 1);
      assert.equal(hosts.b.state, 'lost');
      assert.equal(hosts.b.workers, 0);
      assert.equal(hosts.b.live_sandboxes, 0);
      assert.equal(hosts.b.lost_at, lostAt);
    }

    // Host b comes back: it re-registers and reaps only its own leftovers.
    c.hosts.b.procs = [];
    c.startHost('b', { workers: 1 });
    await c.until(() => c.sql(`SELECT COUNT(*) FROM hosts WHERE id = 'b' AND lost_at IS NULL`) === '1', 10000, 'host b back');
    const reapFrom = performance.now();
    await c.until(() => readdirSync(c.hosts.b.jailRoot).filter((d) => leftOnB.includes(d)).length === 0, 15000, 'host b to reap its leftover jails');
    console.log(`host b reaped its ${leftOnB.length} leftover jails ${Math.round(performance.now() - reapFrom)} ms after it was back`);
    assert.equal(c.num(`SELECT COUNT(*) FROM events WHERE kind = 'host.returned' AND object_id = 'b'`), 1);

    const results = await c.stop();
    for (const r of [...results.a, ...results.b]) assert.deepEqual(r, { code: 0, signal: null });
    assert.equal(c.num(`SELECT COUNT(*) FROM sandboxes WHERE state NOT IN ('terminated', 'failed')`), 0);
    for (const h of ['a', 'b'])
      if (existsSync(c.hosts[h].jailRoot)) assert.deepEqual(readdirSync(c.hosts[h].jailRoot), [], `jails left on host ${h}`);
    assert.equal(c.num(`SELECT COUNT(*) FROM orphan_rows`), 0, c.sql(`SELECT problem || ' ' || detail FROM orphan_rows LIMIT 5`));
  } finally {
    await c.stop();
    c.cleanup();
  }
});

test('a paused host is declared lost, its Session moves, and on resuming it exits touching nothing', async () => {
  const c = startCluster({ env: { SBX_HOST_LOST_MS: String(LOST_MS), SBX_PLACEMENT_GRACE_MS: '20000' } });
  try {
    const gw = await c.startGateway('1', { host: 'a' });
    c.startHost('a', { env: { SBX_POOL_SIZE: '0' } });
    const b = c.startHost('b', { env: { SBX_POOL_SIZE: '1' } });
    const { key } = await c.app(gw, 'paused', { keepAliveSeconds: 60 });
    await c.until(() => c.num(`SELECT COUNT(*) FROM sandboxes b JOIN workers w ON w.id = b.worker_id WHERE w.host_id = 'b' AND b.state = 'warm'`) >= 1, 15000, 'a warm Sandbox on host b');
    const s = await c.session(gw, key);
    const m1 = await c.post(gw, key, s.id, { n: 1 });
    assert.equal((await c.wait(gw, key, s.id, m1.id)).state, 'completed');
    const sb1 = c.sql(`SELECT sandbox_id FROM messages WHERE id = '${m1.id}'`);
    assert.equal(c.hostOfSandbox(sb1), 'b');

    // Host b stops answering (SIGSTOP: a frozen machine or a partition): after host_lost_ms it is
    // declared lost and its active Session's next message activates on host a.
    b.procs[0].kill('SIGSTOP');
    await c.until(() => c.sql(`SELECT COUNT(*) FROM hosts WHERE id = 'b' AND lost_at IS NOT NULL`) === '1', LOST_MS + 10000, 'host b declared lost');
    assert.equal(c.sql(`SELECT state || ' ' || termination_reason FROM sandboxes WHERE id = '${sb1}'`), 'terminated host lost');
    const m2 = await c.post(gw, key, s.id, { n: 2 });
    assert.equal((await c.wait(gw, key, s.id, m2.id)).state, 'completed');
    assert.equal(c.hostOfSandbox(c.sql(`SELECT sandbox_id FROM messages WHERE id = '${m2.id}'`)), 'a');

    // Host b resumes: its heartbeat says it was declared lost, and it exits (status 1) without
    // delivering or recording anything more.
    const events = c.num(`SELECT COUNT(*) FROM events`);
    b.procs[0].kill('SIGCONT');
    const exit = await Promise.race([b.procs[0].exited, sleep(10000).then(() => 'still running')]);
    assert.deepEqual(exit, { code: 1, signal: null }, b.procs[0].log.slice(-2000));
    assert.match(b.procs[0].log, /host b was declared lost|stopped by another worker/);
    assert.equal(c.num(`SELECT COUNT(*) FROM events WHERE id > ${events} AND actor IN (SELECT 'worker:' || id FROM workers WHERE host_id = 'b')`), 0, 'the lost host wrote to the store after it resumed');
    assert.equal(c.sql(`SELECT state FROM sessions WHERE id = '${s.id}'`), 'active');
  } finally {
    await c.stop();
    c.cleanup();
  }
});
