// warm_ab.mjs: two builds' warm activations, turn about, to compare a change against its base on
// a machine whose speed drifts by up to 2x over minutes (one full `bench.mjs` run each would
// compare two different machines). Each block is the warm scenario's (bench.mjs warmBlock): a
// fresh gateway, worker and pool of 2, keep-alive 1 s, 3 round trips to warm up, then RUNS timed
// ones, each to a new Session served from the pool. Blocks alternate A B A B ...
//
//   node tools/bench/warm_ab.mjs BUILD_A BUILD_B [PAIRS=5] [RUNS=50]
//
// A side may carry settings for its daemons after an @: `build@SBX_CLAIM_OVERLAP=1` (comma-
// separated), to compare one build with and without a setting.
// Prints one row per pair and the medians of the blocks' p50 and p99, with B/A.
import { Sbx, summarize } from './lib.mjs';
import { resolve } from 'node:path';

// "dir@K=V,K2=V2" -> { dir, env }
const side = (arg) => {
  if (!arg) return null;
  const [dir, settings = ''] = arg.split('@');
  const env = Object.fromEntries(settings.split(',').filter(Boolean).map((kv) => kv.split('=')));
  return { dir: resolve(dir), env, label: arg };
};
const [a, b] = [side(process.argv[2]), side(process.argv[3])];
const pairs = Number(process.argv[4] || 5);
const runs = Number(process.argv[5] || 50);
if (!a || !b || !(pairs > 0) || !(runs > 0)) {
  console.error('usage: node tools/bench/warm_ab.mjs BUILD_A BUILD_B [PAIRS] [RUNS]');
  process.exit(2);
}

async function block({ dir, env }) {
  const sbx = new Sbx(dir, { SBX_POOL_SIZE: '2', ...env });
  await sbx.start();
  try {
    await sbx.app({ keepAliveSeconds: 1 });
    const lat = [];
    for (let i = 0; i < runs + 3; i++) {
      const s = await sbx.session({ keepAliveSeconds: 1 });
      await sbx.waitWarm(1);
      const m = await sbx.timedRoundTrip(s.id);
      if (m.state !== 'completed') throw new Error(`message ${m.id} ended ${m.state}: ${m.error}`);
      if (i >= 3) lat.push(m.latencyMs);
    }
    const cold = sbx.sql('SELECT count(*) AS n FROM sandboxes WHERE cold = 1')[0].n;
    return { ...summarize(lat), cold };
  } finally {
    await sbx.stop();
  }
}

const median = (v) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)];
const f = (x) => x.toFixed(2);
console.log(`A = ${a.label}\nB = ${b.label}\n${pairs} pairs of blocks of ${runs}, A first in each\n`);
console.log('| pair | A p50 ms | B p50 ms | A p99 ms | B p99 ms | cold A/B |');
console.log('|---|---|---|---|---|---|');
const got = { a: [], b: [] };
for (let i = 0; i < pairs; i++) {
  const ra = await block(a);
  const rb = await block(b);
  got.a.push(ra);
  got.b.push(rb);
  console.log(`| ${i + 1} | ${f(ra.p50)} | ${f(rb.p50)} | ${f(ra.p99)} | ${f(rb.p99)} | ${ra.cold}/${rb.cold} |`);
}
const m = (side, k) => median(got[side].map((r) => r[k]));
console.log(`| median | ${f(m('a', 'p50'))} | ${f(m('b', 'p50'))} | ${f(m('a', 'p99'))} | ${f(m('b', 'p99'))} | |`);
console.log(`\nB/A: p50 ${f(m('b', 'p50') / m('a', 'p50'))}, p99 ${f(m('b', 'p99') / m('a', 'p99'))}`);
