import type { z } from 'zod';
import type { StackBackend } from './stackBackends.js';

/** D2: what an action touches. A: the project's configuration; B: local services; C: system components (printed, never run). */
export type ActionClass = 'A' | 'B' | 'C';

/** A condition checked now, with the reason it holds or not. A false one blocks `plan`. */
export interface Precondition {
  name: string;
  ok: boolean;
  reason: string;
}

/** One planned effect, shown before anything happens. */
export type Effect =
  | {
      kind: 'file';
      /** Relative to the project root. */
      path: string;
      /** The key the edit targets, such as `egress.allow`. */
      key: string;
      beforeSha256: string | null;
      afterSha256: string;
      diff: string;
    }
  | {
      kind: 'command';
      argv: string[];
      /** What the user copies (class C); the server never runs it. */
      copy: string;
      /** Reaches the network (a package download, an image pull): always flagged. */
      network: boolean;
      runsHere: false;
    }
  | {
      kind: 'service';
      stack: string;
      operation: 'start' | 'stop' | 'restart' | 'recreate';
      /** The process or compose argv the backend runs. */
      argv: string[];
      network: boolean;
    };

/** What `apply` observed it did (written to the journal). */
export type ObservedEffect =
  | { kind: 'file'; path: string; beforeSha256: string | null; afterSha256: string }
  | { kind: 'service'; stack: string; operation: string; pid?: number; detail: string };

export interface Verification {
  ok: boolean;
  checks: { name: string; ok: boolean; detail: string }[];
}

/** The recorded way back, computed at plan time and written to the journal before any effect. */
export type Inverse =
  | {
      kind: 'restore-file';
      path: string;
      /** The content before the apply, kept beside the journal (0600) rather than in it: it may hold env values. */
      snapshot: string | null;
      beforeSha256: string | null;
      afterSha256: string;
    }
  | {
      kind: 'service';
      stack: string;
      /** The state the stack is brought back to. */
      state: 'running' | 'stopped';
      /** For `stack.autostart`: the rendered file to restore first. */
      file: (Inverse & { kind: 'restore-file' }) | null;
    }
  | { kind: 'none'; reason: string };

/** A registered project: a directory on the server's host with an `atelier.yaml`. */
export interface Project {
  id: string;
  name: string;
  path: string;
  tenantId: string;
  createdAt: string;
}

/** Who acts (from the authenticated principal). */
export interface Actor {
  userId: string;
  userName: string;
  tenantId: string;
}

/** What a plan computes: effects to show, the state of its inputs, and what apply will need. */
export interface PlannedChange {
  effects: Effect[];
  /** Input name → digest of its current state (`absent` when it does not exist). Apply refuses when one changed. */
  inputs: Record<string, string>;
  inverse: Inverse;
  /** Server-side data for apply (the exact bytes to write); never sent to clients. */
  data: Record<string, unknown>;
  /** A human summary of what the plan does. */
  summary: string;
}

export interface ActionEnv {
  project: Project;
  /** Whether the server runs as root (class C commands then need no sudo). */
  isRoot: boolean;
  /** Where the project's long-lived stacks run (the native backend, or compose where an engine exists). */
  stacks: StackBackend;
  /** Checks an egress allow/deny list the way workshops will read it; throws with the entry at fault. */
  validateEgress(allow: string[], deny: string[]): void;
  /** Throws, as a start would, when this server cannot start a simulator of that type and version. */
  checkSimulatorVersion(spec: { type: string; name: string; version?: string | undefined }): void;
}

export interface ParameterHelp {
  name: string;
  type: string;
  required: boolean;
  description: string;
}

/**
 * D1: one catalog entry, with its five elements readable without running anything:
 * preconditions, plan, effects (declared by `effectKinds`, produced by `plan`), verification, inverse.
 */
export interface ActionSpec<P = Record<string, unknown>> {
  id: string;
  class: ActionClass;
  title: string;
  parameters: z.ZodType<P>;
  parameterHelp: ParameterHelp[];
  /** Conditions checked now; with parameters, also those that depend on them. */
  preconditions(env: ActionEnv, params?: P): Precondition[];
  /** The ordered, complete list of effects, computed without writing anything. */
  plan(env: ActionEnv, params: P): PlannedChange;
  /** Current digests of the inputs the plan was computed from. */
  inputs(env: ActionEnv, params: P): Record<string, string>;
  /** The kinds of effect this action may have. */
  effectKinds: Effect['kind'][];
  /** Runs exactly the planned effects (absent for class C: nothing is ever run). */
  apply?(env: ActionEnv, plan: PlannedChange, executionId: string): ObservedEffect[] | Promise<ObservedEffect[]>;
  /** The probe run after apply; the action succeeded only if it passes. */
  verify?(env: ActionEnv, plan: PlannedChange): Verification | Promise<Verification>;
  /** What the inverse does, in words (class C: why there is none). */
  inverseDescription: string;
  /** Applies a recorded inverse and verifies it. */
  rollback?(env: ActionEnv, inverse: Inverse): RollbackResult | Promise<RollbackResult>;
}

export interface RollbackResult {
  effects: ObservedEffect[];
  verification: Verification;
}
