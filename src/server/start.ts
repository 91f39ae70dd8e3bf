import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import {
  hashToken,
  loadConfig,
  newApiToken,
  parseListen,
  readClientConfig,
  readToken,
  writeClientConfig,
  writeToken,
  type Config,
} from '../core/index.js';
import { createPool, migrate, startEmbeddedPostgres, withTransaction, type EmbeddedPostgres, type Pool } from '../db/index.js';
import { inspectIsolation, processStartTime } from '../sandbox/index.js';
import { LocalDriver, WorkshopService } from '../workshops/index.js';
import { buildApp } from './app.js';

export interface StartOptions {
  dataDir?: string;
  listen?: string;
  databaseUrl?: string;
  allowRepoRoots?: string[];
  version: string;
  /** Lines for the human who started the server (the CLI prints them on stderr). */
  say: (line: string) => void;
}

export interface RunningServer {
  url: string;
  credentialsPath: string;
  /** Stops HTTP, the database pool and the embedded PostgreSQL; workshops keep running. */
  close(): Promise<void>;
}

function lockDataDir(dataDir: string): () => void {
  const path = join(dataDir, 'server.pid');
  // The lock names its holder by pid and start time: a reused pid (same pid in a new container,
  // another process) is never taken for a live server.
  const me = `${process.pid} ${processStartTime(process.pid) ?? ''}\n`;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      // 'wx': created only if absent, so two servers starting at once cannot both take it.
      writeFileSync(path, me, { flag: 'wx' });
      return () => rmSync(path, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let holder: string;
    try {
      holder = readFileSync(path, 'utf8');
    } catch {
      continue; // removed meanwhile: try again
    }
    const [pid, start] = holder.trim().split(' ');
    const alive = Number(pid) > 0 && Number(pid) !== process.pid && start !== undefined && processStartTime(Number(pid)) === start;
    if (alive) throw new Error(`another Atelier server (pid ${pid}) already uses ${dataDir}: stop it first, or pass another --data-dir`);
    // Stale: move it aside (atomic) and retry; a racing server that moved it first wins the retry.
    try {
      renameSync(path, `${path}.stale.${process.pid}`);
      rmSync(`${path}.stale.${process.pid}`, { force: true });
    } catch {
      // the other server took it over first
    }
  }
  throw new Error(`could not take the lock ${path}: another server is starting on ${dataDir}`);
}

function nodeIdOf(dataDir: string): string {
  const path = join(dataDir, 'node-id');
  if (existsSync(path)) return readFileSync(path, 'utf8').trim();
  const id = `node-${randomBytes(5).toString('hex')}`;
  writeFileSync(path, `${id}\n`, { mode: 0o600 });
  return id;
}

/** DATA_DIR/credentials.txt (0600): the URL and the admin token, which is known only at first start. */
function writeCredentials(dataDir: string, url: string, token: string | undefined): string {
  const path = join(dataDir, 'credentials.txt');
  let known = token;
  if (!known && existsSync(path)) known = /^token:\s*(atl_\S+)/m.exec(readFileSync(path, 'utf8'))?.[1];
  const tmp = `${path}.tmp`;
  writeFileSync(
    tmp,
    `# Atelier server admin credentials. Keep this file private.\nurl: ${url}\nuser: admin\ntoken: ${known ?? '(shown only at first start; this file was replaced since)'}\n`,
    { mode: 0o600 },
  );
  renameSync(tmp, path);
  chmodSync(path, 0o600);
  return path;
}

async function firstAdmin(pool: Pool, save: (token: string) => void): Promise<string | undefined> {
  // One transaction: the admin and its token exist together or not at all, and the token is
  // saved to disk before COMMIT, so it can never exist only in the database. Two servers
  // starting at once on one database: only the one whose INSERT wins makes a token.
  return withTransaction(pool, async (c) => {
    const created = await c.query(
      "INSERT INTO users (id, name, role) VALUES ('u-admin', 'admin', 'admin') ON CONFLICT DO NOTHING RETURNING id",
    );
    if (created.rowCount === 0) return undefined;
    const token = newApiToken();
    await c.query("INSERT INTO api_tokens (id, user_id, name, token_hash) VALUES ($1, 'u-admin', 'first-start', $2)", [
      `tok-${randomBytes(6).toString('hex')}`,
      hashToken(token),
    ]);
    save(token);
    return token;
  });
}

/**
 * When the CLI has no context yet, adds and selects `local` for this server. When `local`
 * already holds a token of this server, its URL follows the server (a new port). Done for the
 * CLI config of the user running the server and, under sudo, of the user who ran sudo.
 */
async function ensureLocalContext(
  config: Config,
  pool: Pool,
  url: string,
  token: string | undefined,
  sudoHome: string | undefined,
  say: (l: string) => void,
): Promise<void> {
  const targets: { dir: string; owner?: { uid: number; gid: number } }[] = [{ dir: config.configDir }];
  if (config.sudoUser && sudoHome) targets.push({ dir: join(sudoHome, '.config', 'atelier'), owner: config.sudoUser });
  for (const { dir, owner } of targets) {
    const cc = await readClientConfig(dir);
    const local = cc.contexts.find((c) => c.name === 'local');
    if (local) {
      if (local.url === url) continue;
      const stored = readToken(dir, 'local');
      if (!stored) continue;
      const mine = await pool.query('SELECT 1 FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL', [hashToken(stored)]);
      if (mine.rowCount === 0) continue;
      local.url = url;
    } else {
      if (cc.contexts.length > 0 || !token) continue;
      cc.contexts.push({ name: 'local', url });
      cc.currentContext = 'local';
      writeToken(dir, 'local', token);
      say(`the CLI now uses this server (context "local" in ${join(dir, 'config.yaml')})`);
    }
    await writeClientConfig(dir, cc);
    if (owner) for (const p of [join(dir, '..'), dir, join(dir, 'config.yaml'), join(dir, 'tokens.json')]) chownIfOurs(p, owner);
  }
}

