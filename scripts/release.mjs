// `npm run release`: one versioned, self-contained tarball for this platform (linux-x64) and its SHA-256.
//
//   dist-release/atelier-VERSION-linux-x64.tar.gz          the release (top folder atelier-VERSION/)
//   dist-release/atelier-VERSION-linux-x64.tar.gz.sha256   `sha256sum` format
//   dist-release/LATEST                                    the version, for scripts/get.sh
//   dist-release/get.sh                                    scripts/get.sh, the bootstrap
//
// Inside: the built server and CLI (dist/), the production dependencies as npm installed them here
// (native addons, node-pty's included, built for this platform), deploy/stacks, deploy/helm (the chart), scripts/get.sh (the
// bootstrap the server serves at /install.sh), the Node.js binary that runs it all (node/bin/node: a
// Debian machine's own Node is too old), bin/atelier (a small static launcher, src/cli/launcher.c) and RELEASE.json.
//
// Flags: --out DIR (default dist-release), --version V (default package.json's), --no-build (use dist/ as it is),
// --fast (gzip -1: a larger tarball made in half the time; the tests use it).
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  cpSync,
  createReadStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve, sep } from 'node:path';
import { parseArgs } from 'node:util';

const root = resolve(new URL('..', import.meta.url).pathname);
const { values: flags } = parseArgs({
  options: { out: { type: 'string' }, version: { type: 'string' }, 'no-build': { type: 'boolean' }, fast: { type: 'boolean' } },
});
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const version = flags.version ?? pkg.version;
if (!/^[0-9A-Za-z][0-9A-Za-z.+-]*$/.test(version)) {
  console.error(`release: version ${JSON.stringify(version)} is not a version (letters, digits, . + -)`);
  process.exit(2);
}
if (process.platform !== 'linux' || process.arch !== 'x64') {
  console.error(
    `release: builds linux-x64 only (this is ${process.platform}-${process.arch}): native addons are built for the machine that runs this`,
  );
  process.exit(2);
}
const out = resolve(flags.out ?? join(root, 'dist-release'));
const name = `atelier-${version}-linux-x64.tar.gz`;
const t0 = Date.now();

if (!flags['no-build']) execFileSync('npm', ['run', '-s', 'build'], { cwd: root, stdio: 'inherit' });
if (!existsSync(join(root, 'dist/bundle/main.cjs'))) {
  console.error('release: dist/ is not built: run `npm run build` (or drop --no-build)');
  process.exit(1);
}

const stage = mkdtempSync(join(tmpdir(), 'atelier-release-'));
try {
  const top = join(stage, `atelier-${version}`);
  mkdirSync(top);
  cpSync(join(root, 'dist'), join(top, 'dist'), { recursive: true });
  cpSync(join(root, 'deploy/stacks'), join(top, 'deploy/stacks'), { recursive: true });
  // The Helm chart `atelier server install --kubernetes` installs (it is this release's chart).
  cpSync(join(root, 'deploy/helm'), join(top, 'deploy/helm'), { recursive: true });
  mkdirSync(join(top, 'scripts'));
  cpSync(join(root, 'scripts/get.sh'), join(top, 'scripts/get.sh'));
  writeFileSync(join(top, 'package.json'), JSON.stringify({ ...pkg, version, scripts: {}, devDependencies: {} }, null, 2) + '\n');

  // Production dependencies, exactly as installed here (so native addons come already built).
  // `npm ls --parseable` names each package folder; a folder inside one already copied comes with it.
  const modules = realpathSync(join(root, 'node_modules'));
  const listed = execFileSync('npm', ['ls', '--omit=dev', '--all', '--parseable'], { cwd: root, encoding: 'utf8', maxBuffer: 64 << 20 })
    .split('\n')
    .filter(Boolean)
    .map((p) => realpathSync(p))
    .filter((p) => p.startsWith(modules + sep))
    .sort();
  const copied = [];
  for (const p of listed) {
    if (copied.some((c) => p.startsWith(c + sep))) continue;
    cpSync(p, join(top, 'node_modules', relative(modules, p)), { recursive: true, verbatimSymlinks: true });
    copied.push(p);
  }
  // Prebuilt addons for other platforms (node-pty ships darwin and win32 ones): dead weight here.
  for (const p of copied) {
    const prebuilds = join(top, 'node_modules', relative(modules, p), 'prebuilds');
    if (!existsSync(prebuilds)) continue;
    for (const plat of readdirSync(prebuilds))
      if (!plat.startsWith('linux-x64')) rmSync(join(prebuilds, plat), { recursive: true, force: true });
  }

  // The Node.js that runs it (the release does not depend on the machine's).
  mkdirSync(join(top, 'node/bin'), { recursive: true });
  cpSync(process.execPath, join(top, 'node/bin/node'));
  chmodSync(join(top, 'node/bin/node'), 0o755);

  // The launcher: /usr/local/bin/atelier links to RELEASE/bin/atelier (through `current`), so it
  // finds the release it belongs to from its own real path. A small static program
  // (src/cli/launcher.c), not a /bin/sh script: the shell and its `readlink -f` fork cost ~3 ms of CPU
  // (7–10 ms of wall time on a busy machine) before every command (docs/development.md).
  // bin/atelier.cjs is the checkout's own loader (bin/atelier: the bundle with V8's code cache), a
  // CommonJS script (an ES module entry would start Node's ES module loader first); bin/atelier.mjs,
  // which the service runs, only imports it.
  mkdirSync(join(top, 'bin'));
  cpSync(join(root, 'bin/atelier'), join(top, 'bin/atelier.cjs'));
  writeFileSync(join(top, 'bin/atelier.mjs'), "import './atelier.cjs';\n");
  const cc = process.env.CC || 'cc';
  const built = spawnSync(cc, ['-O2', '-static', '-s', '-o', join(top, 'bin/atelier'), join(root, 'src/cli/launcher.c')], {
    stdio: 'inherit',
  });
  if (built.status !== 0) {
    console.error(
      `release: could not build the launcher (src/cli/launcher.c) with \`${cc}\`${built.error ? ` (${built.error.message})` : ''}: install a C compiler and libc6-dev (the build needs them already)`,
    );
    process.exit(1);
  }
  chmodSync(join(top, 'bin/atelier'), 0o755);

  let commit = null;
  try {
    commit = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    // not a git checkout: the release says so (null)
  }
  const info = { name: 'atelier', version, platform: 'linux-x64', node: process.version, commit, builtAt: new Date().toISOString() };
  writeFileSync(join(top, 'RELEASE.json'), JSON.stringify(info, null, 2) + '\n');

  mkdirSync(out, { recursive: true });
  const tarball = join(out, name);
  rmSync(tarball, { force: true });
  // Files owned by root, no timestamps of this machine's users leaking: ownership is the installer's business.
  execFileSync(
    'tar',
    ['-C', stage, '--owner=0', '--group=0', '--numeric-owner', '-I', flags.fast ? 'gzip -1' : 'gzip', '-cf', tarball, `atelier-${version}`],
    {
      stdio: 'inherit',
    },
  );
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(tarball)) hash.update(chunk);
  const sha = hash.digest('hex');
  writeFileSync(`${tarball}.sha256`, `${sha}  ${name}\n`);
  writeFileSync(join(out, 'LATEST'), `${version}\n`);
  // The bootstrap beside the release, so that the folder is all a new machine needs (README).
  cpSync(join(root, 'scripts/get.sh'), join(out, 'get.sh'));
  console.log(`release: ${tarball} (sha256 ${sha}, ${copied.length} production packages, ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
} finally {
  rmSync(stage, { recursive: true, force: true });
}
