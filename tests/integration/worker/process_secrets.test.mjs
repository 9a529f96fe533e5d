// process_secrets.test.mjs: App secrets inside a Sandbox, on the real gateway + sbx-worker +
// process driver + echo agent (docs/secrets.md): the agent's environment (as a program it runs
// sees it, and /proc/self/environ) holds a placeholder for each secret, never the value; each
// Sandbox gets a placeholder of its own; the CA bundle variables point at a bundle that holds the
// installation CA (NODE_EXTRA_CA_CERTS at the CA alone); a PUT after that (rotation) reaches the
// next Sandbox; no log holds a value.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSbx, req } from './harness.mjs';

const VALUE = 'sk-proc-' + 'Kx9'.repeat(12);
const ROTATED = 'sk-proc-rotated-' + 'Jm2'.repeat(12);

function envOf(output) {
  const env = {};
  for (const line of output.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) env[line.slice(0, i)] = line.slice(i + 1);
  }
  return env;
}

test('the agent holds placeholders, not values; the CA bundle holds the installation CA', async () => {
  const sbx = await startSbx({ workers: 1 });
  let results;
  try {
    const { app, key } = await sbx.app('secrets-proc', { keepAliveSeconds: 1, maxAttempts: 1, env: { PLAIN: 'visible' } });
    const put = await req(sbx.gw, 'PUT', `/v1/apps/${app.id}/secrets/MODEL_KEY`, {
      token: sbx.gw.admin, body: { value: VALUE, hosts: ['api.example.com'] },
    });
    assert.equal(put.status, 201, put.text);

    const s1 = await sbx.session(key);
    const m1 = await sbx.roundTrip(key, s1.id, {
      run: ['/usr/bin/env'], readFile: { path: '/tmp/sbx-ca-bundle.pem' },
    });
    assert.equal(m1.state, 'completed', m1.error);
    const env = envOf(m1.reply.run.output);
    assert.match(env.MODEL_KEY ?? '', /^sbx_ph_[A-Za-z0-9_-]{43}$/, JSON.stringify(m1.reply));
    assert.equal(env.PLAIN, 'visible');
    for (const v of ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE'])
      assert.equal(env[v], '/tmp/sbx-ca-bundle.pem', v);
    // Node.js adds NODE_EXTRA_CA_CERTS to its own roots: the installation CA alone.
    assert.equal(env.NODE_EXTRA_CA_CERTS, '/tmp/sbx-ca.pem');
    assert.ok(!m1.reply.run.output.includes(VALUE));
    const ca = readFileSync(join(sbx.dataDir, 'ca', 'ca.pem'), 'utf8');
    assert.ok(m1.reply.readFile.data?.includes(ca.trim()), JSON.stringify(m1.reply.readFile));

    // The command's own environment, as the kernel keeps it.
    const raw = await sbx.roundTrip(key, s1.id, { run: ['/bin/cat', '/proc/1/environ', '/proc/self/environ'] });
    assert.equal(raw.sandboxId, m1.sandboxId);
    assert.ok(raw.reply.run.output.includes(env.MODEL_KEY));
    assert.ok(!raw.reply.run.output.includes(VALUE));

    // Another Session, another Sandbox: another placeholder for the same secret.
    const s2 = await sbx.session(key);
    const m2 = await sbx.roundTrip(key, s2.id, { run: ['/usr/bin/env'] });
    assert.notEqual(m2.sandboxId, m1.sandboxId);
    const env2 = envOf(m2.reply.run.output);
    assert.match(env2.MODEL_KEY, /^sbx_ph_/);
    assert.notEqual(env2.MODEL_KEY, env.MODEL_KEY);

    // Rotation: the next Sandbox starts with the new value (still a placeholder to the agent).
    const rot = await req(sbx.gw, 'PUT', `/v1/apps/${app.id}/secrets/MODEL_KEY`, {
      token: sbx.gw.admin, body: { value: ROTATED, hosts: ['api.example.com'] },
    });
    assert.equal(rot.status, 200, rot.text);
    const s3 = await sbx.session(key);
    const m3 = await sbx.roundTrip(key, s3.id, { run: ['/usr/bin/env'] });
    assert.equal(m3.state, 'completed', m3.error);
    assert.match(envOf(m3.reply.run.output).MODEL_KEY, /^sbx_ph_/);
    assert.ok(!m3.reply.run.output.includes(ROTATED));

    // An App without secrets gets none of this.
    const plain = await sbx.app('no-secrets', { maxAttempts: 1 });
    const s4 = await sbx.session(plain.key);
    const m4 = await sbx.roundTrip(plain.key, s4.id, { run: ['/usr/bin/env'] });
    const env4 = envOf(m4.reply.run.output);
    assert.equal(env4.MODEL_KEY, undefined);
    assert.equal(env4.SSL_CERT_FILE, undefined);
  } finally {
    results = await sbx.stop();
    const logs = sbx.workers.map((p) => p.log).join('\n') + sbx.gw.stderr + sbx.gw.stdout;
    sbx.cleanup();
    assert.ok(!logs.includes(VALUE) && !logs.includes(ROTATED), 'a secret value is in a log');
  }
  for (const r of results) assert.equal(r.code, 0, JSON.stringify(r));
});
