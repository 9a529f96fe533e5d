// harness.mjs: starts the real sbx-gateway (path in SBX_GATEWAY_BIN) on a free loopback port with
// a temporary data directory, reads the admin token and the bootstrap key it prints once, and
// offers small helpers for requests and for poking the database with the sqlite3 CLI (or psql).
//
// On PostgreSQL: under tests/pg-run.sh (SBX_TEST_PG_ADMIN_URL set) every fresh data directory
// gets a fresh database of its own, named in <dataDir>/store-url so that a restart on the same
// data directory finds the same database, and the gateway runs with SBX_STORE set to it.
import { spawn, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, realpathSync, rmdirSync, rmSync, writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const BIN = process.env.SBX_GATEWAY_BIN;
if (!BIN) throw new Error('SBX_GATEWAY_BIN must name the sbx-gateway binary');

export function tempDataDir() {
  return mkdtempSync(join(tmpdir(), 'sbx-it-gateway-'));
}

// Whether the tests run on PostgreSQL (tests/pg-run.sh started a server for them).
export const onPostgres = Boolean(process.env.SBX_TEST_PG_ADMIN_URL);

// The store URL of dataDir if its store exists: on PostgreSQL the database named in its store-url,
// else "sqlite" once sbx.db is there; null before a first start.
function existingStore(dataDir) {
  if (!onPostgres) return existsSync(join(dataDir, 'sbx.db')) ? 'sqlite' : null;
  const file = join(dataDir, 'store-url');
  return existsSync(file) ? readFileSync(file, 'utf8').trim() : null;
}

// The store URL of dataDir: on PostgreSQL a database created for it on first use (reached over the
// fixture's unix socket, which also works from the network namespaces of the worker tests); else
// "sqlite".
export function storeFor(dataDir) {
  if (!onPostgres) return 'sqlite';
  const existing = existingStore(dataDir);
  if (existing) return existing;
  const file = join(dataDir, 'store-url');
  const name = 'sbx_it_' + randomBytes(6).toString('hex');
  // The admin connection goes over the socket too when there is one: the worker tests run in a
  // network namespace of their own, where the fixture's loopback address is not reachable.
  const env = process.env;
  const admin = env.SBX_TEST_PG_SOCKET_DIR
    ? `postgres:///postgres?host=${env.SBX_TEST_PG_SOCKET_DIR}&port=${env.SBX_TEST_PG_PORT}&user=postgres`
    : env.SBX_TEST_PG_ADMIN_URL;
  execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', admin, '-c', `CREATE DATABASE ${name} OWNER sbx`]);
  const base = process.env.SBX_TEST_PG_SOCKET_URL || process.env.SBX_TEST_PG_URL;
  const url = base.replace(/^(postgres(?:ql)?:\/\/[^/]*\/)[^?]*/, `$1${name}`);
  writeFileSync(file, url + '\n');
  return url;
}

// Starts a gateway; resolves once it listens. extraArgs are flags such as ['--body-limit', '2048'].
export async function startGateway({ dataDir, extraArgs = [], env = {} } = {}) {
  // A data directory made here for a gateway that does not come up is removed (launchGateway
  // kills that gateway): the test that called has nothing to stop or remove.
  const own = dataDir === undefined;
  if (own) dataDir = tempDataDir();
  try {
    return await launchGateway(dataDir, extraArgs, env);
  } catch (e) {
    if (own) removeDataDir(dataDir);
    throw e;
  }
}

async function launchGateway(dataDir, extraArgs, env) {
  // A first start prints the bootstrap block on stdout; stdout and stderr are separate pipes, so
  // "listening" on stderr may arrive before it: then wait for the block's last line as well.
  const fresh = existingStore(dataDir) === null;
  const store = storeFor(dataDir);
  const proc = spawn(BIN, ['--data-dir', dataDir, '--listen', '127.0.0.1:0', ...extraArgs], {
    env: { ...process.env, SBX_ADMIN_TOKEN: '', SBX_STORE: store, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => { stdout += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway did not start:\n${stderr}`)), 20000);
    proc.stderr.on('data', (d) => {
      stderr += d;
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(stderr);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    exited.then(({ code }) => { clearTimeout(timer); reject(new Error(`gateway exited ${code}:\n${stderr}`)); });
  }).catch((e) => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    throw e;
  });
  for (let i = 0; fresh && i < 200 && !/\?wait=10/.test(stdout) && proc.exitCode === null; i++)
    await new Promise((r) => setTimeout(r, 25));
  const admin = /sbx_admin_[A-Za-z0-9_-]+/.exec(stdout)?.[0] ?? null;
  const key = /KEY=(sbx_[A-Za-z0-9_-]+)/.exec(stdout)?.[1] ?? null;
  const gw = {
    proc, port, dataDir, store, admin, key, url: `http://127.0.0.1:${port}`,
    get stdout() { return stdout; },
    get stderr() { return stderr; },
    exited,
    // SIGTERM and the exit status: 0 means a clean stop (and, under ASan, no leak).
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return exited;
      proc.kill('SIGTERM');
      return exited;
    },
    async kill9() {
      proc.kill('SIGKILL');
      return exited;
    },
  };
  return gw;
}

// The host state a Sandbox leaves when its worker dies with it live and no successor starts on the
// same store to reap it (the start-up sweep): its cgroups (named <installation id>-<Sandbox id>
// under each hierarchy's sbx/ folder) and its /run/sbx/sandbox-uids entry. Once the store is gone
// nothing would ever reap them, so a deleted data directory takes them along, and each removal is
// reported on stderr (kept in ctest's log): a test that leaves one is a finding, not noise.
const SANDBOX_CGROUP = /^([a-z0-9]+)-sbx_[a-z0-9]+$/;
const UID_DIR = '/run/sbx/sandbox-uids';

function listDir(dir) {
  try { return readdirSync(dir); } catch { return []; }
}

function removeCgroupTree(path) {
  for (const e of listDir(path)) {
    const child = join(path, e);
    if (existsSync(join(child, 'cgroup.procs'))) removeCgroupTree(child);
  }
  for (let i = 0; i < 50; i++) {
    try { rmdirSync(path); return true; } catch (e) {
      if (e.code === 'ENOENT') return true;
      if (e.code !== 'EBUSY') return false;
    }
    // Processes are left in it: kill them (cgroup.procs lists them), then try again.
    let pids = [];
    try { pids = readFileSync(join(path, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean); } catch { /* gone */ }
    for (const pid of pids) {
      try { process.kill(Number(pid), 'SIGKILL'); } catch { /* exited */ }
    }
    execFileSync('sleep', ['0.1']);
  }
  return false;
}

function removeHostLeftovers(dir) {
  const roots = new Set();
  for (const h of listDir('/sys/fs/cgroup')) {
    try { roots.add(realpathSync(join('/sys/fs/cgroup', h, 'sbx'))); } catch { /* no sbx/ there */ }
  }
  const cgroups = [];
  for (const root of roots)
    for (const e of listDir(root)) if (SANDBOX_CGROUP.test(e)) cgroups.push(join(root, e));
  const uids = listDir(UID_DIR);
  if (cgroups.length === 0 && uids.length === 0) return;
  const store = existingStore(dir);
  if (!store) return;
  const db = { dataDir: dir, store };
  const tag = sql(db, "SELECT value FROM settings WHERE key = 'installation_id'");
  const ours = new Set(sql(db, 'SELECT id FROM sandboxes').split('\n').filter(Boolean));
  for (const path of cgroups) {
    const m = SANDBOX_CGROUP.exec(path.slice(path.lastIndexOf('/') + 1));
    if (m[1] !== tag) continue;
    const ok = removeCgroupTree(path);
    process.stderr.write(`harness: ${ok ? 'removed' : 'could not remove'} leftover cgroup ${path}\n`);
  }
  for (const uid of uids) {
    let owner;
    try { owner = readlinkSync(join(UID_DIR, uid)); } catch { continue; }
    if (!ours.has(owner)) continue;
    rmSync(join(UID_DIR, uid), { force: true });
    process.stderr.write(`harness: removed leftover ${UID_DIR}/${uid} of ${owner}\n`);
  }
}

export function removeDataDir(dir) {
  // Best effort: a store that cannot be read (never created, or a test broke it on purpose) has
  // nothing of its own to find.
  try { removeHostLeftovers(dir); } catch (e) {
    process.stderr.write(`harness: leftovers of ${dir} not checked: ${e.message.split('\n')[0]}\n`);
  }
  // Workspaces are filesystems mounted under the data dir (common/workspace_fs.h): unmount them
  // first, deepest first, so that the removal neither fails on a busy mount point nor leaves
  // loop devices bound.
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
    .map((l) => l.split(' ')[4]).filter((m) => m && m.startsWith(dir + '/'))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) {
    try { execFileSync('umount', ['-l', m], { stdio: 'ignore' }); } catch { /* gone already */ }
  }
  rmSync(dir, { recursive: true, force: true });
}

// One HTTP request. body: an object (sent as JSON), a string (sent as is) or undefined.
export async function req(gw, method, path, { token, body, headers = {} } = {}) {
  const h = { ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  let payload;
  if (body !== undefined) {
    payload = typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body);
    if (!('Content-Type' in h)) h['Content-Type'] = 'application/json';
  }
  const res = await fetch(gw.url + path, { method, headers: h, body: payload });
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  return { status: res.status, headers: res.headers, json, text };
}

// Runs SQL against the gateway's database with the sqlite3 CLI (psql on PostgreSQL), as an
// operator or worker would. Rows come back as lines of '|'-separated values with either.
export function sql(gw, statement) {
  if (gw.store && gw.store !== 'sqlite')
    return execFileSync('psql', ['-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', gw.store, '-c', statement],
      { encoding: 'utf8' }).trim();
  return execFileSync('sqlite3', ['-cmd', '.timeout 5000', join(gw.dataDir, 'sbx.db'), statement],
    { encoding: 'utf8' }).trim();
}

// The PostgreSQL engine's writer lock (SQL_PG_WRITE_LOCK_KEY in common/store/sql/sql_pg.h).
const PG_WRITE_LOCK_KEY = '8314339804939700564';

// Holds the store's write lock from another process (as a stuck writer would) until release():
// SQLite's BEGIN IMMEDIATE from the sqlite3 CLI, or on PostgreSQL the writers' advisory lock from
// psql.
export async function holdWriteLock(gw) {
  const pg = gw.store && gw.store !== 'sqlite';
  const p = pg
    ? spawn('psql', ['-X', '-q', '-A', '-t', '-d', gw.store], { stdio: ['pipe', 'pipe', 'inherit'] })
    : spawn('sqlite3', [join(gw.dataDir, 'sbx.db')], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  const locked = new Promise((resolve) => p.stdout.on('data', (d) => {
    out += d;
    if (out.includes('locked')) resolve();
  }));
  p.stdin.write(pg
    ? `BEGIN;\nSELECT pg_advisory_xact_lock(${PG_WRITE_LOCK_KEY});\nSELECT 'locked';\n`
    : ".timeout 5000\nBEGIN IMMEDIATE;\nSELECT 'locked';\n");
  await locked;
  const exited = new Promise((resolve) => p.on('exit', resolve));
  return { release: async () => { p.stdin.end(pg ? 'COMMIT;\n\\q\n' : 'COMMIT;\n.quit\n'); await exited; } };
}

// Creates an App (admin) and a key for it; returns { app, key }.
export async function newApp(gw, name, fields = {}) {
  const a = await req(gw, 'POST', '/v1/apps', { token: gw.admin, body: { name, ...fields } });
  if (a.status !== 201) throw new Error(`app create: ${a.status} ${a.text}`);
  const k = await req(gw, 'POST', `/v1/apps/${a.json.id}/keys`, { token: gw.admin, body: {} });
  if (k.status !== 201) throw new Error(`key create: ${k.status} ${k.text}`);
  return { app: a.json, key: k.json.key, keyId: k.json.id };
}

// Checks an RFC 9457 problem: status, code, type, requestId, and optionally the field.
export function assertProblem(assert, res, status, code, field) {
  assert.equal(res.status, status, `expected ${status} ${code}, got ${res.status} ${res.text}`);
  assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/);
  assert.equal(res.json.code, code);
  assert.equal(res.json.type, `urn:sbx:problem:${code}`);
  assert.equal(res.json.status, status);
  assert.equal(typeof res.json.title, 'string');
  assert.equal(typeof res.json.detail, 'string');
  assert.equal(res.json.requestId, res.headers.get('x-request-id'));
  if (field !== undefined) assert.equal(res.json.field, field);
}