function homeOf(uid: number): string | undefined {
  for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
    const f = line.split(':');
    if (Number(f[2]) === uid && f[5]) return f[5];
  }
  return undefined;
}

function chownIfOurs(path: string, owner: { uid: number; gid: number }): void {
  try {
    // Only what this server just created as root is handed over, never a directory of someone else.
    if (statSync(path).uid === 0) chownSync(path, owner.uid, owner.gid);
  } catch {
    // absent
  }
}

/**
 * Runs the single-node server: embedded (or external) PostgreSQL, migrations, the first admin,
 * reconciliation of workshops left by a previous run, then HTTP. Resolves once listening.
 */
export async function startServer(opts: StartOptions, config: Config = loadConfig()): Promise<RunningServer> {
  const dataDir = opts.dataDir ?? config.dataDir;
  const listen = parseListen(opts.listen ?? config.listen);
  const databaseUrl = opts.databaseUrl ?? config.databaseUrl;
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  // 0711 as root: the embedded PostgreSQL (user `postgres`) must traverse to DATA_DIR/pg;
  // nothing in here is listable by others, and every file with a secret is 0600.
  chmodSync(dataDir, config.isRoot ? 0o711 : 0o700);
  const unlock = lockDataDir(dataDir);
  const cleanups: (() => Promise<void>)[] = [async () => unlock()];
  const closeAll = async (): Promise<void> => {
    for (const fn of cleanups.reverse()) await fn().catch(() => undefined);
    cleanups.length = 0;
  };

  try {
    const isolation = inspectIsolation(config.isRoot);
    if (isolation.missingTools.length > 0) {
      throw new Error(
        `missing system tools: ${isolation.missingTools.join(', ')}: run \`sudo apt-get install -y bubblewrap util-linux mount git perl iproute2\``,
      );
    }
    for (const m of isolation.missing) opts.say(`isolation: ${m}`);

    let embedded: EmbeddedPostgres | undefined;
    if (!databaseUrl) {
      embedded = await startEmbeddedPostgres({ dataDir, binDir: config.pgBinDir, isRoot: config.isRoot, log: (m) => opts.say(m) });
      const e = embedded;
      cleanups.push(() => e.stop());
    }
    const logger = pino({ level: config.logLevel });
    const pool = createPool(databaseUrl ?? embedded!.connectionString, (err) =>
      logger.warn({ err: err.message }, 'database connection lost'),
    );
    cleanups.push(() => pool.end());
    await migrate(pool);
    // Written at once: a start that fails later (port in use) must not lose the only copy.
    const token = await firstAdmin(pool, (t) => writeCredentials(dataDir, `http://${opts.listen ?? config.listen} (not listening yet)`, t));

    const nodeId = nodeIdOf(dataDir);
    const driver = new LocalDriver(dataDir, nodeId, isolation.rootless, isolation.cgroups);
    const sudoHome = config.sudoUser ? homeOf(config.sudoUser.uid) : undefined;
    const workshops = new WorkshopService(pool, driver, {
      nodeId,
      // Under sudo, the home of the user who ran it is allowed too (repositories live there).
      allowRepoRoots: opts.allowRepoRoots ?? [...config.allowRepoRoots, ...(sudoHome ? [sudoHome] : [])],
      defaults: { cpus: config.defaultCpus, memory: config.defaultMemory, pids: config.defaultPids },
      uidBase: config.uidBase,
      log: logger,
    });
    await workshops.reconcile();

    const app = buildApp({ pool, workshops, logger, version: opts.version });
    cleanups.push(() => app.close());
    // Runs before app.close (cleanups run in reverse): in-flight execs end, so their requests do.
    cleanups.push(() => workshops.close());
    await app.listen({ host: listen.host, port: listen.port });
    const addr = app.server.address();
    const port = typeof addr === 'object' && addr ? addr.port : listen.port;
    const host = listen.host.includes(':') ? `[${listen.host}]` : listen.host === '0.0.0.0' ? '127.0.0.1' : listen.host;
    const url = `http://${host}:${port}`;

    // The embedded database is supervised: if it dies, it is started again; requests meanwhile get 503.
    if (embedded) {
      const e = embedded;
      const timer = setInterval(() => {
        e.ensureRunning().then(
          (restarted) => restarted && logger.warn('the embedded PostgreSQL had stopped and was started again'),
          (err: Error) => logger.error({ err: err.message }, 'the embedded PostgreSQL could not be restarted'),
        );
      }, 2000);
      timer.unref();
      cleanups.push(async () => clearInterval(timer));
    }

    const credentialsPath = writeCredentials(dataDir, url, token);
    await ensureLocalContext(config, pool, url, token, sudoHome, opts.say);
    return { url, credentialsPath, close: closeAll };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
