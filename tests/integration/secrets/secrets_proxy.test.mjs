// secrets_proxy.test.mjs: an App's secret brokered end to end, on the real gateway, sbx-worker and
// process driver, as root in a network and mount namespace of its own. A "world" namespace behind
// the host's uplink holds a TLS model API (tests/integration/network/model_api.py; its certificate
// from a test CA given to sbx as upstream_ca_file) on 11.11.11.1 (api.model.test) and another
// allowed host on 11.11.11.2 (other.test). A Python agent in the Debian 12 + python3 test image
// (secrets_agent.py) sends `x-api-key: $MODEL_KEY` and `Authorization: Bearer $MODEL_KEY`.
// Proves: the API sees the real value; the agent's environment and /proc/self/environ hold only
// the placeholder; an SSE answer arrives chunk by chunk; the same placeholder toward other.test is
// refused (403) with a `sandbox.secret_misuse` event and never reaches it; a placeholder copied
// from one Sandbox does nothing in another; after a PUT of a new value, a new Sandbox sends the new
// one (rotation); a pre-started agent's requests while it initialises, before any Session, are
// brokered too; each brokered request is a `sandbox.secret_request` event (secret, host, method,
// path without query, status, bytes, duration); and neither value is in any log, event, the App as
// the API returns it, the database file or /metrics.
//
// SBX_SECRETS_DRIVER picks the driver: process (default: everything) or qemu (a TCG guest: one
// activation and the essentials: the value on the wire, the stream, the misuse and its event, the
// value nowhere else).
//
// The secret is created as a user does, `PUT /v1/apps/{appId}/secrets/{name}` (putSecret).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { startSbx, req, assertWorkersExited } from '../worker/harness.mjs';
import { importImage } from '../images/upload.mjs';

const IMAGES = process.env.SBX_TEST_IMAGES;
if (!IMAGES) throw new Error('SBX_TEST_IMAGES must name the test images directory');
const MODEL_API = new URL('../network/model_api.py', import.meta.url).pathname;
const AGENT = readFileSync(new URL('./secrets_agent.py', import.meta.url), 'utf8')
  .split('\n').filter((l) => l.trim() !== '' && !l.trim().startsWith('#')).join('\n');
const VALUE = 'sk-model-e2e-Q7vX2mL9pR4tW8zK';
const ROTATED = 'sk-model-rotated-Hc3nT6yB1dF5';
const API = { host: 'api.model.test', addr: '11.11.11.1' };
const OTHER = { host: 'other.test', addr: '11.11.11.2' };
const W = 'sbxsecw';
const DRIVER = process.env.SBX_SECRETS_DRIVER || 'process';
const GUEST_DIR = process.env.SBX_GUEST_DIR || '';
const REPLY_S = DRIVER === 'qemu' ? 240 : 120;
// The model API answers each header value as its SHA-256 (model_api.py).
const sha = (s) => createHash('sha256').update(s).digest('hex');

const sh = (...argv) => execFileSync(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });

// The world: its own namespace behind the host's uplink (a veth), the model API in it.
function worldUp(dir) {
  mkdirSync('/run/netns', { recursive: true });
  // Named namespaces live in /run/netns: a tmpfs of this mount namespace keeps this run's apart.
  sh('mount', '-t', 'tmpfs', '-o', 'mode=0755', 'sbx-secrets-world', '/run/netns');
  sh('ip', 'link', 'set', 'lo', 'up');
  sh('ip', 'netns', 'add', W);
  sh('ip', '-n', W, 'link', 'set', 'lo', 'up');
  sh('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up0w', 'netns', W);
  sh('ip', 'addr', 'add', '11.0.0.1/30', 'dev', 'up0');
  sh('ip', 'link', 'set', 'up0', 'up');
  sh('ip', '-n', W, 'addr', 'add', '11.0.0.2/30', 'dev', 'up0w');
  sh('ip', '-n', W, 'link', 'set', 'up0w', 'up');
  sh('ip', 'route', 'add', 'default', 'via', '11.0.0.2');
  for (const a of [API.addr, OTHER.addr]) sh('ip', '-n', W, 'addr', 'add', `${a}/32`, 'dev', 'lo');
  const ssl = (...args) => sh('openssl', ...args);
  const ca = join(dir, 'ca.pem'), caKey = join(dir, 'ca.key');
  ssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', caKey,
    '-subj', '/CN=test model CA', '-days', '2', '-out', ca);
  const servers = [];
  for (const [name, h] of [['api', API], ['other', OTHER]]) {
    const key = join(dir, `${name}.key`), csr = join(dir, `${name}.csr`), crt = join(dir, `${name}.pem`);
    const ext = join(dir, `${name}.ext`);
    writeFileSync(ext, `subjectAltName=DNS:${h.host}\nextendedKeyUsage=serverAuth\n`);
    ssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-subj',
      `/CN=${h.host}`, '-out', csr);
    ssl('x509', '-req', '-in', csr, '-CA', ca, '-CAkey', caKey, '-CAcreateserial', '-days', '2', '-extfile',
      ext, '-out', crt);
    servers.push(`${name}=${h.addr}:443:${crt}:${key}`);
  }
  const api = spawn('ip', ['netns', 'exec', W, 'python3', MODEL_API, ...servers],
    { stdio: ['pipe', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    api.stdout.once('data', (d) => (String(d).includes('ready') ? resolve({ api, ca }) : reject(new Error(String(d)))));
    api.once('exit', (code) => reject(new Error(`model API exited ${code}`)));
  });
}

