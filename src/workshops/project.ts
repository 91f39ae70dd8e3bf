import { lstatSync, readFileSync, realpathSync } from 'node:fs';
import { join, sep } from 'node:path';
import { parse } from 'yaml';
import { z } from 'zod';
import { AtelierError, SimulatorRequest } from '../core/index.js';
import { createEgressPolicy } from '../egress/index.js';

/**
 * The project's own settings, `atelier.yaml` at the repository root. This issue reads its
 * `egress:` block; other top-level keys (simulators, agent, actions…) belong to other parts of
 * Atelier and are left alone here.
 *
 *   egress:
 *     allow: [api.stripe.com, "*.example.com", "api.example.com:8443"]
 *     deny: [uploads.example.com]
 *     askHoldSeconds: 30        # how long a request to an unknown host waits for a human (0: answer at once)
 */
const Egress = z.strictObject({
  allow: z.array(z.string().min(1).max(300)).max(1000).default([]),
  deny: z.array(z.string().min(1).max(300)).max(1000).default([]),
  askHoldSeconds: z.number().int().min(0).max(600).default(30),
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
  const r = Egress.safeParse((doc as Record<string, unknown>).egress ?? {});
  if (!r.success) throw invalidBlock('egress', r.error);
  const sims = Simulators.safeParse((doc as Record<string, unknown>).simulators ?? []);
  if (!sims.success) throw invalidBlock('simulators', sims.error);
  // Refused entries (`*`, `*.com`, malformed names) are reported now, naming the entry.
  try {
    createEgressPolicy({ allow: r.data.allow, deny: r.data.deny });
  } catch (err) {
    throw new AtelierError('INVALID_ARGUMENT', `${FILE}: ${(err as Error).message}`, { field: 'egress' });
  }
  const a = Approvals.safeParse((doc as Record<string, unknown>).approvals ?? {});
  if (!a.success) throw invalidBlock('approvals', a.error);
  return { path: FILE, egress: r.data, simulators: sims.data, approvalCommands: a.data.commands };
}
