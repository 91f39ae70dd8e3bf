import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Transform } from 'node:stream';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import websocket from '@fastify/websocket';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { AtelierError, newRequestId, openApiDocument } from '../core/index.js';
import type { Pool } from '../db/index.js';
import { ExecLog, type CredentialPolicies, type SecretStore, type WorkshopService } from '../workshops/index.js';
import { createTerminals } from '../terminals/index.js';
import type { ApprovalService, SlackNotifier } from '../approvals/index.js';
import {
  checkRouteAccess,
  isRouteAccess,
  type AccountService,
  type Authenticator,
  type Principal,
  type RouteAccess,
} from '../identity/index.js';
import { errorHandler } from './errors.js';
import { approvalRoutes } from './routes/approvals.js';
import { identityRoutes } from './routes/identity.js';
import { terminalRoutes } from './routes/terminals.js';
import { workshopRoutes } from './routes/workshops.js';
import { simulatorRoutes } from './routes/simulators.js';
import { execRoutes } from './routes/execs.js';
import { secretRoutes } from './routes/secrets.js';
import { csrfTokenValid, CSRF_HEADER } from './routes/actions.js';
import { cookieValue, SESSION_COOKIE, type BrowserSessions } from './browserSessions.js';
import { NodeRegistry, type SignedBody } from './nodes.js';
import type { Cluster } from './relay.js';
import { nodeRoutes } from './routes/nodes.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Required on every route: who may call it (see identity/policy.ts). */
    access?: RouteAccess;
  }
  interface FastifyRequest {
    principal?: Principal;
    /** Set on a request another node relayed here (signed: src/server/nodes.ts). */
    relayed?: { from: string; placement: string | undefined; body: SignedBody | undefined };
    /** The access token a dashboard session's cookie stands for (set only for such a request; never sent back). */
    sessionToken?: string;
  }
}

export interface AppDeps {
  pool: Pool;
  workshops: WorkshopService;
  authenticator: Authenticator;
  accounts: AccountService;
  logger: FastifyBaseLogger;
  version: string;
  /** Reverse proxies whose X-Forwarded-For is believed (ATELIER_TRUST_PROXY); none by default. */
  trustProxy?: string[];
  /** Routes of other areas (the embedded issuer, the auth relay), registered with the rest. */
  extraRoutes?: ((app: FastifyInstance) => void)[];
  /**
   * Hooks that answer a request before anything reads its credentials or relays it (the plain
   * listener's redirect to HTTPS under `--tls`): registered before the authentication hook, so
   * that they run first (Fastify runs `onRequest` hooks in their order of registration).
   */
  firstHooks?: ((app: FastifyInstance) => void)[];
  approvals?: ApprovalService;
  slack?: SlackNotifier;
  /** Signs and checks the dashboard links of the Teams cards (derived from the master key). */
  approvalLinkKey?: string;
  secrets?: SecretStore;
  credentialPolicies?: CredentialPolicies;
  /** Whether this node runs the installation's periodic jobs (src/db/leader.ts); always, without it. */
  isLeader?: () => boolean;
  /** True until the server can serve every route (its issuer ready, the CLI context written). */
  starting?: () => boolean;
  /** The master key: seals what the database must not hold in clear (SSH host keys). */
  sealer: { encrypt(plain: string, context: string): string; decrypt(sealed: string, context: string): Buffer };
  /** Where agent sessions' holders listen (DATA_DIR/sessions): they outlive the server. */
  sessionsDir: string;
  /** The installation's nodes and the relay to them (docs/replicas.md); one node alone without it. */
  cluster?: Cluster;
  /** Dashboard sessions: a request without a bearer token may carry their cookie (docs/dashboard.md). */
  browser?: { sessions: BrowserSessions; csrfKey: string; origin(): string | undefined };
}

export interface RouteEntry {
  method: string;
  url: string;
  access: RouteAccess;
}

/** The prefix of the routes whose `:id` is a workshop's (its id or its name). */
const WORKSHOP_ROUTES = '/v1/workshops/:id';
/** A command started with POST /v1/workshops/:id/execs, read back. */
const EXEC_ROUTE = '/v1/execs/:execId';

