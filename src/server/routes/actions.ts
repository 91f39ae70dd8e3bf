import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AddProjectRequest, ApplyPlanRequest, AtelierError, PlanActionRequest, RollbackRequest } from '../../core/index.js';
import type { ActionService, Actor, ProjectRegistry } from '../../actions/index.js';
import type { Principal, RouteAccess } from '../../identity/index.js';
import { parse, principalOf } from './common.js';
import { queryOf } from './query.js';

export interface ActionRoutesDeps {
  actions: ActionService;
  projects: ProjectRegistry;
  /** `apply`: browsers may apply with a same-origin request and a CSRF token; `copy-command`: they get the CLI command instead. */
  cockpitWrites: 'apply' | 'copy-command';
  /** The server's public origin (known once it listens). */
  origin(): string | undefined;
  /** The key CSRF tokens are signed with (derived from the master key: tokens hold across restarts and replicas). */
  csrfKey: string;
}

export const CSRF_COOKIE = 'atelier_csrf';
export const CSRF_HEADER = 'x-atelier-csrf';
const CSRF_TTL_SECONDS = 12 * 3600;

function csrfMac(key: string, userId: string, exp: string, nonce: string): string {
  return createHmac('sha256', key).update(`csrf:${userId}:${exp}:${nonce}`).digest('base64url');
}

/**
 * A signed double-submit token: `<expiry>.<nonce>.<HMAC(user, expiry, nonce)>`. Equal cookie and
 * header prove the page could read this server's response; the signature binds it to the user,
 * so a cookie planted by a sibling site (cookie tossing) is worth nothing.
 */
export function issueCsrfToken(key: string, userId: string, now = Date.now()): { token: string; expiresAt: string } {
  const exp = String(Math.floor(now / 1000) + CSRF_TTL_SECONDS);
  const nonce = randomBytes(16).toString('base64url');
  return { token: `${exp}.${nonce}.${csrfMac(key, userId, exp, nonce)}`, expiresAt: new Date(Number(exp) * 1000).toISOString() };
}

function sameText(a: string, b: string): boolean {
  return a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));
}

export function csrfTokenValid(key: string, userId: string, token: string, now = Date.now()): boolean {
  const [exp, nonce, mac, extra] = token.split('.');
  if (!exp || !nonce || !mac || extra !== undefined || !/^\d{1,12}$/.test(exp)) return false;
  if (Number(exp) * 1000 <= now) return false;
  return sameText(mac, csrfMac(key, userId, exp, nonce));
}

const READ: RouteAccess = { role: 'viewer' };
// D3: acting on a project's infrastructure is a maintainer's right; agent tokens never.
const MAINTAIN: RouteAccess = { role: 'maintainer' };

function actorOf(p: Principal): Actor {
  return { userId: p.userId, userName: p.userName, tenantId: p.tenantId };
}

function projectParam(query: unknown): string {
  const q = queryOf(query);
  const project = q.requiredString('project');
  q.done();
  return project;
}

function cookie(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return v.join('=');
  }
  return undefined;
}

/**
 * The write guard of apply and rollback. A request from a browser (it carries Origin, a cookie or
 * Sec-Fetch-Site) must be same-origin and carry the double-submit CSRF token (cookie
 * `atelier_csrf` = header `x-atelier-csrf`), and only on a server configured with
 * `ATELIER_COCKPIT_WRITES=apply`; otherwise it gets the CLI command to copy. A CLI or script
 * with a bearer token has no ambient credential to forge and goes through on its role.
 */
function writeGuard(request: FastifyRequest, deps: ActionRoutesDeps, command: string): void {
  const h = request.headers;
  const browser = h.origin !== undefined || h.cookie !== undefined || h['sec-fetch-site'] !== undefined;
  if (!browser) return;
  if (deps.cockpitWrites === 'copy-command')
    throw new AtelierError('WRITES_COPY_COMMAND', `this server does not apply actions from the browser: run \`${command}\` in a terminal`, {
      command,
    });
  if (h.origin === undefined || h.origin !== deps.origin())
    throw new AtelierError('PERMISSION_DENIED', 'a cross-origin write is refused: use the dashboard served by this server', {
      field: 'origin',
    });
  const c = cookie(h.cookie, CSRF_COOKIE);
  const t = h[CSRF_HEADER];
  if (!c || typeof t !== 'string' || !sameText(c, t))
    throw new AtelierError(
      'PERMISSION_DENIED',
      `the CSRF token is missing or wrong: GET /api/workspace/csrf, then send its token as ${CSRF_HEADER}`,
      {
        field: CSRF_HEADER,
      },
    );
  if (!csrfTokenValid(deps.csrfKey, principalOf(request).userId, t))
    throw new AtelierError('PERMISSION_DENIED', 'the CSRF token is not yours or has expired: GET /api/workspace/csrf for a new one', {
      field: CSRF_HEADER,
    });
}

