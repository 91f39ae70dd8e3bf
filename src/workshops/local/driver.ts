import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, rmdirSync, mkdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import {
  cgroupBase,
  createCgroups,
  destroyCgroups,
  execInSandbox,
  freeze,
  isFrozen,
  isSandboxAlive,
  killSandbox,
  prepareLayout,
  sandboxLayout,
  startSandbox,
  thaw,
  workshopCgroups,
  type CgroupPaths,
  type ExecSpec,
  type SandboxHandle,
  type SandboxLayout,
} from '../../sandbox/index.js';
import { AtelierError, type WorkshopLimits } from '../../core/index.js';

export interface StartRequest {
  id: string;
  uid: number;
  hostname: string;
  limits: WorkshopLimits;
}

/**
 * Runs workshops as bubblewrap sandboxes on this host. One sandbox = one detached `bwrap`
 * whose PID 1 idles; work enters it with nsenter (see README, "Architecture").
 */
export class LocalDriver {
  readonly name = 'local';
  private readonly base: CgroupPaths | null;

  constructor(
    private readonly dataDir: string,
    nodeId: string,
    /** The server is an ordinary user: sandboxes are user namespaces (see SandboxSpec.rootless). */
    readonly rootless: boolean,
    cgroups: boolean,
  ) {
    this.base = cgroups ? cgroupBase(nodeId) : null;
  }

  get workshopsDir(): string {
    return join(this.dataDir, 'workshops');
  }

  layout(id: string): SandboxLayout {
    return sandboxLayout(join(this.workshopsDir, id));
  }

  /** Creates the workshop's directory; the workspace is created by the clone. */
  prepareRoot(id: string): SandboxLayout {
    mkdirSync(this.workshopsDir, { recursive: true, mode: 0o700 });
    const layout = this.layout(id);
    mkdirSync(layout.root, { mode: 0o700 });
    return layout;
  }

  /** Hands the cloned workspace to the workshop's uid. */
  async adoptWorkspace(id: string, uid: number): Promise<void> {
    if (this.rootless) return;
    await chownTree(this.layout(id).workspace, uid);
  }

  async start(req: StartRequest): Promise<SandboxHandle> {
    const root = this.layout(req.id).root;
    prepareLayout({ root, hostname: req.hostname, uid: req.uid, rootless: this.rootless, cgroups: null });
    const cgroups = this.base ? createCgroups(this.base, req.id, req.limits) : null;
    return startSandbox({ root, hostname: req.hostname, uid: req.uid, rootless: this.rootless, cgroups });
  }

  alive(handle: SandboxHandle): boolean {
    return isSandboxAlive(handle);
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
    return execInSandbox(handle, spec);
  }

  /** Kills the sandbox and any stray process that names its directories, removes its cgroups. */
  async stop(id: string, handle: SandboxHandle | null): Promise<void> {
    if (handle) await killSandbox(handle);
    // Without a handle (the server died before saving it) the cgroups still hold the processes.
    if (this.base) await destroyCgroups(workshopCgroups(this.base, id));
    const marker = this.layout(id).workspace;
    for (const pid of findProcesses((argv) => (argv[0]?.endsWith('bwrap') || argv[0] === 'unshare') && argv.includes(marker))) {
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
    await removeTree(this.layout(id).root, this.rootless);
  }

  /**
   * Kills commands that a previous server process started in this sandbox and can no longer
   * report (it was killed mid-exec): each exec leads its own process group, host side included.
   */
  killOrphanExecs(handle: SandboxHandle): number {
    const orphans = findProcesses(
      (argv, pid) =>
        !!argv[0]?.endsWith('nsenter') &&
        argv[1] === '-t' &&
        argv[2] === String(handle.pid) &&
        // An agent session's chain leads a session its holder started, and outlives the server by design.
        !sessionLeaderParentArgv(pid).some((a) => a.endsWith('/session-holder.py')),
    );
    for (const pid of orphans) {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    return orphans.length;
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

/** The command line of the parent of a process's session leader ([] when any is gone). */
function sessionLeaderParentArgv(pid: number): string[] {
  const field = (p: number | string, i: number): string | undefined => {
    const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[i];
  };
  try {
    const ppid = field(field(pid, 3)!, 1);
    return readFileSync(`/proc/${ppid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
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
