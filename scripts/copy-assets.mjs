// After tsc: copies the SQL migrations and the netns helper beside the compiled code, then bundles the CLI client.
// The bundle (with the code cache bin/atelier keeps) makes every client command start much faster than loading hundreds of ES
// modules one by one. The server (`atelier server start`) is not bundled: the bundle imports
// dist/server/index.js as it is, so its dependencies load exactly as npm installed them.
import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

cpSync('src/db/migrations', 'dist/db/migrations', { recursive: true });
// The helper that opens each workshop's egress listener inside its network namespace.
cpSync('src/sandbox/netns-listen.py', 'dist/sandbox/netns-listen.py');
// The long-lived variant the terminals area keeps per workshop (port-forward, ssh -L).
cpSync('src/workshops/local/netns-connector.py', 'dist/workshops/local/netns-connector.py');
// The zero-copy relay of tunnels (src/relay/splice.ts; the CLI's bundle finds it in dist/relay).
cpSync('src/relay/splice-relay.py', 'dist/relay/splice-relay.py');
// Node's IPC channel for the python helpers above and below (each imports it from dist/core).
cpSync('src/core/node_ipc.py', 'dist/core/node_ipc.py');
// The small helper that forks the simulators' processes (a fork of the server costs 10–40 ms).
cpSync('src/simulators/spawner.py', 'dist/simulators/spawner.py');
// The process that holds an agent session's PTY (it outlives the server).
cpSync('src/terminals/session-holder.py', 'dist/terminals/session-holder.py');
// The system-call filter's loader, with the profile compiled in (scripts/build-seccomp.mjs).
await import('./build-seccomp.mjs');
rmSync('dist/bundle', { recursive: true, force: true });

/**
 * What keeps zod off a client command's path (docs/development.md, "How the CLI starts fast"):
 * building core's zod schemas (the API's, the route table's) was half of a command's start, and
 * the client validates nothing with them (the server does). Two things, in the bundle only:
 * - core's index is a lazy one: each export of a module of core that loads a package (zod) or an
 *   expensive built-in (crypto) loads that module when first read (core/index.js re-exports every
 *   module of core, and an ES module's imports are all evaluated before it, whatever is used of
 *   them); the others (errors, config, the client's configuration, files, yaml, the route table's
 *   projection…) are re-exported as they are, so a command reads them as plain bindings;
 * - core's route table is its projection without its zod schemas (query, body, response), made here
 *   from the built table itself, so that a path is still written once (src/core/routes.ts).
 */
function clientPath() {
  const core = fileURLToPath(new URL('../dist/core/', import.meta.url));
  return {
    name: 'client-path',
    setup(b) {
      b.onResolve({ filter: /(^|\/)core\/index\.js$/ }, (a) =>
        join(a.resolveDir, a.path) === join(core, 'index.js')
          ? { path: join(core, 'index.client.js'), namespace: 'client-path' }
          : undefined,
      );
      // The lazy part, required by the index above only.
      b.onResolve({ filter: /^\.\/index\.lazy\.cjs$/ }, (a) =>
        a.namespace === 'client-path' ? { path: join(core, 'index.lazy.cjs'), namespace: 'client-path' } : undefined,
      );
      let index;
      b.onLoad({ filter: /.*/, namespace: 'client-path' }, async (a) => {
        index ??= clientIndex(core);
        const { esm, lazy } = await index;
        return { contents: a.path.endsWith('.cjs') ? lazy : esm, loader: 'js', resolveDir: core };
      });
      b.onLoad({ filter: /\/dist\/core\/routes\.js$/ }, async (a) =>
        a.path === join(core, 'routes.js') ? { contents: await routesProjection(core), loader: 'js', resolveDir: core } : undefined,
      );
    },
  };
}

/**
 * The packages only some commands run (zod, pg, ws, the OIDC client, the MCP SDK: three quarters
 * of the code) are a second bundle, dist/bundle/vendor.cjs, that bin/atelier compiles (with a code
 * cache of its own) only when a command first reads one of them: the main bundle, which every
 * command reads and deserializes, keeps the CLI, core, the SDK, commander and yaml (a context's
 * config.yaml is read by most commands). Each package our code imports is a lazy shim here,
 * `__vendor("name")`, answered by the vendor bundle; within it, packages share one copy each.
 */
