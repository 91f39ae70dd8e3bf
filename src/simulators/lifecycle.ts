import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { isAbsolute, join } from 'node:path';
import { AtelierError, SIMULATOR_OPTIONS } from '../core/index.js';
import { checkKeys, isFinal, SANDBOX_SOCKETS, type CatalogEntry, type SimulatorInstance } from './catalog/entry.js';
import { localstack } from './catalog/localstack.js';
import { dropPostgresSpares, postgres, seedPostgresSpare, warmPostgresTemplate } from './catalog/postgres.js';
import { redis } from './catalog/redis.js';
import { wiremock } from './catalog/wiremock.js';
import { isSocket, lockSocketDirs } from './socketGuard.js';
import { processStartTime, readTail, sandboxProgram, spawnDetached, stopGroup, type Started } from './process.js';
import {
  SIMULATOR_TYPES,
  type RunAs,
  type SimulatorHandle,
  type SimulatorSandbox,
  type SimulatorSpec,
  type SimulatorType,
} from './types.js';

const CATALOG: Record<SimulatorType, CatalogEntry> = { postgres, redis, localstack, wiremock };

const DEFAULT_START_TIMEOUT_MS = 20_000;
const DEFAULT_STOP_GRACE_MS = 5_000;
/** A DNS label: the simulator is reached as `<name>.atelier.internal`. */
const NAME = /^[a-z](?:[a-z0-9-]{0,30}[a-z0-9])?$/;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function invalid(message: string, field: string): AtelierError {
  return new AtelierError('INVALID_ARGUMENT', message, { field });
}

/** What a redacted credential shows instead of its value. */
const REDACTED = '(redacted)';

/**
 * A simulator's connection variables with its credentials redacted (for those who may read a
 * workshop but not operate it): secret variables become `(redacted)`, and the password part of a
 * URL (`postgresql://dev:(redacted)@postgres.atelier.internal:5432/app`) too, so that the rest
 * still says where it is.
 */
export function redactSimulatorEnv(type: string, env: Record<string, string>): Record<string, string> {
  const secret = (SIMULATOR_TYPES as readonly string[]).includes(type) ? (CATALOG[type as SimulatorType].secretEnv ?? []) : [];
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(env)) {
    if (!secret.includes(key)) out[key] = value;
    else if (/^[a-z][a-z0-9+.-]*:\/\/[^/@]*:[^/@]*@/i.test(value))
      out[key] = value.replace(/^([a-z][a-z0-9+.-]*:\/\/[^/@:]*:)[^/@]*@/i, `$1${REDACTED}@`);
    else out[key] = REDACTED;
  }
  return out;
}

/** The port a simulator of `type` answers on inside the workshop (before it is started). */
export function simulatorPort(type: SimulatorType): number {
  return CATALOG[type].port;
}

/**
 * Refuses, as a start would, a simulator type this server does not run or a version it cannot
 * start (PostgreSQL: a major installed here); starts nothing and does not wait.
 */
export function checkSimulatorVersion(spec: { type: string; name: string; version?: string | undefined }): void {
  if (!(SIMULATOR_TYPES as readonly string[]).includes(spec.type)) {
    throw invalid(`unknown simulator type ${JSON.stringify(spec.type)}: known types are ${SIMULATOR_TYPES.join(', ')}`, 'type');
  }
  CATALOG[spec.type as SimulatorType].checkVersion({ ...spec, type: spec.type as SimulatorType });
}

/** What checkSimulatorRequest reads of a request (a create's `simulators`, atelier.yaml's, a live one). */
export interface SimulatorAsked {
  type: string;
  name: string;
  version?: string | undefined;
  env?: Record<string, string> | undefined;
  options?: Record<string, unknown> | undefined;
  services?: string[] | undefined;
  stubsDirectory?: string | undefined;
}

/**
 * Everything of a request that is wrong whatever the moment: its type, `env` names and options the
 * type does not read (naming those it does), fields of another type, a version this server cannot
 * start. Starts and prepares nothing, without waiting, so that a create refuses it before anything
 * exists instead of starting a workshop without the simulator asked for.
 */
