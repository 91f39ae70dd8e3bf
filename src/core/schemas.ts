import { z } from 'zod';
import { isWorkshopId } from './ids.js';

/** Workshop lifecycle states, as shown by `atelier workshops status`. */
// NodeUnreachable is never stored: it is shown while the workshop's node misses its heartbeats (docs/replicas.md).
export const WORKSHOP_STATUSES = ['Building', 'Running', 'Suspended', 'Dead', 'Failed', 'Deleting', 'NodeUnreachable'] as const;
export type WorkshopStatus = (typeof WORKSHOP_STATUSES)[number];

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'environment variable names are letters, digits and _');

/**
 * One simulator, as `atelier.yaml` declares it (`simulators:`), `workshops create --simulator`
 * gives it, or an agent asks for it live. `name` alone names the type (the specification's
 * shape: `- name: postgres`); with `type`, `name` is its own label (`orders.atelier.internal`).
 */
/** The kinds of value a simulator option takes. */
export type SimulatorOptionType = 'string' | 'boolean';

/**
 * The `options` each simulator type takes, with their kinds: the catalog checks a request against
 * it, and the CLI reads `--option key=value` by it (`superuser=true` is the boolean true, not the
 * text). A type that is not listed takes no options.
 */
export const SIMULATOR_OPTIONS: Readonly<Record<string, Readonly<Record<string, SimulatorOptionType>>>> = {
  postgres: { database: 'string', user: 'string', password: 'string', superuser: 'boolean' },
};

export const SimulatorRequest = z
  .object({
    type: z.string().min(1).max(40).optional(),
    name: z.string().min(1).max(63).optional(),
    // YAML reads `version: 15` and `PORT: 5432` as numbers: taken as the text written.
    version: z.union([z.string().min(1).max(40), z.number().transform(String)]).optional(),
    env: z
      .record(z.string().max(128), z.union([z.string().max(4096), z.number().transform(String), z.boolean().transform(String)]))
      .optional(),
    options: z.record(z.string().max(128), z.unknown()).optional(),
    services: z.array(z.string().min(1).max(40)).max(20).optional(),
    stubsDirectory: z.string().min(1).max(4096).optional(),
  })
  .strict()
  .refine((s) => s.type !== undefined || s.name !== undefined, 'give type (and optionally name)');
export type SimulatorRequest = z.infer<typeof SimulatorRequest>;

export const CreateWorkshopRequest = z
  .object({
    repo: z.string().min(1, 'repo is required: a local path, file://, https://, ssh:// or git@ URL').max(4096),
    name: z
      .string()
      .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'name: lowercase letters, digits and -, at most 63, starting with a letter or digit')
      // Names address workshops wherever an id does: one shaped like an id would be taken for one.
      .refine(
        (n) => !isWorkshopId(n),
        'name: ws- followed by 8 letters or digits is how workshop ids look; pick a name that cannot be taken for an id',
      )
      .optional(),
    devcontainer: z.string().min(1).max(4096).optional(),
    budgetUsd: z.number().nonnegative().max(1_000_000).optional(),
    cpus: z.number().min(0.05, 'cpus must be at least 0.05').max(256).optional(),
    memory: z.string().min(1).max(32).optional(),
    pids: z.number().int().min(16, 'pids must be at least 16').max(1_000_000).optional(),
    /** Disk quota covering everything the workshop writes (`10g`); the server's default when absent. */
    disk: z.string().min(1).max(32).optional(),
    simulators: z.array(SimulatorRequest).max(16).optional(),
    /** The node to run it on (`atelier nodes list`); the least loaded accepting node when absent. */
    node: z
      .string()
      .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'node: a node name as `atelier nodes list` shows it')
      .optional(),
  })
  .strict();
export type CreateWorkshopRequest = z.infer<typeof CreateWorkshopRequest>;

// The kernel refuses any single argument or variable over 128 KiB (MAX_ARG_STRLEN) and NUL bytes.
const argString = z
  .string()
  .max(128 * 1024 - 1, 'each argument and variable is limited to 128 KiB by the kernel')
  .refine((v) => !v.includes('\0'), 'may not contain NUL bytes');

export const ExecRequest = z
  .object({
    command: z.array(argString).min(1, 'command must have at least one element').max(4096),
    cwd: argString.optional(),
    env: z.record(envName, argString).optional(),
    stdin: z
      .string()
      .max(64 << 20)
      .optional(),
    timeoutSeconds: z.number().positive().max(86400).optional(),
  })
  .strict();
export type ExecRequest = z.infer<typeof ExecRequest>;

export interface WorkshopLimits {
  cpus: number;
  memoryBytes: number;
  pids: number;
}

