/** The simulator types this server can run. Adding one means adding `catalog/<type>.ts` and its test. */
export const SIMULATOR_TYPES = ['postgres', 'redis', 'localstack', 'wiremock'] as const;
export type SimulatorType = (typeof SIMULATOR_TYPES)[number];

/**
 * The name each type gets when none is given: the workshop reaches a simulator at
 * `<name>.atelier.internal`, so these are the names of the specification (`aws.atelier.internal`
 * for localstack, `mock.atelier.internal` for wiremock).
 */
export const DEFAULT_SIMULATOR_NAMES: Record<SimulatorType, string> = {
  postgres: 'postgres',
  redis: 'redis',
  localstack: 'aws',
  wiremock: 'mock',
};

/** The AWS services a `localstack` simulator can run behind its one edge endpoint. */
export const AWS_SERVICES = ['s3', 'sqs', 'dynamodb'] as const;
export type AwsService = (typeof AWS_SERVICES)[number];

/** The unprivileged host user a simulator runs as (the workshop's own uid when the server is root). */
export interface RunAs {
  uid: number;
  gid: number;
}

/** One host path shown inside a simulator's sandbox (see SimulatorSandbox). */
export interface SimulatorMount {
  src: string;
  dest: string;
  writable?: boolean;
}

/**
 * Builds the command line that runs a simulator's program in a sandbox of its own (the
 * workshops' `simulatorSandboxArgv` from src/sandbox, given by the caller: this folder does not
 * depend on that one). Every simulator starts through it: there is no way to start one without.
 */
export type SimulatorSandbox = (spec: {
  hostname: string;
  runAs: RunAs | undefined;
  mounts: SimulatorMount[];
  cgroupProcs?: string[] | undefined;
  stateDir: string;
  argv: string[];
  cwd: string;
}) => string[];

/** What the caller asks for: one simulator of one workshop. */
export interface SimulatorSpec {
  type: SimulatorType;
  /** DNS label, unique in the workshop: reachable inside it as `<name>.atelier.internal`. */
  name: string;
  /** Requested version ("15", "16-alpine", "7.0"): only its major number is matched against what is installed. */
  version?: string | undefined;
  /** Container-style settings (postgres: POSTGRES_DB, POSTGRES_USER, POSTGRES_PASSWORD). */
  env?: Record<string, string> | undefined;
  /** Type-specific options (postgres: database, user, password, superuser); they win over `env`. */
  options?: Record<string, unknown> | undefined;
  /** localstack only: the AWS services to run (default: all of AWS_SERVICES). */
  services?: string[] | undefined;
  /**
   * wiremock only: absolute host path of a WireMock root (`mappings/`, `__files/`), already
   * checked by the caller to lie inside the workshop's workspace. Copied at each start and reset.
   */
  stubsDirectory?: string | undefined;
  /** How the simulator is sandboxed (required: a simulator is as untrusted as the agent that configures it). */
  sandbox: SimulatorSandbox;
  /** Host directory owned by this instance (data, log); created if missing. */
  dir: string;
  /**
   * Host directory of the workshop's simulator sockets, closed to other users; the simulator
   * listens on a socket in `<socketDir>/<name>/` (bound into its sandbox) and nowhere else.
   */
  socketDir: string;
  /** Host directory for shared, pre-initialised templates (postgres clusters), e.g. DATA_DIR/simulators. */
  cacheDir: string;
  /** Unprivileged host user to run as (root mode); undefined runs as the current user (rootless: must not be root). */
  runAs?: RunAs | undefined;
  /**
   * `cgroup.procs` files the simulator's process joins before it starts (the workshop's own
   * child cgroups: it then counts against the workshop's limits and is frozen with it). Needs root.
   */
  cgroupProcs?: string[] | undefined;
  /** How long the start (process up and a real round trip answered) may take; default 20 s (wiremock: 60 s, a JVM). */
  startTimeoutMs?: number | undefined;
}

/**
 * A running simulator. Plain JSON: the caller may persist it and act on it after a server
 * restart (the process is detached and outlives the server).
 */
export interface SimulatorHandle {
  type: SimulatorType;
  name: string;
  /** Version actually running, e.g. "15.18" or "7.0.15". */
  version: string;
  pid: number;
  /** Start time of `pid` (field 22 of /proc/PID/stat): a reused pid is never mistaken for it. */
  startTime: string;
  dir: string;
  socketDir: string;
  /** Host path of the unix socket (when `tcp` is set, only a marker of the instance's socket directory). */
  socket: string;
  /**
   * Handles recorded by servers before simulators were sandboxed: a TCP-only simulator listened
   * on this host loopback address. New handles never have it (every simulator has a socket).
   */
  tcp?: { host: '127.0.0.1'; port: number } | undefined;
  /** The same path relative to `socketDir` (what an in-workshop forwarder dials under the bind). */
  socketName: string;
  cacheDir: string;
  runAs?: RunAs | undefined;
  logFile: string;
  /** The cgroups it runs in (see SimulatorSpec.cgroupProcs). */
  cgroupProcs?: string[] | undefined;
  /** Where the workshop reaches it, through the caller's forwarder and hosts entry. */
  endpoint: { host: string; port: number };
  /** Connection details for the workshop's environment (DATABASE_URL, PG*, REDIS_URL…). */
  env: Record<string, string>;
  /** Type-specific settings needed to reset it (postgres: database, user, password, superuser). */
  settings: Record<string, string>;
}