function tenantHeader(value: string | string[] | undefined): string | undefined {
  if (Array.isArray(value)) throw new AtelierError('INVALID_ARGUMENT', 'send the x-atelier-tenant header once');
  return value === undefined || value === '' ? undefined : value;
}

/**
 * A request authenticated by the dashboard's cookie: a WebSocket must come from a page of this
 * origin, and a write must carry the CSRF token the page got from GET /auth/web/session (the
 * cookie is SameSite=Strict already; the header is a second, independent check).
 */
function checkBrowserRequest(
  method: string,
  h: Record<string, string | string[] | undefined>,
  userId: string,
  browser: NonNullable<AppDeps['browser']>,
): void {
  if (h.upgrade !== undefined && h.origin !== browser.origin())
    throw new AtelierError('PERMISSION_DENIED', 'a WebSocket opened with the dashboard cookie must come from the dashboard’s own origin', {
      field: 'origin',
    });
  if (method === 'GET' || method === 'HEAD' || method === 'OPTIONS') return;
  const token = h[CSRF_HEADER];
  if (typeof token !== 'string' || !csrfTokenValid(browser.csrfKey, userId, token))
    throw new AtelierError(
      'PERMISSION_DENIED',
      `a write with the dashboard cookie needs the ${CSRF_HEADER} header: the token from GET /auth/web/session (reload the page if it expired)`,
      { field: CSRF_HEADER },
    );
}

/**
 * The request's URL with the workshop's id where it gave the workshop's name (`ref`), for the
 * node it is relayed to; undefined (the URL as it came) when it gave the id, or in a form other
 * than `/v1/workshops/NAME…` (the owner then resolves it itself).
 */
