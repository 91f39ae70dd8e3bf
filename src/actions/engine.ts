import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { AtelierError, describeZodError, newId } from '../core/index.js';
import type { Pool } from '../db/index.js';
import { CATALOG } from './catalog/index.js';
import { appendJournal, readJournal, type ExecutionSummary, type JournalEntry, type JournalRead } from './journal.js';
import { snapshotPath } from './projectFiles.js';
import type { ProjectRegistry } from './projects.js';
import type {
  ActionClass,
  ActionEnv,
  ActionSpec,
  Actor,
  Effect,
  Inverse,
  ObservedEffect,
  ParameterHelp,
  PlannedChange,
  Precondition,
  Project,
  Verification,
} from './types.js';
import { redact, scrub, secretsOf } from './redact.js';
import { nativeBackend, type StackBackend } from './stackBackends.js';
import { restartPolicy, STACKS } from './stacks.js';
import { canonical } from './yamlEdit.js';

/** A catalog entry as the API shows it, with its preconditions evaluated now. */
export interface CatalogItem {
  id: string;
  class: ActionClass;
  title: string;
  parameters: ParameterHelp[];
  preconditions: Precondition[];
  effectKinds: Effect['kind'][];
  inverse: string;
  /** False for class C: its plan is a command to copy, and there is no apply. */
  applicable: boolean;
}

/** What `plan` returns: everything that apply would do, and nothing written but a journal line. */
export interface ActionPlan {
  planId: string;
  actionId: string;
  class: ActionClass;
  project: string;
  parameters: Record<string, unknown>;
  fingerprint: string;
  createdAt: string;
  expiresAt: string;
  summary: string;
  preconditions: Precondition[];
  effects: Effect[];
  inverse: string;
  /** The CLI command that applies this plan (what a copy-command server shows instead of applying). */
  applyCommand: string | null;
  /** Set once the plan has been applied. */
  executionId: string | null;
}

export interface ActionExecution {
  executionId: string;
  planId: string;
  actionId: string;
  project: string;
  status: 'applied' | 'failed' | 'rolled_back' | 'rollback_failed';
  effects: ObservedEffect[];
  verification: Verification;
  /** Offered after a failure too: a failed verification is never undone silently. */
  rollbackOffered: boolean;
  message: string;
}

export interface ActionServiceDeps {
  pool: Pool;
  projects: ProjectRegistry;
  isRoot: boolean;
  /** DATA_DIR/stacks: where the native backend keeps each project's stacks. */
  stacksDir: string;
  /** Where stacks run (default: the native backend over `stacksDir`). */
  stacks?: StackBackend;
  validateEgress(allow: string[], deny: string[]): void;
  /** Throws, as a start would, when this server cannot start a simulator of that type and version. */
  checkSimulatorVersion(spec: { type: string; name: string; version?: string | undefined }): void;
  /** How long a plan may be applied after it was made (default 10 minutes). */
  planTtlSeconds?: number;
  /** The clock (tests move it). */
  now?: () => Date;
}

export interface ActionService {
  catalog(actor: Actor, project: string): Promise<CatalogItem[]>;
  plan(actor: Actor, project: string, actionId: string, parameters: unknown): Promise<ActionPlan>;
  getPlan(actor: Actor, planId: string): Promise<ActionPlan>;
  apply(actor: Actor, actionId: string, planId: string, fingerprint: string): Promise<ActionExecution>;
  rollback(actor: Actor, actionId: string, executionId: string): Promise<ActionExecution>;
  journal(actor: Actor, project: string): Promise<JournalRead & { project: string }>;
  /**
   * At server start: starts again every stack whose rendered file says `restart: unless-stopped`
   * and that was running (not stopped on purpose) — "restart with the machine" for the native backend.
   */
  reconcileStacks(log: (message: string) => void): Promise<void>;
  /** The action id of an execution of the caller's tenant (the CLI's rollback names only the execution). */
  execution(actor: Actor, executionId: string): Promise<ExecutionSummary & { project: string }>;
}

const DEFAULT_TTL_SECONDS = 600;
const ID = /^[a-z]+-[0-9a-z]{10}$/;

