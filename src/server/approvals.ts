import type { FastifyBaseLogger } from 'fastify';
import { AtelierError } from '../core/index.js';
import type { Pool } from '../db/index.js';
import { ApprovalService, parseTtls } from '../approvals/index.js';
import { canonicalizeHost, createEgressPolicy, hostForAuthority, type AskHook, type CanonicalHost } from '../egress/index.js';
import type { WorkshopService } from '../workshops/index.js';

export interface ApprovalsRuntime {
  service: ApprovalService;
  /** The egress proxy's ask hook: files (or joins) an ALLOWLIST_EXPANSION request and holds the request for its decision. */
  ask: AskHook;
  /** Wires each category to its effect once the workshop service exists, then starts listening and sweeping. */
  start(workshops: WorkshopService): Promise<void>;
  close(): Promise<void>;
}

/** The allowlist entry an approval adds: the bare host for the default ports (80, 443), else host:port. */
function entryFor(host: CanonicalHost, port: number | undefined): string {
  const h = hostForAuthority(host);
  return port === undefined || port === 443 || port === 80 ? h : `${h}:${port}`;
}

export function createApprovals(opts: {
  ttl: string | undefined;
  pool: Pool;
  databaseUrl: string;
  logger: FastifyBaseLogger;
}): ApprovalsRuntime {
  let ttls;
  try {
    ttls = parseTtls(opts.ttl);
  } catch (err) {
    throw new Error((err as Error).message);
  }
  const service = new ApprovalService(opts.pool, { ttls, databaseUrl: opts.databaseUrl, log: opts.logger });

  const ask: AskHook = async (host, port, ctx) => {
    const existing = await service.findPending(ctx.workshopId, 'ALLOWLIST_EXPANSION', { host, port });
    const a =
      existing ??
      (await service.createForWorkshop(
        ctx.workshopId,
        {
          category: 'ALLOWLIST_EXPANSION',
          payload: { host, port, justification: `a process in the workshop tried to reach ${host} on port ${port} (${ctx.protocol})` },
        },
        'egress-proxy',
      ));
    if (ctx.holdMs <= 0) return { decision: 'pending', approvalId: a.id };
    const decided = await service.wait(a.id, null, ctx.holdMs, ctx.signal);
    const decision = decided.status === 'APPROVED' ? 'allow' : decided.status === 'PENDING' ? 'pending' : 'deny';
    return { decision, approvalId: a.id };
  };

  return {
    service,
    ask,
    async start(workshops) {
      service.register('ALLOWLIST_EXPANSION', {
        async prepare(_workshopId, payload) {
          const h = canonicalizeHost(String(payload.host));
          if (h.kind === 'refused') throw new AtelierError('INVALID_ARGUMENT', `payload.host: ${h.message}`, { field: 'payload.host' });
          const port = payload.port as number | undefined;
          const entry = entryFor(h, port);
          try {
            createEgressPolicy({ allow: [entry] });
          } catch (err) {
            throw new AtelierError('INVALID_ARGUMENT', `payload.host: ${(err as Error).message}`, { field: 'payload.host' });
          }
          return { ...payload, host: h.value, ...(port !== undefined ? { port } : {}), entry };
        },
        local: (a) => workshops.isLocal(a.workshopId),
        async apply(a) {
          await workshops.addApprovedEgress(a.workshopId, String(a.payload.entry));
        },
      });
      await service.start();
    },
    close: () => service.close(),
  };
}
