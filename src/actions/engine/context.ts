import { AtelierError } from '../../core/index.js';
import type { Pool } from '../../db/index.js';
import { CATALOG } from '../catalog/index.js';
import type { JournalEntry } from '../journal.js';
import type { ProjectRegistry } from '../projects.js';
import { redact, scrub, secretsOf } from '../redact.js';
import { nativeBackend, type StackBackend } from '../stackBackends.js';
import type { ActionEnv, ActionSpec, Actor, PlannedChange, Precondition, Project } from '../types.js';
import type { ActionServiceDeps } from './model.js';

const DEFAULT_TTL_SECONDS = 600;

/** Plan and execution ids, checked before any query. */
export const ID = /^[a-z]+-[0-9a-z]{10}$/;

/** What every phase of the engine shares. */
export interface EngineContext {
  pool: Pool;
  projects: ProjectRegistry;
  stacks: StackBackend;
  /** How long a plan may be applied after it was made, in seconds. */
  ttl: number;
  now: () => Date;
  /** What an action's steps see of the project and the server. */
  envOf: (project: Project) => ActionEnv;
}

export function createEngineContext(deps: ActionServiceDeps): EngineContext {
  const stacks = deps.stacks ?? nativeBackend(deps.stacksDir);
  return {
    pool: deps.pool,
    projects: deps.projects,
    stacks,
    ttl: deps.planTtlSeconds ?? DEFAULT_TTL_SECONDS,
    now: deps.now ?? (() => new Date()),
    envOf: (project) => ({
      project,
      isRoot: deps.isRoot,
      stacks,
      validateEgress: deps.validateEgress,
      checkSimulatorVersion: deps.checkSimulatorVersion,
    }),
  };
}

export interface PlanRow {
  id: string;
  project_id: string;
  action_id: string;
  fingerprint: string;
  parameters: Record<string, unknown>;
  planned: PlannedChange & { preconditions: Precondition[] };
  created_at: Date;
  expires_at: Date;
  execution_id: string | null;
}

export function spec(actionId: string): ActionSpec<Record<string, unknown>> {
  const s = Object.hasOwn(CATALOG, actionId) ? CATALOG[actionId] : undefined;
  if (!s)
    throw new AtelierError('ACTION_NOT_FOUND', `no action ${actionId}: run \`atelier actions list --project P\` to see the catalog`, {
      action: actionId,
      known: Object.keys(CATALOG),
    });
  return s as unknown as ActionSpec<Record<string, unknown>>;
}

/** One journal line of an action on a plan (or the plan a rollback undoes). */
export function entry(
  ctx: EngineContext,
  event: JournalEntry['event'],
  project: Project,
  s: ActionSpec<Record<string, unknown>>,
  row: { id: string; fingerprint: string; parameters: Record<string, unknown> },
  actor: Actor,
  executionId: string | null,
  extra: Partial<JournalEntry> = {},
): JournalEntry {
  // Every line hides what the parameters hide, wherever it would appear (effects, checks, errors).
  const secrets = secretsOf(row.parameters);
  return scrub(
    {
      at: ctx.now().toISOString(),
      event,
      executionId,
      planId: row.id,
      actionId: s.id,
      class: s.class,
      project: project.name,
      fingerprint: row.fingerprint,
      actor: actor.userName,
      parameters: redact(row.parameters) as Record<string, unknown>,
      ...extra,
    } as JournalEntry,
    secrets,
  );
}

/** One apply or rollback at a time per project, across servers sharing the database; released on any outcome. */
export async function withProjectLock<T>(ctx: EngineContext, project: Project, fn: () => Promise<T>): Promise<T> {
  const client = await ctx.pool.connect();
  try {
    const got = await client.query<{ ok: boolean }>("SELECT pg_try_advisory_lock(hashtext('atelier.actions'), hashtext($1)) AS ok", [
      project.id,
    ]);
    if (!got.rows[0]?.ok)
      throw new AtelierError('ACTION_BUSY', `another action is being applied to project ${project.name}: wait for it, then plan again`, {
        project: project.name,
      });
    try {
      return await fn();
    } finally {
      await client.query("SELECT pg_advisory_unlock(hashtext('atelier.actions'), hashtext($1))", [project.id]);
    }
  } finally {
    client.release();
  }
}

export async function setStatus(ctx: EngineContext, executionId: string, status: string): Promise<void> {
  await ctx.pool.query('UPDATE action_executions SET status = $2, updated_at = now() WHERE id = $1', [executionId, status]);
}