function spec(actionId: string): ActionSpec<Record<string, unknown>> {
  const s = Object.hasOwn(CATALOG, actionId) ? CATALOG[actionId] : undefined;
  if (!s)
    throw new AtelierError('ACTION_NOT_FOUND', `no action ${actionId}: run \`atelier actions list --project P\` to see the catalog`, {
      action: actionId,
      known: Object.keys(CATALOG),
    });
  return s as unknown as ActionSpec<Record<string, unknown>>;
}

function fingerprintOf(actionId: string, projectId: string, parameters: unknown, planned: PlannedChange): string {
  const body = JSON.stringify(canonical({ actionId, projectId, parameters, inputs: planned.inputs, effects: planned.effects }));
  return `sha256:${createHash('sha256').update(body).digest('hex')}`;
}

/** The snapshot a restore will read is named after the execution that takes it. */
function bindInverse(inverse: Inverse, executionId: string): Inverse {
  if (inverse.kind === 'restore-file' && inverse.snapshot !== null)
    return { ...inverse, snapshot: snapshotPath(executionId, inverse.snapshot) };
  if (inverse.kind === 'service' && inverse.file)
    return { ...inverse, file: bindInverse(inverse.file, executionId) as Inverse & { kind: 'restore-file' } };
  return inverse;
}

