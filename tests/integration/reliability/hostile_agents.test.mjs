// hostile_agents.test.mjs: App code that attacks its Sandbox, on the real process driver. The
// command is sbx-test-hostile-agent (hostile_agent.c), copied into each hostile Session's
// Workspace. Each attack must be contained (reply bound, message timeout, RLIMIT_NPROC, the
// size-limited /tmp, the jail), reported on the message (state, error) and on the Sandbox
// (terminationReason), while a bystander Session of another App is served all along.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, writeFileSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { startSbx, req, sleep } from '../worker/harness.mjs';

const AGENT = process.env.SBX_HOSTILE_AGENT_BIN;
const EPERM = 1, ENOENT = 2, ESRCH = 3, EAGAIN = 11, ENOSPC = 28, ENOSYS = 38, EPROTONOSUPPORT = 93, EAFNOSUPPORT = 97;
let sbx, hostile, echo, bystander, hostSecret;
// A Sandbox uid of its own: RLIMIT_NPROC counts per uid on the whole host, so the fork storm must
// not use up the default uid 65534 that other suites' Sandboxes on this machine share.
export const SANDBOX_UID = 60000 + (process.pid % 5000);
// Each Sandbox runs as a uid of its own from sandbox_uid_range (the default, 200000-265535);
// SANDBOX_UID is then the owner of Workspace files on disk.
const UID_FIRST = 200000, UID_LAST = 265535;
// The hostile agent's command name as /proc shows it (15 characters at most).
const HOSTILE_COMM = 'sbx-test-hostil';

before(async () => {
  sbx = await startSbx({ workers: 1, env: { SBX_MESSAGE_TIMEOUT: '4', SBX_LOG_LEVEL: 'info',
    SBX_SANDBOX_UID: String(SANDBOX_UID), SBX_SANDBOX_GID: String(SANDBOX_UID) } });
  const ha = await sbx.app('hostile', { keepAliveSeconds: 60, maxAttempts: 1, memSizeMib: 128, vcpuCount: 1,
    command: ['/workspace/sbx-test-hostile-agent'] });
  hostile = { key: ha.key, appId: ha.app.id };
  const ea = await sbx.app('bystander', { keepAliveSeconds: 60 });
  echo = { key: ea.key };
  hostSecret = `/tmp/sbx-host-secret-${process.pid}`;
  writeFileSync(hostSecret, 'host secret\n', { mode: 0o644 });

  // The bystander: another App's Session, asked every 300 ms for the whole test.
  const ses = await sbx.session(echo.key);
  bystander = { served: 0, failed: [], maxMs: 0, stop: false };
  bystander.done = (async () => {
    for (let n = 0; !bystander.stop; n++) {
      const t0 = performance.now();
      try {
        const m = await sbx.roundTrip(echo.key, ses.id, { n }, 60);
        if (m.state === 'completed') bystander.served++;
        else bystander.failed.push(`${m.id}: ${m.error}`);
      } catch (e) {
        bystander.failed.push(String(e));
      }
      bystander.maxMs = Math.max(bystander.maxMs, performance.now() - t0);
      await sleep(300);
    }
  })();
});

after(async () => {
  if (bystander) { bystander.stop = true; await bystander.done; }
  rmSync(hostSecret, { force: true });
  if (!sbx) return;
  const results = await sbx.stop();
  sbx.cleanup();
  // Exit 0 after all that: under ASan this also means no leak was reported.
  assert.deepEqual(results[0], { code: 0, signal: null }, sbx.workers[0].log.slice(-2000));
});

// A Session of the hostile App with its own Workspace holding the hostile agent binary.
async function hostileSession(wsBody = {}) {
  const ws = await req(sbx.gw, 'POST', '/v1/workspaces', { token: hostile.key, body: wsBody });
  assert.equal(ws.status, 201, ws.text);
  const dir = join(sbx.dataDir, 'workspaces', hostile.appId, ws.json.id);
  copyFileSync(AGENT, join(dir, 'sbx-test-hostile-agent'));
  return { ...(await sbx.session(hostile.key, { workspaceId: ws.json.id })), wsDir: dir, ws: ws.json };
}

async function attack(body, timeoutS = 60, s = null) {
  s = s ?? await hostileSession();
  const m = await sbx.roundTrip(hostile.key, s.id, body, timeoutS);
  return { s, m };
}

async function sandboxEnded(id) {
  return sbx.until(async () => {
    const sb = await sbx.getSandbox(hostile.key, id);
    return ['terminated', 'failed'].includes(sb.state) && sb.terminationReason ? sb : null;
  }, 20000, `Sandbox ${id} to end`);
}

