// live.test.mjs: sbxctl against the database of a running sbx: the real sbx-gateway and a real
// worker (sbx-worker-fork: the worker's own code with its fork test-double driver) on loopback,
// driven through the REST API; then sbxctl reads the same SQLite file while they run, asks the
// gateway to terminate a Sandbox, backs the database up under load, and checks it again after sbx
// stops and after a breach is written by hand.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { startSbx, req } from '../worker/harness.mjs';

const CTL = process.env.SBXCTL_BIN;
if (!CTL) throw new Error('SBXCTL_BIN must name the sbxctl binary');

// Runs sbxctl; returns { code, out, err, json }.
function ctl(sbx, args, env = {}) {
  const r = spawnSync(CTL, ['--db', join(sbx.dataDir, 'sbx.db'), ...args], {
    encoding: 'utf8',
    env: { ...process.env, SBX_DATA_DIR: sbx.dataDir, SBX_ADMIN_TOKEN: '', ...env },
  });
  let json = null;
  if (args.includes('--json')) {
    try { json = JSON.parse(r.stdout); } catch { json = null; }
  }
  return { code: r.status, out: r.stdout, err: r.stderr, json };
}

function ok(r, what) {
  assert.equal(r.code, 0, `${what}: exit ${r.code}\n${r.out}\n${r.err}`);
  return r.json;
}

