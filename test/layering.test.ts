import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { checkLayering, type LayeringRules } from './helpers/layering.js';
import { REPO_ROOT } from './helpers/server.js';

/**
 * DESIGN.md: core ← db ← {sandbox, egress, simulators, approvals, actions, identity} ← workshops
 * ← terminals ← mcp ← server ← cli; relay (the byte relay runtime: the egress proxy, terminals
 * and the CLI's port-forward use it) sits beside db. mcp sits below server since it holds the in-workshop MCP
 * endpoint that the server wires (src/mcp/index.ts); nothing imports server or cli. A folder of
 * the table may not exist yet (terminals is being made): the check covers what is there.
 */
const LAYERS: Readonly<Record<string, number>> = {
  core: 0,
  db: 1,
  relay: 1,
  sandbox: 2,
  egress: 2,
  simulators: 2,
  approvals: 2,
  actions: 2,
  identity: 2,
  workshops: 3,
  terminals: 4,
  mcp: 5,
  server: 6,
  sdk: 1,
  cli: 7,
};

const RULES: LayeringRules = {
  layers: LAYERS,
  // bin/atelier runs the CLI: naming it from below is a coupling to the CLI.
  outside: { bin: 'cli' },
  packageName: 'atelier',
  computed: [
    {
      file: 'simulators/catalog/localstack.ts',
      expr: '`${pkg}/package.json`',
      why: 'a backend package (dynalite, local-aws-sqs…) by name: never a file of ours',
    },
    {
      file: 'relay/splice.ts',
      expr: 'rel',
      why: "one of two literal places of splice-relay.py, both in relay (beside it, or beside the CLI's bundle)",
    },
  ],
  couplings: [],
  python: { sharedFolder: 'core', env: 'ATELIER_PYTHON_LIB', spawnerCall: 'pythonLibEnv' },
};

describe('module boundaries', () => {
  it('src/ keeps the layering: imports (of every kind), asset paths, file names and python helpers', () => {
    assert.deepEqual(checkLayering(join(REPO_ROOT, 'src'), RULES), []);
  });
});
