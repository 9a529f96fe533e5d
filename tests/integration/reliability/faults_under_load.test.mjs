// faults_under_load.test.mjs: the durable-mailbox promise under fire. A load generator posts
// messages for ~25 s against the real sbx-gateway and two sbx-worker processes on the process
// driver (real Sandboxes, echo agent), while the test kill -9s the gateway and then a worker at
// random points, several times, restarting each. Afterwards every message that was answered 202
// must exist and end `completed` with exactly one message.completed event. The count of
// "acknowledged but lost" is printed and must be 0. The workers claim while the gateway syncs
// (claim_overlap), so the kills also land between a batch's COMMIT and its sync.
//
// Sized for a shared 2-core machine: 4 Sessions, 4 concurrent posters, a warm pool of 1.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { req, sql, removeDataDir, tempDataDir } from '../gateway/harness.mjs';
import { startGateway } from './rel_harness.mjs';

const GATEWAY_ENV = {
  SBX_POOL_SIZE: '1', SBX_POLL_MS: '200', SBX_HEARTBEAT_MS: '200', SBX_WORKER_STALE_MS: '1500',
  SBX_RETRY_BASE_MS: '50', SBX_RETRY_MAX_MS: '400', SBX_MESSAGE_TIMEOUT: '10', SBX_LEASE_MS: '2000',
  SBX_SHUTDOWN_GRACE: '5', SBX_JOB_THREADS: '4',
  SBX_SYNCHRONOUS: 'FULL', // a 202 means on disk: what the test is about
  // Workers claim while the gateway syncs (the default, said here because the test is about it):
  // a gateway killed between its COMMIT and its sync leaves messages visible whose lines the
  // workers hold until a restarted gateway (or the worker itself) has synced the WAL.
  SBX_CLAIM_OVERLAP: '1',
};
const LOAD_MS = Number(process.env.SBX_FAULTS_LOAD_MS ?? 25000);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rand = (lo, hi) => lo + Math.floor(Math.random() * (hi - lo));

