// https.test.ts: the client generated from openapi.yaml against a gateway serving HTTPS
// (tls_cert_file, tls_key_file): a few calls through openapi-fetch over TLS, each response
// checked against the spec like in contract.test.ts. The whole contract suite is not repeated:
// what TLS changes is the transport, which these calls cover.
//
// Environment: SBX_GATEWAY_BIN, SBX_OPENAPI as for contract.test.ts; SBX_TEST_TLS_DIR holds
// gateway.pem and gateway.key (for 127.0.0.1) issued by its ca.pem, which the process trusts
// through NODE_EXTRA_CA_CERTS (fetch takes no CA of its own): tests/contract.cmake makes them
// with tests/integration/gateway/make_test_certs.sh.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import createClient, { type Client, type Middleware } from "openapi-fetch";
import type { paths } from "../generated/schema.js";
import { Contract } from "./spec.js";
import { startGateway, type RunningGateway } from "./gateway.js";

const here = dirname(fileURLToPath(import.meta.url));
const packageDir = resolve(here, "..", "..");
const specPath = process.env["SBX_OPENAPI"] ?? join(packageDir, "..", "..", "openapi.yaml");
const gatewayBin = process.env["SBX_GATEWAY_BIN"] ?? "";
const tlsDir = process.env["SBX_TEST_TLS_DIR"] ?? "";
const contract = new Contract(specPath);

const validate: Middleware = {
  async onResponse({ request, response, schemaPath }) {
    const errors = contract.check({
      method: request.method,
      template: schemaPath,
      status: response.status,
      headers: response.headers,
      bodyText: await response.clone().text(),
    });
    if (errors.length > 0) throw new Error(`response does not match openapi.yaml:\n  ${errors.join("\n  ")}`);
    return undefined;
  },
};

type JsonMedia = "application/json" | "application/problem+json";
function client(baseUrl: string, token: string): Client<paths, JsonMedia> {
  const c = createClient<paths, JsonMedia>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });
  c.use(validate);
  return c;
}

let gw: RunningGateway;
before(async () => {
  assert.ok(tlsDir, "SBX_TEST_TLS_DIR must name the directory of the test certificates");
  gw = await startGateway(gatewayBin, {
    SBX_TLS_CERT_FILE: join(tlsDir, "gateway.pem"),
    SBX_TLS_KEY_FILE: join(tlsDir, "gateway.key"),
    SBX_DRIVER: "process",
  });
});
after(async () => {
  if (gw) assert.equal(await gw.stop(), 0, gw.output());
});

test("the generated client over HTTPS: an App, a key, a Session, a message", async () => {
  assert.match(gw.baseUrl, /^https:\/\//);
  const admin = client(gw.baseUrl, gw.adminToken);
  const app = await admin.POST("/v1/apps", { body: { name: "over-tls" } });
  assert.equal(app.response.status, 201);
  const key = await admin.POST("/v1/apps/{appId}/keys", { params: { path: { appId: app.data!.id } }, body: {} });
  assert.equal(key.response.status, 201);

  const asApp = client(gw.baseUrl, key.data!.key);
  const session = await asApp.POST("/v1/sessions", { body: {} });
  assert.equal(session.response.status, 201);
  const sessionId = session.data!.id;
  const m = await asApp.POST("/v1/sessions/{sessionId}/messages", { params: { path: { sessionId } }, body: { body: { over: "tls" } } });
  assert.equal(m.response.status, 202);
  const got = await asApp.GET("/v1/sessions/{sessionId}/messages/{messageId}", {
    params: { path: { sessionId, messageId: m.data!.id } },
  });
  assert.equal(got.response.status, 200);
  assert.deepEqual(got.data!.body, { over: "tls" });
});
