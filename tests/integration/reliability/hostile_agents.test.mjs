// hostile_agents.test.mjs: App code that attacks its Sandbox, on the real process driver. The
// command is sbx-test-hostile-agent (hostile_agent.c), copied into each hostile Session's
// Workspace. Each attack must be contained (reply bound, message timeout, RLIMIT_NPROC, the
// size-limited /tmp, the jail), reported on the message (state, error) and on the Sandbox
// (terminationReason), while a bystander Session of another App is served all along.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, writeFileSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { startSbx, req, sleep } from '../worker/harness.mjs';

const AGENT = process.env.SBX_HOSTILE_AGENT_BIN;
const ENOENT = 2, ESRCH = 3, EAGAIN = 11, ENOSPC = 28;
let sbx, hostile, echo, bystander, hostSecret;
// A Sandbox uid of its own: RLIMIT_NPROC counts per uid on the whole host, so the fork storm must
// not use up the default uid 65534 that other suites' Sandboxes on this machine share.
export const SANDBOX_UID = 60000 + (process.pid % 5000);
// The hostile agent's command name as /proc shows it (15 characters at most).
const HOSTILE_COMM = 'sbx-test-hostil';

before(async () => {
  sbx = await startSbx({ workers: 1, env: { SBX_MESSAGE_TIMEOUT: '4', SBX_LOG_LEVEL: 'info',
    SBX_SANDBOX_UID: String(SANDBOX_UID), SBX_SANDBOX_GID: String(SANDBOX_UID) } });
  const ha = await sbx.app('hostile', { keepAliveSeconds: 60, maxAttempts: 1, memSizeMib: 128,
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
      const t0 = Date.now();
      try {
        const m = await sbx.roundTrip(echo.key, ses.id, { n }, 60);
        if (m.state === 'completed') bystander.served++;
        else bystander.failed.push(`${m.id}: ${m.error}`);
      } catch (e) {
        bystander.failed.push(String(e));
      }
      bystander.maxMs = Math.max(bystander.maxMs, Date.now() - t0);
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
async function hostileSession() {
  const ws = await req(sbx.gw, 'POST', '/v1/workspaces', { token: hostile.key, body: {} });
  assert.equal(ws.status, 201, ws.text);
  const dir = join(sbx.dataDir, 'workspaces', hostile.appId, ws.json.id);
  copyFileSync(AGENT, join(dir, 'sbx-test-hostile-agent'));
  return { ...(await sbx.session(hostile.key, { workspaceId: ws.json.id })), wsDir: dir };
}

async function attack(body, timeoutS = 60) {
  const s = await hostileSession();
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
  const t0 = Date.now();
  const { m } = await attack({ do: 'longids', lines: 3000, idBytes: 8192 });
  assert.equal(m.state, 'completed', m.error);
  assert.equal(m.reply.lines, 3000);
  const grown = sbx.workers[0].log.length - before;
  console.log(`worker log grew by ${grown} bytes for 3000 unexpected lines of 8 KiB ids (${Date.now() - t0} ms)`);
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

test('the bystander Session was served throughout', async () => {
  bystander.stop = true;
  await bystander.done;
  console.log(`bystander: ${bystander.served} served, ${bystander.failed.length} failed, slowest ${bystander.maxMs} ms`);
  assert.deepEqual(bystander.failed, []);
  assert.ok(bystander.served >= 10, `only ${bystander.served} bystander messages`);
  assert.ok(bystander.maxMs < 20000, `a bystander message took ${bystander.maxMs} ms`);
});
