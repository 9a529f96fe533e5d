// images.test.mjs: Images end to end on the real gateway and sbx-worker: the Debian + python3 test
// image (tests/images/build-test-images.sh, in SBX_TEST_IMAGES) uploaded as a docker-archive and
// as an OCI archive and imported into the worker host's cache (whiteout applied, modes, owners and
// links kept, no device nodes); bad uploads fail with their problem code and touch nothing
// outside the cache; an App on the image records its digest and the pool's shape shows it; the
// Image cannot be deleted while the App names it; and pulls from a docker-registry started here on
// 127.0.0.1 with basic auth: the right credentials, wrong ones, a registry that is down and a
// tampered blob; and through a token front (the Docker registry token flow: a 401 with a Bearer
// challenge, a token from its realm for basic credentials, the token on every request after).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { createServer } from 'node:net';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSbx, req, sleep } from '../worker/harness.mjs';
import { postImage, settledImage } from './upload.mjs';

const IMAGES = process.env.SBX_TEST_IMAGES;
if (!IMAGES) throw new Error('SBX_TEST_IMAGES must name the test images directory');
const dockerDigest = readFileSync(join(IMAGES, 'digest.docker'), 'utf8').trim();
const ociDigest = readFileSync(join(IMAGES, 'digest.oci'), 'utf8').trim();

const SBXCTL = process.env.SBXCTL_BIN;

// Runs sbxctl against this sbx (its gateway and admin token).
function sbxctl(sbx, args, input) {
  const r = spawnSync(SBXCTL, args, {
    env: { ...process.env, SBX_DATA_DIR: sbx.dataDir, SBX_LISTEN: sbx.gw.url.replace('http://', ''), SBX_ADMIN_TOKEN: sbx.gw.admin },
    input, encoding: 'utf8',
  });
  return r;
}

function cacheDir(sbx, digest) {
  return join(sbx.dataDir, 'images', 'sha256', digest.slice('sha256:'.length));
}

// What lies outside the image cache: everything under the data directory but images/, and a
// sentinel file next to it. Compared before and after each bad input.
function snapshotOutside(sbx, sentinel) {
  const entries = readdirSync(sbx.dataDir).filter((n) => n !== 'images' && !n.startsWith('sbx.db'));
  return JSON.stringify({ entries, sentinel: readFileSync(sentinel, 'utf8'), tmp: existsSync('/tmp/sbx-image-escape') });
}

