import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';
import { defineConfig, type Plugin } from 'vite';
import react from '@vitejs/plugin-react';

/**
 * Writes `NAME.br` and `NAME.gz` beside each built script and stylesheet: the server sends one of
 * them to a browser that accepts it (Accept-Encoding), compressed once here at the highest
 * levels rather than on every request.
 */
function precompress(): Plugin {
  return {
    name: 'atelier-precompress',
    apply: 'build',
    enforce: 'post',
    // From the files as written: Vite still rewrites chunks in its own generateBundle (the
    // preload map of lazy chunks), so anything earlier would compress other bytes.
    writeBundle(options, bundle) {
      const dir = options.dir ?? 'dist';
      for (const name of Object.keys(bundle)) {
        if (!/\.(js|css)$/.test(name)) continue;
        const bytes = readFileSync(join(dir, name));
        const br = brotliCompressSync(bytes, {
          params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: bytes.length },
        });
        writeFileSync(join(dir, `${name}.br`), br);
        writeFileSync(join(dir, `${name}.gz`), gzipSync(bytes, { level: 9 }));
      }
    },
  };
}

// The server serves dist/ at / with a strict CSP: no inline script, so no module-preload
// polyfill injected inline, and no source maps shipped.
export default defineConfig({
  plugins: [react(), precompress()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
});
