import { z } from 'zod';
import { ExecRequest, WORKSHOP_STATUSES } from './schemas.js';

/**
 * The request and response bodies of the HTTP API that the route table (`routes.ts`) names.
 * Request schemas are what the server parses (the rooms re-export the ones they own); response
 * schemas describe what a client gets back, for the OpenAPI document and the SDK's types.
 */

// ---- shared vocabulary ----

/** The four roles, weakest first. A role includes every right of the roles before it. */
export const ROLES = ['viewer', 'member', 'maintainer', 'admin'] as const;

export const USER_NAME = /^[a-zA-Z0-9][a-zA-Z0-9._@-]{0,62}$/;
export const TENANT_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;

export const APPROVAL_STATUSES = ['PENDING', 'APPROVED', 'REJECTED', 'EXPIRED'] as const;
export const APPROVAL_CATEGORIES = ['ALLOWLIST_EXPANSION', 'SECRET_REQUEST', 'PR_GATEWAY', 'SHELL_COMMAND'] as const;

/** Longest a request may wait for a command to end before answering with the output so far. */
export const MAX_EXEC_WAIT_SECONDS = 60;

const noNul = (s: string): boolean => !s.includes('\0');
const time = z.string().describe('ISO 8601 date-time');

// ---- requests ----

/** A person's e-mail address: how a Slack click is matched to their account. */
const EMAIL = z
  .string()
  .trim()
  .max(254, 'an e-mail address has at most 254 characters')
  .regex(/^[^\s@\p{Cc}]+@[^\s@\p{Cc}]+\.[^\s@\p{Cc}]+$/u, 'give an e-mail address such as ada@example.com');

export const AddUserRequest = z.strictObject({
  name: z.string().regex(USER_NAME, 'use 1-63 letters, digits, dots, dashes, underscores or @, starting with a letter or digit'),
  role: z.enum(ROLES).default('member'),
  tenant: z.string().regex(TENANT_NAME, 'use lowercase letters, digits and dashes').optional(),
  /** The address their Slack account shows (Slack decisions are matched by it). */
  email: EMAIL.optional(),
});
export type AddUserRequest = z.infer<typeof AddUserRequest>;

export const SetUserEmailRequest = z.strictObject({
  /** null: no address (Slack decisions are then refused for them). */
  email: EMAIL.nullable(),
});
export type SetUserEmailRequest = z.infer<typeof SetUserEmailRequest>;

export const CreateTokenRequest = z.strictObject({
  name: z.string().min(1).max(100).optional(),
  role: z.enum(ROLES).optional(),
  /** null: never expires. Absent: 30 days. */
  expiresInSeconds: z
    .number()
    .int()
    .min(60)
    .max(10 * 365 * 86400)
    .nullable()
    .optional(),
  workshopId: z.string().min(1).optional(),
  /** For another user of the tenant (a service account): admins only. */
  user: z.string().min(1).max(200).optional(),
  /** Another tenant the caller belongs to (default: the caller's current one). */
  tenant: z.string().regex(TENANT_NAME, 'use lowercase letters, digits and dashes').optional(),
});
export type CreateTokenRequest = z.infer<typeof CreateTokenRequest>;

export const CreateApprovalRequest = z.strictObject({
  category: z.enum(APPROVAL_CATEGORIES, { message: `category must be one of ${APPROVAL_CATEGORIES.join(', ')}` }),
  payload: z.record(z.string(), z.unknown(), { message: 'payload must be an object with a justification' }),
  /** Shorter than the category's TTL only (a request never outlives what the admin configured). */
  ttlSeconds: z.number().int().min(1).max(86400).optional(),
});
export type CreateApprovalRequest = z.infer<typeof CreateApprovalRequest>;

export const DecideApprovalRequest = z.strictObject({
  decision: z.enum(['APPROVE', 'REJECT'], { message: 'decision must be APPROVE or REJECT' }),
  reason: z.string().trim().min(1, 'reason is required: say why').max(4000).refine(noNul, 'may not contain NUL bytes'),
});
export type DecideApprovalRequest = z.infer<typeof DecideApprovalRequest>;

