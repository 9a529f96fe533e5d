// contract.test.ts: drives a live sbx-gateway through the client generated from openapi.yaml
// (openapi-typescript types + openapi-fetch) and checks every response against the spec: a
// status, header, Content-Type or body the spec does not describe fails the test. It also checks
// the behaviour API.md promises (defaults, pagination, idempotency, scoping, error codes) and,
// at the end, that every operation of the spec was exercised with a success status.
//
// Environment: SBX_GATEWAY_BIN (the sbx-gateway binary, required), SBX_OPENAPI (the spec,
// default ../../openapi.yaml next to this package).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { request as httpRequest } from "node:http";
import { existsSync } from "node:fs";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import createClient, { type Client, type Middleware } from "openapi-fetch";
import type { paths, components } from "../generated/schema.js";
import { Contract } from "./spec.js";
import { onPostgres, startGateway, storeSql, type RunningGateway } from "./gateway.js";

type Schemas = components["schemas"];
type Problem = Schemas["Problem"];

const here = dirname(fileURLToPath(import.meta.url));
const packageDir = resolve(here, "..", "..");
const specPath = process.env["SBX_OPENAPI"] ?? join(packageDir, "..", "..", "openapi.yaml");
const gatewayBin = process.env["SBX_GATEWAY_BIN"] ?? "";
const contract = new Contract(specPath);

/** (METHOD template) -> statuses seen, for the coverage check at the end. */
const seen = new Map<string, Set<number>>();
/** Problem codes the gateway answered with, for the coverage check at the end. */
const problemCodesSeen = new Set<string>();

/** Checks every response that goes through a client against the spec; throws on a difference. */
const validateAgainstSpec: Middleware = {
  async onResponse({ request, response, schemaPath }) {
    // A stream (text/event-stream) may never end: its events are checked by the test that reads
    // it (sseEvents below); here only its status, headers and media type.
    const streamed = (response.headers.get("content-type") ?? "").startsWith("text/event-stream");
    const bodyText = streamed ? "" : await response.clone().text();
    const errors = contract.check({
      method: request.method,
      template: schemaPath,
      status: response.status,
      headers: response.headers,
      bodyText,
    });
    const sentRequestId = request.headers.get("x-request-id");
    if (sentRequestId !== null && /^[A-Za-z0-9._-]{1,64}$/.test(sentRequestId)) {
      const echoed = response.headers.get("x-request-id");
      if (echoed !== sentRequestId) errors.push(`X-Request-Id ${sentRequestId} was not echoed (got ${echoed})`);
    }
    if (response.status >= 400 && bodyText.startsWith("{")) {
      const problem = JSON.parse(bodyText) as Problem;
      problemCodesSeen.add(problem.code);
      const path = new URL(request.url).pathname;
      if (problem.instance !== path) errors.push(`problem instance '${problem.instance}' is not the request path '${path}'`);
      if (problem.requestId !== response.headers.get("x-request-id")) errors.push("problem requestId differs from X-Request-Id");
    }
    const key = `${request.method} ${schemaPath}`;
    if (!seen.has(key)) seen.set(key, new Set());
    seen.get(key)?.add(response.status);
    if (errors.length > 0) {
      throw new Error(`response does not match openapi.yaml:\n  ${errors.join("\n  ")}`);
    }
    return undefined;
  },
};

/* The JSON answers type the client's data; a stream (text/event-stream) is read with
 * parseAs: "stream" and checked event by event (sseEvents). */
type JsonMedia = "application/json" | "application/problem+json";
type ApiClient = Client<paths, JsonMedia>;

function client(baseUrl: string, token?: string): ApiClient {
  const c = createClient<paths, JsonMedia>({
    baseUrl,
    headers: token ? { Authorization: `Bearer ${token}` } : {},
  });
  c.use(validateAgainstSpec);
  return c;
}

/** Asserts a problem answer: status, code and (when given) the field it names. */
function expectProblem(
  result: { error?: unknown; response: Response },
  status: number,
  code: string,
  field?: string,
): Problem {
  assert.equal(result.response.status, status, `expected ${status} ${code}, got ${result.response.status}: ${JSON.stringify(result.error)}`);
  const problem = result.error as Problem;
  assert.equal(problem.code, code, `problem: ${JSON.stringify(problem)}`);
  if (field !== undefined) assert.equal(problem.field, field, `problem: ${JSON.stringify(problem)}`);
  return problem;
}

/** A request outside the spec's operations (unknown route, wrong method), checked as a bare problem. */
async function bare(baseUrl: string, method: string, path: string, token: string, status: number, code: string): Promise<Response> {
  const response = await fetch(`${baseUrl}${path}`, { method, headers: { Authorization: `Bearer ${token}` } });
  const bodyText = await response.text();
  const errors = contract.checkBareProblem({ method, template: path, status: response.status, headers: response.headers, bodyText }, status, code);
  assert.deepEqual(errors, [], errors.join("\n"));
  problemCodesSeen.add(code);
  return response;
}

/**
 * Sends a request fetch() cannot (a body on GET or DELETE) and checks the answer against the
 * spec's operation METHOD template.
 */
async function rawWithBody(baseUrl: string, method: string, path: string, template: string, token: string | null, body: string): Promise<number> {
  const url = new URL(path, baseUrl);
  const headers: Record<string, string> = { "Content-Type": "application/json", "Content-Length": String(Buffer.byteLength(body)) };
  if (token) headers["Authorization"] = `Bearer ${token}`;
  const { status, responseHeaders, text } = await new Promise<{ status: number; responseHeaders: Headers; text: string }>((resolvePromise, reject) => {
    const req = httpRequest(url, { method, headers }, (res) => {
      let data = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (data += chunk));
      res.on("end", () => {
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (typeof v === "string") h.set(k, v);
        resolvePromise({ status: res.statusCode ?? 0, responseHeaders: h, text: data });
      });
    });
    // The gateway may answer 413 before it has read everything: that is not an error here.
    req.on("error", reject);
    req.end(body);
  });
  const errors = contract.check({ method, template, status, headers: responseHeaders, bodyText: text });
  assert.deepEqual(errors, [], errors.join("\n"));
  if (status >= 400) problemCodesSeen.add((JSON.parse(text) as Problem).code);
  return status;
}

function idOf(prefix: string): string {
  const alphabet = "0123456789abcdefghjkmnpqrstvwxyz";
  return `${prefix}_${Array.from(randomBytes(20), (b) => alphabet[b & 31]).join("")}`;
}

let gw: RunningGateway;
let admin: ApiClient;
let anon: ApiClient;
let appA: Schemas["App"];
let appB: Schemas["App"];
let keyA: string;
let keyB: string;
let asA: ApiClient;
let asB: ApiClient;

before(async () => {
  assert.ok(gatewayBin && existsSync(gatewayBin), `SBX_GATEWAY_BIN must name the sbx-gateway binary (got '${gatewayBin}')`);
  gw = await startGateway(gatewayBin, {
    SBX_MAX_WAIT: "2",
    SBX_BODY_LIMIT: "65536",
    SBX_AUTH_FAIL_LIMIT: "1000",
    SBX_DRIVER: "process",
    SBX_POOL_SIZE: "2",
    SBX_STREAM_LIMIT: "3",
  });
  admin = client(gw.baseUrl, gw.adminToken);
  anon = client(gw.baseUrl);
});

after(async () => {
  if (gw) await gw.stop();
});

test("operations: /healthz and /metrics need no token", async () => {
  const health = await anon.GET("/healthz");
  assert.equal(health.response.status, 200);
  assert.equal(health.data?.status, "ok");
  assert.ok((health.data?.schemaVersion ?? 0) >= 1);

  const metrics = await anon.GET("/metrics", { parseAs: "text" });
  assert.equal(metrics.response.status, 200);
  assert.match(metrics.data ?? "", /sbx_http_requests_total\{/);
  assert.match(metrics.data ?? "", /sbx_queue_depth\{state="queued"\}/);
  assert.doesNotMatch(metrics.data ?? "", /route="[^"]*(ses|app|msg)_[0-9a-z]{20}/, "route labels must be templates");
});

test("identity: the signing key set and the issuer's metadata need no token", async () => {
  const jwks = await anon.GET("/.well-known/jwks.json");
  assert.equal(jwks.response.status, 200);
  assert.equal(jwks.response.headers.get("cache-control"), "max-age=300");
  assert.equal(jwks.data?.keys.length, 1);
  assert.equal(jwks.data?.keys[0]?.crv, "Ed25519");

  const oidc = await anon.GET("/.well-known/openid-configuration");
  assert.equal(oidc.response.status, 200);
  assert.equal(oidc.data?.jwks_uri, `${oidc.data?.issuer}/.well-known/jwks.json`);
});

test("auth: missing, invalid and wrong-kind tokens", async () => {
  expectProblem(await anon.GET("/v1/apps"), 401, "unauthorized");
  expectProblem(await anon.GET("/v1/sessions"), 401, "unauthorized");
  expectProblem(await anon.GET("/v1/pool"), 401, "unauthorized");
  expectProblem(await anon.GET("/v1/events"), 401, "unauthorized");
  const wrong = client(gw.baseUrl, "sbx_" + randomBytes(32).toString("base64url"));
  expectProblem(await wrong.GET("/v1/sandboxes"), 401, "unauthorized");
  expectProblem(await admin.GET("/v1/sessions"), 403, "forbidden");
  expectProblem(await admin.POST("/v1/workspaces", {}), 403, "forbidden");
});

