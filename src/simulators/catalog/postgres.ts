import { execFile } from 'node:child_process';
import { createHash, createHmac, pbkdf2, randomBytes } from 'node:crypto';
import { assertSocket } from '../socketGuard.js';
import {
  appendFileSync,
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statfsSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { rm } from 'node:fs/promises';
import { setPriority } from 'node:os';
import { basename, dirname, join } from 'node:path';
import pg from 'pg';
import { AtelierError, SIMULATOR_OPTIONS } from '../../core/index.js';
import { assertReachable, chownTree, run, SIMULATOR_ENV } from '../process.js';
import { runOffServer, spawnViaHelper } from '../spawner.js';
import type { RunAs, SimulatorHandle, SimulatorSpec } from '../types.js';
import {
  checkKeys,
  checkSocketPath,
  finalError,
  invalid,
  requestedMajor,
  SANDBOX_SOCKETS,
  type CatalogEntry,
  type SimulatorInstance,
} from './entry.js';

/**
 * PostgreSQL simulator: the system PostgreSQL, one throwaway cluster per simulator.
 *
 * Why a template copy: `initdb` costs ~0.8–1.5 s here, copying a cluster made once costs
 * ~100–200 ms (it is ~28 MB of files), so each server major gets one pre-initialised template
 * in the cache directory, copied per instance and per reset.
 *
 * Why a unix socket only: the server runs in a sandbox of its own (lifecycle.ts), whose network
 * namespace has a loopback only; it listens on `/sim/sock/.s.PGSQL.5432` inside, the host's
 * `<socketDir>/<name>/.s.PGSQL.5432` (listen_addresses = ''), which the server's relay dials
 * for the workshop.
 *
 * Who is superuser: the bootstrap superuser `atelier_admin` (scram password kept in the
 * instance directory, readable by the server only, changed right after each start) is for the
 * server. The workshop's user (POSTGRES_USER) owns its database and may create databases, but
 * is not superuser unless asked (`options.superuser`). A superuser's programs (COPY … PROGRAM,
 * archive_command) and files (COPY … TO) stay in the simulator's sandbox: its data directory,
 * its private /tmp, no network, no host process, the workshop's limits.
 */

const ADMIN = 'atelier_admin';
/** Bump when the template's contents change: older templates are then left unused. */
const TEMPLATE_FORMAT = 'v3';
/** A database made in the template, renamed into the one asked for (a rename is instant; CREATE DATABASE copies files). */
const SPARE_DATABASE = 'atelier_spare';
const PORT = 5432;
const PG_BASE = '/usr/lib/postgresql';

interface Installation {
  major: number;
  binDir: string;
  /** Full version, e.g. "15.18". */
  version: string;
}

let installed: Promise<Installation[]> | undefined;

/** Server majors installed under /usr/lib/postgresql, newest first: what is there, nothing run. */
function installedMajors(): number[] {
  return existsSync(PG_BASE)
    ? readdirSync(PG_BASE)
        .filter((v) => /^\d+$/.test(v) && existsSync(join(PG_BASE, v, 'bin', 'initdb')) && existsSync(join(PG_BASE, v, 'bin', 'postgres')))
        .map(Number)
        .sort((a, b) => b - a)
    : [];
}

function notInstalled(): AtelierError {
  return new AtelierError('UNSUPPORTED', 'PostgreSQL is not installed on this server: install it with `apt-get install -y postgresql`', {
    type: 'postgres',
  });
}

/** Server majors installed, newest first, with their full versions. */
function installations(): Promise<Installation[]> {
  installed ??= (async () => {
    const majors = installedMajors();
    return Promise.all(
      majors.map(async (major) => {
        const binDir = join(PG_BASE, String(major), 'bin');
        const { stdout } = await run(join(binDir, 'postgres'), ['--version'], { env: SIMULATOR_ENV });
        return { major, binDir, version: /(\d+(?:\.\d+)+)/.exec(stdout)?.[1] ?? String(major) };
      }),
    );
  })();
  installed.catch(() => {
    installed = undefined;
  });
  return installed;
}

async function resolveInstallation(spec: SimulatorSpec): Promise<Installation> {
  const all = await installations();
  if (all.length === 0) throw notInstalled();
  const major = requestedMajor(spec);
  if (major === undefined) return all[0]!;
  const found = all.find((i) => i.major === major);
  if (!found) {
    const list = all.map((i) => `${i.major} (${i.version})`).join(', ');
    throw new AtelierError(
      'UNSUPPORTED',
      `PostgreSQL ${spec.version} is not installed on this server; installed: ${list}. Ask for version "${all[0]!.major}" or leave the version out`,
      { field: 'version', requested: spec.version, installed: all.map((i) => i.version) },
    );
  }
  return found;
}

interface Settings {
  database: string;
  user: string;
  password: string;
  superuser: boolean;
}

function stringSetting(spec: SimulatorSpec, option: string, envName: string): string | undefined {
  const fromOption = spec.options?.[option];
  if (fromOption !== undefined) {
    if (typeof fromOption !== 'string')
      throw invalid(`postgres simulator ${spec.name}: option ${option} must be a string`, { field: `options.${option}` });
    return fromOption;
  }
  return spec.env?.[envName];
}

function checkName(value: string, field: string, what: string): void {
  // PostgreSQL truncates identifiers to 63 bytes: a longer name would silently become another one.
  if (value === '' || Buffer.byteLength(value) > 63 || value.includes('\0')) {
    throw invalid(`${what} ${JSON.stringify(value)} must be 1 to 63 bytes`, { field });
  }
}

const ENV_KEYS = ['POSTGRES_DB', 'POSTGRES_USER', 'POSTGRES_PASSWORD'] as const;

/** POSTGRES_DB / POSTGRES_USER / POSTGRES_PASSWORD (or options database / user / password), as the official image reads them. */
function settingsOf(spec: SimulatorSpec): Settings {
  checkKeys(spec, ENV_KEYS, Object.keys(SIMULATOR_OPTIONS.postgres ?? {}));
  const user = stringSetting(spec, 'user', 'POSTGRES_USER') ?? 'postgres';
  const database = stringSetting(spec, 'database', 'POSTGRES_DB') ?? user;
  // No well-known default: the socket is reachable by whoever can enter the socket directory.
  const password = stringSetting(spec, 'password', 'POSTGRES_PASSWORD') ?? randomBytes(18).toString('base64url');
  const superuser = spec.options?.superuser ?? false;
  if (typeof superuser !== 'boolean')
    throw invalid(`postgres simulator ${spec.name}: option superuser must be true or false`, { field: 'options.superuser' });
  checkName(user, 'env.POSTGRES_USER', 'the PostgreSQL user');
  checkName(database, 'env.POSTGRES_DB', 'the PostgreSQL database');
  if (user === ADMIN || user.startsWith('pg_')) {
    throw invalid(`the PostgreSQL user ${JSON.stringify(user)} is reserved: choose another POSTGRES_USER`, { field: 'env.POSTGRES_USER' });
  }
  if (database === 'template0' || database === 'template1') {
    throw invalid(`the PostgreSQL database ${database} is reserved: choose another POSTGRES_DB`, { field: 'env.POSTGRES_DB' });
  }
  if (password === '' || password.includes('\0') || password.length > 1000) {
    throw invalid('POSTGRES_PASSWORD must be 1 to 1000 characters', { field: 'env.POSTGRES_PASSWORD' });
  }
  return { database, user, password, superuser };
}

// ---------------------------------------------------------------------------------------------
// Template cluster: made once per server major, atomically, then only ever copied.

interface Template {
  dir: string;
  data: string;
  adminPassword: string;
}

const templates = new Map<string, Promise<Template>>();

function templateDir(cacheDir: string, inst: Installation): string {
  return join(cacheDir, `template-pg${inst.major}-${TEMPLATE_FORMAT}`);
}

function readTemplate(dir: string): Template | undefined {
  const data = join(dir, 'data');
  if (!existsSync(join(data, 'PG_VERSION'))) return undefined;
  return { dir, data, adminPassword: readFileSync(join(dir, 'admin.password'), 'utf8').trim() };
}

/** The template of `inst` in `cacheDir`, created on first use (once per process, race-free across processes). */
function ensureTemplate(cacheDir: string, inst: Installation, runAs: RunAs | undefined): Promise<Template> {
  const dir = templateDir(cacheDir, inst);
  let pending = templates.get(dir);
  if (!pending) {
    pending = createTemplate(cacheDir, dir, inst, runAs);
    templates.set(dir, pending);
    pending.catch(() => templates.delete(dir));
  }
  return pending;
}

/**
 * initdb refuses a uid that has no name (getpwuid), which workshop uids (600000+) have not: the
 * template is then made as `nobody` (it belongs to the server afterwards anyway; the servers
 * themselves run fine under a nameless uid).
 */
function namedUser(runAs: RunAs | undefined): RunAs | undefined {
  if (!runAs) return runAs;
  try {
    const named = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .some((l) => l.split(':')[2] === String(runAs.uid));
    if (named) return runAs;
  } catch {
    // no passwd file: keep what was given
  }
  return { uid: 65534, gid: 65534 };
}

async function createTemplate(cacheDir: string, dir: string, inst: Installation, given: RunAs | undefined): Promise<Template> {
  const runAs = namedUser(given);
  const existing = readTemplate(dir);
  if (existing) return existing;
  mkdirSync(cacheDir, { recursive: true, mode: 0o711 });
  // Leftovers of a server that died during initdb (another process may be in the middle of
  // its own: only those older than ten minutes are removed).
  for (const entry of readdirSync(cacheDir)) {
    if (!entry.startsWith(`${dir.slice(cacheDir.length + 1)}.init-`)) continue;
    const path = join(cacheDir, entry);
    if (Date.now() - statSync(path).mtimeMs > 600_000) rmSync(path, { recursive: true, force: true });
  }
  // initdb into a scratch directory, then rename: a crash half-way never leaves a broken
  // template, and of two servers (or two calls) racing, the first rename wins.
  const scratch = `${dir}.init-${randomBytes(4).toString('hex')}`;
  mkdirSync(scratch, { mode: 0o700 });
  try {
    const adminPassword = randomBytes(24).toString('base64url');
    const pwfile = join(scratch, 'pwfile');
    writeFileSync(pwfile, `${adminPassword}\n`, { mode: 0o600 });
    await chownTree(scratch, runAs);
    assertReachable(join(scratch, 'data'), runAs, 'PostgreSQL template');
    await run(
      join(inst.binDir, 'initdb'),
      [
        '-D',
        join(scratch, 'data'),
        '-U',
        ADMIN,
        `--pwfile=${pwfile}`,
        '--auth=scram-sha-256',
        '--encoding=UTF8',
        '--no-locale',
        '--no-sync',
        '--no-instructions',
        // 1 MB WAL segments instead of 16: the template (copied at every start) shrinks from ~39 to ~28 MB.
        '--wal-segsize=1',
      ],
      { cwd: scratch, env: SIMULATOR_ENV, ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}) },
    ).catch((err: Error & { stderr?: string }) => {
      throw new AtelierError(
        'UNAVAILABLE',
        `initdb of the PostgreSQL ${inst.major} simulator template failed: ${err.stderr?.trim() || err.message}`,
        {
          type: 'postgres',
        },
      );
    });
    rmSync(pwfile);
    const data = join(scratch, 'data');
    // One spare database, made now in single-user mode (no server, no socket): each start renames
    // it instead of copying template1 (~80 ms saved on every start, more on a loaded machine).
    const single = run(join(inst.binDir, 'postgres'), ['--single', '-D', data, '-c', 'fsync=off', 'postgres'], {
      cwd: scratch,
      env: SIMULATOR_ENV,
      ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
    });
    single.child.stdin!.end(`CREATE DATABASE ${SPARE_DATABASE} STRATEGY FILE_COPY\n`);
    await single.catch((err: Error & { stderr?: string }) => {
      throw new AtelierError(
        'UNAVAILABLE',
        `the PostgreSQL simulator template could not be prepared: ${err.stderr?.trim() || err.message}`,
        {
          type: 'postgres',
        },
      );
    });
    // Password for every local connection; there is no TCP listener at all.
    writeFileSync(
      join(data, 'pg_hba.conf'),
      '# Atelier simulator: unix socket only, every user by password (the workshop reaches it through a forwarder).\nlocal all all scram-sha-256\n',
    );
    appendFileSync(
      join(data, 'postgresql.conf'),
      [
        '',
        '# Atelier simulator: throwaway data, so durability is traded for speed.',
        'fsync = off',
        'synchronous_commit = off',
        'full_page_writes = off',
        "listen_addresses = ''",
        'max_connections = 50',
        'shared_buffers = 32MB',
        "log_destination = 'stderr'",
        "log_line_prefix = '%m [%p] %q%u@%d '",
        '',
      ].join('\n'),
    );
    writeFileSync(join(scratch, 'admin.password'), `${adminPassword}\n`, { mode: 0o600 });
    // The template belongs to the server, not to the workshop user that ran initdb: a workshop
    // must never be able to change what other workshops' clusters are copied from.
    await chownTree(scratch, { uid: process.getuid!(), gid: process.getgid!() });
    openInside(data);
    chmodSync(scratch, 0o700);
    try {
      renameSync(scratch, dir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw err;
      rmSync(scratch, { recursive: true, force: true });
    }
  } catch (err) {
    rmSync(scratch, { recursive: true, force: true });
    throw err;
  }
  const made = readTemplate(dir);
  if (!made)
    throw new AtelierError('INTERNAL', `the PostgreSQL simulator template ${dir} is incomplete: remove it and retry`, { path: dir });
  return made;
}

