// boot_e2e.test.mjs: it.images.boot_e2e: issue 14 end to end: the Debian 12 + python3 test image
// (tests/images/build-test-images.sh) uploaded as a docker-archive through the real gateway,
// imported by the real sbx-worker, and an App on it answering a Session's message from the image's
// userspace (its Python's sys.version and /etc/os-release), under the process driver and, when
// the guest image exists, the qemu driver (TCG). The Sandbox records the digest as imageHash.
// And an App that overrides the image's command runs it in the image's layered tree: the file the
// second layer's whiteout deleted is absent, the second layer's files are there.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSbx } from '../worker/harness.mjs';
import { importImage } from './upload.mjs';

const IMAGES = process.env.SBX_TEST_IMAGES;
if (!IMAGES) throw new Error('SBX_TEST_IMAGES must name the test images directory');
const digest = readFileSync(join(IMAGES, 'digest.docker'), 'utf8').trim();
const guestDir = process.env.SBX_GUEST_DIR || '';

test('an App on an uploaded image answers from the image, process and qemu', { timeout: 420000 }, async () => {
  const drivers = ['process'];
  if (guestDir && existsSync(join(guestDir, 'vmlinuz'))) drivers.push('qemu');
  const sbx = await startSbx({
    workers: 1,
    env: { SBX_POOL_SIZE: '1', SBX_MESSAGE_TIMEOUT: '90', SBX_LEASE_MS: '120000', SBX_QEMU_ACCEL: 'tcg',
      ...(guestDir ? { SBX_GUEST_DIR: guestDir } : {}) },
  });
  try {
    const img = await importImage(sbx, 'py', join(IMAGES, 'py.docker.tar'), 180000);
    assert.equal(img.state, 'ready', JSON.stringify(img.problem));
    assert.equal(img.digest, digest);
    for (const driver of drivers) {
      const { key } = await sbx.app(`py-${driver}`, { image: 'py', driver, memSizeMib: 256, vcpuCount: 1,
        keepAliveSeconds: 2, maxAttempts: 1 });
      const session = await sbx.session(key);
      const m = await sbx.roundTrip(key, session.id, { hello: driver }, 240);
      assert.equal(m.state, 'completed', `${driver}: ${m.error}`);
      assert.match(m.reply.python, /^3\.11\./, `${driver}: ${JSON.stringify(m.reply)}`);
      assert.match(m.reply.os_release, /VERSION_ID="12"/);
      assert.deepEqual(m.reply.body, { hello: driver });
      const sb = await sbx.getSandbox(key, m.sandboxId);
      assert.equal(sb.driver, driver);
      assert.equal(sb.imageHash, digest);
    }
  } finally {
    const results = await sbx.stop();
    for (const r of results) assert.equal(r.code, 0, 'the worker did not exit cleanly');
    sbx.cleanup();
  }
});

// The App's own command, in the image: a few lines of Python that need only the interpreter's
// built-in modules (python3-minimal has no json), answering whether files exist.
const probe = [
  'import os, re, sys',
  'for line in sys.stdin:',
  '    m = re.search(r\'"id":\\s*("[^"]*")\', line)',
  '    paths = ["/etc/issue.net", "/etc/os-release", "/opt/agent/py-agent.py", "/opt/agent/agent"]',
  '    found = ",".join(\'"%s":%s\' % (p, "true" if os.path.lexists(p) else "false") for p in paths)',
  '    sys.stdout.write(\'{"id":%s,"reply":{%s}}\\n\' % (m.group(1), found))',
  '    sys.stdout.flush()',
].join('\n');

test('an App\'s own command runs in the layered image: the whiteout applied, layer 2 present', { timeout: 300000 }, async () => {
  const sbx = await startSbx({ workers: 1, env: { SBX_POOL_SIZE: '1', SBX_MESSAGE_TIMEOUT: '60' } });
  try {
    const img = await importImage(sbx, 'py', join(IMAGES, 'py.docker.tar'), 180000);
    assert.equal(img.state, 'ready', JSON.stringify(img.problem));
    const { key } = await sbx.app('probe', { image: 'py', command: ['/usr/bin/python3', '-c', probe],
      keepAliveSeconds: 2, maxAttempts: 1 });
    const session = await sbx.session(key);
    const m = await sbx.roundTrip(key, session.id, { look: true }, 60);
    assert.equal(m.state, 'completed', m.error);
    assert.deepEqual(m.reply, { '/etc/issue.net': false, '/etc/os-release': true,
      '/opt/agent/py-agent.py': true, '/opt/agent/agent': true });
  } finally {
    const results = await sbx.stop();
    for (const r of results) assert.equal(r.code, 0, 'the worker did not exit cleanly');
    sbx.cleanup();
  }
});
