import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, openSync, closeSync, readFileSync, writeFileSync, chownSync } from 'node:fs';
import { join } from 'node:path';
import { procsFiles, destroyCgroups, type CgroupPaths } from './cgroups.js';
import { identityFiles, rootfsArgs } from './rootfs.js';

/** Where a workshop's files live on the host; all of it goes away with the workshop. */
export interface SandboxLayout {
  root: string;
  workspace: string;
  tmp: string;
  home: string;
  etc: string;
  log: string;
}

export function sandboxLayout(root: string): SandboxLayout {
  return {
    root,
    workspace: join(root, 'workspace'),
    tmp: join(root, 'tmp'),
    home: join(root, 'home'),
    etc: join(root, 'etc'),
    log: join(root, 'sandbox.log'),
  };
}

export interface SandboxSpec {
  root: string;
  hostname: string;
  /** Host uid the workshop runs as: its own, shared with no other workshop. */
  uid: number;
  cgroups: CgroupPaths | null;
}

/** What the server keeps to find a running sandbox again, also after its own restart. */
export interface SandboxHandle {
  /** PID 1 of the sandbox's PID namespace, as seen from the host. */
  pid: number;
  /** Its start time in clock ticks since boot, so that a reused pid is never mistaken for it. */
  startTime: string;
  uid: number;
  cgroups: CgroupPaths | null;
}

const CGROUP_ENTER = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 111; shift; n=$((n-1)); done; exec "$@"';

function inCgroups(cgroups: CgroupPaths | null, argv: string[]): string[] {
  if (!cgroups) return argv;
  const files = procsFiles(cgroups);
  return ['/bin/sh', '-c', CGROUP_ENTER, 'sh', String(files.length), ...files, ...argv];
}

function dropPrivileges(uid: number): string[] {
  return [
    'setpriv',
    `--reuid=${uid}`,
    `--regid=${uid}`,
    '--clear-groups',
    '--inh-caps=-all',
    '--bounding-set=-all',
    '--no-new-privs',
    '--',
  ];
}

/** Prepares the workshop's directories (workspace excepted: the clone makes it). */
export function prepareLayout(spec: SandboxSpec): SandboxLayout {
  const layout = sandboxLayout(spec.root);
  for (const dir of [layout.tmp, layout.home, layout.etc]) mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (const [name, content] of Object.entries(identityFiles({ uid: spec.uid, gid: spec.uid, hostname: spec.hostname }))) {
    writeFileSync(join(layout.etc, name), content, { mode: 0o644 });
  }
  for (const dir of [layout.tmp, layout.home]) chownSync(dir, spec.uid, spec.uid);
  return layout;
}

function bwrapArgs(spec: SandboxSpec, layout: SandboxLayout): string[] {
  const args = [
    '--unshare-pid',
    '--unshare-net',
    '--unshare-ipc',
    '--unshare-uts',
    '--unshare-cgroup-try',
    '--hostname',
    spec.hostname,
    // Parents that bwrap would otherwise create 0700 (unreadable by the workshop uid).
    '--perms',
    '0755',
    '--dir',
    '/etc',
    '--perms',
    '0755',
    '--dir',
    '/home',
    ...rootfsArgs(),
  ];
  for (const name of ['passwd', 'group', 'hosts', 'hostname', 'resolv.conf']) {
    args.push('--ro-bind', join(layout.etc, name), `/etc/${name}`);
  }
  args.push(
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--bind',
    layout.workspace,
    '/workspace',
    '--bind',
    layout.tmp,
    '/tmp',
    '--bind',
    layout.home,
    '/home/atelier',
    '--perms',
    '0755',
    '--size',
    String(16 << 20),
    '--tmpfs',
    '/run',
    '--dir',
    '/var',
    '--symlink',
    '../tmp',
    '/var/tmp',
    '--chdir',
    '/workspace',
    '--info-fd',
    '3',
  );
  // bwrap runs as root to build the namespaces (no user namespace), then setpriv drops to the
  // workshop's own host uid with no capabilities, an empty bounding set and no_new_privs.
  args.push('--', ...dropPrivileges(spec.uid), 'sleep', 'infinity');
  return args;
}

/** Reads the start time (field 22 of /proc/PID/stat), or undefined when the pid is gone or a zombie. */
export function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // A killed sandbox may wait as a zombie until the host's init reaps it: it is gone for us.
    if (fields[0] === 'Z' || fields[0] === 'X') return undefined;
    return fields[19];
  } catch {
    return undefined;
  }
}

