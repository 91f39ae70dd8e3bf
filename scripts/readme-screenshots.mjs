#!/usr/bin/env node
// Copies the README's screenshots from the last run of the dashboard tests (web/screenshots/,
// git-ignored) into docs/screenshots/, so that the README shows the pages as they are now. Run it
// after `npm test` (or `npm test -- web.`); a screenshot missing from the run is an error.
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const SHOWN = ['approval-modal.png', 'approval-modal-side-by-side.png', 'cockpit-applied.png', 'workshop.png'];
const from = join(root, 'web', 'screenshots');
const to = join(root, 'docs', 'screenshots');
const missing = SHOWN.filter((f) => !existsSync(join(from, f)));
if (missing.length > 0) {
  console.error(`missing from ${from}: ${missing.join(', ')}: run the dashboard tests first (npm test -- web.)`);
  process.exit(1);
}
mkdirSync(to, { recursive: true });
for (const f of SHOWN) copyFileSync(join(from, f), join(to, f));
console.log(`copied ${SHOWN.length} screenshots to ${to}`);
