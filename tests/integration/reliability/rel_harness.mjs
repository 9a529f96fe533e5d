// rel_harness.mjs: the gateway tests' startGateway(), plus a wait for the admin token and the
// bootstrap key that a first start prints on stdout. startGateway() reads them when "listening"
// appears on stderr, and stdout can arrive a moment later (then gw.admin is null and the test
// fails with a 401): this waits for both streams.
import { startGateway as startRaw } from '../gateway/harness.mjs';

// firstStart: false for a restart on an existing data dir, which prints no token.
export async function startGateway({ firstStart = true, ...opts } = {}) {
  const gw = await startRaw(opts);
  const end = performance.now() + (firstStart ? 10000 : 0);
  while (!/KEY=sbx_/.test(gw.stdout) && performance.now() < end && gw.proc.exitCode === null)
    await new Promise((r) => setTimeout(r, 20));
  // A restart on an existing data dir prints nothing: keep what startRaw found (null).
  gw.admin ??= /sbx_admin_[A-Za-z0-9_-]+/.exec(gw.stdout)?.[0] ?? null;
  gw.key ??= /KEY=(sbx_[A-Za-z0-9_-]+)/.exec(gw.stdout)?.[1] ?? null;
  return gw;
}
