import { AtelierError } from '../../../core/index.js';
import { APPROVAL_CATEGORIES, APPROVAL_STATUSES, type ApprovalRequest } from '../../../approvals/index.js';
import type { CommandContext } from '../../context.js';
import { keyValues, printable, table } from '../../output.js';

export type { ApprovalRequest };

function pick<T extends string>(value: string | undefined, allowed: readonly T[], flag: string): T | undefined {
  if (value === undefined) return undefined;
  const v = value.toUpperCase();
  if (!(allowed as readonly string[]).includes(v))
    throw new AtelierError('INVALID_ARGUMENT', `${flag} must be one of ${allowed.join(', ')}; got "${value}"`, { field: flag });
  return v as T;
}

/** `atelier approvals list [--status S] [--workshop ID] [--category C]`: newest first. */
export async function listApprovals(
  ctx: CommandContext,
  flags: { status?: string; workshop?: string; category?: string; all?: boolean },
): Promise<ApprovalRequest[]> {
  // Without --status the list shows what waits for someone (the usual question); --all shows everything.
  const status = pick(flags.status, APPROVAL_STATUSES, '--status') ?? (flags.all ? undefined : 'PENDING');
  const category = pick(flags.category, APPROVAL_CATEGORIES, '--category');
  const query = { status, category, ...(flags.workshop ? { workshop: flags.workshop } : {}) };
  return (await (await ctx.api()).call('listApprovals', { query })).items;
}

export async function showApproval(ctx: CommandContext, id: string): Promise<ApprovalRequest> {
  return (await ctx.api()).call('getApproval', { params: { id } });
}

/** `atelier approvals approve|reject ID --reason …` (and the alias `atelier approve ID`). */
export async function decideApproval(
  ctx: CommandContext,
  id: string,
  decision: 'APPROVE' | 'REJECT',
  reason: string | undefined,
): Promise<ApprovalRequest> {
  const r = reason ?? (decision === 'APPROVE' ? 'approved from the CLI' : undefined);
  if (!r) throw new AtelierError('INVALID_ARGUMENT', 'say why with --reason "…" (required to reject)', { field: 'reason' });
  return (await ctx.api()).call('decideApproval', { params: { id }, body: { decision, reason: r } });
}

/**
 * `atelier approvals request --workshop ID --category C --payload JSON [--wait]`: what an agent
 * runs (with ATELIER_URL and ATELIER_TOKEN set in its workshop). With --wait, it returns once
 * decided; a rejected or expired request is an error (exit 1), an approved one prints the request.
 */
