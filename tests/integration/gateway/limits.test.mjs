// limits.test.mjs: the gateway's configurable limits: body size (413, also for chunked bodies),
// failed-auth rate limit (429 with Retry-After), connection limit, idle connection timeout, and
// hostile input (deep nesting, huge headers) that must not disturb other clients.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { startGateway, removeDataDir, req, assertProblem, holdWriteLock } from './harness.mjs';

async function withGateway(extraArgs, fn) {
  const gw = await startGateway({ extraArgs });
  try {
    await fn(gw);
  } finally {
    const { code } = await gw.stop();
    removeDataDir(gw.dataDir);
    assert.equal(code, 0, gw.stderr);
  }
}

test('bodies over body_limit answer 413, with or without Content-Length', async () => {
  await withGateway(['--body-limit', '2048'], async (gw) => {
    const s = (await req(gw, 'POST', '/v1/sessions', { token: gw.key })).json;
    const path = `/v1/sessions/${s.id}/messages`;
    const big = JSON.stringify({ body: 'x'.repeat(3000) });
    assertProblem(assert, await req(gw, 'POST', path, { token: gw.key, body: big }), 413, 'body-too-large');
    // Chunked: no Content-Length, the limit trips while reading.
    const stream = new ReadableStream({
      start(c) {
        for (let i = 0; i < 4; i++) c.enqueue(new TextEncoder().encode(i === 0 ? '{"body":"' + 'y'.repeat(900) : 'y'.repeat(900)));
        c.enqueue(new TextEncoder().encode('"}'));
        c.close();
      },
    });
    const res = await fetch(gw.url + path, {
      method: 'POST', body: stream, duplex: 'half',
      headers: { Authorization: `Bearer ${gw.key}`, 'Content-Type': 'application/json' },
    });
    assert.equal(res.status, 413);
    assert.equal((await res.json()).code, 'body-too-large');
    // Under the limit is fine, and nothing was stored for the refused ones.
    const ok = await req(gw, 'POST', path, { token: gw.key, body: { body: 'x'.repeat(1000) } });
    assert.equal(ok.status, 202);
    assert.equal(ok.json.seq, 1);
  });
});

test('repeated failed auths from one address answer 429 with Retry-After', async () => {
  await withGateway(['--auth-fail-limit', '3', '--auth-fail-window', '60'], async (gw) => {
    // A missing token is not a guess and is not counted.
    for (let i = 0; i < 5; i++) assertProblem(assert, await req(gw, 'GET', '/v1/sessions'), 401, 'unauthorized');
    assert.equal((await req(gw, 'GET', '/v1/sessions', { token: gw.key })).status, 200);
    for (let i = 0; i < 3; i++) {
      assertProblem(assert, await req(gw, 'GET', '/v1/sessions', { token: 'sbx_' + 'B'.repeat(43) }), 401, 'unauthorized');
    }
    const limited = await req(gw, 'GET', '/v1/sessions', { token: 'sbx_' + 'C'.repeat(43) });
    assertProblem(assert, limited, 429, 'rate-limited');
    const retry = Number(limited.headers.get('retry-after'));
    assert.ok(retry >= 1 && retry <= 60, `Retry-After ${retry}`);
    // While blocked, tokens are not even looked at (guessing learns nothing).
    assertProblem(assert, await req(gw, 'GET', '/v1/sessions', { token: gw.key }), 429, 'rate-limited');
    // Unauthenticated endpoints still answer.
    assert.equal((await req(gw, 'GET', '/healthz')).status, 200);
  });
});

function openIdle(port) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => resolve(s));
    s.on('error', reject);
  });
}

test('conn_limit caps simultaneous connections; others are served once they close', async () => {
  await withGateway(['--conn-limit', '4', '--http-threads', '1'], async (gw) => {
    const idle = [];
    for (let i = 0; i < 4; i++) idle.push(await openIdle(gw.port));
    await new Promise((r) => setTimeout(r, 200));
    // The fifth waits (MHD stops accepting at the limit) and is served once the others leave.
    let served = false;
    const fifth = fetch(gw.url + '/healthz').then((r) => { served = true; return r.status; }, () => 0);
    await new Promise((r) => setTimeout(r, 700));
    assert.equal(served, false, 'a fifth connection was served beyond conn_limit 4');
    for (const s of idle) s.destroy();
    const status = await fifth;
    assert.ok(status === 200 || status === 0, `fifth answered ${status}`);
    assert.equal((await req(gw, 'GET', '/healthz')).status, 200);
  });
});

