// session.test.mjs: the whole path an operator takes, on the real gateway, sbx-worker and process
// driver: upload the Debian 12 + python3 test image (tests/images/build-test-images.sh, in
// SBX_TEST_IMAGES), make an App on it with no command, and a Session of that App answers from the
// image's userspace: its Python (not the host's), its /etc/os-release, the image's Env, WorkingDir
// and the App's env; a file written to / is gone in the next Sandbox; the Sandbox records the
// image's digest; and a second App on another image on the same worker gets its own image.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startSbx, req } from '../worker/harness.mjs';
import { importImage } from './upload.mjs';

const IMAGES = process.env.SBX_TEST_IMAGES;
if (!IMAGES) throw new Error('SBX_TEST_IMAGES must name the test images directory');

test('a Session of an App on an uploaded image answers from the image\'s userspace (process driver)', async () => {
  const sbx = await startSbx({ workers: 1, env: { SBX_POOL_SIZE: '1', SBX_MESSAGE_TIMEOUT: '20' } });
  try {
    const img = await importImage(sbx, 'py', join(IMAGES, 'py.docker.tar'));
    assert.equal(img.state, 'ready', JSON.stringify(img.problem));
    const { app, key } = await sbx.app('py-app', { image: 'py', keepAliveSeconds: 1, maxAttempts: 1, env: { GREETING: 'from the App', SBX_TEST_IMAGE: 'overridden' } });
    assert.equal(app.imageDigest, img.digest);
    assert.deepEqual(app.command, []);

    // The pool keeps a warm Sandbox of the image's shape.
    await sbx.until(async () => {
      const p = await req(sbx.gw, 'GET', '/v1/pool', { token: sbx.gw.admin });
      return p.json.shapes.some((s) => s.image === img.digest && s.warm >= 1);
    }, 60000, 'a warm Sandbox of the image');

    const s1 = await sbx.session(key);
    const m1 = await sbx.roundTrip(key, s1.id, { whoami: true, writeFile: { path: '/written-at-root', data: 'scratch' } }, 60);
    assert.equal(m1.state, 'completed', m1.error);
    const imagePython = execFileSync('chroot', [join(sbx.dataDir, 'images/sha256', img.digest.slice(7), 'rootfs'), '/usr/bin/python3', '-c', 'import sys; print(sys.version)'], { encoding: 'utf8' }).trim();
    assert.equal(m1.reply.python, imagePython, 'not the image\'s python');
    const hostPython = execFileSync('python3', ['-c', 'import sys; print(sys.version)'], { encoding: 'utf8' }).trim();
    if (hostPython !== imagePython) assert.notEqual(m1.reply.python, hostPython);
    assert.equal(m1.reply.os_release, readFileSync(join(IMAGES, 'rootfs/etc/os-release'), 'utf8'));
    assert.equal(m1.reply.cwd, '/opt/agent', 'the image\'s WorkingDir');
    assert.equal(m1.reply.env.GREETING, 'from the App');
    assert.equal(m1.reply.env.SBX_TEST_IMAGE, 'overridden', 'the App\'s env replaces the image\'s');
    assert.match(m1.reply.env.PATH, /\/usr\/bin/);
    assert.deepEqual(m1.reply.writeFile, { ok: true }, 'the root is not writable');
    const sb1 = await sbx.getSandbox(key, m1.sandboxId);
    assert.equal(sb1.image, img.digest);
    assert.equal(sb1.imageHash, img.digest);
    // The whiteout of layer 2 holds in the Sandbox too.
    const gone = await sbx.roundTrip(key, s1.id, { readFile: '/etc/issue.net' });
    assert.ok(gone.reply.readFile.error, '/etc/issue.net is in the Sandbox');

    // Keep-alive ends the Sandbox; the next one does not see the file written to /.
    await sbx.until(async () => (await sbx.getSandbox(key, m1.sandboxId)).state === 'terminated', 20000, 'keep-alive expiry');
    const m2 = await sbx.roundTrip(key, s1.id, { readFile: '/written-at-root' }, 60);
    assert.equal(m2.state, 'completed', m2.error);
    assert.notEqual(m2.sandboxId, m1.sandboxId);
    assert.ok(m2.reply.readFile.error, 'a file written to / survived its Sandbox');
    assert.ok(!readFileSync(join(sbx.dataDir, 'images/sha256', img.digest.slice(7), 'rootfs/etc/os-release'), 'utf8').includes('scratch'));

    // Another App on another image (the OCI archive: another digest), on the same worker.
    const other = await importImage(sbx, 'py-oci', join(IMAGES, 'py.oci.tar'));
    assert.equal(other.state, 'ready', JSON.stringify(other.problem));
    assert.notEqual(other.digest, img.digest);
    const b = await sbx.app('oci-app', { image: 'py-oci', keepAliveSeconds: 1, maxAttempts: 1 });
    const sb = await sbx.session(b.key);
    const m3 = await sbx.roundTrip(b.key, sb.id, { whoami: true }, 60);
    assert.equal(m3.state, 'completed', m3.error);
    assert.equal((await sbx.getSandbox(b.key, m3.sandboxId)).imageHash, other.digest);
    assert.equal(m3.reply.env.SBX_TEST_IMAGE, 'py', 'the image\'s own Env');
  } finally {
    const results = await sbx.stop();
    for (const r of results) assert.equal(r.code, 0, 'a worker did not exit cleanly');
    sbx.cleanup();
  }
});