/** Creates the template of the newest installed PostgreSQL and its spare copies now (so that the first simulator starts fast). */
export async function warmPostgresTemplate(opts: { cacheDir: string; runAs?: RunAs | undefined }): Promise<void> {
  const all = await installations();
  if (all.length > 0) await refillSpares(await ensureTemplate(opts.cacheDir, all[0]!, opts.runAs));
}

/**
 * Why a copy is not chowned file by file: PostgreSQL checks the owner of its data directory
 * only, and `chown -R` of the ~1300 files of a cluster costs 25–70 ms of inode updates on this
 * disk (more under load), on the path of every start. So everything *inside* the template's
 * data directory is made rw for all (0666 files, 0777 directories) and, in a copy, only the data
 * directory itself is handed over (chown + 0700). Nobody else can reach those files: the only
 * path to them goes through that 0700 directory, owned by the simulator's uid (and, before a copy
 * is handed over, through the server's 0700 template and spare directories). Files PostgreSQL
 * creates afterwards are its own, 0600.
 */
function openInside(dir: string): void {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) {
      chmodSync(path, 0o777);
      openInside(path);
    } else if (e.isFile()) chmodSync(path, 0o666);
  }
}

// ---------------------------------------------------------------------------------------------
// Instance

/** The data directory inside the sandbox. */
const SANDBOX_DATA = '/sim/data';