test("apps: create with defaults, full create, validation errors", async () => {
  const created = await admin.POST("/v1/apps", { body: { name: "contract-a" } });
  assert.equal(created.response.status, 201);
  appA = created.data!;
  assert.equal(created.response.headers.get("location"), `/v1/apps/${appA.id}`);
  assert.equal(appA.keepAliveSeconds, 60);
  assert.equal(appA.vcpuCount, 1);
  assert.equal(appA.memSizeMib, 256);
  assert.equal(appA.driver, "process");
  assert.equal(appA.image, "default");
  assert.equal(appA.maxAttempts, 3);
  assert.deepEqual(appA.command, ["/usr/bin/sbx-echo-agent"]);
  assert.deepEqual(appA.network, { egress: "public" });

  // The egress policy (issue 15): its normal form, and a 422 naming the entry.
  const listed = await admin.POST("/v1/apps", {
    body: { name: "contract-egress", network: { egress: "allowlist", allow: ["API.example.com:443", "*.example.org", "8.8.8.8"] } },
  });
  assert.equal(listed.response.status, 201);
  assert.deepEqual(listed.data!.network, { egress: "allowlist", allow: ["api.example.com:443", "*.example.org", "8.8.8.8/32"] });
  const none = await admin.PATCH("/v1/apps/{appId}", { params: { path: { appId: listed.data!.id } }, body: { network: { egress: "none" } } });
  assert.equal(none.response.status, 200);
  assert.deepEqual(none.data!.network, { egress: "none" });
  expectProblem(await admin.POST("/v1/apps", { body: { name: "x", network: { egress: "allowlist", allow: ["10.0.0.0/8"] } } }), 422, "invalid-value", "network.allow[0]");

  const full = await admin.POST("/v1/apps", {
    body: { name: "contract-b", keepAliveSeconds: 300, vcpuCount: 2, memSizeMib: 512, driver: "process", image: "default", maxAttempts: 5, command: ["/usr/bin/sbx-echo-agent", "-v"] },
  });
  assert.equal(full.response.status, 201);
  appB = full.data!;
  assert.equal(appB.keepAliveSeconds, 300);
  assert.deepEqual(appB.command, ["/usr/bin/sbx-echo-agent", "-v"]);

  expectProblem(await admin.POST("/v1/apps", { body: { name: "contract-a" } }), 409, "conflict");
  expectProblem(await admin.POST("/v1/apps", { body: { name: "x", keepAliveSeconds: 0 } }), 422, "invalid-value", "keepAliveSeconds");
  expectProblem(await admin.POST("/v1/apps", { body: { name: "x", vcpuCount: 33 } }), 422, "invalid-value", "vcpuCount");
  expectProblem(await admin.POST("/v1/apps", { body: { name: "x", memSizeMib: 16 } }), 422, "invalid-value", "memSizeMib");
  expectProblem(await admin.POST("/v1/apps", { body: { name: "x", maxAttempts: 101 } }), 422, "invalid-value", "maxAttempts");
  expectProblem(await admin.POST("/v1/apps", { body: { name: "x", command: [] } }), 422, "invalid-value", "command");
  // @ts-expect-error the spec forbids a string where an integer belongs
  expectProblem(await admin.POST("/v1/apps", { body: { name: "x", keepAliveSeconds: "60" } }), 400, "invalid-field", "keepAliveSeconds");
  // TypeScript's excess-property check does not reach through openapi-fetch's generic body
  // type, so bodies with unknown fields are cast; the spec's additionalProperties: false is what
  // the gateway's 400 unknown-field implements.
  const withColour = { name: "x", colour: "red" } as unknown as Schemas["AppCreate"];
  expectProblem(await admin.POST("/v1/apps", { body: withColour }), 400, "unknown-field", "colour");
  // @ts-expect-error the spec requires name
  const noName = await admin.POST("/v1/apps", { body: {} });
  assert.ok([400, 422].includes(noName.response.status));
  assert.equal((noName.error as Problem).field, "name");
  const badName = await admin.POST("/v1/apps", { body: { name: "has space" } });
  assert.ok([400, 422].includes(badName.response.status), `bad name answered ${badName.response.status}`);
  assert.equal((badName.error as Problem).field, "name");

  const malformed = await admin.POST("/v1/apps", { body: { name: "x" }, bodySerializer: () => '{"name":' });
  expectProblem(malformed, 400, "malformed-json");
  const notObject = await admin.POST("/v1/apps", { body: { name: "x" }, bodySerializer: () => '["name"]' });
  expectProblem(notObject, 400, "malformed-json");
  const wrongType = await admin.POST("/v1/apps", {
    body: { name: "x" },
    bodySerializer: () => "name=x",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
  });
  expectProblem(wrongType, 415, "unsupported-media-type");
  const charset = await admin.POST("/v1/apps", { body: { name: "contract-charset" }, headers: { "Content-Type": "application/json; charset=utf-8" } });
  assert.equal(charset.response.status, 201);
  const huge = await admin.POST("/v1/apps", { body: { name: "x" }, bodySerializer: () => JSON.stringify({ name: "x".repeat(70000) }) });
  expectProblem(huge, 413, "body-too-large");
});

test("apps: list, pagination, get, patch", async () => {
  const page1 = await admin.GET("/v1/apps", { params: { query: { limit: 1 } } });
  assert.equal(page1.response.status, 200);
  assert.equal(page1.data?.items.length, 1);
  assert.notEqual(page1.data?.nextCursor, null);
  const ids = new Set<string>(page1.data!.items.map((a) => a.id));
  let cursor = page1.data!.nextCursor;
  for (let guard = 0; cursor !== null && guard < 20; guard++) {
    const next = await admin.GET("/v1/apps", { params: { query: { limit: 1, cursor } } });
    assert.equal(next.response.status, 200);
    for (const app of next.data!.items) {
      assert.ok(!ids.has(app.id), "pages must not repeat items");
      ids.add(app.id);
    }
    cursor = next.data!.nextCursor;
  }
  assert.ok(ids.has(appA.id) && ids.has(appB.id));
  const all = await admin.GET("/v1/apps");
  assert.equal(all.data?.items.length, ids.size);

  expectProblem(await admin.GET("/v1/apps", { params: { query: { limit: 0 } } }), 400, "invalid-parameter", "limit");
  expectProblem(await admin.GET("/v1/apps", { params: { query: { limit: 201 } } }), 400, "invalid-parameter", "limit");
  // @ts-expect-error the spec types limit as an integer
  expectProblem(await admin.GET("/v1/apps", { params: { query: { limit: "ten" } } }), 400, "invalid-parameter", "limit");
  expectProblem(await admin.GET("/v1/apps", { params: { query: { cursor: "not-a-cursor!" } } }), 400, "invalid-parameter", "cursor");

  const got = await admin.GET("/v1/apps/{appId}", { params: { path: { appId: appA.id } } });
  assert.deepEqual(got.data, appA);
  expectProblem(await admin.GET("/v1/apps/{appId}", { params: { path: { appId: idOf("app") } } }), 404, "not-found");

  const patched = await admin.PATCH("/v1/apps/{appId}", { params: { path: { appId: appA.id } }, body: { keepAliveSeconds: 120, maxAttempts: 2 } });
  assert.equal(patched.response.status, 200);
  assert.equal(patched.data?.keepAliveSeconds, 120);
  assert.equal(patched.data?.maxAttempts, 2);
  assert.equal(patched.data?.name, appA.name);
  appA = patched.data!;
  expectProblem(await admin.PATCH("/v1/apps/{appId}", { params: { path: { appId: appA.id } }, body: { name: "contract-b" } }), 409, "conflict");
  expectProblem(await admin.PATCH("/v1/apps/{appId}", { params: { path: { appId: appA.id } }, body: { keepAliveSeconds: 86401 } }), 422, "invalid-value", "keepAliveSeconds");
  const withId = { id: "app_x" } as unknown as Schemas["AppUpdate"];
  expectProblem(await admin.PATCH("/v1/apps/{appId}", { params: { path: { appId: appA.id } }, body: withId }), 400, "unknown-field", "id");
  expectProblem(await admin.PATCH("/v1/apps/{appId}", { params: { path: { appId: idOf("app") } }, body: { maxAttempts: 2 } }), 404, "not-found");
});