// What the model API saw, asked from the host (not through any Sandbox).
async function seen() {
  const out = execFileSync('ip', ['netns', 'exec', W, 'python3', '-c',
    `import json,ssl,urllib.request;c=ssl.create_default_context();c.check_hostname=False;c.verify_mode=ssl.CERT_NONE;print(urllib.request.urlopen("https://${API.addr}/seen",context=c).read().decode())`]);
  return JSON.parse(String(out));
}

// An App secret as a user makes one (admin): 201 when new, 200 when it replaces the value.
async function putSecret(sbx, appId, name, value, hosts) {
  const r = await req(sbx.gw, 'PUT', `/v1/apps/${appId}/secrets/${name}`,
    { token: sbx.gw.admin, body: { value, hosts } });
  assert.ok(r.status === 201 || r.status === 200, r.text);
  assert.ok(!r.text.includes(value), 'the answer holds no value');
}

function fail(m) {
  return `${m.state}: ${m.error || JSON.stringify(m.reply?.agentError)}`;
}

test('secrets: the value on the wire to its host only, streamed, audited, and nowhere else', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-secrets-e2e-'));
  const { api, ca } = await worldUp(dir);
  const env = { SBX_UPSTREAM_CA_FILE: ca, SBX_DNS_RESOLVERS: 'none',
    SBX_MESSAGE_TIMEOUT: String(REPLY_S) };
  if (DRIVER === 'qemu') Object.assign(env, { SBX_QEMU_ACCEL: 'tcg', SBX_GUEST_DIR: GUEST_DIR, SBX_LEASE_MS: '120000' });
  const sbx = await startSbx({ workers: 1, env });
  let bodyFailed = true;
  try {
    const img = await importImage(sbx, 'py', join(IMAGES, 'py.docker.tar'), 180000);
    assert.equal(img.state, 'ready', JSON.stringify(img.problem));
    const a = await sbx.app('secrets-e2e', {
      image: 'py', command: ['/usr/bin/python3', '-c', AGENT], driver: DRIVER, keepAliveSeconds: 120,
      maxAttempts: 1, ...(DRIVER === 'qemu' ? { memSizeMib: 256, vcpuCount: 1 } : {}),
    });
    await putSecret(sbx, a.app.id, 'MODEL_KEY', VALUE, [API.host]);

    const s1 = await sbx.session(a.key);
    const key = { 'x-api-key': '$MODEL_KEY', Authorization: 'Bearer $MODEL_KEY' };
    const m1 = await sbx.roundTrip(a.key, s1.id, { steps: [
      { ...API, method: 'POST', path: '/v1/messages?beta=true', headers: { ...key, 'Content-Type': 'application/json' }, body: '{"model":"m"}' },
      { ...API, method: 'POST', path: '/stream', headers: key, stream: true },
      { ...OTHER, method: 'GET', path: '/collect?k=1', headers: { 'x-api-key': '$MODEL_KEY' } },
    ] }, REPLY_S);
    assert.equal(m1.state, 'completed', fail(m1));
    assert.equal(m1.reply.agentError, undefined, m1.reply.agentError);
    const [echo, stream, misuse] = m1.reply.steps;
    const placeholder = m1.reply.env.MODEL_KEY;
    assert.match(placeholder, /^sbx_ph_[A-Za-z0-9_-]{43}$/, 'the agent holds a placeholder');
    assert.ok(!m1.reply.environ.includes(VALUE) && !JSON.stringify(m1.reply.env).includes(VALUE),
      'the value is not in the agent\'s environment nor /proc/self/environ');
    // An unmodified client trusts the proxy: the agent uses Python's default TLS context.
    assert.equal(m1.reply.env.SSL_CERT_FILE, '/tmp/sbx-ca-bundle.pem');
    assert.equal(m1.reply.env.REQUESTS_CA_BUNDLE, '/tmp/sbx-ca-bundle.pem');
    assert.equal(m1.reply.env.CURL_CA_BUNDLE, '/tmp/sbx-ca-bundle.pem');
    assert.equal(m1.reply.env.NODE_EXTRA_CA_CERTS, '/tmp/sbx-ca.pem');
    const image = m1.reply.bundles['/etc/ssl/certs/ca-certificates.crt'] ?? 0;
    assert.equal(m1.reply.bundles.SSL_CERT_FILE, image + 1, 'the image\'s bundle and the installation CA');
    assert.equal(echo.status, 200, echo.body);
    const heard = JSON.parse(echo.body);
    assert.equal(heard.headers['x-api-key'], sha(VALUE), 'the API sees the value');
    assert.equal(heard.headers.authorization, sha(`Bearer ${VALUE}`));
    assert.equal(heard.body, '{"model":"m"}');
    assert.equal(stream.status, 200);
    assert.deepEqual(stream.chunks, ['data: one\n\n', 'data: two\n\n'],
      'the first event reached the agent before the second was sent');
    assert.equal(misuse.status, 403, misuse.body);
    assert.equal(JSON.parse(misuse.body).code, 'secret-misuse');
    assert.equal((await seen()).other ?? 0, 0, 'other.test never saw the request');

    // Another Sandbox (a second Session): the first one's placeholder is only a string there.
    let m2 = null;
    if (DRIVER === 'process') {
      const s2 = await sbx.session(a.key);
      m2 = await sbx.roundTrip(a.key, s2.id, { steps: [
        { ...API, path: '/copied', headers: { 'x-api-key': placeholder } },
        { ...API, path: '/own', headers: { 'x-api-key': '$MODEL_KEY' } },
        // a burst past the per-Sandbox bound of 10 events per 10 s window
        ...Array.from({ length: 12 }, () => ({ ...API, path: '/burst', headers: { 'x-api-key': '$MODEL_KEY' } })),
      ] }, 120);
      assert.equal(m2.state, 'completed', fail(m2));
      assert.notEqual(m2.sandboxId, m1.sandboxId);
      assert.notEqual(m2.reply.env.MODEL_KEY, placeholder, 'each Sandbox has its own placeholder');
      assert.equal(JSON.parse(m2.reply.steps[0].body).headers['x-api-key'], sha(placeholder),
        'a copied placeholder does nothing');
      assert.equal(JSON.parse(m2.reply.steps[1].body).headers['x-api-key'], sha(VALUE));

      // Rotation: after a PUT of a new value, a new Sandbox sends the new one.
      await putSecret(sbx, a.app.id, 'MODEL_KEY', ROTATED, [API.host]);
      const s3 = await sbx.session(a.key);
      const m3 = await sbx.roundTrip(a.key, s3.id, { steps: [
        { ...API, path: '/rotated', headers: { 'x-api-key': '$MODEL_KEY' } },
      ] }, 120);
      assert.equal(m3.state, 'completed', fail(m3));
      assert.notEqual(m3.sandboxId, m2.sandboxId);
      assert.equal(JSON.parse(m3.reply.steps[0].body).headers['x-api-key'], sha(ROTATED),
        'the API sees the new value');
      assert.ok(!JSON.stringify(m3.reply.env).includes(ROTATED) && !m3.reply.environ.includes(ROTATED));

      // A pre-started agent calls its model API while it initialises, before any Session claims
      // its Sandbox: the proxy already holds that Sandbox's secrets.
      const pre = await sbx.app('secrets-pre', {
        image: 'py', command: ['/usr/bin/python3', '-c', AGENT], driver: DRIVER, keepAliveSeconds: 120,
        maxAttempts: 1, readiness: 'line',
        env: { INIT_STEPS: JSON.stringify([{ ...API, path: '/init', headers: { 'x-api-key': '$MODEL_KEY' } }]) },
      });
      // The secret first, then the pool: no Sandbox of the pool predates the secret.
      await putSecret(sbx, pre.app.id, 'MODEL_KEY', VALUE, [API.host]);
      const on = await req(sbx.gw, 'PATCH', `/v1/apps/${pre.app.id}`,
        { token: sbx.gw.admin, body: { prestart: true, warmPool: 1 } });
      assert.equal(on.status, 200, on.text);
      await sbx.until(async () => {
        const r = await req(sbx.gw, 'GET', '/v1/pool', { token: pre.key });
        return r.json?.apps?.find((x) => x.appId === pre.app.id)?.warm >= 1;
      }, 60000, 'a pre-started Sandbox ready');
      const sp = await sbx.session(pre.key);
      const mp = await sbx.roundTrip(pre.key, sp.id, { steps: [] }, 120);
      assert.equal(mp.state, 'completed', fail(mp));
      assert.equal((await sbx.getSandbox(pre.key, mp.sandboxId)).prestarted, true);
      const [init] = mp.reply.init ?? [];
      assert.equal(init?.status, 200, JSON.stringify(mp.reply.init));
      assert.equal(JSON.parse(init.body).headers['x-api-key'], sha(VALUE),
        'the API saw the value in the pre-started agent\'s request');
    }

    // The audit trail: brokered requests and the misuse, with what they were and no value.
    const allEvents = async () => {
      const list = [];
      let text = '';
      for (let cursor = ''; ;) {
        const page = await req(sbx.gw, 'GET', `/v1/events?limit=200${cursor ? `&cursor=${cursor}` : ''}`, { token: a.key });
        assert.equal(page.status, 200, page.text);
        list.push(...page.json.items);
        text += page.text;
        if (!page.json.nextCursor) return { list, text };
        cursor = page.json.nextCursor;
      }
    };
    const events = await sbx.until(async () => {
      const ev = await allEvents();
      const ok = ev.list.some((e) => e.kind === 'sandbox.secret_misuse') &&
        ev.list.filter((e) => e.kind === 'sandbox.secret_request').length >= (m2 ? 3 : 2);
      return ok ? ev : null;
    }, 20000, 'the proxy\'s events');
    const req1 = events.list.find((e) => e.kind === 'sandbox.secret_request' && e.data.path === '/v1/messages');
    assert.ok(req1, events.text);
    assert.equal(req1.objectId, m1.sandboxId);
    assert.equal(req1.sessionId, s1.id);
    assert.deepEqual(req1.data.secrets, ['MODEL_KEY']);
    assert.equal(req1.data.host, API.host);
    assert.equal(req1.data.method, 'POST');
    assert.equal(req1.data.status, 200);
    assert.ok(req1.data.bytesUp > 0 && req1.data.bytesDown > 0 && req1.data.durationMs >= 0);
    const mis = events.list.find((e) => e.kind === 'sandbox.secret_misuse');
    assert.equal(mis.data.host, OTHER.host);
    assert.equal(mis.data.path, '/collect');
    assert.deepEqual(mis.data.secrets, ['MODEL_KEY']);
    assert.ok(!events.text.includes(VALUE) && !events.text.includes(ROTATED), 'no event holds a value');
    // 13 brokered requests of the second Sandbox: 10 events in the window, the rest counted
    // (into the next event's `suppressed`, or a summary when the window ends).
    if (m2) {
      const second = await sbx.until(async () => {
        const l = (await allEvents()).list.filter((e) => e.kind === 'sandbox.secret_request' &&
          e.objectId === m2.sandboxId && !e.data.summary);
        return l.length >= 10 ? l : null;
      }, 20000, 'the second Sandbox\'s events');
      assert.equal(second.length, 10, 'at most 10 events per Sandbox per window');
    }

    // Nowhere else: the App as the API shows it, /metrics, the database, the logs.
    const appText = (await req(sbx.gw, 'GET', `/v1/apps/${a.app.id}`, { token: sbx.gw.admin })).text;
    const secretsText = (await req(sbx.gw, 'GET', `/v1/apps/${a.app.id}/secrets`, { token: sbx.gw.admin })).text;
    const metrics = (await req(sbx.gw, 'GET', '/metrics', { token: sbx.gw.admin })).text;
    for (const v of [VALUE, ROTATED]) {
      assert.ok(!appText.includes(v), 'not in the App');
      assert.ok(!secretsText.includes(v), 'not in the App\'s secrets');
      assert.ok(!metrics.includes(v), 'not in /metrics');
      for (const f of readdirSync(sbx.dataDir).filter((n) => n.startsWith('sbx.db'))) {
        assert.ok(!readFileSync(join(sbx.dataDir, f)).includes(v), `not in ${f}`);
      }
    }
    bodyFailed = false;
  } finally {
    const results = await sbx.stop();
    const logs = sbx.workers.map((p) => p.log).join('\n') + sbx.gw.stderr + sbx.gw.stdout;
    if (bodyFailed) for (const p of sbx.workers) console.log(`# worker log ends:\n${p.log.slice(-4000)}`);
    assert.ok(!logs.includes(VALUE) && !logs.includes(ROTATED), 'not in any log');
    sbx.cleanup();
    api.stdin.end();
    api.kill();
    try { sh('ip', 'netns', 'del', W); } catch { /* gone with the namespace */ }
    rmSync(dir, { recursive: true, force: true });
    assertWorkersExited(results, bodyFailed);
  }
});
