// busy_checkpoint.test.mjs: SQLITE_BUSY and checkpoints under write load. While clients post
// messages, another process repeatedly takes the database's write lock for a moment (shorter than
// busy_timeout_ms) and forces WAL checkpoints (TRUNCATE, which must wait for every reader and
// writer). No request may answer 500; a refusal may only be 503 with Retry-After; every 202 is in
// the database afterwards and the database is intact.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { removeDataDir, req, sql, newApp } from '../gateway/harness.mjs';
import { startGateway } from './rel_harness.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Runs SQL in a sqlite3 CLI process (its own connection); resolves with its exit status.
function sqlite(dbPath, script) {
  return new Promise((resolve) => {
    const p = spawn('sqlite3', ['-cmd', '.timeout 10000', dbPath], { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    p.on('exit', (code) => resolve({ code, err }));
    p.stdin.end(script);
  });
}

test('write-lock holders and forced checkpoints never cause a 500 or a lost 202', { timeout: 90000 }, async () => {
  const gw = await startGateway();
  try {
    const { key } = await newApp(gw, 'busy');
    const ses = (await req(gw, 'POST', '/v1/sessions', { token: key, body: {} })).json;
    const db = join(gw.dataDir, 'sbx.db');
    const accepted = [], statuses = {};
    let stop = false;
    const poster = async () => {
      for (let n = 0; !stop; n++) {
        const r = await req(gw, 'POST', `/v1/sessions/${ses.id}/messages`, { token: key, body: { body: { n, pad: 'p'.repeat(2000) } } });
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
        if (r.status === 202) accepted.push(r.json.id);
        else {
          assert.equal(r.status, 503, `a post answered ${r.status}: ${r.text}`);
          assert.ok(r.headers.get('retry-after'), '503 without Retry-After');
        }
      }
    };
    // The disturber: a write transaction held for a CPU-bound moment, then a TRUNCATE checkpoint.
    const disturber = async () => {
      for (let i = 0; i < 8; i++) {
        const hold = await sqlite(db, "BEGIN IMMEDIATE; INSERT INTO settings (key, value) VALUES ('busy_probe', 'x') " +
          "ON CONFLICT (key) DO UPDATE SET value = excluded.value; " +
          'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 400000) SELECT count(*) FROM c; COMMIT;');
        assert.equal(hold.code, 0, hold.err);
        const ck = await sqlite(db, 'PRAGMA wal_checkpoint(TRUNCATE);');
        assert.equal(ck.code, 0, ck.err);
        await sleep(100);
      }
    };
    const posters = [poster(), poster(), poster()];
    await disturber();
    stop = true;
    await Promise.all(posters);
    console.log(`statuses: ${JSON.stringify(statuses)}`);
    assert.ok(accepted.length >= 20, `only ${accepted.length} posts accepted`);
    const inList = accepted.map((id) => `'${id}'`).join(',');
    assert.equal(Number(sql(gw, `SELECT COUNT(*) FROM messages WHERE id IN (${inList})`)), accepted.length);
    assert.equal(sql(gw, 'PRAGMA integrity_check'), 'ok');
  } finally {
    const { code } = await gw.stop();
    removeDataDir(gw.dataDir);
    assert.equal(code, 0, gw.stderr.slice(-3000));
  }
});
