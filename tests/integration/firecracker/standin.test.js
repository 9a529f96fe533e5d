// standin.test.js: proves the Firecracker API stand-in checks requests against Firecracker's spec
// (../shared/firecracker/firecracker.yaml) rather than accepting everything, so that the driver
// test's "accepted" means something: spec-invalid requests get Firecracker's 400 fault_message
// shape, valid ones 204, and the vsock device only answers CONNECT once the guest has booted.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { loadSpec, checkRequest, DEFAULT_SPEC } = require('./spec-check.js');

let dir;
let child;
let apiSock;

function request(method, urlPath, body) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body));
    const req = http.request({ socketPath: apiSock, method, path: urlPath,
      headers: payload ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) } : {} },
    (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, body: text ? JSON.parse(text) : null }));
    });
    req.on('error', reject);
    if (payload) req.write(payload);
    req.end();
  });
}

async function waitForSocket(p) {
  for (let i = 0; i < 200; i++) {
    if (fs.existsSync(p)) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`${p} never appeared`);
}

// One vsock attempt: the first line the stand-in answers to CONNECT, or null when it closes.
function vsockConnect(port) {
  return new Promise((resolve) => {
    const sock = net.createConnection(path.join(dir, 'root', 'run', 'v.sock'));
    let buf = '';
    sock.on('connect', () => sock.write(`CONNECT ${port}\n`));
    sock.on('data', (d) => {
      buf += d;
      const lines = buf.split('\n');
      if (lines.length >= 3) { sock.destroy(); resolve(lines.slice(0, 2)); }
    });
    sock.on('close', () => resolve(null));
    sock.on('error', () => resolve(null));
  });
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-fc-standin-'));
  fs.mkdirSync(path.join(dir, 'root', 'run'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'root', 'vmlinux'), 'kernel');
  // A drive file as sbx places one: read-only, owned by someone else than the VMM.
  fs.writeFileSync(path.join(dir, 'root', 'image.erofs'), 'image', { mode: 0o444 });
  fs.chownSync(path.join(dir, 'root', 'image.erofs'), 65534, 65534);
  apiSock = path.join(dir, 'root', 'run', 'api.sock');
  child = spawn(process.execPath, [path.join(__dirname, 'fc-standin.js'), '--api-sock', '/run/api.sock', '--id=t1'], {
    env: { ...process.env, FC_STANDIN_ROOT: path.join(dir, 'root'), FC_STANDIN_RECORD: '', FC_STANDIN_BOOT_MS: '200' },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  await waitForSocket(apiSock);
});

after(() => {
  if (child) child.kill('SIGTERM');
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the spec is read from ../shared, not from a copy inside the project', () => {
  const root = path.resolve(__dirname, '..', '..', '..');
  assert.equal(DEFAULT_SPEC, path.join(root, '..', 'shared', 'firecracker', 'firecracker.yaml'));
  assert.ok(fs.existsSync(DEFAULT_SPEC), `${DEFAULT_SPEC} is missing`);
});

test('every operation the driver uses is in the spec', () => {
  const loaded = loadSpec();
  for (const [route, method] of [['/boot-source', 'put'], ['/drives/{drive_id}', 'put'], ['/machine-config', 'put'],
    ['/network-interfaces/{iface_id}', 'put'], ['/vsock', 'put'], ['/actions', 'put'], ['/', 'get']])
    assert.ok(loaded.spec.paths[route] && loaded.spec.paths[route][method], `${method} ${route}`);
});

const refused = [
  ['unknown path', 'PUT', '/machines', { vcpu_count: 1, mem_size_mib: 128 }, /Invalid request method and\/or path/],
  ['wrong method', 'DELETE', '/machine-config', undefined, /Invalid request method and\/or path/],
  ['missing required field', 'PUT', '/machine-config', { vcpu_count: 1 }, /missing required field "mem_size_mib"/],
  ['wrong type', 'PUT', '/machine-config', { vcpu_count: 1, mem_size_mib: '128' }, /mem_size_mib: expected an integer/],
  ['unknown field', 'PUT', '/boot-source', { kernel_image_path: '/vmlinux', kernel_args: 'x' }, /unknown field "kernel_args"/],
  ['unknown nested field', 'PUT', '/network-interfaces/eth0',
    { iface_id: 'eth0', host_dev_name: 'lo', rx_rate_limiter: { bandwidth: { size: 1, refill_time: 1, burst: 2 } } }, /unknown field "burst"/],
  ['enum violation', 'PUT', '/actions', { action_type: 'Start' }, /"Start" is not one of/],
  ['enum violation in a drive', 'PUT', '/drives/rootfs',
    { drive_id: 'rootfs', is_root_device: true, path_on_host: '/vmlinux', cache_type: 'Fast' }, /cache_type: "Fast" is not one of/],
  ['bound violation', 'PUT', '/vsock', { guest_cid: 1, uds_path: '/run/v.sock' }, /below the minimum 3/],
  ['no body', 'PUT', '/vsock', undefined, /the request has no body/],
  ['malformed JSON', 'PUT', '/vsock', '{"guest_cid": 3,', /deserializing the json body/],
  ['path and body ids differ', 'PUT', '/drives/rootfs', { drive_id: 'data', is_root_device: false, path_on_host: '/vmlinux' }, /does not match the id/],
  ['kernel not in the jail', 'PUT', '/boot-source', { kernel_image_path: '/nope' }, /Cannot open kernel image/],
  ['start before a boot source', 'PUT', '/actions', { action_type: 'InstanceStart' }, /without kernel configuration/],
  ['a writable drive (sbx)', 'PUT', '/drives/image',
    { drive_id: 'image', is_root_device: false, is_read_only: false, path_on_host: '/image.erofs' }, /drive image is not read-only/],
  ['a drive file the VMM may write (sbx)', 'PUT', '/drives/rootfs',
    { drive_id: 'rootfs', is_root_device: true, is_read_only: true, path_on_host: '/vmlinux' }, /is writable inside the jail/],
];

for (const [name, method, urlPath, body, fault] of refused) {
  test(`refuses (400 + fault_message): ${name}`, async () => {
    const res = await request(method, urlPath, body);
    assert.equal(res.status, 400);
    assert.deepEqual(Object.keys(res.body), ['fault_message']);
    assert.match(res.body.fault_message, fault);
  });
}

test('accepts a spec-valid boot and plays the guest agent over vsock', async () => {
  assert.equal((await request('PUT', '/boot-source', { kernel_image_path: '/vmlinux', boot_args: 'console=ttyS0' })).status, 204);
  assert.equal((await request('PUT', '/drives/image',
    { drive_id: 'image', is_root_device: false, is_read_only: true, path_on_host: '/image.erofs' })).status, 204);
  assert.equal((await request('PUT', '/machine-config', { vcpu_count: 2, mem_size_mib: 256, smt: false })).status, 204);
  assert.equal((await request('PUT', '/vsock', { guest_cid: 3, uds_path: '/run/v.sock' })).status, 204);
  assert.equal((await request('PUT', '/actions', { action_type: 'InstanceStart' })).status, 204);
  // Pre-boot-only calls are refused once the VM runs, as Firecracker does.
  assert.equal((await request('PUT', '/machine-config', { vcpu_count: 1, mem_size_mib: 128 })).status, 400);
  // The guest is still booting: Firecracker closes the connection without an answer.
  assert.equal(await vsockConnect(1024), null);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await vsockConnect(5000), null, 'nothing listens on another port');
  const lines = await vsockConnect(1024);
  assert.ok(lines, 'CONNECT 1024 is answered once the guest runs');
  assert.match(lines[0], /^OK \d+$/);
  assert.deepEqual(JSON.parse(lines[1]), { type: 'ready', kernel: '6.1.0-fc-standin' });
  const info = await request('GET', '/');
  assert.equal(info.status, 200);
  assert.equal(info.body.state, 'Running');
});

test('the checker itself: spec rules apply to every definition, not only the ones the driver uses', () => {
  const loaded = loadSpec();
  assert.equal(checkRequest(loaded, 'PUT', '/logger', JSON.stringify({ level: 'Loud' })).ok, false);
  assert.equal(checkRequest(loaded, 'PUT', '/logger', JSON.stringify({ level: 'Info' })).ok, true);
  assert.equal(checkRequest(loaded, 'PATCH', '/vm', JSON.stringify({ state: 'Paused' })).ok, true);
  assert.equal(checkRequest(loaded, 'PATCH', '/vm', JSON.stringify({ state: 'Stopped' })).ok, false);
  assert.equal(checkRequest(loaded, 'PUT', '/mmds', JSON.stringify({ any: { nested: [1, 2] } })).ok, true);
});
