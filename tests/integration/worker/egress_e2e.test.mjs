// egress_e2e.test.mjs: per-App egress policies on the real gateway + sbx-worker + process driver
// (issue 15). A world of public addresses (tests/integration/network/egress_world.sh) behind the
// host; the echo agent runs the image's busybox nc and nslookup inside its Sandbox. Proves: public
// mode (egress_ports and dns_resolvers), a PATCH to none and to an allowlist changing a live
// Sandbox's reach without a restart (same Sandbox id), two Apps with different lists on one host
// each reaching only their own addresses, and the policy drops counted for /metrics. Then the
// denials as events: `sandbox.egress_denied` with Sandbox, Session, App, destination, port,
// protocol and rule; a flood of 10,000 attempts from inside the Sandbox stays under the per-Sandbox
// rate limit with the suppressed count recorded, counted per App and rule in /metrics, and the
// last denials shown by `sbxctl sandbox ID`. Names: an allowlist of names enforced through sbx's
// DNS forwarder (an allowed name resolves and connects, on its port only; a name not on the list
// is REFUSED and its address unreachable even by IP; a wildcard matches a subdomain, not the
// domain itself; DNS to another address is answered by the forwarder, not by that address; a TTL
// expiry closes the address again; another App does not see the addresses; the refused lookup is
// an event with its name).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSbx, req, assertWorkersExited } from './harness.mjs';

const WORLD = process.env.SBX_EGRESS_WORLD;
const PROBE = process.env.SBX_NET_PROBE;
const SBXCTL = process.env.SBX_SBXCTL_BIN;