interface PlanRow {
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

/** The plan/apply/verify/rollback engine over the catalog, with the journal as its proof. */
export function createActionService(deps: ActionServiceDeps): ActionService {
  const ttl = deps.planTtlSeconds ?? DEFAULT_TTL_SECONDS;
  const now = deps.now ?? (() => new Date());
  const stacks = deps.stacks ?? nativeBackend(deps.stacksDir);
  const envOf = (project: Project): ActionEnv => ({
    project,
    isRoot: deps.isRoot,
    stacks,
    validateEgress: deps.validateEgress,
    checkSimulatorVersion: deps.checkSimulatorVersion,
  });

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

  function entry(
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
        at: now().toISOString(),
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

  async function loadPlan(actor: Actor, planId: string): Promise<{ row: PlanRow; project: Project }> {
    const notFound = new AtelierError('PLAN_NOT_FOUND', `no plan ${planId}: make one with \`atelier actions plan ACTION --project P\``, {
      plan: planId,
    });
    if (typeof planId !== 'string' || !ID.test(planId)) throw notFound;
    const r = await deps.pool.query<PlanRow>('SELECT * FROM action_plans WHERE id = $1', [planId]);
    const row = r.rows[0];
    const project = row ? await deps.projects.byId(row.project_id) : undefined;
    if (!row || !project || project.tenantId !== actor.tenantId) throw notFound;
    return { row, project };
  }

  /** One apply or rollback at a time per project, across servers sharing the database; released on any outcome. */
  async function withProjectLock<T>(project: Project, fn: () => Promise<T>): Promise<T> {
    const client = await deps.pool.connect();
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

  async function setStatus(executionId: string, status: string): Promise<void> {
    await deps.pool.query('UPDATE action_executions SET status = $2, updated_at = now() WHERE id = $1', [executionId, status]);
  }

  return {
    async catalog(actor, projectRef) {
      const project = await deps.projects.resolve(actor, projectRef);
      const env = envOf(project);
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
    },

    async plan(actor, projectRef, actionId, parameters) {
      const s = spec(actionId);
      const project = await deps.projects.resolve(actor, projectRef);
      const params = parseParams(s, parameters);
      const env = envOf(project);
      const planned = s.plan(env, params);
      const preconditions = s.preconditions(env, params);
      const fingerprint = fingerprintOf(s.id, project.id, params, planned);
      const id = newId('plan');
      const createdAt = now();
      const expiresAt = new Date(createdAt.getTime() + ttl * 1000);
      const r = await deps.pool.query<PlanRow>(
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
      await deps.pool.query("DELETE FROM action_plans WHERE execution_id IS NULL AND expires_at < now() - interval '1 day'");
      // D3: the plan is recorded in the journal (class C too: what was shown, never run).
      appendJournal(project.path, entry('plan', project, s, row, actor, null));
      return toPlan(row, project);
    },

    async getPlan(actor, planId) {
      const { row, project } = await loadPlan(actor, planId);
      return toPlan(row, project);
    },

    async apply(actor, actionId, planId, fingerprint) {
      const s = spec(actionId);
      const { row, project } = await loadPlan(actor, planId);
      if (row.action_id !== s.id)
        throw new AtelierError('PLAN_FINGERPRINT_MISMATCH', `plan ${planId} is a plan of ${row.action_id}, not of ${s.id}`, {
          plan: planId,
        });
      if (!s.apply || !s.verify)
        throw new AtelierError('UNSUPPORTED', `${s.id} is class ${s.class}: it is never applied, run the planned command yourself`, {
          action: s.id,
        });
      if (typeof fingerprint !== 'string' || fingerprint !== row.fingerprint)
        throw new AtelierError(
          'PLAN_FINGERPRINT_MISMATCH',
          `the fingerprint sent does not match plan ${planId}: apply only the plan you were shown`,
          {
            plan: planId,
          },
        );
      if (row.execution_id)
        throw new AtelierError(
          'PLAN_ALREADY_APPLIED',
          `plan ${planId} was already applied (execution ${row.execution_id}): plan again for a new change`,
          {
            plan: planId,
            executionId: row.execution_id,
          },
        );
      if (row.expires_at.getTime() <= now().getTime())
        throw new AtelierError('PLAN_EXPIRED', `plan ${planId} expired at ${row.expires_at.toISOString()}: plan again`, { plan: planId });
      const env = envOf(project);
      return withProjectLock(project, async () => {
        // Stale: an input changed since the plan (also one that was absent and exists now).
        const current = s.inputs(env, row.parameters);
        for (const [name, planned] of Object.entries(row.planned.inputs)) {
          if (current[name] !== planned)
            throw new AtelierError(
              'PLAN_STALE',
              `${name} changed since plan ${planId} was made: nothing was applied; plan again to see the new diff`,
              {
                plan: planId,
                input: name,
                planned,
                now: current[name] ?? 'absent',
              },
            );
        }
        const executionId = newId('exec');
        const claimed = await deps.pool.query(
          'UPDATE action_plans SET execution_id = $2 WHERE id = $1 AND execution_id IS NULL RETURNING id',
          [planId, executionId],
        );
        if (claimed.rowCount !== 1)
          throw new AtelierError('PLAN_ALREADY_APPLIED', `plan ${planId} was already applied: plan again for a new change`, {
            plan: planId,
          });
        const inverse = bindInverse(row.planned.inverse, executionId);
        // No journal, no effect: apply_started (with the inverse) is on disk before anything changes.
        try {
          appendJournal(project.path, entry('apply_started', project, s, row, actor, executionId, { inverse }));
        } catch (err) {
          await deps.pool.query('UPDATE action_plans SET execution_id = NULL WHERE id = $1', [planId]);
          throw err;
        }
        await deps.pool.query('INSERT INTO action_executions (id, project_id, plan_id, action_id, status) VALUES ($1, $2, $3, $4, $5)', [
          executionId,
          project.id,
          planId,
          s.id,
          'started',
        ]);
        let effects: ObservedEffect[];
        try {
          effects = await s.apply!(env, row.planned, executionId);
        } catch (err) {
          const message = scrub((err as Error).message, secretsOf(row.parameters));
          appendJournal(project.path, entry('failed', project, s, row, actor, executionId, { error: message }));
          await setStatus(executionId, 'failed');
          throw new AtelierError(
            err instanceof AtelierError ? err.code : 'INTERNAL',
            `${s.id} failed while applying: ${message}; its inverse is offered: atelier actions rollback ${executionId}`,
            {
              executionId,
            },
          );
        }
        appendJournal(project.path, entry('effects', project, s, row, actor, executionId, { effects }));
        const verification = await s.verify!(env, row.planned);
        appendJournal(project.path, entry('verification', project, s, row, actor, executionId, { verification }));
        const status = verification.ok ? 'applied' : 'failed';
        appendJournal(project.path, entry(status, project, s, row, actor, executionId));
        await setStatus(executionId, status);
        return scrub(
          {
            executionId,
            planId,
            actionId: s.id,
            project: project.name,
            status,
            effects,
            verification,
            rollbackOffered: true,
            message: verification.ok
              ? `${s.id} applied and verified; undo with \`atelier actions rollback ${executionId}\``
              : `${s.id} was applied but its verification failed; it was NOT undone: undo with \`atelier actions rollback ${executionId}\``,
          },
          secretsOf(row.parameters),
        );
      });
    },

    async rollback(actor, actionId, executionId) {
      const s = spec(actionId);
      const found = await this.execution(actor, executionId);
      if (found.actionId !== s.id)
        throw new AtelierError('EXECUTION_NOT_FOUND', `execution ${executionId} is an execution of ${found.actionId}, not of ${s.id}`, {
          executionId,
        });
      const project = await deps.projects.resolve(actor, found.project);
      if (!s.rollback) throw new AtelierError('UNSUPPORTED', `${s.id} has nothing to roll back`, { action: s.id });
      return withProjectLock(project, async () => {
        // The journal, not the database, is the source of the inverse (read again under the lock).
        const ex = readJournal(project.path).executions.find((e) => e.executionId === executionId);
        if (!ex || !ex.inverse)
          throw new AtelierError('EXECUTION_NOT_FOUND', `execution ${executionId} is not in the journal of ${project.name}`, {
            executionId,
          });
        if (ex.status === 'rolled_back')
          throw new AtelierError('CONFLICT', `execution ${executionId} was already rolled back`, { executionId });
        const row = { id: ex.planId, fingerprint: '', parameters: {} as Record<string, unknown> };
        const plan = await deps.pool.query<PlanRow>('SELECT * FROM action_plans WHERE id = $1', [ex.planId]);
        if (plan.rows[0]) Object.assign(row, { fingerprint: plan.rows[0].fingerprint, parameters: plan.rows[0].parameters });
        appendJournal(project.path, entry('rollback_started', project, s, row, actor, executionId, { inverse: ex.inverse }));
        let result: { effects: ObservedEffect[]; verification: Verification };
        try {
          result = await s.rollback!(envOf(project), ex.inverse);
        } catch (err) {
          appendJournal(project.path, entry('rollback_failed', project, s, row, actor, executionId, { error: (err as Error).message }));
          await setStatus(executionId, 'rollback_failed');
          throw err;
        }
        appendJournal(project.path, entry('effects', project, s, row, actor, executionId, { effects: result.effects }));
        appendJournal(project.path, entry('verification', project, s, row, actor, executionId, { verification: result.verification }));
        const status = result.verification.ok ? 'rolled_back' : 'rollback_failed';
        appendJournal(
          project.path,
          entry(status === 'rolled_back' ? 'rollback_applied' : 'rollback_failed', project, s, row, actor, executionId),
        );
        await setStatus(executionId, status);
        return scrub(
          {
            executionId,
            planId: ex.planId,
            actionId: s.id,
            project: project.name,
            status,
            effects: result.effects,
            verification: result.verification,
            rollbackOffered: status !== 'rolled_back',
            message:
              status === 'rolled_back'
                ? `${s.id} rolled back and verified`
                : `the rollback of ${executionId} did not verify: see the journal`,
          },
          secretsOf(row.parameters),
        );
      });
    },

    async reconcileStacks(log) {
      const all = await deps.pool.query<{ id: string }>('SELECT id FROM projects');
      for (const { id } of all.rows) {
        const project = await deps.projects.byId(id);
        if (!project || !existsSync(project.path)) continue;
        for (const stack of STACKS) {
          try {
            if (!(await stacks.reconcile(project, stack, restartPolicy(project, stack)))) continue;
            log(`stack ${stack} of project ${project.name} started again (restart: unless-stopped)`);
          } catch (err) {
            log(`stack ${stack} of project ${project.name} could not be started again: ${(err as Error).message}`);
          }
        }
      }
    },

    async journal(actor, projectRef) {
      const project = await deps.projects.resolve(actor, projectRef);
      return { project: project.name, ...readJournal(project.path) };
    },

    async execution(actor, executionId) {
      const notFound = new AtelierError('EXECUTION_NOT_FOUND', `no execution ${executionId}: see \`atelier actions journal --project P\``, {
        executionId,
      });
      if (typeof executionId !== 'string' || !ID.test(executionId)) throw notFound;
      const r = await deps.pool.query<{ project_id: string }>('SELECT project_id FROM action_executions WHERE id = $1', [executionId]);
      const project = r.rows[0] ? await deps.projects.byId(r.rows[0].project_id) : undefined;
      if (!project || project.tenantId !== actor.tenantId) throw notFound;
      const ex = readJournal(project.path).executions.find((e) => e.executionId === executionId);
      if (!ex) throw notFound;
      return { ...ex, project: project.name };
    },
  };
}
