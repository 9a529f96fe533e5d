// webhook_isolation.test.mjs: one App's slow webhook endpoints do not hold up another App's
// deliveries. Three Apps on one worker (sbx-worker-fork) with three delivery threads: App A's
// endpoint accepts the connection and never answers, App C's answers 200 and then drips its body
// a byte at a time for a minute; App B's deliveries arrive while both of them still hold their
// connection, and each slow attempt ends at webhook_timeout_ms (a total limit, a drip included)
// with an error recorded.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startSbx, req } from '../worker/harness.mjs';

// A loopback endpoint. mode 'ok': 200 at once; 'hang': never answers; 'drip': 200, then a byte
// every 200 ms for a minute. open counts connections not yet closed; got the events received.
async function endpoint(mode) {
  const e = { got: [], open: 0, closedAt: [], sockets: new Set() };
  e.server = http.createServer((rq, rs) => {
    let body = '';
    rq.on('data', (d) => { body += d; });
    rq.on('end', () => {
      let json = null;
      try { json = JSON.parse(body); } catch { json = null; }
      e.got.push({ at: performance.now(), json });
      if (mode === 'hang') return;
      if (mode === 'ok') { rs.writeHead(200); rs.end('ok'); return; }
      rs.writeHead(200, { 'Content-Type': 'text/plain' });
      let n = 0;
      const t = setInterval(() => { if (++n > 300) { clearInterval(t); rs.end(); } else rs.write('.'); }, 200);
      rs.on('close', () => clearInterval(t));
    });
  });
  e.server.on('connection', (sock) => {
    e.open++;
    e.sockets.add(sock);
    sock.on('close', () => { e.open--; e.closedAt.push(performance.now()); e.sockets.delete(sock); });
  });
  await new Promise((ok) => e.server.listen(0, '127.0.0.1', ok));
  e.url = `http://127.0.0.1:${e.server.address().port}/hook`;
  e.close = () => { for (const s of e.sockets) s.destroy(); e.server.close(); };
  return e;
}

test('a hanging or dripping endpoint of one App does not delay another App\'s deliveries', async (t) => {
  const timeoutMs = 10000;
  const env = {
    SBX_WEBHOOK_ALLOW_PRIVATE: '1', SBX_WEBHOOK_TIMEOUT_MS: String(timeoutMs), SBX_WEBHOOK_THREADS: '3',
    SBX_WEBHOOK_RETRY_BASE_MS: '60000', SBX_WEBHOOK_RETRY_MAX_MS: '60000',
  };
  const hang = await endpoint('hang');
  const drip = await endpoint('drip');
  const ok = await endpoint('ok');
  const sbx = await startSbx({ workers: 1, env });
  try {
    const admin = sbx.gw.admin;
    const hook = async (app, e) => {
      const r = await req(sbx.gw, 'POST', `/v1/apps/${app.id}/webhooks`, { token: admin, body: { url: e.url, eventTypes: ['session.created'] } });
      assert.equal(r.status, 201, r.text);
      return `/v1/apps/${app.id}/webhooks/${r.json.id}`;
    };
    const a = await sbx.app('hangs', {});
    const b = await sbx.app('served', {});
    const c = await sbx.app('drips', {});
    const hangPath = await hook(a.app, hang);
    const dripPath = await hook(c.app, drip);
    await hook(b.app, ok);

    // A's and C's deliveries go out and stay in flight.
    await sbx.session(a.key);
    await sbx.session(c.key);
    await sbx.until(() => hang.got.length >= 1 && drip.got.length >= 1, 15000, 'both slow endpoints reached');
    const slowSince = performance.now();

    // B's deliveries arrive meanwhile.
    const mine = [];
    for (let i = 0; i < 3; i++) mine.push((await sbx.session(b.key)).id);
    await sbx.until(() => mine.every((id) => ok.got.some((g) => g.json?.data?.sessionId === id)), 15000, 'the other App\'s deliveries');
    const lastB = Math.max(...ok.got.map((g) => g.at));
    t.diagnostic(`the other App's three deliveries arrived ${lastB - slowSince} ms after the slow ones began`);
    // Both slow connections were still open when the last of them arrived.
    for (const [name, e] of [['hang', hang], ['drip', drip]])
      assert.ok(e.closedAt.every((at) => at > lastB), `the ${name} endpoint's connection had closed before the other App was served`);

    // Each slow attempt ends at the total time limit, the drip too (it would last a minute).
    const attempt = (path) => sbx.until(async () => {
      const r = await req(sbx.gw, 'GET', `${path}/deliveries`, { token: admin });
      return r.json.items[0]?.attemptLog.length >= 1 ? r.json.items[0].attemptLog[0] : null;
    }, timeoutMs + 20000, 'a recorded attempt');
    const hung = await attempt(hangPath);
    const dripped = await attempt(dripPath);
    t.diagnostic(`hang: ${hung.durationMs} ms (${hung.error}); drip: ${dripped.durationMs} ms (${dripped.error})`);
    assert.equal(hung.status, null);
    assert.match(hung.error, /timed? ?out/i);
    assert.match(dripped.error, /^HTTP 200, answer cut: .*timed? ?out/i);
    for (const x of [hung, dripped]) assert.ok(x.durationMs >= timeoutMs - 500 && x.durationMs < timeoutMs + 15000, `attempt took ${x.durationMs} ms`);
  } finally {
    await sbx.stop();
    sbx.cleanup();
    for (const e of [hang, drip, ok]) e.close();
  }
});
