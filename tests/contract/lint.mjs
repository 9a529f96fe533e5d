// lint.mjs: lints an OpenAPI document with Redocly's rules and tests/contract/redocly.yaml, as
// `redocly lint --config redocly.yaml` does, through the lint engine the CLI itself calls
// (@redocly/openapi-core; the CLI's own packages, a documentation renderer among them, are not
// needed to lint). Prints each problem with its code frame and the totals; exits 1 when any rule
// configured as an error fails, 0 when only warnings remain, 2 on a usage or load error.
//
//   node lint.mjs OPENAPI_FILE
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import { formatProblems, getTotals, lint, loadConfig } from '@redocly/openapi-core';

const [file] = process.argv.slice(2);
if (!file) {
  process.stderr.write('usage: node lint.mjs OPENAPI_FILE\n');
  process.exit(2);
}

try {
  const here = dirname(fileURLToPath(import.meta.url));
  const config = await loadConfig({ configPath: join(here, 'redocly.yaml') });
  const problems = await lint({ ref: file, config });
  const totals = getTotals(problems);
  formatProblems(problems, { format: 'codeframe', totals, version: 'openapi-core', maxProblems: 1000 });
  process.stderr.write(`${file}: ${totals.errors} error(s), ${totals.warnings} warning(s)\n`);
  process.exit(totals.errors > 0 ? 1 : 0);
} catch (e) {
  process.stderr.write(`lint.mjs: ${e.stack || e}\n`);
  process.exit(2);
}