test('sbxctl reads a live sbx, acts through its gateway, and flags a breach', async () => {
  const sbx = await startSbx({ workers: 1 });
  try {
    const { app, key } = await sbx.app('audited', { keepAliveSeconds: 1 });
    const gw = sbx.gw;
    // A second key, revoked: the key audit must show both events with the admin as actor.
    const k2 = await req(gw, 'POST', `/v1/apps/${app.id}/keys`, { token: gw.admin, body: { name: 'temp' } });
    assert.equal(k2.status, 201);
    const rv = await req(gw, 'DELETE', `/v1/apps/${app.id}/keys/${k2.json.id}`, {
      token: gw.admin, headers: { 'X-Request-Id': 'req_revoke_temp' } });
    assert.equal(rv.status, 204);

    const s1 = await sbx.session(key, { name: 'alice' });
    const s2 = await sbx.session(key, { name: 'bob' });
    const m1 = await sbx.roundTrip(key, s1.id, { n: 1 });
    const m2 = await sbx.roundTrip(key, s1.id, { n: 2 });
    const m3 = await sbx.roundTrip(key, s2.id, { n: 3 });
    assert.equal(m1.sandboxId, m2.sandboxId);
    assert.notEqual(m1.sandboxId, m3.sandboxId);

    // alice's Sandbox expires (keep-alive 1 s); bob is deleted, which ends his.
    await sbx.until(async () => (await sbx.getSandbox(key, m1.sandboxId)).state === 'terminated',
      8000, 'keep-alive expiry');
    assert.equal((await req(gw, 'DELETE', `/v1/sessions/${s2.id}`, { token: key })).status, 204);
    await sbx.until(async () => ['terminated', 'failed'].includes((await sbx.getSandbox(key, m3.sandboxId)).state),
      8000, 'termination of the deleted Session\'s Sandbox');

    // ---- while sbx runs ----
    const sessions = ok(ctl(sbx, ['sessions', '--json']), 'sessions');
    assert.deepEqual(sessions.map((s) => s.id), [s1.id]);
    assert.equal(sessions[0].messages, 2);

    const one = ok(ctl(sbx, ['session', s1.id, '--json']), 'session');
    assert.deepEqual(one.messages.map((m) => [m.message_id, m.sandbox_id, m.state]),
      [[m1.id, m1.sandboxId, 'completed'], [m2.id, m2.sandboxId, 'completed']]);
    assert.deepEqual(one.messages[0].reply, m1.reply);
    assert.equal(one.sandboxes.length, 1);
    assert.equal(one.sandboxes[0].sandbox_id, m1.sandboxId);
    assert.equal(one.sandboxes[0].termination_reason, 'keep-alive expired');
    assert.equal(one.sandboxes[0].messages_served, 2);
    const kinds = one.timeline.map((e) => e.kind);
    for (const k of ['session.created', 'message.queued', 'message.delivering', 'message.completed',
      'sandbox.claimed', 'sandbox.terminated', 'sandbox claimed', 'message received']) {
      assert.ok(kinds.includes(k), `timeline lacks ${k}: ${kinds.join(', ')}`);
    }
    // The request id of each message links the timeline to the API call (and the logs).
    assert.ok(one.timeline.some((e) => e.kind === 'message.queued' && e.request_id === m1.requestId));
    for (let i = 1; i < one.timeline.length; i++) assert.ok(one.timeline[i].at >= one.timeline[i - 1].at);

    const human = ctl(sbx, ['session', 'alice']);
    assert.equal(human.code, 0, human.err);
    assert.match(human.out, /keep-alive expired/);

    const sbs = ok(ctl(sbx, ['sandboxes', '--session', s2.id, '--json']), 'sandboxes');
    assert.equal(sbs.length, 1);
    assert.equal(sbs[0].sandbox_id, m3.sandboxId);
    assert.ok(sbs[0].termination_reason, 'no termination reason');

    const msgs = ok(ctl(sbx, ['messages', '--session', s1.id, '--json']), 'messages');
    assert.deepEqual(msgs.map((m) => m.seq), [1, 2]);

    const evs = ok(ctl(sbx, ['events', '--session', s2.id, '--json']), 'events');
    assert.ok(evs.some((e) => e.kind === 'session.deleted' && e.actor.startsWith('key:')));

    const keys = ok(ctl(sbx, ['keys', '--history', '--json']), 'keys');
    const revoked = keys.find((k) => k.action === 'revoked');
    assert.equal(revoked.key_id, k2.json.id);
    assert.equal(revoked.actor, 'admin');
    assert.equal(revoked.request_id, 'req_revoke_temp');

    const pool = ok(ctl(sbx, ['pool', '--json'], { SBX_POOL_SIZE: '1' }), 'pool');
    assert.ok(pool.length >= 1);
    const claimed = Number(sbx.sql(`SELECT COUNT(*) FROM sandboxes WHERE session_id IS NOT NULL`));
    assert.equal(pool.reduce((a, p) => a + p.cold_activations + p.warm_activations, 0), claimed);
    assert.equal(pool[0].target, 1);

    const check = ctl(sbx, ['db', 'check', '--json']);
    assert.equal(check.code, 0, check.out + check.err);
    assert.equal(check.json.ok, true);

    // Views, through the sqlite3 shell as an auditor would.
    assert.equal(sbx.sql('SELECT COUNT(*) FROM sandbox_reuse_violations'), '0');
    assert.equal(sbx.sql(`SELECT termination_reason FROM sandbox_lifetimes WHERE sandbox_id = '${m1.sandboxId}'`),
      'keep-alive expired');
    assert.equal(sbx.sql(`SELECT sandbox_id FROM message_deliveries WHERE message_id = '${m3.id}'`), m3.sandboxId);

    // An action: terminate a warm Sandbox through the gateway, as the admin.
    const warm = await sbx.until(() => sbx.sql(`SELECT id FROM sandboxes WHERE state = 'warm' LIMIT 1`), 10000, 'a warm Sandbox');
    const gwEnv = { SBX_ADMIN_TOKEN: gw.admin, SBX_LISTEN: `127.0.0.1:${gw.port}` };
    const term = ctl(sbx, ['sandbox', warm, '--terminate'], gwEnv);
    assert.equal(term.code, 0, term.out + term.err);
    await sbx.until(() => ['terminated', 'failed'].includes(ok(ctl(sbx, ['sandbox', warm, '--json']), 'sandbox').sandbox.state),
      10000, 'the terminated Sandbox');
    const again = ctl(sbx, ['sandbox', warm, '--terminate'], gwEnv);
    assert.equal(again.code, 1, 'terminating twice should be refused (409)');
    const events = ok(ctl(sbx, ['events', '--object', warm, '--json']), 'events');
    assert.ok(events.some((e) => e.kind === 'sandbox.stop_requested' && e.actor === 'admin'));

    // A backup while the worker keeps the pool going and messages flow.
    const posting = Promise.all([1, 2, 3].map((n) => sbx.roundTrip(key, s1.id, { n: 10 + n })));
    const backup = join(sbx.dataDir, 'backup.db');
    ok(ctl(sbx, ['db', 'backup', backup]), 'backup');
    await posting;
    assert.equal(execFileSync('sqlite3', [backup, 'PRAGMA integrity_check'], { encoding: 'utf8' }).trim(), 'ok');

    // ---- after sbx stops ----
    const stopped = await sbx.stop();
    assert.equal(stopped[0].code, 0);
    const down = ctl(sbx, ['db', 'check']);
    assert.equal(down.code, 0, down.out + down.err);
    assert.match(down.out, /OK\n$/);

    // ---- a breach written by hand: bob's message recorded as served by alice's Sandbox ----
    sbx.sql(`UPDATE messages SET sandbox_id = '${m1.sandboxId}' WHERE id = '${m3.id}'`);
    const bad = ctl(sbx, ['db', 'check', '--json']);
    assert.equal(bad.code, 1, bad.out + bad.err);
    const reuse = bad.json.checks.find((c) => c.name === 'sandbox-reuse');
    assert.equal(reuse.status, 'fail');
    assert.ok(reuse.rows.some((r) => r.violation === 'served-two-sessions' && r.sandbox_id === m1.sandboxId));
  } finally {
    await sbx.stop().catch(() => {});
    sbx.cleanup();
  }
});

