// Builds the system-call filter's loader (src/sandbox/seccomp-exec.c) and the sandbox entry
// (src/sandbox/sandbox-enter.c), each with the filter compiled in: the BPF program comes from the
// profile table (src/sandbox/seccompProfile.ts, compiled by tsc into dist/ before this runs).
import { spawnSync } from 'node:child_process';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { filterHeader } from '../dist/sandbox/seccomp.js';

mkdirSync('dist/sandbox', { recursive: true });
writeFileSync('dist/sandbox/seccomp-filter.h', filterHeader());
const cc = process.env.CC || 'cc';
for (const name of ['seccomp-exec', 'sandbox-enter']) {
  const out = `dist/sandbox/${name}`;
  // No C library (src/sandbox/nolibc.h says why): freestanding, static, not position-independent.
  const args = [
    ...['-O2', '-Wall', '-Wextra', '-Werror', '-ffreestanding', '-fno-stack-protector', '-fno-asynchronous-unwind-tables'],
    ...['-static', '-nostdlib', '-no-pie', '-Idist/sandbox', '-o', `${out}.tmp`, `src/sandbox/${name}.c`],
  ];
  const r = spawnSync(cc, args, { stdio: 'inherit' });
  if (r.error || r.status !== 0) {
    console.error(
      `atelier: could not build ${out} with \`${cc}\`${r.error ? ` (${r.error.message})` : ''}: install a C compiler and the kernel headers (apt-get install gcc libc6-dev; scripts/install.sh does)`,
    );
    process.exit(1);
  }
  // Renamed into place: a running sandbox keeps the loader it was started with (a bound inode), and
  // an exec never sees a half-written file.
  renameSync(`${out}.tmp`, out);
}
