import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createReadStream } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from './server.js';

function hashTree(dir: string, h: ReturnType<typeof createHash>): void {
  for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const p = join(dir, e.name);
    h.update(p.slice(REPO_ROOT.length));
    if (e.isDirectory()) hashTree(p, h);
    else h.update(readFileSync(p));
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
  for (const f of ['package.json', 'package-lock.json', 'scripts/get.sh', 'scripts/release.mjs']) h.update(readFileSync(join(REPO_ROOT, f)));
  h.update(version);
  const out = join(REPO_ROOT, '.cache/host-release', h.digest('hex').slice(0, 16));
  const tarball = join(out, `atelier-${version}-linux-x64.tar.gz`);
  if (existsSync(`${tarball}.sha256`) && existsSync(join(out, 'LATEST'))) return out;
  // Older ones are of no use once the build changed.
  rmSync(join(REPO_ROOT, '.cache/host-release'), { recursive: true, force: true });
  execFileSync(process.execPath, [join(REPO_ROOT, 'scripts/release.mjs'), '--no-build', '--version', version, '--out', out], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return out;
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
