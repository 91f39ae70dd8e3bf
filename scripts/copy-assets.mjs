// After tsc: copies the SQL migrations and the netns helper beside the compiled code, then bundles the CLI client.
// The bundle (with the code cache bin/atelier keeps) makes every client command start much faster than loading hundreds of ES
// modules one by one. The server (`atelier server start`) is not bundled: the bundle imports
// dist/server/index.js as it is, so its dependencies load exactly as npm installed them.
import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { build } from 'esbuild';

cpSync('src/db/migrations', 'dist/db/migrations', { recursive: true });
// The helper that opens each workshop's egress listener inside its network namespace.
cpSync('src/sandbox/netns-listen.py', 'dist/sandbox/netns-listen.py');
// The long-lived variant the terminals area keeps per workshop (port-forward, ssh -L).
cpSync('src/terminals/netns-connector.py', 'dist/terminals/netns-connector.py');
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
// One CommonJS file, not ES modules: bin/atelier compiles it with node:vm and V8's code cache
// (cachedData), so that a command does not parse and compile ~1.3 MB of JavaScript at every start
// (Node 20 has no compile cache for ES modules; module.enableCompileCache() is Node 22+). The
// commands' code stays lazy: esbuild turns each `await import()` of bundled code into a call.
await build({
  entryPoints: ['dist/cli/main.js'],
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  outfile: 'dist/bundle/main.cjs',
  minify: true,
  sourcemap: true,
  // Native (a .node binary per platform): loaded from node_modules at run time. ws's optional
  // native speed-ups are not installed (ws falls back to JavaScript). jsonc-parser's UMD main
  // cannot be bundled (its require() calls are resolved at run time): Node loads it.
  external: ['@napi-rs/keyring', 'bufferutil', 'utf-8-validate', 'jsonc-parser'],
  plugins: [
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
  // Every module's `import.meta.url` is the bundle's own URL (all of it sits in dist/bundle, as the
  // chunks did): helpers beside the compiled code are found as `../sandbox/…` from there.
  define: { 'import.meta.url': '__atelierBundleUrl' },
  banner: { js: "const __atelierBundleUrl = require('node:url').pathToFileURL(__filename).href;" },
  logLevel: 'warning',
});
// A script compiled with V8's code cache loses its `import()` callback on Node 20 ("A dynamic
// import callback was not specified"), so each `import()` left in the bundle (the server's, of
// node: built-ins) goes through `__load`, a function bin/atelier passes in: an `import()` relative
// to the bundle. Same length, so the source map still matches.
const out = readFileSync('dist/bundle/main.cjs', 'utf8');
const all = out.match(/(?<![\w$.])import\(/g) ?? [];
const literal = out.match(/(?<![\w$.])import\((?="[^"]+"\))/g) ?? [];
if (all.length !== literal.length || !out.includes('import("../server/index.js")'))
  throw new Error(
    'every import() the CLI bundle keeps must name a string literal, and the server must be one of them: check scripts/copy-assets.mjs',
  );
writeFileSync('dist/bundle/main.cjs', out.replace(/(?<![\w$.])import\((?="[^"]+"\))/g, '__load('));
