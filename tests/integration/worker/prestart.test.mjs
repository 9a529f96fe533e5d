// prestart.test.mjs: pre-started agents on the real gateway + sbx-worker + process driver + echo
// agent, one gateway and worker for every assertion: a pre-started agent is told its one Session
// by the context line, sees its Workspace before its first message and never a second Session; a
// change of the App retires its pool; an agent that dies while warm is replaced, its last log line
// kept in the reason; readiness "line" holds a Sandbox back until its agent says ready, and ends
// it as not ready past the bound, while messages are served the ordinary way meanwhile.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startSbx, req } from './harness.mjs';

let sbx;
before(async () => {
  sbx = await startSbx({ workers: 1, env: { SBX_PRESTART_READY_TIMEOUT: '5' } });
});
after(async () => {
  const results = await sbx.stop();
  sbx.cleanup();
  for (const r of results) assert.equal(r.code, 0, `worker exit ${JSON.stringify(r)}`);
});

async function pool(key, appId) {
  const r = await req(sbx.gw, 'GET', '/v1/pool', { token: key });
  assert.equal(r.status, 200, r.text);
  return r.json.apps.find((a) => a.appId === appId);
}

const q = (s) => sbx.sql(s);
const warmPrestarted = (appId) =>
  Number(q(`SELECT COUNT(*) FROM sandboxes WHERE app_id = '${appId}' AND state = 'warm' AND prestart_rev IS NOT NULL`));

