// After tsc: copies the SQL migrations and the netns helper beside the compiled code, then bundles the CLI client.
// The bundle makes every client command start about 2x faster than loading hundreds of ES
// modules one by one. The server (`atelier server start`) is not bundled: the bundle imports
// dist/server/index.js as it is, so its dependencies load exactly as npm installed them.
import { cpSync, rmSync } from 'node:fs';
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
await build({
  entryPoints: ['dist/cli/main.js'],
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  outdir: 'dist/bundle',
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
        b.onResolve({ filter: /^(\.\.\/)+server\/index\.js$/ }, () => ({ path: '../server/index.js', external: true }));
      },
    },
  ],
  // Bundled CommonJS dependencies (commander) call require(): give the ESM output a real one.
  banner: { js: "import { createRequire as __atelierRequire } from 'node:module'; const require = __atelierRequire(import.meta.url);" },
  logLevel: 'warning',
});