// Processes of this test's Sandbox uid on the host (all its Sandboxes share it).
// Processes of the test's Sandbox uid; with name, only those whose command is name (the fork
// storm's children are the hostile agent; warm pool Sandboxes and other Sessions' agents are not).
function sandboxUidProcesses(name) {
  let n = 0;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      if (!new RegExp(`^Uid:\\s+${SANDBOX_UID}\\b`, 'm').test(status)) continue;
      if (name && !new RegExp(`^Name:\\s+${name}$`, 'm').test(status)) continue;
      n++;
    } catch { /* gone */ }
  }
  return n;
}

test('an agent that never answers: message failed by message_timeout, Sandbox ended with the reason', async () => {
  const { m } = await attack({ do: 'hang' });
  assert.equal(m.state, 'failed');
  assert.match(m.error, /message timeout/);
  const sb = await sandboxEnded(m.sandboxId);
  assert.match(sb.terminationReason, /message timeout/);
});

test('a 100 MiB reply line is never delivered: bounded, then timed out and reported', async () => {
  const { m } = await attack({ do: 'huge', mib: 100 });
  assert.equal(m.state, 'failed');
  assert.match(m.error, /message timeout|reply limit|longer than/);
  assert.equal(m.reply ?? null, null);
  const sb = await sandboxEnded(m.sandboxId);
  assert.ok(sb.terminationReason.length > 0);
});

test('a stdout flood (relayed as log lines) neither loses the reply nor stops the worker', async () => {
  const before = sbx.workers[0].log.length;
  const { m } = await attack({ do: 'flood', mib: 4 });
  assert.equal(m.state, 'completed', m.error);
  assert.equal(m.reply.flooded, 4 * 1024 * 1024);
  console.log(`worker log grew by ${sbx.workers[0].log.length - before} bytes for a 4 MiB stdout flood`);
  assert.equal(sbx.workers[0].exitCode, null, 'the worker died');
});

test('a flood of lines with over-long ids stays within the log budget and the reply arrives', async () => {
  const before = sbx.workers[0].log.length;
  const t0 = performance.now();
  const { m } = await attack({ do: 'longids', lines: 3000, idBytes: 8192 });
  assert.equal(m.state, 'completed', m.error);
  assert.equal(m.reply.lines, 3000);
  const grown = sbx.workers[0].log.length - before;
  console.log(`worker log grew by ${grown} bytes for 3000 unexpected lines of 8 KiB ids (${Math.round(performance.now() - t0)} ms)`);
  // 24 MiB of ids: the log takes the 64 KiB budget of the window plus a line per other event.
  assert.ok(grown < 256 * 1024, `the worker logged ${grown} bytes`);
  assert.match(sbx.workers[0].log.slice(before), /unexpected line from the agent \(id i{64}\.\.\. of 8192 bytes\)/);
  assert.equal(sbx.workers[0].exitCode, null, 'the worker died');
});

test('filling /tmp stops at the Sandbox tmpfs size (ENOSPC), not the host disk', async () => {
  const { m } = await attack({ do: 'filltmp' });
  assert.equal(m.state, 'completed', m.error);
  assert.equal(m.reply.errno, ENOSPC);
  assert.ok(m.reply.written <= 64 * 1024 * 1024, `wrote ${m.reply.written} bytes into /tmp (128 MiB shape)`);
});

test('host files, host processes, another Sandbox, mount, ptrace, setuid, chroot: all refused', async () => {
  const other = await hostileSession();
  writeFileSync(join(other.wsDir, 'other-secret'), 'x');
  const { m } = await attack({ do: 'probe', hostFile: hostSecret, otherFile: join(other.wsDir, 'other-secret'),
    hostPid: sbx.gw.proc.pid });
  assert.equal(m.state, 'completed', m.error);
  const r = m.reply;
  assert.equal(r.readHostFile, ENOENT, 'read a host file');
  assert.equal(r.readOtherSandboxFile, ENOENT, "read another Sandbox's Workspace");
  assert.equal(r.killHostPid, ESRCH, 'signalled a host process');
  assert.equal(r.ptraceHostPid, ESRCH, 'ptraced a host process');
  assert.equal(r.seesHostProcess, 0, `sees host process pid ${r.seesHostProcess} in /proc`);
  for (const k of ['readShadow', 'writeSysrq', 'writeHostname', 'mountTmpfs', 'umountWorkspace', 'setuid0',
    'setgid0', 'chroot', 'mknod', 'writeRootfs'])
    assert.notEqual(r[k], 0, `${k} succeeded inside the Sandbox`);
  assert.notEqual(r.uid, 0);
});

