// fc-standin.js: a test stand-in for a Firecracker VMM, for hosts where no Firecracker can run.
//
// It serves Firecracker's API on the socket named by --api-sock (as Firecracker does) and answers
// every request the way Firecracker's own API description (../shared/firecracker/firecracker.yaml)
// says Firecracker would: unknown paths or methods, bodies with missing required fields, wrong
// types, enum violations or unknown fields get 400 {"fault_message": ...}; accepted configuration
// calls get 204. On top of the spec it enforces what Firecracker itself checks: the id in the path
// matches the body, artefact files exist inside the jail, the tap exists in its network namespace,
// pre-boot-only calls are refused after InstanceStart, InstanceStart needs a boot source. And what
// sbx promises on top (sbxDriveCheck): every drive is read-only (is_read_only: true), and so is its
// file inside the jail (no write bits, and not owned by the VMM's uid, which could chmod it).
//
// Its vsock device emulates Firecracker's host-initiated connections on the configured uds_path:
// "CONNECT <port>\n" is closed while the guest is still booting, and answered "OK <hostport>\n"
// once it runs; the stream then plays the guest's sbx-agent (ready line, started, echo replies).
//
// Environment: FC_STANDIN_ROOT (the jail root that absolute paths are inside, as after the jailer's
// chroot), FC_STANDIN_RECORD (a file that gets one JSON line per request), FC_STANDIN_BOOT_MS
// (how long the "guest" takes to boot, default 300).
'use strict';

const fs = require('fs');
const http = require('http');
const net = require('net');
const path = require('path');
const { loadSpec, checkRequest } = require('./spec-check.js');

const GUEST_KERNEL = '6.1.0-fc-standin';
const AGENT_PORT = 1024;
const PRE_BOOT_ONLY = new Set(['/boot-source', '/drives/{drive_id}', '/machine-config',
  '/network-interfaces/{iface_id}', '/vsock']);

function parseArgs(argv) {
  const args = { apiSock: '/run/firecracker.socket', id: 'anonymous-instance' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--api-sock') args.apiSock = argv[++i];
    else if (a.startsWith('--api-sock=')) args.apiSock = a.slice('--api-sock='.length);
    else if (a.startsWith('--id=')) args.id = a.slice('--id='.length);
    else if (a === '--id') args.id = argv[++i];
  }
  return args;
}

const args = parseArgs(process.argv.slice(2));
const jailRoot = process.env.FC_STANDIN_ROOT || '';
const recordFile = process.env.FC_STANDIN_RECORD || '';
const bootMs = Number(process.env.FC_STANDIN_BOOT_MS || 300);
const inJail = (p) => (jailRoot ? path.join(jailRoot, p) : p);
const loaded = loadSpec();

const vm = { started: false, guestUp: false, bootSource: null, vsockServer: null, nextHostPort: 1 << 30 };

function record(entry) {
  if (recordFile) fs.appendFileSync(recordFile, `${JSON.stringify(entry)}\n`);
}

function log(msg) {
  process.stderr.write(`fc-standin[${args.id}]: ${msg}\n`);
}

// sbx's promise for drives (the guest's root and an App's image): read-only to the guest and to
// the VMM. Not Firecracker's rule: a fault here says sbx broke its own.
function sbxDriveCheck(body) {
  if (body.is_read_only !== true)
    return `sbx: drive ${body.drive_id} is not read-only (is_read_only must be true)`;
  const st = fs.statSync(inJail(body.path_on_host));
  if ((st.mode & 0o222) !== 0 || st.uid === process.getuid())
    return `sbx: ${body.path_on_host} is writable inside the jail (mode ${(st.mode & 0o777).toString(8)}, uid ${st.uid}, VMM uid ${process.getuid()})`;
  return null;
}

// The checks Firecracker makes beyond the schema, for an operation the spec accepted.
function firecrackerChecks(method, template, params, body) {
  if (method === 'PUT' && PRE_BOOT_ONLY.has(template) && vm.started)
    return 'The requested operation is not supported after starting the microVM.';
  if (template === '/drives/{drive_id}' && body.drive_id !== params.drive_id)
    return 'The id from the path does not match the id from the body!';
  if (template === '/network-interfaces/{iface_id}' && body.iface_id !== params.iface_id)
    return 'The id from the path does not match the id from the body!';
  if (template === '/boot-source') {
    for (const key of ['kernel_image_path', 'initrd_path'])
      if (body[key] !== undefined && !fs.existsSync(inJail(body[key])))
        return `Cannot open ${key === 'kernel_image_path' ? 'kernel image' : 'initrd'}: No such file or directory (os error 2): ${body[key]}`;
  }
  if (template === '/drives/{drive_id}' && body.socket === undefined) {
    if (body.path_on_host === undefined) return 'Unable to create the block device: path_on_host is required for virtio-block';
    if (!fs.existsSync(inJail(body.path_on_host)))
      return `Unable to create the block device: No such file or directory (os error 2): ${body.path_on_host}`;
    const sbxFault = sbxDriveCheck(body);
    if (sbxFault) return sbxFault;
  }
  if (template === '/network-interfaces/{iface_id}') {
    // /proc/self/net/dev lists the devices of this process's network namespace (the jailer's --netns).
    const devices = fs.readFileSync('/proc/self/net/dev', 'utf8');
    if (!new RegExp(`^\\s*${body.host_dev_name.replace(/[^A-Za-z0-9_.-]/g, '')}:`, 'm').test(devices))
      return `Could not create the network device: Open tap device failed: ${body.host_dev_name}: No such device`;
  }
  if (template === '/actions') {
    if (body.action_type === 'InstanceStart') {
      if (vm.started) return 'The requested operation is not supported after starting the microVM.';
      if (!vm.bootSource) return 'Cannot start microvm without kernel configuration.';
    }
    if (body.action_type === 'SendCtrlAltDel' && !vm.started)
      return 'The requested operation is not supported before starting the microVM.';
  }
  return null;
}

