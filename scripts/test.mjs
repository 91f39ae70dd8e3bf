// Runs the whole suite: unit tests beside the sources, then integration tests in test/.
// Node 20 does not expand globs given to --test, so the file list is built here.
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

function find(dir, out = []) {
  for (const entry of readdirSync(dir)) {
    const full = join(dir, entry);
    if (statSync(full).isDirectory()) find(full, out);
    else if (entry.endsWith('.test.ts')) out.push(full);
  }
  return out;
}

const filter = process.argv.slice(2);
let files = [...find('src'), ...find('test')].sort();
if (filter.length > 0) files = files.filter((f) => filter.some((x) => f.includes(x)));
const build = spawnSync('npm', ['run', '-s', 'build'], { stdio: 'inherit' });
if (build.status !== 0) process.exit(build.status ?? 1);
const run = spawnSync(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', '--test-timeout=300000', ...files], {
  stdio: 'inherit',
});
process.exit(run.status ?? 1);
