// callbacks.test.mjs: the Sandbox callback API end to end, on the real gateway and sbx-worker, as
// root in a network namespace of its own (the worker's callback server takes 0.0.0.0:443 there).
// A Python agent in the Debian 12 + python3 test image (callback_agent.py, standard library only)
// reads its Sandbox context from the environment and calls the API over HTTPS, trusting only the
// installation CA it is given; the test checks every answer against what the REST API says, and
// verifies the identity tokens with `jose` against the keys the gateway publishes.
//
// SBX_CB_DRIVER picks the driver: process (default: everything below) or qemu (TCG is slow: one
// activation and the essentials: context, Session, metadata, identity token, a 401). Under
// tests/pg-run.sh the store is PostgreSQL; gateway and worker are separate processes either way.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRemoteJWKSet, jwtVerify, decodeProtectedHeader } from 'jose';
import { startSbx, req, sleep, assertWorkersExited } from '../worker/harness.mjs';
import { importImage } from '../images/upload.mjs';

const IMAGES = process.env.SBX_TEST_IMAGES;
if (!IMAGES) throw new Error('SBX_TEST_IMAGES must name the test images directory');
const DRIVER = process.env.SBX_CB_DRIVER || 'process';
const GUEST_DIR = process.env.SBX_GUEST_DIR || '';
// Without its comment lines and blank lines: a command item is at most 4096 bytes.
const AGENT = readFileSync(new URL('./callback_agent.py', import.meta.url), 'utf8')
  .split('\n').filter((l) => l.trim() !== '' && !l.trim().startsWith('#')).join('\n');
// Set for gateway and worker alike: the tokens' issuer, whatever address the gateway listens on.
const ISSUER = 'https://sbx.callbacks.test';
const AUDIENCE = 'https://audience.callbacks.test';
const TOKEN_TTL = 600; // identity_token_ttl's default
const BODY_LIMIT = 65536; // callback_body_limit's default
const REPLY_S = DRIVER === 'qemu' ? 240 : 90;

const GET_SESSION = { method: 'GET', path: '/sandbox/v1/session' };

async function start(extra = {}) {
  const env = { SBX_POOL_SIZE: '1', SBX_MESSAGE_TIMEOUT: String(REPLY_S), SBX_PUBLIC_URL: ISSUER, ...extra };
  if (DRIVER === 'qemu') Object.assign(env, { SBX_QEMU_ACCEL: 'tcg', SBX_GUEST_DIR: GUEST_DIR, SBX_LEASE_MS: '120000' });
  const sbx = await startSbx({ workers: 1, env });
  try {
    const img = await importImage(sbx, 'py', join(IMAGES, 'py.docker.tar'), 180000);
    assert.equal(img.state, 'ready', JSON.stringify(img.problem));
  } catch (e) {
    await sbx.stop();
    sbx.cleanup();
    throw e;
  }
  return sbx;
}

async function stop(sbx, bodyFailed) {
  const results = await sbx.stop();
  if (bodyFailed) for (const [i, p] of sbx.workers.entries()) console.log(`# worker ${i} log ends:\n${p.log.slice(-4000)}`);
  sbx.cleanup();
  assertWorkersExited(results, bodyFailed);
}

function agentApp(sbx, name, fields = {}) {
  return sbx.app(name, {
    image: 'py',
    command: ['/usr/bin/python3', '-c', AGENT],
    driver: DRIVER,
    keepAliveSeconds: 120,
    maxAttempts: 1,
    ...(DRIVER === 'qemu' ? { memSizeMib: 256, vcpuCount: 1 } : {}),
    ...fields,
  });
}

// One message whose body lists the calls the agent makes; the completed message (its reply has
// the agent's environment, the CA file it was given and each call's status and body).
async function run(sbx, key, sessionId, steps) {
  const m = await sbx.roundTrip(key, sessionId, { steps }, REPLY_S);
  assert.equal(m.state, 'completed', `message failed: ${m.error}`);
  assert.equal(m.reply.agentError, undefined, m.reply.agentError);
  assert.equal(m.reply.steps.length, steps.length);
  return m;
}