const waitSeconds = z
  .number()
  .min(0)
  .max(MAX_EXEC_WAIT_SECONDS, `waitSeconds is at most ${MAX_EXEC_WAIT_SECONDS}: ask again with GET /v1/execs/ID`);

/** `POST /v1/workshops/:id/execs`: an exec request, and how long to wait for it to end before answering. */
export const StartExecRequest = ExecRequest.extend({ waitSeconds: waitSeconds.optional() }).strict();
export type StartExecRequest = z.infer<typeof StartExecRequest>;

export const SetSecretRequest = z.strictObject({ value: z.string({ message: 'value must be a string (the CLI reads it from stdin)' }) });
export type SetSecretRequest = z.infer<typeof SetSecretRequest>;

/** A credential binding as atelier.yaml and the tenant's policy write it (checked by the server). */
export const CredentialBindingEntry = z.strictObject({
  host: z.string().min(1).max(300),
  header: z.string().min(1).max(100),
  value: z.string().min(1).max(4096),
});

/**
 * A tenant's credential policy: `credentials` every workshop of the tenant gets (as atelier.yaml's
 * `egress.credentials`), `forbid` the hosts no project binding nor SECRET_REQUEST may bind.
 */
export const CredentialPolicy = z.strictObject({
  credentials: z.array(CredentialBindingEntry).max(50).default([]),
  forbid: z.array(z.string().min(1).max(300)).max(200).default([]),
});
export type CredentialPolicy = z.infer<typeof CredentialPolicy>;

export const CredentialPolicyView = CredentialPolicy.extend({
  tenant: z.string(),
  setBy: z.string().nullable(),
  setAt: z.string().nullable(),
});
export type CredentialPolicyView = z.infer<typeof CredentialPolicyView>;

export const AddProjectRequest = z.strictObject({ path: z.string().min(1).max(4096), name: z.string().min(1).max(63).optional() });
export type AddProjectRequest = z.infer<typeof AddProjectRequest>;

export const PlanActionRequest = z.strictObject({
  project: z.string().min(1).max(200),
  action_id: z.string().min(1).max(100).optional(),
  parameters: z.record(z.string(), z.unknown()).default({}),
});
export type PlanActionRequest = z.input<typeof PlanActionRequest>;

export const ApplyPlanRequest = z.strictObject({ plan_id: z.string().min(1).max(100), fingerprint: z.string().min(1).max(200) });
export type ApplyPlanRequest = z.infer<typeof ApplyPlanRequest>;

export const RollbackRequest = z.strictObject({ execution_id: z.string().min(1).max(100) });
export type RollbackRequest = z.infer<typeof RollbackRequest>;

export const ConsoleRequest = z.strictObject({
  argv: z
    .array(
      z
        .string()
        .min(1)
        .max(256)
        .regex(/^[^\0\r\n]*$/, 'no NUL or line breaks'),
    )
    .min(1)
    .max(16),
  output: z.enum(['table', 'json', 'yaml']).default('table'),
});
export type ConsoleRequest = z.input<typeof ConsoleRequest>;

// Parsed by the terminals' routes (src/server/routes/terminals.ts).
export const AddSshKeyRequest = z.strictObject({
  publicKey: z
    .string()
    .min(1)
    .max(16 << 10),
});
export type AddSshKeyRequest = z.infer<typeof AddSshKeyRequest>;

export const StartSessionRequest = z.strictObject({
  name: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,39}$/)
    .optional(),
  command: z
    .array(z.string().max(64 << 10))
    .min(1)
    .max(4096)
    .optional(),
  cols: z.number().int().min(1).max(1000).optional(),
  rows: z.number().int().min(1).max(1000).optional(),
  resume: z.boolean().optional(),
});
export type StartSessionRequest = z.infer<typeof StartSessionRequest>;

// ---- responses ----

/**
 * One entry of a workshop's live egress policy and where it came from: the server's own
 * configuration (`platform`), the project's atelier.yaml (`project`), or an approved
 * ALLOWLIST_EXPANSION request (`approval`: the request, who decided it, when).
 */
