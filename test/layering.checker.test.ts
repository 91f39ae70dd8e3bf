import { describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { checkLayering, type LayeringRules } from './helpers/layering.js';

// Each trick a file could use to reach past the layering, in a small tree of its own: the
// checker must name it. The same tree without the trick must pass, so each case can fail.

const RULES: LayeringRules = {
  layers: { core: 0, db: 1, egress: 2, approvals: 2, workshops: 3, server: 6, cli: 7 },
  outside: { bin: 'cli' },
  packageName: 'atelier',
  python: { sharedFolder: 'core', env: 'ATELIER_PYTHON_LIB', spawnerCall: 'pythonLibEnv' },
};

/** A repository with src/ holding `files` (plus an index.ts per folder) and bin/atelier; removed after the test. */
function tree(t: TestContext, files: Record<string, string>): string {
  const repo = mkdtempSync(join(tmpdir(), 'atelier-layering-'));
  t.after(() => rmSync(repo, { recursive: true, force: true }));
  const base: Record<string, string> = {
    'core/index.ts': 'export const core = 1;\n',
    'core/ids.ts': 'export const id = 1;\n',
    'core/shared.py': 'def hello():\n    return 1\n',
    'db/index.ts': "import { core } from '../core/index.js';\nexport const db = core;\n",
    'egress/index.ts': 'export const egress = 1;\n',
    'approvals/index.ts': 'export const approvals = 1;\n',
    'workshops/index.ts': "import { db } from '../db/index.js';\nexport const workshops = db;\n",
    'server/index.ts': "import { workshops } from '../workshops/index.js';\nexport const server = workshops;\n",
    'server/holder.py': 'print(1)\n',
    'cli/index.ts': "import { server } from '../server/index.js';\nexport const cli = server;\n",
  };
  for (const [path, text] of Object.entries({ ...base, ...files })) {
    const full = path.startsWith('/') ? join(repo, path) : join(repo, 'src', path);
    mkdirSync(dirname(full), { recursive: true });
    writeFileSync(full, text);
  }
  mkdirSync(join(repo, 'bin'), { recursive: true });
  writeFileSync(join(repo, 'bin', 'atelier'), "import('../dist/cli/index.js');\n");
  return join(repo, 'src');
}

/** The problems the checker finds in a tree where `file` holds `text`. */
function found(t: TestContext, file: string, text: string, rules: LayeringRules = RULES): string[] {
  return checkLayering(tree(t, { [file]: text }), rules);
}

function catches(t: TestContext, file: string, text: string, expected: RegExp, rules: LayeringRules = RULES): void {
  const problems = found(t, file, text, rules);
  assert.ok(
    problems.some((p) => expected.test(p)),
    `expected a problem matching ${expected} for ${file}:\n${text}\ngot:\n${problems.join('\n') || '(none)'}`,
  );
}

describe('the layering checker', () => {
  it('passes a tree that keeps the rules (so every case below can fail)', (t) => {
    assert.deepEqual(
      found(
        t,
        'workshops/ok.ts',
        [
          "import { db } from '../db/index.js';",
          'import { core } from "../core/index.js";',
          "import type { Pool } from 'pg';",
          "import { join } from 'node:path';",
          "// a comment naming '../server/index.js' or holder.py couples nothing",
          "export const url = new URL('./data.json', import.meta.url);",
          "export const m = () => import('./ok2.js');",
          "export const here = join('x', 'workshops');",
          'export const x = [db, core];',
        ].join('\n'),
      ),
      [],
    );
  });

  const upward = /workshops \(layer 3\) may not use server \(layer 6\)/;
  const cases: [string, string, RegExp][] = [
    ['a static import', "import { server } from '../server/index.js';", upward],
    ['a double-quoted import', 'import { server } from "../server/index.js";', upward],
    ['a side-effect import', "import '../server/index.js';", /side-effect import .*may not use server/],
    ['an import type', "import type { server } from '../server/index.js';", /import type .*may not use server/],
    ['a re-export', "export { server } from '../server/index.js';", /re-export .*may not use server/],
    ['an export *', "export * from '../server/index.js';", /re-export .*may not use server/],
    ['a dynamic import()', "export const m = () => import('../server/index.js');", /dynamic import\(\) .*may not use server/],
    ['a template-literal import()', 'export const m = () => import(`../server/index.js`);', /dynamic import\(\) .*may not use server/],
    ['an import() type', "export type S = typeof import('../server/index.js').server;", /import\(\) type .*may not use server/],
    ['import = require', "import s = require('../server/index.js');\nexport const x = s;", /import = require .*may not use server/],
    [
      'a require() through createRequire',
      "import { createRequire } from 'node:module';\nconst require = createRequire(import.meta.url);\nexport const s = require('../server/index.js');",
      /require\(\) .*may not use server/,
    ],
    [
      'reaching past a lower folder’s index',
      "import { id } from '../core/ids.js';\nexport const x = id;",
      /enter core through core\/index\.js only/,
    ],
    [
      'an asset URL into another folder',
      "export const h = new URL('../server/holder.py', import.meta.url);",
      /names server\/holder\.py, a file of server/,
    ],
    [
      'bin/atelier (the CLI) named by a URL',
      "export const cli = new URL('../../bin/atelier', import.meta.url);",
      /names bin\/atelier, a file of cli/,
    ],
    [
      'a path joined from literals',
      "import { join } from 'node:path';\nexport const h = join(import.meta.dirname, '..', 'server', 'holder.py');",
      /path names server\/holder\.py/,
    ],
    [
      'a string naming another folder’s file',
      "export const isHolder = (a: string) => a.endsWith('/holder.py');",
      /"\/holder\.py" names holder\.py, a file of server/,
    ],
    ['a relative path in a plain string', "export const p = '../server/index.js';", /string names server\/index\.js/],
    ['the package importing itself by name', "import 'atelier/dist/server/index.js';", /imports itself by name/],
    ['a package.json imports alias', "import '#server';", /"imports" aliases/],
    ['an absolute path into the tree', "import '/nowhere/src/server/index.js';", /absolute path/],
    [
      'a computed import()',
      "const name = '../server/index.js';\nexport const m = () => import(name);",
      /dynamic import\(\) of a computed specifier \(name\)/,
    ],
    [
      'a template import() with a substitution',
      "const f = 'server';\nexport const m = () => import(`../${f}/index.js`);",
      /computed specifier/,
    ],
  ];
  for (const [what, text, expected] of cases) it(`catches ${what}`, (t) => catches(t, 'workshops/trick.ts', text, expected));

  it('catches a peer import as a same-layer use', (t) => {
    catches(
      t,
      'approvals/trick.ts',
      "import { egress } from '../egress/index.js';\nexport const x = egress;",
      /approvals \(layer 2\) may not use egress \(layer 2\)/,
    );
  });

  it('lets a unit test beside its source use any folder, but not product code use a test', (t) => {
    assert.deepEqual(found(t, 'workshops/trick.test.ts', "import { server } from '../server/index.js';\nexport const x = server;"), []);
    catches(
      t,
      'workshops/trick.ts',
      "import { x } from '../core/ids.test.js';\nexport const y = x;",
      /enter core through core\/index\.js only/,
    );
  });

  it('catches a folder that has no layer', (t) => {
    catches(t, 'extra/index.ts', 'export const x = 1;\n', /folder extra has no layer/);
  });

  it('accepts a computed specifier only where it is listed with why, and reports a stale listing', (t) => {
    const text = "const name = 'yaml';\nexport const m = () => import(name);";
    const listed = { ...RULES, computed: [{ file: 'workshops/trick.ts', expr: 'name', why: 'a package by name' }] };
    assert.deepEqual(found(t, 'workshops/trick.ts', text, listed), []);
    catches(t, 'workshops/trick.ts', 'export const x = 1;', /listed computed specifier name is no longer there/, listed);
  });

  it('accepts a known coupling only where it is listed, and reports a stale listing', (t) => {
    const text = "export const isHolder = (a: string) => a.endsWith('/holder.py');";
    const listed = { ...RULES, couplings: [{ file: 'workshops/trick.ts', text: '/holder.py', why: 'being removed' }] };
    assert.deepEqual(found(t, 'workshops/trick.ts', text, listed), []);
    catches(t, 'workshops/trick.ts', 'export const x = 1;', /listed coupling "\/holder\.py" is no longer there/, listed);
  });

  describe('python helpers', () => {
    const sanctioned =
      'import os\nimport sys\n\nsys.path.insert(0, os.environ["ATELIER_PYTHON_LIB"])\nfrom shared import hello  # noqa: E402\n\nhello()\n';

    // What starts the helper: it names the file and passes the variable.
    const spawner = [
      "import { pythonLibEnv } from '../core/index.js';",
      "export const helper = new URL('./helper.py', import.meta.url);",
      'export const env = () => ({ PATH: "/usr/bin", ...pythonLibEnv() });',
    ].join('\n');
    const withSpawner = (t: TestContext, py: string, ts: string = spawner): string[] =>
      checkLayering(tree(t, { 'workshops/helper.py': py, 'workshops/spawn.ts': ts }), RULES);

    it('accept the shared directory named by the spawner, and the standard library', (t) => {
      assert.deepEqual(withSpawner(t, sanctioned), []);
    });

    it('catch a spawner that does not pass the variable, and a helper nobody starts', (t) => {
      const problems = withSpawner(t, sanctioned, spawner.replace('...pythonLibEnv() ', ''));
      assert.ok(
        problems.some((p) => /workshops\/spawn\.ts: starts helper\.py without pythonLibEnv\(\)/.test(p)),
        problems.join('\n'),
      );
      catches(t, 'workshops/helper.py', sanctioned, /reads ATELIER_PYTHON_LIB but no \.ts file names it/);
    });

    it('catch a sys.path change to a relative place', (t) => {
      catches(
        t,
        'workshops/helper.py',
        'import os\nimport sys\n\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "core"))\nfrom shared import hello  # noqa: E402\n',
        /changes sys\.path/,
      );
    });

    it('catch sys.path.append, assignment and site.addsitedir', (t) => {
      catches(t, 'workshops/helper.py', 'import sys\nsys.path.append("/x")\n', /changes sys\.path/);
      catches(t, 'workshops/helper.py', 'import sys\nsys.path[0:0] = ["/x"]\n', /changes sys\.path/);
      catches(t, 'workshops/helper.py', 'import site\nsite.addsitedir("/x")\n', /changes sys\.path/);
    });

    it('catch a shared module imported without the sanctioned path', (t) => {
      catches(t, 'workshops/helper.py', 'from shared import hello\nhello()\n', /imports shared of core without/);
    });

    it('catch an import of another folder’s helper', (t) => {
      catches(t, 'workshops/helper.py', 'import holder\n', /imports holder, a module of server/);
    });

    it('catch the shared folder used from a lower layer', (t) => {
      const rules = { ...RULES, python: { sharedFolder: 'server', env: 'ATELIER_PYTHON_LIB', spawnerCall: 'pythonLibEnv' } };
      catches(
        t,
        'workshops/helper.py',
        'import os\nimport sys\nsys.path.insert(0, os.environ["ATELIER_PYTHON_LIB"])\nimport holder  # noqa: E402\n',
        /imports holder of server \(layer 6\) from workshops \(layer 3\)/,
        rules,
      );
    });

    it('catch loading a file by path, a computed import and a path into another folder', (t) => {
      catches(
        t,
        'workshops/helper.py',
        'import importlib.util\nspec = importlib.util.spec_from_file_location("h", "../server/holder.py")\n',
        /names server\/holder\.py/,
      );
      catches(t, 'workshops/helper.py', 'name = "holder"\nm = __import__(name)\n', /__import__ of a computed name/);
      catches(
        t,
        'workshops/helper.py',
        'import os\np = os.path.join(os.path.dirname(__file__), "..", "server", "holder.py")\n',
        /path names server\/holder\.py/,
      );
      catches(t, 'workshops/helper.py', 'ok = "x".endswith("/holder.py")\n', /names holder\.py, a file of server/);
    });

    it('catch a helper python cannot parse', (t) => {
      catches(t, 'workshops/helper.py', 'def broken(:\n', /python cannot parse it/);
    });
  });
});
