// openapi_ops.mjs: the operations (path, method, security) declared in openapi.yaml, read with a
// small indentation-based reader (Node has no YAML parser built in and tests use built-ins only).
// It understands exactly the layout openapi.yaml uses: "paths:" at column 0, each path at two
// spaces, each method at four, an operation-level "security:" and "tags:" at six; an operation
// without security inherits the top-level security list. Operations tagged "Sandbox callbacks"
// are left out: the workers serve them (callback/), not the gateway, with a Sandbox's token.
import { readFileSync } from 'node:fs';

const METHODS = new Set(['get', 'post', 'put', 'patch', 'delete', 'head', 'options']);

// Security schemes named in a flow list such as "[{ adminToken: [] }]" or "[]".
function schemes(flow) {
  return [...flow.matchAll(/([A-Za-z]+)\s*:\s*\[\]/g)].map((m) => m[1]);
}

export function openapiOperations(file) {
  const lines = readFileSync(file, 'utf8').split('\n');
  const ops = [];
  let inPaths = false, path = null, op = null, globalSec = [], inGlobalSec = false;
  for (const line of lines) {
    if (/^\S/.test(line)) {
      inPaths = line.startsWith('paths:');
      inGlobalSec = line.startsWith('security:');
      if (inGlobalSec) globalSec = schemes(line);
      continue;
    }
    if (inGlobalSec) {
      const m = /^\s+-\s*([A-Za-z]+)\s*:\s*\[\]/.exec(line);
      if (m) globalSec.push(m[1]);
      continue;
    }
    if (!inPaths) continue;
    let m;
    if ((m = /^ {2}(\/\S*):\s*$/.exec(line))) { path = m[1]; op = null; continue; }
    if ((m = /^ {4}([a-z]+):\s*$/.exec(line)) && METHODS.has(m[1]) && path) {
      op = { path, method: m[1].toUpperCase(), security: null };
      ops.push(op);
      continue;
    }
    if ((m = /^ {6}security:\s*(.*)$/.exec(line)) && op) op.security = schemes(m[1]);
    if ((m = /^ {6}tags:\s*(.*)$/.exec(line)) && op) op.callback = m[1].includes('Sandbox callbacks');
  }
  for (const o of ops) if (o.security === null) o.security = [...globalSec];
  return ops.filter((o) => !o.callback).map(({ callback, ...o }) => o);
}