test('sbxctl events --follow reads the gateway\'s live event feed, not the database', async () => {
  const { spawn } = await import('node:child_process');
  const sbx = await startSbx({ workers: 0 });
  try {
    const { key } = await sbx.app('followed', {});
    const ses = await sbx.session(key, { name: 'watched' });
    const p = spawn(CTL, ['--db', join(sbx.dataDir, 'sbx.db'), 'events', '--follow', '--json', '--session', ses.id, '--limit', '1'], {
      env: { ...process.env, SBX_DATA_DIR: sbx.dataDir, SBX_ADMIN_TOKEN: sbx.gw.admin, SBX_LISTEN: `127.0.0.1:${sbx.gw.port}` },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    const exited = new Promise((r) => p.on('exit', (code, signal) => r({ code, signal })));
    await sbx.until(() => /following the gateway's event feed/.test(err) && out.split('\n').filter(Boolean).length >= 1, 5000, 'sbxctl to follow the feed');
    // Give it a moment to open the stream, then change the Session through the API.
    await new Promise((r) => setTimeout(r, 300));
    const patch = await req(sbx.gw, 'PATCH', `/v1/sessions/${ses.id}`, { token: key, body: { metadata: { tier: 'gold' } }, headers: { 'X-Request-Id': 'req_follow_feed' } });
    assert.equal(patch.status, 200, patch.text);
    const line = await sbx.until(() => out.split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((e) => e.request_id === 'req_follow_feed'), 15000, 'the event on sbxctl\'s output');
    assert.equal(line.kind, 'session.updated');
    assert.equal(line.session_id, ses.id);
    assert.equal(typeof line.at, 'number');
    // From the feed, not the database poll it falls back to (which would print as soon).
    assert.doesNotMatch(err, /reading the database/, err);
    p.kill('SIGTERM');
    assert.deepEqual(await exited, { code: 0, signal: null });
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});