function dataDir(instance: SimulatorInstance): string {
  return join(instance.dir, 'data');
}

function adminPasswordFile(instance: SimulatorInstance): string {
  return join(instance.dir, 'admin.password');
}

// Spare copies: the copy is most of a start (~100 ms on an idle disk, 1–2 s on a busy one), so
// a few ready-made copies wait next to the template and a start renames one into place.
//
// Bursts: a start that finds the pool empty does not copy on its own beside the refill (two
// copies fighting for the disk, each slower); it waits for the next copy the refill finishes,
// which then runs at normal priority, two at a time while anyone waits, and the pool keeps
// BURST_SPARES instead of SPARES for the next ten minutes. Disk only: ~35 MB a copy.
const SPARES = 3;
const BURST_SPARES = 6;
const BURST_MEMORY_MS = 600_000;
/** A refill not triggered by a start's answer (the start failed) happens after this. */
const REFILL_FALLBACK_MS = 2000;
/** How long after a start's answer the refill waits while the pool still has a spare. */
const REFILL_DELAY_MS = 300;

interface SparePool {
  dir: string;
  template: Template;
  /** Until when the pool keeps BURST_SPARES. */
  burstUntil: number;
  /** Copies in progress (the pids of their `cp` processes). */
  copying: Set<number>;
  /** Starts waiting for a copy, served first come first served. */
  waiters: Array<{ resolve: (copy: string) => void; reject: (err: Error) => void }>;
  /** The running refill loop, if any. */
  job: Promise<void> | undefined;
  /** Its filesystem is being moved away (a spare disk taken): copies in progress are killed. */
  abandoned?: boolean;
}

