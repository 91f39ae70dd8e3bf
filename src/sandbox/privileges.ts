import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cgroupSupport } from './cgroups.js';
import { checkSeccomp } from './seccomp.js';

/** How strongly this host can isolate workshops, and what is missing, in plain words. */
export interface IsolationReport {
  rootless: boolean;
  cgroups: boolean;
  /** Protections this host cannot give, each a sentence for the start-up log. */
  missing: string[];
  /** Protections applied to every workshop, each a sentence for the start-up log. */
  applied: string[];
  /** Missing system tools. */
  missingTools: string[];
}

function hasCommand(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * Inspects the host once at server start; what is missing is printed at start. As root each
 * workshop gets a host uid and cgroups of its own; as an ordinary user (rootless) workshops are
 * user namespaces mapped to the server's uid, without limits or suspend. Throws when the
 * system-call filter cannot be applied: no workshop runs without it.
 */
export function inspectIsolation(isRoot: boolean): IsolationReport {
  const missing: string[] = [];
  if (!isRoot) {
    missing.push(
      'not root: workshops run in user namespaces as your own uid (uid 0 inside, no capabilities), not as a host uid of their own each',
    );
    missing.push('not root: no per-workshop memory, CPU or process limits, and no suspend (cgroups need root)');
  }
  const cg = isRoot ? cgroupSupport() : { ok: false, reason: undefined };
  if (!cg.ok && cg.reason) missing.push(cg.reason);
  const filter = checkSeccomp();
  const applied = [
    `system-call filter: ${filter.profile} (${filter.arch}), ${filter.rules} rules (${filter.allowed} allowed, ${filter.byArgument} by argument, ${filter.refused} refused: namespaces, mounts, keyring, bpf, perf, userfaultfd, io_uring, kexec, modules, …), applied to every workshop and simulator process`,
  ];
  return { rootless: !isRoot, cgroups: cg.ok, missing, applied, missingTools: missingTools(isRoot) };
}

/** The system tools the sandboxes need that this host lacks (checked by `server start` and `server doctor`). */
export function missingTools(isRoot: boolean): string[] {
  // python3 opens each workshop's egress listener in its namespace (sandbox/netns.ts); ip brings
  // up a rootless sandbox's loopback.
  const tools = isRoot
    ? ['bwrap', 'nsenter', 'setpriv', 'git', 'python3']
    : ['unshare', 'nsenter', 'setpriv', 'git', 'perl', 'mount', 'pivot_root', 'ip', 'python3'];
  return tools.filter((t) => !hasCommand(t));
}

/** What installs the tools `missingTools` names (Debian and Ubuntu). */
export const INSTALL_TOOLS = 'sudo apt-get install -y bubblewrap util-linux mount git perl iproute2 python3';

/**
 * oom_score_adj the server and its embedded PostgreSQL take where the kernel lets them
 * (CAP_SYS_RESOURCE: root outside a container that drops it). Not -1000: a server that leaks must
 * still be killable rather than take every workshop with it. Where it is refused they stay at 0,
 * still far below a workshop's WORKSHOP_OOM_SCORE_ADJ.
 */
export const SERVER_OOM_SCORE_ADJ = -900;

/**
 * Protects `pid` and, with `children`, its current child processes from the host's OOM killer
 * (children started later inherit the value). Returns false when the kernel refused (not root).
 */
export function protectFromOomKiller(pid: number | 'self', children = false): boolean {
  const pids: string[] = [String(pid)];
  if (children && pid !== 'self') {
    for (const p of readdirSync('/proc')) {
      if (!/^\d+$/.test(p)) continue;
      try {
        const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
        if (stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1] === String(pid)) pids.push(p);
      } catch {
        // exited meanwhile
      }
    }
  }
  let ok = true;
  for (const p of pids) {
    try {
      writeFileSync(`/proc/${p}/oom_score_adj`, String(SERVER_OOM_SCORE_ADJ));
    } catch {
      if (p === String(pid)) ok = false;
    }
  }
  return ok;
}