function applyAccepted(template, body) {
  if (template === '/boot-source') vm.bootSource = body;
  if (template === '/vsock') startVsock(body.uds_path);
  if (template === '/actions' && body.action_type === 'InstanceStart') {
    vm.started = true;
    setTimeout(() => { vm.guestUp = true; }, bootMs);
  }
  if (template === '/actions' && body.action_type === 'SendCtrlAltDel') {
    // The guest reboots (reboot=k) and Firecracker exits.
    setTimeout(() => process.exit(0), 50);
  }
}

function instanceInfo() {
  return { app_name: 'Firecracker', id: args.id, state: vm.started ? 'Running' : 'Not started',
    vmm_version: '1.17.0-dev (sbx test stand-in)' };
}

function handle(req, res, bodyText) {
  const check = checkRequest(loaded, req.method, req.url, bodyText);
  let status;
  let fault = null;
  let answer = null;
  if (!check.ok) {
    status = 400;
    fault = check.fault;
  } else {
    fault = check.body !== undefined || req.method === 'PUT' || req.method === 'PATCH'
      ? firecrackerChecks(req.method, check.template, check.params, check.body || {}) : null;
    if (fault) status = 400;
    else if (req.method === 'GET') {
      status = 200;
      answer = check.template === '/' ? instanceInfo() : {};
    } else status = 204;
  }
  let loggedBody = bodyText;
  try { loggedBody = bodyText ? JSON.parse(bodyText) : null; } catch (_) { /* keep the raw text */ }
  record({ method: req.method, path: req.url, body: loggedBody, status, spec: check.ok ? 'accepted' : 'rejected', fault_message: fault });
  if (status === 204) applyAccepted(check.template, check.body);
  if (fault) {
    log(`${req.method} ${req.url}: 400 ${fault}`);
    answer = { fault_message: fault };
  }
  const payload = answer ? JSON.stringify(answer) : '';
  const headers = payload ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) } : {};
  res.writeHead(status, headers);
  res.end(payload);
}

// ---- the vsock device and the guest agent behind it ----

function agentSession(sock, leftover) {
  const hostname = 'fc-standin';
  sock.write(`${JSON.stringify({ type: 'ready', kernel: GUEST_KERNEL })}\n`);
  let buf = leftover;
  const onLine = (line) => {
    let msg;
    try { msg = JSON.parse(line); } catch (_) { sock.write(`${JSON.stringify({ type: 'error', error: 'bad JSON line' })}\n`); return; }
    if (msg.type === 'start') sock.write(`${JSON.stringify({ type: 'started' })}\n`);
    else if (msg.id !== undefined)
      sock.write(`${JSON.stringify({ id: msg.id, reply: { echo: msg.body, kernel: GUEST_KERNEL, hostname } })}\n`);
  };
  const drain = () => {
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) { onLine(buf.slice(0, nl)); buf = buf.slice(nl + 1); }
  };
  sock.on('data', (d) => { buf += d.toString('utf8'); drain(); });
  drain();
}

function startVsock(udsPath) {
  const hostPath = inJail(udsPath);
  try { fs.unlinkSync(hostPath); } catch (_) { /* none yet */ }
  vm.vsockServer = net.createServer((sock) => {
    let buf = '';
    const onData = (d) => {
      buf += d.toString('utf8');
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      sock.removeListener('data', onData);
      const m = /^CONNECT (\d+)$/.exec(buf.slice(0, nl));
      // Like Firecracker: nothing listens in a guest that has not booted, so the guest resets the
      // connection and Firecracker closes the host side without an answer.
      if (!m || !vm.guestUp || Number(m[1]) !== AGENT_PORT) { sock.destroy(); return; }
      sock.write(`OK ${vm.nextHostPort++}\n`);
      agentSession(sock, buf.slice(nl + 1));
    };
    sock.on('data', onData);
    sock.on('error', () => {});
  });
  vm.vsockServer.listen(hostPath);
}

// ---- the API server ----

const apiPath = inJail(args.apiSock);
try { fs.unlinkSync(apiPath); } catch (_) { /* none yet */ }
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => handle(req, res, Buffer.concat(chunks).toString('utf8')));
});
server.listen(apiPath, () => log(`API on ${apiPath} (spec ${loaded.file})`));
process.on('SIGTERM', () => process.exit(0));
