import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// The server serves dist/ at / with a strict CSP: no inline script, so no module-preload
// polyfill injected inline, and no source maps shipped.
export default defineConfig({
  plugins: [react()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
});
