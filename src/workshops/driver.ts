import type { ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import type { WorkshopDisk, WorkshopLimits } from '../core/index.js';
import type { CgroupUsage } from '../sandbox/index.js';
import type { ExecSpec, SandboxHandle, SandboxLayout } from '../sandbox/index.js';

export interface StartRequest {
  id: string;
  uid: number;
  hostname: string;
  limits: WorkshopLimits;
}

/** What to run inside a workshop's sandbox when the caller spawns it itself (a PTY, an SSH channel, an agent session). */
export interface EnterSpec extends Omit<ExecSpec, 'label'> {
  /**
   * The program outlives this server (an agent session, whose holder process runs it): a server
   * started later must not take it for a command its predecessor left behind (`killOrphanExecs`).
   */
  outlivesServer?: boolean;
}

/** How to spawn a program inside a sandbox: its command line and environment. */
export interface SandboxEntry {
  /** The command line to spawn (`argv[0]` is the program). */
  argv: string[];
  /**
   * Its environment: fixed and privileged (the chain before the workshop's program must not see
   * the workshop's PATH or LD_PRELOAD); the workshop's variables ride along under a prefix and
   * become the program's environment only after the privilege drop, never on a command line.
   */
  env: Record<string, string>;
}

/**
 * A runtime driver: where and how workshops run. `WorkshopService` owns the lifecycle (database,
 * locks, egress, simulators) and asks its driver for the sandbox side of each step; the terminals
 * room asks it how to enter a sandbox (`enter`) and to dial a port inside (`connect`), so that
 * neither reaches past it.
 * The local driver (`local/driver.ts`) runs bubblewrap sandboxes on this host; a Kubernetes
 * driver would implement the same calls against its pods.
 */
export interface WorkshopDriver {
  readonly name: string;
  /** Where the workshop's files live on this host (workspace, home, run…). */
  layout(id: string): SandboxLayout;
  /**
   * Creates the workshop's directory (on a filesystem of `diskBytes`, or the default size, where
   * the driver enforces disk quotas); the workspace is created by the clone.
   */
  prepareRoot(id: string, diskBytes?: number | null): Promise<SandboxLayout>;
  /** Why disk quotas are not enforced by this driver (rootless, switched off), or null when they are. */
  readonly diskNote: string | null;
  /** Refuses (INSUFFICIENT_STORAGE) a new workshop of `bytes` when the host would keep too little room for the server's database. */
  admitDisk(bytes: number | null): void;
  /** The workshop's disk usage against its quota. */
  diskOf(id: string): WorkshopDisk;
  /** Hands the cloned workspace to the workshop's uid. */
  adoptWorkspace(id: string, uid: number): Promise<void>;
  start(req: StartRequest): Promise<SandboxHandle>;
  alive(handle: SandboxHandle): boolean;
  frozen(handle: SandboxHandle): boolean;
  /**
   * What the workshop's processes use now (memory, CPU time, processes), each null where this
   * driver cannot tell, with `note` saying why (null when every figure is there).
   */
  usageOf(id: string): CgroupUsage & { note: string | null };
  /** How many processes the kernel's OOM killer killed in the workshop (undefined: the driver cannot tell). */
  oomKills(handle: SandboxHandle): number | undefined;
  canSuspend(): boolean;
  suspend(handle: SandboxHandle): Promise<void>;
  resume(handle: SandboxHandle): Promise<void>;
  /** Runs a command in the sandbox (leading its own process group), pipes for its standard streams. */
  exec(handle: SandboxHandle, spec: ExecSpec): ChildProcess;
  /** How to spawn a program in the sandbox yourself (a PTY, an SSH channel, an agent session's holder). */
  enter(handle: SandboxHandle, spec: EnterSpec): SandboxEntry;
  /**
   * A TCP connection to `port` on the sandbox's own loopback (a tunnel, `ssh -L`), as a socket
   * the server owns (with a file descriptor: tunnels splice it in the kernel); SandboxConnectError
   * when nothing listens there or it does not answer within `timeoutMs` (10 s when unset).
   */
  connect(handle: SandboxHandle, port: number, timeoutMs?: number): Promise<Socket>;
  /** Closes what `connect` keeps open between connections (at the server's shutdown). */
  closeConnections(): void;
  stop(id: string, handle: SandboxHandle | null): Promise<void>;
  /** Removes everything the workshop owned on this host. */
  destroy(id: string, handle: SandboxHandle | null): Promise<void>;
  /** Kills the commands a previous server started in this sandbox and can no longer report. */
  killOrphanExecs(handle: SandboxHandle): number;
  /** Releases what the driver holds for this server at shutdown (workshops outlive it). */
  releaseCgroupBase(): void;
  /** Workshop ids that have something on this host (for orphan clean-up). */
  localIds(): string[];
}
