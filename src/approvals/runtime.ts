import { AtelierError } from '../core/index.js';
import type { Pool } from '../db/index.js';
import { SlackNotifier, type SlackConfig } from './notifiers/slack.js';
import { TeamsNotifier, type TeamsConfig, type TeamsLinks } from './notifiers/teams.js';
import { ApprovalService, type ApprovalServiceOptions } from './service.js';
import { parseTtls, type ApprovalActor, type ApprovalRequest, type SecretMode } from './types.js';
import { execInputs, gateCommand } from './commandGate.js';

/**
 * What the categories' effects act on. The rooms that own these things (workshops, egress) sit
 * above approvals or beside it in the layering, so the composition root hands them in once the
 * workshop service exists; this room decides what each category checks and does.
 */
export interface ApprovalEffects {
  /** False when another node must apply the effect (the workshop runs there). */
  isLocal(workshopId: string): Promise<boolean>;
  /** SECRET_REQUEST: the tenants' secrets and their grants. */
  secrets: {
    existsFor(workshopId: string, name: string): Promise<boolean>;
    /** `use`: the binding the grant makes (the value stays outside the workshop); none: reveal. */
    grant(approvalId: string, workshopId: string, name: string, ttlSeconds: number, use?: SecretUse): Promise<void>;
    /**
     * A use request's binding checked for this workshop (one host its live policy allows, the
     * header and value by atelier.yaml's `egress.credentials` rules, the value naming `name`):
     * returned normalised, or an AtelierError naming the payload field.
     */
    checkUse(workshopId: string, name: string, use: SecretUse): Promise<SecretUse>;
    /** A grant's life when the request names none. */
    defaultTtlSeconds: number;
  };
  /** ALLOWLIST_EXPANSION: the workshop's egress allowlist. */
  allowlist: {
    /** The canonical host and the allowlist entry for it; throws an Error saying what is wrong with the host. */
    entryFor(host: string, port: number | undefined): { host: string; entry: string };
    /** Adds the entry, recording the approval it came from (shown with the workshop's live policy). */
    add(
      workshopId: string,
      entry: string,
      origin: { requestId: string; decidedBy: string | null; decidedAt: string | null },
    ): Promise<void>;
  };
  /** PR_GATEWAY: publishing a workshop's branch. */
  publisher: {
    prepare(workshopId: string, payload: Record<string, unknown>): Promise<Record<string, unknown>>;
    apply(approval: ApprovalRequest): Promise<void>;
  };
}

export interface ApprovalsOptions {
  /** ATELIER_APPROVAL_TTL: how long requests wait, per category. */
  ttl: string | undefined;
  /** ATELIER_APPROVALS_SELF_CONFIRM (ApprovalServiceOptions.selfConfirm). */
  selfConfirm?: 'off' | 'sole-maintainer';
  /** ApprovalServiceOptions.isLeader. */
  isLeader?: () => boolean;
  slack: SlackConfig;
  teams?: TeamsConfig;
  /** Signs the dashboard links of the Teams cards (a key derived from the master key) and knows the server's public origin. */
  links?: TeamsLinks;
  pool: Pool;
  databaseUrl: string;
  log: ApprovalServiceOptions['log'];
}

/** A SECRET_REQUEST in use mode: where the secret is sent, as an atelier.yaml `egress.credentials` entry. */
export interface SecretUse {
  host: string;
  header: string;
  value: string;
}

/** What the egress proxy asks about a host its policy does not name (its ask hook). */
export type AllowlistAsk = (
  host: string,
  port: number,
  context: { workshopId: string; protocol: string; holdMs: number; signal: AbortSignal },
) => Promise<{ decision: 'allow' | 'deny' | 'pending'; approvalId: string }>;

/** What an exec through the API passes before it runs (SHELL_COMMAND): returns to run it, throws to refuse. */
export type CommandGate = (
  workshopId: string,
  patterns: string[],
  req: { command: string[]; cwd?: string | undefined; stdin?: string | undefined; env?: Record<string, string> | undefined },
  actor: ApprovalActor,
  opts: { onApproval?: (approvalId: string) => void; signal?: AbortSignal },
) => Promise<void>;

export interface Approvals {
  service: ApprovalService;
  slack: SlackNotifier;
  teams: TeamsNotifier;
  /** The egress proxy's ask hook: files (or joins) an ALLOWLIST_EXPANSION request and holds the request for its decision. */
  ask: AllowlistAsk;
  /** The exec gate for SHELL_COMMAND (atelier.yaml `approvals.commands`). */
  execGate: CommandGate;
  /** Wires each category to its effect, then starts listening, sweeping and notifying. */
  start(effects: ApprovalEffects): Promise<void>;
  /** Once the workshops are recovered after a start: applies the effects a previous run left undone, then each as decided. */
  resumeEffects(): Promise<void>;
  close(): Promise<void>;
}