test("keys: create, list, revoke; a revoked key fails at once", async () => {
  const k1 = await admin.POST("/v1/apps/{appId}/keys", { params: { path: { appId: appA.id } }, body: { name: "ci" } });
  assert.equal(k1.response.status, 201);
  assert.equal(k1.data?.name, "ci");
  assert.equal(k1.data?.prefix, k1.data?.key.slice(0, 10));
  assert.equal(k1.data?.key.length, 47);
  assert.equal(k1.data?.revokedAt, null);
  keyA = k1.data!.key;
  asA = client(gw.baseUrl, keyA);

  const k2 = await admin.POST("/v1/apps/{appId}/keys", { params: { path: { appId: appA.id } } });
  assert.equal(k2.response.status, 201);
  assert.equal(k2.data?.name, null);
  const kb = await admin.POST("/v1/apps/{appId}/keys", { params: { path: { appId: appB.id } }, body: {} });
  assert.equal(kb.response.status, 201);
  keyB = kb.data!.key;
  asB = client(gw.baseUrl, keyB);

  const list = await admin.GET("/v1/apps/{appId}/keys", { params: { path: { appId: appA.id } } });
  assert.equal(list.response.status, 200);
  assert.equal(list.data?.nextCursor, null);
  const listed = list.data!.items.map((k) => k.id).sort();
  assert.deepEqual(listed, [k1.data!.id, k2.data!.id].sort());
  assert.ok(!JSON.stringify(list.data).includes(keyA), "the secret is shown only at creation");

  const asK2 = client(gw.baseUrl, k2.data!.key);
  assert.equal((await asK2.GET("/v1/sessions")).response.status, 200);
  const revoke = await admin.DELETE("/v1/apps/{appId}/keys/{keyId}", { params: { path: { appId: appA.id, keyId: k2.data!.id } } });
  assert.equal(revoke.response.status, 204);
  const again = await admin.DELETE("/v1/apps/{appId}/keys/{keyId}", { params: { path: { appId: appA.id, keyId: k2.data!.id } } });
  assert.equal(again.response.status, 204);
  expectProblem(await asK2.GET("/v1/sessions"), 401, "unauthorized");
  const after = await admin.GET("/v1/apps/{appId}/keys", { params: { path: { appId: appA.id } } });
  assert.notEqual(after.data?.items.find((k) => k.id === k2.data!.id)?.revokedAt, null);

  expectProblem(await admin.DELETE("/v1/apps/{appId}/keys/{keyId}", { params: { path: { appId: appB.id, keyId: k1.data!.id } } }), 404, "not-found");
  expectProblem(await admin.GET("/v1/apps/{appId}/keys", { params: { path: { appId: idOf("app") } } }), 404, "not-found");
  expectProblem(await admin.POST("/v1/apps/{appId}/keys", { params: { path: { appId: idOf("app") } } }), 404, "not-found");
  expectProblem(await asA.GET("/v1/apps"), 403, "forbidden");
  expectProblem(await asA.POST("/v1/apps/{appId}/keys", { params: { path: { appId: appA.id } } }), 403, "forbidden");
});

let sessionA: Schemas["Session"];

