import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AtelierError } from '../../core/index.js';
import {
  checkApprovalLink,
  CreateApprovalRequest,
  DecideApprovalRequest,
  eventVisibleTo,
  APPROVAL_CATEGORIES,
  APPROVAL_STATUSES,
  type ApprovalChannel,
  type ApprovalEvent,
  type ApprovalService,
  type CallOrigin,
  type SlackNotifier,
} from '../../approvals/index.js';
import type { Principal, RouteAccess } from '../../identity/index.js';
import { parse, principalOf } from './common.js';
import { queryOf } from './query.js';

// Reading and waiting: any member of the tenant, and the workshop's own agent token. Filing:
// whoever may operate the workshop (checked by the service). Deciding: people only (the service
// checks owner / maintainer / never the requester).
const READ: RouteAccess = { role: 'viewer', agent: true };
const FILE: RouteAccess = { role: 'member', agent: true };
const DECIDE: RouteAccess = { role: 'member' };

// The audit trail names people and their addresses: people of the tenant only, not agents.
const AUDIT: RouteAccess = { role: 'viewer' };
// A Teams card's link is followed by a person (signed in to the dashboard), never by an agent.
const LINK: RouteAccess = { role: 'viewer' };

const MAX_WAIT_SECONDS = 300;
/** `concerns=me`: only the requests of workshops the caller owns, or all of the tenant's for a maintainer or admin. */
const CONCERNS = ['me'] as const;

type IdParams = { Params: { id: string } };

function streamConcerns(request: FastifyRequest): (typeof CONCERNS)[number] | undefined {
  const q = queryOf(request.query);
  const concerns = q.oneOf('concerns', CONCERNS);
  q.done();
  return concerns;
}

/** The channel a caller says it is (the CLI and dashboard set x-atelier-channel); anything else is `api`. */
function originOf(request: FastifyRequest): CallOrigin {
  const h = request.headers['x-atelier-channel'];
  const channel: ApprovalChannel = h === 'cli' || h === 'dashboard' ? h : 'api';
  return { channel, ip: request.ip ?? null };
}

