// egress_python.test.mjs: issue 15's "done when", on the real gateway, sbx-worker and process
// driver, as root in a network namespace of its own: a Python agent in an image (the Debian 12 +
// python3 test image, SBX_TEST_IMAGES) of an allowlist App resolves and calls an allowed name on
// 443, cannot reach anything else, and every attempt it was refused is visible through the API.
// The agent (tests/images/egress-agent.py) runs on the image's python3 and does what each message
// says: getaddrinfo, a TCP connect, or a hand-made DNS query to a server of its choosing. The world
// (tests/integration/network/egress_world.sh): listeners on 11.11.11.11-13 (80, 443, 8080) that
// say "hello <address>", the resolver 11.11.11.53 (api.test -> 11.11.11.11, alt.test ->
// 11.11.11.12) and a second resolver 11.11.11.54, not in dns_resolvers, that answers every name
// with 11.11.11.13 (so its answer is recognisable). Everything is asserted through the API: the agent's replies and
// `GET /v1/events` with the App's key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSbx, req, assertWorkersExited } from '../worker/harness.mjs';
import { importImage } from './upload.mjs';

const IMAGES = process.env.SBX_TEST_IMAGES;
const WORLD = process.env.SBX_EGRESS_WORLD;
const PROBE = process.env.SBX_NET_PROBE;
if (!IMAGES || !WORLD || !PROBE) throw new Error('SBX_TEST_IMAGES, SBX_EGRESS_WORLD and SBX_NET_PROBE must be set');
const AGENT = readFileSync(new URL('../../images/egress-agent.py', import.meta.url), 'utf8');

// Every event the key may see, oldest first.
async function events(sbx, key) {
  const seen = [];
  for (let cursor = ''; ;) {
    const page = await req(sbx.gw, 'GET', `/v1/events?limit=200${cursor ? `&cursor=${cursor}` : ''}`, { token: key });
    assert.equal(page.status, 200, page.text);
    seen.push(...page.json.items);
    if (!page.json.nextCursor) return seen;
    cursor = page.json.nextCursor;
  }
}