/** A workshop's disk against its quota (its own filesystem; see docs, "Disk quotas"). */
export interface WorkshopDisk {
  /** False when nothing limits what the workshop writes (rootless server, quotas off, an older workshop): `note` says why. */
  enforced: boolean;
  /** Usable bytes of the workshop's filesystem; null when not enforced. */
  quotaBytes: number | null;
  usedBytes: number | null;
  note: string | null;
}

/**
 * One entry of a workshop's live egress policy: a rule and where it came from, the server's
 * configuration (`platform`), the project's atelier.yaml (`project`) or an approved
 * ALLOWLIST_EXPANSION request (`approval`, with the request, who decided it and when).
 */
export interface WorkshopEgressEntry {
  rule: 'allow' | 'deny' | 'allowRange';
  entry: string;
  origin: 'platform' | 'project' | 'approval';
  /** Null unless `origin` is `approval`; its fields are null when not recorded (approved before they were kept). */
  approval: { requestId: string | null; decidedBy: string | null; decidedAt: string | null } | null;
}

/** Model requests through the LLM gateway and their price (USD, from the admin's price table). */
export interface LlmSpend {
  spentUsd: number;
  requests: number;
  /** Requests whose answer reported no usage: counted, priced at 0. */
  requestsWithoutUsage: number;
  inputTokens: number;
  outputTokens: number;
}

/** The stable JSON shape of a workshop (`--output json`, REST). */
export interface Workshop {
  id: string;
  name: string;
  status: WorkshopStatus;
  statusReason: string | null;
  repo: string;
  /** The user who owns it (null: made by the server itself); they and the tenant's maintainers may operate it. */
  ownerId: string | null;
  limits: WorkshopLimits;
  /** Shown by `get` and `list` (status), not in other answers. */
  disk?: WorkshopDisk;
  budgetUsd: number | null;
  /** What it spent on models through the LLM gateway (docs/egress.md). */
  llm: LlmSpend;
  forwardPorts: number[];
  /**
   * The project's egress policy (atelier.yaml: `allow`, `deny`, `askHoldSeconds`), and `policy`:
   * the live policy its proxy applies, every entry with where it came from.
   */
  egress: { allow: string[]; deny: string[]; askHoldSeconds: number; policy: WorkshopEgressEntry[] };
  warnings: string[];
  /** The node that runs it (its name), and why it was placed there. */
  node: string;
  placement: string | null;
  createdAt: string;
  updatedAt: string;
}

/**
 * Exec streams newline-delimited JSON frames (`application/x-ndjson`):
 * `{"stream":"stdout"|"stderr","data":"<base64>"}` then one `{"exitCode":N,"signal":S|null}`.
 * An error after the stream started is `{"error":{code,message}}`.
 */
export type ExecFrame =
  | { stream: 'stdout' | 'stderr'; data: string }
  | { exitCode: number; signal: string | null }
  | { error: { code: string; message: string } }
  /** Something waits for a human before (or while) the command runs: `atelier approve <id>`. */
  | { approval: { id: string; waiting: true; category?: string; what?: string } };

/** The steps of a workshop's creation, in the order they start (clone and sandbox run side by side). */
export const CREATE_PHASES = ['clone', 'sandbox', 'simulators', 'devcontainer'] as const;
export type CreatePhase = (typeof CREATE_PHASES)[number];

/**
 * One step of a workshop's creation as it happens: `started`, then `done` or `failed` with its
 * milliseconds. `step` names the part of it (a devcontainer command's key, the simulators' names).
 */
export interface CreatePhaseEvent {
  phase: CreatePhase;
  step?: string;
  state: 'started' | 'done' | 'failed';
  ms?: number;
}

/**
 * `POST /v1/workshops` with `Accept: application/x-ndjson` streams these frames: the phases as
 * they start and end, then the workshop (Running or Failed) or, for an error once the stream
 * began, `{"error":{code,message}}`. A request refused before anything exists is a plain 4xx.
 */
export type CreateWorkshopFrame = CreatePhaseEvent | { workshop: Workshop } | { error: { code: string; message: string } };

/** Buffered exec result (`Accept: application/json`). */
export interface ExecResult {
  exitCode: number;
  signal: string | null;
  stdout: string;
  stderr: string;
  truncated: boolean;
}

/** First line of a zod error, naming the field that is wrong. */
export function describeZodError(error: z.ZodError): { message: string; field: string } {
  const issue = error.issues[0];
  const field = issue && issue.path.length > 0 ? issue.path.join('.') : '(body)';
  return { message: `${field}: ${issue?.message ?? 'invalid'}`, field };
}