/** REST and WebSocket routes for approval requests. */
export function approvalRoutes(
  app: FastifyInstance,
  service: ApprovalService,
  slack?: SlackNotifier,
  /** A workshop's id from its id or name, as the caller sees names (the `workshop` filter takes either). */
  resolveWorkshop?: (ref: string, actor: Principal) => Promise<string>,
  /** Signs the dashboard links of the Teams cards (src/approvals/deepLink.ts). */
  linkKey?: string,
): void {
  // Slack's button clicks: public (Slack has no token of ours), authenticated by the request's
  // signature over the raw body, which is kept as bytes and verified before anything is parsed.
  // Unsigned or badly signed: 401, whether or not Slack is configured.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: 64 << 10 }, (_request, body, done) => done(null, body));
    scope.post('/v1/webhooks/slack/interactions', { config: { access: 'public' } }, async (request) => {
      const raw = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      if (!slack) throw new AtelierError('UNAUTHENTICATED', 'Slack request refused: Slack is not configured on this server');
      return slack.interaction(request.headers, raw, request.ip ?? null);
    });
  });

  app.post<IdParams>('/v1/workshops/:id/approvals', { config: { access: FILE } }, async (request, reply) => {
    const body = parse(CreateApprovalRequest, request.body);
    const a = await service.create(request.params.id, body, principalOf(request), originOf(request));
    return reply.status(201).send(a);
  });

  app.get('/v1/approvals', { config: { access: READ } }, async (request) => {
    const q = queryOf(request.query);
    const status = q.oneOf('status', APPROVAL_STATUSES);
    const category = q.oneOf('category', APPROVAL_CATEGORIES);
    const workshop = q.string('workshop');
    const limit = q.int('limit', { min: 1, max: 1000 }) ?? 100;
    const concerns = q.oneOf('concerns', CONCERNS);
    q.done();
    const workshopId = workshop !== undefined && resolveWorkshop ? await resolveWorkshop(workshop, principalOf(request)) : workshop;
    return {
      items: await service.list(principalOf(request), {
        ...(status !== undefined ? { status } : {}),
        ...(category !== undefined ? { category } : {}),
        ...(workshopId !== undefined ? { workshopId } : {}),
        ...(concerns === 'me' ? { concerning: true } : {}),
        limit,
      }),
    };
  });

  app.get<IdParams>('/v1/approvals/:id', { config: { access: READ } }, async (request) =>
    service.get(request.params.id, principalOf(request)),
  );

  // A link of a Teams card, checked for the signed-in person who followed it: the request first
  // (as they may see it: another tenant's is 404), then the signature and the expiry. It decides
  // nothing; the dashboard then shows the request's modal, where the person decides with their rights.
  app.get<IdParams>('/v1/approvals/:id/link', { config: { access: LINK } }, async (request) => {
    const q = queryOf(request.query);
    const action = q.string('action');
    const exp = q.int('exp', { min: 0, max: 2 ** 40 });
    const sig = q.string('sig');
    q.done();
    const approval = await service.get(request.params.id, principalOf(request));
    if (!linkKey) throw new AtelierError('UNAVAILABLE', 'this server signs no approval links');
    const link = checkApprovalLink(linkKey, approval.id, { action, exp, sig }, Math.floor(Date.now() / 1000));
    return { ...link, approval };
  });

  app.get<IdParams>('/v1/approvals/:id/wait', { config: { access: READ } }, async (request, reply) => {
    const q = queryOf(request.query);
    const seconds = q.number('timeout', { min: 0, max: MAX_WAIT_SECONDS }) ?? 30;
    q.done();
    const actor = principalOf(request);
    // A token that expires sooner ends the wait sooner: the client asks again and is refused.
    const tokenLeft = actor.expiresAt ? Math.max(0, Date.parse(actor.expiresAt) - Date.now()) : Infinity;
    const gone = new AbortController();
    reply.raw.on('close', () => gone.abort());
    return service.wait(request.params.id, actor, Math.min(seconds * 1000, tokenLeft), gone.signal);
  });

  app.get<IdParams>('/v1/approvals/:id/audit', { config: { access: AUDIT } }, async (request) => ({
    items: await service.auditTrail(request.params.id, principalOf(request)),
  }));

  app.post<IdParams>('/v1/approvals/:id/decision', { config: { access: DECIDE } }, async (request) => {
    const body = parse(DecideApprovalRequest, request.body);
    return service.decide(request.params.id, body, principalOf(request), originOf(request));
  });

  app.get('/v1/audit/verify', { config: { access: { role: 'admin', platform: true } } }, async () => service.verifyAudit());

  // Live events: one JSON text frame per created, decided or expired request the caller may see.
  // The stream ends when the token expires (the client reconnects and authenticates again).
  app.route({
    method: 'GET',
    url: '/v1/approvals/stream',
    config: { access: READ },
    handler: async () => {
      throw new AtelierError('INVALID_ARGUMENT', 'this is a WebSocket stream: connect with Upgrade: websocket (`atelier approvals watch`)');
    },
    // A bad query is a 400 before the upgrade.
    preHandler: async (request) => void streamConcerns(request),
    wsHandler: (socket, request) => {
      const actor = principalOf(request);
      const concerning = streamConcerns(request) === 'me' ? service.concerning(actor) : undefined;
      // The owner look-up is asynchronous: events go out through one chain, in the order they came.
      let chain = Promise.resolve();
      const send = (event: ApprovalEvent): void => {
        // A client that does not read is dropped rather than buffered for without limit.
        if (socket.bufferedAmount > 4 << 20) {
          socket.terminate();
          return;
        }
        socket.send(JSON.stringify(event));
      };
      const onEvent = (scoped: { event: ApprovalEvent; tenantId: string }): void => {
        if (!eventVisibleTo(actor, scoped)) return;
        if (!concerning) return send(scoped.event);
        chain = chain
          .then(async () => {
            if (await concerning(scoped.event.approval)) send(scoped.event);
          })
          .catch(() => undefined);
      };
      service.events.on('event', onEvent);
      const ends = actor.expiresAt ? Date.parse(actor.expiresAt) - Date.now() : undefined;
      const timer =
        ends !== undefined ? setTimeout(() => socket.close(4001, 'token expired'), Math.max(0, Math.min(ends, 2 ** 31 - 1))) : undefined;
      const ping = setInterval(() => socket.ping(), 30_000);
      socket.on('close', () => {
        service.events.off('event', onEvent);
        if (timer) clearTimeout(timer);
        clearInterval(ping);
      });
      socket.on('error', () => socket.terminate());
      socket.send(JSON.stringify({ type: 'ready' }));
    },
  });
}
