import { createHash } from 'node:crypto';
import { AtelierError, describeZodError, newId } from '../../core/index.js';
import { CATALOG } from '../catalog/index.js';
import { appendJournal } from '../journal.js';
import { redact, scrub, secretsOf } from '../redact.js';
import type { ActionSpec, Actor, PlannedChange, Project } from '../types.js';
import { canonical } from '../yamlEdit.js';
import { entry, ID, spec, type EngineContext, type PlanRow } from './context.js';
import type { ActionPlan, CatalogItem } from './model.js';

function fingerprintOf(actionId: string, projectId: string, parameters: unknown, planned: PlannedChange): string {
  const body = JSON.stringify(canonical({ actionId, projectId, parameters, inputs: planned.inputs, effects: planned.effects }));
  return `sha256:${createHash('sha256').update(body).digest('hex')}`;
}

function parseParams(s: ActionSpec<Record<string, unknown>>, parameters: unknown): Record<string, unknown> {
  // NUL can be neither in a YAML file nor in PostgreSQL's jsonb: refused here, never a 500.
  if (JSON.stringify(parameters ?? {}).includes('\\u0000'))
    throw new AtelierError('INVALID_ARGUMENT', `${s.id}: parameters may not contain NUL characters`, { field: 'parameters' });
  const r = s.parameters.safeParse(parameters ?? {});
  if (!r.success) {
    const { message, field } = describeZodError(r.error);
    throw new AtelierError('INVALID_ARGUMENT', `${s.id}: ${field ? `parameter ${field}: ` : ''}${message}`, {
      field: field ? `parameters.${field}` : 'parameters',
    });
  }
  return r.data;
}

function toPlan(row: PlanRow, project: Project): ActionPlan {
  const s = spec(row.action_id);
  return {
    planId: row.id,
    actionId: row.action_id,
    class: s.class,
    project: project.name,
    parameters: redact(row.parameters) as Record<string, unknown>,
    fingerprint: row.fingerprint,
    createdAt: row.created_at.toISOString(),
    expiresAt: row.expires_at.toISOString(),
    summary: scrub(row.planned.summary, secretsOf(row.parameters)),
    preconditions: scrub(row.planned.preconditions, secretsOf(row.parameters)),
    effects: scrub(row.planned.effects, secretsOf(row.parameters)),
    inverse: s.inverseDescription,
    applyCommand: s.apply ? `atelier actions apply ${row.id}` : null,
    executionId: row.execution_id,
  };
}

/** A plan of the caller's tenant, with its project. */
export async function loadPlan(ctx: EngineContext, actor: Actor, planId: string): Promise<{ row: PlanRow; project: Project }> {
  const notFound = new AtelierError('PLAN_NOT_FOUND', `no plan ${planId}: make one with \`atelier actions plan ACTION --project P\``, {
    plan: planId,
  });
  if (typeof planId !== 'string' || !ID.test(planId)) throw notFound;
  const r = await ctx.pool.query<PlanRow>('SELECT * FROM action_plans WHERE id = $1', [planId]);
  const row = r.rows[0];
  const project = row ? await ctx.projects.byId(row.project_id) : undefined;
  if (!row || !project || project.tenantId !== actor.tenantId) throw notFound;
  return { row, project };
}

export async function catalog(ctx: EngineContext, actor: Actor, projectRef: string): Promise<CatalogItem[]> {
  const project = await ctx.projects.resolve(actor, projectRef);
  const env = ctx.envOf(project);
  return Object.values(CATALOG).map((raw) => {
    const s = raw as unknown as ActionSpec<Record<string, unknown>>;
    return {
      id: s.id,
      class: s.class,
      title: s.title,
      parameters: s.parameterHelp,
      preconditions: s.preconditions(env),
      effectKinds: s.effectKinds,
      inverse: s.inverseDescription,
      applicable: s.apply !== undefined,
    };
  });
}

export async function plan(
  ctx: EngineContext,
  actor: Actor,
  projectRef: string,
  actionId: string,
  parameters: unknown,
): Promise<ActionPlan> {
  const s = spec(actionId);
  const project = await ctx.projects.resolve(actor, projectRef);
  const params = parseParams(s, parameters);
  const env = ctx.envOf(project);
  const planned = s.plan(env, params);
  const preconditions = s.preconditions(env, params);
  const fingerprint = fingerprintOf(s.id, project.id, params, planned);
  const id = newId('plan');
  const createdAt = ctx.now();
  const expiresAt = new Date(createdAt.getTime() + ctx.ttl * 1000);
  const r = await ctx.pool.query<PlanRow>(
    `INSERT INTO action_plans (id, project_id, action_id, fingerprint, parameters, planned, created_by, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING *`,
    [
      id,
      project.id,
      s.id,
      fingerprint,
      JSON.stringify(params),
      JSON.stringify({ ...planned, preconditions }),
      actor.userId,
      createdAt,
      expiresAt,
    ],
  );
  const row = r.rows[0]!;
  // Plans never applied are kept a day past their expiry (to explain PLAN_EXPIRED), then dropped.
  await ctx.pool.query("DELETE FROM action_plans WHERE execution_id IS NULL AND expires_at < now() - interval '1 day'");
  // D3: the plan is recorded in the journal (class C too: what was shown, never run).
  appendJournal(project.path, entry(ctx, 'plan', project, s, row, actor, null));
  return toPlan(row, project);
}

export async function getPlan(ctx: EngineContext, actor: Actor, planId: string): Promise<ActionPlan> {
  const { row, project } = await loadPlan(ctx, actor, planId);
  return toPlan(row, project);
}
