// evict.test.mjs: image_cache_limit on the real gateway, sbx-worker and process driver. Three
// images: the Debian + python3 test image as a docker-archive (A) and as an OCI archive (B), both
// uploaded, and a small busybox image (C, the built-in rootfs with the echo agent and some
// padding, a docker-archive made here with tar) pulled from a docker-registry on 127.0.0.1. The
// worker's cache is measured as the worker measures it, then the worker restarts with a limit
// that holds A and B but not all three. The test asserts what docs/images.md ("The cache")
// says: the least recently used image that no App names goes first (its directory, not its
// Image record), although an App's image is older still and the cache is over the limit; a
// Session boot makes an image recently used; an evicted pulled image an App names again is
// fetched again from its registry and answers; an evicted uploaded image fails its boots until
// its archive is uploaded again; images Apps name stay while the cache is over the limit; a
// live Sandbox keeps its image until it ends.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSbx, req, sleep } from '../worker/harness.mjs';
import { importImage, settledImage } from './upload.mjs';

const IMAGES = process.env.SBX_TEST_IMAGES;
const ROOTFS = process.env.SBX_DEFAULT_ROOTFS;
if (!IMAGES || !ROOTFS) throw new Error('SBX_TEST_IMAGES and SBX_DEFAULT_ROOTFS must be set');
const SWEEP_MS = 2000; // worker/images/cache_sweep.c's CACHE_SWEEP_MS

async function freePort() {
  const srv = createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

const sha256 = (data) => createHash('sha256').update(data).digest('hex');

// A docker-archive of the built-in rootfs (without sbx-agent, which sbx binds in) plus 16 MiB of
// random bytes (not sparse, so the image's disk size is well above the limit's slack), whose
// command is the echo agent.
function buildTinyArchive(dir) {
  const tree = join(dir, 'tree');
  cpSync(ROOTFS, tree, { recursive: true, verbatimSymlinks: true });
  rmSync(join(tree, 'usr/bin/sbx-agent'), { force: true });
  writeFileSync(join(tree, 'padding'), randomBytes(16 << 20));
  const out = join(dir, 'archive');
  mkdirSync(join(out, 'layer'), { recursive: true });
  execFileSync('tar', ['-C', tree, '--numeric-owner', '--owner=0', '--group=0', '-cf', join(out, 'layer/layer.tar'), '.']);
  const diffId = sha256(readFileSync(join(out, 'layer/layer.tar')));
  const config = JSON.stringify({ architecture: 'amd64', os: 'linux', config: { Cmd: ['/usr/bin/sbx-echo-agent'] }, rootfs: { type: 'layers', diff_ids: [`sha256:${diffId}`] } });
  const configHex = sha256(config);
  writeFileSync(join(out, `${configHex}.json`), config);
  writeFileSync(join(out, 'manifest.json'), JSON.stringify([{ Config: `${configHex}.json`, RepoTags: ['sbx/tiny:v1'], Layers: ['layer/layer.tar'] }]));
  execFileSync('tar', ['-C', out, '-cf', join(dir, 'tiny.docker.tar'), 'manifest.json', `${configHex}.json`, 'layer/layer.tar']);
  return { file: join(dir, 'tiny.docker.tar'), digest: `sha256:${configHex}` };
}

// Disk bytes of a cache directory, counted as cache_sweep.c counts them: the blocks of every
// file that is not a directory or a symlink, a hard-linked file's shared among its links.
function cacheBytes(dir) {
  let total = 0;
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = lstatSync(p, { bigint: true });
    if (st.isDirectory()) total += cacheBytes(p);
    else if (!st.isSymbolicLink()) total += Number((st.blocks * 512n) / (st.nlink > 1n ? st.nlink : 1n));
  }
  return total;
}

