import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createReadStream } from 'node:fs';
import { dirname, join } from 'node:path';
import { killStrays, REPO_ROOT } from './server.js';
import { freePort } from '../terminals.helpers.js';

function hashTree(dir: string, h: ReturnType<typeof createHash>): void {
  for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const p = join(dir, e.name);
    h.update(p.slice(REPO_ROOT.length));
    if (e.isDirectory()) hashTree(p, h);
    else h.update(readFileSync(p));
  }
}

/** Runs `fn` holding .cache/host-release/.lock (two test files may want the same release at once). */
function underLock<T>(fn: () => T): T {
  const lock = join(REPO_ROOT, '.cache/host-release/.lock');
  mkdirSync(dirname(lock), { recursive: true });
  const deadline = Date.now() + 280_000;
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch {
      // A lock whose holder died (its pid file names a process that is gone) is taken over.
      const holder = Number(existsSync(join(lock, 'pid')) ? readFileSync(join(lock, 'pid'), 'utf8') : '0');
      if (holder > 0 && !existsSync(`/proc/${holder}`)) rmSync(lock, { recursive: true, force: true });
      else if (Date.now() > deadline) throw new Error(`${lock} is held by pid ${holder}`);
      else Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
    }
  }
  writeFileSync(join(lock, 'pid'), String(process.pid));
  try {
    return fn();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/**
 * `npm run release --no-build` of this checkout's dist/ into .cache/host-release/KEY (git-ignored),
 * KEY hashing everything the tarball is made of: a second run with the same build reuses it
 * (making one costs 30–90 s on this machine). Returns the folder get.sh is pointed at.
 */
export function cachedRelease(version = '0.0.0-test'): string {
  const h = createHash('sha256');
  hashTree(join(REPO_ROOT, 'dist'), h);
  for (const f of ['package.json', 'package-lock.json', 'scripts/get.sh', 'scripts/release.mjs', 'src/cli/launcher.c'])
    h.update(readFileSync(join(REPO_ROOT, f)));
  h.update(version);
  const out = join(REPO_ROOT, '.cache/host-release', h.digest('hex').slice(0, 16));
  const tarball = join(out, `atelier-${version}-linux-x64.tar.gz`);
  if (existsSync(`${tarball}.sha256`) && existsSync(join(out, 'LATEST'))) return out;
  return underLock(() => {
    if (existsSync(`${tarball}.sha256`) && existsSync(join(out, 'LATEST'))) return out;
    // Older ones are of no use once the build changed.
    for (const old of readdirSync(join(REPO_ROOT, '.cache/host-release')))
      if (old !== '.lock') rmSync(join(REPO_ROOT, '.cache/host-release', old), { recursive: true, force: true });
    execFileSync(process.execPath, [join(REPO_ROOT, 'scripts/release.mjs'), '--no-build', '--fast', '--version', version, '--out', out], {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    return out;
  });
}

/** Serves the files of `dir` over HTTP on 127.0.0.1 (a release site, as get.sh sees one). */
export async function serveDir(dir: string): Promise<{ url: string; requests: string[] } & AsyncDisposable> {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    const name = decodeURIComponent((req.url ?? '/').split('?')[0]!).replace(/^\/+/, '');
    requests.push(name);
    const p = join(dir, name);
    if (name.includes('..') || !existsSync(p) || !statSync(p).isFile()) {
      res.writeHead(404).end('not found\n');
      return;
    }
    res.writeHead(200, { 'content-length': statSync(p).size });
    createReadStream(p).pipe(res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    [Symbol.asyncDispose]: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** The pid a pid file names, when that process is alive. */
export function livePid(file: string): number | undefined {
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, 'utf8').trim().split(' ')[0]);
  return pid > 0 && existsSync(`/proc/${pid}`) ? pid : undefined;
}

/** Runs `sh scripts/get.sh ARGS` with exactly this environment. */
export function runGetSh(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  return runProcess('sh', [join(REPO_ROOT, 'scripts/get.sh'), ...args], env);
}

export function runProcess(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  return import('node:child_process').then(
    ({ spawn }) =>
      new Promise((resolve) => {
        const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
        let stdout = '';
        let stderr = '';
        p.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
        p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
        p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
      }),
  );
}

/**
 * Further releases made from `base` (a cachedRelease folder), each in its own folder beside it,
 * to be installed on a host where `base` is (they link to its Node.js and node_modules): unpacked once, then for each in turn renamed `version`, changed by `change(root)` (on top of the
 * ones before: a migration added, say), and packed with its .sha256 and LATEST. `key` names what
 * the changes do (it is part of the cache's folder names).
 */
export function derivedReleases(base: string, key: string, steps: { version: string; change: (root: string) => void }[]): string[] {
  const outs = steps.map((s) => join(base, `derived-${key}-${s.version}`));
  if (outs.every((o) => existsSync(join(o, 'LATEST')))) return outs;
  return underLock(() => {
    const from = readFileSync(join(base, 'LATEST'), 'utf8').trim();
    const work = join(base, `work-${process.pid}`);
    rmSync(work, { recursive: true, force: true });
    mkdirSync(work, { recursive: true });
    try {
      // Everything but Node and node_modules, which the derived releases share with `base`'s
      // (links to ../FROM/…, resolved once they are unpacked beside it): a few MB to pack, not 200.
      const top = `atelier-${from}`;
      execFileSync('tar', [
        '-xzf',
        join(base, `${top}-linux-x64.tar.gz`),
        '-C',
        work,
        `--exclude=${top}/node`,
        `--exclude=${top}/node_modules`,
      ]);
      symlinkSync(`../${from}/node`, join(work, top, 'node'));
      symlinkSync(`../${from}/node_modules`, join(work, top, 'node_modules'));
      let current = from;
      for (const [i, { version, change }] of steps.entries()) {
        const root = join(work, `atelier-${version}`);
        renameSync(join(work, `atelier-${current}`), root);
        current = version;
        for (const f of ['package.json', 'RELEASE.json']) {
          const j = JSON.parse(readFileSync(join(root, f), 'utf8')) as { version: string };
          j.version = version;
          writeFileSync(join(root, f), JSON.stringify(j, null, 2) + '\n');
        }
        change(root);
        const name = `atelier-${version}-linux-x64.tar.gz`;
        const out = outs[i]!;
        const tmp = `${out}.tmp`;
        rmSync(tmp, { recursive: true, force: true });
        mkdirSync(tmp);
        execFileSync('tar', ['-C', work, '-I', 'gzip -1', '-cf', join(tmp, name), `atelier-${version}`]);
        const sha = createHash('sha256')
          .update(readFileSync(join(tmp, name)))
          .digest('hex');
        writeFileSync(join(tmp, `${name}.sha256`), `${sha}  ${name}\n`);
        writeFileSync(join(tmp, 'LATEST'), `${version}\n`);
        rmSync(out, { recursive: true, force: true });
        renameSync(tmp, out);
      }
      return outs;
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
}

/**
 * A machine to install on, under temporary directories: the prefix (its /opt, /etc, /var, /run),
 * the service's HOME (its CLI context and allowed repository root land there, not in root's), a
 * free listen address, and the environment get.sh and the installed CLI run with.
 */
export async function hostTarget(
  label: string,
  releaseUrl: string,
): Promise<{ prefix: string; home: string; listen: string; env: NodeJS.ProcessEnv }> {
  const prefix = mkdtempSync(`/tmp/atelier-${label}-`);
  const home = mkdtempSync(`/tmp/atelier-${label}-home-`);
  // The embedded PostgreSQL runs as `postgres`: it must pass through the prefix to the data dir.
  chmodSync(prefix, 0o755);
  chmodSync(home, 0o755);
  const listen = `127.0.0.1:${await freePort()}`;
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    ATELIER_CONFIG_DIR: join(home, 'cli-config'),
    ATELIER_RELEASE_URL: releaseUrl,
    ATELIER_PREFIX: prefix,
    ATELIER_SKIP_APT: '1',
  };
  return { prefix, home, listen, env };
}

/**
 * Ends a test's host install (hostTarget) whatever state it was left in: `uninstall --purge` when
 * its supervisor runs, then whatever is still alive killed (supervisor, server, PostgreSQL, the
 * sandboxes' strays), and its folders removed.
 */
export async function removeHostInstall(t: {
  prefix: string | undefined;
  home: string | undefined;
  env: NodeJS.ProcessEnv;
}): Promise<void> {
  if (!t.prefix) return;
  const atelier = join(t.prefix, 'usr/local/bin/atelier');
  const supervisor = join(t.prefix, 'run/atelier/supervisor.pid');
  const dataDir = join(t.prefix, 'var/lib/atelier');
  if (livePid(supervisor) !== undefined && existsSync(atelier))
    await runProcess(atelier, ['server', 'uninstall', '--prefix', t.prefix, '--purge', '--yes'], t.env);
  const left = livePid(supervisor);
  if (left !== undefined) process.kill(left, 'SIGTERM');
  const server = livePid(join(dataDir, 'server.pid'));
  if (server !== undefined) process.kill(server, 'SIGKILL');
  if (existsSync(join(dataDir, 'pg', 'postmaster.pid')))
    try {
      execFileSync('sh', ['-c', `kill -9 $(head -1 ${join(dataDir, 'pg', 'postmaster.pid')}) 2>/dev/null`], { stdio: 'ignore' });
    } catch {
      // no cluster left
    }
  killStrays(dataDir);
  rmSync(t.prefix, { recursive: true, force: true });
  if (t.home) rmSync(t.home, { recursive: true, force: true });
}