test('a fork storm stops at its Sandbox\'s pids limit, other Sessions go on (new Sandboxes too), and all of it goes with the Session', async () => {
  const { s, m } = await attack({ do: 'forks', max: 20000 }, 90);
  assert.equal(m.state, 'completed', m.error);
  assert.ok(m.reply.forked < 20000, `forked ${m.reply.forked} processes: no limit`);
  assert.equal(m.reply.errno, EAGAIN);
  console.log(`fork storm: ${m.reply.forked} children before EAGAIN; uid ${SANDBOX_UID} now has ${sandboxUidProcesses()} processes`);
  // The storm's processes: those in its Sandbox's cgroup (other hostile Sessions' agents, kept
  // warm for their keep-alive, run the same program as the same uid).
  const cgroup = sbx.sql(`SELECT cgroup_path FROM sandboxes WHERE id = '${m.sandboxId}'`);
  const stormPids = readFileSync(`${cgroup}/cgroup.procs`, 'utf8').split('\n').filter(Boolean);
  assert.ok(stormPids.length > 100, `only ${stormPids.length} processes in ${cgroup}`);
  // While the storm's children live, the running bystander Sandbox keeps answering (checked at the
  // end), and a *new* Sandbox of another Session starts: the storm ran into its own pids cgroup
  // (sandbox_pids_max), not into the RLIMIT_NPROC that every Sandbox's uid shares.
  const fresh = await sbx.session(echo.key);
  const fm = await sbx.roundTrip(echo.key, fresh.id, { after: 'forks' }, 60);
  assert.equal(fm.state, 'completed', `a new Sandbox could not start during another Session's fork storm: ${fm.error}`);
  // Deleting the Session ends its Sandbox and every process in it.
  assert.equal((await req(sbx.gw, 'DELETE', `/v1/sessions/${s.id}`, { token: hostile.key })).status, 204);
  const alive = () => stormPids.filter((pid) => {
    try {
      return new RegExp(`^Name:\\s+${HOSTILE_COMM}$`, 'm').test(readFileSync(`/proc/${pid}/status`, 'utf8'));
    } catch { return false; }
  }).length;
  await sbx.until(() => alive() === 0, 30000, 'the fork storm processes to be gone');
});

// The system calls agent/sandbox_filter.c denies (docs/process-driver.md lists why).
const DENIED = ['init_module', 'finit_module', 'delete_module', 'kexec_load', 'kexec_file_load', 'bpf',
  'perf_event_open', 'userfaultfd', 'keyctl', 'add_key', 'request_key', 'mount', 'umount2', 'pivot_root',
  'fsopen', 'fsconfig', 'fsmount', 'fspick', 'move_mount', 'open_tree', 'mount_setattr', 'swapon', 'swapoff',
  'reboot', 'settimeofday', 'clock_settime', 'clock_adjtime', 'acct', 'quotactl', 'open_by_handle_at',
  'io_uring_setup', 'io_uring_enter', 'io_uring_register', 'setns', 'syslog', 'iopl', 'ioperm', 'uselib',
  'unshare(CLONE_NEWUSER)', 'unshare(CLONE_NEWNET)', 'unshare(CLONE_NEWNS)', 'unshare(CLONE_NEWPID)',
  'unshare(CLONE_NEWCGROUP)', 'unshare(CLONE_NEWTIME)', 'clone(CLONE_NEWUSER)', 'clone(CLONE_NEWNET)'];

test('seccomp: Seccomp 2, every denied system call fails with EPERM (clone3 ENOSYS), allowed ones still work', async () => {
  const { m } = await attack({ do: 'syscalls' });
  assert.equal(m.state, 'completed', m.error);
  assert.equal(m.reply.seccomp, '2', 'no seccomp filter on the App');
  for (const name of DENIED)
    assert.equal(m.reply.errno[name], EPERM, `${name}: errno ${m.reply.errno[name]}, not EPERM`);
  // clone3's flags are in memory, out of a filter's reach: ENOSYS makes libc fall back to clone.
  assert.equal(m.reply.errno.clone3, ENOSYS);
  assert.equal(m.reply.errno['unshare(CLONE_FILES)'], 0, 'unshare without a namespace flag was refused');
  assert.equal(m.reply.errno['clone(plain)'], 0, 'a plain clone (fork) was refused');
  // Socket families and IP protocols that would autoload a kernel module are refused.
  for (const name of ['socket(AF_TIPC)', 'socket(AF_RDS)', 'socket(AF_ALG)', 'socket(family 63)'])
    assert.equal(m.reply.errno[name], EAFNOSUPPORT, `${name}: errno ${m.reply.errno[name]}`);
  for (const name of ['socket(AF_INET, SOCK_DCCP)', 'socket(AF_INET6, SCTP)'])
    assert.equal(m.reply.errno[name], EPROTONOSUPPORT, `${name}: errno ${m.reply.errno[name]}`);
  for (const name of ['socket(AF_UNIX)', 'socket(AF_INET)', 'socket(AF_INET6, UDP)', 'socket(AF_NETLINK)'])
    assert.equal(m.reply.errno[name], 0, `${name} was refused: errno ${m.reply.errno[name]}`);
});