test('conn_timeout closes idle and slow connections', async () => {
  await withGateway(['--conn-timeout', '1'], async (gw) => {
    const s = await openIdle(gw.port);
    s.write('GET /healthz HTTP/1.1\r\nHost: x\r\n'); // never finishes its headers
    const t0 = performance.now();
    await new Promise((resolve) => s.on('close', resolve));
    const elapsed = performance.now() - t0;
    assert.ok(elapsed < 30000, `closed after ${elapsed} ms (conn_timeout 1 s, the default 120 s)`);
    assert.equal((await req(gw, 'GET', '/healthz')).status, 200);
  });
});

// http_conn_memory (8 KiB by default, libmicrohttpd's pool per connection) holds a request's
// headers: 4 KiB of them (a long bearer token, proxy and tracing headers) are served, as is a
// 1 MiB body (read through the pool in pieces); 12 KiB answer 431; a larger pool takes them.
test('http_conn_memory: ordinary headers and a body at body_limit fit the pool, larger headers 431', async () => {
  const headers = (n) => ({ Authorization: `Bearer ${'k'.repeat(40)}`, 'X-Filler': 'z'.repeat(n) });
  await withGateway([], async (gw) => {
    assert.equal((await fetch(gw.url + '/healthz', { headers: headers(4096) })).status, 200);
    assert.equal((await fetch(gw.url + '/healthz', { headers: headers(12288) })).status, 431);
    const s = (await req(gw, 'POST', '/v1/sessions', { token: gw.key })).json;
    const big = JSON.stringify({ body: 'b'.repeat(1048576 - 64) });
    assert.equal((await req(gw, 'POST', `/v1/sessions/${s.id}/messages`, { token: gw.key, body: big })).status, 202);
  });
  await withGateway(['--http-conn-memory', '32768'], async (gw) => {
    assert.equal((await fetch(gw.url + '/healthz', { headers: headers(12288) })).status, 200);
  });
});

test('hostile bodies and headers get problems and do not disturb the gateway', async () => {
  await withGateway([], async (gw) => {
    const s = (await req(gw, 'POST', '/v1/sessions', { token: gw.key })).json;
    const path = `/v1/sessions/${s.id}/messages`;
    assertProblem(assert, await req(gw, 'POST', path, { token: gw.key, body: '{"body":' + '['.repeat(100000) + ']'.repeat(100000) + '}' }), 400, 'malformed-json');
    assertProblem(assert, await req(gw, 'POST', path, { token: gw.key, body: '{"body":"\u0000"' }), 400, 'malformed-json');
    // Bytes that are not UTF-8 in the path or a field name still get a well-formed problem.
    assertProblem(assert, await req(gw, 'GET', '/v1/%ff%fe'), 404, 'not-found');
    assertProblem(assert, await req(gw, 'GET', `/v1/sessions/%ff`, { token: gw.key }), 404, 'not-found');
    assertProblem(assert, await req(gw, 'POST', '/v1/sessions', { token: gw.key, body: { ['é'.repeat(70)]: 1 } }), 400, 'unknown-field');
    const huge = await fetch(gw.url + '/healthz', { headers: { 'X-Filler': 'z'.repeat(100000) } }).then((r) => r.status, () => 0);
    assert.ok(huge === 0 || huge === 413 || huge === 431, `huge header answered ${huge}`);
    assert.equal((await req(gw, 'GET', '/healthz')).status, 200);
    assert.equal((await req(gw, 'POST', path, { token: gw.key, body: { body: 'fine' } })).status, 202);
  });
});

test('a database locked beyond busy_timeout_ms answers 503 store-busy; reads go on', async () => {
  await withGateway(['--busy-timeout-ms', '200'], async (gw) => {
    const s = (await req(gw, 'POST', '/v1/sessions', { token: gw.key })).json;
    const path = `/v1/sessions/${s.id}/messages`;
    // Another process holds the write lock (as a stuck writer would).
    const holder = await holdWriteLock(gw);
    try {
      const busy = await req(gw, 'POST', path, { token: gw.key, body: { body: 1 } });
      assertProblem(assert, busy, 503, 'store-busy');
      assert.equal(busy.headers.get('retry-after'), '1');
      assertProblem(assert, await req(gw, 'POST', '/v1/sessions', { token: gw.key }), 503, 'store-busy');
      // Readers are not blocked by the writer (SQLite's WAL; PostgreSQL's MVCC).
      assert.equal((await req(gw, 'GET', `/v1/sessions/${s.id}`, { token: gw.key })).status, 200);
      assert.equal((await req(gw, 'GET', '/healthz')).status, 200);
    } finally {
      await holder.release();
    }
    const ok = await req(gw, 'POST', path, { token: gw.key, body: { body: 1 } });
    assert.equal(ok.status, 202);
    assert.equal(ok.json.seq, 1); // the refused attempt left nothing behind
  });
});