test("sessions: create, get by name again, list, patch, scoping", async () => {
  const plain = await asA.POST("/v1/sessions");
  assert.equal(plain.response.status, 201);
  const s = plain.data!;
  assert.equal(s.appId, appA.id);
  assert.equal(s.state, "idle");
  assert.equal(s.sandboxId, null);
  assert.equal(s.name, null);
  assert.equal(s.keepAliveSeconds, appA.keepAliveSeconds);
  assert.equal(s.keepAliveOverride, null);
  assert.deepEqual(s.metadata, {});
  assert.equal(s.activationCount, 0);
  assert.equal(s.lastActivityAt, null);

  const named = await asA.POST("/v1/sessions", { body: { name: "ticket-1", keepAliveSeconds: 30, metadata: { customer: "acme" } } });
  assert.equal(named.response.status, 201);
  sessionA = named.data!;
  assert.equal(named.response.headers.get("location"), `/v1/sessions/${sessionA.id}`);
  assert.equal(sessionA.keepAliveSeconds, 30);
  assert.equal(sessionA.keepAliveOverride, 30);
  assert.deepEqual(sessionA.metadata, { customer: "acme" });
  const again = await asA.POST("/v1/sessions", { body: { name: "ticket-1" } });
  assert.equal(again.response.status, 200);
  assert.equal(again.data?.id, sessionA.id);
  // The same name in another App is another Session.
  const otherApp = await asB.POST("/v1/sessions", { body: { name: "ticket-1" } });
  assert.equal(otherApp.response.status, 201);
  assert.notEqual(otherApp.data?.id, sessionA.id);

  expectProblem(await asA.POST("/v1/sessions", { body: { workspaceId: idOf("wsp") } }), 404, "not-found", "workspaceId");
  expectProblem(await asA.POST("/v1/sessions", { body: { keepAliveSeconds: 0 } }), 422, "invalid-value", "keepAliveSeconds");
  // @ts-expect-error metadata must be an object
  expectProblem(await asA.POST("/v1/sessions", { body: { metadata: [1] } }), 400, "invalid-field", "metadata");
  const withSandbox = { sandboxId: "sbx_x" } as unknown as Schemas["SessionCreate"];
  expectProblem(await asA.POST("/v1/sessions", { body: withSandbox }), 400, "unknown-field", "sandboxId");

  const page = await asA.GET("/v1/sessions", { params: { query: { limit: 1 } } });
  assert.equal(page.data?.items.length, 1);
  assert.notEqual(page.data?.nextCursor, null);
  const rest = await asA.GET("/v1/sessions", { params: { query: { limit: 200, cursor: page.data!.nextCursor! } } });
  const allIds = [...page.data!.items, ...rest.data!.items].map((x) => x.id).sort();
  assert.deepEqual(allIds, [s.id, sessionA.id].sort(), "an App sees exactly its own Sessions");

  const got = await asA.GET("/v1/sessions/{sessionId}", { params: { path: { sessionId: sessionA.id } } });
  assert.deepEqual(got.data, sessionA);
  expectProblem(await asB.GET("/v1/sessions/{sessionId}", { params: { path: { sessionId: sessionA.id } } }), 404, "not-found");
  expectProblem(await asA.GET("/v1/sessions/{sessionId}", { params: { path: { sessionId: idOf("ses") } } }), 404, "not-found");

  const patched = await asA.PATCH("/v1/sessions/{sessionId}", { params: { path: { sessionId: sessionA.id } }, body: { metadata: { customer: "acme", tier: 2 }, keepAliveSeconds: null } });
  assert.equal(patched.response.status, 200);
  assert.deepEqual(patched.data?.metadata, { customer: "acme", tier: 2 });
  assert.equal(patched.data?.keepAliveOverride, null);
  assert.equal(patched.data?.keepAliveSeconds, appA.keepAliveSeconds);
  sessionA = patched.data!;
  expectProblem(await asA.PATCH("/v1/sessions/{sessionId}", { params: { path: { sessionId: sessionA.id } }, body: { keepAliveSeconds: 0 } }), 422, "invalid-value", "keepAliveSeconds");
  expectProblem(await asB.PATCH("/v1/sessions/{sessionId}", { params: { path: { sessionId: sessionA.id } }, body: { metadata: {} } }), 404, "not-found");

  const del = await asA.DELETE("/v1/sessions/{sessionId}", { params: { path: { sessionId: s.id } } });
  assert.equal(del.response.status, 204);
  expectProblem(await asA.GET("/v1/sessions/{sessionId}", { params: { path: { sessionId: s.id } } }), 404, "not-found");
  expectProblem(await asA.DELETE("/v1/sessions/{sessionId}", { params: { path: { sessionId: s.id } } }), 404, "not-found");
  expectProblem(await asA.GET("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId: s.id } } }), 404, "not-found");
  const listed = await asA.GET("/v1/sessions", { params: { query: { limit: 200 } } });
  assert.ok(!listed.data!.items.some((x) => x.id === s.id), "deleted Sessions are never listed");
});

test("messages: durable enqueue, idempotency, listing, long poll", async () => {
  const sessionId = sessionA.id;
  const m1 = await asA.POST("/v1/sessions/{sessionId}/messages", {
    params: { path: { sessionId } },
    headers: { "X-Request-Id": "contract.m1" },
    body: { body: { hello: "world" } },
  });
  assert.equal(m1.response.status, 202);
  assert.equal(m1.data?.state, "queued");
  assert.equal(m1.data?.seq, 1);
  assert.deepEqual(m1.data?.body, { hello: "world" });
  assert.equal(m1.data?.reply, null);
  assert.equal(m1.data?.attempts, 0);
  assert.equal(m1.data?.maxAttempts, appA.maxAttempts);
  assert.equal(m1.data?.requestId, "contract.m1");
  assert.equal(m1.data?.completedAt, null);
  assert.equal(m1.response.headers.get("location"), `/v1/sessions/${sessionId}/messages/${m1.data?.id}`);

  const params = { path: { sessionId }, header: { "Idempotency-Key": "contract-key-1" } };
  const m2 = await asA.POST("/v1/sessions/{sessionId}/messages", { params, body: { body: "second" } });
  assert.equal(m2.response.status, 202);
  assert.equal(m2.data?.seq, 2);
  const replay = await asA.POST("/v1/sessions/{sessionId}/messages", { params, body: { body: "second" } });
  assert.equal(replay.response.status, 200);
  assert.equal(replay.data?.id, m2.data?.id);
  assert.equal(replay.data?.seq, 2);
  expectProblem(await asA.POST("/v1/sessions/{sessionId}/messages", { params, body: { body: "different" } }), 409, "idempotency-conflict");
  const badKey = { path: { sessionId }, header: { "Idempotency-Key": "x".repeat(256) } };
  expectProblem(await asA.POST("/v1/sessions/{sessionId}/messages", { params: badKey, body: { body: 1 } }), 400, "invalid-parameter", "Idempotency-Key");
  const m3 = await asA.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: { body: null } });
  assert.equal(m3.response.status, 202);
  assert.equal(m3.data?.body, null);
  // @ts-expect-error body is required
  const missing = await asA.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: {} });
  assert.ok([400, 422].includes(missing.response.status));
  assert.equal((missing.error as Problem).field, "body");
  const withPriority = { body: 1, priority: 9 } as unknown as Schemas["MessageCreate"];
  expectProblem(await asA.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: withPriority }), 400, "unknown-field", "priority");
  expectProblem(await asB.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: { body: 1 } }), 404, "not-found");
  expectProblem(await admin.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: { body: 1 } }), 403, "forbidden");

  const page = await asA.GET("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId }, query: { limit: 2 } } });
  assert.deepEqual(page.data?.items.map((m) => m.seq), [1, 2]);
  assert.notEqual(page.data?.nextCursor, null);
  const rest = await asA.GET("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId }, query: { cursor: page.data!.nextCursor! } } });
  assert.deepEqual(rest.data?.items.map((m) => m.seq), [3]);
  assert.equal(rest.data?.nextCursor, null);

  const got = await asA.GET("/v1/sessions/{sessionId}/messages/{messageId}", { params: { path: { sessionId, messageId: m1.data!.id } } });
  assert.equal(got.response.status, 200);
  assert.equal(got.data?.id, m1.data?.id);
  // No worker runs here: a long poll ends when the wait runs out, still 200, still queued.
  const started = performance.now();
  const polled = await asA.GET("/v1/sessions/{sessionId}/messages/{messageId}", { params: { path: { sessionId, messageId: m1.data!.id }, query: { wait: 1 } } });
  assert.equal(polled.response.status, 200);
  assert.equal(polled.data?.state, "queued");
  assert.ok(performance.now() - started >= 900, "wait=1 must hold the answer about a second");
  // wait above max_wait (2 s here) is capped, not refused.
  const cappedStart = performance.now();
  const capped = await asA.GET("/v1/sessions/{sessionId}/messages/{messageId}", { params: { path: { sessionId, messageId: m1.data!.id }, query: { wait: 3600 } } });
  assert.equal(capped.response.status, 200);
  assert.ok(performance.now() - cappedStart < 15000, "wait must be capped at max_wait");
  expectProblem(await asA.GET("/v1/sessions/{sessionId}/messages/{messageId}", { params: { path: { sessionId, messageId: m1.data!.id }, query: { wait: -1 } } }), 400, "invalid-parameter", "wait");
  expectProblem(await asA.GET("/v1/sessions/{sessionId}/messages/{messageId}", { params: { path: { sessionId, messageId: idOf("msg") } } }), 404, "not-found");
  expectProblem(await asB.GET("/v1/sessions/{sessionId}/messages/{messageId}", { params: { path: { sessionId, messageId: m1.data!.id } } }), 404, "not-found");
  expectProblem(await asA.GET("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId }, query: { limit: 500 } } }), 400, "invalid-parameter", "limit");
});

let workspaceA: Schemas["Workspace"];

test("workspaces: create, attach, refuse deletion while attached", async () => {
  const created = await asA.POST("/v1/workspaces", { body: { name: "repo" } });
  assert.equal(created.response.status, 201);
  workspaceA = created.data!;
  assert.equal(created.response.headers.get("location"), `/v1/workspaces/${workspaceA.id}`);
  assert.equal(workspaceA.appId, appA.id);
  assert.equal(workspaceA.attachedSessions, 0);
  assert.ok(existsSync(join(gw.dataDir, "workspaces", appA.id, workspaceA.id)), "the workspace directory exists");
  const unnamed = await asA.POST("/v1/workspaces", { body: { name: null } });
  assert.equal(unnamed.response.status, 201);
  assert.equal(unnamed.data?.name, null);

  const attached = await asA.POST("/v1/sessions", { body: { name: "with-workspace", workspaceId: workspaceA.id } });
  assert.equal(attached.response.status, 201);
  assert.equal(attached.data?.workspaceId, workspaceA.id);
  expectProblem(await asB.POST("/v1/sessions", { body: { workspaceId: workspaceA.id } }), 404, "not-found", "workspaceId");
  const got = await asA.GET("/v1/workspaces/{workspaceId}", { params: { path: { workspaceId: workspaceA.id } } });
  assert.equal(got.data?.attachedSessions, 1);
  expectProblem(await asA.DELETE("/v1/workspaces/{workspaceId}", { params: { path: { workspaceId: workspaceA.id } } }), 409, "conflict");
  expectProblem(await asB.GET("/v1/workspaces/{workspaceId}", { params: { path: { workspaceId: workspaceA.id } } }), 404, "not-found");
  expectProblem(await admin.GET("/v1/workspaces"), 403, "forbidden");

  const list = await asA.GET("/v1/workspaces", { params: { query: { limit: 1 } } });
  assert.equal(list.data?.items.length, 1);
  assert.notEqual(list.data?.nextCursor, null);

  assert.equal((await asA.DELETE("/v1/sessions/{sessionId}", { params: { path: { sessionId: attached.data!.id } } })).response.status, 204);
  const del = await asA.DELETE("/v1/workspaces/{workspaceId}", { params: { path: { workspaceId: unnamed.data!.id } } });
  assert.equal(del.response.status, 204);
  assert.ok(!existsSync(join(gw.dataDir, "workspaces", appA.id, unnamed.data!.id)), "the data is removed");
  expectProblem(await asA.GET("/v1/workspaces/{workspaceId}", { params: { path: { workspaceId: unnamed.data!.id } } }), 404, "not-found");
  expectProblem(await asA.DELETE("/v1/workspaces/{workspaceId}", { params: { path: { workspaceId: unnamed.data!.id } } }), 404, "not-found");
});

test("quotas: an App's quotas and use; over one, the problem names it (429, 422, 507)", async () => {
  const quotas = { sessions: 1, workspaces: 1, workspaceMib: 64, keepAliveSeconds: 100 };
  const app = await admin.POST("/v1/apps", { body: { name: "contract-quotas", keepAliveSeconds: 60, quotas } });
  assert.equal(app.response.status, 201);
  assert.deepEqual(app.data?.quotas, { liveSandboxes: 0, ...quotas });
  assert.deepEqual(app.data?.defaultedQuotas, ["liveSandboxes"]);
  const appId = app.data!.id;
  const key = await admin.POST("/v1/apps/{appId}/keys", { params: { path: { appId } } });
  const asQ = client(gw.baseUrl, key.data!.key);

  expectProblem(await asQ.POST("/v1/sessions", { body: { keepAliveSeconds: 101 } }), 422, "quota-keep-alive-seconds", "keepAliveSeconds");
  const session = await asQ.POST("/v1/sessions", { body: { keepAliveSeconds: 100 } });
  assert.equal(session.response.status, 201);
  expectProblem(await asQ.POST("/v1/sessions"), 429, "quota-sessions");
  expectProblem(await admin.PATCH("/v1/apps/{appId}", { params: { path: { appId } }, body: { quotas: { keepAliveSeconds: 30 } } }),
    422, "quota-keep-alive-seconds", "quotas.keepAliveSeconds");

  expectProblem(await asQ.POST("/v1/workspaces", { body: { sizeMib: 65 } }), 429, "quota-workspace-mib", "sizeMib");
  const ws = await asQ.POST("/v1/workspaces", { body: { sizeMib: 64 } });
  assert.equal(ws.response.status, 201);
  expectProblem(await asQ.POST("/v1/workspaces", { body: { sizeMib: 16 } }), 429, "quota-workspaces");

  const got = await admin.GET("/v1/apps/{appId}", { params: { path: { appId } } });
  assert.deepEqual(got.data?.usage, { liveSandboxes: 0, sessions: 1, workspaces: 1, workspaceMib: 64 });
  const back = await admin.PATCH("/v1/apps/{appId}", { params: { path: { appId } }, body: { quotas: null } });
  assert.equal(back.data?.defaultedQuotas.length, 5);

  // A disk that can promise nothing: every reserve but the store's is taken.
  const full = await startGateway(gatewayBin, { SBX_DISK_RESERVE_MIB: "1073741824" });
  try {
    const asAdmin = client(full.baseUrl, full.adminToken);
    const other = await asAdmin.POST("/v1/apps", { body: { name: "contract-disk" } });
    const otherKey = await asAdmin.POST("/v1/apps/{appId}/keys", { params: { path: { appId: other.data!.id } } });
    const refused = await client(full.baseUrl, otherKey.data!.key).POST("/v1/workspaces", { body: { sizeMib: 16 } });
    expectProblem(refused, 507, "workspace-disk-full", "sizeMib");
  } finally {
    await full.stop();
  }

  assert.equal((await asQ.DELETE("/v1/sessions/{sessionId}", { params: { path: { sessionId: session.data!.id } } })).response.status, 204);
  assert.equal((await asQ.DELETE("/v1/workspaces/{workspaceId}", { params: { path: { workspaceId: ws.data!.id } } })).response.status, 204);
});

/** Writes Sandbox rows the way a worker would, so the read and terminate routes have objects. */
function seedSandbox(state: string, appId: string | null, sessionId: string | null): string {
  const id = idOf("sbx");
  const now = Date.now();
  const q = (v: string | null) => (v === null ? "NULL" : `'${v}'`);
  const terminated = state === "terminated" ? now : null;
  const sql =
    "INSERT INTO sandboxes (id, state, driver, image, vcpu_count, mem_size_mib, worker_id, app_id, session_id, cold, boot_ms, created_at, ready_at, claimed_at, terminated_at, termination_reason, updated_at) " +
    `VALUES ('${id}', '${state}', 'process', 'default', 1, 256, 'contract-test', ${q(appId)}, ${q(sessionId)}, 0, 40, ${now}, ${now}, ${appId ? now : "NULL"}, ${terminated ?? "NULL"}, ${terminated ? "'deleted'" : "NULL"}, ${now});`;
  storeSql(gw, sql);
  return id;
}

test("sandboxes and pool: scoped reads, terminate, conflict on terminated", async () => {
  const warm = seedSandbox("warm", null, null);
  const running = seedSandbox("running", appA.id, sessionA.id);
  const done = seedSandbox("terminated", appA.id, sessionA.id);

  const all = await admin.GET("/v1/sandboxes", { params: { query: { limit: 200 } } });
  assert.equal(all.response.status, 200);
  assert.deepEqual(all.data!.items.map((s) => s.id).sort(), [warm, running, done].sort());
  const mine = await asA.GET("/v1/sandboxes");
  assert.deepEqual(mine.data!.items.map((s) => s.id).sort(), [running, done].sort());
  const theirs = await asB.GET("/v1/sandboxes");
  assert.deepEqual(theirs.data!.items, []);
  const page = await admin.GET("/v1/sandboxes", { params: { query: { limit: 2 } } });
  assert.equal(page.data?.items.length, 2);
  assert.notEqual(page.data?.nextCursor, null);

  const got = await asA.GET("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: running } } });
  assert.equal(got.data?.state, "running");
  assert.equal(got.data?.sessionId, sessionA.id);
  assert.equal(got.data?.cold, false);
  assert.equal(got.data?.bootMs, 40);
  expectProblem(await asA.GET("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: warm } } }), 404, "not-found");
  expectProblem(await asB.GET("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: running } } }), 404, "not-found");
  const asAdmin = await admin.GET("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: warm } } });
  assert.equal(asAdmin.data?.appId, null);

  expectProblem(await asB.DELETE("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: running } } }), 404, "not-found");
  const term = await asA.DELETE("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: running } } });
  assert.equal(term.response.status, 202);
  assert.equal(term.data?.id, running);
  expectProblem(await asA.DELETE("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: done } } }), 409, "conflict");
  expectProblem(await admin.DELETE("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: idOf("sbx") } } }), 404, "not-found");
  const byAdmin = await admin.DELETE("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: warm } } });
  assert.equal(byAdmin.response.status, 202);

  const pool = await admin.GET("/v1/pool");
  assert.equal(pool.response.status, 200);
  assert.equal(pool.data?.target, 2);
  const poolA = await asA.GET("/v1/pool");
  assert.equal(poolA.response.status, 200);
});

test("events: audit trail oldest first, cursor, session filter, scoping", async () => {
  const all = await admin.GET("/v1/events", { params: { query: { limit: 200 } } });
  assert.equal(all.response.status, 200);
  const ids = all.data!.items.map((e) => e.id);
  assert.ok(ids.length > 0);
  assert.deepEqual(ids, [...ids].sort((a, b) => a - b), "oldest first");
  const kinds = new Set(all.data!.items.map((e) => e.objectType));
  for (const t of ["session", "message", "workspace"]) assert.ok(kinds.has(t), `events for ${t} objects (have ${[...kinds].join(",")})`);

  const first = await admin.GET("/v1/events", { params: { query: { limit: 2 } } });
  assert.equal(first.data?.items.length, 2);
  const next = await admin.GET("/v1/events", { params: { query: { limit: 2, cursor: String(first.data!.items[1]!.id) } } });
  assert.ok(next.data!.items.every((e) => e.id > first.data!.items[1]!.id), "the cursor is the last event id seen");
  if (first.data?.nextCursor) {
    const viaNext = await admin.GET("/v1/events", { params: { query: { limit: 2, cursor: first.data.nextCursor } } });
    assert.deepEqual(viaNext.data?.items, next.data?.items);
  }

  const mine = await asA.GET("/v1/events", { params: { query: { limit: 200 } } });
  assert.ok(mine.data!.items.length > 0);
  assert.ok(mine.data!.items.every((e) => e.appId === appA.id), "an App sees only its own events");
  const forSession = await asA.GET("/v1/events", { params: { query: { sessionId: sessionA.id, limit: 200 } } });
  assert.ok(forSession.data!.items.length > 0);
  assert.ok(forSession.data!.items.every((e) => e.sessionId === sessionA.id));
  assert.ok(forSession.data!.items.some((e) => e.requestId === "contract.m1"), "the message's event carries its request id");
  const leak = await asB.GET("/v1/events", { params: { query: { sessionId: sessionA.id } } });
  assert.ok(leak.response.status === 404 || (leak.response.status === 200 && leak.data!.items.length === 0), "no events of another App");
  expectProblem(await admin.GET("/v1/events", { params: { query: { cursor: "abc" } } }), 400, "invalid-parameter", "cursor");
});

test("routing: unknown route 404, wrong method 405 with Allow, request ids", async () => {
  await bare(gw.baseUrl, "GET", "/v1/nope", gw.adminToken, 404, "not-found");
  const notAllowed = await bare(gw.baseUrl, "PUT", "/v1/apps", gw.adminToken, 405, "method-not-allowed");
  const allow = (notAllowed.headers.get("allow") ?? "").split(",").map((m) => m.trim()).sort();
  assert.deepEqual(allow.filter((m) => m !== "HEAD" && m !== "OPTIONS"), ["GET", "POST"]);
  const notAllowed2 = await bare(gw.baseUrl, "POST", "/v1/sessions/" + sessionA.id, keyA, 405, "method-not-allowed");
  assert.ok((notAllowed2.headers.get("allow") ?? "").includes("PATCH"));

  const echoed = await asA.GET("/v1/sessions", { headers: { "X-Request-Id": "my-trace_1.2" } });
  assert.equal(echoed.response.headers.get("x-request-id"), "my-trace_1.2");
  const replaced = await asA.GET("/v1/sessions", { headers: { "X-Request-Id": "has space" } });
  assert.match(replaced.response.headers.get("x-request-id") ?? "", /^req_/);
  const tooLong = await asA.GET("/v1/sessions", { headers: { "X-Request-Id": "a".repeat(65) } });
  assert.match(tooLong.response.headers.get("x-request-id") ?? "", /^req_/);
});

test("limits: a body over body_limit answers 413 on every route, also those without a body", async () => {
  const big = JSON.stringify({ pad: "x".repeat(70000) });
  assert.equal(await rawWithBody(gw.baseUrl, "GET", "/healthz", "/healthz", null, big), 413);
  assert.equal(await rawWithBody(gw.baseUrl, "GET", "/v1/apps", "/v1/apps", gw.adminToken, big), 413);
  assert.equal(await rawWithBody(gw.baseUrl, "DELETE", `/v1/sessions/${sessionA.id}`, "/v1/sessions/{sessionId}", keyA, big), 413);
  // A small body on a route that takes none is ignored.
  assert.equal(await rawWithBody(gw.baseUrl, "GET", "/v1/apps", "/v1/apps", gw.adminToken, "{}"), 200);
});

test("apps: delete refused while in use, then deletes and revokes its keys", async () => {
  expectProblem(await admin.DELETE("/v1/apps/{appId}", { params: { path: { appId: appA.id } } }), 409, "conflict");
  const sessions = await asA.GET("/v1/sessions", { params: { query: { limit: 200 } } });
  for (const s of sessions.data!.items) {
    assert.equal((await asA.DELETE("/v1/sessions/{sessionId}", { params: { path: { sessionId: s.id } } })).response.status, 204);
  }
  expectProblem(await admin.DELETE("/v1/apps/{appId}", { params: { path: { appId: appA.id } } }), 409, "conflict");
  assert.equal((await asA.DELETE("/v1/workspaces/{workspaceId}", { params: { path: { workspaceId: workspaceA.id } } })).response.status, 204);
  const del = await admin.DELETE("/v1/apps/{appId}", { params: { path: { appId: appA.id } } });
  assert.equal(del.response.status, 204);
  expectProblem(await admin.GET("/v1/apps/{appId}", { params: { path: { appId: appA.id } } }), 404, "not-found");
  expectProblem(await asA.GET("/v1/sessions"), 401, "unauthorized");
  // The name is free again once the App is gone.
  const reuse = await admin.POST("/v1/apps", { body: { name: appA.name } });
  assert.equal(reuse.response.status, 201);
  expectProblem(await admin.DELETE("/v1/apps/{appId}", { params: { path: { appId: idOf("app") } } }), 404, "not-found");
});

test("rate limit: repeated failed auths from one address get 429 with Retry-After", async () => {
  const limited = await startGateway(gatewayBin, { SBX_AUTH_FAIL_LIMIT: "3", SBX_AUTH_FAIL_WINDOW: "60" });
  try {
    const bad = client(limited.baseUrl, "sbx_" + "A".repeat(43));
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push((await bad.GET("/v1/sessions")).response.status);
    assert.deepEqual(statuses.slice(0, 3), [401, 401, 401]);
    const last = await bad.GET("/v1/sessions");
    expectProblem(last, 429, "rate-limited");
    assert.match(last.response.headers.get("retry-after") ?? "", /^[0-9]+$/);
  } finally {
    await limited.stop();
  }
});

test("store busy: a write blocked beyond the busy timeout answers 503 store-busy with Retry-After", async () => {
  const busy = await startGateway(gatewayBin, { SBX_BUSY_TIMEOUT_MS: "200" });
  // Another process holds the store's write lock (SQLite's, or on PostgreSQL the writers' advisory
  // lock, SQL_PG_WRITE_LOCK_KEY in common/store/sql/sql_pg.h): reads go on, writes wait and time out.
  const locker = onPostgres
    ? spawn("psql", ["-X", "-q", "-d", busy.store], { stdio: ["pipe", "ignore", "inherit"] })
    : spawn("sqlite3", [join(busy.dataDir, "sbx.db")], { stdio: ["pipe", "ignore", "inherit"] });
  try {
    const asAdmin = client(busy.baseUrl, busy.adminToken);
    locker.stdin.write(onPostgres ? "BEGIN;\nSELECT pg_advisory_xact_lock(8314339804939700564);\n" : ".timeout 5000\nBEGIN EXCLUSIVE;\nSELECT 1;\n");
    let result = await asAdmin.POST("/v1/apps", { body: { name: "busy-probe" } });
    // The lock is taken asynchronously: retry briefly until the write is refused.
    for (let i = 0; i < 50 && result.response.status === 201; i++) {
      await new Promise((r) => setTimeout(r, 100));
      result = await asAdmin.POST("/v1/apps", { body: { name: `busy-probe-${i}` } });
    }
    expectProblem(result, 503, "store-busy");
    assert.equal(result.response.headers.get("retry-after"), "1");
    locker.stdin.write(onPostgres ? "COMMIT;\n\\q\n" : "COMMIT;\n.quit\n");
    locker.stdin.end();
    await new Promise((r) => locker.once("exit", r));
    const after = await asAdmin.POST("/v1/apps", { body: { name: "busy-after" } });
    assert.equal(after.response.status, 201, "writes work again once the lock is gone");
  } finally {
    if (locker.exitCode === null) locker.kill("SIGKILL");
    await busy.stop();
  }
});

test("storage full: a write on a full disk answers 507 storage-full and nothing half-written", async (t) => {
  if (onPostgres) {
    // The data dir's tmpfs does not hold a PostgreSQL store. The engine maps the server's
    // insufficient-resources errors (SQLSTATE class 53, disk_full among them) to the store's
    // "full", which the gateway answers with 507; filling a server's disk is not tested here.
    t.skip("on PostgreSQL the store is not on the gateway's data dir");
    return;
  }
  if (process.getuid?.() !== 0 || !existsSync("/usr/bin/unshare")) {
    t.skip("needs root and unshare(1) to give the gateway a tiny private tmpfs");
    return;
  }
  // The gateway runs in its own mount namespace with a 1 MiB tmpfs over its data dir; the mount
  // goes away with the process.
  const wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs -o size=1m sbx-contract "$SBX_DATA_DIR" && exec "$0"'];
  const full = await startGateway(gatewayBin, { SBX_BODY_LIMIT: "200000" }, wrapper);
  try {
    const asAdmin = client(full.baseUrl, full.adminToken);
    const app = await asAdmin.POST("/v1/apps", { body: { name: "contract-full" } });
    const key = await asAdmin.POST("/v1/apps/{appId}/keys", { params: { path: { appId: app.data!.id } } });
    const asApp = client(full.baseUrl, key.data!.key);
    const session = await asApp.POST("/v1/sessions");
    const sessionId = session.data!.id;
    const filler = randomBytes(90000).toString("base64");
    let last = await asApp.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: { body: filler } });
    let accepted = 0;
    for (let i = 0; i < 40 && last.response.status === 202; i++) {
      accepted++;
      last = await asApp.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: { body: filler } });
    }
    expectProblem(last, 507, "storage-full");
    // Every message the gateway acknowledged is there, in order; the refused one is not.
    const page = await asApp.GET("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId }, query: { limit: 200 } } });
    assert.deepEqual(page.data!.items.map((m) => m.seq), Array.from({ length: accepted }, (_, i) => i + 1));
    assert.equal((await asApp.GET("/healthz")).response.status, 200, "reads still work on a full disk");
  } finally {
    await full.stop();
  }
});

test("with a worker: replies, failures, Sandboxes and the pool as a real worker writes them", async (t) => {
  const workerBin = process.env["SBX_WORKER_BIN"] ?? "";
  if (!workerBin || !existsSync(workerBin)) {
    t.skip("SBX_WORKER_BIN is not set: no worker binary in this build");
    return;
  }
  // Short timers so that the whole lifecycle fits in a few seconds.
  const fast = {
    SBX_POOL_SIZE: "1",
    SBX_POLL_MS: "200",
    SBX_HEARTBEAT_MS: "200",
    SBX_RETRY_BASE_MS: "50",
    SBX_RETRY_MAX_MS: "400",
    SBX_MESSAGE_TIMEOUT: "5",
    SBX_MAX_WAIT: "20",
  };
  const live = await startGateway(gatewayBin, fast);
  const worker = spawn(workerBin, [], { env: { ...process.env, ...fast, SBX_DATA_DIR: live.dataDir, SBX_STORE: live.store }, stdio: ["ignore", "ignore", "pipe"] });
  let workerLog = "";
  worker.stderr?.on("data", (d: Buffer) => (workerLog += d.toString()));
  try {
    const asAdmin = client(live.baseUrl, live.adminToken);
    const app = await asAdmin.POST("/v1/apps", { body: { name: "contract-live", maxAttempts: 1, keepAliveSeconds: 30 } });
    assert.equal(app.response.status, 201);
    const key = await asAdmin.POST("/v1/apps/{appId}/keys", { params: { path: { appId: app.data!.id } } });
    const asApp = client(live.baseUrl, key.data!.key);
    const session = await asApp.POST("/v1/sessions", { body: { name: "live" } });
    const sessionId = session.data!.id;

    const sent = await asApp.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: { body: { hello: "world" } } });
    assert.equal(sent.response.status, 202);
    const messageId = sent.data!.id;
    let done = await asApp.GET("/v1/sessions/{sessionId}/messages/{messageId}", { params: { path: { sessionId, messageId }, query: { wait: 20 } } });
    for (let i = 0; i < 3 && done.data?.state !== "completed" && done.data?.state !== "failed"; i++) {
      done = await asApp.GET("/v1/sessions/{sessionId}/messages/{messageId}", { params: { path: { sessionId, messageId }, query: { wait: 20 } } });
    }
    assert.equal(done.data?.state, "completed", `message: ${JSON.stringify(done.data)}\n--- worker log ---\n${workerLog.slice(-3000)}`);
    assert.notEqual(done.data?.reply, null);
    assert.notEqual(done.data?.completedAt, null);
    assert.notEqual(done.data?.sandboxId, null);
    assert.equal(done.data?.attempts, 1);

    const active = await asApp.GET("/v1/sessions/{sessionId}", { params: { path: { sessionId } } });
    assert.ok((active.data?.activationCount ?? 0) >= 1);
    assert.notEqual(active.data?.lastActivityAt, null);

    const crash = await asApp.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: { body: { crash: true } } });
    const failed = await asApp.GET("/v1/sessions/{sessionId}/messages/{messageId}", { params: { path: { sessionId, messageId: crash.data!.id }, query: { wait: 20 } } });
    assert.equal(failed.data?.state, "failed", `message: ${JSON.stringify(failed.data)}`);
    assert.equal(typeof failed.data?.error, "string");

    const sandboxes = await asApp.GET("/v1/sandboxes");
    assert.ok(sandboxes.data!.items.some((sb) => sb.id === done.data!.sandboxId));
    const sandbox = await asApp.GET("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: done.data!.sandboxId! } } });
    assert.equal(sandbox.data?.appId, app.data!.id);
    assert.equal((await asAdmin.GET("/v1/sandboxes", { params: { query: { limit: 200 } } })).response.status, 200);
    assert.equal((await asAdmin.GET("/v1/pool")).response.status, 200);
    const events = await asApp.GET("/v1/events", { params: { query: { sessionId, limit: 200 } } });
    assert.ok(events.data!.items.some((e) => e.objectId === messageId), "the message's events are in the trail");

    // Terminate whatever Sandbox serves the Session now, then wait for the worker to finish it.
    const current = (await asApp.GET("/v1/sandboxes", { params: { query: { limit: 200 } } })).data!.items.find(
      (sb) => sb.state !== "terminated" && sb.state !== "failed",
    );
    if (current) {
      const term = await asApp.DELETE("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: current.id } } });
      let state: string;
      if (term.response.status === 409) {
        // The crashed agent's Sandbox may end (its teardown) between the listing and the DELETE:
        // then the answer is 409 conflict, and it must have ended.
        expectProblem(term, 409, "conflict");
        state = (await asApp.GET("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: current.id } } })).data!.state;
        assert.ok(state === "terminated" || state === "failed", `409 for a Sandbox still ${state}`);
      } else {
        assert.equal(term.response.status, 202);
        state = term.data!.state;
      }
      for (let i = 0; i < 100 && state !== "terminated" && state !== "failed"; i++) {
        await new Promise((r) => setTimeout(r, 100));
        state = (await asApp.GET("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: current.id } } })).data!.state;
      }
      assert.ok(state === "terminated" || state === "failed", `Sandbox still ${state}`);
      expectProblem(await asApp.DELETE("/v1/sandboxes/{sandboxId}", { params: { path: { sandboxId: current.id } } }), 409, "conflict");
    }
    assert.equal((await asApp.DELETE("/v1/sessions/{sessionId}", { params: { path: { sessionId } } })).response.status, 204);
  } finally {
    if (worker.exitCode === null) {
      worker.kill("SIGTERM");
      const timer = setTimeout(() => worker.kill("SIGKILL"), 10000);
      await new Promise((r) => worker.once("exit", r));
      clearTimeout(timer);
    }
    await live.stop();
  }
});

/** Parsed Server-Sent Events: the `event:` (absent: none), `id:` and the JSON of `data:`. */
interface SseEvent {
  event?: string;
  id?: string;
  data: unknown;
}

/**
 * Reads SSE events from a stream until `enough` says so (then cancels it) or the stream ends,
 * checking each against the spec's schema at `schema`.
 */
async function sseEvents(body: ReadableStream<Uint8Array>, schema: string, enough: (events: SseEvent[]) => boolean = () => false): Promise<SseEvent[]> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const events: SseEvent[] = [];
  let buf = "";
  const deadline = setTimeout(() => void reader.cancel(), 10000);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const ev: Partial<SseEvent> & { dataText?: string } = {};
        for (const line of block.split("\n")) {
          if (line.startsWith(":") || line.startsWith("retry:")) continue;
          const colon = line.indexOf(":");
          const field = line.slice(0, colon);
          const text = line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") ev.event = text;
          else if (field === "id") ev.id = text;
          else if (field === "data") ev.dataText = text;
        }
        if (ev.dataText === undefined) continue;
        const parsed: SseEvent = { data: JSON.parse(ev.dataText) };
        if (ev.event !== undefined) parsed.event = ev.event;
        if (ev.id !== undefined) parsed.id = ev.id;
        const errors = contract.validateAt(schema, parsed);
        assert.deepEqual(errors, [], `event ${JSON.stringify(parsed)} does not match ${schema}: ${errors.join("; ")}`);
        events.push(parsed);
      }
      if (enough(events)) {
        await reader.cancel();
        break;
      }
    }
  } finally {
    clearTimeout(deadline);
  }
  return events;
}

test("streams: a message's partial output and the live event feed, through the generated client", async () => {
  const app = await admin.POST("/v1/apps", { body: { name: "contract-streams" } });
  assert.equal(app.response.status, 201);
  const key = await admin.POST("/v1/apps/{appId}/keys", { params: { path: { appId: app.data!.id } } });
  const asS = client(gw.baseUrl, key.data!.key);
  const session = await asS.POST("/v1/sessions", { body: { name: "streamed" } });
  const sessionId = session.data!.id;
  const sent = await asS.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: { body: { q: 1 } } });
  const messageId = sent.data!.id;
  // The agent's partial output and reply, as a worker stores them.
  const now = Date.now();
  storeSql(gw, `INSERT INTO message_chunks (message_id, idx, value, at) VALUES ('${messageId}', 0, '{"text":"Thin"}', ${now}), ('${messageId}', 1, '"king"', ${now})`);
  storeSql(gw, `UPDATE messages SET state = 'completed', reply = '{"text":"Thinking"}', attempts = 1, chunks_dropped = 1, completed_at = ${now}, updated_at = ${now} WHERE id = '${messageId}'`);

  const path = { sessionId, messageId };
  const whole = await asS.GET("/v1/sessions/{sessionId}/messages/{messageId}/stream", { params: { path }, parseAs: "stream" });
  assert.equal(whole.response.status, 200);
  const events = await sseEvents(whole.data!, "/components/schemas/MessageStreamEvent");
  assert.deepEqual(events.map((e) => [e.event, e.id ?? null]), [["chunk", "0"], ["chunk", "1"], ["completed", null]]);
  assert.deepEqual(events[0]!.data, { text: "Thin" });
  const end = events[2]!.data as Schemas["Message"];
  assert.equal(end.state, "completed");
  assert.deepEqual(end.reply, { text: "Thinking" });
  assert.equal(end.chunksDropped, 1);

  const resumed = await asS.GET("/v1/sessions/{sessionId}/messages/{messageId}/stream", { params: { path, header: { "Last-Event-ID": "0" } }, parseAs: "stream" });
  assert.deepEqual((await sseEvents(resumed.data!, "/components/schemas/MessageStreamEvent")).map((e) => e.id ?? e.event), ["1", "completed"]);
  expectProblem(await asS.GET("/v1/sessions/{sessionId}/messages/{messageId}/stream", { params: { path, header: { "Last-Event-ID": "one" } } }), 400, "invalid-parameter", "Last-Event-ID");
  expectProblem(await asS.GET("/v1/sessions/{sessionId}/messages/{messageId}/stream", { params: { path: { sessionId, messageId: idOf("msg") } } }), 404, "not-found");
  expectProblem(await asB.GET("/v1/sessions/{sessionId}/messages/{messageId}/stream", { params: { path } }), 404, "not-found");

  // The live feed: the Session's events from the start (Last-Event-ID 0), then it stays open.
  const feeds = [];
  for (let i = 0; i < 3; i++) {
    const feed = await asS.GET("/v1/events", { params: { query: { sessionId }, header: { "Last-Event-ID": "0" } }, headers: { Accept: "text/event-stream" }, parseAs: "stream" });
    assert.equal(feed.response.status, 200);
    feeds.push(feed);
  }
  // The limit is 3 streams per caller here.
  expectProblem(await asS.GET("/v1/sessions/{sessionId}/messages/{messageId}/stream", { params: { path } }), 429, "too-many-streams");
  const feedEvents = await sseEvents(feeds[0]!.data!, "/components/schemas/FeedEvent", (evs) => evs.length >= 2);
  const kinds = feedEvents.map((e) => (e.data as Schemas["Event"]).kind);
  assert.deepEqual(kinds.slice(0, 2), ["session.created", "message.queued"]);
  for (const feed of feeds.slice(1)) await feed.data!.cancel();
});

test("webhooks: register (secret once), list, get, deliveries with attempts, delete, refused URLs", async () => {
  const app = await admin.POST("/v1/apps", { body: { name: "contract-webhooks" } });
  const appId = app.data!.id;
  const created = await admin.POST("/v1/apps/{appId}/webhooks", {
    params: { path: { appId } },
    body: { url: "https://203.0.113.5/sbx-events", eventTypes: ["message.completed", "sandbox.*"] },
  });
  assert.equal(created.response.status, 201);
  const hook = created.data!;
  assert.match(hook.secret, /^whsec_/);
  assert.equal(created.response.headers.get("location"), `/v1/apps/${appId}/webhooks/${hook.id}`);
  const webhookId = hook.id;
  const got = await admin.GET("/v1/apps/{appId}/webhooks/{webhookId}", { params: { path: { appId, webhookId } } });
  assert.equal(got.data?.state, "active");
  assert.equal((got.data as Record<string, unknown>)["secret"], undefined);
  const list = await admin.GET("/v1/apps/{appId}/webhooks", { params: { path: { appId } } });
  assert.deepEqual(list.data?.items.map((w) => w.id), [webhookId]);
  expectProblem(await admin.POST("/v1/apps/{appId}/webhooks", { params: { path: { appId } }, body: { url: "http://127.0.0.1:8080/", eventTypes: ["*"] } }), 422, "invalid-value", "url");
  expectProblem(await admin.POST("/v1/apps/{appId}/webhooks", { params: { path: { appId } }, body: { url: "gopher://203.0.113.5/", eventTypes: ["*"] } }), 422, "invalid-value", "url");
  const appKey = await admin.POST("/v1/apps/{appId}/keys", { params: { path: { appId } } });
  expectProblem(await client(gw.baseUrl, appKey.data!.key).GET("/v1/apps/{appId}/webhooks", { params: { path: { appId } } }), 403, "forbidden");
  expectProblem(await admin.GET("/v1/apps/{appId}/webhooks/{webhookId}", { params: { path: { appId: appA.id, webhookId } } }), 404, "not-found");

  // A delivery with two attempts, as a worker writes them (no worker runs on this gateway).
  const eventId = Number(storeSql(gw, `SELECT max(id) FROM events`).trim());
  const now = Date.now();
  storeSql(gw, `INSERT INTO webhook_deliveries (id, webhook_id, event_id, state, attempts, next_attempt_at, last_status, last_error, created_at) VALUES ('whd_contract1', '${webhookId}', ${eventId}, 'pending', 2, ${now + 1000}, NULL, 'timeout', ${now})`);
  storeSql(gw, `INSERT INTO webhook_attempts (delivery_id, attempt, at, status, error, duration_ms) VALUES ('whd_contract1', 1, ${now}, 500, 'HTTP 500', 12), ('whd_contract1', 2, ${now + 200}, NULL, 'timeout', 1500)`);
  const deliveries = await admin.GET("/v1/apps/{appId}/webhooks/{webhookId}/deliveries", { params: { path: { appId, webhookId }, query: { limit: 10 } } });
  assert.equal(deliveries.response.status, 200);
  const d = deliveries.data!.items[0]!;
  assert.equal(d.id, "whd_contract1");
  assert.deepEqual(d.attemptLog.map((a) => [a.attempt, a.status, a.error]), [[1, 500, "HTTP 500"], [2, null, "timeout"]]);
  expectProblem(await admin.GET("/v1/apps/{appId}/webhooks/{webhookId}/deliveries", { params: { path: { appId, webhookId }, query: { cursor: "x" } } }), 400, "invalid-parameter");

  assert.equal((await admin.DELETE("/v1/apps/{appId}/webhooks/{webhookId}", { params: { path: { appId, webhookId } } })).response.status, 204);
  expectProblem(await admin.DELETE("/v1/apps/{appId}/webhooks/{webhookId}", { params: { path: { appId, webhookId } } }), 404, "not-found");
});

test("secrets: put (create, then replace), list, get, delete; never a value", async () => {
  const app = await admin.POST("/v1/apps", { body: { name: "contract-secrets" } });
  const appId = app.data!.id;
  const secretName = "MODEL_KEY";
  const value = "sk-contract-never-returned";
  const created = await admin.PUT("/v1/apps/{appId}/secrets/{secretName}", {
    params: { path: { appId, secretName } },
    body: { value, hosts: ["api.example.com", "*.example.org"] },
  });
  assert.equal(created.response.status, 201);
  assert.equal(created.response.headers.get("location"), `/v1/apps/${appId}/secrets/${secretName}`);
  assert.deepEqual(created.data?.hosts, ["api.example.com", "*.example.org"]);
  const replaced = await admin.PUT("/v1/apps/{appId}/secrets/{secretName}", {
    params: { path: { appId, secretName } },
    body: { value: value + "-2", hosts: ["api.example.com"] },
  });
  assert.equal(replaced.response.status, 200);
  const got = await admin.GET("/v1/apps/{appId}/secrets/{secretName}", { params: { path: { appId, secretName } } });
  assert.equal(got.data?.name, secretName);
  assert.equal(JSON.stringify(got.data).includes(value), false);
  const list = await admin.GET("/v1/apps/{appId}/secrets", { params: { path: { appId } } });
  assert.deepEqual(list.data?.items.map((x) => x.name), [secretName]);
  expectProblem(await admin.PUT("/v1/apps/{appId}/secrets/{secretName}", { params: { path: { appId, secretName } }, body: { value, hosts: ["10.0.0.1"] } }), 422, "invalid-value", "hosts[0]");
  assert.equal((await admin.DELETE("/v1/apps/{appId}/secrets/{secretName}", { params: { path: { appId, secretName } } })).response.status, 204);
  expectProblem(await admin.GET("/v1/apps/{appId}/secrets/{secretName}", { params: { path: { appId, secretName } } }), 404, "not-found");
});

/** A request the typed client cannot send (an archive body, or one of two content types), checked against the spec. */
async function rawChecked(method: string, path: string, template: string, contentType: string, body: string): Promise<{ status: number; json: any; headers: Headers }> {
  const response = await fetch(`${gw.baseUrl}${path}`, { method, headers: { Authorization: `Bearer ${gw.adminToken}`, "Content-Type": contentType }, body });
  const bodyText = await response.text();
  const errors = contract.check({ method, template, status: response.status, headers: response.headers, bodyText });
  assert.deepEqual(errors, [], errors.join("\n"));
  const key = `${method} ${template}`;
  if (!seen.has(key)) seen.set(key, new Set());
  seen.get(key)?.add(response.status);
  const json = bodyText ? JSON.parse(bodyText) : null;
  if (response.status >= 400) problemCodesSeen.add(json.code);
  return { status: response.status, json, headers: response.headers };
}

test("images: upload and pull answer 202 importing, list, get by id and name, delete; never the password", async () => {
  const up = await rawChecked("POST", "/v1/images?name=contract-upload", "/v1/images", "application/x-tar", "\0".repeat(2048));
  assert.equal(up.status, 202);
  assert.equal(up.json.state, "importing");
  assert.equal(up.json.source, "upload");
  assert.equal(up.json.uploadBytes, 2048);
  assert.equal(up.headers.get("location"), `/v1/images/${up.json.id}`);
  const dup = await rawChecked("POST", "/v1/images?name=contract-upload", "/v1/images", "application/x-tar", "x");
  assert.equal(dup.status, 409);
  const noName = await rawChecked("POST", "/v1/images", "/v1/images", "application/x-tar", "x");
  assert.equal(noName.status, 400);
  assert.equal(noName.json.field, "name");
  const pull = await rawChecked("POST", "/v1/images", "/v1/images", "application/json",
    JSON.stringify({ name: "contract-pull", reference: "127.0.0.1:1/sbx/none:v1", username: "u", password: "hunter2" }));
  assert.equal(pull.status, 202);
  assert.equal(pull.json.source, "127.0.0.1:1/sbx/none:v1");
  assert.ok(!JSON.stringify(pull.json).includes("hunter2"));
  const badRef = await rawChecked("POST", "/v1/images", "/v1/images", "application/json", JSON.stringify({ name: "r", reference: "no-host" }));
  assert.equal(badRef.status, 422);
  const text = await rawChecked("POST", "/v1/images?name=t", "/v1/images", "text/plain", "x");
  assert.equal(text.status, 415);

  const list = await admin.GET("/v1/images", { params: { query: { limit: 1 } } });
  assert.equal(list.response.status, 200);
  assert.equal(list.data?.items.length, 1);
  assert.ok(list.data?.nextCursor);
  const byName = await admin.GET("/v1/images/{imageId}", { params: { path: { imageId: "contract-pull" } } });
  assert.equal(byName.data?.id, pull.json.id);
  expectProblem(await anon.GET("/v1/images"), 401, "unauthorized");
  // An App cannot name an Image that is not ready, nor one that does not exist.
  expectProblem(await admin.POST("/v1/apps", { body: { name: "on-image", image: "contract-pull" } }), 409, "conflict", "image");
  expectProblem(await admin.POST("/v1/apps", { body: { name: "on-image", image: "no-such-image" } }), 422, "invalid-value", "image");
  const del = await admin.DELETE("/v1/images/{imageId}", { params: { path: { imageId: up.json.id } } });
  assert.equal(del.response.status, 204);
  expectProblem(await admin.GET("/v1/images/{imageId}", { params: { path: { imageId: up.json.id } } }), 404, "not-found");
});

/** The tag of the Sandboxes' callback API, which the workers serve (callback/), not the gateway. */
const CALLBACK_TAG = "Sandbox callbacks";

test("coverage: every operation of the spec answered with a success status", () => {
  const missing: string[] = [];
  for (const { method, template, tags } of contract.operations()) {
    // The callback API's operations are not the gateway's: this test has no Sandbox to call them
    // from (the callback tests drive them from inside one).
    if (tags.includes(CALLBACK_TAG)) continue;
    const statuses = seen.get(`${method} ${template}`);
    if (!statuses || ![...statuses].some((s) => s >= 200 && s < 300)) missing.push(`${method} ${template}`);
  }
  assert.deepEqual(missing, [], `operations never exercised successfully: ${missing.join(", ")}`);
});

test("coverage: every problem code of the spec was provoked (but internal)", () => {
  const schemas = (contract.doc["components"] as Record<string, Record<string, { enum?: string[] }>>)["schemas"]!;
  const codes = schemas["ProblemCode"]?.enum ?? [];
  assert.ok(codes.length > 0);
  const notProvoked = codes.filter((code) => !problemCodesSeen.has(code));
  // internal is a bug by definition; storage-full needs root for its private tmpfs, and SQLite
  // (the test fills the gateway's data dir, which holds no PostgreSQL store); too-many-requests
  // is answered by the Sandboxes' callback API only (CALLBACK_TAG), never by the gateway.
  const expectedMissing = ["internal", "too-many-requests", ...(process.getuid?.() === 0 && !onPostgres ? [] : ["storage-full"])];
  assert.deepEqual(notProvoked.sort(), expectedMissing.sort(), `codes never seen: ${notProvoked.join(", ")}`);
});

test("shutdown: the gateway exits 0 on SIGTERM", async () => {
  const code = await gw.stop();
  assert.equal(code, 0, `exit code ${code}\n--- gateway output (tail) ---\n${gw.output().slice(-4000)}`);
});
