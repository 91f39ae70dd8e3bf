import { execFileSync } from 'node:child_process';
import { cgroupSupport } from './cgroups.js';

/** How strongly this host can isolate workshops, and what is missing, in plain words. */
export interface IsolationReport {
  privileged: boolean;
  cgroups: boolean;
  missing: string[];
  /** Missing system tools, with the command that installs them. */
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

/** Inspects the host once at server start; the result is logged and shown by `server doctor`. */
export function inspectIsolation(isRoot: boolean): IsolationReport {
  const missing: string[] = [];
  const cg = cgroupSupport(isRoot);
  if (!isRoot) {
    missing.push('not root: every workshop runs as the server user (inside a user namespace), not as a host uid of its own');
  }
  if (!cg.ok && cg.reason) missing.push(cg.reason);
  missing.push('no seccomp filter yet: the kernel system-call surface is the default one');
  const missingTools = ['bwrap', 'nsenter', 'setpriv', 'git'].filter((t) => !hasCommand(t));
  return { privileged: isRoot, cgroups: cg.ok, missing, missingTools };
}
