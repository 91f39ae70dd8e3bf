import { randomBytes } from 'node:crypto';
import {
  appendFileSync,
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { AtelierError } from '../../core/index.js';
import { assertReachable, chownTree, run, SIMULATOR_ENV } from '../process.js';
import type { RunAs, SimulatorSpec } from '../types.js';
import { requestedMajor, type SimulatorInstance } from './entry.js';

// The PostgreSQL simulator's installations, its template cluster and an instance's paths (postgres.ts
// says why a template; postgresSpares.ts keeps its ready-made copies).

export const ADMIN = 'atelier_admin';
/** Bump when the template's contents change: older templates are then left unused. */
const TEMPLATE_FORMAT = 'v3';
/** A database made in the template, renamed into the one asked for (a rename is instant; CREATE DATABASE copies files). */
export const SPARE_DATABASE = 'atelier_spare';
export const PORT = 5432;
const PG_BASE = '/usr/lib/postgresql';

interface Installation {
  major: number;
  binDir: string;
  /** Full version, e.g. "15.18". */
  version: string;
}

let installed: Promise<Installation[]> | undefined;

/** Server majors installed under /usr/lib/postgresql, newest first: what is there, nothing run. */
export function installedMajors(): number[] {
  return existsSync(PG_BASE)
    ? readdirSync(PG_BASE)
        .filter((v) => /^\d+$/.test(v) && existsSync(join(PG_BASE, v, 'bin', 'initdb')) && existsSync(join(PG_BASE, v, 'bin', 'postgres')))
        .map(Number)
        .sort((a, b) => b - a)
    : [];
}

export function notInstalled(): AtelierError {
  return new AtelierError('UNSUPPORTED', 'PostgreSQL is not installed on this server: install it with `apt-get install -y postgresql`', {
    type: 'postgres',
  });
}

/** Server majors installed, newest first, with their full versions. */
export function installations(): Promise<Installation[]> {
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

export async function resolveInstallation(spec: SimulatorSpec): Promise<Installation> {
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

// ---------------------------------------------------------------------------------------------
// Template cluster: made once per server major, atomically, then only ever copied.

export interface Template {
  dir: string;
  data: string;
  adminPassword: string;
}

export const templates = new Map<string, Promise<Template>>();

export function templateDir(cacheDir: string, inst: Installation): string {
  return join(cacheDir, `template-pg${inst.major}-${TEMPLATE_FORMAT}`);
}

export function readTemplate(dir: string): Template | undefined {
  const data = join(dir, 'data');
  if (!existsSync(join(data, 'PG_VERSION'))) return undefined;
  return { dir, data, adminPassword: readFileSync(join(dir, 'admin.password'), 'utf8').trim() };
}

/** The template of `inst` in `cacheDir`, created on first use (once per process, race-free across processes). */
export function ensureTemplate(cacheDir: string, inst: Installation, runAs: RunAs | undefined): Promise<Template> {
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
export function openInside(dir: string): void {
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
export const SANDBOX_DATA = '/sim/data';

export function dataDir(instance: SimulatorInstance): string {
  return join(instance.dir, 'data');
}

export function adminPasswordFile(instance: SimulatorInstance): string {
  return join(instance.dir, 'admin.password');
}
