// bench_burst.test.mjs: the burst benchmark's load generator (tools/bench/burst_client.c) against
// a real gateway and the fork test worker: every Session's message is posted at once and
// long-polled to its end, one line per Session comes back in the order given, each naming the
// message the store completed for that Session, after the start it reports; a refused key is an error on stderr, exit 1.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startSbx } from './harness.mjs';

const BIN = process.env.SBX_BENCH_BURST_BIN;
if (!BIN) throw new Error('SBX_BENCH_BURST_BIN must name sbx-bench-burst');

test('sbx-bench-burst posts to every Session at once and waits for each reply', async () => {
  const sbx = await startSbx({ workers: 1, env: { SBX_POOL_SIZE: '2' } });
  try {
    const { key } = await sbx.app('burst', { keepAliveSeconds: 30 });
    const sessions = [];
    for (let i = 0; i < 6; i++) sessions.push((await sbx.session(key)).id);
    const port = new URL(sbx.gw.url).port;
    const run = spawnSync(BIN, ['127.0.0.1', port, key, ...sessions], { encoding: 'utf8', timeout: 60000 });
    assert.equal(run.status, 0, run.stderr);
    const [first, ...lines] = run.stdout.trim().split('\n');
    const start = Number(/^start (\d+)$/.exec(first)?.[1]);
    assert.ok(Math.abs(start - Date.now()) < 60000, first);
    assert.equal(lines.length, sessions.length + 1, run.stdout);
    const total = Number(/^total ([\d.]+)$/.exec(lines.at(-1))?.[1]);
    assert.ok(total > 0, lines.at(-1));
    lines.slice(0, -1).forEach((line, i) => {
      const [ms, state, id] = line.split(' ');
      assert.equal(state, 'completed', line);
      assert.ok(Number(ms) > 0 && Number(ms) <= total, line);
      assert.equal(sbx.sql(`SELECT session_id || ' ' || state || ' ' || body FROM messages WHERE id = '${id}'`),
        `${sessions[i]} completed {"burst":true}`);
      assert.ok(Number(sbx.sql(`SELECT created_at FROM messages WHERE id = '${id}'`)) >= start - 5, line);
    });

    const bad = spawnSync(BIN, ['127.0.0.1', port, 'sbx_not_a_key', sessions[0]], { encoding: 'utf8', timeout: 60000 });
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /POST to .*: 401/);
    const usage = spawnSync(BIN, ['127.0.0.1'], { encoding: 'utf8' });
    assert.equal(usage.status, 2);
    assert.match(usage.stderr, /usage:/);
  } finally {
    await sbx.stop();
    sbx.cleanup();
  }
});