/** Starts the sandbox detached from the server: it outlives a server restart or `kill -9`. */
export async function startSandbox(spec: SandboxSpec): Promise<SandboxHandle> {
  const layout = sandboxLayout(spec.root);
  const argv = inCgroups(spec.cgroups, ['bwrap', ...bwrapArgs(spec, layout)]);
  const logFd = openSync(layout.log, 'a', 0o600);
  let child: ChildProcess;
  try {
    child = spawn(argv[0]!, argv.slice(1), {
      detached: true,
      stdio: ['ignore', logFd, logFd, 'pipe'],
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8' },
    });
  } finally {
    closeSync(logFd);
  }
  const info = child.stdio[3];
  if (!info) throw new Error('bwrap info pipe missing');
  const chunks: Buffer[] = [];
  const text = await new Promise<string>((resolve, reject) => {
    info.on('data', (c: Buffer) => chunks.push(c));
    info.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    info.on('error', reject);
    child.on('error', reject);
    child.on('exit', (code) => {
      if (chunks.length === 0) {
        let tail = '';
        try {
          tail = readFileSync(layout.log, 'utf8').slice(-2000).trim();
        } catch {
          // no log
        }
        reject(new Error(`sandbox exited at start (code ${code}): ${tail || 'no output'}`));
      }
    });
  });
  child.unref();
  (info as unknown as { destroy(): void }).destroy();
  let pid: number;
  try {
    pid = (JSON.parse(text) as { 'child-pid': number })['child-pid'];
  } catch {
    throw new Error(`bwrap gave no child pid: ${text.slice(0, 200)}`);
  }
  const startTime = processStartTime(pid);
  if (startTime === undefined) throw new Error('sandbox exited right after start');
  await waitReady(pid, layout.log);
  return { pid, startTime, uid: spec.uid, cgroups: spec.cgroups };
}

/**
 * bwrap reports its PID 1 before the mounts are done; PID 1 forks the idle command only once
 * the root is complete. Entering earlier would see a half-built root, so wait for that child.
 */
async function waitReady(pid: number, log: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    let children: string[] = [];
    try {
      children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    } catch {
      let tail = '';
      try {
        tail = readFileSync(log, 'utf8').slice(-1000).trim();
      } catch {
        // no log
      }
      throw new Error(`sandbox exited during start: ${tail || 'no output'}`);
    }
    for (const child of children) {
      try {
        if (readFileSync(`/proc/${child}/comm`, 'utf8').trim() === 'sleep') return;
      } catch {
        // exited or exec'ing
      }
    }
    if (Date.now() > deadline) throw new Error('sandbox did not become ready within 10 s');
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** True while the sandbox's PID 1 is the very process that was started. */
export function isSandboxAlive(handle: SandboxHandle): boolean {
  return processStartTime(handle.pid) === handle.startTime;
}

export interface ExecSpec {
  command: string[];
  cwd: string;
  env: Record<string, string>;
}

const CHDIR_THEN_EXEC = 'cd -- "$1" || exit 126; shift; exec "$@"';

/**
 * Runs a command inside a running sandbox: joins its cgroups, then its namespaces with
 * nsenter, then drops to the workshop uid. The process leads its own process group so that
 * the whole tree (inside the sandbox too) can be signalled at once.
 */
export function execInSandbox(handle: SandboxHandle, spec: ExecSpec): ChildProcess {
  const ns = ['nsenter', '-t', String(handle.pid), '-m', '-p', '-n', '-i', '-u', '-C'];
  // The sandbox's PID 1 sits in /workspace: `-w` starts there with no extra shell to cd.
  const inWorkspace = spec.cwd === '/workspace';
  if (inWorkspace) ns.push('-w');
  ns.push('--');
  ns.push(...dropPrivileges(handle.uid));
  if (inWorkspace) ns.push(...spec.command);
  else ns.push('/bin/sh', '-c', CHDIR_THEN_EXEC, 'sh', spec.cwd, ...spec.command);
  const argv = inCgroups(handle.cgroups, ns);
  return spawn(argv[0]!, argv.slice(1), { detached: true, stdio: ['pipe', 'pipe', 'pipe'], env: spec.env });
}

/** Kills every process of the sandbox and waits until they are gone. */
export async function killSandbox(handle: SandboxHandle): Promise<void> {
  if (handle.cgroups) {
    await destroyCgroups(handle.cgroups);
  }
  if (isSandboxAlive(handle)) {
    try {
      process.kill(handle.pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
  for (let i = 0; i < 500 && isSandboxAlive(handle); i++) await new Promise((r) => setTimeout(r, 5));
}
