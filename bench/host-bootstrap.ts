/**
 * Bootstrap → server ready, phase by phase, on a machine that already has the system packages:
 * `node --import tsx bench/host-bootstrap.ts [--release DIR] [--runs N]` (root; `npm run build` first).
 *
 * Without --release it makes one with `scripts/release.mjs --no-build` (not timed). Each run serves
 * the release folder over HTTP on 127.0.0.1, runs `sh scripts/get.sh --listen … --yes --output json`
 * into a fresh temporary prefix (ATELIER_SKIP_APT=1: the packages are here), reads get.sh's phase
 * lines and the install's per-step JSON events, then `uninstall --purge --yes` (not timed).
 * Results are printed and written to bench/results/host-bootstrap-<time>.json (git-ignored).
 */
import { execFileSync, spawn } from 'node:child_process';
import { createReadStream, existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync, chmodSync } from 'node:fs';
import { createServer } from 'node:http';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const REPO = join(import.meta.dirname, '..');
const { values } = parseArgs({ options: { release: { type: 'string' }, runs: { type: 'string', default: '1' } } });

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

const release = values.release ?? mkdtempSync('/tmp/atelier-bench-release-');
if (!values.release)
  execFileSync(process.execPath, [join(REPO, 'scripts/release.mjs'), '--no-build', '--out', release], { stdio: 'inherit' });
const server = createServer((req, res) => {
  const p = join(release, (req.url ?? '/').replace(/^\/+/, ''));
  if (!existsSync(p) || !statSync(p).isFile()) return void res.writeHead(404).end();
  res.writeHead(200, { 'content-length': statSync(p).size });
  createReadStream(p).pipe(res);
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const site = `http://127.0.0.1:${(server.address() as { port: number }).port}`;

const results: Record<string, number>[] = [];
try {
  for (let i = 0; i < Number(values.runs); i++) {
    const prefix = mkdtempSync('/tmp/atelier-bench-host-');
    const home = mkdtempSync('/tmp/atelier-bench-home-');
    chmodSync(prefix, 0o755);
    const env = { PATH: process.env.PATH, HOME: home, ATELIER_RELEASE_URL: site, ATELIER_PREFIX: prefix, ATELIER_SKIP_APT: '1' };
    const port = 20000 + Math.floor(Math.random() * 20000);
    const t0 = Date.now();
    const r = await run('sh', [join(REPO, 'scripts/get.sh'), '--listen', `127.0.0.1:${port}`, '--yes', '--output', 'json'], env);
    const total = Date.now() - t0;
    try {
      if (r.code !== 0) throw new Error(`get.sh failed:\n${r.stderr}`);
      const row: Record<string, number> = { total_ms: total };
      // get.sh: "atelier: 0.37 s  downloaded and verified atelier 0.1.0"
      for (const m of r.stderr.matchAll(/^atelier: ([\d.]+) s {2}(\S+(?: \S+)?)/gm))
        row[`get.sh ${m[2]}_ms`] = Math.round(Number(m[1]) * 1000);
      for (const line of r.stdout.trim().split('\n')) {
        const e = JSON.parse(line) as { event: string; step?: string; state?: string; ms?: number };
        if (e.event === 'step' && e.state === 'applied') row[`install ${e.step}_ms`] = e.ms ?? 0;
      }
      results.push(row);
      console.log(JSON.stringify(row));
    } finally {
      await run(join(prefix, 'usr/local/bin/atelier'), ['server', 'uninstall', '--prefix', prefix, '--purge', '--yes'], env);
      rmSync(prefix, { recursive: true, force: true });
      rmSync(home, { recursive: true, force: true });
    }
  }
} finally {
  server.close();
  if (!values.release) rmSync(release, { recursive: true, force: true });
}
mkdirSync(join(REPO, 'bench/results'), { recursive: true });
const file = join(REPO, 'bench/results', `host-bootstrap-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
writeFileSync(file, JSON.stringify({ loadavg: loadavg(), goal: 'bootstrap → ready under 60 s', results }, null, 2));
console.log(
  `written to ${file} (load average ${loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')})`,
);