test('no nested namespaces: unshare -Ur and unshare -n fail, a plain program still runs', async () => {
  const s = await hostileSession();
  const user = (await attack({ do: 'exec', cmd: 'unshare -Ur id' }, 60, s)).m;
  assert.equal(user.state, 'completed', user.error);
  assert.notEqual(user.reply.status, 0, `unshare -Ur id: ${user.reply.output}`);
  assert.doesNotMatch(user.reply.output, /uid=0/);
  const net = (await attack({ do: 'exec', cmd: 'unshare -n true' }, 60, s)).m;
  assert.notEqual(net.reply.status, 0, `unshare -n true: ${net.reply.output}`);
  const plain = (await attack({ do: 'exec', cmd: 'id -u' }, 60, s)).m;
  assert.equal(plain.reply.status, 0, plain.reply.output);
  const uid = Number(plain.reply.output.trim());
  assert.ok(uid >= UID_FIRST && uid <= UID_LAST, `uid ${uid} is not of sandbox_uid_range`);
});

test('no host terminal: no /dev/tty, the agent leads its own session, no terminal descriptor inside', async () => {
  const { m } = await attack({ do: 'session' });
  assert.equal(m.state, 'completed', m.error);
  const r = m.reply;
  assert.equal(r.devTty, ENOENT, '/dev/tty exists in the Sandbox');
  assert.equal(r.openDevTty, ENOENT);
  assert.equal(r.agentSid, r.agentPid, 'getsid(0) != getpid() for the agent');
  assert.equal(r.sid, r.pid, "the App's command does not lead its own session");
  assert.equal(r.agentTty, 0, 'the agent has a controlling terminal');
  assert.equal(r.tty, 0, 'the App has a controlling terminal');
  assert.equal(r.agentTerminalFds, 0, 'the agent holds a terminal descriptor');
  assert.equal(r.terminalFds, 0, 'the App holds a terminal descriptor');
});

test('memory bound: 2x memSizeMib ends in oom (sandbox-oom), the host and another App go on, the next message gets a fresh Sandbox', async () => {
  const s = await hostileSession();
  const { m } = await attack({ do: 'alloc', mib: 256 }, 60, s);
  assert.equal(m.state, 'failed', `allocated ${m.reply?.allocatedMib} MiB with memSizeMib 128`);
  assert.match(m.error, /^sandbox-oom: /);
  const sb = await sandboxEnded(m.sandboxId);
  assert.equal(sb.terminationReason, 'oom');
  assert.equal((await req(sbx.gw, 'GET', '/healthz')).status, 200);
  const next = (await attack({ do: 'alloc', mib: 32 }, 60, s)).m;
  assert.equal(next.state, 'completed', next.error);
  assert.equal(next.reply.allocatedMib, 32);
  assert.notEqual(next.sandboxId, m.sandboxId, 'the next message reused the OOM-killed Sandbox');
  // The bystander App's Session is checked at the end (served throughout).
});

test('an OOM kill of a child inside the Sandbox is recorded: usage.oomKills and a sandbox.oom_killed event; the agent goes on', async () => {
  const s = await hostileSession();
  const before = (await attack({ do: 'noop' }, 60, s)).m;
  assert.equal(before.state, 'completed', before.error);
  const m = (await attack({ do: 'alloc_child', mib: 256 }, 60, s)).m;
  assert.equal(m.state, 'completed', m.error);
  assert.equal(m.sandboxId, before.sandboxId);
  assert.equal(m.reply.signal, 9, `the child was not killed: ${JSON.stringify(m.reply)}`);
  // The worker reads the Sandbox's OOM count after it has recorded the reply (so as not to
  // delay it): wait for the event it writes then, and read the Sandbox after it.
  const oomEvents = async () => (await req(sbx.gw, 'GET', `/v1/events?sessionId=${s.id}&limit=200`, { token: hostile.key })).json.items
    .filter((e) => e.kind === 'sandbox.oom_killed' && e.objectId === m.sandboxId);
  const oom = await sbx.until(async () => { const e = await oomEvents(); return e.length ? e : null; }, 10000, 'the sandbox.oom_killed event');
  const sb = await sbx.getSandbox(hostile.key, m.sandboxId);
  assert.equal(sb.state, 'running', 'the Sandbox ended with its child');
  assert.ok(sb.usage.oomKills >= 1, `usage ${JSON.stringify(sb.usage)}`);
  assert.equal(oom.length, 1, JSON.stringify(oom));
  assert.equal(oom[0].data.total, sb.usage.oomKills);
  assert.ok(oom[0].data.killed >= 1);
  // The same Sandbox answers again, and nothing new is recorded without a new kill.
  const after = (await attack({ do: 'noop' }, 60, s)).m;
  assert.equal(after.sandboxId, m.sandboxId);
  const again = (await req(sbx.gw, 'GET', `/v1/events?sessionId=${s.id}&limit=200`, { token: hostile.key })).json.items;
  assert.equal(again.filter((e) => e.kind === 'sandbox.oom_killed' && e.objectId === m.sandboxId).length, 1);
});