const VENDOR = /^(zod|pg|ws|openid-client|@modelcontextprotocol\/sdk\/[\w/.-]+)$/;
const vendored = new Set();
function vendorShims() {
  return {
    name: 'vendor-lazy',
    setup(b) {
      b.onResolve({ filter: VENDOR }, (a) => {
        if (a.importer.includes('/node_modules/')) return undefined;
        vendored.add(a.path);
        return { path: a.path, namespace: 'vendor' };
      });
      b.onLoad({ filter: /.*/, namespace: 'vendor' }, (a) => ({
        contents: `module.exports = __vendor(${JSON.stringify(a.path)});`,
        loader: 'js',
      }));
    },
  };
}

/**
 * Node built-ins that a module of the main bundle requires at its top level for a function only
 * some commands call: each is a lazy shim of those functions here, which requires the built-in when
 * first called. `child_process` (with `net`, `dgram` and their bindings) came with commander, which
 * spawns only executable subcommands (we have none); `crypto` with core's atomic write, which a
 * command reading its context never calls; `module` (with the ES module loader and source maps,
 * ~0.7 ms) with the CLI's secret store, which needs it only to find the OS keyring's native module.
 * A command that uses one still gets the real thing.
 * Keyed by the importer's path (its end) and the built-in; the functions are all that importer uses
 * of it (the build fails if one is missing: the shim would answer `undefined`).
 */
const LAZY_BUILTINS = [
  { importer: '/node_modules/commander/lib/command.js', builtin: 'node:child_process', names: ['spawn'] },
  { importer: '/dist/core/files.js', builtin: 'node:crypto', names: ['randomBytes'] },
  { importer: '/dist/cli/secrets.js', builtin: 'node:module', names: ['createRequire'] },
];
function lazyBuiltins() {
  return {
    name: 'lazy-builtins',
    setup(b) {
      b.onResolve({ filter: new RegExp(`^(${[...new Set(LAZY_BUILTINS.map((l) => l.builtin))].join('|')})$`) }, (a) => {
        // The shim's own require is the real built-in.
        if (a.namespace === 'lazy-builtin') return undefined;
        const lazy = LAZY_BUILTINS.find((l) => a.importer.endsWith(l.importer) && l.builtin === a.path);
        if (!lazy) return undefined;
        const used = builtinNamesUsed(readFileSync(a.importer, 'utf8'), a.path);
        if (!used) throw new Error(`${a.importer} imports ${a.path} in a way scripts/copy-assets.mjs cannot read: see LAZY_BUILTINS there`);
        const missing = used.filter((n) => !lazy.names.includes(n));
        if (missing.length > 0)
          throw new Error(`${a.importer} now uses ${missing.join(', ')} of ${a.path}: add it to LAZY_BUILTINS in scripts/copy-assets.mjs`);
        return { path: `${a.path}#${lazy.importer}`, namespace: 'lazy-builtin', pluginData: lazy };
      });
      b.onLoad({ filter: /.*/, namespace: 'lazy-builtin' }, (a) => ({
        contents: `module.exports = {\n${a.pluginData.names
          .map((n) => `  ${n}: (...args) => require(${JSON.stringify(a.pluginData.builtin)}).${n}(...args),`)
          .join('\n')}\n};\n`,
        loader: 'js',
      }));
    },
  };
}

/**
 * The functions `source` uses of `builtin`: its named imports (`import { a, b } from 'node:x'`), or
 * the properties read of the variable it requires it into (`const x = require('node:x')`, `x.a`);
 * undefined for any other form.
 */
function builtinNamesUsed(source, builtin) {
  const esm = new RegExp(`import\\s*\\{([^}]*)\\}\\s*from\\s*['"]${builtin}['"]`).exec(source);
  if (esm)
    return esm[1]
      .split(',')
      .map((s) => s.trim().split(/\s+as\s+/)[0])
      .filter(Boolean);
  const cjs = new RegExp(`const (\\w+) = require\\(['"]${builtin}['"]\\);`).exec(source);
  if (!cjs) return undefined;
  const uses = [...source.matchAll(new RegExp(`\\b${cjs[1]}\\b(?:\\.(\\w+))?`, 'g'))];
  // The declaration is its one bare use: any other hands the module itself on.
  if (uses.filter((m) => !m[1]).length !== 1) return undefined;
  return [...new Set(uses.map((m) => m[1]).filter(Boolean))];
}

/**
 * Core's index for the client: an ES module that re-exports, as they are, the modules of core that
 * cost nothing to evaluate (see eagerModules), and the others' exports from index.lazy.cjs,
 * CommonJS whose every export is a getter that requires its module of core when first read.
 * esbuild copies a CommonJS module's exports into an object of its own for each ES module that
 * imports it (`__toESM`): the lazy index was that CommonJS module, imported by every module of the
 * client that uses core, and its ~110 accessors were copied 3–4 times at every command (~1 ms of
 * CPU). Now nothing is copied (see below), and what a list or an exec reads of core (AtelierError,
 * loadConfig, readClientConfig, loadYaml, the routes…) are plain bindings.
 */
