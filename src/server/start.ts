import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { isIPv6 } from 'node:net';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pino } from 'pino';
import {
  clientConfigFiles,
  hashToken,
  loadConfig,
  formatSize,
  newApiToken,
  newId,
  parseListen,
  readClientConfig,
  readToken,
  writeClientConfig,
  writeToken,
  type Config,
} from '../core/index.js';
import { createPool, lead, migrate, startEmbeddedPostgres, withTransaction, type EmbeddedPostgres, type Pool } from '../db/index.js';
import {
  INSTALL_TOOLS,
  inspectIsolation,
  processStartTime,
  protectFromOomKiller,
  SERVER_OOM_SCORE_ADJ,
  WORKSHOP_OOM_SCORE_ADJ,
} from '../sandbox/index.js';
import {
  CredentialPolicies,
  InternalNetwork,
  LocalDriver,
  SimulatorManager,
  WorkshopService,
  startWorkshopResource,
} from '../workshops/index.js';
import { checkSimulatorVersion, runOffServer, warmSimulators } from '../simulators/index.js';
import { AccountService, Authenticator, MasterKey, generatePassword, hashPassword } from '../identity/index.js';
import { createActionService, createProjectRegistry, selectStackBackend } from '../actions/index.js';
import { canonicalizeHost, createEgressPolicy } from '../egress/index.js';
import { buildApp } from './app.js';
import { createApprovals } from './approvals.js';
import { actionRoutes } from './routes/actions.js';
import { consoleRoutes } from './routes/console.js';
import { statusRoutes } from './routes/status.js';
import { createRecentErrors } from './recentErrors.js';
import { principalOf } from './routes/common.js';
import { startEgress } from './egress.js';
import { startIdentity } from './identity.js';
import { BrowserSessions } from './browserSessions.js';
import { webRoutes } from './routes/web.js';
import { acmeChallengeRoutes, redirectToHttps, serveHttps, type HttpsListener } from './tls.js';
import { startRenewal } from './renewal.js';
import type { FastifyInstance } from 'fastify';
import { McpGateway, workshopMcpRoutes } from '../mcp/index.js';
import { NodeRegistry } from './nodes.js';
import { Cluster } from './relay.js';

export interface StartOptions {
  dataDir?: string;
  listen?: string;
  databaseUrl?: string;
  allowRepoRoots?: string[];
  /** Overrides ATELIER_PUBLIC_URL. */
  publicUrl?: string;
  /** Overrides ATELIER_IDENTITY_CONFIG. */
  identityConfig?: string;
  /** This node's name in the installation (docs/replicas.md). */
  nodeName?: string;
  /** Where the other nodes reach this node (default: its listen URL). */
  advertiseUrl?: string;
  version: string;
  /** The CLI's entry script (bin/atelier of this release): what the dashboard Console runs. */
  cliEntry: string;
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

/**
 * An IPv6 address written without brackets before its port (`http://fd00::5:7878`), as a pod's
 * `http://$(POD_IP):7878` reads on an IPv6 cluster (the Helm chart's `--advertise-url`: the
 * variable cannot add brackets): the URL with them. The last `:digits` is taken as the port.
 */
function bracketIpv6(value: string): string | undefined {
  const m = /^(https?:\/\/)([0-9A-Fa-f:.]+):(\d{1,5})(\/.*)?$/.exec(value);
  return m && isIPv6(m[2]!) ? `${m[1]}[${m[2]}]:${m[3]}${m[4] ?? ''}` : undefined;
}

/** `--public-url` (or `--advertise-url`): an http(s) URL without a trailing slash. */
function publicUrlOf(value: string | undefined, flag = '--public-url'): string | undefined {
  if (value === undefined) return undefined;
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    const bracketed = bracketIpv6(value);
    if (bracketed === undefined)
      throw new Error(
        `${flag} must be a URL such as https://atelier.example.com (an IPv6 address in brackets: http://[fd00::5]:7878), got "${value}"`,
      );
    u = new URL(bracketed);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`${flag} must be http:// or https://, got "${value}"`);
  return u.toString().replace(/\/+$/, '');
}

function nodeIdOf(dataDir: string): string {
  const path = join(dataDir, 'node-id');
  if (existsSync(path)) return readFileSync(path, 'utf8').trim();
  const id = `node-${randomBytes(5).toString('hex')}`;
  writeFileSync(path, `${id}\n`, { mode: 0o600 });
  return id;
}

interface FirstAdmin {
  token: string;
  password: string;
}

