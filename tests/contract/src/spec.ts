// spec.ts: loads openapi.yaml and checks a live HTTP response against it: the operation and the
// status must be described, the declared headers present and valid, the Content-Type one the
// response lists, and the body valid against its JSON Schema (Ajv, draft 2020-12 like OAS 3.1).
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";

// ajv-formats is CommonJS with a default export; NodeNext sees the module object.
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const HTTP_METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/** One response as the test saw it, with its body already read as text. */
export interface SeenResponse {
  method: string; // upper or lower case
  template: string; // the spec path template, e.g. /v1/sessions/{sessionId}
  status: number;
  headers: Headers;
  bodyText: string;
}

/** Splits "type/subtype; a=b" into the lower-case type and its parameters. */
function parseMediaType(value: string): { type: string; params: Map<string, string> } {
  const [type = "", ...rest] = value.split(";");
  const params = new Map<string, string>();
  for (const part of rest) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim().toLowerCase();
    const val = part.slice(eq + 1).trim().replace(/^"(.*)"$/, "$1");
    params.set(name, val);
  }
  return { type: type.trim().toLowerCase(), params };
}

function escapePointer(token: string): string {
  return token.replace(/~/g, "~0").replace(/\//g, "~1");
}

export class Contract {
  readonly doc: JsonObject;
  private readonly ajv: Ajv2020;
  private readonly validators = new Map<string, ValidateFunction>();

  constructor(specPath: string) {
    this.doc = parseYaml(readFileSync(specPath, "utf8")) as JsonObject;
    // strict: false because the document is an OpenAPI file, not a bare schema: its top-level
    // keys (openapi, paths, ...) are not schema keywords. The schemas themselves are linted by
    // redocly (it.contract.lint).
    this.ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
    addFormats(this.ajv);
    this.ajv.addSchema(this.doc as object, "openapi");
  }

  /** Every (METHOD, template) the spec describes, with the operation's tags. */
  operations(): Array<{ method: string; template: string; tags: string[] }> {
    const out: Array<{ method: string; template: string; tags: string[] }> = [];
    const paths = this.doc["paths"] as JsonObject;
    for (const [template, item] of Object.entries(paths)) {
      for (const [method, op] of Object.entries(item as JsonObject)) {
        if (!HTTP_METHODS.includes(method)) continue;
        const tags = ((op as JsonObject)["tags"] ?? []) as string[];
        out.push({ method: method.toUpperCase(), template, tags });
      }
    }
    return out;
  }

  /** Follows a local $ref ("#/a/b") and returns the target with its JSON pointer. */
  private deref(node: Json, pointer: string): { node: JsonObject; pointer: string } {
    let current = node as JsonObject;
    let at = pointer;
    while (current && typeof current["$ref"] === "string") {
      const ref = current["$ref"] as string;
      if (!ref.startsWith("#/")) throw new Error(`non-local $ref ${ref}`);
      at = ref.slice(1);
      current = this.at(at) as JsonObject;
    }
    return { node: current, pointer: at };
  }

  private at(pointer: string): Json {
    let node: Json = this.doc;
    for (const raw of pointer.split("/").slice(1)) {
      const token = raw.replace(/~1/g, "/").replace(/~0/g, "~");
      if (node === null || typeof node !== "object" || Array.isArray(node)) {
        throw new Error(`bad pointer ${pointer}`);
      }
      node = (node as JsonObject)[token] as Json;
      if (node === undefined) throw new Error(`pointer ${pointer} does not resolve`);
    }
    return node;
  }

  private validator(schemaPointer: string): ValidateFunction {
    let fn = this.validators.get(schemaPointer);
    if (!fn) {
      fn = this.ajv.compile({ $ref: `openapi#${schemaPointer}` });
      this.validators.set(schemaPointer, fn);
    }
    return fn;
  }

  /** Validates a value against the schema at a JSON pointer into the spec; returns errors. */
  validateAt(schemaPointer: string, value: unknown): string[] {
    const fn = this.validator(schemaPointer);
    if (fn(value)) return [];
    return (fn.errors ?? []).map((e) => `${e.instancePath || "(root)"} ${e.message ?? ""} ${JSON.stringify(e.params)}`);
  }

  /** Validates a problem document that no operation describes (unknown route, 405). */
  checkBareProblem(seen: SeenResponse, expectedStatus: number, expectedCode: string): string[] {
    const errors: string[] = [];
    const label = `${seen.method} ${seen.template} -> ${seen.status}`;
    if (seen.status !== expectedStatus) errors.push(`${label}: expected status ${expectedStatus}`);
    errors.push(...this.checkRequestIdHeader(seen, label));
    const ct = parseMediaType(seen.headers.get("content-type") ?? "");
    if (ct.type !== "application/problem+json") {
      errors.push(`${label}: Content-Type is '${seen.headers.get("content-type")}', not application/problem+json`);
      return errors;
    }
    let body: unknown;
    try {
      body = JSON.parse(seen.bodyText);
    } catch {
      errors.push(`${label}: body is not JSON: ${seen.bodyText.slice(0, 200)}`);
      return errors;
    }
    for (const e of this.validateAt("/components/schemas/Problem", body)) errors.push(`${label}: body ${e}`);
    const problem = body as { status?: unknown; code?: unknown; type?: unknown };
    if (problem.status !== seen.status) errors.push(`${label}: problem status ${String(problem.status)} != HTTP status`);
    if (problem.code !== expectedCode) errors.push(`${label}: problem code ${String(problem.code)} != ${expectedCode}`);
    if (problem.type !== `urn:sbx:problem:${String(problem.code)}`) errors.push(`${label}: type does not end in code`);
    return errors;
  }

  private checkRequestIdHeader(seen: SeenResponse, label: string): string[] {
    const value = seen.headers.get("x-request-id");
    if (value === null) return [`${label}: no X-Request-Id header`];
    return this.validateAt("/components/schemas/RequestId", value).map((e) => `${label}: X-Request-Id '${value}' ${e}`);
  }

  /**
   * Checks one response against the operation METHOD template in the spec. Returns the list of
   * differences (empty when the response is exactly what the spec describes).
   */
  check(seen: SeenResponse): string[] {
    const method = seen.method.toLowerCase();
    const label = `${seen.method.toUpperCase()} ${seen.template} -> ${seen.status}`;
    const paths = this.doc["paths"] as JsonObject;
    const item = paths[seen.template] as JsonObject | undefined;
    const op = item?.[method] as JsonObject | undefined;
    if (!op) return [`${label}: the spec has no such operation`];
    const responses = op["responses"] as JsonObject;
    const raw = responses[String(seen.status)];
    if (raw === undefined) {
      return [`${label}: status not described by the spec (body: ${seen.bodyText.slice(0, 300)})`];
    }
    const opPointer = `/paths/${escapePointer(seen.template)}/${method}/responses/${seen.status}`;
    const { node: response, pointer } = this.deref(raw, opPointer);
    const errors: string[] = [];

    // Every response carries X-Request-Id, described or not (API.md); then the declared headers.
    errors.push(...this.checkRequestIdHeader(seen, label));
    const headers = (response["headers"] ?? {}) as JsonObject;
    for (const [name, rawHeader] of Object.entries(headers)) {
      const { node: header, pointer: headerPointer } = this.deref(rawHeader, `${pointer}/headers/${escapePointer(name)}`);
      const value = seen.headers.get(name);
      if (value === null) {
        if (header["required"] === true) errors.push(`${label}: required header ${name} missing`);
        continue;
      }
      for (const e of this.validateAt(`${headerPointer}/schema`, value)) errors.push(`${label}: header ${name}: ${e}`);
    }

    const content = response["content"] as JsonObject | undefined;
    if (!content) {
      if (seen.bodyText.length > 0) errors.push(`${label}: the spec describes no body, got '${seen.bodyText.slice(0, 200)}'`);
      return errors;
    }
    const ctHeader = seen.headers.get("content-type");
    if (ctHeader === null) return [...errors, `${label}: no Content-Type`];
    const got = parseMediaType(ctHeader);
    // A described media type matches when the type is equal and every parameter it names has
    // the same value (extra parameters such as charset are allowed).
    const mediaKey = Object.keys(content).find((key) => {
      const want = parseMediaType(key);
      if (want.type !== got.type) return false;
      for (const [name, val] of want.params) if (got.params.get(name) !== val) return false;
      return true;
    });
    if (mediaKey === undefined) {
      return [...errors, `${label}: Content-Type '${ctHeader}' is not one of ${Object.keys(content).join(", ")}`];
    }
    const schemaPointer = `${pointer}/content/${escapePointer(mediaKey)}/schema`;
    let body: unknown = seen.bodyText;
    if (got.type === "application/json" || got.type.endsWith("+json")) {
      try {
        body = JSON.parse(seen.bodyText);
      } catch {
        return [...errors, `${label}: body is not JSON: ${seen.bodyText.slice(0, 200)}`];
      }
    }
    for (const e of this.validateAt(schemaPointer, body)) errors.push(`${label}: body ${e}`);
    if (got.type === "application/problem+json" && body && typeof body === "object") {
      const problem = body as { status?: unknown; code?: unknown; type?: unknown };
      if (problem.status !== seen.status) errors.push(`${label}: problem status ${String(problem.status)} != HTTP status`);
      if (problem.type !== `urn:sbx:problem:${String(problem.code)}`) errors.push(`${label}: problem type does not end in its code`);
    }
    return errors;
  }
}
