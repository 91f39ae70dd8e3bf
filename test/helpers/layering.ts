import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import ts from 'typescript';

/**
 * The layering check, as a function that runs on any tree (the repository's src/, or a fixture):
 * the TypeScript compiler's own parser reads every import, re-export, side-effect import, dynamic
 * import(), require(), `import('…')` type and `new URL('…', import.meta.url)` of each .ts file;
 * python's own parser (the `ast` module) reads each helper's imports and its sys.path changes.
 * Strings that name another folder's file (a relative path, or an asset's file name) count as
 * couplings too. It returns one line per problem; none means the tree keeps the rules.
 */
export interface LayeringRules {
  /** Folder under the root → its layer: a folder may use only folders of a lower layer. */
  layers: Readonly<Record<string, number>>;
  /**
   * Places outside the root that belong to a folder, relative to the root's parent (the repository):
   * `bin` belongs to `cli` (bin/atelier runs the CLI), so naming it from the server is an upward coupling.
   */
  outside?: Readonly<Record<string, string>>;
  /** The npm package's own name: importing oneself by name would bypass every rule here. */
  packageName?: string;
  /**
   * Places where a specifier or path is computed, each with why it is safe: `file` (relative to
   * the root) and `expr` (the expression's source text). A listed entry that no longer matches
   * anything is reported too, so the list cannot rot.
   */
  computed?: readonly { file: string; expr: string; why: string }[];
  /**
   * Strings naming another folder's file that are known and owned elsewhere (each with why and
   * who removes it): `file` and the exact `text`. Reported when no longer there, like `computed`.
   */
  couplings?: readonly { file: string; text: string; why: string }[];
  /** Python: the one shared directory the helpers import from, and how it reaches them. */
  python?: {
    /** The folder that holds the shared modules (e.g. `core`). */
    sharedFolder: string;
    /** The environment variable the spawner sets to that directory (the helpers run with `python3 -I`). */
    env: string;
    /**
     * What a spawner calls to set it (e.g. `pythonLibEnv`): a helper that reads the variable must be
     * named by some .ts file (its spawner), and every such file must call this.
     */
    spawnerCall: string;
  };
}

interface Ref {
  /** Where, for the message: file:line. */
  at: string;
  kind: string;
  spec: string;
}

function walk(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir).sort()) {
    if (e === 'node_modules' || e === '__pycache__') continue;
    const full = join(dir, e);
    if (statSync(full).isDirectory()) walk(full, out);
    else out.push(full);
  }
  return out;
}

function isImportMetaUrl(node: ts.Node): boolean {
  return (
    ts.isPropertyAccessExpression(node) &&
    node.name.text === 'url' &&
    ts.isMetaProperty(node.expression) &&
    node.expression.keywordToken === ts.SyntaxKind.ImportKeyword
  );
}

function literalText(node: ts.Node | undefined): string | undefined {
  if (node && (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node))) return node.text;
  return undefined;
}

/** Every string a .ts file's code holds (literals and the fixed parts of templates), with its line. */
interface Str {
  line: number;
  text: string;
}

interface TsScan {
  refs: Ref[];
  computed: { line: number; expr: string; kind: string }[];
  strings: Str[];
  /** Literal arguments of path.join()/resolve() calls, joined: `join(here, '..', 'core')` → `../core`. */
  joined: Str[];
  /** Names of the functions this file calls. */
  calls: Set<string>;
}