/**
 * DATA_DIR/credentials.txt (0600): the URL, the admin's API token and one-time password, which
 * are known only at first start (the password must be changed at the first browser login).
 */
function writeCredentials(dataDir: string, url: string, first: FirstAdmin | undefined): string {
  const path = join(dataDir, 'credentials.txt');
  const old = !first && existsSync(path) ? readFileSync(path, 'utf8') : '';
  const token = first?.token ?? /^token:\s*(atl_\S+)/m.exec(old)?.[1];
  const password = first?.password ?? /^password:\s*(\S+)/m.exec(old)?.[1];
  const gone = '(shown only at first start; this file was replaced since)';
  const tmp = `${path}.tmp`;
  writeFileSync(
    tmp,
    `# Atelier server admin credentials. Keep this file private.\nurl: ${url}\nuser: admin\ntoken: ${token ?? gone}\npassword: ${password ?? gone}\n` +
      '# The password is for `atelier auth login` (browser); it must be changed at the first login.\n',
    { mode: 0o600 },
  );
  renameSync(tmp, path);
  chmodSync(path, 0o600);
  return path;
}

async function firstAdmin(pool: Pool, save: (first: FirstAdmin) => void): Promise<FirstAdmin | undefined> {
  // One transaction: the admin, its membership and its token exist together or not at all, and
  // they are saved to disk before COMMIT, so they can never exist only in the database. Two
  // servers starting at once on one database: only the one whose INSERT wins makes them.
  const password = generatePassword();
  const hash = await hashPassword(password);
  return withTransaction(pool, async (c) => {
    const created = await c.query(
      `INSERT INTO users (id, name, password_hash, must_change_password) VALUES ('u-admin', 'admin', $1, true)
       ON CONFLICT DO NOTHING RETURNING id`,
      [hash],
    );
    if (created.rowCount === 0) return undefined;
    await c.query("INSERT INTO memberships (user_id, tenant_id, role) VALUES ('u-admin', 'tn-default', 'admin')");
    const token = newApiToken();
    // The local CLI's token: no expiry, like the credentials file it is written beside.
    await c.query(
      `INSERT INTO api_tokens (id, user_id, name, token_hash, tenant_id, role) VALUES ($1, 'u-admin', 'first-start', $2, 'tn-default', 'admin')`,
      [newId('tok'), hashToken(token)],
    );
    const first = { token, password };
    save(first);
    return first;
  });
}