const pools = new Map<string, SparePool>();
/**
 * Instance directory → the refill of the pool it took a spare from, run once the instance
 * answered (`urgent`: the pool it took from is empty, with starts perhaps waiting).
 */
const afterStart = new Map<string, { refill: () => void; urgent: () => boolean }>();

function poolOf(template: Template): SparePool {
  const dir = `${template.dir}.spares`;
  let pool = pools.get(dir);
  if (!pool) {
    pool = { dir, template, burstUntil: 0, copying: new Set(), waiters: [], job: undefined };
    pools.set(dir, pool);
  }
  return pool;
}

function spares(pool: SparePool): string[] {
  try {
    return readdirSync(pool.dir).filter((e) => e.startsWith('spare-'));
  } catch {
    return [];
  }
}

/** Renames a ready spare to `dest`: true when one was there. */
function takeSpare(pool: SparePool, dest: string): boolean {
  for (const entry of spares(pool)) {
    try {
      renameSync(join(pool.dir, entry), dest);
      return true;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') continue; // taken by a concurrent start (another server on the same cache)
      throw err;
    }
  }
  return false;
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // ended meanwhile
  }
}

/** One copy of the template into the pool directory, at the lowest CPU priority unless someone waits for it. */
function copyOnce(pool: SparePool): Promise<string> {
  const copy = join(pool.dir, `.copy-${randomBytes(4).toString('hex')}`);
  const urgent = pool.waiters.length > 0;
  const argv = [...(urgent ? [] : ['/usr/bin/nice', '-n', '19']), '/usr/bin/cp', '-a', pool.template.data, copy];
  const failed = (err: Error): never => {
    // An abandoned copy (its spare disk is being taken) is left for the workshop's next refill or
    // drop to remove: the create waiting for the copy's end should not wait for a removal too.
    if (!pool.abandoned) rmSync(copy, { recursive: true, force: true });
    throw err;
  };
  const track = (pid: number): void => {
    pool.copying.add(pid);
    if (pool.abandoned) killQuietly(pid);
  };
  // Through the spawner when it runs (a fork of the server would stop its event loop meanwhile).
  const viaHelper = spawnViaHelper({ argv, cwd: '/', env: SIMULATOR_ENV, detached: false, awaited: true });
  if (viaHelper) {
    return viaHelper.then(async ({ pid, exit }) => {
      track(pid);
      const code = await exit.finally(() => pool.copying.delete(pid));
      return code === 0 ? copy : failed(new Error(`copying the PostgreSQL template failed (cp: ${code})`));
    });
  }
  return new Promise<string>((resolve, reject) => {
    const child = execFile(argv[0]!, argv.slice(1), (err) => {
      if (child.pid !== undefined) pool.copying.delete(child.pid);
      if (err) reject(err);
      else resolve(copy);
    });
    if (child.pid !== undefined) track(child.pid);
  }).catch(failed);
}

/** Tops the pool up and serves the starts waiting for a copy; one loop per pool; never rejects. */
function refillSpares(template: Template): Promise<void> {
  const pool = poolOf(template);
  pool.job ??= (async () => {
    mkdirSync(pool.dir, { recursive: true, mode: 0o700 });
    for (const entry of readdirSync(pool.dir)) {
      const path = join(pool.dir, entry);
      if (entry.startsWith('.copy-') && !pool.copying.size && Date.now() - statSync(path).mtimeMs > 600_000)
        rmSync(path, { recursive: true, force: true });
    }
    const target = (): number => (Date.now() < pool.burstUntil ? BURST_SPARES : SPARES);
    const running = new Set<Promise<void>>();
    let failed: Error | undefined;
    for (;;) {
      const wanted = pool.waiters.length + Math.max(0, target() - spares(pool).length);
      // Two copies at once while starts wait (they share the disk, but not one CPU), else one.
      const parallel = pool.waiters.length > 0 ? 2 : 1;
      while (running.size < Math.min(wanted, parallel)) {
        const one: Promise<void> = copyOnce(pool)
          .then((copy) => {
            const waiter = pool.waiters.shift();
            if (waiter) waiter.resolve(copy);
            else renameSync(copy, join(pool.dir, `spare-${copy.slice(-8)}`));
          })
          .catch((err: Error) => {
            // The disk refused (full?): the starts waiting are told, the pool tries again later.
            for (const w of pool.waiters.splice(0)) w.reject(err);
            failed = err;
          })
          .finally(() => running.delete(one));
        running.add(one);
      }
      if (running.size === 0) return;
      await Promise.race(running);
      if (failed) {
        await Promise.all(running);
        return;
      }
    }
  })()
    .catch(() => undefined)
    .finally(() => {
      pool.job = undefined;
      // A start may have queued after the loop's last look.
      if (pool.waiters.length > 0) void refillSpares(template);
    });
  return pool.job;
}