const EgressPolicyEntry = z.object({
  rule: z
    .enum(['allow', 'deny', 'allowRange'])
    .describe('allow: a host (or host:port); deny: refused whatever allows it; allowRange: a private range'),
  entry: z.string(),
  origin: z.enum(['platform', 'project', 'approval']),
  approval: z
    .object({
      requestId: z.string().nullable(),
      decidedBy: z.string().nullable(),
      decidedAt: time.nullable(),
    })
    .nullable()
    .describe('for origin approval: the request that added the entry (null fields: not recorded, approved before they were kept)'),
});

/** The body of PUT /v1/workshops/:id/budget: USD, or null for no budget. */
export const SetBudgetRequest = z.strictObject({
  budgetUsd: z.number().nonnegative().max(1_000_000).nullable().describe('USD; null: no budget'),
});
export type SetBudgetRequest = z.infer<typeof SetBudgetRequest>;

export const LlmSpendSchema = z.object({
  spentUsd: z.number(),
  requests: z.number(),
  requestsWithoutUsage: z.number().describe('requests whose answer reported no usage: counted, priced at 0'),
  inputTokens: z.number(),
  outputTokens: z.number(),
});

export const SpendReportSchema = z.object({
  tenant: LlmSpendSchema,
  users: z.array(LlmSpendSchema.extend({ userId: z.string().nullable() })),
});

export const WorkshopSchema = z.object({
  id: z.string(),
  name: z.string(),
  status: z.enum(WORKSHOP_STATUSES),
  statusReason: z.string().nullable(),
  repo: z.string(),
  ownerId: z.string().nullable().describe('the id of the user who owns it: they, and maintainers and admins of its tenant, may operate it'),
  limits: z.object({ cpus: z.number(), memoryBytes: z.number(), pids: z.number() }),
  budgetUsd: z.number().nullable(),
  llm: LlmSpendSchema,
  forwardPorts: z.array(z.number()),
  egress: z.object({
    /** The project's own entries (atelier.yaml). */
    allow: z.array(z.string()),
    deny: z.array(z.string()),
    askHoldSeconds: z.number(),
    policy: z.array(EgressPolicyEntry).describe('the live policy, every entry with its origin'),
  }),
  warnings: z.array(z.string()),
  node: z.string().describe('the node that runs it (`atelier nodes list`)'),
  placement: z.string().nullable().describe('why it runs on that node'),
  createdAt: time,
  updatedAt: time,
});

/**
 * What a workshop's processes use now beside its limits (`GET /v1/workshops/:id/usage`), read
 * from its cgroups on the node that runs it. A figure the node cannot read is null, `note` says why.
 */
export const WorkshopUsageSchema = z.object({
  id: z.string(),
  status: z.enum(WORKSHOP_STATUSES),
  at: time.describe('when the figures were read (ms precision: two readings give a CPU rate)'),
  limits: z.object({ cpus: z.number(), memoryBytes: z.number(), pids: z.number() }),
  memoryBytes: z
    .number()
    .nullable()
    .describe('memory charged to it now, page cache included (which the kernel reclaims before the limit bites)'),
  memoryPeakBytes: z.number().nullable().describe('the most memory it was ever charged'),
  cpuUsec: z.number().nullable().describe('CPU time of all its processes since it started, in microseconds'),
  pids: z.number().nullable().describe('processes in it now (its simulators included)'),
  note: z.string().nullable().describe('why a figure is null'),
});
export type WorkshopUsage = z.infer<typeof WorkshopUsageSchema>;

/** A node of the installation (`atelier nodes list`). */
export const NodeView = z.object({
  id: z.string(),
  name: z.string(),
  address: z.string(),
  version: z.string(),
  protocol: z.number().int(),
  schemaVersion: z.string(),
  memoryTotalBytes: z.number(),
  memoryFreeBytes: z.number(),
  workshops: z.number().int(),
  draining: z.boolean(),
  state: z.enum(['ready', 'draining', 'unreachable']),
  joinedAt: time,
  heartbeatAt: time,
  /** Its ATELIER_NODE_HEARTBEAT and ATELIER_NODE_DEAD_AFTER (null: a node of an older release, on the defaults). */
  heartbeatMs: z.number().int().nullable(),
  deadAfterMs: z.number().int().nullable(),
  /** The node that answered. */
  self: z.boolean(),
});
export type NodeView = z.infer<typeof NodeView>;