// A call's answer, with the call and answer shown when the status is not the expected one.
function expectStatus(step, status, what) {
  const ok = Array.isArray(status) ? status.includes(step.status) : step.status === status;
  assert.ok(ok, `${what}: expected ${status}, got ${JSON.stringify(step)}`);
  return step.body;
}

function expectProblem(step, status, code, what) {
  expectStatus(step, status, what);
  assert.match(step.contentType || '', /^application\/problem\+json/, `${what}: ${JSON.stringify(step)}`);
  assert.equal(step.body.status, status, what);
  if (code) assert.equal(step.body.code, code, `${what}: ${JSON.stringify(step.body)}`);
  assert.equal(typeof step.body.detail, 'string', what);
  if (status === 401) assert.match(step.wwwAuthenticate || '', /^Bearer\b/, `${what}: WWW-Authenticate`);
}

// The Sandbox context an agent is given matches what the REST API says of its message.
function checkContext(sbx, m, app, session) {
  const env = m.reply.env;
  assert.equal(env.SBX_SESSION_ID, session.id, 'SBX_SESSION_ID');
  assert.equal(env.SBX_APP_ID, app.id, 'SBX_APP_ID');
  assert.equal(env.SBX_SANDBOX_ID, m.sandboxId, 'SBX_SANDBOX_ID is the Sandbox that answered');
  assert.match(env.SBX_API_URL || '', /^https:\/\/\d+\.\d+\.\d+\.\d+(:\d+)?$/, 'SBX_API_URL: https to an address');
  assert.match(env.SBX_TOKEN || '', /^\S{20,}$/, 'SBX_TOKEN');
  assert.ok(env.SBX_CA_FILE, 'SBX_CA_FILE');
  assert.equal(m.reply.caPem, readFileSync(join(sbx.dataDir, 'ca', 'ca.pem'), 'utf8'),
    `SBX_CA_FILE (${env.SBX_CA_FILE}) is not the installation CA: ${m.reply.caError || ''}`);
}

async function verifier(sbx) {
  const oidc = await req(sbx.gw, 'GET', '/.well-known/openid-configuration');
  assert.equal(oidc.status, 200, oidc.text);
  assert.equal(oidc.json.issuer, ISSUER);
  assert.equal(oidc.json.jwks_uri, `${ISSUER}/.well-known/jwks.json`);
  assert.deepEqual(oidc.json.id_token_signing_alg_values_supported, ['EdDSA']);
  const keys = await req(sbx.gw, 'GET', '/.well-known/jwks.json');
  assert.equal(keys.status, 200, keys.text);
  assert.ok(keys.json.keys.length >= 1);
  for (const k of keys.json.keys) {
    assert.deepEqual([k.kty, k.crv, k.alg, k.use], ['OKP', 'Ed25519', 'EdDSA', 'sig'], JSON.stringify(k));
    assert.equal('d' in k, false, 'the published key set holds a private key');
  }
  // The keys are fetched from the gateway itself: the issuer's name is not resolvable here.
  const jwks = createRemoteJWKSet(new URL('/.well-known/jwks.json', sbx.gw.url));
  return (token, options) => jwtVerify(token, jwks, { issuer: ISSUER, audience: AUDIENCE, algorithms: ['EdDSA'], ...options });
}

