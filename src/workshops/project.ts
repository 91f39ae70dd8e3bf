import { lstatSync, readFileSync, realpathSync } from 'node:fs';
import { join, sep } from 'node:path';
import { parse } from 'yaml';
import { z } from 'zod';
import { AtelierError, SimulatorRequest } from '../core/index.js';
import { createEgressPolicy, parseBinding, type CredentialBinding } from '../egress/index.js';
import { precheckSimulators } from './simulators.js';

/**
 * The project's own settings, `atelier.yaml` at the repository root. This reads its `egress:`,
 * `simulators:` and `approvals:` blocks; `agent:` is read by `atelier run` (terminals) and
 * `slots:` by the slot actions. Any other top-level key is refused (see TOP_LEVEL_KEYS).
 *
 *   egress:
 *     allow: [api.stripe.com, "*.example.com", "api.example.com:8443"]
 *     deny: [uploads.example.com]
 *     askHoldSeconds: 30        # how long a request to an unknown host waits for a human (0: answer at once)
 *     credentials:              # added on the way out by the egress proxy; the workshop never holds the value
 *       - host: api.github.com  # one host (optionally :port, default 443), allowed by the policy
 *         header: Authorization
 *         value: "Bearer ${secret:GITHUB_TOKEN}"   # exactly one secret of the tenant
 */
const Egress = z.strictObject({
  allow: z.array(z.string().min(1).max(300)).max(1000).default([]),
  deny: z.array(z.string().min(1).max(300)).max(1000).default([]),
  askHoldSeconds: z.number().int().min(0).max(600).default(30),
  credentials: z
    .array(z.strictObject({ host: z.string().min(1).max(300), header: z.string().min(1).max(100), value: z.string().min(1).max(2000) }))
    .max(50)
    .default([]),
});

export type ProjectEgress = z.infer<typeof Egress>;

/**
 *   approvals:
 *     commands: ["git push*", "npm publish*", "rm -rf *"]   # exec commands that wait for a human (`*`: anything)
 */
const Approvals = z.strictObject({
  commands: z.array(z.string().trim().min(1).max(500)).max(200).default([]),
});

export interface ProjectSettings {
  path: string | null;
  egress: ProjectEgress;
  /** The `simulators:` block (checked against the catalog when they start). */
  simulators: SimulatorRequest[];
  /** Command patterns whose API execs wait for an approval (SHELL_COMMAND). */
  approvalCommands: string[];
}

/**
 *   simulators:                 # started with the workshop, reachable as <name>.atelier.internal
 *     - redis                   # short for `- name: redis`
 *     - name: postgres
 *       version: "15"
 *       env: { POSTGRES_DB: testdb }
 *     - type: redis
 *       name: cache             # cache.atelier.internal
 */
const Simulators = z
  .array(
    // `- postgres` is short for `- name: postgres`, as users write it first.
    z.preprocess((v) => (typeof v === 'string' ? { name: v } : v), SimulatorRequest),
  )
  .max(16)
  .default([]);

/** `atelier.yaml: simulators.0.version: …`: the file, the key's whole path, what is wrong with it. */
function invalidBlock(block: string, error: z.ZodError): AtelierError {
  const issue = error.issues[0];
  const field = [block, ...(issue?.path ?? []).map(String)].join('.');
  return new AtelierError('INVALID_ARGUMENT', `${FILE}: ${field}: ${issue?.message ?? 'invalid'}`, { field });
}

const FILE = 'atelier.yaml';

/**
 * Every top-level key some part of Atelier reads. A key it does not know would be ignored, so a
 * typo (`simulatorz:`) would silently start a workshop without what the user asked for.
 */
export const TOP_LEVEL_KEYS = ['agent', 'approvals', 'egress', 'simulators', 'slots'] as const;

/** Edits (insert, delete, replace, swap of two neighbours) from one word to another. */
function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, d[i - 2]![j - 2]! + 1);
      d[i]![j] = best;
    }
  }
  return d[a.length]![b.length]!;
}