export function checkSimulatorRequest(spec: SimulatorAsked): void {
  checkSimulatorVersion({ type: spec.type, name: spec.name, version: spec.version });
  const entry = CATALOG[spec.type as SimulatorType];
  checkKeys({ ...spec, type: spec.type as SimulatorType }, entry.envKeys, entry.optionKeys);
  const types = SIMULATOR_OPTIONS[spec.type] ?? {};
  for (const [key, value] of Object.entries(spec.options ?? {})) {
    const want = types[key];
    if (want !== undefined && typeof value !== want)
      throw invalid(
        `${spec.type} simulator ${spec.name}: option ${key} must be ${want === 'boolean' ? 'true or false' : `a ${want}`}`,
        `options.${key}`,
      );
  }
  if (spec.services !== undefined && spec.type !== 'localstack')
    throw invalid(`services applies to localstack simulators only, not to ${spec.type}`, 'services');
  if (spec.stubsDirectory !== undefined && spec.type !== 'wiremock')
    throw invalid(`stubsDirectory applies to wiremock simulators only, not to ${spec.type}`, 'stubsDirectory');
}

function checkSpec(spec: SimulatorSpec): CatalogEntry {
  if (!(SIMULATOR_TYPES as readonly string[]).includes(spec.type)) {
    throw invalid(`unknown simulator type ${JSON.stringify(spec.type)}: known types are ${SIMULATOR_TYPES.join(', ')}`, 'type');
  }
  if (!NAME.test(spec.name)) {
    throw invalid(
      `simulator name ${JSON.stringify(spec.name)} must be a DNS label: lower-case letters, digits and '-', at most 32 characters, starting with a letter`,
      'name',
    );
  }
  for (const field of ['dir', 'socketDir', 'cacheDir'] as const) {
    if (!isAbsolute(spec[field])) throw invalid(`${field} must be an absolute path`, field);
  }
  // Fields of one type only: silently ignoring them would start something else than asked.
  if (spec.services !== undefined && spec.type !== 'localstack') {
    throw invalid(`services applies to localstack simulators only, not to ${spec.type}`, 'services');
  }
  if (spec.stubsDirectory !== undefined && spec.type !== 'wiremock') {
    throw invalid(`stubsDirectory applies to wiremock simulators only, not to ${spec.type}`, 'stubsDirectory');
  }
  if (typeof spec.sandbox !== 'function') throw invalid('simulators run in a sandbox of their own: give sandbox', 'sandbox');
  const isRoot = process.getuid?.() === 0;
  if (spec.runAs?.uid === 0 || (isRoot && !spec.runAs)) {
    throw invalid("simulators run as an unprivileged user: give runAs with a uid other than 0 (the workshop's own uid)", 'runAs');
  }
  return CATALOG[spec.type];
}

