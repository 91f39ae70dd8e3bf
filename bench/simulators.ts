/**
 * 7. Postgres simulator: request → first successful query (`startSimulator` of src/simulators
 * as built in dist/, then `SELECT 1` by the `pg` client as the workshop's user over the
 * simulator's socket), beside, in the same run:
 * - what the sandbox costs, as bare processes: the same template copy started by `postgres` on
 *   the host (what a simulator was before it had a sandbox: same uid, same socket, no
 *   namespaces), and the same copy started by the same `postgres` in the simulator's sandbox
 *   (`simulatorSandboxArgv`), each up to its first `SELECT 1`; their difference is the sandbox's
 *   share of a start (goal: at most 30 ms at p50);
 * - the peer "from scratch": `initdb` + `postgres` start + the same first query, with the same
 *   settings (no fsync, unix socket only, the same unprivileged uid).
 * Rounds alternate between them so that a busy moment on the machine hits all. The one-off
 * template cluster (made at server boot by `warmSimulators`) is shown apart.
 */
import { spawn } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import type * as Sandbox from '../src/sandbox/index.js';
import type * as Simulators from '../src/simulators/index.js';
import { goalLine, heading, line, ms, ratioLine, REPO_ROOT, statLine, summarize, timedSpawn, type BenchServer } from './lib.js';

const ROUNDS = 15;
const GOAL_P50_MS = 250;
const GOAL_OF_SCRATCH = 0.25;
/** What the simulator's sandbox may add to a start (issue 17). */
const GOAL_SANDBOX_MS = 30;
const PG_BIN = '/usr/lib/postgresql/15/bin';

/**
 * `SELECT 1` over the socket directory, retried until the server answers (the from-scratch
 * peer's readiness); gives up when `gone()` says the server exited.
 */
export async function firstQuery(
  socketDir: string,
  user: string,
  password: string | undefined,
  database: string,
  gone = (): boolean => false,
): Promise<void> {
  for (;;) {
    const client = new pg.Client({ host: socketDir, port: 5432, user, password, database, connectionTimeoutMillis: 2000 });
    try {
      await client.connect();
    } catch (err) {
      if (gone()) throw new Error(`the server exited before answering: ${(err as Error).message}`);
      await new Promise((r) => setTimeout(r, 2));
      continue;
    }
    try {
      await client.query('SELECT 1');
      return;
    } finally {
      await client.end();
    }
  }
}

/**
 * The peer: `initdb` + `postgres` start + first `SELECT 1` in `dir` (removed after), with the
 * simulator's settings (no fsync, unix socket only, the same unprivileged uid); milliseconds.
 */
export async function postgresFromScratch(dir: string, runAs: { uid: number; gid: number } | undefined): Promise<number> {
  mkdirSync(dir, { mode: 0o700 });
  if (runAs) chownSync(dir, runAs.uid, runAs.gid);
  const ids = runAs ? { uid: runAs.uid, gid: runAs.gid } : {};
  const env = { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' };
  const s0 = performance.now();
  const init = await timedSpawn(
    join(PG_BIN, 'initdb'),
    ['-D', join(dir, 'data'), '-U', 'dev', '--auth=trust', '--encoding=UTF8', '--no-locale', '--no-sync', '--no-instructions'],
    { cwd: dir, env, ...ids },
  );
  if (init.code !== 0) throw new Error(`initdb failed: ${init.stderr.trim().slice(0, 300)}`);
  const server = spawn(
    join(PG_BIN, 'postgres'),
    ['-D', join(dir, 'data'), '-k', dir, '-p', '5432', '-c', 'listen_addresses=', '-c', 'fsync=off', '-c', 'synchronous_commit=off'],
    { cwd: dir, env, stdio: ['ignore', 'ignore', 'pipe'], ...ids },
  );
  let stderr = '';
  server.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise((r) => server.once('exit', r));
  let gone = false;
  void exited.then(() => (gone = true));
  try {
    await firstQuery(dir, 'dev', undefined, 'postgres', () => gone).catch((err: Error) => {
      throw new Error(`${err.message}\n${stderr.trim().slice(-500)}`);
    });
    return performance.now() - s0;
  } finally {
    server.kill('SIGINT');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * One bare start of the template's copy `data` (prepared beforehand, as the spare pool does):
 * `postgres` spawned with `argv` (on the host, or wrapped in the sandbox) up to the first
 * `SELECT 1` as the template's admin; then stopped. Milliseconds.
 */
async function bareStart(
  argv: string[],
  socketDir: string,
  adminPassword: string,
  runAs: { uid: number; gid: number } | undefined,
  sandboxed: boolean,
): Promise<number> {
  const env = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8', TZ: 'UTC' };
  const t0 = performance.now();
  // The sandbox drops to the uid itself; the host process is started as that uid directly.
  const server = spawn(argv[0]!, argv.slice(1), {
    env,
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    ...(runAs && !sandboxed ? { uid: runAs.uid, gid: runAs.gid } : {}),
  });
  let stderr = '';
  server.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  let gone = false;
  const exited = new Promise((r) => server.once('exit', r));
  void exited.then(() => (gone = true));
  try {
    await firstQuery(socketDir, 'atelier_admin', adminPassword, 'postgres', () => gone).catch((err: Error) => {
      throw new Error(`${err.message}\n${stderr.trim().slice(-500)}`);
    });
    return performance.now() - t0;
  } finally {
    // The postmaster itself (the sandbox's program, or the host process): a fast shutdown.
    try {
      process.kill(-server.pid!, 'SIGKILL');
    } catch {
      // gone
    }
    await exited;
  }
}

/** A copy of the template's data directory for one bare start, handed over as the simulator's are (its top directory only). */
function copyTemplate(templateData: string, dest: string, runAs: { uid: number; gid: number } | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const cp = spawn('/usr/bin/cp', ['-a', templateData, dest], { stdio: 'ignore' });
    cp.once('error', reject);
    cp.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`cp -a ${templateData}: ${code}`));
      if (runAs) chownSync(dest, runAs.uid, runAs.gid);
      chmodSync(dest, 0o700);
      resolve();
    });
  });
}