test('upload: docker-archive and OCI archive import into the cache; bad uploads fail cleanly; App, pool, delete', async () => {
  const sbx = await startSbx({ workers: 1, env: { SBX_POOL_SIZE: '0' } });
  const scratch = mkdtempSync(join(tmpdir(), 'sbx-it-images-'));
  try {
    const admin = sbx.gw.admin;
    // docker-archive
    const up = await postImage(sbx, 'py', join(IMAGES, 'py.docker.tar'));
    assert.equal(up.status, 202, up.text);
    assert.equal(up.json.state, 'importing');
    assert.equal(up.json.source, 'upload');
    assert.equal(up.json.uploadBytes, statSync(join(IMAGES, 'py.docker.tar')).size);
    const sha = execFileSync('sha256sum', [join(IMAGES, 'py.docker.tar')], { encoding: 'utf8' }).split(' ')[0];
    assert.equal(up.json.uploadSha256, `sha256:${sha}`);
    assert.equal(up.headers.get('location'), `/v1/images/${up.json.id}`);
    const t0 = performance.now();
    const img = await settledImage(sbx, up.json.id);
    const importMs = performance.now() - t0;
    assert.equal(img.state, 'ready', JSON.stringify(img.problem));
    assert.equal(img.digest, dockerDigest);
    assert.equal(img.layerCount, 2);
    assert.ok(img.unpackedBytes > 50e6, `unpacked ${img.unpackedBytes}`);
    assert.deepEqual(img.config.cmd, ['/usr/bin/python3', '/opt/agent/py-agent.py']);
    assert.equal(img.config.workingDir, '/opt/agent');
    assert.ok(img.config.env.includes('SBX_TEST_IMAGE=py'));
    assert.equal(img.config.entrypoint, null);
    console.log(`docker-archive import: ${importMs} ms`);

    const root = join(cacheDir(sbx, dockerDigest), 'rootfs');
    assert.ok(existsSync(join(cacheDir(sbx, dockerDigest), 'ready')));
    assert.equal(readFileSync(join(cacheDir(sbx, dockerDigest), 'config.json'), 'utf8'), readFileSync(join(IMAGES, 'config.json'), 'utf8'));
    assert.ok(existsSync(join(root, 'etc/issue')));
    assert.ok(!existsSync(join(root, 'etc/issue.net')), 'the whiteout was not applied');
    assert.match(readFileSync(join(root, 'etc/os-release'), 'utf8'), /bookworm/);
    const owned = lstatSync(join(root, 'opt/agent/owned'));
    assert.equal(owned.uid, 1234);
    assert.equal(owned.gid, 1234);
    assert.equal(owned.mode & 0o7777, 0o640);
    assert.equal(lstatSync(join(root, 'opt/agent/py-agent.py')).mode & 0o7777, 0o755);
    assert.equal(lstatSync(join(root, 'opt/agent/py-agent.py')).nlink, 2);
    assert.ok(lstatSync(join(root, 'opt/agent/agent')).isSymbolicLink());
    assert.ok(lstatSync(join(root, 'usr/bin/python3')).isSymbolicLink() || lstatSync(join(root, 'usr/bin/python3')).isFile());
    const devs = readdirSync(join(root, 'dev')).filter((n) => {
      const st = lstatSync(join(root, 'dev', n));
      return st.isCharacterDevice() || st.isBlockDevice();
    });
    assert.deepEqual(devs, [], 'device nodes were kept');
    // The same tree as the builder's expected one, file for file (names, types, modes, owners),
    // but for privilege: files lose their setuid and setgid bits (Debian's su is setuid root).
    const listing = (dir) => execFileSync('sh', ['-c', `cd '${dir}' && find . -path ./dev -prune -o -printf '%p %y %m %U %G\\n' | sort`], { encoding: 'utf8', maxBuffer: 64 << 20 });
    const unprivileged = (text) => text.replace(/^(\S+ f )([0-7]+)/gm, (_, head, mode) => head + (parseInt(mode, 8) & ~0o6000).toString(8));
    assert.equal(lstatSync(join(IMAGES, 'rootfs', 'usr/bin/su')).mode & 0o4000, 0o4000, 'the builder\'s su is not setuid');
    assert.equal(lstatSync(join(root, 'usr/bin/su')).mode & 0o7777, 0o755, 'su kept its setuid bit');
    assert.equal(listing(root), unprivileged(listing(join(IMAGES, 'rootfs'))));
    assert.equal(readdirSync(join(sbx.dataDir, 'images', 'uploads')).length, 0, 'the upload was not removed');

    // OCI archive (gzip layers, skopeo's config: another digest), pushed with sbxctl, which
    // follows the import to its end.
    const pushed = sbxctl(sbx, ['image', 'push', join(IMAGES, 'py.oci.tar'), '--name', 'py-oci']);
    assert.equal(pushed.status, 0, pushed.stderr);
    assert.match(pushed.stdout, /py-oci: ready sha256:[0-9a-f]{64}, 2 layers/);
    const oci = { json: (await req(sbx.gw, 'GET', '/v1/images/py-oci', { token: admin })).json };
    const ociImg = await settledImage(sbx, oci.json.id);
    assert.equal(ociImg.state, 'ready', JSON.stringify(ociImg.problem));
    assert.equal(ociImg.digest, ociDigest);
    assert.ok(!existsSync(join(cacheDir(sbx, ociDigest), 'rootfs/etc/issue.net')));
    assert.equal(lstatSync(join(cacheDir(sbx, ociDigest), 'rootfs/opt/agent/owned')).uid, 1234);

    // Bad uploads: each fails with its code; nothing outside the cache changes.
    const sentinel = join(scratch, 'sentinel');
    writeFileSync(sentinel, 'keep\n');
    const before = snapshotOutside(sbx, sentinel);
    const junk = join(scratch, 'junk.tar');
    writeFileSync(junk, 'not a tar archive, only words\n'.repeat(100));
    const trunc = join(scratch, 'trunc.tar');
    writeFileSync(trunc, readFileSync(join(IMAGES, 'py.docker.tar')).subarray(0, 30 << 20));
    for (const [name, file, code] of [['junk', junk, 'image_not_archive'], ['trunc', trunc, 'image_truncated']]) {
      const r = await postImage(sbx, name, file);
      assert.equal(r.status, 202, r.text);
      const done = await settledImage(sbx, r.json.id);
      assert.equal(done.state, 'failed');
      assert.equal(done.problem.code, code, done.problem.detail);
      assert.equal(done.digest, null);
    }
    assert.equal(snapshotOutside(sbx, sentinel), before);
    assert.deepEqual(readdirSync(join(sbx.dataDir, 'images', 'sha256')).sort(),
      [dockerDigest, ociDigest].map((d) => d.slice(7)).sort(), 'a failed import left a cache directory');
    assert.deepEqual(readdirSync(join(sbx.dataDir, 'images', 'tmp')), []);

    // API errors: a taken name, no name, the wrong media type.
    const dup = await postImage(sbx, 'py', junk);
    assert.equal(dup.status, 409, dup.text);
    assert.equal(dup.json.code, 'conflict');
    const noName = await fetch(`${sbx.gw.url}/v1/images`, { method: 'POST', headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/x-tar' }, body: 'x' });
    assert.equal(noName.status, 400);
    const badType = await req(sbx.gw, 'POST', '/v1/images?name=z', { token: admin, body: 'x', headers: { 'Content-Type': 'text/plain' } });
    assert.equal(badType.status, 415);

    // An App on the image: its digest, the pool's shape; a failed Image cannot be used.
    const a = await req(sbx.gw, 'POST', '/v1/apps', { token: admin, body: { name: 'pyapp', image: 'py' } });
    assert.equal(a.status, 201, a.text);
    assert.equal(a.json.imageDigest, dockerDigest);
    assert.equal(a.json.imageId, img.id);
    assert.deepEqual(a.json.command, []);
    const pool = await req(sbx.gw, 'GET', '/v1/pool', { token: admin });
    assert.ok(pool.json.shapes.some((s) => s.image === dockerDigest), JSON.stringify(pool.json));
    const unknown = await req(sbx.gw, 'POST', '/v1/apps', { token: admin, body: { name: 'x1', image: 'nope' } });
    assert.equal(unknown.status, 422);
    assert.equal(unknown.json.field, 'image');
    const failedImage = await req(sbx.gw, 'POST', '/v1/apps', { token: admin, body: { name: 'x2', image: 'junk' } });
    assert.equal(failedImage.status, 409);
    // A second App on the same digest: no second import.
    const a2 = await req(sbx.gw, 'POST', '/v1/apps', { token: admin, body: { name: 'pyapp2', image: img.id, env: { A: '1' } } });
    assert.equal(a2.status, 201, a2.text);
    assert.deepEqual(a2.json.env, { A: '1' });
    assert.equal(Number(sbx.sql(`SELECT count(*) FROM events WHERE kind = 'image.imported'`)), 2);
    // Update re-resolves.
    const moved = await req(sbx.gw, 'PATCH', `/v1/apps/${a2.json.id}`, { token: admin, body: { image: 'py-oci' } });
    assert.equal(moved.status, 200, moved.text);
    assert.equal(moved.json.imageDigest, ociDigest);

    const refused = await req(sbx.gw, 'DELETE', `/v1/images/${img.id}`, { token: admin });
    assert.equal(refused.status, 409, refused.text);
    assert.equal((await req(sbx.gw, 'DELETE', `/v1/apps/${a.json.id}`, { token: admin })).status, 204);
    const del = await req(sbx.gw, 'DELETE', `/v1/images/${img.id}`, { token: admin });
    assert.equal(del.status, 204, del.text);
    assert.equal((await req(sbx.gw, 'GET', `/v1/images/${img.id}`, { token: admin })).status, 404);
    // No App and no Sandbox uses the digest any more: the worker host removes it from its cache.
    await sbx.until(() => !existsSync(cacheDir(sbx, dockerDigest)), 30000, 'the cache directory to go');
    assert.ok(existsSync(cacheDir(sbx, ociDigest)), 'an Image in use was evicted');
    const list = await req(sbx.gw, 'GET', '/v1/images', { token: admin });
    assert.deepEqual(list.json.items.map((i) => i.name).sort(), ['junk', 'py-oci', 'trunc']);
    assert.ok(!list.text.includes('password'));
    const ls = sbxctl(sbx, ['--json', 'image', 'ls']);
    assert.equal(ls.status, 0, ls.stderr);
    assert.deepEqual(JSON.parse(ls.stdout).map((i) => `${i.name}:${i.state}:${i.problemCode}`).sort(),
      ['junk:failed:image_not_archive', 'py-oci:ready:null', 'trunc:failed:image_truncated']);
    const rmUsed = sbxctl(sbx, ['image', 'rm', 'py-oci']);
    assert.equal(rmUsed.status, 1, 'rm of an Image an App names');
    assert.match(rmUsed.stderr, /409 conflict/);
    const rm = sbxctl(sbx, ['image', 'rm', 'junk']);
    assert.equal(rm.status, 0, rm.stderr);
    const failedPush = sbxctl(sbx, ['image', 'push', junk, '--name', 'junk-again']);
    assert.equal(failedPush.status, 1);
    assert.match(failedPush.stdout, /failed \(image_not_archive: /);
  } finally {
    const results = await sbx.stop();
    for (const r of results) assert.equal(r.code, 0, 'a worker did not exit cleanly');
    sbx.cleanup();
    rmSync(scratch, { recursive: true, force: true });
  }
});

async function freePort() {
  const srv = createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

test('pull from a registry on loopback with basic auth; wrong credentials, registry down, tampered blob', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-it-registry-'));
  const port = await freePort();
  const openPort = await freePort(); // a second registry, without auth, on the same storage
  const frontPort = await freePort(); // a token-auth front to the second registry
  const host = `127.0.0.1:${port}`;
  writeFileSync(join(dir, 'htpasswd'), execFileSync('htpasswd', ['-Bbn', 'puller', 'secret-pw'], { encoding: 'utf8' }));
  writeFileSync(join(dir, 'config.yml'), [
    'version: 0.1',
    'log: {level: warn}',
    'storage:',
    `  filesystem: {rootdirectory: ${join(dir, 'storage')}}`,
    '  delete: {enabled: true}',
    'http:',
    `  addr: ${host}`,
    'auth:',
    '  htpasswd:',
    '    realm: sbx-test',
    `    path: ${join(dir, 'htpasswd')}`,
    '',
  ].join('\n'));
  const registry = spawn('docker-registry', ['serve', join(dir, 'config.yml')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let regLog = '';
  registry.stderr.on('data', (d) => { regLog += d; });
  const sbx = await startSbx({ workers: 1, env: { SBX_POOL_SIZE: '0', SBX_INSECURE_REGISTRIES: `${host},127.0.0.1:1,127.0.0.1:${openPort},127.0.0.1:${frontPort}` } });
  try {
    const admin = sbx.gw.admin;
    for (let i = 0; i < 100; i++) {
      try { await fetch(`http://${host}/v2/`); break; } catch { await sleep(100); }
    }
    execFileSync('skopeo', ['--insecure-policy', 'copy', '--quiet', '--dest-tls-verify=false', '--dest-creds', 'puller:secret-pw',
      `docker-archive:${join(IMAGES, 'py.docker.tar')}`, `docker://${host}/sbx/py:v1`], { stdio: 'inherit' });

    const pulled = await req(sbx.gw, 'POST', '/v1/images', { token: admin, body: { name: 'pulled', reference: `${host}/sbx/py:v1`, username: 'puller', password: 'secret-pw' } });
    assert.equal(pulled.status, 202, pulled.text);
    assert.ok(!pulled.text.includes('secret-pw'), 'the password was returned');
    assert.equal(pulled.json.source, `${host}/sbx/py:v1`);
    const img = await settledImage(sbx, pulled.json.id);
    // sbxctl: the password from stdin; the same digest again (no second unpack).
    const ctlPull = sbxctl(sbx, ['image', 'pull', `${host}/sbx/py:v1`, '--name', 'ctl-pulled', '--username', 'puller', '--password-stdin'], 'secret-pw\n');
    assert.equal(ctlPull.status, 0, ctlPull.stderr);
    assert.match(ctlPull.stdout, new RegExp(`ctl-pulled: ready ${img.digest}`));
    assert.equal(img.state, 'ready', JSON.stringify(img.problem));
    assert.equal(img.layerCount, 2);
    assert.ok(existsSync(join(cacheDir(sbx, img.digest), 'rootfs/opt/agent/py-agent.py')));
    assert.ok(!existsSync(join(cacheDir(sbx, img.digest), 'rootfs/etc/issue.net')));
    assert.equal(sbx.sql(`SELECT count(*) FROM images WHERE credentials IS NOT NULL`), '0', 'credentials kept after the pull');
    assert.ok(!sbx.sql(`SELECT group_concat(coalesce(data, ''), ' ') FROM events`).includes('secret-pw'));

    // By digest: the same image (no second unpack), verified.
    const byDigestRef = `${host}/sbx/py@${execFileSync('skopeo', ['inspect', '--tls-verify=false', '--creds', 'puller:secret-pw', '--format', '{{.Digest}}', `docker://${host}/sbx/py:v1`], { encoding: 'utf8' }).trim()}`;
    const again = await req(sbx.gw, 'POST', '/v1/images', { token: admin, body: { name: 'by-digest', reference: byDigestRef, username: 'puller', password: 'secret-pw' } });
    assert.equal(again.status, 202, again.text);
    const again2 = await settledImage(sbx, again.json.id);
    assert.equal(again2.state, 'ready', JSON.stringify(again2.problem));
    assert.equal(again2.digest, img.digest);

    const cases = [
      ['bad-creds', { reference: `${host}/sbx/py:v1`, username: 'puller', password: 'wrong' }, 'registry_unauthorized'],
      ['no-creds', { reference: `${host}/sbx/py:v1` }, 'registry_unauthorized'],
      ['no-tag', { reference: `${host}/sbx/py:v2`, username: 'puller', password: 'secret-pw' }, 'registry_not_found'],
      ['down', { reference: '127.0.0.1:1/sbx/py:v1' }, 'registry_unreachable'],
      // Not in insecure_registries: https, which this registry does not speak.
      ['not-https', { reference: `localhost:${port}/sbx/py:v1`, username: 'puller', password: 'secret-pw' }, 'registry_unreachable'],
    ];
    for (const [name, body, code] of cases) {
      const r = await req(sbx.gw, 'POST', '/v1/images', { token: admin, body: { name, ...body } });
      assert.equal(r.status, 202, r.text);
      const done = await settledImage(sbx, r.json.id, 60000);
      assert.equal(done.state, 'failed', `${name}: ${JSON.stringify(done)}`);
      assert.equal(done.problem.code, code, `${name}: ${done.problem.detail}`);
    }

    // Another host (a worker with a data directory, hence a cache, of its own, on the same store)
    // fetches a pulled image an App runs by its manifest digest, anonymously: from a second
    // registry without auth on the same storage.
    writeFileSync(join(dir, 'open.yml'), [
      'version: 0.1', 'log: {level: warn}', 'storage:', `  filesystem: {rootdirectory: ${join(dir, 'storage')}}`,
      'http:', `  addr: 127.0.0.1:${openPort}`, ''].join('\n'));
    const openRegistry = spawn('docker-registry', ['serve', join(dir, 'open.yml')], { stdio: 'ignore' });
    const hostB = mkdtempSync(join(tmpdir(), 'sbx-it-host-b-'));
    try {
      for (let i = 0; i < 100; i++) {
        try { await fetch(`http://127.0.0.1:${openPort}/v2/`); break; } catch { await sleep(100); }
      }
      const anon = await req(sbx.gw, 'POST', '/v1/images', { token: admin, body: { name: 'anon', reference: `127.0.0.1:${openPort}/sbx/py:v1` } });
      const anonImg = await settledImage(sbx, anon.json.id);
      assert.equal(anonImg.state, 'ready', JSON.stringify(anonImg.problem));
      assert.match(anonImg.manifestDigest, /^sha256:[0-9a-f]{64}$/);
      assert.equal(anonImg.digest, img.digest);

      // Host A's cache has it; host B starts without it; then an App runs it.
      const w = spawn(process.env.SBX_WORKER_BIN, [], {
        env: { ...sbx.env, SBX_DATA_DIR: hostB, SBX_DB_PATH: join(sbx.dataDir, 'sbx.db'), SBX_HOST_ID: 'host-b', SBX_INSECURE_REGISTRIES: `127.0.0.1:${openPort}` },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let wlog = '';
      w.stderr.on('data', (d) => { wlog += d; });
      const wExited = new Promise((r) => w.on('exit', (code) => r(code)));
      let app;
      try {
        app = await req(sbx.gw, 'POST', '/v1/apps', { token: admin, body: { name: 'on-anon', image: 'anon' } });
        assert.equal(app.status, 201, app.text);
        const readyB = join(hostB, 'images', 'sha256', img.digest.slice(7), 'ready');
        // The log line follows the publication (and its fsync): wait for both.
        const fetched = /fetched sha256:[0-9a-f]{64} into this host's cache from 127\.0\.0\.1:\d+\/sbx\/py@sha256:/;
        await sbx.until(() => existsSync(readyB) && fetched.test(wlog), 60000, `host B to fetch the image\n${wlog}`);
        assert.ok(!existsSync(join(hostB, 'images', 'sha256', img.digest.slice(7), 'rootfs/etc/issue.net')));
      } finally {
        w.kill('SIGTERM'); // also when an assertion failed: a live worker would keep the test running
      }
      assert.equal(await wExited, 0, wlog);
      assert.equal((await req(sbx.gw, 'DELETE', `/v1/apps/${app.json.id}`, { token: admin })).status, 204);

      // The token flow through a front that speaks only Bearer: /v2/ answers 401 with a challenge
      // naming its realm, the realm hands a token for the right basic credentials, and every
      // request after carries that token (checked here, then passed to the open registry).
      const tokens = new Set();
      const tokenAsks = [];
      const front = http.createServer((q, r) => {
        const url = new URL(q.url, `http://127.0.0.1:${frontPort}`);
        if (url.pathname === '/token') {
          tokenAsks.push({ service: url.searchParams.get('service'), scope: url.searchParams.get('scope'), auth: q.headers.authorization || '' });
          if (q.headers.authorization !== `Basic ${Buffer.from('puller:secret-pw').toString('base64')}`) {
            r.writeHead(401, { 'Content-Type': 'application/json' }).end('{"errors":[{"code":"UNAUTHORIZED"}]}');
            return;
          }
          const t = randomBytes(16).toString('hex');
          tokens.add(t);
          r.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ token: t, expires_in: 300 }));
          return;
        }
        const m = /^Bearer (.+)$/.exec(q.headers.authorization || '');
        if (!m || !tokens.has(m[1])) {
          r.writeHead(401, {
            'Content-Type': 'application/json',
            'WWW-Authenticate': `Bearer realm="http://127.0.0.1:${frontPort}/token",service="sbx-front",scope="repository:sbx/py:pull"`,
          }).end('{"errors":[{"code":"UNAUTHORIZED"}]}');
          return;
        }
        const up = http.request({ host: '127.0.0.1', port: openPort, path: q.url, method: q.method, headers: { ...q.headers, host: `127.0.0.1:${openPort}`, authorization: '' } }, (u) => {
          r.writeHead(u.statusCode, u.headers);
          u.pipe(r);
        });
        up.on('error', () => r.destroy());
        q.pipe(up);
      });
      await new Promise((res) => front.listen(frontPort, '127.0.0.1', res));
      try {
        const viaToken = await req(sbx.gw, 'POST', '/v1/images', { token: admin, body: { name: 'via-token', reference: `127.0.0.1:${frontPort}/sbx/py:v1`, username: 'puller', password: 'secret-pw' } });
        assert.equal(viaToken.status, 202, viaToken.text);
        const tokImg = await settledImage(sbx, viaToken.json.id);
        assert.equal(tokImg.state, 'ready', JSON.stringify(tokImg.problem));
        assert.equal(tokImg.digest, img.digest);
        assert.ok(tokens.size >= 1, 'no token was asked for');
        assert.deepEqual({ service: tokenAsks[0].service, scope: tokenAsks[0].scope }, { service: 'sbx-front', scope: 'repository:sbx/py:pull' });
        const asks = tokenAsks.length;
        const refused = await req(sbx.gw, 'POST', '/v1/images', { token: admin, body: { name: 'via-token-bad', reference: `127.0.0.1:${frontPort}/sbx/py:v1`, username: 'puller', password: 'wrong' } });
        const bad = await settledImage(sbx, refused.json.id);
        assert.equal(bad.state, 'failed');
        assert.equal(bad.problem.code, 'registry_unauthorized', bad.problem.detail);
        assert.equal(tokenAsks.length, asks + 1, 'the wrong credentials were not taken to the realm');
        assert.ok(!JSON.stringify(bad).includes('wrong'), 'the password was returned');
      } finally {
        await new Promise((res) => front.close(res));
      }
    } finally {
      openRegistry.kill('SIGTERM');
      await new Promise((r) => openRegistry.on('exit', r));
      rmSync(hostB, { recursive: true, force: true });
    }

    // Tamper with the small layer's blob in the registry's storage: its digest no longer matches.
    const manifest = JSON.parse(execFileSync('skopeo', ['inspect', '--raw', '--tls-verify=false', '--creds', 'puller:secret-pw', `docker://${host}/sbx/py:v1`], { encoding: 'utf8' }));
    const small = manifest.layers.reduce((a, b) => (a.size < b.size ? a : b));
    const hex = small.digest.slice(7);
    const blob = join(dir, 'storage/docker/registry/v2/blobs/sha256', hex.slice(0, 2), hex, 'data');
    const bytes = readFileSync(blob);
    bytes[100] ^= 0xff;
    writeFileSync(blob, bytes);
    // The cached digest would be reused without fetching a layer: drop it first.
    rmSync(cacheDir(sbx, img.digest), { recursive: true, force: true });
    const tampered = await req(sbx.gw, 'POST', '/v1/images', { token: admin, body: { name: 'tampered', reference: `${host}/sbx/py:v1`, username: 'puller', password: 'secret-pw' } });
    const t = await settledImage(sbx, tampered.json.id);
    assert.equal(t.state, 'failed');
    assert.equal(t.problem.code, 'image_digest_mismatch', t.problem.detail);
    assert.ok(!existsSync(cacheDir(sbx, img.digest)));
    assert.deepEqual(readdirSync(join(sbx.dataDir, 'images', 'tmp')), []);
  } finally {
    const results = await sbx.stop();
    for (const r of results) assert.equal(r.code, 0, 'a worker did not exit cleanly');
    sbx.cleanup();
    registry.kill('SIGTERM');
    await new Promise((r) => registry.on('exit', r));
    if (process.env.SBX_TEST_VERBOSE) process.stderr.write(regLog);
    rmSync(dir, { recursive: true, force: true });
  }
});
