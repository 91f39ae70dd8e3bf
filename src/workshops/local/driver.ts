import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync, rmdirSync, mkdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { totalmem } from 'node:os';
import type { ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import {
  applyServerReserve,
  cgroupBase,
  cgroupSupport,
  cgroupUsage,
  createCgroups,
  diskUsage,
  freeBytes,
  WorkshopDisks,
  destroyCgroups,
  entryOf,
  execInSandbox,
  freeze,
  isFrozen,
  isSandboxAlive,
  killSandbox,
  nsenterArgs,
  prepareLayout,
  privilegedEnv,
  sandboxArgv,
  sandboxLayout,
  seccompWrapOnHost,
  startSandbox,
  thaw,
  workshopCgroups,
  type AppliedReserve,
  type CgroupPaths,
  type CgroupUsage,
  type ServerReserve,
  type ExecSpec,
  type SandboxHandle,
  type Runner,
  type SandboxLayout,
} from '../../sandbox/index.js';
import { AtelierError, formatSize, type WorkshopDisk } from '../../core/index.js';
import type { EnterSpec, SandboxEntry, StartRequest, WorkshopDriver } from '../driver.js';
import { SandboxConnectors } from './connector.js';

/** Disk quotas (see sandbox/disk.ts): off in rootless mode, which cannot loop-mount. */
export interface DiskSettings {
  quota: boolean;
  defaultBytes: number;
  spares: number;
  /** Room kept free on the data dir's filesystem for the server's own database. */
  reserveBytes: number;
  /** Fills a spare disk before a workshop takes it (WorkshopDisksOptions.prepareSpare). */
  prepareSpare?: (root: string, signal: AbortSignal) => Promise<void>;
  /** Runs the disks' commands (WorkshopDisksOptions.run). */
  run?: Runner;
  log: { warn(obj: object, msg?: string): void };
}

/**
 * The label (`ExecSpec.label`) of chains that outlive the server (agent sessions): a server
 * started later finds it in their command line and leaves them running.
 */
const OUTLIVES_SERVER_LABEL = 'atelier-outlives-server';

/** One sandbox's key among the driver's maps: its first process, which a reused pid never matches. */
function sandboxKey(handle: SandboxHandle): string {
  return `${handle.pid}:${handle.startTime}`;
}

/** The fixed environment of a helper entering only the network namespace (never the workshop's). */
const HELPER_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8' };

/**
 * Runs workshops as bubblewrap sandboxes on this host. One sandbox = one detached `bwrap`
 * whose PID 1 idles; work enters it with sandbox-enter (see docs/architecture.md, "Sandboxes").
 */
export class LocalDriver implements WorkshopDriver {
  readonly name = 'local';
  private readonly base: CgroupPaths | null;
  private readonly disks: WorkshopDisks | null;
  /** Why workshops have no enforced quota, when they have none (shown by `server start` and `status`). */
  readonly diskNote: string | null;
  /** Why workshops have no cgroups, so nothing measures what they use (null: they have). */
  private readonly cgroupNote: string | null;
  /** The commands `exec` started, per sandbox, until they end (see `entered`). */
  private readonly execs = new Map<string, Set<ChildProcess>>();

  constructor(
    private readonly dataDir: string,
    nodeId: string,
    /** The server is an ordinary user: sandboxes are user namespaces (see SandboxSpec.rootless). */
    readonly rootless: boolean,
    cgroups: boolean,
    private readonly disk: DiskSettings = { quota: false, defaultBytes: 0, spares: 0, reserveBytes: 0, log: console },
  ) {
    this.base = cgroups ? cgroupBase(nodeId) : null;
    this.cgroupNote = rootless
      ? 'not measured: a rootless server makes no cgroups per workshop (run the server as root for memory, CPU and process figures)'
      : cgroups
        ? null
        : `not measured: ${cgroupSupport().reason ?? 'this host has no cgroups for workshops'}`;
    this.diskNote = rootless
      ? 'not enforced: a rootless server cannot loop-mount a filesystem per workshop (run the server as root for disk quotas)'
      : disk.quota
        ? null
        : 'not enforced: disk quotas are off (ATELIER_DISK_QUOTA=off)';
    this.disks =
      this.diskNote === null
        ? new WorkshopDisks({
            dir: join(dataDir, 'disks'),
            defaultBytes: disk.defaultBytes,
            spares: disk.spares,
            log: disk.log,
            ...(disk.prepareSpare ? { prepareSpare: disk.prepareSpare } : {}),
            ...(disk.run ? { run: disk.run } : {}),
          })
        : null;
    this.disks?.init();
  }

  /**
   * Refuses a new workshop of `bytes` when the data dir's filesystem would keep less than the
   * reserve for the server's database once every workshop (this one too) filled its quota.
   */
  admitDisk(bytes: number | null): void {
    const free = freeBytes(this.dataDir);
    const promised = this.disks?.promisedBytes() ?? 0;
    const wanted = this.disks ? (bytes ?? this.disk.defaultBytes) : 0;
    if (free - promised - wanted >= this.disk.reserveBytes) return;
    throw new AtelierError(
      'INSUFFICIENT_STORAGE',
      `the server's data dir ${this.dataDir} is nearly full: ${formatSize(free)} free, ${formatSize(promised)} promised to existing workshops, ` +
        `${formatSize(this.disk.reserveBytes)} kept for the server's database (ATELIER_DISK_RESERVE)` +
        (wanted ? `, ${formatSize(wanted)} asked` : '') +
        ': delete workshops you no longer need (`atelier workshops delete ID`), free space on that filesystem' +
        (wanted ? ', or ask for a smaller --disk' : ''),
      { freeBytes: free, promisedBytes: promised, reserveBytes: this.disk.reserveBytes },
    );
  }

  /** The workshop's disk usage against its quota. */
  diskOf(id: string): WorkshopDisk {
    const root = this.layout(id).root;
    let usage: { quotaBytes: number; usedBytes: number } | null = null;
    try {
      usage = diskUsage(root);
    } catch {
      // no directory (a workshop that failed before it had one)
    }
    if (this.disks?.has(id) && usage) return { enforced: true, quotaBytes: usage.quotaBytes, usedBytes: usage.usedBytes, note: null };
    return {
      enforced: false,
      quotaBytes: null,
      usedBytes: null,
      note: this.diskNote ?? 'not enforced: this workshop was created before disk quotas (recreate it to get one)',
    };
  }

  get workshopsDir(): string {
    return join(this.dataDir, 'workshops');
  }

  layout(id: string): SandboxLayout {
    return sandboxLayout(join(this.workshopsDir, id));
  }

  /** Creates the workshop's directory, its own filesystem of `diskBytes` with quotas; the workspace is created by the clone. */
  async prepareRoot(id: string, diskBytes: number | null = null): Promise<SandboxLayout> {
    mkdirSync(this.workshopsDir, { recursive: true, mode: 0o700 });
    const layout = this.layout(id);
    mkdirSync(layout.root, { mode: 0o700 });
    if (this.disks) await this.disks.attach(id, layout.root, diskBytes ?? this.disk.defaultBytes);
    return layout;
  }

  /** Hands the cloned workspace to the workshop's uid. */
  async adoptWorkspace(id: string, uid: number): Promise<void> {
    if (this.rootless) return;
    await chownTree(this.layout(id).workspace, uid);
  }

  async start(req: StartRequest): Promise<SandboxHandle> {
    const root = this.layout(req.id).root;
    // After a host reboot the workshop's filesystem is no longer mounted.
    if (this.disks) await this.disks.ensureMounted(req.id, root);
    prepareLayout({ root, hostname: req.hostname, uid: req.uid, rootless: this.rootless, cgroups: null });
    const cgroups = this.base ? createCgroups(this.base, req.id, req.limits) : null;
    return startSandbox({ root, hostname: req.hostname, uid: req.uid, rootless: this.rootless, cgroups });
  }

  alive(handle: SandboxHandle): boolean {
    return isSandboxAlive(handle);
  }

  /**
   * What the workshop uses, read from its cgroups (cgroup v1: memory, cpuacct, pids), simulators
   * included; nothing without cgroups (rootless, cgroup v2), and a figure whose file cannot be
   * read is null (the workshop stopped: its cgroups are gone; CPU time of a workshop started
   * by an older server, which did not count it).
   */
  usageOf(id: string): CgroupUsage & { note: string | null } {
    if (!this.base) return { memoryBytes: null, memoryPeakBytes: null, cpuUsec: null, pids: null, note: this.cgroupNote };
    const u = cgroupUsage(workshopCgroups(this.base, id));
    const note =
      u.memoryBytes === null && u.pids === null
        ? 'not measured: the workshop has no cgroups on its node now (it is not running)'
        : u.cpuUsec === null
          ? 'CPU time not counted: the workshop was started by an older server (counted from its next start) or this host has no cpuacct controller'
          : null;
    return { ...u, note };
  }

  /**
   * How many processes the kernel's OOM killer killed in the workshop's memory cgroup
   * (cgroup v1 `memory.oom_control`, line `oom_kill`); undefined without a memory cgroup.
   */
  oomKills(handle: SandboxHandle): number | undefined {
    if (!handle.cgroups) return undefined;
    try {
      const m = /^oom_kill (\d+)$/m.exec(readFileSync(join(handle.cgroups.memory, 'memory.oom_control'), 'utf8'));
      return m ? Number(m[1]) : undefined;
    } catch {
      return undefined;
    }
  }

  frozen(handle: SandboxHandle): boolean {
    return handle.cgroups !== null && isFrozen(handle.cgroups);
  }

  canSuspend(): boolean {
    return this.base !== null;
  }

  async suspend(handle: SandboxHandle): Promise<void> {
    if (!handle.cgroups) throw new Error('no freezer');
    await this.entered(handle);
    if (!(await freeze(handle.cgroups))) {
      // Never leave it half-frozen: every later exec would hang.
      await thaw(handle.cgroups);
      throw new AtelierError('SANDBOX_FAILED', 'the kernel did not finish freezing the workshop within 5 s; it was left running');
    }
  }

  async resume(handle: SandboxHandle): Promise<void> {
    if (!handle.cgroups) return;
    await thaw(handle.cgroups);
  }

  exec(handle: SandboxHandle, spec: ExecSpec): ChildProcess {
    const child = execInSandbox(handle, spec);
    // Until it ends, a suspend first waits for it to be in the freezer cgroup (entered, below).
    const key = sandboxKey(handle);
    const set = this.execs.get(key) ?? new Set<ChildProcess>();
    this.execs.set(key, set);
    set.add(child);
    child.once('exit', () => {
      set.delete(child);
      if (set.size === 0 && this.execs.get(key) === set) this.execs.delete(key);
    });
    child.once('error', () => set.delete(child));
    return child;
  }

  /**
   * Before a freeze: every command `exec` started in the sandbox has entered its freezer cgroup
   * (or ended), at most 1 s. A command still on its way in (sandbox-enter joins the cgroups first
   * thing) would otherwise escape the freeze and run on while the workshop is Suspended.
   */
  private async entered(handle: SandboxHandle): Promise<void> {
    const freezer = handle.cgroups?.freezer;
    const execs = this.execs.get(sandboxKey(handle));
    if (!freezer || !execs) return;
    const suffix = `:freezer:${freezer.replace(/^\/sys\/fs\/cgroup\/freezer/, '')}`;
    const deadline = Date.now() + 1000;
    for (const exec of execs) {
      while (Date.now() < deadline) {
        let groups: string;
        try {
          groups = readFileSync(`/proc/${exec.pid}/cgroup`, 'utf8');
        } catch {
          break; // ended
        }
        if (groups.split('\n').some((l) => l.endsWith(suffix))) break;
        await new Promise((r) => setTimeout(r, 1));
      }
    }
  }

  enter(handle: SandboxHandle, spec: EnterSpec): SandboxEntry {
    const { outlivesServer, ...exec } = spec;
    const marked: ExecSpec = outlivesServer ? { ...exec, label: OUTLIVES_SERVER_LABEL } : exec;
    return { argv: sandboxArgv(handle, marked), env: privilegedEnv(marked) };
  }

  // One long-lived connect helper per workshop in use, in its network namespace only (connector.ts).
  private readonly connectors = new SandboxConnectors((handle: SandboxHandle, argv: string[]): SandboxEntry => ({
    argv: ['/usr/bin/nsenter', ...nsenterArgs(handle, ['-n']), '--', ...seccompWrapOnHost(argv)],
    env: { ...HELPER_ENV },
  }));

  connect(handle: SandboxHandle, port: number, timeoutMs?: number): Promise<Socket> {
    return this.connectors.connect(handle, port, timeoutMs);
  }

  closeConnections(): void {
    this.connectors.close();
  }

  /** Kills the sandbox and any stray process that names its directories, removes its cgroups. */
  async stop(id: string, handle: SandboxHandle | null): Promise<void> {
    if (handle) await killSandbox(handle);
    // Without a handle (the server died before saving it) the cgroups still hold the processes.
    if (this.base) await destroyCgroups(workshopCgroups(this.base, id));
    const { workspace: marker, log } = this.layout(id);
    // bwrap's command line names no path (its options come from a pipe): its output, the workshop's log, does.
    const isOurs = (argv: string[], pid: number): boolean =>
      (argv[0]?.endsWith('bwrap') && stdoutOf(pid) === log) || (argv[0] === 'unshare' && argv.includes(marker));
    for (const pid of findProcesses(isOurs)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
  }

  /** Removes everything the workshop owned on this host. */
  async destroy(id: string, handle: SandboxHandle | null): Promise<void> {
    await this.stop(id, handle);
    if (this.disks) await this.disks.detach(id, this.layout(id).root);
    await removeTree(this.layout(id).root, this.rootless);
  }

  /**
   * Kills commands that a previous server process started in this sandbox and can no longer
   * report (it was killed mid-exec): each exec leads its own process group, host side included.
   */
  killOrphanExecs(handle: SandboxHandle): number {
    const orphans = findProcesses((argv) => {
      const entry = entryOf(argv);
      // An agent session's entry (marked by `enter(…, { outlivesServer })`) outlives the server by design.
      return entry?.target === handle.pid && entry.label !== OUTLIVES_SERVER_LABEL;
    });
    for (const pid of orphans) {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    return orphans.length;
  }

  /**
   * Keeps memory and CPU for the server and its PostgreSQL over all workshops together (see
   * applyServerReserve); null without cgroups (rootless, cgroup v2), where nothing is kept.
   */
  reserveForServer(reserve: ServerReserve): AppliedReserve | null {
    return this.base ? applyServerReserve(this.base, reserve, totalmem()) : null;
  }

  /** Removes this server's cgroup parents when no workshop is left in them (at shutdown). */
  releaseCgroupBase(): void {
    if (!this.base) return;
    for (const dir of Object.values(this.base)) {
      try {
        rmdirSync(dir);
      } catch {
        // workshops still there (they outlive the server), or already gone
      }
    }
  }

  /** Removes the spare disks (at shutdown); the workshops' own stay mounted for them. */
  async closeDisks(): Promise<void> {
    await this.disks?.close();
  }

  /** Workshop ids that have a directory or a cgroup on this host (for orphan clean-up). */
  localIds(): string[] {
    const ids = new Set<string>();
    const add = (dir: string): void => {
      try {
        for (const e of readdirSync(dir)) if (e.startsWith('ws-')) ids.add(e);
      } catch {
        // absent
      }
    };
    add(this.workshopsDir);
    if (this.base) for (const p of Object.values(this.base)) add(p);
    return [...ids];
  }
}

function stdoutOf(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/fd/1`);
  } catch {
    return undefined;
  }
}

/** Host pids whose command line matches. */
function findProcesses(match: (argv: string[], pid: number) => boolean): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (match(readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0'), Number(entry))) out.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/**
 * Removes a workshop's files whatever the agent made of them: trees deeper than PATH_MAX
 * (GNU rm has no such limit), read-only directories (rootless: the server is not root, so they
 * are made writable first), and never crossing into another file system or following a link.
 */
async function removeTree(path: string, rootless: boolean): Promise<void> {
  const run = (cmd: string, args: string[]): Promise<void> =>
    new Promise((resolve, reject) => {
      execFile(cmd, args, (err, _o, stderr) =>
        err ? reject(new Error(`${cmd} failed on ${path}: ${String(stderr).trim().slice(0, 300)}`)) : resolve(),
      );
    });
  if (rootless && existsSync(path)) await run('chmod', ['-R', 'u+rwX', '--', path]).catch(() => undefined);
  await run('rm', ['-rf', '--one-file-system', '--', path]);
}

function chownTree(path: string, uid: number): Promise<void> {
  // chown -R never follows symlinks planted by the repository; -h changes the links themselves.
  return new Promise((resolve, reject) => {
    execFile('chown', ['-R', '-h', '--', `${uid}:${uid}`, path], (err, _o, stderr) =>
      err ? reject(new Error(`chown failed: ${String(stderr).trim()}`)) : resolve(),
    );
  });
}