test('image_cache_limit evicts the least recently used image no App names and no live Sandbox runs', async () => {
  const scratch = mkdtempSync(join(tmpdir(), 'sbx-it-evict-'));
  const tiny = buildTinyArchive(scratch);
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  writeFileSync(join(scratch, 'registry.yml'), [
    'version: 0.1',
    'log: {level: warn}',
    'storage:',
    `  filesystem: {rootdirectory: ${join(scratch, 'storage')}}`,
    'http:',
    `  addr: ${host}`,
    '',
  ].join('\n'));
  const registry = spawn('docker-registry', ['serve', join(scratch, 'registry.yml')], { stdio: 'ignore' });
  // No warm pool: only Apps and the Sandboxes this test starts keep an image.
  const sbx = await startSbx({ workers: 1, env: { SBX_POOL_SIZE: '0', SBX_MESSAGE_TIMEOUT: '20', SBX_INSECURE_REGISTRIES: host } });
  try {
    const admin = sbx.gw.admin;
    const dirOf = (digest) => join(sbx.dataDir, 'images', 'sha256', digest.slice('sha256:'.length));
    const cached = (img) => existsSync(join(dirOf(img.digest), 'ready'));
    const image = async (name) => (await req(sbx.gw, 'GET', `/v1/images/${name}`, { token: admin })).json;
    const settled = (name) => settledImage(sbx, name, 180000);
    const upload = async (name, file) => {
      const im = await importImage(sbx, name, file, 180000);
      assert.equal(im.state, 'ready', JSON.stringify(im.problem));
      return im;
    };
    const removals = () => [...sbx.workers.at(-1).log.matchAll(/images: removed (sha256:[0-9a-f]{64}) from this host's cache \(([^)]*)\)/g)].map((m) => [m[1], m[2]]);
    const patchApp = async (id, body) => {
      const r = await req(sbx.gw, 'PATCH', `/v1/apps/${id}`, { token: admin, body });
      assert.equal(r.status, 200, r.text);
      return r.json;
    };

    // Import, oldest first: A, B, then C (pulled).
    const a = await upload('py', join(IMAGES, 'py.docker.tar'));
    const b = await upload('py-oci', join(IMAGES, 'py.oci.tar'));
    for (let i = 0; i < 100; i++) {
      try { await fetch(`http://${host}/v2/`); break; } catch { await sleep(100); }
    }
    execFileSync('skopeo', ['--insecure-policy', 'copy', '--quiet', '--dest-tls-verify=false', `docker-archive:${tiny.file}`, `docker://${host}/sbx/tiny:v1`]);
    const pull = await req(sbx.gw, 'POST', '/v1/images', { token: admin, body: { name: 'tiny', reference: `${host}/sbx/tiny:v1` } });
    assert.equal(pull.status, 202, pull.text);
    const c = await settled('tiny');
    assert.equal(c.state, 'ready', JSON.stringify(c.problem));
    assert.equal(c.digest, tiny.digest);
    assert.equal(new Set([a.digest, b.digest, c.digest]).size, 3);

    // Known use: an App names A (the oldest, never booted); a Session boots B, so B's last use
    // is the newest; then B's App moves to the built-in image, so that no App names B or C.
    const appA = await sbx.app('on-a', { image: 'py', maxAttempts: 1 });
    assert.equal(appA.app.imageDigest, a.digest);
    const appB = await sbx.app('on-b', { image: 'py-oci', keepAliveSeconds: 1, maxAttempts: 1 });
    const sB = await sbx.session(appB.key);
    const mB = await sbx.roundTrip(appB.key, sB.id, { whoami: true }, 60);
    assert.equal(mB.state, 'completed', mB.error);
    await sbx.until(async () => (await sbx.getSandbox(appB.key, mB.sandboxId)).state === 'terminated', 30000, 'B\'s Sandbox to end');
    assert.ok((await image('py-oci')).lastUsedAt > c.readyAt, 'the boot on B did not make it the most recently used');
    assert.equal((await patchApp(appB.app.id, { image: 'default', command: ['/usr/bin/sbx-echo-agent'] })).imageDigest, 'default');

    // The limit: A and B fit, the three do not, and evicting C alone makes them fit.
    const size = { a: cacheBytes(dirOf(a.digest)), b: cacheBytes(dirOf(b.digest)), c: cacheBytes(dirOf(c.digest)) };
    assert.ok(size.c > 16 << 20, `C is ${size.c} bytes`);
    const limit = size.a + size.b + Math.floor(size.c / 2);
    console.log(`cache: A ${size.a}, B ${size.b}, C ${size.c} bytes; limit ${limit}`);
    const first = sbx.workers[0];
    first.kill('SIGTERM');
    assert.equal((await first.exited).code, 0, 'the worker did not exit cleanly');
    assert.deepEqual([...first.log.matchAll(/images: removed/g)], [], 'an image was evicted without a limit');
    sbx.env.SBX_IMAGE_CACHE_LIMIT = String(limit);
    sbx.startWorker();

    // C goes: the least recently used image no App names (A is older, but an App names it; B
    // was imported before C, but booted after it). Its Image stays ready.
    await sbx.until(() => removals().length > 0, 20000, 'an eviction');
    await sleep(2 * SWEEP_MS + 500);
    assert.ok(cached(a), 'A was evicted although an App names it');
    assert.ok(cached(b), 'B was evicted although it was used after C');
    assert.ok(!existsSync(dirOf(c.digest)), 'C is still in the cache');
    assert.deepEqual(removals(), [[c.digest, 'image_cache_limit']]);
    const cAfter = await image('tiny');
    assert.equal(cAfter.state, 'ready');
    assert.equal(cAfter.digest, c.digest);

    // An App wants the evicted pulled image: the worker fetches it again from its registry by
    // its manifest digest, and a Session of that App answers from it. Now the three are over
    // the limit again, and B, the only one no App names, goes; A and C stay.
    const appC = await sbx.app('on-c', { image: 'tiny', keepAliveSeconds: 1, maxAttempts: 3 });
    await sbx.until(() => cached(c), 60000, 'C to be fetched again');
    const sC = await sbx.session(appC.key);
    const mC = await sbx.roundTrip(appC.key, sC.id, { hello: 'c' }, 60);
    assert.equal(mC.state, 'completed', mC.error);
    assert.equal((await sbx.getSandbox(appC.key, mC.sandboxId)).imageHash, c.digest);
    await sbx.until(() => !existsSync(dirOf(b.digest)), 20000, 'B to be evicted');
    assert.equal((await image('py-oci')).state, 'ready');
    await sleep(2 * SWEEP_MS + 500);
    assert.ok(cached(a) && cached(c), 'an image an App names was evicted');
    assert.deepEqual(removals(), [[c.digest, 'image_cache_limit'], [b.digest, 'image_cache_limit']]);

    // An App wants the evicted uploaded image: nothing on this host can restore it, so its
    // boots fail, saying why, until the archive is uploaded again (under any name: the same
    // digest, unpacked again).
    const appB2 = await sbx.app('on-b-again', { image: 'py-oci', keepAliveSeconds: 60, maxAttempts: 1 });
    assert.equal(appB2.app.imageDigest, b.digest);
    const sB2 = await sbx.session(appB2.key);
    const failed = await sbx.roundTrip(appB2.key, sB2.id, { whoami: true }, 60);
    assert.equal(failed.state, 'failed');
    assert.match(JSON.stringify(failed.error), /not in this host's image cache/);
    const again = await upload('py-oci-again', join(IMAGES, 'py.oci.tar'));
    assert.equal(again.digest, b.digest);
    assert.ok(cached(b));
    const mB2 = await sbx.roundTrip(appB2.key, sB2.id, { whoami: true }, 60);
    assert.equal(mB2.state, 'completed', mB2.error);

    // A, B and C are over the limit, and Apps name all three: none goes.
    await sleep(2 * SWEEP_MS + 500);
    assert.ok(cached(a) && cached(b) && cached(c), 'an image an App names was evicted');
    assert.equal(removals().length, 2);

    // B's App moves to the built-in image; its live Sandbox (keep-alive 60 s) still runs B, so
    // B stays. Once that Sandbox ends, B goes.
    await patchApp(appB2.app.id, { image: 'default', command: ['/usr/bin/sbx-echo-agent'] });
    await sleep(2 * SWEEP_MS + 500);
    const live = await sbx.getSandbox(appB2.key, mB2.sandboxId);
    assert.notEqual(live.state, 'terminated');
    assert.equal(live.image, b.digest);
    assert.ok(cached(b), 'the image of a live Sandbox was evicted');
    assert.equal(removals().length, 2);
    const del = await req(sbx.gw, 'DELETE', `/v1/sandboxes/${mB2.sandboxId}`, { token: appB2.key });
    assert.ok(del.status === 202 || del.status === 204 || del.status === 200, del.text);
    await sbx.until(() => !existsSync(dirOf(b.digest)), 30000, 'B to be evicted once its Sandbox ended');
    assert.ok(cached(a) && cached(c));
    assert.deepEqual(removals().at(-1), [b.digest, 'image_cache_limit']);
  } finally {
    registry.kill('SIGTERM');
    const results = await sbx.stop();
    for (const r of results) assert.equal(r.code, 0, 'a worker did not exit cleanly');
    sbx.cleanup();
    rmSync(scratch, { recursive: true, force: true });
  }
});