test('/tmp counts against the memory bound: 64 MiB in /tmp + 80 MiB allocated > 128 MiB is oom, 80 MiB alone is not', async () => {
  const alone = (await attack({ do: 'alloc', mib: 80 })).m;
  assert.equal(alone.state, 'completed', alone.error);
  const s = await hostileSession();
  const fill = (await attack({ do: 'filltmp' }, 60, s)).m;
  assert.equal(fill.state, 'completed', fill.error);
  assert.ok(fill.reply.written >= 60 * 1024 * 1024, `only ${fill.reply.written} bytes in /tmp`);
  const m = (await attack({ do: 'alloc', mib: 80 }, 60, s)).m;
  assert.equal(m.sandboxId, fill.sandboxId);
  assert.equal(m.state, 'failed', 'tmpfs pages are not charged to the Sandbox');
  assert.match(m.error, /^sandbox-oom: /);
});

test('CPU bound: a spinner of 2 processes with vcpuCount 1 gets at most about one CPU (cpu.stat)', async () => {
  const s = await hostileSession();
  const warm = (await attack({ do: 'noop' }, 60, s)).m;
  assert.equal(warm.state, 'completed', warm.error);
  const cgroup = sbx.sql(`SELECT cgroup_path FROM sandboxes WHERE id = '${warm.sandboxId}'`);
  const usage = () => Number(/usage_usec (\d+)/.exec(readFileSync(`${cgroup}/cpu.stat`, 'utf8'))[1]);
  const before = usage();
  const t0 = performance.now();
  const m = (await attack({ do: 'spin', procs: 2, ms: 3000 }, 60, s)).m;
  const wallMs = performance.now() - t0;
  assert.equal(m.state, 'completed', m.error);
  assert.equal(m.sandboxId, warm.sandboxId);
  const cpus = (usage() - before) / 1000 / m.reply.spunMs;
  console.log(`CPU bound: ${(usage() - before) / 1000} ms of CPU in ${m.reply.spunMs} ms (${wallMs} ms round trip): ${cpus.toFixed(2)} CPUs`);
  assert.ok(cpus <= 1.15, `the spinner used ${cpus.toFixed(2)} CPUs with vcpuCount 1`);
  // What the kernel enforces (a loaded host can hide the bound from the measurement above).
  // The v1 twin is named as the v2 cgroup is: "<installation>-<sandboxId>".
  const installation = sbx.sql("SELECT value FROM settings WHERE key = 'installation_id'");
  const v1 = `/sys/fs/cgroup/cpu/sbx/${installation}-${warm.sandboxId}`;
  const quota = existsSync(`${cgroup}/cpu.max`) ? readFileSync(`${cgroup}/cpu.max`, 'utf8').trim()
    : `${readFileSync(`${v1}/cpu.cfs_quota_us`, 'utf8').trim()} ${readFileSync(`${v1}/cpu.cfs_period_us`, 'utf8').trim()}`;
  assert.equal(quota, '100000 100000', 'the Sandbox\'s CPU quota is not one CPU');
  assert.ok(cpus > 0, 'no CPU time measured');
});

// The host uid of a live Sandbox's processes (its agent, pid from the store).
function sandboxProcess(sandboxId) {
  const pid = Number(sbx.sql(`SELECT pid FROM sandboxes WHERE id = '${sandboxId}'`));
  const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
  return { pid, uid };
}