function refuseUnknownKeys(doc: Record<string, unknown>): void {
  for (const key of Object.keys(doc)) {
    if ((TOP_LEVEL_KEYS as readonly string[]).includes(key)) continue;
    const lower = key.toLowerCase();
    const [closest] = [...TOP_LEVEL_KEYS].sort((a, b) => distance(lower, a) - distance(lower, b));
    // Close enough to be a typo of it: at most a third of the key's letters differ.
    const hint =
      closest !== undefined && distance(lower, closest) <= Math.max(1, Math.floor(closest.length / 3)) ? ` (did you mean ${closest}?)` : '';
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `${FILE}: unknown key ${JSON.stringify(key)}${hint}: rename or remove it (the keys Atelier reads are ${TOP_LEVEL_KEYS.join(', ')})`,
      { field: key, known: [...TOP_LEVEL_KEYS] },
    );
  }
}

/** Reads atelier.yaml from the cloned workspace; it must resolve inside the workspace. */
export function readProjectSettings(workspace: string): ProjectSettings {
  const none: ProjectSettings = { path: null, egress: Egress.parse({}), simulators: [], approvalCommands: [] };
  const full = join(workspace, FILE);
  try {
    lstatSync(full);
  } catch {
    return none;
  }
  let real: string;
  try {
    real = realpathSync(full);
  } catch (err) {
    // A dangling or looping link: refused, not skipped (its deny entries would be lost silently).
    throw new AtelierError('INVALID_ARGUMENT', `${FILE} cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`, {
      field: FILE,
    });
  }
  if (!real.startsWith(realpathSync(workspace) + sep))
    throw new AtelierError('INVALID_ARGUMENT', `${FILE} points outside the repository`, { field: FILE });
  if (lstatSync(real).size > 1 << 20) throw new AtelierError('INVALID_ARGUMENT', `${FILE} is larger than 1 MiB`, { field: FILE });
  let doc: unknown;
  try {
    doc = parse(readFileSync(real, 'utf8'));
  } catch (err) {
    throw new AtelierError('INVALID_ARGUMENT', `${FILE} is not valid YAML: ${(err as Error).message.split('\n')[0]}`, { field: FILE });
  }
  if (doc === null || doc === undefined) return none;
  if (typeof doc !== 'object' || Array.isArray(doc))
    throw new AtelierError('INVALID_ARGUMENT', `${FILE} must be a mapping`, { field: FILE });
  refuseUnknownKeys(doc as Record<string, unknown>);
  const r = Egress.safeParse((doc as Record<string, unknown>).egress ?? {});
  if (!r.success) throw invalidBlock('egress', r.error);
  const sims = Simulators.safeParse((doc as Record<string, unknown>).simulators ?? []);
  if (!sims.success) throw invalidBlock('simulators', sims.error);
  // An env name, option or version the simulator cannot take fails the workshop now, with the key's
  // path, rather than leaving it running without the simulator asked for.
  precheckSimulators(sims.data, 'simulators', `${FILE}: `);
  // Refused entries (`*`, `*.com`, malformed names) are reported now, naming the entry.
  try {
    createEgressPolicy({ allow: r.data.allow, deny: r.data.deny });
  } catch (err) {
    throw new AtelierError('INVALID_ARGUMENT', `${FILE}: ${(err as Error).message}`, { field: 'egress' });
  }
  const bound = new Set<string>();
  for (const [i, entry] of r.data.credentials.entries()) {
    const where = `egress.credentials.${i}`;
    let b: CredentialBinding;
    try {
      b = parseBinding(entry, where);
    } catch (err) {
      throw new AtelierError('INVALID_ARGUMENT', `${FILE}: ${(err as Error).message}`, { field: where });
    }
    if (bound.has(`${b.host}:${b.port}`))
      throw new AtelierError('INVALID_ARGUMENT', `${FILE}: ${where}.host: ${b.host}:${b.port} is bound twice; keep one entry per host`, {
        field: where,
      });
    bound.add(`${b.host}:${b.port}`);
  }
  const a = Approvals.safeParse((doc as Record<string, unknown>).approvals ?? {});
  if (!a.success) throw invalidBlock('approvals', a.error);
  return { path: FILE, egress: r.data, simulators: sims.data, approvalCommands: a.data.commands };
}