export async function postgresSimulator(_server: BenchServer): Promise<Record<string, unknown>> {
  heading(`7. postgres simulator: request -> first query (${ROUNDS} rounds; goal p50 < ${GOAL_P50_MS} ms and < 1/4 of initdb + start)`);
  const sim = (await import(pathToFileURL(join(REPO_ROOT, 'dist', 'simulators', 'index.js')).href)) as typeof Simulators;
  const sandbox = (await import(pathToFileURL(join(REPO_ROOT, 'dist', 'sandbox', 'index.js')).href)) as typeof Sandbox;
  const runAs = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : undefined;
  const base = mkdtempSync('/tmp/atelier-bench-sim-');
  chmodSync(base, 0o711);
  const cacheDir = join(base, 'cache');
  const socketDir = join(base, 'sock');
  const atelier: number[] = [];
  const scratch: number[] = [];
  const onHost: number[] = [];
  const inSandbox: number[] = [];
  try {
    const w0 = performance.now();
    await sim.warmSimulators({ cacheDir, runAs });
    const warm = performance.now() - w0;
    const templateDir = join(
      cacheDir,
      readdirSync(cacheDir).find((e) => /^template-pg\d+-v\d+$/.test(e))!,
    );
    const templateData = join(templateDir, 'data');
    const adminPassword = readFileSync(join(templateDir, 'admin.password'), 'utf8').trim();
    const postgresBin = join(PG_BIN, 'postgres');

    for (let i = 0; i < ROUNDS; i++) {
      // Atelier: the request a workshop makes, up to its first query.
      const name = `pg${i}`;
      const t0 = performance.now();
      const h = await sim.startSimulator({
        type: 'postgres',
        name,
        env: { POSTGRES_DB: 'orders_test', POSTGRES_USER: 'dev', POSTGRES_PASSWORD: 'devpassword' },
        dir: join(base, 'services', name),
        socketDir,
        cacheDir,
        runAs,
        sandbox: sandbox.simulatorSandboxArgv,
      });
      try {
        await firstQuery(join(socketDir, name), 'dev', 'devpassword', 'orders_test');
        atelier.push(performance.now() - t0);
      } finally {
        await sim.removeSimulator(h);
      }

      // Bare processes, the same copy each: on the host (no sandbox), then in the simulator's sandbox.
      const bare = join(base, `bare${i}`);
      mkdirSync(bare, { mode: 0o755 });
      mkdirSync(join(bare, 'sock'), { mode: 0o700 });
      if (runAs) chownSync(join(bare, 'sock'), runAs.uid, runAs.gid);
      await copyTemplate(templateData, join(bare, 'host'), runAs);
      onHost.push(
        await bareStart(
          [postgresBin, '-D', join(bare, 'host'), '-k', join(bare, 'sock'), '-p', '5432'],
          join(bare, 'sock'),
          adminPassword,
          runAs,
          false,
        ),
      );
      await copyTemplate(templateData, join(bare, 'sandboxed'), runAs);
      const argv = sandbox.simulatorSandboxArgv({
        hostname: 'bench',
        runAs,
        mounts: [
          { src: join(bare, 'sock'), dest: '/sim/sock', writable: true },
          { src: join(bare, 'sandboxed'), dest: '/sim/data', writable: true },
        ],
        stateDir: join(bare, 'state'),
        argv: [postgresBin, '-D', '/sim/data', '-k', '/sim/sock', '-p', '5432'],
        cwd: '/sim/data',
      });
      inSandbox.push(await bareStart(argv, join(bare, 'sock'), adminPassword, runAs, true));
      rmSync(bare, { recursive: true, force: true });

      // From scratch: initdb, start, the same first query.
      scratch.push(await postgresFromScratch(join(base, `scratch${i}`), runAs));
    }

    const a = summarize(atelier);
    const s = summarize(scratch);
    const h = summarize(onHost);
    const b = summarize(inSandbox);
    line(`template cluster, once per server (warmSimulators): ${ms(warm)}`);
    statLine('atelier', 'startSimulator(postgres) -> first SELECT 1', a, ['p50', 'p95']);
    statLine('bare', 'template copy, postgres on the host -> SELECT 1', h, ['p50', 'p95']);
    statLine('bare', 'template copy, postgres in its sandbox -> SELECT 1', b, ['p50', 'p95']);
    statLine('scratch', 'initdb + postgres start -> first SELECT 1', s, ['p50', 'p95']);
    line(`the sandbox adds (p50, sandboxed - on the host): ${ms(b.p50 - h.p50)}`);
    ratioLine('atelier / from scratch (p50)', a.p50, s.p50);
    goalLine(`p50 < ${GOAL_P50_MS} ms`, a.p50, GOAL_P50_MS);
    goalLine('p50 < 1/4 of from scratch', a.p50, s.p50 * GOAL_OF_SCRATCH);
    goalLine(`the sandbox adds < ${GOAL_SANDBOX_MS} ms (p50)`, b.p50 - h.p50, GOAL_SANDBOX_MS);
    return { atelier: a, scratch: s, bareOnHost: h, bareInSandbox: b, sandboxMs: b.p50 - h.p50, warmMs: warm, ratio: a.p50 / s.p50 };
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
}