/**
 * A copy for a start that found the pool empty: the next one the refill finishes (copies in
 * progress are raised to normal priority for it). Returns the copy's path, to rename.
 */
function waitForCopy(pool: SparePool): Promise<string> {
  pool.burstUntil = Date.now() + BURST_MEMORY_MS;
  const copy = new Promise<string>((resolve, reject) => pool.waiters.push({ resolve, reject }));
  for (const pid of pool.copying) {
    try {
      setPriority(pid, 0);
    } catch {
      // not root: a lower nice value is not ours to set; the copy finishes at its pace
    }
  }
  void refillSpares(pool.template);
  return copy;
}

// Workshop pools: a workshop with a disk quota has a filesystem of its own (sandbox/disk.ts), so
// a spare of the shared pool cannot be renamed into its simulators' directory (EXDEV) and a copy
// on the path of the start costs 100 ms idle, 1–2 s busy. Such a workshop keeps at most ONE
// spare of its own, in `<workshop root>/simulators/.spares/<template>/` (a simulator's name
// never starts with a dot), on its filesystem: a start renames it. It is made when its disk is
// prepared (the server's spare disks: before anyone waits) and again after each postgres start
// in that workshop, so only workshops that use postgres keep one (one without postgres among its
// simulators at create drops it). It is a file of the workshop: it counts against its quota
// (~35 MB), and is gone with it. Why not an overlay on the shared template (no copy at all): a
// mount per instance on the host, to undo at every stop, reset and server restart, for ~100 ms
// that a background copy already hides.

/** About what a copy of the template takes (~35 MB), to leave a workshop near its quota alone. */
const SPARE_BYTES = 40 << 20;

/** The pool of the workshop holding `instanceDir`, or undefined when it shares the template's filesystem. */
function workshopPool(instanceDir: string, template: Template): SparePool | undefined {
  const simulatorsDir = dirname(instanceDir);
  try {
    if (statSync(simulatorsDir).dev === statSync(template.dir).dev) return undefined;
  } catch {
    return undefined;
  }
  const dir = join(simulatorsDir, '.spares', basename(template.dir));
  let pool = pools.get(dir);
  if (!pool) {
    pool = { dir, template, burstUntil: 0, copying: new Set(), waiters: [], job: undefined };
    pools.set(dir, pool);
  }
  return pool;
}

/** Makes the workshop's one spare if it has none; one copy at a time per workshop; never rejects. */
function refillWorkshopSpare(pool: SparePool): Promise<void> {
  pool.job ??= (async () => {
    // The simulators' directory is entered by their uids (0711), the spares only by the server.
    mkdirSync(dirname(dirname(pool.dir)), { recursive: true, mode: 0o711 });
    mkdirSync(pool.dir, { recursive: true, mode: 0o700 });
    for (const entry of readdirSync(pool.dir)) {
      const path = join(pool.dir, entry);
      if (entry.startsWith('.copy-') && !pool.copying.size) rmSync(path, { recursive: true, force: true });
    }
    if (spares(pool).length > 0 || pool.abandoned) return;
    // A workshop close to its quota gets no spare: it would take the room its own writes need.
    const fs = statfsSync(pool.dir);
    if (fs.bavail * fs.bsize < 2 * SPARE_BYTES + 0.1 * fs.blocks * fs.bsize) return;
    const copy = await copyOnce(pool);
    if (spares(pool).length > 0) rmSync(copy, { recursive: true, force: true });
    else renameSync(copy, join(pool.dir, `spare-${copy.slice(-8)}`));
  })()
    .catch(() => undefined) // the workshop's disk is full: its next start copies
    .finally(() => {
      pool.job = undefined;
    });
  return pool.job;
}

/**
 * The instance's data from its workshop's pool: the spare renamed, or the copy in progress
 * waited for (it is ahead of a new one), or else a copy of its own. Returns 0: the wait is not a
 * burst of the shared pool (what `waitedForCopyMs` warns about); the start's prepareMs shows it.
 */
async function fromWorkshopPool(pool: SparePool, data: string): Promise<number> {
  if (takeSpare(pool, data)) return 0;
  if (pool.job) {
    for (const pid of pool.copying) {
      try {
        setPriority(pid, 0);
      } catch {
        // not root: the copy finishes at its pace
      }
    }
    await pool.job;
    if (takeSpare(pool, data)) return 0;
  }
  await run('cp', ['-a', pool.template.data, data]);
  return 0;
}

