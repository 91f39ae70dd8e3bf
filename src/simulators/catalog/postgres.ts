import { createHash, createHmac, pbkdf2, randomBytes } from 'node:crypto';
import { assertSocket } from '../socketGuard.js';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { AtelierError, SIMULATOR_OPTIONS } from '../../core/index.js';
import type { SimulatorHandle, SimulatorSpec } from '../types.js';
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
import {
  ADMIN,
  PORT,
  SPARE_DATABASE,
  SANDBOX_DATA,
  adminPasswordFile,
  dataDir,
  ensureTemplate,
  installations,
  installedMajors,
  notInstalled,
  resolveInstallation,
} from './postgresTemplate.js';
import { afterStart, copyTemplate, REFILL_DELAY_MS } from './postgresSpares.js';

export { dropPostgresSpares, seedPostgresSpare, warmPostgresTemplate } from './postgresSpares.js';

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