/** True when something accepts connections on the unix socket `path`. */
function socketAnswers(path: string): Promise<boolean> {
  // Only a socket itself: never through a link the simulator left there (socketGuard.ts).
  if (!isSocket(path)) return Promise.resolve(false);
  return new Promise((resolve) => {
    const s = connect(path);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

/** Refuses a name whose socket directory has a live listener (before anything of it is touched). */
async function assertNameFree(sockDir: string, name: string): Promise<void> {
  const entries = existsSync(sockDir) ? readdirSync(sockDir) : [];
  for (const entry of entries) {
    const path = join(sockDir, entry);
    if (await socketAnswers(path)) {
      throw new AtelierError(
        'ALREADY_EXISTS',
        `a simulator named ${name} is already running in this workshop: stop it or choose another name`,
        {
          field: 'name',
          name,
        },
      );
    }
  }
}

/**
 * Creates `<socketDir>/<name>/`, the instance's own socket directory. One directory per
 * simulator, not one socket file per simulator in `socketDir`: two postgres simulators of a
 * workshop would both want `.s.PGSQL.5432` (PostgreSQL names its socket after the port).
 *
 * Who can reach the sockets: the directory is 0700, owned by the simulator's uid while it starts
 * (root mode: the workshop's own; rootless: the server's), then root's once it is ready (root
 * mode, socketGuard.ts), so no other host user and no other workshop's uid can connect; the server's relay (root, or that same user) dials them on the workshop's
 * behalf. Other workshops' sandboxes do not have the host path at all.
 */
async function prepareSocketDir(socketDir: string, sockDir: string, runAs: RunAs | undefined): Promise<void> {
  mkdirSync(socketDir, { recursive: true, mode: 0o711 });
  chmodSync(socketDir, 0o711);
  mkdirSync(sockDir, { recursive: true, mode: 0o700 });
  // Sockets and lock files left by a killed instance would make the new one refuse to start.
  for (const entry of readdirSync(sockDir)) rmSync(join(sockDir, entry), { recursive: true, force: true });
  if (runAs) chownSync(sockDir, runAs.uid, runAs.gid);
  chmodSync(sockDir, 0o700);
}

/**
 * The simulator's program in its sandbox: the one place every simulator's command line is
 * built, whatever its type (the catalog entry names its program and what it needs of the host;
 * its socket directory, its cgroups, its uid and the sandbox itself are added here).
 */
function sandboxed(entry: CatalogEntry, instance: SimulatorInstance, sandbox: SimulatorSandbox): string[] {
  const program = entry.command(instance);
  return sandbox({
    hostname: instance.name,
    runAs: instance.runAs,
    mounts: [{ src: join(instance.socketDir, instance.name), dest: SANDBOX_SOCKETS, writable: true }, ...program.mounts],
    cgroupProcs: instance.cgroupProcs,
    // The sandbox's options (host paths) and identity files: the server's, never shown inside.
    stateDir: join(instance.dir, 'sandbox'),
    argv: program.argv,
    cwd: program.cwd ?? '/tmp',
  });
}

/** Where a start's time went, phase by phase (milliseconds), for the caller's log. */
export type StartTimings = Record<string, number>;

/** Records into `timings` the time since the previous mark under each name given. */
function timer(timings: StartTimings | undefined): (phase: string) => void {
  let last = performance.now();
  return (phase) => {
    const now = performance.now();
    if (timings) timings[phase] = Math.round((timings[phase] ?? 0) + now - last);
    last = now;
  };
}

/** Waits for a real round trip (`attempt`), failing early if the process exits or the attempt says its error is final. */
async function waitReady(
  entry: CatalogEntry,
  attempt: (handle: SimulatorHandle) => Promise<void>,
  handle: SimulatorHandle,
  started: Started,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      await Promise.race([attempt(handle), started.exited]);
      return;
    } catch (err) {
      if (isFinal(err) || processStartTime(handle.pid) !== handle.startTime) throw err;
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`no answer within ${timeoutMs} ms: ${(last as Error).message}`);
    }
    await sleep(entry.pollMs ?? 5);
  }
}

/** Starts the process of a prepared instance and waits until it answers; kills it and says why when it does not. */
async function launch(
  entry: CatalogEntry,
  instance: SimulatorInstance,
  sandbox: SimulatorSandbox,
  timeoutMs: number,
  timings?: StartTimings,
): Promise<SimulatorHandle> {
  const mark = timer(timings);
  await prepareSocketDir(instance.socketDir, join(instance.socketDir, instance.name), instance.runAs);
  mark('socketDirMs');
  let started: Started | undefined;
  try {
    started = await spawnDetached({ argv: sandboxed(entry, instance, sandbox), cwd: '/', logFile: instance.logFile });
    mark('spawnMs');
    const handle: SimulatorHandle = { ...instance, pid: started.pid, startTime: started.startTime };
    if (entry.readyAndInitialise) {
      await waitReady(entry, entry.readyAndInitialise.bind(entry), handle, started, timeoutMs);
      mark('readyMs');
    } else {
      await waitReady(entry, entry.probe.bind(entry), handle, started, timeoutMs);
      mark('readyMs');
      await entry.initialise(handle);
      mark('initialiseMs');
    }
    // Ready: its socket directories are taken from it until it is started again (socketGuard.ts).
    lockSocketDirs([join(instance.socketDir, instance.name), ...(entry.extraSocketDirs?.(instance) ?? [])], instance.runAs);
    mark('lockMs');
    return handle;
  } catch (err) {
    if (started?.startTime !== undefined) await stopGroup(started.pid, started.startTime, 'SIGKILL', 0).catch(() => undefined);
    const log = (await readTail(instance.logFile, 2000)).trim();
    throw new AtelierError(
      'UNAVAILABLE',
      `${instance.type} simulator ${instance.name} did not start: ${(err as Error).message}` +
        (log ? `\n--- last lines of ${instance.logFile}:\n${log}` : ''),
      { type: instance.type, name: instance.name, logFile: instance.logFile, log },
      { cause: err },
    );
  }
}

/**
 * Starts one simulator (fresh state) for a workshop: a sandbox of its own (`spec.sandbox`),
 * detached, in its own process group, running as `spec.runAs`, listening only on a unix socket
 * under `spec.socketDir`. Resolves once a real round trip (a query, a PING) succeeded.
 */