/**
 * Prepares the one spare copy of the newest PostgreSQL template on the workshop filesystem of
 * `simulatorsDir` (`<workshop root>/simulators`). Nothing when that directory shares the
 * template's filesystem (the shared pool serves it) or the template is not made yet. Never rejects.
 */
export async function seedPostgresSpare(opts: {
  simulatorsDir: string;
  cacheDir: string;
  signal?: AbortSignal | undefined;
}): Promise<void> {
  const newest = (await installations().catch(() => []))[0];
  if (!newest) return;
  const dir = templateDir(opts.cacheDir, newest);
  const template = await (templates.get(dir)?.catch(() => undefined) ?? readTemplate(dir));
  if (!template) return;
  mkdirSync(opts.simulatorsDir, { recursive: true, mode: 0o711 });
  const pool = workshopPool(join(opts.simulatorsDir, 'postgres'), template);
  if (!pool || opts.signal?.aborted) return;
  const stop = (): void => {
    pool.abandoned = true;
    for (const pid of pool.copying) killQuietly(pid);
  };
  opts.signal?.addEventListener('abort', stop, { once: true });
  await refillWorkshopSpare(pool);
  opts.signal?.removeEventListener('abort', stop);
  // A spare disk moves onto a workshop under another path: its pool is looked up afresh there.
  pools.delete(pool.dir);
}

/** Removes the postgres spares of a workshop that does not use postgres (its quota gets the room back). */
export async function dropPostgresSpares(simulatorsDir: string): Promise<void> {
  const root = join(simulatorsDir, '.spares');
  for (const [dir, pool] of pools) {
    if (!dir.startsWith(`${root}/`)) continue;
    await pool.job;
    pools.delete(dir);
  }
  // Out of the way first, in one rename: a start that comes meanwhile (a live request right after
  // the create) finds no spare and copies its own, never one the removal is half-way through.
  const trash = `${root}-dropped-${randomBytes(4).toString('hex')}`;
  try {
    renameSync(root, trash);
  } catch {
    return; // none there
  }
  // Then at the lowest CPU priority, in a child of its own: the create that dropped it goes on
  // to its first exec meanwhile. GNU rm never follows a link out of the tree.
  await runOffServer(['/usr/bin/nice', '-n', '19', '/usr/bin/rm', '-rf', '--one-file-system', '--', trash], {
    env: SIMULATOR_ENV,
  }).catch(() => rm(trash, { recursive: true, force: true }));
}

/**
 * Replaces the instance's data with a fresh copy of the template. Returns how long it waited
 * for a copy (0 when a spare was ready).
 */
async function copyTemplate(instance: SimulatorInstance, template: Template): Promise<number> {
  const data = dataDir(instance);
  rmSync(data, { recursive: true, force: true });
  const local = workshopPool(instance.dir, template);
  const waited = local ? await fromWorkshopPool(local, data) : await fromSharedPool(instance, template, data);
  if (local)
    refillAfterStart(
      instance,
      () => void refillWorkshopSpare(local),
      () => false,
    );
  // The data directory only (see openInside): what is inside is reachable through it alone.
  if (instance.runAs) chownSync(data, instance.runAs.uid, instance.runAs.gid);
  chmodSync(data, 0o700);
  writeFileSync(adminPasswordFile(instance), `${template.adminPassword}\n`, { mode: 0o600 });
  return waited;
}

/**
 * Refilled once this start has answered (setUp), or in a while if it never does: the refill's
 * fork and its writes would otherwise compete with this very start.
 */
function refillAfterStart(instance: SimulatorInstance, refill: () => void, urgent: () => boolean): void {
  const entry = { refill, urgent };
  afterStart.set(instance.dir, entry);
  setTimeout(() => {
    if (afterStart.get(instance.dir) !== entry) return;
    afterStart.delete(instance.dir);
    refill();
  }, REFILL_FALLBACK_MS).unref();
}

/** The instance's data from the shared pool beside the template; how long it waited for a copy. */
async function fromSharedPool(instance: SimulatorInstance, template: Template, data: string): Promise<number> {
  const pool = poolOf(template);
  let waited = 0;
  let took = false;
  try {
    took = takeSpare(pool, data);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
    // The instance is on another file system than the cache: a copy of its own.
    await run('cp', ['-a', template.data, data]);
  }
  if (took)
    refillAfterStart(
      instance,
      () => void refillSpares(template),
      () => spares(pool).length === 0,
    );
  else if (!existsSync(data)) {
    const t0 = performance.now();
    const copy = await waitForCopy(pool);
    try {
      renameSync(copy, data);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
      // The instance is on another file system than the pool (its workshop's own): the copy goes
      // back to the pool as a spare and the instance gets a copy of its own.
      renameSync(copy, join(pool.dir, `spare-${copy.slice(-8)}`));
      await run('cp', ['-a', template.data, data]);
    }
    waited = performance.now() - t0;
  }
  return waited;
}

/**
 * A SCRAM-SHA-256 verifier computed here (RFC 5802/7677, PostgreSQL's stored format) so that
 * the server does not hash while the instance is starting: `ALTER ROLE … PASSWORD 'SCRAM-SHA-256$…'`
 * stores it as is. Only for printable ASCII passwords (SASLprep leaves those unchanged); any
 * other password is sent as is and hashed by the server, as PostgreSQL would.
 */