async function checkIdentityToken(verify, step, m, app, session) {
  const body = expectStatus(step, 200, 'identity-token');
  assert.equal(typeof body.token, 'string');
  assert.equal(decodeProtectedHeader(body.token).alg, 'EdDSA');
  const { payload, protectedHeader } = await verify(body.token);
  assert.equal(protectedHeader.typ, 'JWT');
  assert.equal(typeof protectedHeader.kid, 'string');
  assert.equal(payload.iss, ISSUER);
  assert.equal(payload.aud, AUDIENCE);
  assert.equal(payload.sub, `sbx:app:${app.id}:session:${session.id}`);
  assert.equal(payload.app, app.id);
  assert.equal(payload.session, session.id);
  assert.equal(payload.sandbox, m.sandboxId);
  assert.equal(payload.exp - payload.iat, TOKEN_TTL, 'exp = iat + identity_token_ttl');
  assert.ok(Math.abs(payload.iat - Date.now() / 1000) < 300, `iat ${payload.iat} is not now`);
  assert.equal(typeof payload.jti, 'string');
  assert.ok(payload.jti.length > 0);
  assert.equal(Date.parse(body.expiresAt), payload.exp * 1000, `expiresAt ${body.expiresAt} is not exp`);
  // Another audience, another issuer, a changed payload: all refused.
  await assert.rejects(verify(body.token, { audience: 'https://someone-else.test' }),
    (e) => e.code === 'ERR_JWT_CLAIM_VALIDATION_FAILED' && e.claim === 'aud');
  await assert.rejects(verify(body.token, { issuer: 'https://another-issuer.test' }),
    (e) => e.code === 'ERR_JWT_CLAIM_VALIDATION_FAILED' && e.claim === 'iss');
  const [h, , sig] = body.token.split('.');
  const forged = Buffer.from(JSON.stringify({ ...payload, app: 'app_someoneelse' })).toString('base64url');
  await assert.rejects(verify(`${h}.${forged}.${sig}`), (e) => e.code === 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED');
  return payload;
}

test(`the Sandbox callback API, end to end (${DRIVER} driver)`, { skip: DRIVER !== 'process', timeout: 540000 }, async () => {
  const sbx = await start();
  let bodyFailed = true;
  try {
    // The context's names are the platform's: an App cannot set them.
    for (const name of ['SBX_TOKEN', 'SBX_SESSION_ID', 'SBX_API_URL', 'SBX_CA_FILE']) {
      const r = await req(sbx.gw, 'POST', '/v1/apps', { token: sbx.gw.admin, body: { name: `reserved-${name.toLowerCase().replaceAll('_', '-')}`, env: { [name]: 'mine' } } });
      assert.equal(r.status, 422, `an App with env ${name}: ${r.status} ${r.text}`);
      assert.match(r.headers.get('content-type') || '', /^application\/problem\+json/);
    }

    const { app, key } = await agentApp(sbx, 'cb-main');
    const other = await agentApp(sbx, 'cb-other');
    // keepAliveSeconds 2: the main Session's Sandbox ends soon after each message, so that the
    // test can see what survives it.
    const main = await sbx.session(key, { name: 'main', keepAliveSeconds: 2, metadata: { customer: 'acme', tier: 'gold' } });
    const sibling = await sbx.session(key, { name: 'sibling' });
    const foreign = await sbx.session(other.key, { name: 'foreign' });

    // A first message: the context, and something for the history to list.
    const m0 = await run(sbx, key, main.id, []);
    checkContext(sbx, m0, app, main);
    const sb0 = await sbx.getSandbox(key, m0.sandboxId);
    assert.equal(sb0.sessionId, main.id);
    assert.equal(sb0.appId, app.id);
    const restSession = await sbx.getSession(key, main.id);

    const merged = { customer: 'acme', step: 'patched', nested: { a: 1 } };
    const sibKey = 'cb-sibling-once';
    const m1 = await run(sbx, key, main.id, [
      /* 0 */ GET_SESSION,
      /* 1 */ { method: 'PATCH', path: '/sandbox/v1/session/metadata', json: { tier: null, step: 'patched', nested: { a: 1 } }, contentType: 'application/merge-patch+json' },
      /* 2 */ GET_SESSION,
      /* 3 */ { method: 'GET', path: '/sandbox/v1/session/messages?after=0' },
      /* 4 */ { method: 'GET', path: `/sandbox/v1/session/messages?after=${m0.seq}` },
      /* 5 */ { method: 'POST', path: `/sandbox/v1/sessions/${sibling.id}/messages`, json: { body: { steps: [], from: 'main' } }, headers: { 'Idempotency-Key': sibKey } },
      /* 6 */ { method: 'POST', path: `/sandbox/v1/sessions/${sibling.id}/messages`, json: { body: { steps: [], from: 'main' } }, headers: { 'Idempotency-Key': sibKey } },
      /* 7 */ { method: 'POST', path: `/sandbox/v1/sessions/${foreign.id}/messages`, json: { body: { steps: [] } } },
      /* 8 */ { method: 'POST', path: '/sandbox/v1/identity-token', json: { audience: AUDIENCE } },
      /* 9 */ { ...GET_SESSION, token: null },
      /* 10 */ { ...GET_SESSION, token: 'sbx_not_a_sandbox_token_0123456789abcdef' },
      /* 11 */ { method: 'PATCH', path: '/sandbox/v1/session/metadata', pad: BODY_LIMIT + 4096, contentType: 'application/merge-patch+json' },
      /* 12 */ { method: 'PATCH', path: '/sandbox/v1/session/metadata', raw: '{"not json', contentType: 'application/merge-patch+json' },
      /* 13 */ { method: 'POST', path: `/sandbox/v1/sessions/${sibling.id}/messages`, json: { body: { steps: [], from: 'elsewhere' } }, headers: { 'Idempotency-Key': sibKey } },
      /* 14 */ { method: 'GET', path: '/sandbox/v1/session/messages?after=0&limit=1' },
      /* 15 */ { method: 'GET', path: '/sandbox/v1/nothing-here' },
      /* 16 */ { method: 'DELETE', path: '/sandbox/v1/session' },
    ]);
    checkContext(sbx, m1, app, main);
    const s = m1.reply.steps;

    // GET /sandbox/v1/session: the Session as the REST API shows it.
    const own = expectStatus(s[0], 200, 'GET session');
    for (const f of ['id', 'appId', 'name', 'metadata', 'workspaceId', 'createdAt'])
      assert.deepEqual(own[f], restSession[f], `GET /sandbox/v1/session's ${f}`);
    assert.deepEqual(own.metadata, { customer: 'acme', tier: 'gold' });

    // The merge patch: visible at once, through the callback API and through REST.
    expectStatus(s[1], [200, 204], 'PATCH metadata');
    if (s[1].status === 200 && s[1].body && 'metadata' in s[1].body) assert.deepEqual(s[1].body.metadata, merged, 'PATCH answer');
    assert.deepEqual(expectStatus(s[2], 200, 'GET session after PATCH').metadata, merged);
    assert.deepEqual((await sbx.getSession(key, main.id)).metadata, merged, 'REST GET after the PATCH');

    // The history: earlier messages with their replies, in seq order; after= skips them.
    const hist = expectStatus(s[3], 200, 'history');
    assert.ok(Array.isArray(hist.items), JSON.stringify(hist));
    assert.ok('nextCursor' in hist, 'history has nextCursor');
    assert.equal(hist.items[0].id, m0.id, 'the first message first');
    assert.equal(hist.items[0].state, 'completed');
    assert.deepEqual(hist.items[0].reply, m0.reply, 'the first message\'s reply');
    assert.deepEqual(hist.items[0].body, { steps: [] });
    assert.ok(hist.items.some((i) => i.id === m1.id), 'the message being answered is listed');
    for (let i = 1; i < hist.items.length; i++) assert.ok(hist.items[i].seq > hist.items[i - 1].seq, 'seq order');
    assert.ok(hist.items.every((i) => i.sessionId === main.id));
    const page = expectStatus(s[14], 200, 'history, one at a time');
    assert.deepEqual(page.items.map((i) => i.id), [m0.id]);
    assert.equal(typeof page.nextCursor, 'string', 'a page with more after it has a nextCursor');
    const after = expectStatus(s[4], 200, 'history after the first');
    assert.ok(!after.items.some((i) => i.id === m0.id), `after=${m0.seq} lists message ${m0.seq}`);
    assert.ok(after.items.some((i) => i.id === m1.id));

    // A message to a sibling Session: queued once for both POSTs with the same Idempotency-Key,
    // and answered by the sibling's own Sandbox.
    const queued = expectStatus(s[5], 202, 'POST to the sibling');
    assert.equal(queued.sessionId, sibling.id);
    assert.deepEqual(queued.body, { steps: [], from: 'main' });
    // As on the REST API: the original message, 200.
    const again = expectStatus(s[6], 200, 'the same POST again');
    assert.equal(again.id, queued.id, 'the same Idempotency-Key queued a second message');
    // The same key with another body: a conflict, as on the REST API.
    expectProblem(s[13], 409, 'idempotency-conflict', 'the same Idempotency-Key, another body');
    const sib = await sbx.wait(key, sibling.id, queued.id, REPLY_S);
    assert.equal(sib.state, 'completed', sib.error);
    checkContext(sbx, sib, app, sibling);
    assert.notEqual(sib.sandboxId, m1.sandboxId);
    const sibList = await req(sbx.gw, 'GET', `/v1/sessions/${sibling.id}/messages`, { token: key });
    assert.equal(sibList.status, 200, sibList.text);
    assert.deepEqual(sibList.json.items.map((i) => i.id), [queued.id], 'the sibling\'s messages');

    // Another App's Session does not exist for this Sandbox, and nothing was queued there.
    expectProblem(s[7], 404, 'not-found', 'POST to another App\'s Session');
    const foreignList = await req(sbx.gw, 'GET', `/v1/sessions/${foreign.id}/messages`, { token: other.key });
    assert.deepEqual(foreignList.json.items, [], 'a message reached another App\'s Session');

    // The identity token verifies with the published keys, for its audience only.
    await checkIdentityToken(await verifier(sbx), s[8], m1, app, main);

    // No token, an unknown token: 401 problem+json.
    expectProblem(s[9], 401, 'unauthorized', 'no Authorization');
    expectProblem(s[10], 401, 'unauthorized', 'an unknown token');
    // Over callback_body_limit: 413, and the metadata is as it was.
    expectStatus(s[11], 413, `a ${BODY_LIMIT + 4096}-byte body`);
    if (s[11].body && typeof s[11].body === 'object') expectProblem(s[11], 413, 'body-too-large', 'the 413');
    expectStatus(s[12], [400, 422], 'a PATCH that is not JSON');
    assert.deepEqual((await sbx.getSession(key, main.id)).metadata, merged, 'a refused PATCH changed the metadata');
    expectProblem(s[15], 404, 'not-found', 'an unknown path');
    expectProblem(s[16], 405, 'method-not-allowed', 'DELETE on the Session');

    // A live Sandbox's token used from another Sandbox (the sibling's, from the main Session's):
    // 401, from either address; the owner is alive all along, and the caller's own token works.
    const sibToken = sib.reply.env.SBX_TOKEN;
    assert.notEqual((await sbx.getSandbox(key, sib.sandboxId)).state, 'terminated');
    const m2 = await run(sbx, key, main.id, [
      { ...GET_SESSION, token: sibToken },
      { ...GET_SESSION, token: sibToken, url: sib.reply.env.SBX_API_URL },
      GET_SESSION,
    ]);
    assert.notEqual(m2.sandboxId, sib.sandboxId);
    expectProblem(m2.reply.steps[0], 401, 'unauthorized', 'another Sandbox\'s token');
    expectProblem(m2.reply.steps[1], 401, 'unauthorized', 'another Sandbox\'s token, at its own address');
    expectStatus(m2.reply.steps[2], 200, 'own token');
    assert.notEqual((await sbx.getSandbox(key, sib.sandboxId)).state, 'terminated', 'the sibling\'s Sandbox ended meanwhile');

    // Keep-alive ends the main Session's Sandbox. The next message gets a new Sandbox, with a new
    // token; it reads the patched metadata back, and the old token is refused.
    await sbx.until(async () => (await sbx.getSandbox(key, m2.sandboxId)).state === 'terminated', 60000, 'keep-alive expiry');
    const m3 = await run(sbx, key, main.id, [GET_SESSION, { ...GET_SESSION, token: m2.reply.env.SBX_TOKEN }]);
    checkContext(sbx, m3, app, main);
    assert.notEqual(m3.sandboxId, m2.sandboxId, 'a new Sandbox');
    assert.notEqual(m3.reply.env.SBX_TOKEN, m2.reply.env.SBX_TOKEN, 'a new Sandbox, a new token');
    assert.deepEqual(expectStatus(m3.reply.steps[0], 200, 'GET session in the new Sandbox').metadata, merged);
    expectProblem(m3.reply.steps[1], 401, 'unauthorized', 'the token of an ended Sandbox');

    // An App without egress still reaches its callback API (the host's 443 stays open to it).
    const sealed = await agentApp(sbx, 'cb-sealed', { network: { egress: 'none' } });
    const sealedSession = await sbx.session(sealed.key);
    const ms = await run(sbx, sealed.key, sealedSession.id, [GET_SESSION]);
    checkContext(sbx, ms, sealed.app, sealedSession);
    assert.equal(expectStatus(ms.reply.steps[0], 200, 'GET session with egress: none').id, sealedSession.id);
    bodyFailed = false;
  } finally {
    await stop(sbx, bodyFailed);
  }
});

test(`over callback_rate: 429 problem+json with Retry-After, then served again (${DRIVER} driver)`, { skip: DRIVER !== 'process', timeout: 300000 }, async () => {
  // callback_rate 1: a burst of 2, then one request a second. Twenty requests in a row outrun it
  // however slow the machine, unless each took over a second.
  const sbx = await start({ SBX_CALLBACK_RATE: '1' });
  let bodyFailed = true;
  try {
    const { key } = await agentApp(sbx, 'cb-rate');
    const session = await sbx.session(key);
    const m = await run(sbx, key, session.id, Array(20).fill(GET_SESSION));
    const statuses = m.reply.steps.map((x) => x.status ?? x.error);
    expectStatus(m.reply.steps[0], 200, 'the first request');
    const limited = m.reply.steps.find((x) => x.status === 429);
    assert.ok(limited, `no 429 in ${statuses.join(' ')}`);
    assert.ok(m.reply.steps.every((x) => x.status === 200 || x.status === 429), statuses.join(' '));
    expectProblem(limited, 429, 'too-many-requests', 'over callback_rate');
    assert.match(limited.retryAfter || '', /^[1-9]\d*$/, 'Retry-After');
    // A client that waits as told is served again.
    await sleep(Number(limited.retryAfter) * 1000 + 500);
    const later = await run(sbx, key, session.id, [GET_SESSION]);
    assert.equal(later.sandboxId, m.sandboxId);
    expectStatus(later.reply.steps[0], 200, 'after Retry-After');
    bodyFailed = false;
  } finally {
    await stop(sbx, bodyFailed);
  }
});

test(`the Sandbox callback API, essentials (${DRIVER} driver)`, { skip: DRIVER !== 'qemu', timeout: 540000 }, async () => {
  const sbx = await start();
  let bodyFailed = true;
  try {
    const { app, key } = await agentApp(sbx, 'cb-qemu');
    const session = await sbx.session(key, { metadata: { customer: 'acme' } });
    const m = await run(sbx, key, session.id, [
      GET_SESSION,
      { method: 'PATCH', path: '/sandbox/v1/session/metadata', json: { step: 'patched' }, contentType: 'application/merge-patch+json' },
      { method: 'POST', path: '/sandbox/v1/identity-token', json: { audience: AUDIENCE } },
      { ...GET_SESSION, token: null },
    ]);
    checkContext(sbx, m, app, session);
    assert.equal((await sbx.getSandbox(key, m.sandboxId)).driver, 'qemu');
    const s = m.reply.steps;
    const own = expectStatus(s[0], 200, 'GET session');
    assert.equal(own.id, session.id);
    assert.deepEqual(own.metadata, { customer: 'acme' });
    expectStatus(s[1], [200, 204], 'PATCH metadata');
    assert.deepEqual((await sbx.getSession(key, session.id)).metadata, { customer: 'acme', step: 'patched' });
    await checkIdentityToken(await verifier(sbx), s[2], m, app, session);
    expectProblem(s[3], 401, 'unauthorized', 'no Authorization');
    bodyFailed = false;
  } finally {
    await stop(sbx, bodyFailed);
  }
});
