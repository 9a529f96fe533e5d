// disk_full.test.mjs: the gateway's data directory on a small tmpfs that the test fills up. Writes
// must answer 507 storage-full (or 503) as an RFC 9457 problem, never a 500 or a dropped
// connection; reads keep working; every message answered 202 is in the database; PRAGMA
// integrity_check passes; and posting works again as soon as space returns.
//
// Run directly with node (not node --test) so it can exit 77 (skipped) when tmpfs cannot be
// mounted (not root).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, openSync, writeSync, closeSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { req, sql } from '../gateway/harness.mjs';
import { startGateway } from './rel_harness.mjs';

const mnt = mkdtempSync(join(tmpdir(), 'sbx-it-diskfull-'));
try {
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=12m,mode=0755', 'tmpfs', mnt], { stdio: 'pipe' });
} catch (e) {
  console.log(`SKIP: cannot mount a tmpfs on ${mnt} (needs root): ${String(e.stderr ?? e).trim()}`);
  rmSync(mnt, { recursive: true, force: true });
  process.exit(77);
}
after(() => {
  try { execFileSync('umount', ['-l', mnt]); } catch { /* already gone */ }
  rmSync(mnt, { recursive: true, force: true });
});

// Writes zeros until the filesystem refuses: ENOSPC. Returns the bytes written.
function fill(path) {
  const fd = openSync(path, 'w');
  const chunk = Buffer.alloc(64 * 1024);
  let total = 0;
  try {
    for (;;) total += writeSync(fd, chunk);
  } catch (e) {
    if (e.code !== 'ENOSPC') throw e;
  } finally {
    closeSync(fd);
  }
  // Then the last few bytes with small writes, so not even a page is left.
  const fd2 = openSync(path, 'a');
  try { for (;;) total += writeSync(fd2, Buffer.alloc(512)); } catch (e) { if (e.code !== 'ENOSPC') throw e; }
  closeSync(fd2);
  return total;
}

test('a full disk gives 507/503 problems, no corruption, and recovery when space returns', { timeout: 120000 }, async () => {
  const gw = await startGateway({ dataDir: mnt });
  try {
    const a = await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name: 'full' } });
    const key = (await req(gw, 'POST', `/v1/apps/${a.json.id}/keys`, { token: gw.admin, body: {} })).json.key;
    const ses = (await req(gw, 'POST', '/v1/sessions', { token: key, body: {} })).json;
    const post = (n) => req(gw, 'POST', `/v1/sessions/${ses.id}/messages`, { token: key, body: { body: { n, pad: 'x'.repeat(4000) } } });

    const accepted = [];
    for (let n = 0; n < 20; n++) {
      const r = await post(n);
      assert.equal(r.status, 202, r.text);
      accepted.push(r.json.id);
    }
    const filler = join(mnt, 'filler');
    const filled = fill(filler);
    assert.ok(filled > 0);

    // SQLite may still have room in pages it already owns: post until a write is refused.
    let refused = null;
    for (let n = 20; n < 2000 && !refused; n++) {
      const r = await post(n);
      if (r.status === 202) { accepted.push(r.json.id); continue; }
      refused = r;
    }
    assert.ok(refused, 'no write was refused on a full disk');
    assert.ok([507, 503].includes(refused.status), `a full disk answered ${refused.status}: ${refused.text}`);
    assert.match(refused.headers.get('content-type') ?? '', /^application\/problem\+json/);
    assert.equal(refused.json.status, refused.status);
    if (refused.status === 507) assert.equal(refused.json.code, 'storage-full');
    // More writes on the full disk: still problems, never a 500, and the gateway stays up.
    for (let n = 0; n < 5; n++) {
      const r = await req(gw, 'POST', '/v1/sessions', { token: key, body: {} });
      assert.ok([507, 503].includes(r.status) || r.status === 201, `session create on a full disk: ${r.status} ${r.text}`);
    }
    // Reads go on.
    const list = await req(gw, 'GET', `/v1/sessions/${ses.id}/messages?limit=5`, { token: key });
    assert.equal(list.status, 200, list.text);

    // Space returns: writes work again without a restart.
    unlinkSync(filler);
    let again = null;
    for (let i = 0; i < 20; i++) {
      again = await post(10000 + i);
      if (again.status === 202) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(again.status, 202, `after space returned: ${again.status} ${again.text}`);
    accepted.push(again.json.id);

    // Every 202 is in the database, which is intact.
    const inList = accepted.map((id) => `'${id}'`).join(',');
    assert.equal(Number(sql(gw, `SELECT COUNT(*) FROM messages WHERE id IN (${inList})`)), accepted.length);
    assert.equal(sql(gw, 'PRAGMA integrity_check'), 'ok');
    console.log(`accepted ${accepted.length} messages; first refusal ${refused.status} ${refused.json?.code}`);
  } finally {
    const { code } = await gw.stop();
    assert.equal(code, 0, `gateway exit ${code}:\n${gw.stderr.slice(-3000)}`);
  }
  // After a clean stop, the file alone is consistent too.
  assert.equal(execFileSync('sqlite3', [join(mnt, 'sbx.db'), 'PRAGMA integrity_check'], { encoding: 'utf8' }).trim(), 'ok');
});
