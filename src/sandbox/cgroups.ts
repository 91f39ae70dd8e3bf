import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** Controllers Atelier uses, each a separate hierarchy on cgroup v1. */
export const CONTROLLERS = ['memory', 'cpu', 'pids', 'freezer'] as const;
export type Controller = (typeof CONTROLLERS)[number];
/**
 * A workshop's (or their parent's) cgroup in each hierarchy. `cpuacct`: where the cpuacct
 * controller is a hierarchy of its own (not mounted with cpu), the group that counts the CPU time
 * its processes use; absent where it is mounted with cpu (the time is read in `cpu`), where there
 * is no cpuacct, and in the handles of workshops started before CPU time was counted.
 */
export type CgroupPaths = Record<Controller, string> & { cpuacct?: string };

const ROOT = '/sys/fs/cgroup';

/**
 * Where CPU time is counted: `cpu` when cpuacct shares the cpu hierarchy (`cpu,cpuacct`),
 * `cpuacct` when it is a hierarchy of its own (the processes join it too, for the count only:
 * nothing is limited there), undefined without it.
 */
function cpuacctHierarchy(): 'cpu' | 'cpuacct' | undefined {
  if (existsSync(join(ROOT, 'cpu', 'cpuacct.usage'))) return 'cpu';
  if (existsSync(join(ROOT, 'cpuacct', 'cgroup.procs'))) return 'cpuacct';
  return undefined;
}

/** Every directory of `paths`, cpuacct's included when it has one. */
function allDirs(paths: CgroupPaths): string[] {
  return [...CONTROLLERS.map((c) => paths[c]), ...(paths.cpuacct !== undefined ? [paths.cpuacct] : [])];
}

export interface CgroupSupport {
  ok: boolean;
  reason: string | undefined;
}

/** Whether per-workshop cgroups (v1: memory, cpu, pids, freezer) can be made here. */
export function cgroupSupport(): CgroupSupport {
  const missing = CONTROLLERS.filter((c) => !existsSync(join(ROOT, c, 'cgroup.procs')));
  if (missing.length > 0) {
    const v2 = existsSync(join(ROOT, 'cgroup.controllers'));
    return {
      ok: false,
      reason: v2
        ? 'this host uses cgroup v2 only; Atelier drives cgroup v1 controllers so far: no per-workshop limits or freezer'
        : `cgroup v1 controllers missing: ${missing.join(', ')}`,
    };
  }
  return { ok: true, reason: undefined };
}

function ownPath(controller: Controller | 'cpuacct'): string {
  // Nest under the server's own cgroup so that whoever supervises the server also holds its workshops.
  for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const [, ctrls, path] = line.split(':');
    if (ctrls !== undefined && path !== undefined && ctrls.split(',').includes(controller)) return path;
  }
  return '/';
}

/** The parent directories for this server's workshops, one per controller. */
export function cgroupBase(nodeId: string): CgroupPaths {
  const out = {} as CgroupPaths;
  for (const c of CONTROLLERS) out[c] = join(ROOT, c, ownPath(c), 'atelier', nodeId);
  if (cpuacctHierarchy() === 'cpuacct') out.cpuacct = join(ROOT, 'cpuacct', ownPath('cpuacct'), 'atelier', nodeId);
  return out;
}

/** A workshop's cgroups under this server's parents. */
export function workshopCgroups(base: CgroupPaths, id: string): CgroupPaths {
  const paths = {} as CgroupPaths;
  for (const c of CONTROLLERS) paths[c] = join(base[c], id);
  if (base.cpuacct !== undefined) paths.cpuacct = join(base.cpuacct, id);
  return paths;
}

