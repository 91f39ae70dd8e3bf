import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { AtelierError } from '../../core/index.js';
import type { ActionService, Actor, ProjectRegistry } from '../../actions/index.js';
import type { Principal, RouteAccess } from '../../identity/index.js';
import { parse, principalOf } from './common.js';

export interface ActionRoutesDeps {
  actions: ActionService;
  projects: ProjectRegistry;
  /** `apply`: browsers may apply with a same-origin request and a CSRF token; `copy-command`: they get the CLI command instead. */
  cockpitWrites: 'apply' | 'copy-command';
  /** The server's public origin (known once it listens). */
  origin(): string | undefined;
}

const READ: RouteAccess = { role: 'viewer' };
// D3: acting on a project's infrastructure is a maintainer's right; agent tokens never.
const MAINTAIN: RouteAccess = { role: 'maintainer' };

const AddProject = z.strictObject({ path: z.string().min(1).max(4096), name: z.string().min(1).max(63).optional() });
const PlanBody = z.strictObject({
  project: z.string().min(1).max(200),
  action_id: z.string().min(1).max(100).optional(),
  parameters: z.record(z.string(), z.unknown()).default({}),
});
const ApplyBody = z.strictObject({ plan_id: z.string().min(1).max(100), fingerprint: z.string().min(1).max(200) });
const RollbackBody = z.strictObject({ execution_id: z.string().min(1).max(100) });

function actorOf(p: Principal): Actor {
  return { userId: p.userId, userName: p.userName, tenantId: p.tenantId };
}

function projectParam(value: unknown): string {
  if (typeof value !== 'string' || value === '')
    throw new AtelierError('INVALID_ARGUMENT', 'query parameter project is required, once', { field: 'project' });
  return value;
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
  const c = cookie(h.cookie, 'atelier_csrf');
  const t = h['x-atelier-csrf'];
  if (!c || typeof t !== 'string' || c.length !== t.length || !timingSafeEqual(Buffer.from(c), Buffer.from(t)))
    throw new AtelierError('PERMISSION_DENIED', 'the CSRF token is missing or wrong: reload the page', { field: 'x-atelier-csrf' });
}

type ActionParams = { Params: { id: string } };

/** Projects (/v1/projects) and the typed actions of ADR-008 (/api/workspace/actions). */
export function actionRoutes(app: FastifyInstance, deps: ActionRoutesDeps): void {
  const { actions, projects } = deps;

  app.post('/v1/projects', { config: { access: MAINTAIN } }, async (request, reply) => {
    const body = parse(AddProject, request.body);
    return reply.status(201).send(await projects.add(actorOf(principalOf(request)), body.path, body.name));
  });
  app.get('/v1/projects', { config: { access: READ } }, async (request) => ({ items: await projects.list(actorOf(principalOf(request))) }));
  app.delete<{ Params: { project: string } }>('/v1/projects/:project', { config: { access: MAINTAIN } }, async (request) => {
    const p = await projects.remove(actorOf(principalOf(request)), request.params.project);
    return { project: p, removed: true };
  });

  app.get('/api/workspace/actions', { config: { access: READ } }, async (request) => {
    const project = projectParam((request.query as Record<string, unknown>).project);
    return { project, items: await actions.catalog(actorOf(principalOf(request)), project) };
  });

  app.get('/api/workspace/actions/journal', { config: { access: READ } }, async (request) =>
    actions.journal(actorOf(principalOf(request)), projectParam((request.query as Record<string, unknown>).project)),
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
    const body = parse(PlanBody, request.body);
    if (body.action_id !== undefined && body.action_id !== request.params.id)
      throw new AtelierError('INVALID_ARGUMENT', `action_id ${body.action_id} does not match the route's ${request.params.id}`, {
        field: 'action_id',
      });
    return reply.status(201).send(await actions.plan(actorOf(principalOf(request)), body.project, request.params.id, body.parameters));
  });

  app.post<ActionParams>('/api/workspace/actions/:id/apply', { config: { access: MAINTAIN } }, async (request) => {
    const body = parse(ApplyBody, request.body);
    writeGuard(request, deps, `atelier actions apply ${body.plan_id}`);
    return actions.apply(actorOf(principalOf(request)), request.params.id, body.plan_id, body.fingerprint);
  });

  app.post<ActionParams>('/api/workspace/actions/:id/rollback', { config: { access: MAINTAIN } }, async (request) => {
    const body = parse(RollbackBody, request.body);
    writeGuard(request, deps, `atelier actions rollback ${body.execution_id}`);
    return actions.rollback(actorOf(principalOf(request)), request.params.id, body.execution_id);
  });
}