function startWorker(dataDir) {
  const p = spawn(process.env.SBX_WORKER_BIN, [], {
    env: { ...process.env, ...GATEWAY_ENV, SBX_DATA_DIR: dataDir, SBX_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  p.log = '';
  p.stderr.on('data', (d) => { p.log += d; });
  p.exited = new Promise((resolve) => p.on('exit', (code, signal) => resolve({ code, signal })));
  return p;
}

test('kill -9 of the gateway and the workers under load: acknowledged but lost = 0', { timeout: 170000 }, async () => {
  const dataDir = tempDataDir();
  let gw = await startGateway({ dataDir, env: GATEWAY_ENV });
  const admin = gw.admin;
  const workers = [startWorker(dataDir), startWorker(dataDir)];
  const workerLogs = []; // logs of killed workers, for the failure message
  const acked = new Map(); // messageId -> sessionId
  let posted = 0, refused = 0, gatewayKills = 0, workerKills = 0;
  try {
    const app = await req(gw, 'POST', '/v1/apps', { token: admin, body: { name: 'faults', keepAliveSeconds: 30, maxAttempts: 100 } });
    assert.equal(app.status, 201, app.text);
    const key = (await req(gw, 'POST', `/v1/apps/${app.json.id}/keys`, { token: admin, body: {} })).json.key;
    const sessions = [];
    for (let i = 0; i < 4; i++) sessions.push((await req(gw, 'POST', '/v1/sessions', { token: key, body: {} })).json.id);

    // Posters: each loops until the load window ends; a refused connection (gateway down) or a
    // 5xx is simply not an acknowledgement. Only a 202 counts.
    const end = performance.now() + LOAD_MS;
    let seq = 0;
    const poster = async () => {
      while (performance.now() < end) {
        const sid = sessions[rand(0, sessions.length)];
        const n = seq++;
        posted++;
        try {
          const r = await req(gw, 'POST', `/v1/sessions/${sid}/messages`, {
            token: key, body: { body: { n, sleepMs: rand(0, 20) } }, headers: { 'Idempotency-Key': `load-${n}` },
          });
          if (r.status === 202) acked.set(r.json.id, sid);
          else refused++;
          // Paced (~10 posts/s in all): the Sandboxes of a loaded 2-core machine must be able to
          // drain the queue within the test's time; the faults, not the backlog, are under test.
          await sleep(rand(200, 600));
        } catch {
          refused++;
          await sleep(50);
        }
      }
    };
    // The killer: alternately the gateway and a worker, at random points of the window.
    const killer = async () => {
      await sleep(rand(1500, 3000));
      for (let round = 0; performance.now() < end - 2000; round++) {
        if (round % 2 === 0) {
          await gw.kill9();
          gatewayKills++;
          await sleep(rand(100, 800));
          gw = await startGateway({ dataDir, env: GATEWAY_ENV, firstStart: false });
        } else {
          const i = rand(0, workers.length);
          workers[i].kill('SIGKILL');
          await workers[i].exited;
          workerLogs.push(workers[i].log);
          workerKills++;
          await sleep(rand(100, 800));
          workers[i] = startWorker(dataDir);
        }
        await sleep(rand(1500, 3500));
      }
    };
    await Promise.all([poster(), poster(), poster(), poster(), killer()]);
    if (LOAD_MS >= 20000) assert.ok(gatewayKills >= 2 && workerKills >= 2, `only ${gatewayKills} gateway and ${workerKills} worker kills`);
    assert.ok(acked.size >= 20, `only ${acked.size} messages acknowledged`);

    // Drain: every acknowledged message must complete (delivered again after a lease expires).
    const ids = [...acked.keys()];
    const inList = ids.map((id) => `'${id}'`).join(',');
    const deadline = performance.now() + 90000;
    let done = 0;
    while (performance.now() < deadline) {
      done = Number(sql(gw, `SELECT COUNT(*) FROM messages WHERE id IN (${inList}) AND state = 'completed'`));
      if (done === ids.length) break;
      await sleep(500);
    }
    done = Number(sql(gw, `SELECT COUNT(*) FROM messages WHERE id IN (${inList}) AND state = 'completed'`));
    const states = sql(gw, `SELECT state || ':' || COUNT(*) FROM messages WHERE id IN (${inList}) GROUP BY state`).replace(/\n/g, ' ');
    const present = Number(sql(gw, `SELECT COUNT(*) FROM messages WHERE id IN (${inList})`));
    const notCompleted = sql(gw, `SELECT id || ' ' || state || ' ' || COALESCE(error, '') FROM messages WHERE id IN (${inList}) AND state <> 'completed'`);
    const lost = ids.length - done;
    const dupes = sql(gw, `SELECT object_id || ' x' || COUNT(*) FROM events WHERE kind = 'message.completed' AND object_id IN (${inList}) GROUP BY object_id HAVING COUNT(*) <> 1`);
    const completedEvents = Number(sql(gw, `SELECT COUNT(DISTINCT object_id) FROM events WHERE kind = 'message.completed' AND object_id IN (${inList})`));
    const integrity = sql(gw, 'PRAGMA integrity_check');
    console.log(`posted ${posted}, acknowledged ${ids.length}, not acknowledged ${refused}; ` +
      `gateway kills ${gatewayKills}, worker kills ${workerKills}`);
    console.log(`acknowledged but lost: ${lost} (missing rows: ${ids.length - present}; states: ${states})`);
    assert.equal(present, ids.length, 'acknowledged messages missing from the database');
    if (lost) {
      for (const l of [...workerLogs, ...workers.map((w) => w.log)]) console.log(`worker log:\n${l.slice(-3000)}`);
    }
    assert.equal(lost, 0, `acknowledged but not completed:\n${notCompleted.slice(0, 2000)}`);
    assert.equal(dupes, '', `completed more than once:\n${dupes}`);
    assert.equal(completedEvents, ids.length, 'a completed message without its message.completed event');
    assert.equal(integrity, 'ok');

    // A clean stop of the survivors: exit 0, which under ASan also means LeakSanitizer found no
    // leak after all those restarts and redeliveries.
    for (const w of workers) w.kill('SIGTERM');
    for (const w of workers) assert.deepEqual(await w.exited, { code: 0, signal: null }, w.log.slice(-2000));
    const gwExit = await gw.stop();
    assert.equal(gwExit.code, 0, gw.stderr.slice(-2000));
  } finally {
    for (const w of workers) if (w.exitCode === null && w.signalCode === null) w.kill('SIGTERM');
    for (const w of workers) {
      const t = setTimeout(() => w.kill('SIGKILL'), 20000);
      await w.exited;
      clearTimeout(t);
    }
    await gw.stop();
    removeDataDir(dataDir);
  }
});