test('a uid per Sandbox: two live Sandboxes differ, cannot signal or ptrace each other, and share their App\'s Workspace files', async () => {
  const ws = await req(sbx.gw, 'POST', '/v1/workspaces', { token: hostile.key, body: {} });
  assert.equal(ws.status, 201, ws.text);
  const dir = join(sbx.dataDir, 'workspaces', hostile.appId, ws.json.id);
  copyFileSync(AGENT, join(dir, 'sbx-test-hostile-agent'));
  const a = await sbx.session(hostile.key, { workspaceId: ws.json.id });
  const b = await sbx.session(hostile.key, { workspaceId: ws.json.id });
  const wa = (await attack({ do: 'append', path: '/workspace/shared.txt', data: 'from-a ' }, 60, a)).m;
  assert.equal(wa.state, 'completed', wa.error);
  assert.equal(wa.reply.errno, 0);
  assert.equal(wa.reply.owner, wa.reply.uid, 'the writer does not own what it wrote');
  const wb = (await attack({ do: 'append', path: '/workspace/shared.txt', data: 'from-b' }, 60, b)).m;
  assert.equal(wb.state, 'completed', wb.error);
  assert.equal(wb.reply.errno, 0, "Sandbox B cannot write Sandbox A's Workspace file");
  assert.equal(wb.reply.owner, wb.reply.uid, "B does not see the App's file as its own");
  const ra = (await attack({ do: 'read', path: '/workspace/shared.txt' }, 60, a)).m;
  assert.equal(ra.reply.data, 'from-a from-b');
  // On disk the file belongs to sandbox_uid whichever Sandbox wrote it (idmapped mounts).
  const st = statSync(join(dir, 'shared.txt'));
  assert.equal(st.uid, SANDBOX_UID);
  assert.equal(st.gid, SANDBOX_UID);

  const pa = sandboxProcess(wa.sandboxId), pb = sandboxProcess(wb.sandboxId);
  assert.notEqual(wa.sandboxId, wb.sandboxId);
  assert.notEqual(pa.uid, pb.uid, 'two live Sandboxes share a host uid');
  for (const u of [pa.uid, pb.uid]) assert.ok(u >= UID_FIRST && u <= UID_LAST, `uid ${u}`);
  // Even without the pid namespaces: A's uid may neither signal nor ptrace B's processes.
  const out = execFileSync('setpriv', [`--reuid=${pa.uid}`, `--regid=${pa.uid}`, '--clear-groups',
    AGENT, '--signal-ptrace', String(pb.pid)], { encoding: 'utf8' });
  assert.deepEqual(JSON.parse(out), { kill: EPERM, ptrace: EPERM });
  // Each holds its uid in the host-wide allocation directory, released when the Sandbox ends.
  assert.equal(readlinkSync(`/run/sbx/sandbox-uids/${pa.uid}`), wa.sandboxId);
  assert.equal((await req(sbx.gw, 'DELETE', `/v1/sessions/${a.id}`, { token: hostile.key })).status, 204);
  await sandboxEnded(wa.sandboxId);
  await sbx.until(() => !existsSync(`/run/sbx/sandbox-uids/${pa.uid}`) ||
    readlinkSync(`/run/sbx/sandbox-uids/${pa.uid}`) !== wa.sandboxId, 10000, 'the uid to be released');
});

test('sandbox_uid_range exhausted: a clear boot error, nothing leaks; a crashed worker\'s uid is reconciled', async () => {
  // One uid (unused by other suites: below the default range), no warm pool.
  const only = 190000 + (process.pid % 9000);
  const small = await startSbx({ workers: 1, env: { SBX_SANDBOX_UID_RANGE: `${only}-${only}`,
    SBX_POOL_SIZE: '0', SBX_MESSAGE_TIMEOUT: '10' } });
  try {
    const app = await small.app('tiny', { keepAliveSeconds: 60, maxAttempts: 1 });
    const entry = `/run/sbx/sandbox-uids/${only}`;
    const s1 = await small.session(app.key);
    const m1 = await small.roundTrip(app.key, s1.id, { n: 1 }, 30);
    assert.equal(m1.state, 'completed', m1.error);
    assert.equal(m1.reply.uid, only);
    assert.equal(readlinkSync(entry), m1.sandboxId);
    // A second Session needs a Sandbox of its own: there is no uid left for it.
    const s2 = await small.session(app.key);
    const m2 = await small.roundTrip(app.key, s2.id, { n: 2 }, 30);
    assert.equal(m2.state, 'failed');
    assert.match(m2.error, /no free Sandbox uid: all 1 uids of sandbox_uid_range/);
    // The message fails first; the Sandbox's end is recorded when its cleanup job is done.
    const failed = await small.until(() => {
      const ids = small.sql("SELECT id FROM sandboxes WHERE state = 'failed'").split('\n').filter(Boolean);
      return ids.length ? ids : null;
    }, 10000, 'the failed boot to be recorded');
    assert.match(small.sql(`SELECT termination_reason FROM sandboxes WHERE id = '${failed[0]}'`),
      /no free Sandbox uid/);
    // Jails and cgroups are named "<installation>-<sandboxId>".
    const tag = small.sql("SELECT value FROM settings WHERE key = 'installation_id'");
    for (const id of failed) {
      assert.ok(!existsSync(join(small.dataDir, 'jail', 'process', `${tag}-${id}`)), `jail of ${id} left behind`);
      assert.ok(!existsSync(`/sys/fs/cgroup/unified/sbx/${tag}-${id}`), `cgroup of ${id} left behind`);
    }
    assert.equal(readlinkSync(entry), m1.sandboxId, 'a failed boot took the uid');
    // The worker dies (kill -9) while its Sandbox holds the uid; the next one reconciles, and a
    // new Sandbox gets the uid.
    small.workers[0].kill('SIGKILL');
    await small.workers[0].exited;
    small.startWorker();
    await small.until(() => ['terminated', 'failed'].includes(
      small.sql(`SELECT state FROM sandboxes WHERE id = '${m1.sandboxId}'`)), 20000,
    "the crashed worker's Sandbox to be reaped");
    const m3 = await small.roundTrip(app.key, s2.id, { n: 3 }, 30);
    assert.equal(m3.state, 'completed', m3.error);
    assert.equal(m3.reply.uid, only);
    assert.notEqual(m3.sandboxId, m1.sandboxId);
    assert.equal(readlinkSync(entry), m3.sandboxId);
  } finally {
    await small.stop();
    small.cleanup();
  }
});