/**
 * Gives the CLI a context for this server, and never repoints one that names another server:
 * - a context holding a token of this server follows the server (a new port);
 * - at the first start, a CLI with no context gets `local`, selected; a CLI that already has
 *   contexts (another server's `local`, a team server) gets a new one (`local-2`, `local-3`, …),
 *   not selected, and the start says how to use it.
 * Done for the CLI config of the user running the server and, under sudo, of the user who ran sudo.
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
    try {
      // Reading may migrate an older config (files rewritten as root): hand them over below too.
      const cc = await readClientConfig(dir, { notice: say });
      const ours = await contextsOfThisServer(pool, dir, cc.contexts);
      if (ours.length > 0) {
        if (ours.some((c) => c.url === url)) continue;
        ours[0]!.url = url;
      } else {
        if (!token) continue;
        const names = new Set(cc.contexts.map((c) => c.name));
        let name = 'local';
        for (let n = 2; names.has(name); n++) name = `local-${n}`;
        cc.contexts.push({ name, url, auth: 'token' });
        writeToken(dir, name, token);
        if (cc.currentContext === null || !names.has(cc.currentContext)) {
          cc.currentContext = name;
          say(`the CLI now uses this server (context "${name}" in ${join(dir, 'config.yaml')})`);
        } else {
          say(
            `the CLI has a new context "${name}" for this server in ${join(dir, 'config.yaml')}; ` +
              `it still uses "${cc.currentContext}": \`atelier context use ${name}\` to switch`,
          );
        }
      }
      await writeClientConfig(dir, cc);
    } finally {
      if (owner) for (const p of [join(dir, '..'), dir, ...clientConfigFiles(dir)]) chownIfOurs(p, owner);
    }
  }
}

/** The contexts whose stored API token is a live token of this server (its database says so). */
async function contextsOfThisServer<C extends { name: string }>(pool: Pool, dir: string, contexts: C[]): Promise<C[]> {
  const out: C[] = [];
  for (const c of contexts) {
    const stored = readToken(dir, c.name);
    if (!stored) continue;
    const r = await pool.query('SELECT 1 FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL', [hashToken(stored)]);
    if ((r.rowCount ?? 0) > 0) out.push(c);
  }
  return out;
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
  const startedAt = new Date();
  const dataDir = opts.dataDir ?? config.dataDir;
  const listen = parseListen(opts.listen ?? config.listen);
  const publicUrlFlag = publicUrlOf(opts.publicUrl);
  const advertiseUrl = publicUrlOf(opts.advertiseUrl, '--advertise-url');
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
      throw new Error(`missing system tools: ${isolation.missingTools.join(', ')}: run \`${INSTALL_TOOLS}\``);
    }
    for (const m of isolation.applied) opts.say(`isolation: ${m}`);
    for (const m of isolation.missing) opts.say(`isolation: ${m}`);

    // Before the embedded PostgreSQL starts, which inherits it (as does every process the server
    // starts; a workshop's and a simulator's raise theirs to WORKSHOP_OOM_SCORE_ADJ as they enter).
    const oomProtected = config.isRoot && protectFromOomKiller('self');
    const oomNote = `workshop and simulator processes at oom_score_adj ${WORKSHOP_OOM_SCORE_ADJ}, the server and its PostgreSQL at ${
      oomProtected
        ? SERVER_OOM_SCORE_ADJ
        : `0 (${config.isRoot ? 'lowering it was refused: no CAP_SYS_RESOURCE here' : 'lowering it needs root'})`
    }`;
    if (!config.isRoot) {
      opts.say(
        `isolation: not root: no memory or CPU kept for the server and its PostgreSQL over the workshops (cgroups need root): a workshop can starve the server; ${oomNote}`,
      );
    }
    let embedded: EmbeddedPostgres | undefined;
    if (!databaseUrl) {
      embedded = await startEmbeddedPostgres({ dataDir, binDir: config.pgBinDir, isRoot: config.isRoot, log: (m) => opts.say(m) });
      const e = embedded;
      cleanups.push(() => e.stop());
      // One adopted from a previous server (and its backends) did not inherit it.
      const pid = e.postmasterPid();
      if (oomProtected && pid !== undefined) protectFromOomKiller(pid, true);
    }
    // Its last warnings and errors are also kept for `atelier server status` (GET /v1/admin/status).
    const recentErrors = createRecentErrors();
    const logger = pino({ level: config.logLevel, hooks: recentErrors.hooks });
    const pool = createPool(databaseUrl ?? embedded!.connectionString, (err) =>
      logger.warn({ err: err.message }, 'database connection lost'),
    );
    cleanups.push(() => pool.end());
    await migrate(pool);
    // Written at once: a start that fails later (port in use) must not lose the only copy.
    const first = await firstAdmin(pool, (f) => writeCredentials(dataDir, `http://${opts.listen ?? config.listen} (not listening yet)`, f));
    const token = first?.token;
    const masterKey = MasterKey.loadOrCreate(config.masterKeyFile ?? join(dataDir, 'master.key'));

    const nodeId = nodeIdOf(dataDir);
    // Every server on this PostgreSQL is a node of one installation (src/server/nodes.ts); it joins once it listens.
    const nodes = new NodeRegistry({
      pool,
      id: nodeId,
      name: opts.nodeName,
      version: opts.version,
      sealer: masterKey,
      log: logger,
      heartbeatMs: config.nodeHeartbeatMs,
      deadAfterMs: config.nodeDeadAfterMs,
      // Made below, before the node joins (the first heartbeat).
      publish: (): Promise<void> => workshops.publishDisks(),
    });
    // The installation's periodic jobs run on one node of those sharing this database (src/db/leader.ts).
    const leadership = lead(databaseUrl ?? embedded!.connectionString, {
      onChange: (leader) =>
        logger.info(
          { leader },
          leader ? 'this node now runs the periodic jobs of the installation (leader)' : 'this node no longer runs the periodic jobs',
        ),
      onError: (err) => logger.warn({ err: err.message }, 'periodic jobs: the leadership connection failed; trying again'),
    });
    cleanups.push(() => leadership.close());
    await leadership.ready;
    // The spare workshop disks get the simulators' spares (SimulatorManager, made below).
    const spareDisks: { prepare?: (root: string, signal: AbortSignal) => Promise<void> } = {};
    const driver = new LocalDriver(dataDir, nodeId, isolation.rootless, isolation.cgroups, {
      quota: config.diskQuota,
      defaultBytes: config.defaultDiskBytes,
      spares: config.diskSpares,
      reserveBytes: config.diskReserveBytes,
      prepareSpare: async (root, signal) => spareDisks.prepare?.(root, signal),
      run: (argv, env) => runOffServer(argv, { env, logDir: join(dataDir, 'disks') }),
      log: logger,
    });
    cleanups.push(() => driver.closeDisks());
    const reserve = driver.reserveForServer({ memoryBytes: config.serverReserveMemoryBytes, cpuShares: config.workshopsCpuShares });
    if (reserve) {
      opts.say(
        `server reserve: ${formatSize(config.serverReserveMemoryBytes)} of ${formatSize(reserve.availableBytes)} memory kept for the server and its PostgreSQL (all workshops together limited to ${formatSize(reserve.workshopsMemoryBytes)}), workshops at cpu.shares ${reserve.cpuShares} against 1024 per server thread; ${oomNote}`,
      );
      if (reserve.warning) opts.say(`server reserve: ${reserve.warning}`);
    } else if (config.isRoot) {
      opts.say(`server reserve: no memory or CPU kept for the server (no cgroup v1 controllers, see above); ${oomNote}`);
    }
    opts.say(
      `disk quotas: ${driver.diskNote ?? `a filesystem of its own per workshop (default ${formatSize(config.defaultDiskBytes)}, at most ${formatSize(config.maxDiskBytes)})`}; ${formatSize(config.diskReserveBytes)} kept free for the database`,
    );
    const sudoHome = config.sudoUser ? homeOf(config.sudoUser.uid) : undefined;
    // Known once the server listens; the write guard compares browsers' Origin with it, and the
    // Teams cards' links point at it.
    const publicOrigin: { value?: string } = {};
    // Signs the dashboard links of the Teams cards; the server checks them (GET /v1/approvals/:id/link).
    const approvalLinkKey = masterKey.derive('approval-deep-link');
    const approvals = createApprovals({
      isLeader: () => leadership.isLeader,
      ttl: config.approvalTtl,
      selfConfirm: config.approvalsSelfConfirm,
      slack: config.slack,
      teams: config.teams,
      links: { key: approvalLinkKey, origin: () => publicOrigin.value },
      pool,
      databaseUrl: databaseUrl ?? embedded!.connectionString,
      logger,
      nodeId,
      sealer: masterKey,
    });
    const egress = await startEgress(config, pool, logger, {
      ask: approvals.ask,
      dataDir,
      secretValue: (workshopId, name) => approvals.secrets.valueFor(workshopId, name),
    });
    cleanups.push(() => egress.close());
    const internal = new InternalNetwork(egress.wiring.proxy);
    // Inside every workshop, http://api.atelier.internal reaches this server's API (ATELIER_URL).
    // The object is shared with the listeners: its port is filled in once the server listens.
    const apiTarget = { host: '127.0.0.1', port: 0 };
    // And http://mcp.atelier.internal/mcp is its MCP endpoint: a socket per workshop, so the server
    // knows which workshop a request comes from (src/mcp/gateway.ts); served by the app below.
    const mcpRoute: { to?: (req: IncomingMessage, res: ServerResponse) => void } = {};
    const mcpGateway = new McpGateway({
      dir: join(dataDir, 'mcp'),
      pool,
      unseal: (sealed, id) => masterKey.decrypt(sealed, `workshop-token:${id}`).toString('utf8'),
      route: (req, res) => (mcpRoute.to ? mcpRoute.to(req, res) : res.writeHead(503).end()),
      log: logger,
    });
    cleanups.push(async () => mcpGateway.close());
    const simulators = new SimulatorManager(pool, {
      dataDir,
      rootless: isolation.rootless,
      internal,
      baseServices: (id) => [
        { label: 'api', port: 80, target: apiTarget },
        { label: 'mcp', port: 80, target: mcpGateway.target(id) },
      ],
      log: logger,
    });
    spareDisks.prepare = (root, signal) => simulators.seedSpares(root, signal);
    mkdirSync(join(dataDir, 'simulators'), { recursive: true, mode: 0o711 });
    chmodSync(join(dataDir, 'simulators'), 0o711);
    if (config.simulatorsWarm) {
      // initdb must not run as root: the first workshop uid runs it, the template is then the server's.
      void warmSimulators({
        cacheDir: simulators.cacheDir,
        runAs: config.isRoot ? { uid: config.uidBase, gid: config.uidBase } : undefined,
      }).catch((err: unknown) =>
        logger.warn({ err: String(err) }, 'could not prepare the simulator templates (they are made on first use)'),
      );
    }
    // A tenant's credential policy may bind only hosts every workshop may reach (the platform's list).
    const platformPolicy = createEgressPolicy({
      allow: egress.wiring.defaults,
      deny: [],
      allowRanges: egress.wiring.allowRanges,
      askHoldSeconds: 0,
    });
    const credentialPolicies = new CredentialPolicies(pool, (host, port) => {
      const h = canonicalizeHost(host);
      return h.kind !== 'refused' && platformPolicy.evaluate(h, port, 'connect').outcome === 'allow';
    });
    const workshops = new WorkshopService(pool, driver, {
      nodeId,
      credentialPolicies,
      nodes,
      // Under sudo, the home of the user who ran it is allowed too (repositories live there).
      allowRepoRoots: opts.allowRepoRoots ?? [...config.allowRepoRoots, ...(sudoHome ? [sudoHome] : [])],
      defaults: { cpus: config.defaultCpus, memory: config.defaultMemory, pids: config.defaultPids },
      disk: { defaultBytes: config.defaultDiskBytes, maxBytes: config.maxDiskBytes },
      uidBase: config.uidBase,
      log: logger,
      egress: egress.wiring,
      internal,
      simulators,
      sealer: masterKey,
      execGate: approvals.execGate,
      secretEnv: (id) => approvals.secrets.envFor(id),
      // Nothing waits for a dead or failed workshop's requests any more: they end, saying why.
      onEnded: (id, reason) => approvals.service.endPendingForWorkshop(id, reason),
    });
    // A workshop being deleted: its requests end at once, not at their expiry.
    workshops.events.on('deleting', async ({ id }) => void (await approvals.service.endPendingForWorkshop(id, 'the workshop was deleted')));
    // A deleted workshop's in-workshop MCP endpoint and its token go with it.
    workshops.events.on('deleted', ({ id }) => mcpGateway.forget(id));
    await approvals.start(workshops);
    cleanups.push(() => approvals.close());
    await workshops.reconcile();
    // Effects need their workshop up (and must not be killed as orphans by reconcile): only now.
    void approvals.resumeEffects();

    const authenticator = new Authenticator(pool);
    const identityConfig = opts.identityConfig ? resolve(opts.identityConfig) : config.identityConfig;
    const identity = await startIdentity(identityConfig, pool, masterKey, logger, () => leadership.isLeader);
    // The server's own URL, for the Console's child CLI (known once it listens).
    const localUrl: { value?: string } = {};
    const starting = { value: true };
    const stacks = selectStackBackend(config.stacksBackend, join(dataDir, 'stacks'));
    logger.info({ backend: stacks.kind }, 'local stacks backend');
    const projects = createProjectRegistry({
      pool,
      stacks,
      allowRoots: opts.allowRepoRoots ?? [...config.allowRepoRoots, ...(sudoHome ? [sudoHome] : [])],
    });
    const actions = createActionService({
      pool,
      projects,
      isRoot: config.isRoot,
      stacksDir: join(dataDir, 'stacks'),
      stacks,
      planTtlSeconds: config.actionsPlanTtl,
      validateEgress: (allow, deny) => void createEgressPolicy({ allow, deny }),
      checkSimulatorVersion,
    });
    const csrfKey = masterKey.derive('cockpit-csrf');
    const browserSessions = new BrowserSessions({
      pool,
      authenticator,
      sealer: masterKey,
      key: masterKey.derive('dashboard-login'),
      web: () => (publicOrigin.value !== undefined ? identity.web : undefined),
      origin: () => publicOrigin.value,
    });
    let https: HttpsListener | undefined;
    // The relay between nodes: the API's, and the Workshop controller's requests where a workshop runs.
    const cluster = new Cluster(nodes);
    const app = buildApp({
      starting: () => starting.value,
      browser: { sessions: browserSessions, csrfKey, origin: () => publicOrigin.value },
      isLeader: () => leadership.isLeader,
      pool,
      workshops,
      authenticator,
      accounts: new AccountService(pool),
      logger,
      version: opts.version,
      trustProxy: config.trustProxy,
      cluster,
      // Plain HTTP from another machine is redirected before its token is read or its request
      // relayed to another node: never served in clear, on this node or through it.
      firstHooks: config.tls ? [(a: FastifyInstance) => redirectToHttps(a, () => https?.port())] : [],
      extraRoutes: [
        ...identity.routes,
        (a) => acmeChallengeRoutes(a, join(dataDir, 'acme-challenge')),
        (a) =>
          actionRoutes(a, {
            actions,
            projects,
            cockpitWrites: config.cockpitWrites,
            origin: () => publicOrigin.value,
            csrfKey,
          }),
        (a) =>
          webRoutes(a, {
            sessions: browserSessions,
            csrfKey,
            ...(config.webDir !== undefined ? { dist: config.webDir } : {}),
          }),
        (a) => consoleRoutes(a, { url: () => localUrl.value, cli: opts.cliEntry }),
        (a) => workshopMcpRoutes(a, { workshops, approvals: approvals.service, version: opts.version, principalOf }),
        (a) =>
          statusRoutes(a, {
            pool,
            version: opts.version,
            startedAt,
            url: () => localUrl.value,
            publicUrl: () => publicOrigin.value,
            dataDir,
            database: databaseUrl ? 'external' : 'embedded',
            recentErrors: recentErrors.list,
          }),
      ],
      approvals: approvals.service,
      slack: approvals.slack,
      approvalLinkKey,
      secrets: approvals.secrets,
      credentialPolicies,
      sealer: masterKey,
      sessionsDir: join(dataDir, 'sessions'),
    });
    cleanups.push(() => app.close());
    mcpRoute.to = (req, res) => app.routing(req, res);
    // Runs before app.close (cleanups run in reverse): in-flight execs end, so their requests do.
    cleanups.push(() => workshops.close());
    await app.listen({ host: listen.host, port: listen.port });
    if (config.tls) {
      const h = serveHttps(app, config.tls, logger);
      https = h;
      cleanups.push(() => h.close());
      // After listen: an ACME CA's http-01 check reaches the plain listener.
      const renewal = startRenewal({ ...config.tls, dataDir, log: logger });
      cleanups.push(async () => renewal.stop());
    }
    const addr = app.server.address();
    const port = typeof addr === 'object' && addr ? addr.port : listen.port;
    apiTarget.port = port;
    if (listen.host !== '0.0.0.0' && listen.host !== '::') apiTarget.host = listen.host;
    const host = listen.host.includes(':') ? `[${listen.host}]` : listen.host === '0.0.0.0' ? '127.0.0.1' : listen.host;
    const url = `http://${host}:${port}`;
    // The identity first: it reads the signing keys sealed in the database, which is where a server
    // with another master key stops. Joining before that would leave a node that looked live (a
    // fresh heartbeat) for its dead-after timeout, and new workshops placed on it.
    authenticator.setAuthority(await identity.ready(publicUrlFlag ?? config.publicUrl ?? url));
    cleanups.push(() => identity.close());
    await nodes.join(advertiseUrl ?? url);
    cleanups.push(() => nodes.close());
    opts.say(
      `node ${nodes.name} (${nodeId}) joined the installation, reachable by the other nodes at ${advertiseUrl ?? url}; ` +
        `heartbeat every ${nodes.heartbeatMs / 1000} s, a node silent ${nodes.deadAfterMs / 1000} s is unreachable (ATELIER_NODE_HEARTBEAT, ATELIER_NODE_DEAD_AFTER)`,
    );
    publicOrigin.value = new URL(publicUrlFlag ?? config.publicUrl ?? url).origin;
    localUrl.value = url;
    // Ended dashboard sessions are removed now and then.
    const pruneSessions = setInterval(() => {
      browserSessions.prune().catch((err: Error) => logger.warn({ err: err.message }, 'pruning ended dashboard sessions failed'));
    }, 10 * 60_000);
    pruneSessions.unref();
    cleanups.push(async () => clearInterval(pruneSessions));
    // Stacks with `restart: unless-stopped` come back with the server (the native backend's "machine").
    await actions.reconcileStacks((m) => logger.info(m));

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

    // In progress (docs/kubernetes.md): the `Workshop` resource, kept in step by the replica holding its Lease.
    if (config.kubeWorkshops) {
      const controller = startWorkshopResource(pool, workshops, config.kubeWorkshops, nodeId, logger, cluster);
      // Runs before workshops.close (cleanups run in reverse): the lease is released for another replica at once.
      cleanups.push(() => controller.close());
    }

    await ensureLocalContext(config, pool, url, token, sudoHome, opts.say);
    // Ready means ready: every route can be served and the CLI's context is written. Until now
    // every request, /healthz included, was answered 503 (UNAVAILABLE, Retry-After: 1).
    starting.value = false;
    const credentialsPath = writeCredentials(dataDir, url, first);
    return { url, credentialsPath, close: closeAll };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