test('a pre-started agent learns its one Session from the context line, with its Workspace there first', async () => {
  const { app, key } = await sbx.app('pre', { prestart: true, warmPool: 2, keepAliveSeconds: 1 });
  assert.equal(app.prestart, true);
  assert.equal(app.warmPool, 2);
  assert.equal(app.readiness, 'none');
  await sbx.until(async () => (await pool(key, app.id))?.warm === 2, 60000, 'two pre-started Sandboxes warm');

  const ws = await req(sbx.gw, 'POST', '/v1/workspaces', { token: key, body: {} });
  assert.equal(ws.status, 201, ws.text);
  const s0 = await sbx.session(key, { workspaceId: ws.json.id });
  const m0 = await sbx.roundTrip(key, s0.id, { writeFile: { path: '/workspace/probe.txt', data: 'there' } });
  assert.equal(m0.state, 'completed', m0.error);
  assert.deepEqual(m0.reply.writeFile, { ok: true });
  assert.equal(m0.reply.contexts, 1);
  const { apiUrl, ...context } = m0.reply.context;
  assert.deepEqual(context, {
    type: 'context', sessionId: s0.id, appId: app.id, sandboxId: m0.sandboxId, workspace: '/workspace',
  });
  assert.match(apiUrl, /^https:\/\//); // the callback API (docs/callbacks.md), as in SBX_API_URL
  assert.equal(m0.reply.sessionEnv, null, 'a pre-started agent had a Session in its environment');
  assert.equal(m0.reply.cwd, '/');
  assert.equal((await sbx.getSandbox(key, m0.sandboxId)).prestarted, true);

  // A second Session on the same Workspace: the file is in /workspace when its context line
  // arrives, before its first message.
  const s1 = await sbx.session(key, { workspaceId: ws.json.id });
  const m1 = await sbx.roundTrip(key, s1.id, { hello: 1 });
  assert.equal(m1.state, 'completed', m1.error);
  assert.notEqual(m1.sandboxId, m0.sandboxId);
  assert.ok(m1.reply.workspaceAtContext.includes('probe.txt'), JSON.stringify(m1.reply));
  assert.equal(m1.reply.context.sessionId, s1.id);

  // More Sessions than the pool holds, at once: each agent is told exactly one Session, its own;
  // some are served the ordinary way (no context) when the pool is empty, none shares a Sandbox.
  const sessions = await Promise.all([1, 2, 3, 4].map(() => sbx.session(key)));
  const replies = await Promise.all(sessions.map((s) => sbx.roundTrip(key, s.id, { n: 1 })));
  const seen = new Set([m0.sandboxId, m1.sandboxId]);
  for (const [i, m] of replies.entries()) {
    assert.equal(m.state, 'completed', m.error);
    assert.ok(!seen.has(m.sandboxId), 'two Sessions shared a Sandbox');
    seen.add(m.sandboxId);
    if (m.reply.contexts) {
      assert.equal(m.reply.contexts, 1);
      assert.equal(m.reply.context.sessionId, sessions[i].id);
    } else {
      assert.equal(m.reply.sessionEnv, sessions[i].id);
    }
  }
  // The first Session comes back after its keep-alive: a fresh pre-started agent, told once.
  await sbx.until(async () => (await sbx.getSandbox(key, m0.sandboxId)).state === 'terminated', 30000, 'keep-alive end');
  const again = await sbx.roundTrip(key, s0.id, { readFile: { path: '/workspace/probe.txt' } });
  assert.notEqual(again.sandboxId, m0.sandboxId);
  assert.deepEqual(again.reply.readFile, { data: 'there' });
  assert.ok(again.reply.contexts <= 1, 'an agent was told two Sessions');
  // The store agrees: no Sandbox ever served two Sessions (the auditors' integrity view too).
  assert.equal(q('SELECT COUNT(*) FROM sandbox_reuse_violations'), '0');
  assert.equal(q(`SELECT COUNT(*) FROM (SELECT sandbox_id FROM messages WHERE sandbox_id IS NOT NULL
                  GROUP BY sandbox_id HAVING COUNT(DISTINCT session_id) > 1) AS t`), '0');

  // A change of the command's environment retires the warm ones; the pool comes back, new.
  await sbx.until(async () => warmPrestarted(app.id) === 2, 60000, 'the pool refilled');
  const old = q(`SELECT id FROM sandboxes WHERE app_id = '${app.id}' AND state = 'warm'`).split('\n');
  const p = await req(sbx.gw, 'PATCH', `/v1/apps/${app.id}`, { token: sbx.gw.admin, body: { env: { NEW: '1' } } });
  assert.equal(p.status, 200, p.text);
  for (const id of old) {
    const ended = await sbx.until(async () => {
      const s = await sbx.getSandbox(key, id);
      return s.state === 'terminated' ? s : null;
    }, 30000, `${id} retired`);
    assert.equal(ended.terminationReason, "retired: the App's definition changed");
    assert.equal(ended.sessionId, null);
  }
  await sbx.until(async () => warmPrestarted(app.id) === 2, 60000, 'a new pool');
  const after = await sbx.roundTrip(key, (await sbx.session(key)).id, { n: 2 });
  assert.ok(!old.includes(after.sandboxId), 'a retired Sandbox was claimed');
  assert.ok((await pool(key, app.id)).retired >= 2, 'the retired ones are not counted');
  const metrics = await (await fetch(`${sbx.gw.url}/metrics`)).text();
  assert.match(metrics, new RegExp(`sbx_prestart_ended_total\\{app="${app.id}",reason="retired"\\} [2-9]`));
  // Pre-starting turned off: the pool goes.
  const before = (await pool(key, app.id)).retired;
  await req(sbx.gw, 'PATCH', `/v1/apps/${app.id}`, { token: sbx.gw.admin, body: { prestart: false } });
  await sbx.until(() => q(`SELECT COUNT(*) FROM sandboxes WHERE app_id = '${app.id}' AND prestart_rev
                            IS NOT NULL AND state IN ('booting', 'warm')`) === '0', 60000,
                  'the pool retired with prestart off');
  assert.ok((await pool(key, app.id)).retired > before, 'nothing retired with prestart off');
});

test('an agent that dies while warm is replaced, its last log line kept', async () => {
  const { app, key } = await sbx.app('dies', {
    prestart: true, warmPool: 1, env: { SBX_ECHO_WARM_EXIT_MS: '300' },
  });
  const died = await sbx.until(() => {
    const n = Number(q(`SELECT COUNT(*) FROM sandboxes WHERE app_id = '${app.id}' AND
                        termination_reason LIKE 'agent exited with status 3 while warm%'`));
    return n >= 2 ? n : null;
  }, 60000, 'two warm agents dead and one replaced');
  assert.ok(died >= 2);
  const reason = q(`SELECT termination_reason FROM sandboxes WHERE app_id = '${app.id}' AND
                    termination_reason LIKE 'agent exited%' LIMIT 1`);
  assert.match(reason, /no line within 300 ms/);
  assert.ok((await pool(key, app.id)).endedWarm >= 2);
  // None of them served a Session.
  assert.equal(q(`SELECT COUNT(*) FROM sandboxes WHERE app_id = '${app.id}' AND session_id IS NOT NULL`), '0');
  await req(sbx.gw, 'PATCH', `/v1/apps/${app.id}`, { token: sbx.gw.admin, body: { warmPool: 0 } });
});

test('readiness "line" holds a pre-started Sandbox back until its agent is ready', async () => {
  const { app, key } = await sbx.app('ready', { prestart: true, warmPool: 1, readiness: 'line' });
  // The echo agent prints no ready line here: never offered, ended past the bound, counted.
  await sbx.until(async () => (await pool(key, app.id))?.notReady >= 1, 60000, 'a Sandbox ended not ready');
  assert.equal(q(`SELECT COUNT(*) FROM sandboxes WHERE app_id = '${app.id}' AND prestart_rev IS NOT NULL
                  AND (claimed_at IS NOT NULL OR ready_at IS NOT NULL)`), '0');
  assert.match(q(`SELECT termination_reason FROM sandboxes WHERE app_id = '${app.id}' AND
                  termination_reason LIKE 'not ready%' LIMIT 1`), /not ready within 5s/);
  // Meanwhile its Sessions are served the ordinary way.
  const s = await sbx.session(key);
  const m = await sbx.roundTrip(key, s.id, { n: 1 });
  assert.equal(m.state, 'completed', m.error);
  assert.equal(m.reply.contexts, 0);
  assert.equal(m.reply.sessionEnv, s.id);
  assert.equal((await sbx.getSandbox(key, m.sandboxId)).prestarted, false);

  // An agent that says it is ready: warm, and claimed with its context.
  await req(sbx.gw, 'PATCH', `/v1/apps/${app.id}`, { token: sbx.gw.admin, body: { env: { SBX_ECHO_READY: '1' } } });
  await sbx.until(async () => (await pool(key, app.id))?.warm === 1, 60000, 'a ready pre-started Sandbox');
  const s2 = await sbx.session(key);
  const m2 = await sbx.roundTrip(key, s2.id, { n: 2 });
  assert.equal(m2.reply.contexts, 1);
  assert.equal(m2.reply.context.sessionId, s2.id);
  await req(sbx.gw, 'PATCH', `/v1/apps/${app.id}`, { token: sbx.gw.admin, body: { warmPool: 0 } });
});