/** Creates the workshop's cgroups with its limits; returns their paths. */
export function createCgroups(base: CgroupPaths, id: string, limits: { cpus: number; memoryBytes: number; pids: number }): CgroupPaths {
  const paths = workshopCgroups(base, id);
  for (const dir of allDirs(paths)) mkdirSync(dir, { recursive: true });
  writeFileSync(join(paths.memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
  if (existsSync(join(paths.memory, 'memory.memsw.limit_in_bytes'))) {
    writeFileSync(join(paths.memory, 'memory.memsw.limit_in_bytes'), String(limits.memoryBytes));
  }
  writeFileSync(join(paths.cpu, 'cpu.cfs_period_us'), '100000');
  writeFileSync(join(paths.cpu, 'cpu.cfs_quota_us'), String(Math.max(1000, Math.round(limits.cpus * 100000))));
  writeFileSync(join(paths.pids, 'pids.max'), String(limits.pids));
  return paths;
}

/** The `cgroup.procs` files a new process must write its pid into. */
export function procsFiles(paths: CgroupPaths): string[] {
  return allDirs(paths).map((dir) => join(dir, 'cgroup.procs'));
}

export function tasks(paths: CgroupPaths): number[] {
  try {
    return readFileSync(join(paths.pids, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function freezerState(paths: CgroupPaths): string {
  return readFileSync(join(paths.freezer, 'freezer.state'), 'utf8').trim();
}

async function waitState(paths: CgroupPaths, want: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (freezerState(paths) === want) return true;
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** Freezes every process of the workshop; true once the kernel reports FROZEN. */
export async function freeze(paths: CgroupPaths): Promise<boolean> {
  writeFileSync(join(paths.freezer, 'freezer.state'), 'FROZEN');
  return waitState(paths, 'FROZEN', 5000);
}

/** Thaws every process of the workshop. */
export async function thaw(paths: CgroupPaths): Promise<boolean> {
  writeFileSync(join(paths.freezer, 'freezer.state'), 'THAWED');
  return waitState(paths, 'THAWED', 5000);
}

export function isFrozen(paths: CgroupPaths): boolean {
  try {
    return freezerState(paths) !== 'THAWED';
  } catch {
    return false;
  }
}

/**
 * A cgroup of its own under a workshop's (a simulator's): it counts against the workshop's
 * limits, is frozen with it, and goes with it. Created if missing.
 */
export function childCgroups(paths: CgroupPaths, name: string): CgroupPaths {
  const out = {} as CgroupPaths;
  for (const c of CONTROLLERS) out[c] = join(paths[c], name);
  if (paths.cpuacct !== undefined) out.cpuacct = join(paths.cpuacct, name);
  for (const dir of allDirs(out)) mkdirSync(dir, { recursive: true });
  return out;
}

function children(paths: CgroupPaths): CgroupPaths[] {
  const names = new Set<string>();
  for (const dir of allDirs(paths)) {
    try {
      for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) names.add(e.name);
    } catch {
      // absent
    }
  }
  return [...names].map((n) => {
    const child = Object.fromEntries(CONTROLLERS.map((c) => [c, join(paths[c], n)])) as CgroupPaths;
    if (paths.cpuacct !== undefined) child.cpuacct = join(paths.cpuacct, n);
    return child;
  });
}

/** Kills every process in the cgroups and their children (frozen first, so that nothing forks away) and removes them. */
export async function destroyCgroups(paths: CgroupPaths): Promise<void> {
  for (const child of children(paths)) await destroyCgroups(child);
  if (!existsSync(paths.freezer)) {
    removeDirs(paths);
    return;
  }
  try {
    await freeze(paths);
  } catch {
    // A cgroup that cannot be frozen is still killed below.
  }
  for (let attempt = 0; attempt < 200; attempt++) {
    const pids = tasks(paths);
    const frozen = readFileSafe(join(paths.freezer, 'cgroup.procs'));
    for (const pid of [...pids, ...frozen]) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    try {
      writeFileSync(join(paths.freezer, 'freezer.state'), 'THAWED');
    } catch {
      // gone
    }
    if (tasks(paths).length === 0 && readFileSafe(join(paths.freezer, 'cgroup.procs')).length === 0) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  removeDirs(paths);
}

/** What a workshop's processes use now, as its cgroups count it; null where a figure cannot be read. */
export interface CgroupUsage {
  /** Memory charged to it (v1 `memory.usage_in_bytes`: page cache included, which the kernel reclaims before the limit bites). */
  memoryBytes: number | null;
  /** The most it was ever charged (v1 `memory.max_usage_in_bytes`). */
  memoryPeakBytes: number | null;
  /** CPU time of all its processes, living and gone, since its cgroups were made (cpuacct.usage, in µs). */
  cpuUsec: number | null;
  /** Processes (tasks) in it now (`pids.current`): simulators' included. */
  pids: number | null;
}

function readNumber(path: string): number | null {
  try {
    const n = Number(readFileSync(path, 'utf8').trim());
    return Number.isFinite(n) ? n : null;
  } catch {
    return null;
  }
}

/** Reads a workshop's figures from its cgroups (hierarchical: its simulators' child groups count in). */
export function cgroupUsage(paths: CgroupPaths): CgroupUsage {
  const ns = readNumber(join(paths.cpuacct ?? paths.cpu, 'cpuacct.usage'));
  return {
    memoryBytes: readNumber(join(paths.memory, 'memory.usage_in_bytes')),
    memoryPeakBytes: readNumber(join(paths.memory, 'memory.max_usage_in_bytes')),
    cpuUsec: ns === null ? null : Math.round(ns / 1000),
    pids: readNumber(join(paths.pids, 'pids.current')),
  };
}

function readFileSafe(path: string): number[] {
  try {
    return readFileSync(path, 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function removeDirs(paths: CgroupPaths): void {
  for (const dir of allDirs(paths)) {
    try {
      rmdirSync(dir);
    } catch {
      // absent, or still busy: reported by the caller's reconcile
    }
  }
}

/**
 * oom_score_adj of every workshop and simulator process, set as it enters its sandbox: the
 * host's OOM killer takes them long before the server and its PostgreSQL (0, or
 * SERVER_OOM_SCORE_ADJ where the kernel lets the server lower its own). Raising one's own score
 * needs no privilege, so this holds rootless too; where the writer has CAP_SYS_RESOURCE the
 * kernel also makes it the process's floor (a workshop cannot lower it again).
 */
export const WORKSHOP_OOM_SCORE_ADJ = 500;

/** What the server keeps for itself and its PostgreSQL over all workshops together. */
export interface ServerReserve {
  /** Memory no workshop may take: all workshops together get at most the host's (or the server's cgroup's) memory minus this. */
  memoryBytes: number;
  /**
   * cpu.shares of all workshops together (ATELIER_WORKSHOPS_CPU_SHARES, 256). On cgroup v1 the
   * workshops' group competes with each runnable thread of the server's cgroup (the server, its
   * PostgreSQL, their helpers) as one entity: 1024 per thread at nice 0 against this, spread
   * over the cores the workshops keep busy. At 256 a server thread that wants the CPU gets about
   * 8/9 of a core (about 2/3 at the kernel's default 1024) even when workshops keep every core
   * busy; with the server idle the workshops have every core (shares only weigh contention; each
   * workshop's cpus quota still caps it). Lower starves the workshops whenever anything else on
   * the host is busy (docs/server.md).
   */
  cpuShares: number;
}

/** What applyServerReserve set, for the start-up log. */
export interface AppliedReserve {
  /** The memory limit of all workshops together (`atelier/<nodeId>`'s memory.limit_in_bytes). */
  workshopsMemoryBytes: number;
  /** The memory the server's cgroup may use at most (the host's, or a smaller limit set above it). */
  availableBytes: number;
  /** cpu.shares of the workshops' group, beside 1024 for each of the server's threads. */
  cpuShares: number;
  /** Why the memory limit could not be set (the workshops already use more), when it could not. */
  warning: string | undefined;
}

/** The memory the processes of the cgroup at `dir` may use at most: its own or an ancestor's limit, or the host's. */
function memoryAvailable(dir: string, hostBytes: number): number {
  try {
    const m = /^hierarchical_memory_limit (\d+)$/m.exec(readFileSync(join(dir, 'memory.stat'), 'utf8'));
    const limit = m ? Number(m[1]) : Infinity;
    return Math.min(hostBytes, limit);
  } catch {
    return hostBytes;
  }
}

function writeMemoryLimit(dir: string, bytes: number): void {
  const memsw = join(dir, 'memory.memsw.limit_in_bytes');
  const hasMemsw = existsSync(memsw);
  // memory.limit_in_bytes may never exceed memory.memsw.limit_in_bytes: raise memsw first, lower it last.
  const current = Number(readFileSync(join(dir, 'memory.limit_in_bytes'), 'utf8').trim());
  if (hasMemsw && bytes > current) writeFileSync(memsw, String(bytes));
  writeFileSync(join(dir, 'memory.limit_in_bytes'), String(bytes));
  if (hasMemsw && bytes <= current) writeFileSync(memsw, String(bytes));
}

/**
 * Keeps a share of the host for the server and its PostgreSQL over all of this server's
 * workshops together (root, cgroup v1): the workshops' parent `atelier/<nodeId>` gets a memory
 * limit of the memory available minus the reserve, and the workshops' groups a low cpu.shares.
 * Made once at start; re-applied at every start (a changed reserve takes
 * effect then). Throws with what to do when the reserve leaves no memory to workshops.
 */
export function applyServerReserve(base: CgroupPaths, reserve: ServerReserve, hostBytes: number): AppliedReserve {
  for (const dir of allDirs(base)) mkdirSync(dir, { recursive: true });
  const availableBytes = memoryAvailable(dirname(dirname(base.memory)), hostBytes);
  const workshopsMemoryBytes = availableBytes - reserve.memoryBytes;
  if (workshopsMemoryBytes < 256 << 20) {
    throw new Error(
      `the server's memory reserve (${Math.round(reserve.memoryBytes / 2 ** 20)}m) leaves less than 256m of the ${Math.round(availableBytes / 2 ** 20)}m available to workshops: set ATELIER_SERVER_RESERVE_MEMORY lower`,
    );
  }
  let warning: string | undefined;
  try {
    writeMemoryLimit(base.memory, workshopsMemoryBytes);
  } catch (err) {
    // EBUSY: the workshops already use more than the new limit (a reserve raised across a
    // restart); the server still starts, and says so.
    warning = `could not limit the workshops' memory to ${Math.round(workshopsMemoryBytes / 2 ** 20)}m (${(err as Error).message}): the running workshops use more; stop some and restart the server, or set ATELIER_SERVER_RESERVE_MEMORY lower`;
  }
  // The `atelier` directory is the entity that competes with the server's own threads in its
  // cgroup (several servers of one host share it); `<nodeId>` is set alike for clarity.
  writeFileSync(join(dirname(base.cpu), 'cpu.shares'), String(reserve.cpuShares));
  writeFileSync(join(base.cpu, 'cpu.shares'), String(reserve.cpuShares));
  return { workshopsMemoryBytes, availableBytes, cpuShares: reserve.cpuShares, warning };
}
