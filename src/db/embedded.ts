import { execFile } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import pg from 'pg';

const run = promisify(execFile);

/** A PostgreSQL cluster that the server owns in `DATA_DIR/pg`, reached on a unix socket only. */
export interface EmbeddedPostgres {
  connectionString: string;
  /** Starts the cluster again if it died; true when it had to. */
  ensureRunning(): Promise<boolean>;
  stop(): Promise<void>;
  /** The postmaster's pid while it runs (its backends are its children). */
  postmasterPid(): number | undefined;
}

interface RunAs {
  uid: number;
  gid: number;
  name: string;
}

/** Newest installed PostgreSQL server binaries, e.g. /usr/lib/postgresql/15/bin. */
export function findPgBinDir(explicit: string | undefined): string {
  if (explicit) {
    if (!existsSync(join(explicit, 'postgres'))) throw new Error(`no postgres binary in ${explicit} (ATELIER_PG_BIN_DIR)`);
    return explicit;
  }
  const base = '/usr/lib/postgresql';
  const versions = existsSync(base)
    ? readdirSync(base)
        .filter((v) => /^\d+$/.test(v))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  for (const v of versions) if (existsSync(join(base, v, 'bin', 'initdb'))) return join(base, v, 'bin');
  throw new Error('PostgreSQL server binaries not found: install them with `sudo apt-get install -y postgresql`, or give --database-url');
}

async function postgresUser(isRoot: boolean): Promise<RunAs | undefined> {
  // PostgreSQL refuses to run as root: as root, run the cluster as the system `postgres` user.
  if (!isRoot) return undefined;
  try {
    const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
    const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
    return { uid, gid, name: 'postgres' };
  } catch {
    throw new Error(
      'the embedded database must run as an unprivileged user and there is no `postgres` user: run `sudo apt-get install -y postgresql`, or give --database-url',
    );
  }
}

/** The cluster user must be able to walk down to DATA_DIR/pg: say which directory stops it. */
function assertReachable(dataDir: string, runAs: RunAs): void {
  let dir = dataDir;
  const blocked: string[] = [];
  for (;;) {
    const st = statSync(dir);
    const canEnter =
      st.uid === runAs.uid ? (st.mode & 0o100) !== 0 : st.gid === runAs.gid ? (st.mode & 0o010) !== 0 : (st.mode & 0o001) !== 0;
    if (!canEnter && dir !== dataDir) blocked.push(dir);
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  if (blocked.length > 0) {
    throw new Error(
      `the embedded PostgreSQL runs as the user ${runAs.name}, which cannot enter ${blocked.join(', ')} to reach ${dataDir}: ` +
        `run \`chmod o+x ${blocked.join(' ')}\`, or use a data dir elsewhere (the default for root is /var/lib/atelier), or give --database-url`,
    );
  }
}

function quoteConf(value: string): string {
  return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
}

function pidAlive(pidFile: string): boolean {
  return livePid(pidFile) !== undefined;
}

function livePid(pidFile: string): number | undefined {
  let pid: number;
  try {
    pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  } catch {
    return undefined;
  }
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    // A stale pid file (power loss) may name an unrelated process now: it must be a postgres.
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'postgres' ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Creates the cluster on first use, starts it (or adopts one left running), and returns its URL. */
export async function startEmbeddedPostgres(opts: {
  dataDir: string;
  binDir: string | undefined;
  isRoot: boolean;
  log: (msg: string) => void;
}): Promise<EmbeddedPostgres> {
  const bin = findPgBinDir(opts.binDir);
  const runAs = await postgresUser(opts.isRoot);
  const pgDir = join(opts.dataDir, 'pg');
  const sockDir = join(opts.dataDir, 'pgsock');
  const spawnOpts = { cwd: '/', env: { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' }, ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}) };
  const own = (path: string): void => {
    if (runAs) chownSync(path, runAs.uid, runAs.gid);
  };

  if (runAs) assertReachable(opts.dataDir, runAs);
  mkdirSync(sockDir, { recursive: true, mode: 0o700 });
  own(sockDir);

  if (!existsSync(join(pgDir, 'PG_VERSION'))) {
    // initdb into a scratch directory, then rename: a crash half-way never leaves a broken `pg`.
    for (const entry of readdirSync(opts.dataDir))
      if (entry.startsWith('pg.init-')) rmSync(join(opts.dataDir, entry), { recursive: true, force: true });
    const scratch = join(opts.dataDir, `pg.init-${randomBytes(4).toString('hex')}`);
    mkdirSync(scratch, { mode: 0o700 });
    own(scratch);
    opts.log('creating the embedded PostgreSQL cluster');
    await run(
      join(bin, 'initdb'),
      ['-D', scratch, '-U', 'atelier', '--auth=trust', '--encoding=UTF8', '--no-locale', '--no-sync', '--no-instructions'],
      spawnOpts,
    );
    appendFileSync(
      join(scratch, 'postgresql.conf'),
      [
        '',
        '# Atelier embedded cluster: unix socket only, private to the server user.',
        "listen_addresses = ''",
        `unix_socket_directories = ${quoteConf(sockDir)}`,
        'unix_socket_permissions = 0700',
        'max_connections = 100',
        "log_destination = 'stderr'",
        '',
      ].join('\n'),
    );
    await run('sync', [], spawnOpts).catch(() => undefined);
    renameSync(scratch, pgDir);
  }

  const logFile = join(pgDir, 'server.log');
  const start = async (): Promise<void> => {
    await run(join(bin, 'pg_ctl'), ['-D', pgDir, '-l', logFile, '-w', '-t', '60', 'start'], spawnOpts).catch(
      (err: Error & { stderr?: string }) => {
        let tail = '';
        try {
          tail = readFileSync(logFile, 'utf8').split('\n').slice(-8).join('\n');
        } catch {
          // no log yet
        }
        throw new Error(`the embedded PostgreSQL did not start: ${err.stderr?.trim() || err.message}\n${tail}`);
      },
    );
  };

  const pidFile = join(pgDir, 'postmaster.pid');
  if (pidAlive(pidFile)) opts.log('adopting the embedded PostgreSQL left running by a previous server');
  else await start();

  const connectionString = `postgresql://atelier@/atelier?host=${encodeURIComponent(sockDir)}`;
  const admin = new pg.Client({ connectionString: `postgresql://atelier@/postgres?host=${encodeURIComponent(sockDir)}` });
  await admin.connect();
  try {
    const exists = await admin.query("SELECT 1 FROM pg_database WHERE datname = 'atelier'");
    if (exists.rowCount === 0) await admin.query('CREATE DATABASE atelier');
  } finally {
    await admin.end();
  }

  let restarting: Promise<void> | undefined;
  return {
    connectionString,
    async ensureRunning() {
      if (pidAlive(pidFile)) return false;
      restarting ??= start().finally(() => {
        restarting = undefined;
      });
      await restarting;
      return true;
    },
    postmasterPid: () => livePid(pidFile),
    async stop() {
      if (!pidAlive(pidFile)) return;
      await run(join(bin, 'pg_ctl'), ['-D', pgDir, '-m', 'fast', '-w', '-t', '60', 'stop'], spawnOpts);
    },
  };
}
