import type { Pool } from '../../db/index.js';
import type { ExecutionSummary, JournalRead } from '../journal.js';
import type { ProjectRegistry } from '../projects.js';
import type { StackBackend } from '../stackBackends.js';
import type { ActionClass, Actor, Effect, ObservedEffect, ParameterHelp, Precondition, Verification } from '../types.js';

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
