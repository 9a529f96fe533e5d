// tls.test.mjs: the gateway serving HTTPS (tls_cert_file, tls_key_file) with a throwaway CA made
// by make_test_certs.sh: API calls over TLS, plain HTTP refused on that port, TLS 1.1 refused,
// the pair replaced on SIGHUP (new connections present the new certificate, an open one keeps
// working), a broken or mismatched pair refused on SIGHUP with the old one kept, a pair that
// does not load refused at start; and sbxctl against it with its CA (SBXCTL_BIN, when given).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest, Agent } from 'node:https';
import { connect as tlsConnect } from 'node:tls';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BIN, startGateway, removeDataDir, tempDataDir } from './harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const certDir = mkdtempSync(join(tmpdir(), 'sbx-it-tls-'));
execFileSync(join(here, 'make_test_certs.sh'), [certDir, 'first', 'second', 'stranger']);
// A second CA's certificate: a pair that loads but that this test's clients do not trust.
const otherCa = mkdtempSync(join(tmpdir(), 'sbx-it-tls-other-'));
execFileSync(join(here, 'make_test_certs.sh'), [otherCa, 'other']);

const ca = readFileSync(join(certDir, 'ca.pem'));
const certFile = join(certDir, 'served.pem');
const keyFile = join(certDir, 'served.key');

// The SHA-256 fingerprint as node prints it (AB:CD:...), from the openssl command line tool.
function fingerprint(pem) {
  const out = execFileSync('openssl', ['x509', '-in', pem, '-noout', '-fingerprint', '-sha256'], { encoding: 'utf8' });
  return out.trim().replace(/^.*=/, '').toUpperCase();
}
const firstFp = fingerprint(join(certDir, 'first.pem'));
const secondFp = fingerprint(join(certDir, 'second.pem'));

function serve(name) {
  copyFileSync(join(certDir, `${name}.pem`), certFile);
  copyFileSync(join(certDir, `${name}.key`), keyFile);
}

