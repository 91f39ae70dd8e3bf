import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { AtelierError } from '../../core/index.js';
import { SIMULATOR_ENV } from '../process.js';
import type { SimulatorHandle, SimulatorMount, SimulatorSpec } from '../types.js';

/** A simulator before its process exists: everything of the handle but the pid. */
export type SimulatorInstance = Omit<SimulatorHandle, 'pid' | 'startTime'>;

/** Inside every simulator's sandbox: its socket directory (`<socketDir>/<name>/` on the host), bound writable by the lifecycle. */
export const SANDBOX_SOCKETS = '/sim/sock';

/** What runs in the simulator's sandbox, in the sandbox's own paths. */
export interface SimulatorProgram {
  argv: string[];
  /** What it needs of the host besides the base system and its socket directory: its data (writable), its code. */
  mounts: SimulatorMount[];
  /** Working directory inside (default: /tmp). */
  cwd?: string;
}

/** What a version check reads of a request: enough to say what is refused and why. */
export type VersionAsked = Pick<SimulatorSpec, 'type' | 'name' | 'version'>;

/** What one simulator type provides to the lifecycle (one file per type in this folder). */
export interface CatalogEntry {
  /**
   * Refuses, with the message a start would give, a version this server cannot start; starts and
   * prepares nothing, without waiting (an action's plan checks `atelier.yaml` with it).
   */
  checkVersion(spec: VersionAsked): void;
  /** The `env` names it reads (anything else is refused, before a start: see checkSimulatorRequest). */
  envKeys: readonly string[];
  /** The `options` it takes (their types: SIMULATOR_OPTIONS in core). */
  optionKeys: readonly string[];
  /** The fixed port inside the workshop (`<name>.atelier.internal:<port>`), known before anything starts. */
  port: number;
  /**
   * Checks the request against what is installed and prepares `spec.dir` (fresh state); starts
   * nothing. `sockDir` is this instance's own directory under `spec.socketDir`. Anything worth
   * the caller's log goes in `timings` (postgres: `waitedForCopyMs`, a start that found no spare copy).
   */
  prepare(spec: SimulatorSpec, sockDir: string, timings?: Record<string, number>): Promise<SimulatorInstance>;
  /** The server process, as it runs in its sandbox (the lifecycle builds the sandbox around it). */
  command(instance: SimulatorInstance): SimulatorProgram;
  /** One real round trip (a query, a PING); throws while the server is not ready. */
  probe(handle: SimulatorHandle): Promise<void>;
  /** Runs once after the first successful probe (postgres: the role and database asked for). */
  initialise(handle: SimulatorHandle): Promise<void>;
  /**
   * When set, the start's readiness check and `initialise` in one: tried like `probe` until it
   * succeeds (postgres: the first connection that gets in runs the role and database statements,
   * a connection and its authentication fewer on every start). An error it marks `final` (see
   * `finalError`) ends the start at once instead of being retried.
   */
  readyAndInitialise?(handle: SimulatorHandle): Promise<void>;
  /** Milliseconds between two readiness attempts (default 5). */
  pollMs?: number;
  /**
   * Connection variables that carry a credential (postgres: PGPASSWORD, DATABASE_URL's password),
   * shown only to those who may operate the workshop (see redactSimulatorEnv).
   */
  secretEnv?: readonly string[];
  /** First signal of a stop, before SIGKILL. */
  stopSignal: NodeJS.Signals;
  /** How long a start may take when the spec does not say (default 20 s; a JVM needs more on a busy machine). */
  startTimeoutMs?: number;
  /** Empties a running instance without restarting it (redis). */
  resetInPlace?(handle: SimulatorHandle): Promise<void>;
  /** Puts fresh state in place while the instance is stopped (postgres: a new copy of the template). */
  refresh?(instance: SimulatorInstance): Promise<void>;
  /**
   * Host directories other than its socket directory where the simulator creates sockets the
   * server dials (localstack's control socket): locked with it once it is ready (socketGuard.ts).
   */
  extraSocketDirs?(instance: SimulatorInstance): string[];
}

/** Marks an error of `readyAndInitialise` as not worth retrying (the server answered, and refused). */
export function finalError(err: unknown): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  return Object.assign(e, { final: true });
}

export function isFinal(err: unknown): boolean {
  return (err as { final?: unknown } | null)?.final === true;
}

export function invalid(message: string, details?: Record<string, unknown>): AtelierError {
  return new AtelierError('INVALID_ARGUMENT', message, details);
}

/** Refuses env keys and option keys that the type does not know, naming the ones it does. */
export function checkKeys(
  spec: Pick<SimulatorSpec, 'type' | 'name' | 'env' | 'options'>,
  envKeys: readonly string[],
  optionKeys: readonly string[],
): void {
  for (const key of Object.keys(spec.env ?? {})) {
    if (!envKeys.includes(key)) {
      throw invalid(
        `${spec.type} simulator ${spec.name}: unknown env ${key}` +
          (envKeys.length > 0 ? ` (known: ${envKeys.join(', ')})` : ` (a ${spec.type} simulator takes no env)`),
        { field: `env.${key}` },
      );
    }
  }
  for (const key of Object.keys(spec.options ?? {})) {
    if (!optionKeys.includes(key)) {
      throw invalid(
        `${spec.type} simulator ${spec.name}: unknown option ${key}` +
          (optionKeys.length > 0 ? ` (known: ${optionKeys.join(', ')})` : ` (a ${spec.type} simulator takes no options)`),
        { field: `options.${key}` },
      );
    }
  }
}

/** Major number of a requested version ("16", "16-alpine", "15.4", "7.0"), or undefined when none was asked. */
export function requestedMajor(spec: VersionAsked): number | undefined {
  if (spec.version === undefined || spec.version === '' || spec.version === 'latest') return undefined;
  const m = /^(\d+)(?:\.\d+)*(?:-[A-Za-z0-9.]+)?$/.exec(spec.version);
  if (!m) {
    throw invalid(
      `${spec.type} simulator ${spec.name}: version ${JSON.stringify(spec.version)} is not a version number like "15" or "15.4"`,
      {
        field: 'version',
      },
    );
  }
  return Number(m[1]);
}

/** First `name` found in the simulators' PATH. */
export function findProgram(name: string): string | undefined {
  for (const dir of SIMULATOR_ENV.PATH!.split(':')) if (existsSync(join(dir, name))) return join(dir, name);
  return undefined;
}

/** Unix socket paths are limited to 107 bytes by the kernel: say so before the server fails obscurely. */
export function checkSocketPath(path: string): void {
  if (Buffer.byteLength(path) > 107) {
    throw invalid(`the socket path ${path} is longer than the 107 bytes a unix socket allows: use a shorter socket directory or name`, {
      field: 'socketDir',
    });
  }
}
