import type { FastifyBaseLogger } from 'fastify';
import { AtelierError } from '../core/index.js';
import type { Pool } from '../db/index.js';
import { ApprovalService, SlackNotifier, gateCommand, matchCommand, parseTtls, type SlackConfig } from '../approvals/index.js';
import { canonicalizeHost, createEgressPolicy, hostForAuthority, type AskHook, type CanonicalHost } from '../egress/index.js';
import { DEFAULT_GRANT_SECONDS, Publisher, SecretStore, type ExecGate, type WorkshopService } from '../workshops/index.js';

export interface ApprovalsRuntime {
  service: ApprovalService;
  slack: SlackNotifier;
  /** The egress proxy's ask hook: files (or joins) an ALLOWLIST_EXPANSION request and holds the request for its decision. */
  ask: AskHook;
  /** The exec gate for SHELL_COMMAND (atelier.yaml `approvals.commands`). */
  execGate: ExecGate;
  /** The tenants' secrets and their grants (SECRET_REQUEST). */
  secrets: SecretStore;
  /** Wires each category to its effect once the workshop service exists, then starts listening and sweeping. */
  start(workshops: WorkshopService): Promise<void>;
  /** Once the workshops are recovered after a start: applies the effects a previous run left undone, then each as decided. */
  resumeEffects(): Promise<void>;
  close(): Promise<void>;
}

/** The first `approvals.commands` pattern an exec matches (src/approvals/commandGate.ts). */
export { matchCommand };

/** The allowlist entry an approval adds: the bare host for the default ports (80, 443), else host:port. */
function entryFor(host: CanonicalHost, port: number | undefined): string {
  const h = hostForAuthority(host);
  return port === undefined || port === 443 || port === 80 ? h : `${h}:${port}`;
}

export function createApprovals(opts: {
  ttl: string | undefined;
  slack: SlackConfig;
  pool: Pool;
  databaseUrl: string;
  logger: FastifyBaseLogger;
  nodeId: string;
  sealer: { encrypt(plain: string, context: string): string; decrypt(sealed: string, context: string): Buffer };
}): ApprovalsRuntime {
  const ttls = parseTtls(opts.ttl);
  const secrets = new SecretStore(opts.pool, { nodeId: opts.nodeId, sealer: opts.sealer, log: opts.logger });
  const service = new ApprovalService(opts.pool, { ttls, databaseUrl: opts.databaseUrl, log: opts.logger });
  const slack = new SlackNotifier(opts.pool, service, opts.slack, opts.logger);

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

  const execGate: ExecGate = async (workshopId, patterns, req, actor, opts) => {
    const match = gateCommand(
      patterns,
      req.command,
      req.stdin === undefined ? {} : { stdin: Buffer.from(req.stdin, 'base64').toString('utf8') },
    );
    if (match === undefined) return;
    const pattern = match.pattern;
    // Approved beforehand (`atelier approvals request --category SHELL_COMMAND`): used once.
    const before = await service.findApprovedUnused(workshopId, 'SHELL_COMMAND', { command: req.command });
    if (before && (await service.consume(before.id))) return;
    const a = await service.create(
      workshopId,
      {
        category: 'SHELL_COMMAND',
        payload: {
          command: req.command,
          ...(req.cwd !== undefined ? { cwd: req.cwd } : {}),
          pattern,
          justification: match.uncertain
            ? `an exec through the API runs what the gate cannot read (${match.uncertain}): approvals.commands in atelier.yaml may name it`
            : `an exec through the API runs "${match.command}", which matches "${pattern}" of approvals.commands in atelier.yaml`,
        },
      },
      actor,
      { channel: 'api', ip: null },
    );
    opts.onApproval?.(a.id);
    const decided = await service.wait(a.id, null, 7 * 86400 * 1000, opts.signal);
    if (decided.status === 'APPROVED' && (await service.consume(a.id))) return;
    if (decided.status === 'PENDING')
      throw new AtelierError('UNAVAILABLE', `the command was not run: the client left before request ${a.id} was decided`, {
        approvalId: a.id,
      });
    throw new AtelierError(
      'PERMISSION_DENIED',
      decided.status === 'EXPIRED'
        ? `the command was not run: approval request ${a.id} expired before anyone decided (it was not rejected); run it again to ask again`
        : decided.status === 'REJECTED'
          ? `the command was not run: ${decided.decidedBy ?? 'a human'} rejected request ${a.id}: ${decided.decisionReason ?? ''}`
          : `the command was not run: approval ${a.id} was already used`,
      { approvalId: a.id, status: decided.status },
    );
  };

  return {
    service,
    slack,
    ask,
    execGate,
    secrets,
    async start(workshops) {
      service.register('SECRET_REQUEST', {
        async prepare(workshopId, payload) {
          const name = String(payload.name);
          if (!(await secrets.existsFor(workshopId, name)))
            throw new AtelierError(
              'NOT_FOUND',
              `secret ${name} is not set in this workshop's tenant: a maintainer sets it with \`atelier secrets set ${name}\` (value on stdin), then ask again`,
              { field: 'payload.name' },
            );
          return { ...payload, ttlSeconds: (payload.ttlSeconds as number | undefined) ?? DEFAULT_GRANT_SECONDS };
        },
        local: (a) => workshops.isLocal(a.workshopId),
        async apply(a) {
          await secrets.grant(a.id, a.workshopId, String(a.payload.name), Number(a.payload.ttlSeconds ?? DEFAULT_GRANT_SECONDS));
        },
      });
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
      const publisher = new Publisher(workshops);
      service.register('PR_GATEWAY', {
        prepare: (workshopId, payload) => publisher.prepare(workshopId, payload),
        local: (a) => workshops.isLocal(a.workshopId),
        apply: (a) => publisher.apply(a),
      });
      // The effect is the exec that waited for it (it consumes the approval), nothing more.
      service.register('SHELL_COMMAND', {});
      await service.start();
      secrets.start((id) => workshops.localSandbox(id));
      slack.start();
    },
    resumeEffects: () => service.resumeEffects(),
    async close() {
      await secrets.close();
      await service.close();
      await slack.close();
    },
  };
}