// One HTTPS request trusting only the test CA; a new connection unless agent is given.
function https(gw, method, path, { token, body, agent = false } = {}) {
  return new Promise((resolve, reject) => {
    const headers = {};
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const r = httpsRequest({ host: '127.0.0.1', port: gw.port, method, path, headers, ca, agent, timeout: 20000 }, (res) => {
      let text = '';
      const socket = res.socket;
      const cert = socket.getPeerCertificate();
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        let json = null;
        try { json = text ? JSON.parse(text) : null; } catch { json = null; }
        resolve({ status: res.statusCode, json, text, fingerprint: cert.fingerprint256, localPort: socket.localPort });
      });
    });
    r.on('timeout', () => r.destroy(new Error('timed out')));
    r.on('error', reject);
    r.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

// Waits until the gateway's stderr holds count matches of re (log lines come as events: no sleep
// decides anything).
async function logged(gw, re, count = 1) {
  const g = new RegExp(re.source, 'g');
  for (let i = 0; i < 800; i++) {
    if ((gw.stderr.match(g) ?? []).length >= count) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail(`the gateway did not log ${re} ${count} time(s):\n${gw.stderr}`);
}

let gw;
before(async () => {
  serve('first');
  gw = await startGateway({ extraArgs: ['--tls-cert-file', certFile, '--tls-key-file', keyFile] });
});
after(async () => {
  const { code } = await gw.stop();
  removeDataDir(gw.dataDir);
  rmSync(certDir, { recursive: true, force: true });
  rmSync(otherCa, { recursive: true, force: true });
  assert.equal(code, 0, `gateway did not stop cleanly:\n${gw.stderr}`);
});

test('the gateway says it listens with https, and its first-start example uses https', async () => {
  assert.match(gw.stderr, /listening on 127\.0\.0\.1:\d+ \(https/);
  assert.match(gw.stderr, /TLS: serving .*valid until/);
  assert.ok(gw.stdout.includes(`https://127.0.0.1:${gw.port}/v1/sessions`), gw.stdout);
});

test('API calls work over HTTPS with the CA, and the certificate is the configured one', async () => {
  const apps = await https(gw, 'GET', '/v1/apps', { token: gw.admin });
  assert.equal(apps.status, 200, apps.text);
  assert.ok(apps.json.items.some((a) => a.name === 'echo'));
  assert.equal(apps.fingerprint, firstFp);
  const s = await https(gw, 'POST', '/v1/sessions', { token: gw.key, body: {} });
  assert.equal(s.status, 201, s.text);
  const got = await https(gw, 'GET', `/v1/sessions/${s.json.id}`, { token: gw.key });
  assert.equal(got.status, 200);
  assert.equal(got.json.id, s.json.id);
});

test('plain HTTP to the HTTPS port gets no HTTP answer', async () => {
  const outcome = await new Promise((resolve) => {
    const r = httpRequest({ host: '127.0.0.1', port: gw.port, path: '/healthz', timeout: 20000 }, (res) => {
      res.resume();
      resolve(`answered ${res.statusCode}`);
    });
    r.on('timeout', () => r.destroy(new Error('timed out')));
    r.on('error', (e) => resolve(`error ${e.code ?? e.message}`));
    r.end();
  });
  assert.match(outcome, /^error /);
  assert.doesNotMatch(outcome, /timed out/);
  // Counted in the log (at most a line every 10 s, not one per client).
  await logged(gw, /a TLS handshake failed .*; \d+ so far/);
});

test('TLS 1.1 is refused, TLS 1.2 is accepted', async () => {
  const tryVersion = (version) => new Promise((resolve) => {
    // SECLEVEL=0: this client would refuse TLS 1.1 itself otherwise; the refusal tested is the
    // gateway's.
    const s = tlsConnect({ host: '127.0.0.1', port: gw.port, ca, minVersion: version, maxVersion: version,
      ciphers: 'DEFAULT@SECLEVEL=0' }, () => {
      const v = s.getProtocol();
      s.end();
      resolve(v);
    });
    s.on('error', (e) => resolve(`error ${e.code ?? e.message}`));
  });
  assert.equal(await tryVersion('TLSv1.2'), 'TLSv1.2');
  // The gateway closes the connection at the client's hello.
  assert.match(await tryVersion('TLSv1.1'), /^error (ECONNRESET|ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION)$/);
});

test('SIGHUP: new connections get the new pair, an open one goes on; broken pairs are refused', async () => {
  // A kept-alive connection made with the first certificate.
  const agent = new Agent({ keepAlive: true, maxSockets: 1, ca });
  const before = await https(gw, 'GET', '/healthz', { agent });
  assert.equal(before.fingerprint, firstFp);

  serve('second');
  gw.proc.kill('SIGHUP');
  await logged(gw, /TLS: new connections get/);
  const fresh = await https(gw, 'GET', '/v1/apps', { token: gw.admin });
  assert.equal(fresh.status, 200);
  assert.equal(fresh.fingerprint, secondFp);
  // The open connection still serves requests, with the certificate it started with.
  const again = await https(gw, 'GET', '/healthz', { agent });
  assert.equal(again.status, 200);
  assert.equal(again.localPort, before.localPort, 'the kept-alive connection was not reused');
  assert.equal(again.fingerprint, firstFp);
  agent.destroy();

  // The same files again: nothing changes.
  gw.proc.kill('SIGHUP');
  await logged(gw, /TLS: .* are unchanged/);

  // A key that is not PEM: refused, named in the log; the second pair stays in use.
  writeFileSync(keyFile, 'not a key\n');
  gw.proc.kill('SIGHUP');
  await logged(gw, /the new certificate is refused.*tls_key_file .*served\.key: not a PEM private key/);
  let after = await https(gw, 'GET', '/v1/apps', { token: gw.admin });
  assert.equal(after.status, 200);
  assert.equal(after.fingerprint, secondFp);

  // A key of another certificate: refused as well.
  copyFileSync(join(certDir, 'stranger.key'), keyFile);
  gw.proc.kill('SIGHUP');
  await logged(gw, /the new certificate is refused.*is not the key of the certificate/);
  after = await https(gw, 'GET', '/healthz');
  assert.equal(after.fingerprint, secondFp);

  // A missing certificate file.
  rmSync(certFile);
  gw.proc.kill('SIGHUP');
  await logged(gw, /the new certificate is refused.*tls_cert_file .*served\.pem: No such file/);
  after = await https(gw, 'GET', '/healthz');
  assert.equal(after.status, 200);
  assert.equal(after.fingerprint, secondFp);
  serve('second');
});

test('a pair that does not load is a start error naming the file', () => {
  const dataDir = tempDataDir();
  try {
    const bad = join(certDir, 'bad.key');
    writeFileSync(bad, 'not a key\n');
    const r = spawnSync(BIN, ['--data-dir', dataDir, '--listen', '127.0.0.1:0', '--tls-cert-file', certFile,
      '--tls-key-file', bad], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /tls_key_file .*bad\.key: not a PEM private key/);
    const r2 = spawnSync(BIN, ['--data-dir', dataDir, '--listen', '127.0.0.1:0', '--tls-cert-file', certFile,
      '--tls-key-file', join(certDir, 'first.key')], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r2.status, 2, r2.stderr);
    assert.match(r2.stderr, /is not the key of the certificate in/);
  } finally {
    removeDataDir(dataDir);
  }
});

const CTL = process.env.SBXCTL_BIN;
test('sbxctl talks HTTPS to the gateway with --ca-file or SBXCTL_CA_FILE, and refuses an unknown CA',
  { skip: !CTL && 'SBXCTL_BIN not given' }, () => {
    const args = ['--data-dir', gw.dataDir, '--listen', `127.0.0.1:${gw.port}`, '--tls-cert-file', certFile,
      '--tls-key-file', keyFile];
    const env = { ...process.env, SBX_ADMIN_TOKEN: gw.admin, SBXCTL_CA_FILE: '' };
    const run = (extra, e = {}) => spawnSync(CTL, [...args, ...extra], { encoding: 'utf8', env: { ...env, ...e }, timeout: 20000 });

    let r = run(['--ca-file', join(certDir, 'ca.pem'), '--json', 'image', 'ls']);
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), []);
    // The libcurl client (sbxctl_images.c): an upload, without waiting for its import.
    const archive = join(certDir, 'not-an-image.tar');
    writeFileSync(archive, 'not a tar archive');
    r = run(['image', 'push', archive, '--name', 'over-tls', '--no-wait'], { SBXCTL_CA_FILE: join(certDir, 'ca.pem') });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /over-tls/);
    // The raw client (sbxctl_http.c): an action the gateway refuses with 404.
    r = run(['sandbox', 'sbx_00000000000000000000', '--terminate'], { SBXCTL_CA_FILE: join(certDir, 'ca.pem') });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /404/);

    r = run(['--ca-file', join(otherCa, 'ca.pem'), 'image', 'ls']);
    assert.equal(r.status, 3);
    assert.match(r.stderr, /not trusted/);
    r = run(['image', 'rm', 'nothing'], { SBXCTL_CA_FILE: join(otherCa, 'ca.pem') });
    assert.equal(r.status, 3);
    assert.match(r.stderr, /not trusted/);
  });