async function clientIndex(core) {
  const index = join(core, 'index.js');
  const all = await import(pathToFileURL(index).href);
  const files = [...readFileSync(index, 'utf8').matchAll(/^export [^;]*? from '(\.\/\w+\.js)';$/gms)].map((m) => m[1]);
  const modules = await Promise.all(files.map(async (f) => [f, await import(pathToFileURL(join(core, f)).href)]));
  const eager = eagerModules(core, files);
  const byModule = new Map();
  for (const name of Object.keys(all)) {
    const from = modules.find(([, m]) => name in m && m[name] === all[name]);
    if (!from) throw new Error(`dist/core/index.js exports ${name} from no module of ${files.join(', ')}: check scripts/copy-assets.mjs`);
    byModule.set(from[0], [...(byModule.get(from[0]) ?? []), name]);
  }
  const esm = [];
  const lazyNames = [];
  const loaders = [];
  const from = [];
  for (const [file, names] of byModule) {
    if (eager.has(file)) {
      esm.push(`export { ${names.join(', ')} } from ${JSON.stringify(file)};`);
      continue;
    }
    // A static require() each, for esbuild to bundle; it answers the module as CommonJS (a copy of
    // its exports at each call): kept once required.
    loaders.push(`  ${JSON.stringify(file)}: () => require(${JSON.stringify(file)}),`);
    lazyNames.push(...names);
    for (const name of names) from.push(`  ${name}: ${JSON.stringify(file)},`);
  }
  // Named, not `export *`: each importer then reads the lazy object that esbuild's __toESM made of
  // index.lazy.cjs (once, here), not a copy of it in this module's namespace.
  esm.push(`export { ${lazyNames.join(', ')} } from './index.lazy.cjs';`);
  // What the lazy object answers comes from its prototype, a proxy that loads the module of the
  // name read: __toESM copies own properties only (there are none) and its object inherits from the
  // same prototype. A proxy rather than ~85 getters: nothing is made per name at every command.
  const lazy = `const load = {
${loaders.join('\n')}
};
const from = {
${from.join('\n')}
};
const loaded = {};
module.exports = Object.create(
  new Proxy(
    {},
    {
      get: (_, name) =>
        name === '__esModule' ||
        (typeof name === 'string' && Object.hasOwn(from, name) ? (loaded[from[name]] ??= load[from[name]]())[name] : undefined),
    },
  ),
);
`;
  return { esm: `${esm.join('\n')}\n`, lazy };
}

/**
 * The modules of core (of `files`) that the client's index re-exports as they are: those whose
 * static imports are all built-ins a command loads anyway (or one LAZY_BUILTINS shims for it) and
 * other such modules of core. A module importing a package (zod) or another built-in (crypto)
 * stays lazy, and so does every module importing one. routes.js is its projection in the bundle
 * (routesProjection), which imports nothing.
 */
function eagerModules(core, files) {
  const CHEAP_BUILTINS = new Set(['node:fs', 'node:path', 'node:url', 'node:os']);
  const imports = (file) =>
    file === './routes.js'
      ? []
      : [...readFileSync(join(core, file), 'utf8').matchAll(/^(?:import|export) (?:(?!type )[^;]*? from )?'([^']+)';$/gms)].map(
          (m) => m[1],
        );
  const memo = new Map();
  const eager = (file) => {
    if (!memo.has(file)) {
      memo.set(file, false);
      memo.set(
        file,
        imports(file).every((spec) =>
          spec.startsWith('./')
            ? eager(spec)
            : CHEAP_BUILTINS.has(spec) || LAZY_BUILTINS.some((l) => l.builtin === spec && join(core, file).endsWith(l.importer)),
        ),
      );
    }
    return memo.get(file);
  };
  return new Set(files.filter(eager));
}

