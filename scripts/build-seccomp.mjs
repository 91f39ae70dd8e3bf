// Builds the system-call filter's loader (src/sandbox/seccomp-exec.c) with the filter compiled in:
// the BPF program comes from the profile table (src/sandbox/seccompProfile.ts, compiled by tsc into
// dist/ before this runs). Static, so that starting it costs no dynamic loading (see seccomp-exec.c).
import { spawnSync } from 'node:child_process';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { filterHeader } from '../dist/sandbox/seccomp.js';

mkdirSync('dist/sandbox', { recursive: true });
writeFileSync('dist/sandbox/seccomp-filter.h', filterHeader());
const cc = process.env.CC || 'cc';
const out = 'dist/sandbox/seccomp-exec';
const args = ['-O2', '-Wall', '-Wextra', '-Werror', '-static', '-Idist/sandbox', '-o', `${out}.tmp`, 'src/sandbox/seccomp-exec.c'];
const r = spawnSync(cc, args, { stdio: 'inherit' });
if (r.error || r.status !== 0) {
  console.error(
    `atelier: could not build the system-call filter loader with \`${cc}\`${r.error ? ` (${r.error.message})` : ''}: install a C compiler and static libc (apt-get install gcc libc6-dev; scripts/install.sh does)`,
  );
  process.exit(1);
}
// Renamed into place: a running sandbox keeps the loader it was started with (a bound inode), and
// an exec never sees a half-written file.
renameSync(`${out}.tmp`, out);