function withId(url: string | undefined, ref: string, id: string): string | undefined {
  if (ref === id || url === undefined) return undefined;
  const prefix = '/v1/workshops/';
  if (!url.startsWith(prefix)) return undefined;
  const end = url.slice(prefix.length).search(/[/?#]/);
  const rest = end < 0 ? '' : url.slice(prefix.length + end);
  const given = end < 0 ? url.slice(prefix.length) : url.slice(prefix.length, prefix.length + end);
  let decoded: string;
  try {
    decoded = decodeURIComponent(given);
  } catch {
    return undefined;
  }
  return decoded === ref ? `${prefix}${encodeURIComponent(id)}${rest}` : undefined;
}

/** Builds the HTTP server: health, metrics, and the authenticated /v1 API. */
export function buildApp(deps: AppDeps): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.logger,
    genReqId: () => newRequestId(),
    requestIdHeader: false,
    bodyLimit: 1 << 20,
    trustProxy: deps.trustProxy && deps.trustProxy.length > 0 ? deps.trustProxy : false,
    forceCloseConnections: true,
  });

  // Every route declares who may call it; one that does not is a programming error, caught here
  // at start-up rather than served open. The list is served to admins at /v1/admin/routes.
  const catalog: RouteEntry[] = [];
  app.addHook('onRoute', (route) => {
    const access = (route.config as { access?: unknown } | undefined)?.access;
    if (!isRouteAccess(access)) throw new Error(`route ${String(route.method)} ${route.url} declares no access rule`);
    for (const method of [route.method].flat()) if (method !== 'HEAD') catalog.push({ method, url: route.url, access });
  });

  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'atelier_' });
  const requests = new Counter({
    name: 'atelier_http_requests_total',
    help: 'HTTP requests by route and status',
    labelNames: ['method', 'route', 'status'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'atelier_http_request_duration_seconds',
    help: 'HTTP request duration',
    labelNames: ['method', 'route'],
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    registers: [registry],
  });
  new Gauge({
    name: 'atelier_leader',
    help: "1 while this node runs the installation's periodic jobs (approval expiry, pruning), else 0",
    registers: [registry],
    collect() {
      this.set(deps.isLeader?.() === false ? 0 : 1);
    },
  });
  new Gauge({
    name: 'atelier_workshops',
    help: 'Workshops on this server by status',
    labelNames: ['status'],
    registers: [registry],
    async collect() {
      this.reset();
      try {
        const r = await deps.pool.query<{ status: string; n: string }>('SELECT status, count(*) AS n FROM workshops GROUP BY status');
        for (const row of r.rows) this.set({ status: row.status }, Number(row.n));
      } catch {
        // database down: /healthz says so
      }
    },
  });
  // The LLM gateway's meter, from the ledger (so every replica shows the installation's totals).
  new Gauge({
    name: 'atelier_llm_spend_usd',
    help: 'USD spent on models through the LLM gateway, by tenant (deleted workshops included)',
    labelNames: ['tenant'],
    registers: [registry],
    async collect() {
      this.reset();
      try {
        const r = await deps.pool.query<{ tenant_id: string; usd: string }>(
          'SELECT tenant_id, sum(cost_usd) AS usd FROM llm_requests GROUP BY tenant_id',
        );
        for (const row of r.rows) this.set({ tenant: row.tenant_id }, Number(row.usd));
      } catch {
        // database down: /healthz says so
      }
    },
  });
  new Gauge({
    name: 'atelier_llm_requests',
    help: 'Model requests through the LLM gateway, by tenant and whether the answer reported its usage',
    labelNames: ['tenant', 'usage'],
    registers: [registry],
    async collect() {
      this.reset();
      try {
        const r = await deps.pool.query<{ tenant_id: string; reported: boolean; n: string }>(
          'SELECT tenant_id, usage_reported AS reported, count(*) AS n FROM llm_requests GROUP BY tenant_id, usage_reported',
        );
        for (const row of r.rows) this.set({ tenant: row.tenant_id, usage: row.reported ? 'reported' : 'unreported' }, Number(row.n));
      } catch {
        // database down: /healthz says so
      }
    },
  });
  new Gauge({
    name: 'atelier_llm_workshop_spend_usd',
    help: 'USD each existing workshop spent on models through the LLM gateway (those that spent any)',
    labelNames: ['workshop'],
    registers: [registry],
    async collect() {
      this.reset();
      try {
        const r = await deps.pool.query<{ id: string; usd: string }>(
          'SELECT id, llm_spent_usd AS usd FROM workshops WHERE llm_requests > 0',
        );
        for (const row of r.rows) this.set({ workshop: row.id }, Number(row.usd));
      } catch {
        // database down: /healthz says so
      }
    },
  });

  // A workshop never moves between nodes: its node is read once.
  const owners = new Map<string, string>();
  const ownerOf = async (id: string): Promise<string | undefined> => {
    const known = owners.get(id);
    if (known !== undefined) return known;
    const node = await deps.workshops.nodeOf(id);
    if (node === undefined) return undefined;
    if (owners.size >= 10_000) owners.clear();
    owners.set(id, node);
    return node;
  };

  for (const register of deps.firstHooks ?? []) register(app);
  app.addHook('onRequest', async (request, reply) => {
    void reply.header('x-request-id', String(request.id));
    if (deps.starting?.()) {
      void reply.header('retry-after', '1');
      if (request.routeOptions.url === '/healthz')
        return reply.status(503).send({ status: 'starting', code: 'UNAVAILABLE', version: deps.version });
      throw new AtelierError('UNAVAILABLE', 'the server is starting: try again in a second');
    }
    // Decided on the route the router matched, never on the raw URL (percent-encoding, absolute
    // form): each route's declared access rule; unknown URLs get a 404.
    const access = request.routeOptions.config.access;
    if (request.routeOptions.url === undefined || access === undefined || access === 'public') return;
    let principal: Principal;
    if (NodeRegistry.isNodeRequest(request.headers)) {
      // Relayed by another node, which authenticated the caller and checked the route's rule.
      if (!deps.cluster)
        throw new AtelierError('UNAUTHENTICATED', 'node-to-node request refused: this server is not a node of an installation');
      const v = await deps.cluster.nodes.verify(request.method, request.raw.url ?? '', request.headers);
      principal = v.principal;
      request.relayed = { from: v.from, placement: v.placement, body: v.body };
    } else {
      const tenant = tenantHeader(request.headers['x-atelier-tenant']);
      const browser = deps.browser;
      const fromCookie =
        browser !== undefined &&
        request.headers.authorization === undefined &&
        cookieValue(request.headers.cookie, SESSION_COOKIE) !== undefined;
      if (fromCookie) {
        const session = (await browser.sessions.session(request.headers.cookie, tenant))!;
        principal = session.principal;
        request.sessionToken = session.token;
        checkBrowserRequest(request.method, request.headers, principal.userId, browser);
      } else principal = await deps.authenticator.authenticate(request.headers.authorization, tenant);
    }
    checkRouteAccess(access, principal);
    request.principal = principal;
    // Every route on one workshop (`/v1/workshops/:id…`, the route table's) takes its id or its
    // name: resolved here, once, for the caller, so handlers, the CLI, the SDK and MCP see ids only.
    const params = request.params as { id?: unknown };
    if (request.routeOptions.url.startsWith(WORKSHOP_ROUTES) && typeof params.id === 'string') {
      const ref = params.id;
      // A relayed request names the workshop by the id the relaying node resolved (and signed):
      // nothing to look up (resolveRef returns an id as it is).
      const id = await deps.workshops.resolveRef(ref, principal);
      params.id = id;
      // What must run where the sandbox is goes to the workshop's node, as it came (reading the
      // workshop itself is answered here, from the database, also while its node is unreachable).
      const cluster = deps.cluster;
      if (cluster && request.relayed) {
        // Relayed here because this node runs it: checked on the node's own record of its
        // workshops (read once per workshop: a workshop never moves). A workshop deleted since
        // is the handler's 404, as for a direct request.
        const owner = await ownerOf(id);
        if (owner !== undefined && owner !== cluster.nodeId)
          throw new AtelierError(
            'CONFLICT',
            `workshop ${id} runs on node ${cluster.nodes.describe(owner).name}, not on ${cluster.nodes.name}, which another node relayed it to: try again (the relaying node reads where workshops run again)`,
            { node: cluster.nodes.describe(owner).name },
          );
      } else if (cluster && !(request.method === 'GET' && request.routeOptions.url === WORKSHOP_ROUTES)) {
        const owner = await ownerOf(id);
        if (owner !== undefined && owner !== cluster.nodeId) {
          // Silent: maybe removed since this node last read the nodes (a removed node's workshop
          // is deleted here, from the database; anything else on it is refused, saying so). Why
          // it is refused is said only of a workshop the caller may see and that still exists
          // (a removed node's workshop deleted meanwhile, its node still in `owners`, is not found).
          if (!cluster.nodes.isLive(owner)) {
            await deps.workshops.authorize(id, principal, 'read');
            await cluster.nodes.refresh();
          }
          const forget = cluster.nodes.isRemoved(owner) && request.method === 'DELETE' && request.routeOptions.url === WORKSHOP_ROUTES;
          if (!forget) {
            await cluster.forward(request, reply, owner, principal, { what: `workshop ${id}`, url: withId(request.raw.url, ref, id) });
            return reply;
          }
        }
      }
    }
    // A started command is followed by the node that runs its workshop (its live output, its end).
    const execId = (request.params as { execId?: unknown }).execId;
    if (deps.cluster && !request.relayed && request.routeOptions.url === EXEC_ROUTE && typeof execId === 'string') {
      const [row] = (
        await deps.pool.query<{ node_id: string; workshop_id: string }>(
          'SELECT w.node_id, w.id AS workshop_id FROM execs e JOIN workshops w ON w.id = e.workshop_id WHERE e.id = $1',
          [execId],
        )
      ).rows;
      if (row && row.node_id !== deps.cluster.nodeId) {
        await deps.cluster.forward(request, reply, row.node_id, principal, { what: `workshop ${row.workshop_id}` });
        return reply;
      }
    }
  });
  // A relayed body the sending node signed (src/server/relay.ts) is hashed as it is read, before
  // any handler sees it: one changed on the way between the nodes fails its parsing, refused.
  app.addHook('preParsing', async (request, _reply, payload) => {
    const signed = request.relayed?.body;
    if (!signed) return payload;
    const hash = createHash('sha256');
    return payload.pipe(
      new Transform({
        transform(chunk: Buffer, _encoding, done) {
          hash.update(chunk);
          done(null, chunk);
        },
        flush(done) {
          done(
            hash.digest('hex') === signed.sha256
              ? null
              : new AtelierError('UNAUTHENTICATED', 'node-to-node request refused: its body is not the one it was signed with'),
          );
        },
      }),
    );
  });
  app.addHook('onResponse', async (request, reply) => {
    // An upgrade answered over HTTP (refused before the WebSocket handler: 401, 404) owns a socket
    // the HTTP server no longer tracks: close it, or it lingers and blocks the server's shutdown.
    if (request.headers.upgrade !== undefined) request.raw.socket?.destroy();
    const route = request.routeOptions.url ?? 'unknown';
    requests.inc({ method: request.method, route, status: String(reply.statusCode) });
    duration.observe({ method: request.method, route }, reply.elapsedTime / 1000);
  });

  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request) => {
    throw new AtelierError('NOT_FOUND', `no route ${request.method} ${request.url.split('?')[0]}: see docs/api.md`);
  });

  const PUBLIC = { config: { access: 'public' as const } };
  app.get('/healthz', PUBLIC, async (_request, reply) => {
    try {
      await deps.pool.query('SELECT 1');
    } catch {
      return reply.status(503).send({ status: 'unavailable', code: 'DATABASE_UNAVAILABLE', version: deps.version });
    }
    return { status: 'ok', version: deps.version };
  });
  app.get('/metrics', PUBLIC, async (_request, reply) => reply.header('content-type', registry.contentType).send(await registry.metrics()));

  app.get('/v1/admin/routes', { config: { access: { role: 'admin' } } }, async () => ({ items: catalog }));
  // Public: it describes the open-source API, nothing of this server's data (as /healthz says its version).
  let openapi: object | undefined;
  app.get('/v1/openapi.json', PUBLIC, async () => (openapi ??= openApiDocument({ version: deps.version })));
  // The bootstrap (`curl -fsSL URL/install.sh | ATELIER_RELEASE_URL=… sh`): scripts/get.sh, shipped in every release.
  app.get('/install.sh', PUBLIC, async (_request, reply) =>
    reply
      .header('content-type', 'text/x-shellscript; charset=utf-8')
      .send(await readFile(new URL('../../scripts/get.sh', import.meta.url), 'utf8')),
  );

  workshopRoutes(app, deps.workshops, deps.approvals, deps.cluster);
  if (deps.cluster) nodeRoutes(app, deps.cluster.nodes);
  simulatorRoutes(app, deps.workshops);
  identityRoutes(app, deps.accounts, deps.workshops);
  if (deps.secrets) secretRoutes(app, deps.secrets, deps.credentialPolicies);
  const execs = new ExecLog(deps.pool, deps.workshops, deps.logger, deps.isLeader);
  execRoutes(app, execs);
  app.addHook('onClose', () => execs.close());
  // WebSocket routes (terminals and tunnels, the approvals stream), authenticated by the same
  // onRequest hook before the upgrade, live in plugins registered after @fastify/websocket.
  void app.register(websocket, { options: { maxPayload: 1 << 20 } });
  void app.register(async (scope) => {
    const terminals = createTerminals({
      workshops: deps.workshops,
      pool: deps.pool,
      sealer: deps.sealer,
      log: deps.logger,
      approvals: deps.approvals,
      sessionsDir: deps.sessionsDir,
    });
    terminalRoutes(scope, terminals);
    scope.addHook('onClose', async () => terminals.close());
    new Gauge({
      name: 'atelier_tunnels',
      help: 'Byte tunnels relayed on this server',
      labelNames: ['state'],
      registers: [registry],
      collect() {
        for (const [state, n] of Object.entries(terminals.counts())) this.set({ state }, n);
      },
    });
  });
  for (const register of deps.extraRoutes ?? []) register(app);
  const approvals = deps.approvals;
  if (approvals)
    void app.register(async (scope) =>
      approvalRoutes(scope, approvals, deps.slack, (ref, actor) => deps.workshops.resolveRef(ref, actor), deps.approvalLinkKey),
    );
  return app;
}