test('a Python agent in an image reaches only its allowed name, and every refusal is an event', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-egress-python-'));
  execFileSync('bash', [WORLD, 'up', dir, PROBE], { stdio: 'inherit' });
  const sbx = await startSbx({
    workers: 1,
    env: { SBX_DNS_RESOLVERS: '11.11.11.53', SBX_EGRESS_PORTS: '80,443', SBX_MESSAGE_TIMEOUT: '30' },
  });
  let bodyFailed = true;
  try {
    const img = await importImage(sbx, 'py', join(IMAGES, 'py.docker.tar'));
    assert.equal(img.state, 'ready', JSON.stringify(img.problem));
    const { app, key } = await sbx.app('py-egress', {
      image: 'py',
      command: ['/usr/bin/python3', '-c', AGENT],
      keepAliveSeconds: 120,
      maxAttempts: 1,
      network: { egress: 'allowlist', allow: ['api.test:443'] },
    });
    assert.deepEqual(app.network, { egress: 'allowlist', allow: ['api.test:443'] });
    const session = await sbx.session(key);
    const run = async (...steps) => {
      const m = await sbx.roundTrip(key, session.id, { steps }, 90);
      assert.equal(m.state, 'completed', m.error);
      assert.match(m.reply.python, /^\/usr\/bin\/python3 3\.11\./, "the image's python3");
      return { steps: m.reply.steps, sandboxId: m.sandboxId };
    };

    // The allowed name resolves through sbx and its address answers on 443, by address and by
    // name; before the lookup the address is closed.
    // Connects expected to be refused wait 0.5 s: one SYN, so one denial each, which keeps all
    // of them within the rate limit's 10 events per Sandbox per 10 s (a refused getaddrinfo costs
    // two: glibc asks twice). A connect the firewall let through would answer in milliseconds,
    // and would show as a missing event below, so the short wait cannot pass a wrong verdict.
    const NO = 0.5;
    const [before] = (await run({ connect: ['11.11.11.11', 443], timeout: NO })).steps;
    assert.equal(before.ok, false, `11.11.11.11:443 open before any lookup: ${JSON.stringify(before)}`);
    const allowed = await run({ resolve: 'api.test' }, { connect: ['11.11.11.11', 443] }, { connect: ['api.test', 443] });
    const sandboxId = allowed.sandboxId;
    const [res, byAddr, byName] = allowed.steps;
    assert.deepEqual(res, { ok: true, addresses: ['11.11.11.11'] }, 'the allowed name resolves');
    assert.equal(byAddr.ok, true, JSON.stringify(byAddr));
    assert.match(byAddr.data, /^hello 11\.11\.11\.11 from 11\.0\.0\.1/, "the listener's bytes");
    assert.match(byName.data, /^hello 11\.11\.11\.11/, 'by name too');

    // Nothing else: the allowed name's address on another port (80 is in egress_ports, so only the
    // App's list stops it), a name not on the list, another world address by IP on 443, and DNS to
    // a resolver of the agent's choosing (UDP and TCP go to sbx's forwarder whatever their
    // destination, so the other server's answer never arrives).
    const refused = await run(
      { connect: ['11.11.11.11', 80], timeout: NO },
      { resolve: 'alt.test' },
      { connect: ['11.11.11.12', 443], timeout: NO },
      { dns: ['11.11.11.54', 'nothere.test', 'udp'] },
      { dns: ['11.11.11.54', 'api.test', 'udp'] },
      { dns: ['11.11.11.54', 'api.test', 'tcp'] },
      { dns: ['11.11.11.54', 'tcponly.test', 'tcp'] },
    );
    assert.equal(refused.sandboxId, sandboxId);
    const [otherPort, notListed, otherAddr, rogueRefused, rogueAllowed, rogueTcp, rogueTcpRefused] = refused.steps;
    assert.equal(otherPort.ok, false, `11.11.11.11:80: ${JSON.stringify(otherPort)}`);
    assert.equal(notListed.ok, false, `alt.test resolved: ${JSON.stringify(notListed)}`);
    assert.equal(otherAddr.ok, false, `11.11.11.12:443: ${JSON.stringify(otherAddr)}`);
    assert.deepEqual(rogueRefused, { ok: true, rcode: 5, addresses: [] }, 'a name not on the list, sent to another resolver: REFUSED by sbx');
    assert.deepEqual(rogueAllowed, { ok: true, rcode: 0, addresses: ['11.11.11.11'] }, "sbx's answer, not 11.11.11.54's (11.11.11.13)");
    assert.deepEqual(rogueTcp, { ok: true, rcode: 0, addresses: ['11.11.11.11'] }, "over TCP too: sbx's answer, asked of 11.11.11.53 over TCP");
    assert.deepEqual(rogueTcpRefused, { ok: true, rcode: 5, addresses: [] }, 'a name not on the list over TCP: REFUSED by sbx');
    const [stillOpen] = (await run({ connect: ['api.test', 443] })).steps;
    assert.match(stillOpen.data || '', /^hello 11\.11\.11\.11/, 'the allowed call still works after the refusals');

    // Every refused attempt is an event the App's key sees, with its destination, port, protocol
    // and rule (and the name for a refused lookup, whose destination is the resolver the agent
    // sent it to, before the redirect); none is another App's.
    const expected = [
      { what: '11.11.11.11:443 before the lookup', rule: 'policy', destination: '11.11.11.11', port: 443, protocol: 'tcp' },
      { what: '11.11.11.11:80', rule: 'policy', destination: '11.11.11.11', port: 80, protocol: 'tcp' },
      { what: 'the lookup of alt.test', rule: 'name', destination: '11.11.11.53', port: 53, protocol: 'udp', name: 'alt.test' },
      { what: '11.11.11.12:443', rule: 'policy', destination: '11.11.11.12', port: 443, protocol: 'tcp' },
      { what: 'the lookup of nothere.test sent to 11.11.11.54', rule: 'name', destination: '11.11.11.54', port: 53, protocol: 'udp', name: 'nothere.test' },
      { what: 'the lookup of tcponly.test sent to 11.11.11.54 over TCP', rule: 'name', destination: '11.11.11.54', port: 53, protocol: 'tcp', name: 'tcponly.test' },
    ];
    const matches = (e, x) =>
      e.kind === 'sandbox.egress_denied' && e.objectId === sandboxId && e.data.rule === x.rule && e.data.port === x.port &&
      e.data.protocol === x.protocol && (x.destination === undefined || e.data.destination === x.destination) &&
      (x.name === undefined || e.data.name === x.name);
    let seen = [];
    await sbx.until(async () => {
      seen = await events(sbx, key);
      return expected.every((x) => seen.some((e) => matches(e, x)));
    }, 15000, 'the denial events').catch((err) => {
      const denials = seen.filter((e) => e.kind === 'sandbox.egress_denied').map((e) => e.data);
      const missing = expected.filter((x) => !seen.some((e) => matches(e, x))).map((x) => x.what);
      throw new Error(`${err.message}: missing ${missing.join(', ')}; have ${JSON.stringify(denials)}`);
    });
    for (const x of expected) {
      const e = seen.find((ev) => matches(ev, x));
      assert.equal(e.appId, app.id, x.what);
      assert.equal(e.sessionId, session.id, x.what);
      assert.match(e.data.source, /^10\.213\./, x.what);
    }
    console.log(`# ${seen.filter((e) => e.kind === 'sandbox.egress_denied').length} denial events`);
    const lookups = seen.filter((e) => e.kind === 'sandbox.egress_denied' && e.data.rule === 'name');
    assert.ok(!lookups.some((e) => e.data.name === 'api.test'), 'an allowed lookup recorded as refused');
    assert.ok(seen.every((e) => e.appId === app.id || e.appId == null), "another App's events");
    bodyFailed = false;
  } finally {
    const results = await sbx.stop();
    execFileSync('bash', [WORLD, 'down', dir]);
    rmSync(dir, { recursive: true, force: true });
    sbx.cleanup();
    assertWorkersExited(results, bodyFailed);
  }
});