function scanTs(file: string, text: string): TsScan {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const scan: TsScan = { refs: [], computed: [], strings: [], joined: [], calls: new Set() };
  const lineOf = (n: ts.Node): number => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
  // Specifiers are checked as what they are (an import, a URL), not again as plain strings.
  const specifiers = new Set<ts.Node>();
  const ref = (n: ts.Node, kind: string, spec: ts.Node | undefined): void => {
    if (spec) specifiers.add(spec);
    const lit = literalText(spec);
    if (lit !== undefined) scan.refs.push({ at: `${lineOf(n)}`, kind, spec: lit });
    else scan.computed.push({ line: lineOf(n), expr: spec ? spec.getText(sf) : '(nothing)', kind });
  };
  const visit = (n: ts.Node): void => {
    if (ts.isImportDeclaration(n))
      ref(n, n.importClause?.isTypeOnly ? 'import type' : n.importClause ? 'import' : 'side-effect import', n.moduleSpecifier);
    else if (ts.isExportDeclaration(n) && n.moduleSpecifier) ref(n, 're-export', n.moduleSpecifier);
    else if (ts.isImportEqualsDeclaration(n) && ts.isExternalModuleReference(n.moduleReference))
      ref(n, 'import = require', n.moduleReference.expression);
    else if (ts.isImportTypeNode(n) && ts.isLiteralTypeNode(n.argument)) ref(n, 'import() type', n.argument.literal);
    else if (ts.isCallExpression(n)) {
      const callee = n.expression;
      if (callee.kind === ts.SyntaxKind.ImportKeyword) ref(n, 'dynamic import()', n.arguments[0]);
      else if (ts.isIdentifier(callee) && callee.text === 'require') ref(n, 'require()', n.arguments[0]);
      else if (
        ts.isPropertyAccessExpression(callee) &&
        ts.isIdentifier(callee.expression) &&
        callee.expression.text === 'require' &&
        callee.name.text === 'resolve'
      )
        ref(n, 'require.resolve()', n.arguments[0]);
      const name = ts.isIdentifier(callee) ? callee.text : ts.isPropertyAccessExpression(callee) ? callee.name.text : '';
      scan.calls.add(name);
      if (name === 'join' || name === 'resolve') {
        const parts = n.arguments.map((a) => literalText(a));
        const first = parts.findIndex((p) => p !== undefined);
        // Only literals after a computed base (the module's own directory, typically) form a path.
        if (first > 0 && parts.slice(first).every((p) => p !== undefined))
          scan.joined.push({ line: lineOf(n), text: parts.slice(first).join('/') });
      }
    } else if (
      ts.isNewExpression(n) &&
      ts.isIdentifier(n.expression) &&
      n.expression.text === 'URL' &&
      n.arguments &&
      n.arguments[1] &&
      isImportMetaUrl(n.arguments[1])
    )
      ref(n, 'new URL(…, import.meta.url)', n.arguments[0]);
    if (specifiers.has(n)) return;
    if (ts.isStringLiteral(n) || ts.isNoSubstitutionTemplateLiteral(n)) scan.strings.push({ line: lineOf(n), text: n.text });
    else if (ts.isTemplateExpression(n)) {
      scan.strings.push({ line: lineOf(n), text: n.head.text });
      for (const s of n.templateSpans) scan.strings.push({ line: lineOf(s), text: s.literal.text });
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return scan;
}

/** Python's own parser, run once over every helper: imports, sys.path changes, strings, path joins. */
const PY_SCAN = String.raw`
import ast, json, sys
out = {}
for path in sys.argv[1:]:
    r = {"imports": [], "syspath": [], "strings": [], "joined": [], "error": None}
    try:
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
    except SyntaxError as e:
        r["error"] = "%s (line %s)" % (e.msg, e.lineno)
        out[path] = r
        continue
    def dotted(n):
        parts = []
        while isinstance(n, ast.Attribute):
            parts.append(n.attr); n = n.value
        if isinstance(n, ast.Name):
            parts.append(n.id); return ".".join(reversed(parts))
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names: r["imports"].append({"line": n.lineno, "module": a.name, "level": 0})
        elif isinstance(n, ast.ImportFrom):
            r["imports"].append({"line": n.lineno, "module": n.module or "", "level": n.level})
        elif isinstance(n, ast.Call):
            f = dotted(n.func) or ""
            if f in ("__import__", "importlib.import_module", "import_module") or f.endswith("spec_from_file_location") or f.endswith("SourceFileLoader") or f in ("runpy.run_path", "exec", "execfile"):
                arg = n.args[0] if n.args else None
                lit = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
                r["imports"].append({"line": n.lineno, "module": lit, "level": 0, "call": f})
            if f.startswith("sys.path.") or f in ("site.addsitedir", "addsitedir"):
                r["syspath"].append({"line": n.lineno, "source": ast.get_source_segment(open(path, encoding="utf-8").read(), n)})
            if f.endswith("path.join") or f == "join":
                lits = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in n.args]
                idx = next((i for i, v in enumerate(lits) if v is not None), -1)
                if idx > 0 and all(v is not None for v in lits[idx:]): r["joined"].append({"line": n.lineno, "text": "/".join(lits[idx:])})
        elif isinstance(n, (ast.Assign, ast.AugAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                if dotted(t) == "sys.path" or (isinstance(t, ast.Subscript) and dotted(t.value) == "sys.path"):
                    r["syspath"].append({"line": n.lineno, "source": "sys.path = ..."})
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            r["strings"].append({"line": n.lineno, "text": n.value})
    # Docstrings and comments describe; only code couples.
    for node in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]:
        doc = ast.get_docstring(node, clean=False)
        if doc is not None:
            r["strings"] = [s for s in r["strings"] if s["text"] != doc]
    out[path] = r
json.dump({"stdlib": sorted(sys.stdlib_module_names), "files": out}, sys.stdout)
`;

interface PyScan {
  stdlib: string[];
  files: Record<
    string,
    {
      imports: { line: number; module: string | null; level: number; call?: string }[];
      syspath: { line: number; source: string }[];
      strings: Str[];
      joined: Str[];
      error: string | null;
    }
  >;
}

/** Runs the check over `root` (a tree of folders, each a layer) and returns the problems found. */
export function checkLayering(root: string, rules: LayeringRules): string[] {
  const problems: string[] = [];
  const repo = dirname(root);
  const all = walk(root);
  const folderOf = (abs: string): string | undefined => {
    const rel = relative(root, abs);
    if (rel.startsWith('..') || rel === '') return undefined;
    return rel.split(sep)[0];
  };
  /** The folder a path outside the root belongs to (rules.outside), if any. */
  const outsideOwner = (abs: string): string | undefined => {
    const rel = relative(repo, abs).split(sep).join('/');
    for (const [prefix, folder] of Object.entries(rules.outside ?? {})) if (rel === prefix || rel.startsWith(`${prefix}/`)) return folder;
    return undefined;
  };
  const name = (abs: string): string => relative(root, abs).split(sep).join('/');

  // Files that are not code (python helpers, SQL, data): their names, by folder. A string that
  // names one of another folder's is a coupling by file name.
  const assets = new Map<string, Set<string>>();
  for (const f of all) {
    if (f.endsWith('.ts') || !folderOf(f)) continue;
    const b = basename(f);
    if (!assets.has(b)) assets.set(b, new Set());
    assets.get(b)!.add(folderOf(f)!);
  }

  for (const f of all) {
    const folder = folderOf(f);
    if (folder === undefined) continue;
    if (!(folder in rules.layers)) {
      problems.push(`${name(f)}: folder ${folder} has no layer (add it to the table, as DESIGN.md orders it)`);
      continue;
    }
  }
  const seenComputed = new Set<string>();
  const tsScans = new Map<string, TsScan>();

  /** A path (absolute) used from `from` (a file in folder `folder`): is it another folder's, and allowed? */
  const checkTarget = (from: string, folder: string, where: string, what: string, target: string, viaIndexOnly: boolean): void => {
    const to = folderOf(target) ?? outsideOwner(target);
    if (to === undefined || to === folder) return;
    const rel = relative(root, target).startsWith('..') ? relative(repo, target) : name(target);
    const lf = rules.layers[folder];
    const lt = rules.layers[to];
    if (lt === undefined) problems.push(`${where}: ${what} ${rel}: folder ${to} has no layer`);
    else if (lf !== undefined && lt >= lf)
      problems.push(`${where}: ${what} ${rel}: ${folder} (layer ${lf}) may not use ${to} (layer ${lt})`);
    if (viaIndexOnly && folderOf(target) !== undefined && name(target) !== `${to}/index.js` && name(target) !== `${to}/index.ts`)
      problems.push(`${where}: ${what} ${rel}: enter ${to} through ${to}/index.js only`);
    else if (!viaIndexOnly) problems.push(`${where}: ${what} names ${rel}, a file of ${to}: ask ${to}'s index.ts for it instead`);
  };

  const seenCouplings = new Set<string>();
  /** A string in code that names another folder's file: a relative path, or an asset's name. */
  const checkString = (from: string, folder: string, where: string, text: string, joined: boolean): void => {
    if (rules.couplings?.some((c) => c.file === name(from) && c.text === text)) {
      seenCouplings.add(`${name(from)}\0${text}`);
      return;
    }
    if (/^\.\.?(\/|$)/.test(text)) {
      const target = resolve(dirname(from), text);
      const to = folderOf(target);
      if (to !== folder && (to === undefined || to in rules.layers || existsSync(join(root, to)))) {
        // An upward path that stays in the repository and lands in another folder (or a place owned by one).
        checkTarget(from, folder, where, joined ? 'path' : 'string', target, false);
        return;
      }
    }
    for (const [asset, owners] of assets) {
      if (owners.has(folder)) continue;
      if (text === asset || text.endsWith(`/${asset}`)) {
        problems.push(`${where}: string ${JSON.stringify(text)} names ${asset}, a file of ${[...owners].join(', ')}`);
      }
    }
  };

  // TypeScript.
  for (const f of all) {
    const folder = folderOf(f);
    // Unit tests beside their source are not part of the build (tsconfig.build.json leaves them
    // out): they may use any folder to check it. Product code importing a test is still caught.
    if (folder === undefined || !(folder in rules.layers) || !f.endsWith('.ts') || f.endsWith('.test.ts')) continue;
    const scan = scanTs(f, readFileSync(f, 'utf8'));
    tsScans.set(f, scan);
    for (const r of scan.refs) {
      const where = `${name(f)}:${r.at}`;
      if (r.spec.startsWith('.')) {
        checkTarget(f, folder, where, r.kind, resolve(dirname(f), r.spec), r.kind !== 'new URL(…, import.meta.url)');
      } else if (r.spec.startsWith('/') || r.spec.startsWith('file:')) {
        const target = r.spec.startsWith('file:') ? new URL(r.spec).pathname : r.spec;
        if (folderOf(target) !== undefined || outsideOwner(target)) checkTarget(f, folder, where, r.kind, target, true);
        else problems.push(`${where}: ${r.kind} of an absolute path ${r.spec}: use a relative one`);
      } else if (r.spec.startsWith('#')) {
        problems.push(`${where}: ${r.kind} ${r.spec}: package.json "imports" aliases hide which folder is used; use a relative path`);
      } else if (rules.packageName && (r.spec === rules.packageName || r.spec.startsWith(`${rules.packageName}/`))) {
        problems.push(`${where}: ${r.kind} ${r.spec}: the package imports itself by name; use a relative path`);
      }
    }
    for (const c of scan.computed) {
      const key = `${name(f)}\0${c.expr}`;
      if (rules.computed?.some((e) => e.file === name(f) && e.expr === c.expr)) {
        seenComputed.add(key);
        continue;
      }
      problems.push(`${name(f)}:${c.line}: ${c.kind} of a computed specifier (${c.expr}): write it as a literal, or list it with why`);
    }
    for (const s of scan.strings) checkString(f, folder, `${name(f)}:${s.line}`, s.text, false);
    for (const s of scan.joined) checkString(f, folder, `${name(f)}:${s.line}`, s.text, true);
  }
  for (const e of rules.computed ?? [])
    if (!seenComputed.has(`${e.file}\0${e.expr}`))
      problems.push(`${e.file}: listed computed specifier ${e.expr} is no longer there: remove it from the list`);

  // Python.
  const py = all.filter((f) => f.endsWith('.py') && folderOf(f) !== undefined);
  if (py.length > 0) {
    const scan = JSON.parse(
      execFileSync('/usr/bin/python3', ['-I', '-S', '-c', PY_SCAN, ...py], { encoding: 'utf8', maxBuffer: 64 << 20 }),
    ) as PyScan;
    const stdlib = new Set(scan.stdlib);
    const shared = rules.python ? join(root, rules.python.sharedFolder) : undefined;
    const sanctioned = rules.python ? `sys.path.insert(0, os.environ["${rules.python.env}"])` : undefined;
    for (const f of py) {
      const folder = folderOf(f)!;
      if (!(folder in rules.layers)) continue;
      const r = scan.files[f]!;
      const at = (line: number): string => `${name(f)}:${line}`;
      if (r.error) {
        problems.push(`${name(f)}: python cannot parse it: ${r.error}`);
        continue;
      }
      let usesShared = false;
      for (const p of r.syspath) {
        if (sanctioned && p.source === sanctioned) usesShared = true;
        else
          problems.push(
            `${at(p.line)}: changes sys.path (${p.source}): ${sanctioned ? `only \`${sanctioned}\` is allowed` : 'helpers import from their own folder only'}`,
          );
      }
      for (const imp of r.imports) {
        if (imp.module === null) {
          problems.push(`${at(imp.line)}: ${imp.call} of a computed name: import modules by name`);
          continue;
        }
        if (imp.call && imp.call !== '__import__' && !imp.call.endsWith('import_module')) {
          // Loading a file by path: the path string is what couples.
          checkString(f, folder, at(imp.line), imp.module, false);
          continue;
        }
        if (imp.level > 0) {
          problems.push(`${at(imp.line)}: relative import (level ${imp.level}): helpers are scripts, not packages`);
          continue;
        }
        const top = imp.module.split('.')[0]!;
        if (stdlib.has(top)) continue;
        const own = existsSync(join(dirname(f), `${top}.py`)) || existsSync(join(dirname(f), top, '__init__.py'));
        const inShared = shared !== undefined && (existsSync(join(shared, `${top}.py`)) || existsSync(join(shared, top, '__init__.py')));
        if (inShared && (usesShared || folder === rules.python!.sharedFolder)) {
          const lf = rules.layers[folder]!;
          const lt = rules.layers[rules.python!.sharedFolder]!;
          if (folder !== rules.python!.sharedFolder && lt >= lf)
            problems.push(`${at(imp.line)}: imports ${top} of ${rules.python!.sharedFolder} (layer ${lt}) from ${folder} (layer ${lf})`);
          continue;
        }
        if (inShared) {
          problems.push(`${at(imp.line)}: imports ${top} of ${rules.python!.sharedFolder} without \`${sanctioned}\` before it`);
          continue;
        }
        if (own && folder === rules.python?.sharedFolder) continue;
        if (own) {
          problems.push(
            `${at(imp.line)}: imports ${top} beside it: put shared python in ${rules.python?.sharedFolder ?? 'one shared folder'}`,
          );
          continue;
        }
        const elsewhere = py.find((p) => basename(p) === `${top}.py`);
        problems.push(
          elsewhere
            ? `${at(imp.line)}: imports ${top}, a module of ${folderOf(elsewhere)}`
            : `${at(imp.line)}: imports ${top}, which is neither the standard library nor a module of ${rules.python?.sharedFolder ?? 'this tree'}`,
        );
      }
      if (usesShared && rules.python) {
        // The variable must be set by whoever starts the helper: the .ts files that name it.
        const helper = basename(f);
        const names = (t: TsScan): boolean =>
          [...t.refs.map((x) => x.spec), ...t.strings.map((x) => x.text)].some((x) => x === helper || x.endsWith(`/${helper}`));
        const spawners = [...tsScans].filter(([, t]) => names(t));
        if (spawners.length === 0) problems.push(`${name(f)}: reads ${rules.python.env} but no .ts file names it (who starts it?)`);
        for (const [file, t] of spawners)
          if (!t.calls.has(rules.python.spawnerCall))
            problems.push(`${name(file)}: starts ${helper} without ${rules.python.spawnerCall}(): the helper needs ${rules.python.env}`);
      }
      for (const s of r.strings) checkString(f, folder, at(s.line), s.text, false);
      for (const s of r.joined) checkString(f, folder, at(s.line), s.text, true);
    }
  }
  for (const c of rules.couplings ?? [])
    if (!seenCouplings.has(`${c.file}\0${c.text}`))
      problems.push(`${c.file}: listed coupling ${JSON.stringify(c.text)} is no longer there: remove it from the list`);
  return problems;
}