/** dist/core/routes.js for the client: every export of it, the table without its schemas. */
async function routesProjection(core) {
  const real = await import(pathToFileURL(join(core, 'routes.js')).href);
  const SCHEMAS = new Set(['query', 'body', 'response']);
  const table = Object.fromEntries(
    Object.entries(real.ROUTES).map(([name, r]) => [name, Object.fromEntries(Object.entries(r).filter(([k]) => !SCHEMAS.has(k)))]),
  );
  const out = [
    `export const ROUTES = ${JSON.stringify(table)};`,
    `export const ROUTES_OUTSIDE_TABLE = ${JSON.stringify(real.ROUTES_OUTSIDE_TABLE)};`,
  ];
  for (const [name, value] of Object.entries(real)) {
    if (name === 'ROUTES' || name === 'ROUTES_OUTSIDE_TABLE') continue;
    // routeUrl and pathParamNames use nothing but built-ins: their source is the whole of them.
    if (typeof value !== 'function' || !/^function \w+\(/.test(String(value)))
      throw new Error(
        `dist/core/routes.js exports ${name}, which the CLI bundle's projection of it cannot copy: teach scripts/copy-assets.mjs`,
      );
    out.push(`export ${String(value)}`);
  }
  return out.join('\n');
}

// One CommonJS file, not ES modules: bin/atelier compiles it with node:vm and V8's code cache
// (cachedData), so that a command does not parse and compile ~1.3 MB of JavaScript at every start
// (Node 20 has no compile cache for ES modules; module.enableCompileCache() is Node 22+). The
// commands' code stays lazy: esbuild turns each `await import()` of bundled code into a call.
/** Both bundles: CommonJS, as bin/atelier compiles them. */
const COMMON = {
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  minify: true,
  sourcemap: true,
  // Native (a .node binary per platform): loaded from node_modules at run time. ws's optional
  // native speed-ups are not installed (ws falls back to JavaScript). jsonc-parser's UMD main
  // cannot be bundled (its require() calls are resolved at run time): Node loads it.
  external: ['@napi-rs/keyring', 'bufferutil', 'utf-8-validate', 'jsonc-parser'],
  // Every module's `import.meta.url` is the bundle's own URL (all of it sits in dist/bundle, as the
  // chunks did): helpers beside the compiled code are found as `../sandbox/…` from there.
  // Made when first read: a list or an exec reads none.
  define: { 'import.meta.url': '__atelierBundle.url' },
  banner: {
    js: "let __atelierBundleUrl; const __atelierBundle = { get url() { return (__atelierBundleUrl ??= require('node:url').pathToFileURL(__filename).href); } };",
  },
  logLevel: 'warning',
};
await build({
  ...COMMON,
  entryPoints: ['dist/cli/main.js'],
  outfile: 'dist/bundle/main.cjs',
  plugins: [
    clientPath(),
    vendorShims(),
    lazyBuiltins(),
    {
      name: 'server-stays-unbundled',
      setup(b) {
        // src/server's index (reached as ../…/server/index.js), not the CLI's own commands/server/index.js.
        // An ES module: loaded through bin/atelier (see below).
        b.onResolve({ filter: /^(\.\.\/)+server\/index\.js$/ }, () => ({ path: '../server/index.js', external: true }));
        // `server doctor` loads the host checks of sandbox, db and simulators as they are, only when it runs.
        b.onResolve({ filter: /^(\.\.\/)+(sandbox|db|simulators)\/index\.js$/ }, (a) =>
          a.kind === 'dynamic-import' && /cli\/commands\/server\/[^/]+\.js$/.test(a.importer)
            ? { path: `../${a.path.split('/').at(-2)}/index.js`, external: true }
            : undefined,
        );
      },
    },
  ],
});
// Each package as a getter: reading one evaluates it (and what it imports), not the others.
await build({
  ...COMMON,
  stdin: {
    contents: `module.exports = Object.defineProperties({}, {\n${[...vendored]
      .sort()
      .map((v) => `  ${JSON.stringify(v)}: { enumerable: true, get: () => require(${JSON.stringify(v)}) },`)
      .join('\n')}\n});\n`,
    resolveDir: fileURLToPath(new URL('../dist/cli/', import.meta.url)),
    sourcefile: 'vendor.cjs',
    loader: 'js',
  },
  outfile: 'dist/bundle/vendor.cjs',
});

// A script compiled with V8's code cache loses its `import()` callback on Node 20 ("A dynamic
// import callback was not specified"), so each `import()` left in a bundle (the server's, of
// node: built-ins) goes through `__load`, a function bin/atelier passes in: an `import()` relative
// to the bundle. Same length, so the source map still matches.
for (const [file, mustImport] of [
  ['dist/bundle/main.cjs', '../server/index.js'],
  ['dist/bundle/vendor.cjs', undefined],
]) {
  const out = readFileSync(file, 'utf8');
  const all = out.match(/(?<![\w$.])import\(/g) ?? [];
  const literal = out.match(/(?<![\w$.])import\((?="[^"]+"\))/g) ?? [];
  if (all.length !== literal.length || (mustImport && !out.includes(`import("${mustImport}")`)))
    throw new Error(`every import() ${file} keeps must name a string literal (and the main one the server): check scripts/copy-assets.mjs`);
  writeFileSync(file, out.replace(/(?<![\w$.])import\((?="[^"]+"\))/g, '__load('));
}
