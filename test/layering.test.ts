import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { REPO_ROOT } from './helpers/server.js';

// DESIGN.md: core ← db ← {sandbox, egress, simulators, approvals, actions, identity} ← workshops ← {server, mcp} ← cli.
const LAYER: Record<string, number> = {
  core: 0,
  db: 1,
  sandbox: 2,
  egress: 2,
  simulators: 2,
  approvals: 2,
  actions: 2,
  identity: 2,
  workshops: 3,
  server: 4,
  mcp: 4,
  sdk: 1,
  cli: 5,
};

function files(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir)) {
    const full = join(dir, e);
    if (statSync(full).isDirectory()) files(full, out);
    else if (e.endsWith('.ts') && !e.endsWith('.test.ts')) out.push(full);
  }
  return out;
}

describe('module boundaries', () => {
  const src = join(REPO_ROOT, 'src');
  const all = files(src);

  it('every folder is a known layer', () => {
    for (const f of all) {
      const folder = relative(src, f).split('/')[0]!;
      assert.ok(folder in LAYER, `src/${folder} is not in DESIGN.md's layout`);
    }
  });

  it('imports follow the dependency direction and enter other folders only through index.ts', () => {
    const problems: string[] = [];
    for (const f of all) {
      const from = relative(src, f).split('/')[0]!;
      for (const m of readFileSync(f, 'utf8').matchAll(/(?:from\s+|import\()\s*'(\.[^']+)'/g)) {
        const target = resolve(dirname(f), m[1]!);
        const rel = relative(src, target);
        if (rel.startsWith('..')) continue;
        const to = rel.split('/')[0]!;
        if (to === from) continue;
        if (LAYER[to]! >= LAYER[from]!) problems.push(`${relative(src, f)} imports ${to} (layer ${LAYER[to]} ≥ ${LAYER[from]})`);
        if (rel !== `${to}/index.js`) problems.push(`${relative(src, f)} reaches into ${rel} instead of ${to}/index.js`);
      }
    }
    assert.deepEqual(problems, []);
  });
});