export async function startSimulator(spec: SimulatorSpec, timings?: StartTimings): Promise<SimulatorHandle> {
  const mark = timer(timings);
  const entry = checkSpec(spec);
  await assertNameFree(join(spec.socketDir, spec.name), spec.name);
  const instance = await entry.prepare(spec, join(spec.socketDir, spec.name), timings);
  if (spec.cgroupProcs) instance.cgroupProcs = spec.cgroupProcs;
  mark('prepareMs');
  return launch(entry, instance, spec.sandbox, spec.startTimeoutMs ?? entry.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS, timings);
}

/** True while the simulator's process is the very one that was started (a reused pid is not). */
export function isAlive(handle: SimulatorHandle): boolean {
  return processStartTime(handle.pid) === handle.startTime;
}

/** Stops the simulator and every process of its group: its own signal first, SIGKILL after `graceMs`. */
export async function stopSimulator(handle: SimulatorHandle, opts: { graceMs?: number } = {}): Promise<void> {
  const program = isAlive(handle) ? sandboxProgram(handle.pid) : undefined;
  await stopGroup(handle.pid, handle.startTime, CATALOG[handle.type].stopSignal, opts.graceMs ?? DEFAULT_STOP_GRACE_MS, program);
  // A simulator whose socket directory was taken from it once ready (socketGuard.ts) could not
  // remove its sockets and lock files as it stopped: the server does (never a directory, so
  // nothing is walked; a link is removed, not followed).
  const sockDir = join(handle.socketDir, handle.name);
  let entries: string[] = [];
  try {
    entries = readdirSync(sockDir);
  } catch {
    return;
  }
  for (const entry of entries) {
    const path = join(sockDir, entry);
    try {
      if (!lstatSync(path).isDirectory()) rmSync(path, { force: true });
    } catch {
      // Gone meanwhile.
    }
  }
}

/**
 * Returns the simulator to its initial state: redis is emptied in place (connections stay);
 * postgres is stopped, given a fresh copy of the template and started again with its role and
 * database. A simulator that had died is started again. Returns the handle to keep (the pid
 * changes when the process was restarted).
 */
export async function resetSimulator(
  handle: SimulatorHandle,
  opts: { sandbox: SimulatorSandbox; startTimeoutMs?: number },
): Promise<SimulatorHandle> {
  const entry = CATALOG[handle.type];
  if (entry.resetInPlace && isAlive(handle)) {
    await entry.resetInPlace(handle);
    return handle;
  }
  await stopSimulator(handle);
  // The old pid and start time are replaced by the new process's in launch().
  if (entry.refresh) await entry.refresh(handle);
  return launch(entry, handle, opts.sandbox, opts.startTimeoutMs ?? entry.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS);
}

/** Stops the simulator and deletes its directory and its socket directory: nothing of it is left. */
export async function removeSimulator(handle: SimulatorHandle): Promise<void> {
  await stopSimulator(handle);
  rmSync(handle.dir, { recursive: true, force: true });
  rmSync(join(handle.socketDir, handle.name), { recursive: true, force: true });
}

/** The end of the simulator's log (its server's own output), `tailBytes` at most (default 64 KiB). */
export function simulatorLogs(handle: SimulatorHandle, opts: { tailBytes?: number } = {}): Promise<string> {
  return readTail(handle.logFile, opts.tailBytes ?? 65_536);
}

/**
 * Prepares what makes the first start of each type fast (the PostgreSQL template cluster), so
 * that a server can do it at boot rather than during a workshop's first request.
 */
export async function warmSimulators(opts: { cacheDir: string; runAs?: RunAs | undefined }): Promise<void> {
  await warmPostgresTemplate(opts);
}

/**
 * Prepares, in a workshop's own filesystem (`simulatorsDir` = `<workshop root>/simulators`),
 * what makes its first simulator start fast: one spare copy of the PostgreSQL template, which a
 * start renames (a copy from the shared pool cannot be renamed across filesystems). Nothing where
 * the workshop shares the server's filesystem. Counts against the workshop's disk quota.
 */
export async function seedSimulatorSpares(opts: {
  simulatorsDir: string;
  cacheDir: string;
  /** Stops the copy at once (its half-made files are left for the next refill or drop to remove). */
  signal?: AbortSignal | undefined;
}): Promise<void> {
  await seedPostgresSpare(opts);
}

/** Removes what seedSimulatorSpares made, for a workshop that runs no PostgreSQL simulator. */
export async function dropSimulatorSpares(simulatorsDir: string): Promise<void> {
  await dropPostgresSpares(simulatorsDir);
}