test('egress: public, none and allowlist applied live; two Apps isolated', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-egress-e2e-'));
  execFileSync('bash', [WORLD, 'up', dir, PROBE], { stdio: 'inherit' });
  const sbx = await startSbx({ workers: 1, env: { SBX_DNS_RESOLVERS: '11.11.11.53', SBX_EGRESS_PORTS: '80,443' } });
  let bodyFailed = true;
  try {
    const a = await sbx.app('egress-a', { keepAliveSeconds: 120, maxAttempts: 1 });
    const sa = await sbx.session(a.key);
    // What the agent's own tools see: "hello ..." from the world's listener, or nothing.
    const run = async (key, sid, argv) => {
      const m = await sbx.roundTrip(key, sid, { run: argv });
      assert.equal(m.state, 'completed', m.error);
      return { out: m.reply.run.output || '', sandboxId: m.sandboxId };
    };
    const nc = (key, sid, addr, port) => run(key, sid, ['/bin/busybox', 'nc', '-w', '1', addr, String(port)]);
    const reaches = async (key, sid, addr, port) => (await nc(key, sid, addr, port)).out.includes(`hello ${addr}`);
    const patch = async (network) => {
      const p = await req(sbx.gw, 'PATCH', `/v1/apps/${a.app.id}`, { token: sbx.gw.admin, body: { network } });
      assert.equal(p.status, 200, p.text);
    };

    // public: the host-wide rule
    const first = await nc(a.key, sa.id, '11.11.11.11', 443);
    assert.match(first.out, /hello 11\.11\.11\.11 from 11\.0\.0\.1/);
    const sandboxId = first.sandboxId;
    assert.ok(await reaches(a.key, sa.id, '11.11.11.11', 80), 'TCP 80 is in egress_ports');
    assert.ok(!(await reaches(a.key, sa.id, '11.11.11.11', 8080)), 'TCP 8080 is not in egress_ports');
    const ns = await run(a.key, sa.id, ['/bin/busybox', 'nslookup', 'api.test']);
    assert.match(ns.out, /11\.11\.11\.11/, 'DNS through the configured resolver');

    // none, live: the same Sandbox loses its egress within a poll or two
    await patch({ egress: 'none' });
    await sbx.until(async () => !(await reaches(a.key, sa.id, '11.11.11.11', 443)), 10000, 'egress none applied');
    const ns2 = await run(a.key, sa.id, ['/bin/busybox', 'timeout', '2', '/bin/busybox', 'nslookup', 'api.test']);
    assert.doesNotMatch(ns2.out, /Address: 11\.11\.11\.11/, 'DNS in none mode');

    // allowlist, live
    await patch({ egress: 'allowlist', allow: ['11.11.11.12:443'] });
    await sbx.until(() => reaches(a.key, sa.id, '11.11.11.12', 443), 10000, 'allowlist applied');
    assert.ok(!(await reaches(a.key, sa.id, '11.11.11.11', 443)), 'not on the list');
    assert.ok(!(await reaches(a.key, sa.id, '11.11.11.12', 80)), 'the entry names port 443 only');
    const still = await nc(a.key, sa.id, '11.11.11.12', 443);
    assert.equal(still.sandboxId, sandboxId, 'the policy changed without a new Sandbox');

    // a second App with another list, from its first Sandbox on
    const b = await sbx.app('egress-b', { keepAliveSeconds: 120, maxAttempts: 1, network: { egress: 'allowlist', allow: ['11.11.11.11/32'] } });
    const sb = await sbx.session(b.key);
    assert.ok(await reaches(b.key, sb.id, '11.11.11.11', 443), "B reaches B's address");
    assert.ok(!(await reaches(b.key, sb.id, '11.11.11.12', 443)), "B does not reach A's address");
    assert.ok(await reaches(a.key, sa.id, '11.11.11.12', 443), "A reaches A's address");
    assert.ok(!(await reaches(a.key, sa.id, '11.11.11.11', 443)), "A does not reach B's address");

    // back to public
    await patch({ egress: 'public' });
    await sbx.until(() => reaches(a.key, sa.id, '11.11.11.11', 443), 10000, 'public again');
    assert.equal((await nc(a.key, sa.id, '11.11.11.11', 443)).sandboxId, sandboxId);

    // names, through sbx's DNS forwarder
    const c = await sbx.app('egress-c', { keepAliveSeconds: 120, maxAttempts: 1, network: { egress: 'allowlist', allow: ['api.test:443', '*.wild.test'] } });
    const sc = await sbx.session(c.key);
    const lookup = async (key, sid, name, server) => (await run(key, sid, ['/bin/busybox', 'timeout', '2', '/bin/busybox', 'nslookup', name, ...(server ? [server] : [])])).out;
    const resolved = (out, name, addr) => new RegExp(`Name:\\s+${name.replace(/\./g, '\\.')}\\s+Address:\\s+${addr.replace(/\./g, '\\.')}`).test(out);
    assert.ok(!(await reaches(c.key, sc.id, '11.11.11.11', 443)), 'nothing is open before a lookup');
    const l1 = await lookup(c.key, sc.id, 'api.test');
    assert.ok(resolved(l1, 'api.test', '11.11.11.11'), `an allowed name resolves: ${l1}`);
    assert.ok(await reaches(c.key, sc.id, '11.11.11.11', 443), 'and its address connects');
    const byName = await run(c.key, sc.id, ['/bin/busybox', 'nc', '-w', '1', 'api.test', '443']);
    assert.match(byName.out, /hello 11\.11\.11\.11/, 'by name too');
    assert.ok(!(await reaches(c.key, sc.id, '11.11.11.11', 80)), 'on the entry\'s port only');
    const l2 = await lookup(c.key, sc.id, 'alt.test');
    assert.match(l2, /REFUSED/, `a name not on the list is refused: ${l2}`);
    assert.ok(!(await reaches(c.key, sc.id, '11.11.11.12', 443)), 'and its address is unreachable by IP');
    const l3 = await lookup(c.key, sc.id, 'a.wild.test');
    assert.ok(resolved(l3, 'a.wild.test', '11.11.11.12'), `a wildcard matches a subdomain: ${l3}`);
    assert.ok(await reaches(c.key, sc.id, '11.11.11.12', 80), 'on any port of egress_ports');
    assert.match(await lookup(c.key, sc.id, 'wild.test'), /REFUSED/, 'but not the domain itself');
    const l4 = await lookup(c.key, sc.id, 'api.test', '11.11.11.11');
    assert.ok(resolved(l4, 'api.test', '11.11.11.11'), `DNS to another address is answered by sbx's forwarder: ${l4}`);
    assert.match(await lookup(c.key, sc.id, 'alt.test', '11.11.11.11'), /REFUSED/, 'and refused there too');
    // another App's addresses: D allows other.test; C still cannot reach it
    const d = await sbx.app('egress-d', { keepAliveSeconds: 120, maxAttempts: 1, network: { egress: 'allowlist', allow: ['other.test:443'] } });
    const sd = await sbx.session(d.key);
    assert.ok(resolved(await lookup(d.key, sd.id, 'other.test'), 'other.test', '11.11.11.13'));
    assert.ok(await reaches(d.key, sd.id, '11.11.11.13', 443), "D reaches what D resolved");
    assert.ok(!(await reaches(c.key, sc.id, '11.11.11.13', 443)), "C does not reach what D resolved");
    assert.ok(!(await reaches(d.key, sd.id, '11.11.11.11', 443)), "D does not reach what C resolved");
    // TTL 2 s + 5 s grace: without another lookup, the address closes again
    assert.ok(await reaches(c.key, sc.id, '11.11.11.11', 443));
    await new Promise((r) => setTimeout(r, 8000));
    assert.ok(!(await reaches(c.key, sc.id, '11.11.11.11', 443)), 'closed after TTL + grace');
    // the refused lookup as an event, with the name
    const cSandbox = byName.sandboxId;
    await sbx.until(() => sbx.sql(`SELECT COUNT(*) FROM events WHERE object_id = '${cSandbox}' AND kind = 'sandbox.egress_denied' AND json_extract(data, '$.rule') = 'name' AND json_extract(data, '$.name') = 'alt.test'`) !== '0', 10000, 'the refused lookup recorded');

    // denials as events, with the right fields
    const denied = () => JSON.parse(sbx.sql(`SELECT json_group_array(json_object('id', id, 'app', app_id, 'session', session_id, 'data', json(data))) FROM events WHERE object_id = '${sandboxId}' AND kind = 'sandbox.egress_denied'`));
    await sbx.until(() => denied().some((e) => e.data.rule === 'egress' && e.data.port === 8080), 10000, 'a denial event for 8080').catch((e) => {
      throw new Error(`${e.message}: ${JSON.stringify(denied())}\n${sbx.workers[0].log.split('\n').filter((l) => /egress/.test(l)).join('\n')}`);
    });
    const e8080 = denied().find((e) => e.data.rule === 'egress' && e.data.port === 8080);
    assert.equal(e8080.app, a.app.id);
    assert.equal(e8080.session, sa.id);
    assert.equal(e8080.data.destination, '11.11.11.11');
    assert.equal(e8080.data.protocol, 'tcp');
    assert.match(e8080.data.source, /^10\.213\./);
    assert.ok(denied().some((e) => e.data.rule === 'policy' && e.data.destination === '11.11.11.11' && e.data.port === 443), 'the none and allowlist refusals');
    assert.ok(denied().some((e) => e.data.rule === 'policy' && e.data.port === 53 && e.data.protocol === 'udp'), 'DNS refused in none mode');
    // and through the API, to the App's own key: every refused attempt is visible to the App
    const seen = [];
    for (let cursor = ''; ;) {
      const page = await req(sbx.gw, 'GET', `/v1/events?limit=200${cursor ? `&cursor=${cursor}` : ''}`, { token: a.key });
      assert.equal(page.status, 200, page.text);
      seen.push(...page.json.items);
      if (!page.json.nextCursor) break;
      cursor = page.json.nextCursor;
    }
    const apiDenial = seen.find((e) => e.kind === 'sandbox.egress_denied' && e.objectId === sandboxId && e.data.port === 8080);
    assert.ok(apiDenial, 'the denial in GET /v1/events');
    assert.equal(apiDenial.sessionId, sa.id);
    assert.equal(apiDenial.appId, a.app.id);
    assert.ok(!seen.some((e) => e.kind === 'sandbox.egress_denied' && e.appId !== a.app.id), "no other App's denials");

    // a flood of 10,000 attempts from inside the Sandbox: the rate limit holds, nothing is lost
    const pid = sbx.sql(`SELECT pid FROM sandboxes WHERE id = '${sandboxId}'`);
    await new Promise((r) => setTimeout(r, 10500)); // a fresh rate-limit window
    const before = denied();
    const t0 = performance.now();
    const out = execFileSync('nsenter', ['-t', pid, '-n', PROBE, 'flood', '11.11.11.11', '5000', '10000'], { encoding: 'utf8' });
    assert.match(out, /sent 10000 of 10000/);
    const flood = await sbx.until(() => {
      const after = denied().filter((e) => e.id > Math.max(0, ...before.map((b) => b.id)));
      const recorded = after.filter((e) => !e.data.summary && e.data.port === 5000).length;
      const suppressed = after.reduce((n, e) => n + (e.data.suppressed || 0), 0);
      return recorded + suppressed >= 10000 ? { after, recorded, suppressed } : null;
    }, 30000, 'every flood attempt recorded or counted as suppressed');
    const windows = Math.ceil((performance.now() - t0) / 10000) + 1;
    console.log(`# flood: ${flood.recorded} events, ${flood.suppressed} suppressed, ${flood.after.length} rows, ${Math.round(performance.now() - t0)} ms`);
    assert.ok(flood.recorded <= 10 * windows, `${flood.recorded} events in ${windows} windows`);
    assert.ok(flood.after.length <= 11 * windows, `${flood.after.length} rows for a flood`);
    assert.equal(flood.recorded + flood.suppressed, 10000);
    assert.ok(flood.after.some((e) => e.data.summary && e.data.suppressed > 0), 'a summary of the suppressed ones');

    // counted per App and rule for /metrics, and shown by sbxctl
    await sbx.until(async () => {
      const m = await req(sbx.gw, 'GET', '/metrics', { token: sbx.gw.admin });
      const line = m.text.split('\n').find((l) => l.startsWith(`sbx_egress_denied_total{app="${a.app.id}",reason="egress"}`));
      return line && Number(line.split(' ')[1]) >= 10001;
    }, 10000, 'per-App denials in /metrics');
    const ctl = execFileSync(SBXCTL, ['--db', join(sbx.dataDir, 'sbx.db'), 'sandbox', sandboxId], { encoding: 'utf8' });
    assert.match(ctl, /Last egress denials/);
    assert.match(ctl, /11\.11\.11\.11 +5000 +udp +egress/);

    // the drops are counted per reason for /metrics (published by the worker through the store)
    await sbx.until(() => /reason="policy"} [1-9]/.test(sbx.sql(`SELECT value FROM settings WHERE key = 'firewall_metrics'`)), 10000, 'policy drops published');
    assert.match(sbx.sql(`SELECT value FROM settings WHERE key = 'firewall_metrics'`), /reason="egress"} [1-9]/);
    bodyFailed = false;
  } finally {
    const results = await sbx.stop();
    execFileSync('bash', [WORLD, 'down', dir]);
    rmSync(dir, { recursive: true, force: true });
    sbx.cleanup();
    assertWorkersExited(results, bodyFailed);
  }
});
