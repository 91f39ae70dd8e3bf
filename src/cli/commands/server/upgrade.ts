import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  createReadStream,
  createWriteStream,
  existsSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
} from 'node:fs';
import { basename, join } from 'node:path';
import { once } from 'node:events';
import { promisify } from 'node:util';
import { emitter, journal, type Emit } from './host/engine.js';
import { hostLayout, parseEnvFile, type HostLayout } from './host/layout.js';
import { healthz, localUrl, serviceRunning, startService, stopService } from './host/service.js';
import { readOffset, sizeOf, whileRunning, type Progress } from './host/progress.js';
import { setLink } from './host/steps.js';
import { requireRoot } from './install.js';

const run = promisify(execFile);

export interface ServerUpgradeFlags {
  prefix?: string;
  release?: string;
  rollback?: boolean;
}

const TARBALL = /^atelier-([0-9A-Za-z][0-9A-Za-z.+-]*)-linux-x64\.tar\.gz$/;

/**
 * Copies the tarball (URL or path) to `dest`, hashing it on the way: one pass, measured in bytes
 * against its Content-Length (or its size on disk). Returns its SHA-256.
 */
async function fetchTo(src: string, dest: string, progress: Progress): Promise<string> {
  let body: AsyncIterable<Uint8Array>;
  let total: number | undefined;
  if (/^https?:\/\//.test(src)) {
    const res = await fetch(src);
    if (!res.ok || !res.body) throw new Error(`could not download ${src}: HTTP ${res.status}`);
    const length = Number(res.headers.get('content-length'));
    total = length > 0 ? length : undefined;
    body = res.body as unknown as AsyncIterable<Uint8Array>;
  } else {
    const path = src.replace(/^file:\/\//, '');
    if (!existsSync(path)) throw new Error(`${path} does not exist`);
    total = statSync(path).size;
    body = createReadStream(path);
  }
  const h = createHash('sha256');
  const file = createWriteStream(dest);
  let done = 0;
  progress(0, total);
  for await (const chunk of body) {
    h.update(chunk);
    done += chunk.length;
    if (!file.write(chunk)) await once(file, 'drain');
    progress(done, total);
  }
  file.end();
  await once(file, 'close');
  return h.digest('hex');
}

async function readText(src: string): Promise<string> {
  if (/^https?:\/\//.test(src)) {
    const res = await fetch(src);
    if (!res.ok) throw new Error(`could not download ${src}: HTTP ${res.status}`);
    return res.text();
  }
  return readFileSync(src.replace(/^file:\/\//, ''), 'utf8');
}

/** --release: a tarball (path or URL, its .sha256 beside it) or a folder/base URL with LATEST (as get.sh takes). */
async function resolveTarball(src: string): Promise<{ url: string; version: string }> {
  const local = !/^https?:\/\//.test(src);
  const isDir = local && existsSync(src.replace(/^file:\/\//, '')) && statSync(src.replace(/^file:\/\//, '')).isDirectory();
  if (!isDir && TARBALL.test(basename(src))) return { url: src, version: TARBALL.exec(basename(src))![1]! };
  if (!isDir && local)
    throw new Error(`--release ${src}: give a file named atelier-VERSION-linux-x64.tar.gz, or a folder/URL holding one and LATEST`);
  const base = src.replace(/\/+$/, '');
  const version = (await readText(`${base}/LATEST`)).trim();
  if (!/^[0-9A-Za-z][0-9A-Za-z.+-]*$/.test(version)) throw new Error(`${base}/LATEST does not name a version`);
  return { url: `${base}/atelier-${version}-linux-x64.tar.gz`, version };
}

function currentVersion(layout: HostLayout): string {
  try {
    return readlinkSync(layout.current).replace(/^releases\//, '');
  } catch {
    throw new Error(`Atelier is not installed here (no ${layout.current}): install it first (scripts/get.sh)`);
  }
}

/** The database the service uses: the embedded cluster's socket, or the external URL. */
function databaseUrl(env: Record<string, string>, dataDir: string): string {
  return env.ATELIER_DATABASE_URL ?? `postgresql://atelier@/atelier?host=${encodeURIComponent(join(dataDir, 'pgsock'))}`;
}

async function pgBin(pgBinDir: string | undefined, tool: string): Promise<string> {
  const { findPgBinDir } = await import('../../../db/index.js');
  return join(findPgBinDir(pgBinDir), tool);
}

/** pg_restore of `dump` into `url`, measured by how far it has read the dump. */
async function pgRestore(pgBinDir: string | undefined, args: string[], dump: string, progress: Progress): Promise<void> {
  const p = run(await pgBin(pgBinDir, 'pg_restore'), [...args, dump]);
  await whileRunning(p, () => readOffset(p.child.pid, dump), progress, sizeOf(dump));
}

/** Puts the database back as the dump has it: the embedded one is dropped and restored whole. */
async function restoreDatabase(
  env: Record<string, string>,
  dataDir: string,
  dump: string,
  pgBinDir: string | undefined,
  progress: Progress,
): Promise<void> {
  if (env.ATELIER_DATABASE_URL) {
    await pgRestore(pgBinDir, ['--clean', '--if-exists', '--single-transaction', '-d', env.ATELIER_DATABASE_URL], dump, progress);
    return;
  }
  const { startEmbeddedPostgres } = await import('../../../db/index.js');
  const pg = await startEmbeddedPostgres({ dataDir, binDir: pgBinDir, isRoot: true, log: () => undefined });
  try {
    const admin = `postgresql://atelier@/postgres?host=${encodeURIComponent(join(dataDir, 'pgsock'))}`;
    await run(await pgBin(pgBinDir, 'psql'), [
      '-v',
      'ON_ERROR_STOP=1',
      '-d',
      admin,
      '-c',
      'DROP DATABASE IF EXISTS atelier WITH (FORCE)',
      '-c',
      'CREATE DATABASE atelier',
    ]);
    await pgRestore(pgBinDir, ['--single-transaction', '-d', pg.connectionString], dump, progress);
  } finally {
    await pg.stop();
  }
}

/**
 * pg_dump of the service's database to `dump`, measured by the dump's size against the
 * database's (pg_database_size): an estimate, as the dump is compressed and holds no indexes,
 * so the bar ends with a jump to 100 %.
 */
async function backUp(url: string, dump: string, pgBinDir: string | undefined, progress: Progress): Promise<void> {
  const { stdout } = await run(await pgBin(pgBinDir, 'psql'), ['-At', '-d', url, '-c', 'SELECT pg_database_size(current_database())']);
  const size = Number(stdout.trim());
  const p = run(await pgBin(pgBinDir, 'pg_dump'), ['-Fc', '-f', dump, '-d', url]);
  await whileRunning(p, () => sizeOf(dump), progress, size > 0 ? size : undefined);
}

/** Health of the new server: ok with `version`, or it failed (exited during start-up, or timed out). */
async function checkHealth(listen: string, version: string, layout: HostLayout, logOffset: number, timeoutMs: number): Promise<void> {
  const logFile = join(layout.logDir, 'server.log');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const h = await healthz(listen);
    if (h?.status === 'ok' && h.version === version) return;
    const log = existsSync(logFile) ? readFileSync(logFile).subarray(logOffset).toString('utf8') : '';
    if (/supervisor: server exited/.test(log) || Date.now() > deadline) {
      const why = /supervisor: server exited/.test(log)
        ? 'the server exited while starting'
        : `no healthy answer within ${timeoutMs / 1000} s`;
      throw new Error(`${why}; end of its log:\n${log.split('\n').slice(-12).join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Stops the service, points `current` at `version`, starts it and checks its health. */
async function switchTo(layout: HostLayout, version: string, listen: string): Promise<void> {
  if (serviceRunning(layout)) await stopService(layout);
  setLink(layout.current, `releases/${version}`);
  const logFile = join(layout.logDir, 'server.log');
  const offset = existsSync(logFile) ? statSync(logFile).size : 0;
  await startService(layout);
  await checkHealth(listen, version, layout, offset, 180_000);
}

/**
 * `atelier server upgrade`: verify, unpack beside the current release, back up the database
 * (pg_dump), stop, switch, start (the new server migrates), health-check; on any failure after
 * the stop, back to the previous release and the database as backed up, automatically.
 * `--rollback` returns to the release before the last upgrade (the database is kept: migrations
 * only add, and a server ignores the ones it does not know).
 */
export async function serverUpgrade(flags: ServerUpgradeFlags, output: string, pgBinDir: string | undefined): Promise<number> {
  requireRoot('upgrade');
  const emit = emitter(output);
  const base = hostLayout(flags.prefix);
  if (!existsSync(base.envFile)) throw new Error(`Atelier is not installed here (no ${base.envFile}): install it first (scripts/get.sh)`);
  const env = parseEnvFile(readFileSync(base.envFile, 'utf8'));
  const layout = hostLayout(flags.prefix, env.ATELIER_DATA_DIR);
  const listen = env.ATELIER_LISTEN ?? '127.0.0.1:7878';
  const from = currentVersion(layout);
  const previousLink = join(layout.home, 'previous');
  const total = flags.rollback ? 1 : 6;
  let index = 0;
  const phase = async <T>(step: string, detail: string, fn: (progress: Progress) => Promise<T>): Promise<T> => {
    index++;
    const t0 = Date.now();
    emit({ event: 'step', step, index, total, state: 'applying', detail });
    const r = await fn((done, of) => emit({ event: 'progress', step, done, total: of, unit: 'bytes' }));
    emit({ event: 'step', step, index, total, state: 'applied', detail, ms: Date.now() - t0 });
    journal(layout.journal, { step: `upgrade:${step}`, outcome: 'applied', detail });
    return r;
  };

  if (flags.rollback) {
    let to: string;
    try {
      to = readlinkSync(previousLink).replace(/^releases\//, '');
    } catch {
      throw new Error('there is no previous release to return to (no upgrade was made here)');
    }
    if (!existsSync(join(layout.releases, to, 'RELEASE.json')))
      throw new Error(`the previous release ${to} is no longer in ${layout.releases}`);
    await phase('switch', `${from} -> ${to}, started, healthy`, () => switchTo(layout, to, listen));
    setLink(previousLink, `releases/${from}`);
    emit({
      event: 'done',
      from,
      to,
      message: `rolled back: Atelier ${to} runs at ${localUrl(listen)} (the database was kept; \`upgrade --rollback\` again returns to ${from})`,
    });
    return 0;
  }

  if (!flags.release) throw new Error('give the new release: --release FILE|URL (a tarball, or the folder/URL get.sh was given)');
  const { url, version: to } = await resolveTarball(flags.release);
  if (to === from) {
    emit({ event: 'done', from, to, message: `no change: ${to} is already the current release` });
    return 0;
  }
  const work = join(layout.releases, `.upgrade-${process.pid}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  try {
    const tarball = join(work, basename(url));
    await phase('verify', `${basename(url)} matches its SHA-256`, async (progress) => {
      const got = await fetchTo(url, tarball, progress);
      const want = (await readText(`${url}.sha256`)).trim().split(/\s+/)[0];
      if (want !== got) throw new Error(`checksum mismatch for ${basename(url)}: expected ${want}, got ${got}. Nothing was changed`);
    });
    await phase('unpack', `beside ${from}, in ${join(layout.releases, to)}`, async (progress) => {
      if (existsSync(join(layout.releases, to, 'RELEASE.json'))) return;
      // Measured by how far tar has read the tarball.
      const tar = run('tar', ['-xzf', tarball, '-C', work, '--no-same-owner']);
      await whileRunning(tar, () => readOffset(tar.child.pid, tarball), progress, sizeOf(tarball));
      const info = JSON.parse(readFileSync(join(work, `atelier-${to}`, 'RELEASE.json'), 'utf8')) as { version?: string };
      if (info.version !== to) throw new Error(`${basename(url)} holds release ${info.version}, not ${to}`);
      renameSync(join(work, `atelier-${to}`), join(layout.releases, to));
    });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  const backups = join(layout.dataDir, 'backups');
  const dump = join(backups, `pre-upgrade-${from}-to-${to}-${new Date().toISOString().replace(/[:.]/g, '')}.dump`);
  await phase('backup', dump, async (progress) => {
    mkdirSync(backups, { recursive: true, mode: 0o700 });
    if (!serviceRunning(layout) && !env.ATELIER_DATABASE_URL)
      throw new Error('the service is not running, so neither is its database: start it (`atelier server install`) before upgrading');
    await backUp(databaseUrl(env, layout.dataDir), dump, pgBinDir, progress);
  });

  try {
    await phase('stop', `${from} stopped (workshops keep running)`, () => stopService(layout));
    const logFile = join(layout.logDir, 'server.log');
    const offset = existsSync(logFile) ? statSync(logFile).size : 0;
    await phase('start', `current -> releases/${to}, started (it applies its migrations)`, async () => {
      setLink(layout.current, `releases/${to}`);
      await startService(layout);
    });
    await phase('health', `${to} healthy at ${localUrl(listen)}`, () => checkHealth(listen, to, layout, offset, 180_000));
  } catch (err) {
    await rollBack(emit, layout, { from, to, listen, dump, env, pgBinDir, reason: (err as Error).message });
    return 1;
  }
  setLink(previousLink, `releases/${from}`);
  emit({
    event: 'done',
    from,
    to,
    backup: dump,
    message: `upgraded: Atelier ${to} runs at ${localUrl(listen)}; \`atelier server upgrade --rollback\` returns to ${from}`,
  });
  return 0;
}

async function rollBack(
  emit: Emit,
  layout: HostLayout,
  o: { from: string; to: string; listen: string; dump: string; env: Record<string, string>; pgBinDir: string | undefined; reason: string },
): Promise<void> {
  emit({ event: 'step', step: 'rollback', index: 0, total: 0, state: 'failed', detail: `${o.to} failed: ${o.reason}` });
  journal(layout.journal, { step: 'upgrade', outcome: 'failed', detail: o.reason });
  if (serviceRunning(layout)) await stopService(layout);
  setLink(layout.current, `releases/${o.from}`);
  const t0 = Date.now();
  const detail = `the database as backed up in ${o.dump}`;
  emit({ event: 'step', step: 'restore', index: 0, total: 0, state: 'applying', detail });
  await restoreDatabase(o.env, layout.dataDir, o.dump, o.pgBinDir, (done, of) =>
    emit({ event: 'progress', step: 'restore', done, total: of, unit: 'bytes' }),
  );
  emit({ event: 'step', step: 'restore', index: 0, total: 0, state: 'applied', detail, ms: Date.now() - t0 });
  const offset = existsSync(join(layout.logDir, 'server.log')) ? statSync(join(layout.logDir, 'server.log')).size : 0;
  await startService(layout);
  await checkHealth(o.listen, o.from, layout, offset, 180_000);
  journal(layout.journal, { step: 'upgrade', outcome: 'rolled back', detail: `${o.from} restored with ${o.dump}` });
  emit({
    event: 'done',
    from: o.from,
    to: o.to,
    rolledBack: true,
    message: `upgrade to ${o.to} failed, rolled back: Atelier ${o.from} runs again at ${localUrl(o.listen)} with the database as backed up in ${o.dump}. Why: ${o.reason.split('\n')[0]}`,
  });
}