/** The approval service, its Slack and Teams notifiers, the gates that file requests, and each category's effect. */
export function createApprovals(opts: ApprovalsOptions): Approvals {
  const service = new ApprovalService(opts.pool, {
    ttls: parseTtls(opts.ttl),
    databaseUrl: opts.databaseUrl,
    log: opts.log,
    selfConfirm: opts.selfConfirm ?? 'off',
    ...(opts.isLeader ? { isLeader: opts.isLeader } : {}),
  });
  const slack = new SlackNotifier(opts.pool, service, opts.slack, opts.log);
  const teams = new TeamsNotifier(opts.pool, service, opts.teams ?? {}, opts.links ?? { key: '', origin: () => undefined }, opts.log);

  const ask: AllowlistAsk = async (host, port, ctx) => {
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

  const execGate: CommandGate = async (workshopId, patterns, req, actor, gateOpts) => {
    const stdinText = req.stdin === undefined ? undefined : Buffer.from(req.stdin, 'base64').toString('utf8');
    const match = gateCommand(patterns, req.command, {
      ...(stdinText === undefined ? {} : { stdin: stdinText }),
      ...(req.env === undefined ? {} : { env: req.env }),
    });
    if (match === undefined) return;
    const pattern = match.pattern;
    // What else the approval is for: the exact stdin and environment (digests, a short preview),
    // so that an approval for one stdin or env cannot be used by an exec with another.
    const inputs = execInputs(req.stdin, req.env);
    // Approved beforehand (`atelier approvals request --category SHELL_COMMAND`): used once. A
    // payload without stdinSha256/envSha256 is for an exec with no stdin and no env.
    const before = await service.findApprovedUnused(
      workshopId,
      'SHELL_COMMAND',
      { command: req.command },
      (payload) => (payload.stdinSha256 ?? null) === inputs.stdinSha256 && (payload.envSha256 ?? null) === inputs.envSha256,
    );
    if (before && (await service.consume(before.id))) return;
    const a = await service.create(
      workshopId,
      {
        category: 'SHELL_COMMAND',
        payload: {
          command: req.command,
          ...(req.cwd !== undefined ? { cwd: req.cwd } : {}),
          ...inputs.payload,
          pattern,
          justification: match.uncertain
            ? `an exec through the API runs what the gate cannot read (${match.uncertain}): approvals.commands in atelier.yaml may name it`
            : `an exec through the API runs "${match.command}", which matches "${pattern}" of approvals.commands in atelier.yaml`,
        },
      },
      actor,
      { channel: 'api', ip: null },
    );
    gateOpts.onApproval?.(a.id);
    const decided = await service.wait(a.id, null, 7 * 86400 * 1000, gateOpts.signal);
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
    teams,
    ask,
    execGate,
    async start(effects) {
      const local = (a: ApprovalRequest): Promise<boolean> => effects.isLocal(a.workshopId);
      service.register('SECRET_REQUEST', {
        async prepare(workshopId, payload) {
          const name = String(payload.name);
          const mode = (payload.mode as SecretMode | undefined) ?? (payload.host !== undefined ? 'use' : 'reveal');
          if (mode === 'reveal') {
            const named = (['host', 'header', 'value'] as const).find((f) => payload[f] !== undefined);
            if (named)
              throw new AtelierError(
                'INVALID_ARGUMENT',
                `payload.${named}: only a request in use mode names a ${named} (the value then never enters the workshop): remove "mode": "reveal", or remove ${named}`,
                { field: `payload.${named}` },
              );
          } else if (payload.host === undefined)
            throw new AtelierError(
              'INVALID_ARGUMENT',
              `payload.host: a request in use mode names the host the secret is sent to (for example "api.github.com"); only if the value itself must be inside the workshop, ask with "mode": "reveal" (riskier)`,
              { field: 'payload.host' },
            );
          if (!(await effects.secrets.existsFor(workshopId, name)))
            throw new AtelierError(
              'NOT_FOUND',
              `secret ${name} is not set in this workshop's tenant: a maintainer sets it with \`atelier secrets set ${name}\` (value on stdin), then ask again`,
              { field: 'payload.name' },
            );
          const use =
            mode === 'use'
              ? await effects.secrets.checkUse(workshopId, name, {
                  host: String(payload.host),
                  header: (payload.header as string | undefined) ?? 'Authorization',
                  value: (payload.value as string | undefined) ?? `Bearer \${secret:${name}}`,
                })
              : {};
          return {
            ...payload,
            mode,
            ...use,
            // What a decider is shown: a revealed value can be copied anywhere the allowlist reaches.
            risk: mode === 'reveal' ? 'higher' : 'lower',
            ttlSeconds: (payload.ttlSeconds as number | undefined) ?? effects.secrets.defaultTtlSeconds,
          };
        },
        local,
        async apply(a) {
          const p = a.payload;
          // Requests filed before use mode existed have no mode: they were reveals.
          const use = p.mode === 'use' ? { host: String(p.host), header: String(p.header), value: String(p.value) } : undefined;
          await effects.secrets.grant(a.id, a.workshopId, String(p.name), Number(p.ttlSeconds ?? effects.secrets.defaultTtlSeconds), use);
        },
      });
      service.register('ALLOWLIST_EXPANSION', {
        async prepare(_workshopId, payload) {
          const port = payload.port as number | undefined;
          let found: { host: string; entry: string };
          try {
            found = effects.allowlist.entryFor(String(payload.host), port);
          } catch (err) {
            throw new AtelierError('INVALID_ARGUMENT', `payload.host: ${(err as Error).message}`, { field: 'payload.host' });
          }
          return { ...payload, host: found.host, ...(port !== undefined ? { port } : {}), entry: found.entry };
        },
        local,
        async apply(a) {
          await effects.allowlist.add(a.workshopId, String(a.payload.entry), {
            requestId: a.id,
            decidedBy: a.decidedBy,
            decidedAt: a.decidedAt,
          });
        },
      });
      service.register('PR_GATEWAY', {
        prepare: (workshopId, payload) => effects.publisher.prepare(workshopId, payload),
        local,
        apply: (a) => effects.publisher.apply(a),
      });
      // The effect is the exec that waited for it (it consumes the approval), nothing more.
      service.register('SHELL_COMMAND', {});
      await service.start();
      slack.start();
      teams.start();
    },
    resumeEffects: () => service.resumeEffects(),
    async close() {
      await service.close();
      await slack.close();
      await teams.close();
    },
  };
}