/** What `atelier nodes remove` did: the dead node taken out, and its workshops (they stay, NodeUnreachable). */
export const NodeRemoval = z.object({
  id: z.string(),
  name: z.string(),
  address: z.string(),
  lastHeartbeatAt: time,
  removedAt: time,
  removedBy: z.string(),
  workshops: z.array(z.object({ id: z.string(), name: z.string(), status: z.string() })),
});
export type NodeRemoval = z.infer<typeof NodeRemoval>;

export const SimulatorView = z.object({
  name: z.string(),
  type: z.string(),
  version: z.string().nullable(),
  status: z.string(),
  statusReason: z.string().nullable(),
  endpoint: z.object({ host: z.string(), port: z.number() }).nullable(),
  env: z.record(z.string(), z.string()),
  restarts: z.number(),
  memoryBytes: z.number().nullable(),
  processes: z.number().nullable(),
  createdAt: time,
});
export type SimulatorView = z.infer<typeof SimulatorView>;

export const ExecResultSchema = z.object({
  exitCode: z.number(),
  signal: z.string().nullable(),
  stdout: z.string(),
  stderr: z.string(),
  truncated: z.boolean(),
});

export const ExecView = z.object({
  id: z.string(),
  workshopId: z.string(),
  command: z.array(z.string()),
  status: z.enum(['Running', 'Exited', 'Failed', 'Lost']),
  exitCode: z.number().nullable(),
  signal: z.string().nullable(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
  startedAt: time,
  endedAt: time.nullable(),
  chunks: z.array(z.object({ stream: z.enum(['stdout', 'stderr']), offset: z.number(), data: z.string() })),
  nextOffset: z.number(),
  truncated: z.boolean(),
});
export type ExecView = z.infer<typeof ExecView>;

export const EgressRecord = z.object({
  id: z.number(),
  at: time,
  protocol: z.string(),
  host: z.string(),
  port: z.number(),
  allowed: z.boolean(),
  outcome: z.string(),
  reason: z.string(),
  message: z.string(),
  entry: z.string().nullable(),
  address: z.string().nullable(),
  approvalId: z.string().nullable(),
});
export type EgressRecord = z.infer<typeof EgressRecord>;

export const GitDiff = z.object({ diff: z.string(), untracked: z.array(z.string()), truncated: z.boolean() });
export const FileWritten = z.object({ path: z.string(), bytes: z.number() });

export const ApprovalRequestSchema = z.object({
  id: z.string(),
  workshopId: z.string(),
  category: z.enum(APPROVAL_CATEGORIES),
  requestedBy: z.string(),
  payload: z.record(z.string(), z.unknown()),
  status: z.enum(APPROVAL_STATUSES),
  decidedBy: z.string().nullable(),
  decisionReason: z.string().nullable(),
  createdAt: time,
  expiresAt: time,
  decidedAt: time.nullable(),
  effect: z.object({ appliedAt: time.nullable(), error: z.string().nullable() }),
});
export type ApprovalRequestView = z.infer<typeof ApprovalRequestSchema>;

/** One row of a request's audit: what happened, who did it, through which channel, from which address, when. */
export const ApprovalAuditEntry = z.object({
  seq: z.number(),
  at: time,
  event: z.enum(['CREATED', 'APPROVED', 'REJECTED', 'EXPIRED']),
  subject: z.string().describe('user/NAME, agent/WORKSHOP or system'),
  channel: z.enum(['cli', 'slack', 'dashboard', 'api', 'system']),
  ip: z.string().nullable().describe("the caller's address as the server saw it (for Slack, Slack's; null for the system's expiries)"),
});
export type ApprovalAuditEntry = z.infer<typeof ApprovalAuditEntry>;

export const AuditVerification = z.object({
  ok: z.boolean(),
  rows: z.number(),
  problems: z.array(z.object({ seq: z.number().nullable(), requestId: z.string().nullable(), problem: z.string() })),
});
export type AuditVerification = z.infer<typeof AuditVerification>;

export const Whoami = z.object({
  user: z.object({ id: z.string(), name: z.string() }),
  tenant: z.object({ id: z.string(), name: z.string() }),
  role: z.enum(ROLES),
  kind: z.enum(['user', 'agent']),
  workshopId: z.string().nullable(),
  via: z.enum(['api-token', 'oidc']),
  tokenId: z.string().nullable(),
  expiresAt: time.nullable(),
  tenants: z.array(z.object({ name: z.string(), role: z.string() })),
});
export type Whoami = z.infer<typeof Whoami>;

export const AuthConfig = z.object({
  kind: z.enum(['embedded', 'external']),
  issuer: z.string(),
  clientId: z.string(),
  scope: z.string(),
  deviceAuthorizationEndpoint: z.string(),
  tokenEndpoint: z.string(),
  revocationEndpoint: z.string(),
  idTokenAlg: z.string().optional(),
});
export type AuthConfig = z.infer<typeof AuthConfig>;

export const UserView = z.object({
  id: z.string(),
  name: z.string(),
  issuer: z.string(),
  email: z.string().nullable(),
  disabled: z.boolean(),
  mustChangePassword: z.boolean(),
  memberships: z.array(z.object({ tenant: z.string(), role: z.enum(ROLES) })),
  createdAt: time,
});
export type UserView = z.infer<typeof UserView>;

export const TokenView = z.object({
  id: z.string(),
  name: z.string(),
  user: z.string(),
  role: z.enum(ROLES),
  tenant: z.string(),
  workshopId: z.string().nullable(),
  expiresAt: time.nullable(),
  createdAt: time,
  lastUsedAt: time.nullable(),
  revoked: z.boolean(),
});
export type TokenView = z.infer<typeof TokenView>;

export const SecretInfo = z.object({ name: z.string(), setBy: z.string(), setAt: time });
export type SecretInfo = z.infer<typeof SecretInfo>;

export const ProjectView = z.object({ id: z.string(), name: z.string(), path: z.string(), tenantId: z.string(), createdAt: time });
export type ProjectView = z.infer<typeof ProjectView>;

const ACTION_CLASS = z.enum(['A', 'B', 'C']);
const preconditions = z.array(z.object({ name: z.string(), ok: z.boolean(), reason: z.string() }));
const effects = z.array(
  z.discriminatedUnion('kind', [
    z.object({
      kind: z.literal('file'),
      path: z.string(),
      key: z.string(),
      beforeSha256: z.string().nullable(),
      afterSha256: z.string(),
      diff: z.string(),
    }),
    z.object({ kind: z.literal('command'), argv: z.array(z.string()), copy: z.string(), network: z.boolean(), runsHere: z.literal(false) }),
    z.object({
      kind: z.literal('service'),
      stack: z.string(),
      operation: z.enum(['start', 'stop', 'restart', 'recreate']),
      argv: z.array(z.string()),
      network: z.boolean(),
    }),
  ]),
);
const observedEffects = z.array(
  z.discriminatedUnion('kind', [
    z.object({ kind: z.literal('file'), path: z.string(), beforeSha256: z.string().nullable(), afterSha256: z.string() }),
    z.object({ kind: z.literal('service'), stack: z.string(), operation: z.string(), pid: z.number().optional(), detail: z.string() }),
  ]),
);
const verification = z.object({ ok: z.boolean(), checks: z.array(z.object({ name: z.string(), ok: z.boolean(), detail: z.string() })) });

export const CatalogItemSchema = z.object({
  id: z.string(),
  class: ACTION_CLASS,
  title: z.string(),
  parameters: z.array(z.object({ name: z.string(), type: z.string(), required: z.boolean(), description: z.string() })),
  preconditions,
  effectKinds: z.array(z.enum(['file', 'command', 'service'])),
  inverse: z.string(),
  applicable: z.boolean(),
});
export type CatalogItemView = z.infer<typeof CatalogItemSchema>;

export const ActionPlanSchema = z.object({
  planId: z.string(),
  actionId: z.string(),
  class: ACTION_CLASS,
  project: z.string(),
  parameters: z.record(z.string(), z.unknown()),
  fingerprint: z.string(),
  createdAt: time,
  expiresAt: time,
  summary: z.string(),
  preconditions,
  effects,
  inverse: z.string(),
  applyCommand: z.string().nullable(),
  executionId: z.string().nullable(),
});
export type ActionPlanView = z.infer<typeof ActionPlanSchema>;

export const ActionExecutionSchema = z.object({
  executionId: z.string(),
  planId: z.string(),
  actionId: z.string(),
  project: z.string(),
  status: z.enum(['applied', 'failed', 'rolled_back', 'rollback_failed']),
  effects: observedEffects,
  verification,
  rollbackOffered: z.boolean(),
  message: z.string(),
});
export type ActionExecutionView = z.infer<typeof ActionExecutionSchema>;

export const ExecutionSummarySchema = z.object({
  executionId: z.string(),
  planId: z.string(),
  actionId: z.string(),
  class: z.string(),
  status: z.string(),
  startedAt: time,
  endedAt: time.nullable(),
  verification: z.looseObject({}).nullable(),
  inverse: z.looseObject({}).nullable(),
  rollbackOffered: z.boolean(),
});

export const ActionJournal = z.object({
  project: z.string(),
  entries: z.array(z.looseObject({ event: z.string() })),
  executions: z.array(ExecutionSummarySchema),
  tornLastLine: z.boolean(),
  unreadableLines: z.array(z.number()),
});
export type ActionJournalView = z.infer<typeof ActionJournal>;

export const SshKeyView = z.object({ fingerprint: z.string(), publicKey: z.string() });
export type SshKeyView = z.infer<typeof SshKeyView>;
export const WorkshopSshInfo = z.object({ workshop: z.string(), hostAlias: z.string(), hostKey: z.string(), port: z.number() });
export type WorkshopSshInfo = z.infer<typeof WorkshopSshInfo>;

export const SessionInfo = z.object({
  name: z.string(),
  command: z.array(z.string()),
  startedAt: time,
  attached: z.number(),
  exitCode: z.number().nullable(),
  running: z.boolean(),
});
export type SessionInfo = z.infer<typeof SessionInfo>;

export const TunnelOutcomeSchema = z.object({
  id: z.string(),
  workshop: z.string(),
  state: z.enum(['open', 'closed', 'reset', 'cut', 'unknown']),
  code: z.string().optional(),
  message: z.string(),
});

export const ConsoleResult = z.object({
  argv: z.array(z.string()),
  exitCode: z.number().nullable(),
  stdout: z.string(),
  stderr: z.string(),
  truncated: z.boolean(),
  timedOut: z.boolean(),
});
export const ConsoleCatalog = z.object({
  allowed: z.array(z.object({ command: z.string(), arguments: z.array(z.string()), flags: z.array(z.string()) })),
});
export const CsrfToken = z.object({ token: z.string(), header: z.string(), cookie: z.string(), expiresAt: time });

export const RouteCatalog = z.object({
  items: z.array(z.object({ method: z.string(), url: z.string(), access: z.unknown() })),
});

export const Health = z.object({ status: z.enum(['ok', 'unavailable']), version: z.string(), code: z.string().optional() });

/** `GET /v1/admin/status`: what `atelier server status` shows of a running server (server admins). */
export const ServerStatus = z.object({
  version: z.string(),
  pid: z.number().int(),
  startedAt: time,
  uptimeSeconds: z.number().int(),
  /** The URL the server listens at, and the one browsers and CLIs are given (the same unless ATELIER_PUBLIC_URL). */
  url: z.string(),
  publicUrl: z.string(),
  dataDir: z.string(),
  database: z.object({
    kind: z.enum(['embedded', 'external']),
    ok: z.boolean(),
    version: z.string().nullable(),
    sizeBytes: z.number().nullable(),
    error: z.string().optional(),
  }),
  /** The data dir's filesystem. */
  disk: z.object({ totalBytes: z.number(), usedBytes: z.number(), freeBytes: z.number() }),
  workshops: z.record(z.string(), z.number().int()).describe('workshops by status, every tenant'),
  simulators: z.object({ running: z.number().int(), byType: z.record(z.string(), z.number().int()) }),
  /** The server's last warnings and errors (its log, newest last; kept in memory since the start). */
  recentErrors: z.array(z.object({ time, level: z.enum(['warn', 'error', 'fatal']), message: z.string() })),
});
export type ServerStatus = z.infer<typeof ServerStatus>;

/** `{ items: [...] }`: how every list is answered. */
export function itemsOf<T extends z.ZodType>(item: T): z.ZodObject<{ items: z.ZodArray<T> }> {
  return z.object({ items: z.array(item) });
}
