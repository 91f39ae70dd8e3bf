import { execFileSync } from 'node:child_process';
import { cgroupSupport } from './cgroups.js';

/** How strongly this host can isolate workshops, and what is missing, in plain words. */
export interface IsolationReport {
  cgroups: boolean;
  /** Protections this host cannot give, each a sentence for the start-up log. */
  missing: string[];
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
 * The local driver needs root: it gives each workshop a host uid of its own and enters the
 * sandbox's namespaces with nsenter. As an ordinary user, bubblewrap puts the sandbox's
 * namespaces under a user namespace that util-linux 2.38's nsenter cannot enter (EPERM), so
 * exec would not work: the server refuses to start rather than run weaker or half-working.
 */
export function requireRoot(isRoot: boolean): void {
  if (!isRoot) {
    throw new Error(
      'the local workshop driver runs as root for now (a host uid per workshop, cgroup limits, nsenter into each sandbox): ' +
        'start it with `sudo atelier server start`; running as an ordinary user with user namespaces only is not supported yet',
    );
  }
}

/** Inspects the host once at server start; what is missing is printed at start. */
export function inspectIsolation(): IsolationReport {
  const missing: string[] = [];
  const cg = cgroupSupport();
  if (!cg.ok && cg.reason) missing.push(cg.reason);
  missing.push('no seccomp filter yet: the kernel system-call surface is the default one');
  const missingTools = ['bwrap', 'nsenter', 'setpriv', 'git'].filter((t) => !hasCommand(t));
  return { cgroups: cg.ok, missing, missingTools };
}
