// root_fill.test.mjs: the writable root of an image Sandbox is bounded by the App's memory, on the
// real gateway, sbx-worker and process driver. The root is an overlay whose upper layer is a tmpfs
// of the Sandbox (size memSizeMib, docs/process-driver.md); its pages are charged to the Sandbox's
// memory cgroup. An App on the Debian 12 + python3 test image (SBX_TEST_IMAGES) with memSizeMib 64
// writes /fill: 16 MiB fit, 128 MiB meet the cgroup's bound before the tmpfs's own size, so the
// kernel's OOM killer ends the writer inside its Sandbox: the message fails with sandbox-oom, the
// Sandbox ends with terminationReason oom and a peak at most its bound, another App's Session is
// served throughout, and the next message gets a fresh Sandbox without the file.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { startSbx, req, sleep } from '../worker/harness.mjs';
import { importImage } from './upload.mjs';

const IMAGES = process.env.SBX_TEST_IMAGES;
if (!IMAGES) throw new Error('SBX_TEST_IMAGES must name the test images directory');

const MEM_MIB = 64;
const MIB = 1024 * 1024;

// The App's command: an agent in the image's python3 that writes a file of N MiB under / and
// says what it wrote (or the errno that stopped it) and what the root's file system holds; it
// looks for files before it writes.
const FILLER = String.raw`
import errno, json, os, sys
def act(body):
    out = {}
    if "exists" in body:
        out["exists"] = {p: os.path.lexists(p) for p in body["exists"]}
    f = body.get("fill")
    if f:
        written, err = 0, None
        chunk = b"\xa5" * (1 << 20)
        try:
            with open(f["path"], "wb") as fh:
                for _ in range(f["mib"]):
                    fh.write(chunk)
                    written += len(chunk)
        except OSError as e:
            err = e.errno
        out["fill"] = {"written": written, "errno": err}
    if body.get("statRoot"):
        st = os.statvfs("/")
        out["rootBytes"] = st.f_blocks * st.f_frsize
    return out
for line in sys.stdin:
    msg = json.loads(line)
    print(json.dumps({"id": msg["id"], "reply": act(msg.get("body") or {})}), flush=True)
`;

