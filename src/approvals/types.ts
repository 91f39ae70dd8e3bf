import { z } from 'zod';

import { APPROVAL_CATEGORIES, APPROVAL_STATUSES, CreateApprovalRequest, DecideApprovalRequest } from '../core/index.js';

// The statuses, categories and request bodies are the wire contract's (core), re-exported here.
export { APPROVAL_CATEGORIES, APPROVAL_STATUSES, CreateApprovalRequest, DecideApprovalRequest };
export type ApprovalStatus = (typeof APPROVAL_STATUSES)[number];
export type ApprovalCategory = (typeof APPROVAL_CATEGORIES)[number];
/** Where a decision came from (kept in the audit). */
export type ApprovalChannel = 'cli' | 'slack' | 'dashboard' | 'api' | 'system';

/**
 * Who calls, as far as approvals care. The identity Principal has this shape; approvals sit
 * beside identity in the layering, so they name only what they use.
 */
export interface ApprovalActor {
  kind: 'user' | 'agent';
  userId: string;
  userName: string;
  tenantId: string;
  role: 'viewer' | 'member' | 'maintainer' | 'admin';
  workshopId: string | null;
}

/** One approval request, as the API and the CLI show it. */
export interface ApprovalRequest {
  id: string;
  workshopId: string;
  category: ApprovalCategory;
  requestedBy: string;
  payload: Record<string, unknown>;
  status: ApprovalStatus;
  decidedBy: string | null;
  decisionReason: string | null;
  createdAt: string;
  expiresAt: string;
  decidedAt: string | null;
  /** Approved requests: when the server applied the effect (domain added, secret granted…), or why it could not. */
  effect: { appliedAt: string | null; error: string | null };
}

/** An event of the live stream (WebSocket, CLI watch, notifiers). */
export interface ApprovalEvent {
  type: 'created' | 'decided' | 'expired';
  approval: ApprovalRequest;
}

const justification = z
  .string()
  .trim()
  .min(1, 'payload.justification is required: say why the agent needs this')
  .max(4000, 'payload.justification is limited to 4000 characters');

const noNul = (s: string): boolean => !s.includes('\0');

/** How an approved SECRET_REQUEST grants its secret (see PAYLOADS.SECRET_REQUEST.mode). */
export const SECRET_MODES = ['use', 'reveal'] as const;
export type SecretMode = (typeof SECRET_MODES)[number];

/** What each category's payload must hold. Unknown keys are refused (they would be shown to the decider unchecked). */
export const PAYLOADS = {
  ALLOWLIST_EXPANSION: z.strictObject({
    host: z.string().min(1).max(253).refine(noNul, 'may not contain NUL bytes'),
    port: z.number().int().min(1).max(65535).optional(),
    justification,
  }),
  SECRET_REQUEST: z.strictObject({
    name: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,63}$/, 'payload.name: a secret name is letters, digits and _, at most 64'),
    ttlSeconds: z.number().int().min(10).max(86400).optional(),
    /**
     * `use`: the secret is added by the egress proxy to requests to `host` (the value never
     * enters the workshop); `reveal`: the value enters the workshop (a file and a variable), the
     * riskier choice. Default: `use` when a host is named, else `reveal`.
     */
    mode: z.enum(SECRET_MODES).optional(),
    /** use: the one host (optionally :port, default 443) the secret is sent to. */
    host: z.string().min(1).max(300).refine(noNul, 'may not contain NUL bytes').optional(),
    /** use: the header it is sent in (default Authorization). */
    header: z.string().min(1).max(100).optional(),
    /** use: the header's value, naming the secret once as ${secret:NAME} (default `Bearer ${secret:NAME}`). */
    value: z.string().min(1).max(1000).optional(),
    /** Filled in by the server: `higher` for reveal, `lower` for use (what a decider is shown). */
    risk: z.enum(['higher', 'lower']).optional(),
    justification,
  }),
  SHELL_COMMAND: z.strictObject({
    command: z.array(z.string().max(16384).refine(noNul, 'may not contain NUL bytes')).min(1).max(256),
    cwd: z.string().max(4096).refine(noNul, 'may not contain NUL bytes').optional(),
    /** The atelier.yaml `approvals.commands` entry it matched (filled in by the server). */
    pattern: z.string().max(500).optional(),
    /** The exec's stdin: its sha256 (hex), size and first characters; absent: no stdin. */
    stdinSha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/, 'payload.stdinSha256: a sha256 in hex')
      .optional(),
    stdinBytes: z.number().int().min(0).optional(),
    stdinPreview: z.string().max(1000).refine(noNul, 'may not contain NUL bytes').optional(),
    /** The exec's env: each variable's name with the sha256 of its value, and one sha256 of them all (see execInputs). */
    env: z.record(z.string().max(256), z.string().regex(/^[0-9a-f]{64}$/)).optional(),
    envSha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/, 'payload.envSha256: a sha256 in hex')
      .optional(),
    justification,
  }),
  PR_GATEWAY: z.strictObject({
    branch: z
      .string()
      .regex(/^(?!-)(?!.*\.\.)(?!.*\/\/)[A-Za-z0-9._/-]{1,200}(?<![./])$/, 'payload.branch: a git branch name such as feature/x'),
    remote: z.string().min(1).max(4096).optional(),
    title: z.string().max(300).optional(),
    diff: z
      .string()
      .max(512 * 1024)
      .optional(),
    diffStat: z
      .string()
      .max(64 * 1024)
      .optional(),
    justification,
  }),
} as const satisfies Record<ApprovalCategory, z.ZodType>;

/** Parses `15m`, `30s`, `2h`, `900` into seconds; undefined when malformed. */
export function parseDuration(value: string): number | undefined {
  const m = /^\s*(\d{1,7})\s*([smhd]?)\s*$/.exec(value);
  if (!m) return undefined;
  const n = Number(m[1]);
  const mult = { '': 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as '' | 's' | 'm' | 'h' | 'd'];
  return n * mult > 0 ? n * mult : undefined;
}

/**
 * `ATELIER_APPROVAL_TTL`: the default TTL, then optional per-category ones, comma-separated:
 * `15m,SECRET_REQUEST=5m,PR_GATEWAY=1h`. Default 15 minutes for every category.
 */
export function parseTtls(value: string | undefined): Record<ApprovalCategory, number> {
  const out = Object.fromEntries(APPROVAL_CATEGORIES.map((c) => [c, 900])) as Record<ApprovalCategory, number>;
  if (!value) return out;
  for (const part of value.split(',').map((p) => p.trim())) {
    if (!part) continue;
    const [k, v] = part.includes('=') ? part.split('=', 2) : [undefined, part];
    const s = parseDuration(v ?? '');
    if (s === undefined || s > 7 * 86400)
      throw new Error(`ATELIER_APPROVAL_TTL: "${part}" is not a duration such as 15m, 30s or 2h (at most 7d)`);
    if (k === undefined) for (const c of APPROVAL_CATEGORIES) out[c] = s;
    else if ((APPROVAL_CATEGORIES as readonly string[]).includes(k)) out[k as ApprovalCategory] = s;
    else throw new Error(`ATELIER_APPROVAL_TTL: unknown category "${k}": use ${APPROVAL_CATEGORIES.join(', ')}`);
  }
  return out;
}