test('a full Workspace stops at its sizeMib (ENOSPC inside), another App\'s Workspace still takes writes, delete removes its filesystem', async () => {
  const s = await hostileSession({ sizeMib: 16 });
  assert.equal(s.ws.sizeMib, 16);
  const { m } = await attack({ do: 'filltmp', path: '/workspace/fill' }, 60, s);
  assert.equal(m.state, 'completed', m.error);
  assert.equal(m.reply.errno, ENOSPC);
  assert.ok(m.reply.written <= 16 * 1024 * 1024, `wrote ${m.reply.written} bytes into a 16 MiB Workspace`);
  assert.ok(m.reply.written >= 8 * 1024 * 1024, `only ${m.reply.written} bytes fit into a 16 MiB Workspace`);
  // The image is sparse and bounded: the host's disk holds at most its size.
  const img = statSync(`${s.wsDir}.img`);
  assert.ok(img.blocks * 512 <= 17 * 1024 * 1024, `the image uses ${img.blocks * 512} bytes`);
  // Another App's Workspace (default size) on the same disk is unaffected.
  const ows = await req(sbx.gw, 'POST', '/v1/workspaces', { token: echo.key, body: {} });
  assert.equal(ows.status, 201, ows.text);
  assert.equal(ows.json.sizeMib, 1024, 'the default size is workspace_size_mib');
  const os = await sbx.session(echo.key, { workspaceId: ows.json.id });
  const om = await sbx.roundTrip(echo.key, os.id, { writeFile: { path: '/workspace/after-full', data: 'ok' } }, 60);
  assert.equal(om.state, 'completed', om.error);
  assert.deepEqual(om.reply.writeFile, { ok: true });
  // Deleting the Workspace (after its Session) unmounts and removes its filesystem.
  assert.equal((await req(sbx.gw, 'DELETE', `/v1/sessions/${s.id}`, { token: hostile.key })).status, 204);
  await sandboxEnded(m.sandboxId);
  const del = await sbx.until(async () => {
    const r = await req(sbx.gw, 'DELETE', `/v1/workspaces/${s.ws.id}`, { token: hostile.key });
    return r.status === 204 ? r : null;
  }, 10000, 'the Workspace to be deletable');
  assert.equal(del.status, 204);
  assert.ok(!existsSync(`${s.wsDir}.img`), 'the image is left behind');
  assert.ok(!existsSync(s.wsDir), 'the directory is left behind');
});