async function scramVerifier(password: string): Promise<string> {
  if (!/^[\x21-\x7e]*$/.test(password)) return password;
  const iterations = 4096;
  const salt = randomBytes(16);
  const salted = await new Promise<Buffer>((resolve, reject) =>
    pbkdf2(password, salt, iterations, 32, 'sha256', (err, key) => (err ? reject(err) : resolve(key))),
  );
  const storedKey = createHash('sha256').update(createHmac('sha256', salted).update('Client Key').digest()).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}

/**
 * The passwords an instance gets at its first start, prepared while its process starts:
 * instance directory → the new admin password and both verifiers. In memory only: the admin
 * password reaches the disk (0600, the server's) once the instance uses it.
 */
const pendingPasswords = new Map<string, Promise<{ admin: string; adminVerifier: string; userVerifier: string }>>();

function preparePasswords(instance: SimulatorInstance): void {
  const admin = randomBytes(24).toString('base64url');
  const job = Promise.all([scramVerifier(admin), scramVerifier(instance.settings.password!)]).then(([adminVerifier, userVerifier]) => ({
    admin,
    adminVerifier,
    userVerifier,
  }));
  job.catch(() => undefined);
  pendingPasswords.set(instance.dir, job);
  // An instance that never got to initialise (a failed start) does not keep its entry.
  setTimeout(() => pendingPasswords.get(instance.dir) === job && pendingPasswords.delete(instance.dir), 600_000).unref();
}

function adminClient(handle: SimulatorHandle): pg.Client {
  // Every caller connects right away (same tick): the socket is checked here (socketGuard.ts).
  assertSocket(join(handle.socketDir, handle.name, `.s.PGSQL.${PORT}`));
  const client = new pg.Client({
    host: join(handle.socketDir, handle.name),
    port: PORT,
    user: ADMIN,
    database: 'postgres',
    password: readFileSync(adminPasswordFile(handle), 'utf8').trim(),
    connectionTimeoutMillis: 2000,
  });
  // An idle connection's error (the instance stopped while the background DROP DATABASE ran)
  // comes as an event: without a listener it would be the server's uncaught exception. Errors
  // of a query still reject that query.
  client.on('error', () => undefined);
  return client;
}

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

function encodeUrlPart(value: string): string {
  return encodeURIComponent(value);
}

/**
 * True once the postmaster of `handle` wrote "ready" in its postmaster.pid (PostgreSQL 10+).
 * Its pid there is the one of its sandbox's PID namespace, not the host's: what tells this start
 * from an earlier one is that every start gets a fresh copy of the data (no postmaster.pid).
 */
function postmasterReady(handle: SimulatorHandle): boolean {
  let lines: string[];
  try {
    lines = readFileSync(join(dataDir(handle), 'postmaster.pid'), 'utf8').split('\n');
  } catch {
    return false;
  }
  return lines[1] === SANDBOX_DATA && lines[7]?.trim() === 'ready';
}

/**
 * The instance's own admin password, the user asked for and its database, on `client` (which it
 * ends). One round trip, one implicit transaction.
 */
async function setUp(client: pg.Client, handle: SimulatorHandle): Promise<void> {
  const s = handle.settings;
  if (!pendingPasswords.has(handle.dir)) preparePasswords(handle);
  const passwords = pendingPasswords.get(handle.dir)!;
  pendingPasswords.delete(handle.dir);
  let ended = false;
  try {
    const { admin, adminVerifier, userVerifier } = await passwords;
    const role = quoteIdent(s.user!);
    const attributes = s.superuser === 'true' ? 'SUPERUSER' : 'NOSUPERUSER CREATEDB';
    const lit = (v: string): string => `'${v.replace(/'/g, "''")}'`;
    // Each instance gets its own admin password (the template's is shared by every copy), the
    // user asked for, and its database (owner of it, hence of its public schema:
    // pg_database_owner, PostgreSQL 15).
    const statements = [
      `ALTER ROLE ${ADMIN} PASSWORD ${lit(adminVerifier)}`,
      `CREATE ROLE ${role} LOGIN ${attributes} PASSWORD ${lit(userVerifier)}`,
    ];
    if (s.database === 'postgres') statements.push(`ALTER DATABASE postgres OWNER TO ${role}`);
    else {
      // The template's spare database becomes the one asked for: catalog changes only.
      if (s.database !== SPARE_DATABASE) statements.push(`ALTER DATABASE ${SPARE_DATABASE} RENAME TO ${quoteIdent(s.database!)}`);
      statements.push(`ALTER DATABASE ${quoteIdent(s.database!)} OWNER TO ${role}`);
    }
    await client.query(statements.join(';\n'));
    writeFileSync(adminPasswordFile(handle), `${admin}\n`, { mode: 0o600 });
    const after = afterStart.get(handle.dir);
    if (after) {
      afterStart.delete(handle.dir);
      // The client's first query comes right after this answer: the refill (a fork of the server
      // and ~35 MB of writes) leaves it REFILL_DELAY_MS, unless the pool is empty now.
      if (after.urgent()) after.refill();
      else setTimeout(after.refill, REFILL_DELAY_MS).unref();
    }
    if (s.database === 'postgres') {
      // The spare database is not needed: dropped after the start has answered (a DROP DATABASE
      // unlinks ~300 files), on this connection, which it then closes. Not in a transaction
      // block, hence a statement of its own. A failure leaves an empty extra database, said in its log.
      ended = true;
      void client
        .query(`DROP DATABASE ${SPARE_DATABASE}`)
        .catch(() => undefined)
        .finally(() => void client.end().catch(() => undefined));
    }
  } finally {
    if (!ended) await client.end().catch(() => undefined);
  }
}

