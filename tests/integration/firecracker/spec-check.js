// spec-check.js: decides, from Firecracker's own API description (Swagger 2.0, read from
// ../shared/firecracker/firecracker.yaml), whether Firecracker would accept a request: the path
// and method must exist, the body must be JSON matching the operation's schema (required fields,
// types, enums, bounds, and no unknown fields where a definition lists its properties: Firecracker
// deserialises with serde's deny_unknown_fields). Used by the API stand-in and by its own tests.
'use strict';

const fs = require('fs');
const path = require('path');
const yaml = require('js-yaml');

// The project root is three levels up; the spec lives next to the project, never inside it.
const DEFAULT_SPEC = path.resolve(__dirname, '..', '..', '..', '..', 'shared', 'firecracker',
  'firecracker.yaml');

function loadSpec(file = process.env.FC_SPEC || DEFAULT_SPEC) {
  const spec = yaml.load(fs.readFileSync(file, 'utf8'));
  if (!spec || spec.swagger !== '2.0' || !spec.paths || !spec.definitions)
    throw new Error(`${file} is not a Swagger 2.0 description with paths and definitions`);
  const routes = Object.entries(spec.paths).map(([template, ops]) => {
    const names = [];
    const source = template.replace(/[.*+?^$()|[\]\\]/g, '\\$&')
      .replace(/\{([^}]+)\}/g, (_, name) => { names.push(name); return '([^/]+)'; });
    return { template, ops, names, regex: new RegExp(`^${source}$`) };
  });
  return { file, spec, routes };
}

function resolveRef(spec, schema) {
  const seen = new Set();
  while (schema && schema.$ref) {
    if (seen.has(schema.$ref)) throw new Error(`circular $ref ${schema.$ref}`);
    seen.add(schema.$ref);
    const m = /^#\/definitions\/(.+)$/.exec(schema.$ref);
    if (!m || !spec.definitions[m[1]]) throw new Error(`unresolvable $ref ${schema.$ref}`);
    schema = spec.definitions[m[1]];
  }
  return schema;
}

function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value} (${JSON.stringify(value)})`;
}

// Appends to errors every way value breaks schema; where is the JSON path for messages.
function validate(spec, schemaOrRef, value, where, errors) {
  const schema = resolveRef(spec, schemaOrRef);
  if (!schema) return;
  const type = schema.type || (schema.properties ? 'object' : undefined);
  switch (type) {
    case 'object': {
      if (value === null || typeof value !== 'object' || Array.isArray(value)) {
        errors.push(`${where}: expected an object, got ${describe(value)}`);
        return;
      }
      for (const field of schema.required || [])
        if (!(field in value)) errors.push(`${where}: missing required field "${field}"`);
      const props = schema.properties || {};
      for (const [key, child] of Object.entries(value)) {
        if (key in props) validate(spec, props[key], child, `${where}.${key}`, errors);
        else if (schema.additionalProperties && typeof schema.additionalProperties === 'object')
          validate(spec, schema.additionalProperties, child, `${where}.${key}`, errors);
        else if (schema.properties && schema.additionalProperties !== true)
          errors.push(`${where}: unknown field "${key}"`);
      }
      break;
    }
    case 'array':
      if (!Array.isArray(value)) { errors.push(`${where}: expected an array, got ${describe(value)}`); return; }
      if (schema.items) value.forEach((item, i) => validate(spec, schema.items, item, `${where}[${i}]`, errors));
      break;
    case 'integer':
      if (typeof value !== 'number' || !Number.isInteger(value)) {
        errors.push(`${where}: expected an integer, got ${describe(value)}`);
        return;
      }
      break;
    case 'number':
      if (typeof value !== 'number') { errors.push(`${where}: expected a number, got ${describe(value)}`); return; }
      break;
    case 'string':
      if (typeof value !== 'string') { errors.push(`${where}: expected a string, got ${describe(value)}`); return; }
      break;
    case 'boolean':
      if (typeof value !== 'boolean') { errors.push(`${where}: expected a boolean, got ${describe(value)}`); return; }
      break;
    default:
      break;
  }
  if (schema.enum && !schema.enum.some((allowed) => allowed === value))
    errors.push(`${where}: ${JSON.stringify(value)} is not one of ${schema.enum.join(', ')}`);
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum)
      errors.push(`${where}: ${value} is below the minimum ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum)
      errors.push(`${where}: ${value} is above the maximum ${schema.maximum}`);
  }
}

// Checks one request. Returns {ok: true, template, params, body} or {ok: false, fault}.
function checkRequest(loaded, method, url, bodyText) {
  const { spec, routes } = loaded;
  const pathOnly = url.split('?')[0];
  const verb = method.toLowerCase();
  const route = routes.find((r) => r.regex.test(pathOnly));
  const op = route && route.ops[verb];
  if (!op)
    return { ok: false, fault: `Invalid request method and/or path: ${method} ${pathOnly}.` };
  const match = route.regex.exec(pathOnly);
  const params = {};
  route.names.forEach((name, i) => { params[name] = decodeURIComponent(match[i + 1]); });
  const bodyParam = (op.parameters || []).find((p) => p.in === 'body');
  const errors = [];
  for (const p of op.parameters || [])
    if (p.in === 'path' && (p.required && !params[p.name]))
      errors.push(`path parameter ${p.name} is missing`);
  let body;
  const hasBody = bodyText !== undefined && bodyText.length > 0;
  if (!bodyParam) {
    if (hasBody) errors.push(`${method} ${route.template} takes no body`);
  } else if (!hasBody) {
    if (bodyParam.required) errors.push('the request has no body');
  } else {
    try {
      body = JSON.parse(bodyText);
    } catch (e) {
      return { ok: false, fault: `An error occurred when deserializing the json body of a request: ${e.message}` };
    }
    validate(spec, bodyParam.schema, body, 'body', errors);
  }
  if (errors.length > 0)
    return { ok: false, fault: `An error occurred when deserializing the json body of a request: ${errors.join('; ')}` };
  return { ok: true, template: route.template, params, body };
}

module.exports = { loadSpec, checkRequest, validate, DEFAULT_SPEC };