test('a host without memory and cpu controllers: the worker says which bounds it cannot apply, and /v1/pool shows them', async () => {
  const bare = await startSbx({ workers: 0, env: { SBX_POOL_SIZE: '0' } });
  try {
    const pool = async () => (await req(bare.gw, 'GET', '/v1/pool', { token: bare.gw.admin })).json;
    assert.deepEqual((await pool()).unboundedLimits, []);
    // The worker in a mount namespace of its own where the v1 memory and cpu hierarchies are
    // hidden (the v2 hierarchy here has no controllers enabled).
    const w = bare.startWorker(['unshare', '-m', '--propagation', 'private', 'sh', '-c',
      'mount -t tmpfs none /sys/fs/cgroup/memory && mount -t tmpfs none /sys/fs/cgroup/cpu && exec "$0"']);
    const limits = await bare.until(async () => {
      const l = (await pool()).unboundedLimits;
      return l.length ? l : null;
    }, 60000, '/v1/pool to list the bounds the worker cannot apply'); // a start under ASan and load
    assert.deepEqual(limits.sort(), ['process:cpu', 'process:memory']);
    assert.match(w.log, /cannot bound the Sandboxes' memory,cpu on this host/);
    // A stopped worker's account goes with it.
    w.kill('SIGTERM');
    await w.exited;
    assert.deepEqual((await pool()).unboundedLimits, []);
  } finally {
    await bare.stop();
    bare.cleanup();
  }
});

test('a worker started on a terminal: nothing of that terminal reaches its Sandboxes', async () => {
  const tty = await startSbx({ workers: 0, env: { SBX_POOL_SIZE: '0' } });
  try {
    // script(1) runs the worker on a new pseudo-terminal, as `tools/sbx up` in a terminal would.
    tty.startWorker(['sh', '-c', 'exec script -qec "$0" /dev/null']);
    const app = await tty.app('on-a-tty', { keepAliveSeconds: 30, maxAttempts: 1 });
    const s = await tty.session(app.key);
    const m = await tty.roundTrip(app.key, s.id, { run: ['sh', '-c',
      'for f in /proc/1/fd/* /proc/self/fd/*; do readlink $f; done; echo STAT $(cut -d" " -f6,7 /proc/1/stat)'] }, 60);
    assert.equal(m.state, 'completed', m.error);
    // The worker itself holds the terminal...
    const workerPid = Number(tty.sql('SELECT pid FROM workers WHERE stopped_at IS NULL'));
    assert.match(readlinkSync(`/proc/${workerPid}/fd/2`), /^\/dev\/pts\//, 'the worker is not on a terminal');
    // ...its Sandbox's agent (pid 1) leads its own session without a controlling terminal, and
    // neither it nor the App has a descriptor of a terminal.
    const out = m.reply.run.output;
    assert.doesNotMatch(out, /\/dev\/(pts|tty|console)|ptmx/, out);
    assert.match(out, /STAT 1 0\b/, `session and tty_nr of the agent: ${out}`);
  } finally {
    await tty.stop();
    tty.cleanup();
  }
});

test('a gateway without root: the first worker to attach a Workspace makes its filesystem, and the workers remove a deleted one\'s', async () => {
  const ws = await req(sbx.gw, 'POST', '/v1/workspaces', { token: echo.key, body: { sizeMib: 16 } });
  assert.equal(ws.status, 201, ws.text);
  const dir = join(sbx.dataDir, 'workspaces', ws.json.appId, ws.json.id);
  // What a gateway running as a user without devices (the systemd unit) leaves: an empty
  // directory, no image.
  execFileSync('umount', ['-l', dir]);
  rmSync(`${dir}.img`);
  assert.deepEqual(readdirSync(dir), []);
  const s = await sbx.session(echo.key, { workspaceId: ws.json.id });
  const m = await sbx.roundTrip(echo.key, s.id, { run: ['sh', '-c', 'dd if=/dev/zero of=/workspace/fill bs=65536 2>&1; true'] }, 60);
  assert.equal(m.state, 'completed', m.error);
  assert.match(m.reply.run.output, /No space left on device/);
  assert.ok(existsSync(`${dir}.img`), 'the worker made no image');
  assert.ok(statSync(join(dir, 'fill')).size <= 16 * 1024 * 1024);
  // Deleted where the gateway could not unmount it (as the store records a delete): the workers
  // unmount it and remove image and directory.
  assert.equal((await req(sbx.gw, 'DELETE', `/v1/sessions/${s.id}`, { token: echo.key })).status, 204);
  await sbx.until(async () => ['terminated', 'failed'].includes((await sbx.getSandbox(echo.key, m.sandboxId)).state),
    20000, 'the Sandbox to end');
  sbx.sql(`UPDATE workspaces SET deleted_at = 1 WHERE id = '${ws.json.id}'`);
  await sbx.until(() => !existsSync(`${dir}.img`) && !existsSync(dir), 20000,
    "the workers to remove the deleted Workspace's filesystem");
  assert.ok(!readFileSync('/proc/self/mountinfo', 'utf8').includes(` ${dir} `), 'still mounted');
});

test('the bystander Session was served throughout', async () => {
  bystander.stop = true;
  await bystander.done;
  console.log(`bystander: ${bystander.served} served, ${bystander.failed.length} failed, slowest ${bystander.maxMs} ms`);
  assert.deepEqual(bystander.failed, []);
  assert.ok(bystander.served >= 10, `only ${bystander.served} bystander messages`);
  assert.ok(bystander.maxMs < 20000, `a bystander message took ${bystander.maxMs} ms`);
});