export const postgres: CatalogEntry = {
  port: PORT,
  // Fast shutdown (SIGINT): SIGTERM is "smart" and waits for every client to disconnect.
  stopSignal: 'SIGINT',
  secretEnv: ['PGPASSWORD', 'DATABASE_URL'],
  envKeys: ENV_KEYS,
  optionKeys: Object.keys(SIMULATOR_OPTIONS.postgres ?? {}),

  checkVersion(spec) {
    const majors = installedMajors();
    if (majors.length === 0) throw notInstalled();
    const major = requestedMajor(spec);
    if (major !== undefined && !majors.includes(major)) {
      throw new AtelierError(
        'UNSUPPORTED',
        `PostgreSQL ${spec.version} is not installed on this server; installed: ${majors.join(', ')}. Ask for version "${majors[0]!}" or leave the version out`,
        { field: 'version', requested: spec.version, installed: majors.map(String) },
      );
    }
  },

  async prepare(spec, sockDir, timings) {
    const settings = settingsOf(spec);
    const inst = await resolveInstallation(spec);
    checkSocketPath(join(sockDir, `.s.PGSQL.${PORT}.lock`));
    const template = await ensureTemplate(spec.cacheDir, inst, spec.runAs);
    mkdirSync(spec.dir, { recursive: true, mode: 0o711 });
    chmodSync(spec.dir, 0o711);
    const host = `${spec.name}.atelier.internal`;
    const instance: SimulatorInstance = {
      type: 'postgres',
      name: spec.name,
      version: inst.version,
      dir: spec.dir,
      socketDir: spec.socketDir,
      socket: join(sockDir, `.s.PGSQL.${PORT}`),
      socketName: `${spec.name}/.s.PGSQL.${PORT}`,
      cacheDir: spec.cacheDir,
      runAs: spec.runAs,
      logFile: join(spec.dir, 'postgres.log'),
      endpoint: { host, port: PORT },
      env: {
        DATABASE_URL: `postgresql://${encodeUrlPart(settings.user)}:${encodeUrlPart(settings.password)}@${host}:${PORT}/${encodeUrlPart(settings.database)}`,
        PGHOST: host,
        PGPORT: String(PORT),
        PGUSER: settings.user,
        PGPASSWORD: settings.password,
        PGDATABASE: settings.database,
      },
      settings: {
        database: settings.database,
        user: settings.user,
        password: settings.password,
        superuser: String(settings.superuser),
        binDir: inst.binDir,
      },
    };
    preparePasswords(instance);
    const waited = await copyTemplate(instance, template);
    if (waited > 0 && timings) timings.waitedForCopyMs = Math.round(waited);
    return instance;
  },

  command(instance) {
    return {
      argv: [
        join(instance.settings.binDir!, 'postgres'),
        '-D',
        SANDBOX_DATA,
        '-k',
        SANDBOX_SOCKETS,
        '-p',
        String(PORT),
        // Only its owner (and the server's relay) may connect; the directory is closed as well.
        '-c',
        'unix_socket_permissions=0700',
      ],
      mounts: [{ src: dataDir(instance), dest: SANDBOX_DATA, writable: true }],
      cwd: SANDBOX_DATA,
    };
  },

  async probe(handle) {
    const client = adminClient(handle);
    try {
      await client.connect();
      await client.query('SELECT 1');
    } finally {
      await client.end().catch(() => undefined);
    }
  },

  async initialise(handle) {
    const client = adminClient(handle);
    await client.connect();
    await setUp(client, handle);
  },

  // Most of a start is PostgreSQL's own (its 42 libraries, shared memory, the startup process):
  // what is ours is to try the first connection the moment the server says it is ready, and to
  // do the set-up on that very connection.
  pollMs: 1,

  async readyAndInitialise(handle) {
    // postmaster.pid says "ready" once the server accepts connections (what `pg_ctl -w` reads):
    // a cheap file read every millisecond instead of connection attempts that the server would
    // refuse with "the database system is starting up". The round trip below is the readiness.
    if (!postmasterReady(handle)) throw new Error('PostgreSQL is not accepting connections yet');
    const client = adminClient(handle);
    try {
      await client.connect();
    } catch (err) {
      await client.end().catch(() => undefined);
      throw err;
    }
    // In from here: an error now is an answer, not a server still starting.
    await setUp(client, handle).catch((err: unknown) => {
      throw finalError(err);
    });
  },
  async refresh(instance) {
    const inst = (await installations()).find((i) => i.binDir === instance.settings.binDir);
    if (!inst)
      throw new AtelierError('UNSUPPORTED', `PostgreSQL ${instance.version} is no longer installed on this server`, { type: 'postgres' });
    await copyTemplate(instance, await ensureTemplate(instance.cacheDir, inst, instance.runAs));
  },
};