test('filling the writable root of an image Sandbox hits its memory bound: sandbox-oom, oom, fresh Sandbox without the file', async () => {
  const sbx = await startSbx({ workers: 1, env: { SBX_POOL_SIZE: '1', SBX_MESSAGE_TIMEOUT: '30' } });
  let bystander;
  try {
    const img = await importImage(sbx, 'py', join(IMAGES, 'py.docker.tar'));
    assert.equal(img.state, 'ready', JSON.stringify(img.problem));
    const { key } = await sbx.app('root-filler', { image: 'py', memSizeMib: MEM_MIB, keepAliveSeconds: 60,
      maxAttempts: 1, command: ['/usr/bin/python3', '-c', FILLER] });

    // Another App's Session (built-in rootfs, echo agent), asked every 300 ms throughout.
    const other = await sbx.app('bystander', { keepAliveSeconds: 60 });
    const bs = await sbx.session(other.key);
    const first = await sbx.roundTrip(other.key, bs.id, { n: -1 }, 60);
    assert.equal(first.state, 'completed', first.error);
    bystander = { served: 0, failed: [], stop: false, sandboxes: new Set([first.sandboxId]) };
    bystander.done = (async () => {
      for (let n = 0; !bystander.stop; n++) {
        try {
          const m = await sbx.roundTrip(other.key, bs.id, { n }, 60);
          if (m.state === 'completed') {
            bystander.served++;
            bystander.sandboxes.add(m.sandboxId);
          } else bystander.failed.push(`${m.id}: ${m.error}`);
        } catch (e) {
          bystander.failed.push(String(e));
        }
        await sleep(300);
      }
    })();

    // Below the bound the root takes the file: it is writable, and its file system is the
    // Sandbox's tmpfs of memSizeMib.
    const s = await sbx.session(key);
    const small = await sbx.roundTrip(key, s.id, { fill: { path: '/fill', mib: 16 }, statRoot: true }, 60);
    assert.equal(small.state, 'completed', small.error);
    assert.deepEqual(small.reply.fill, { written: 16 * MIB, errno: null });
    assert.equal(small.reply.rootBytes, MEM_MIB * MIB, 'the root is not a tmpfs of memSizeMib');

    // Twice the bound: the tmpfs's pages are charged to the Sandbox's cgroup, which reaches
    // memory.max (the python process and the kernel's own memory count as well) before the tmpfs
    // is full, and the OOM killer ends the writer.
    const t0 = performance.now();
    const big = await sbx.roundTrip(key, s.id, { fill: { path: '/fill', mib: 2 * MEM_MIB } }, 60);
    const servedAtOom = bystander.served;
    console.log(`fill of ${2 * MEM_MIB} MiB with memSizeMib ${MEM_MIB}: ${big.state} in ${Math.round(performance.now() - t0)} ms: ${big.error ?? JSON.stringify(big.reply)}`);
    assert.equal(big.sandboxId, small.sandboxId);
    assert.equal(big.state, 'failed', `wrote ${big.reply?.fill?.written} bytes to / with memSizeMib ${MEM_MIB}`);
    assert.equal(big.error, `sandbox-oom: the App used more than its memory (memSizeMib ${MEM_MIB}) and was killed inside its Sandbox`);
    const sb = await sbx.until(async () => {
      const x = await sbx.getSandbox(key, big.sandboxId);
      return ['terminated', 'failed'].includes(x.state) && x.terminationReason ? x : null;
    }, 20000, `Sandbox ${big.sandboxId} to end`);
    assert.equal(sb.terminationReason, 'oom');
    assert.equal(sb.memSizeMib, MEM_MIB);
    console.log(`the Sandbox's peak memory: ${sb.usage.memPeakBytes} bytes of ${MEM_MIB * MIB}`);
    // The kernel's own measure of the Sandbox: never above its bound.
    assert.ok(sb.usage.memPeakBytes > 16 * MIB, `peak ${sb.usage.memPeakBytes} bytes: the fill was not charged`);
    assert.ok(sb.usage.memPeakBytes <= MEM_MIB * MIB, `peak ${sb.usage.memPeakBytes} bytes over memSizeMib ${MEM_MIB}`);
    assert.equal((await req(sbx.gw, 'GET', '/healthz')).status, 200);

    // The next message: a fresh Sandbox, whose root holds nothing the last one wrote.
    const next = await sbx.roundTrip(key, s.id, { exists: ['/fill'], fill: { path: '/fill', mib: 16 } }, 60);
    assert.equal(next.state, 'completed', next.error);
    assert.notEqual(next.sandboxId, big.sandboxId, 'the next message reused the OOM-killed Sandbox');
    assert.deepEqual(next.reply.exists, { '/fill': false }, '/fill survived its Sandbox');
    assert.deepEqual(next.reply.fill, { written: 16 * MIB, errno: null });

    // Nothing outside the Sandbox was touched: the other App's Session was served all along, and
    // after the OOM kill too, by the one Sandbox it started with.
    await sbx.until(() => bystander.served >= servedAtOom + 2 || bystander.failed.length > 0, 30000,
      'the bystander to be served after the OOM kill');
    bystander.stop = true;
    await bystander.done;
    assert.deepEqual(bystander.failed, []);
    assert.equal(bystander.sandboxes.size, 1, 'the bystander\'s Sandbox was replaced');
    assert.equal(sbx.workers[0].exitCode, null, 'the worker died');
  } finally {
    if (bystander && !bystander.stop) {
      bystander.stop = true;
      await bystander.done;
    }
    const results = await sbx.stop();
    for (const r of results) assert.equal(r.code, 0, 'a worker did not exit cleanly');
    sbx.cleanup();
  }
});