type ActionParams = { Params: { id: string } };

/** Projects (/v1/projects) and the typed actions of ADR-008 (/api/workspace/actions). */
export function actionRoutes(app: FastifyInstance, deps: ActionRoutesDeps): void {
  const { actions, projects } = deps;

  app.post('/v1/projects', { config: { access: MAINTAIN } }, async (request, reply) => {
    const body = parse(AddProjectRequest, request.body);
    return reply.status(201).send(await projects.add(actorOf(principalOf(request)), body.path, body.name));
  });
  app.get('/v1/projects', { config: { access: READ } }, async (request) => ({ items: await projects.list(actorOf(principalOf(request))) }));
  app.delete<{ Params: { project: string } }>('/v1/projects/:project', { config: { access: MAINTAIN } }, async (request) => {
    const p = await projects.remove(actorOf(principalOf(request)), request.params.project);
    return { project: p, removed: true };
  });

  // The CSRF token a browser page sends back with its writes: in a cookie (SameSite=Strict, HttpOnly) and in the body for the header.
  app.get('/api/workspace/csrf', { config: { access: READ } }, async (request, reply) => {
    const { token, expiresAt } = issueCsrfToken(deps.csrfKey, principalOf(request).userId);
    const secure = deps.origin()?.startsWith('https:') ? '; Secure' : '';
    void reply
      .header('cache-control', 'no-store')
      .header('set-cookie', `${CSRF_COOKIE}=${token}; Path=/; Max-Age=${CSRF_TTL_SECONDS}; SameSite=Strict; HttpOnly${secure}`);
    return { token, header: CSRF_HEADER, cookie: CSRF_COOKIE, expiresAt };
  });

  app.get('/api/workspace/actions', { config: { access: READ } }, async (request) => {
    const project = projectParam(request.query);
    return { project, items: await actions.catalog(actorOf(principalOf(request)), project), writes: deps.cockpitWrites };
  });

  app.get('/api/workspace/actions/journal', { config: { access: READ } }, async (request) =>
    actions.journal(actorOf(principalOf(request)), projectParam(request.query)),
  );

  app.get<{ Params: { planId: string } }>('/api/workspace/actions/plans/:planId', { config: { access: READ } }, async (request) =>
    actions.getPlan(actorOf(principalOf(request)), request.params.planId),
  );

  app.get<{ Params: { executionId: string } }>(
    '/api/workspace/actions/executions/:executionId',
    { config: { access: READ } },
    async (request) => actions.execution(actorOf(principalOf(request)), request.params.executionId),
  );

  app.post<ActionParams>('/api/workspace/actions/:id/plan', { config: { access: MAINTAIN } }, async (request, reply) => {
    const body = parse(PlanActionRequest, request.body);
    if (body.action_id !== undefined && body.action_id !== request.params.id)
      throw new AtelierError('INVALID_ARGUMENT', `action_id ${body.action_id} does not match the route's ${request.params.id}`, {
        field: 'action_id',
      });
    return reply.status(201).send(await actions.plan(actorOf(principalOf(request)), body.project, request.params.id, body.parameters));
  });

  app.post<ActionParams>('/api/workspace/actions/:id/apply', { config: { access: MAINTAIN } }, async (request) => {
    const body = parse(ApplyPlanRequest, request.body);
    writeGuard(request, deps, `atelier actions apply ${body.plan_id}`);
    return actions.apply(actorOf(principalOf(request)), request.params.id, body.plan_id, body.fingerprint);
  });

  app.post<ActionParams>('/api/workspace/actions/:id/rollback', { config: { access: MAINTAIN } }, async (request) => {
    const body = parse(RollbackRequest, request.body);
    writeGuard(request, deps, `atelier actions rollback ${body.execution_id}`);
    return actions.rollback(actorOf(principalOf(request)), request.params.id, body.execution_id);
  });
}