export async function requestApproval(
  ctx: CommandContext,
  flags: { workshop?: string; category: string; payload: string; wait?: boolean; timeout?: string },
  whoami: () => Promise<string | null>,
): Promise<ApprovalRequest> {
  const category = pick(flags.category, APPROVAL_CATEGORIES, '--category')!;
  let payload: unknown;
  try {
    payload = JSON.parse(flags.payload);
  } catch {
    throw new AtelierError(
      'INVALID_ARGUMENT',
      '--payload must be a JSON object such as \'{"host":"api.stripe.com","justification":"…"}\'',
      {
        field: 'payload',
      },
    );
  }
  const workshop = flags.workshop ?? (await whoami());
  if (!workshop)
    throw new AtelierError('INVALID_ARGUMENT', '--workshop ID is required (an agent token names its own)', { field: 'workshop' });
  const api = await ctx.api();
  // Anything but an object is the server's to refuse, saying what a payload must hold.
  let a = await api.call('createApproval', { params: { id: workshop }, body: { category, payload: payload as Record<string, unknown> } });
  if (!flags.wait) return a;
  const limit = flags.timeout === undefined ? Infinity : Number(flags.timeout) * 1000;
  if (!(limit > 0)) throw new AtelierError('INVALID_ARGUMENT', '--timeout must be a number of seconds', { field: 'timeout' });
  const until = Date.now() + limit;
  process.stderr.write(`waiting for a decision on ${a.id}: \`atelier approvals approve ${a.id}\`\n`);
  // Long polls of at most a minute each: a server restart or a dropped connection only costs a retry.
  while (a.status === 'PENDING' && Date.now() < until) {
    const seconds = Math.max(1, Math.min(60, Math.ceil((until - Date.now()) / 1000)));
    try {
      a = await api.call('waitApproval', { params: { id: a.id }, query: { timeout: seconds } });
    } catch (err) {
      if (err instanceof AtelierError && (err.code === 'UNAVAILABLE' || err.code === 'DATABASE_UNAVAILABLE')) {
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      throw err;
    }
  }
  return a;
}

/** Fails (exit 1) unless approved: what a script waiting on a request branches on. */
export function requireApproved(a: ApprovalRequest): void {
  if (a.status === 'APPROVED') return;
  if (a.status === 'EXPIRED')
    throw new AtelierError('PERMISSION_DENIED', `request ${a.id} expired at ${a.expiresAt}: nobody decided in time; ask again`, {
      id: a.id,
    });
  if (a.status === 'REJECTED')
    throw new AtelierError('PERMISSION_DENIED', `request ${a.id} was rejected by ${a.decidedBy ?? 'someone'}: ${a.decisionReason ?? ''}`, {
      id: a.id,
    });
  throw new AtelierError('UNAVAILABLE', `request ${a.id} is still pending: \`atelier approvals show ${a.id}\``, { id: a.id });
}

/** A short description of what is asked, never a secret's value (requests hold only names). */
export function summary(a: ApprovalRequest): string {
  const p = a.payload;
  switch (a.category) {
    case 'ALLOWLIST_EXPANSION':
      return `reach ${String(p.entry ?? p.host)}`;
    case 'SECRET_REQUEST':
      return p.mode === 'use'
        ? `use secret ${String(p.name)} at ${String(p.host)} (never revealed)`
        : `reveal secret ${String(p.name)} inside the workshop (riskier)`;
    case 'SHELL_COMMAND':
      return `run ${Array.isArray(p.command) ? p.command.join(' ') : ''}`.slice(0, 80);
    case 'PR_GATEWAY':
      return `publish branch ${String(p.branch)}${p.remote ? ` to ${String(p.remote)}` : ''}`;
  }
}

/** A SECRET_REQUEST's mode as a decider reads it: what approving does, and which choice is the riskier. */
function secretMode(p: Record<string, unknown>): string {
  if (p.mode === 'use')
    return `use (lower risk): the egress proxy sends ${printable(`${String(p.header)}: ${String(p.value)}`)} to ${String(p.host)}; the value never enters the workshop`;
  return 'reveal (RISKIER): the value enters the workshop as a file and a variable; the agent can copy it anywhere its allowlist reaches (use mode, naming a host, would keep it outside)';
}

export function approvalTable(items: ApprovalRequest[]): string {
  if (items.length === 0) return 'No approval requests.';
  return table(items, [
    { header: 'ID', get: (a) => a.id },
    { header: 'WORKSHOP', get: (a) => a.workshopId },
    { header: 'CATEGORY', get: (a) => a.category },
    { header: 'STATUS', get: (a) => a.status },
    { header: 'ASKED BY', get: (a) => a.requestedBy },
    { header: 'EXPIRES', get: (a) => a.expiresAt },
    { header: 'WHAT', get: summary },
  ]);
}

export function approvalDetail(a: ApprovalRequest): string {
  const pairs: [string, string][] = [
    ['id', a.id],
    ['workshop', a.workshopId],
    ['category', a.category],
    ['status', a.status],
    ['what', summary(a)],
    ['justification', String(a.payload.justification ?? '')],
    ['asked by', a.requestedBy],
    ['created', a.createdAt],
    ['expires', a.expiresAt],
  ];
  if (a.category === 'SECRET_REQUEST') pairs.push(['mode', secretMode(a.payload)]);
  if (a.category === 'PR_GATEWAY') {
    pairs.push(['title', String(a.payload.title ?? '')]);
    // The stat here; the whole diff with --output json (payload.diff).
    pairs.push(['changes', `\n${String(a.payload.diffStat ?? '').trimEnd()}`]);
  }
  if (a.decidedAt) pairs.push(['decided', `${a.decidedAt}${a.decidedBy ? ` by ${a.decidedBy}` : ''}`]);
  if (a.decisionReason) pairs.push(['reason', a.decisionReason]);
  if (a.effect.appliedAt) pairs.push(['applied', a.effect.error ? `failed: ${a.effect.error}` : a.effect.appliedAt]);
  if (a.status === 'PENDING') pairs.push(['decide', `atelier approvals approve ${a.id} --reason "…"  (or reject)`]);
  return keyValues(pairs);
}

/** One line for `watch` and for a terminal running exec. */
export function eventLine(type: string, a: ApprovalRequest): string {
  const what = `${a.category} ${summary(a)} for ${a.workshopId}`;
  if (type === 'created') return `[approval] ${a.id} waiting: ${what} — \`atelier approve ${a.id}\``;
  return `[approval] ${a.id} ${a.status}${a.decidedBy ? ` by ${a.decidedBy}` : ''}: ${what}`;
}
