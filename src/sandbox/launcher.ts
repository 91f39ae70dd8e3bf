import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, closeSync, copyFileSync, readFileSync, writeFileSync, chownSync } from 'node:fs';
import { join } from 'node:path';
import type { Writable } from 'node:stream';
import { procsFiles, destroyCgroups, WORKSHOP_OOM_SCORE_ADJ, type CgroupPaths } from './cgroups.js';
import { HOST_TRUST_BUNDLE, identityFiles, LOGIN_PROFILE, LOGIN_PROFILE_NAME, mountPlan, TRUST_BUNDLE, type MountStep } from './rootfs.js';
import { installLoader, sandboxEnterPath, SECCOMP_EXEC, seccompWrap } from './seccomp.js';

/**
 * Inside the workshop, the egress proxy is at 127.0.0.1:EGRESS_PORT (HTTP, CONNECT and SOCKS5 on
 * one port): a socket the server opens in the sandbox's loopback-only namespace (netns.ts).
 */
export const EGRESS_PORT = 3128;

/** Where a workshop's files live on the host; all of it goes away with the workshop. */
export interface SandboxLayout {
  root: string;
  workspace: string;
  tmp: string;
  home: string;
  etc: string;
  /** Server-written files seen read-only at /run/atelier inside (hosts, simulators.json). */
  run: string;
  /** Empty mount point for the rootless sandbox's root. */
  rootfs: string;
  log: string;
  /** The system-call filter's loader, copied onto the workshop's own filesystem (seccomp.ts) and bound at SECCOMP_EXEC. */
  loader: string;
}

export function sandboxLayout(root: string): SandboxLayout {
  return {
    root,
    workspace: join(root, 'workspace'),
    tmp: join(root, 'tmp'),
    home: join(root, 'home'),
    etc: join(root, 'etc'),
    run: join(root, 'run'),
    rootfs: join(root, 'rootfs'),
    log: join(root, 'sandbox.log'),
    loader: join(root, 'seccomp-exec'),
  };
}

export interface SandboxSpec {
  root: string;
  hostname: string;
  /** Host uid the workshop runs as (root mode): its own, shared with no other workshop. */
  uid: number;
  /**
   * Rootless: the server is an ordinary user. The sandbox is then a user namespace in which the
   * workshop is uid 0 without capabilities; all workshops map to the server's own uid.
   */
  rootless: boolean;
  cgroups: CgroupPaths | null;
}

/** What the server keeps to find a running sandbox again, also after its own restart. */
export interface SandboxHandle {
  /** PID 1 of the sandbox's PID namespace, as seen from the host. */
  pid: number;
  /** Its start time in clock ticks since boot, so that a reused pid is never mistaken for it. */
  startTime: string;
  uid: number;
  rootless?: boolean;
  cgroups: CgroupPaths | null;
}

/** The environment of every process Atelier runs privileged on a workshop's behalf. */
const PRIVILEGED_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8' };

// Every process run in a workshop is the OOM killer's first choice (WORKSHOP_OOM_SCORE_ADJ),
// rootless too (no cgroups to join then).
const CGROUP_ENTER = `echo ${WORKSHOP_OOM_SCORE_ADJ} > /proc/self/oom_score_adj; n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 111; shift; n=$((n-1)); done; exec "$@"`;

function inCgroups(cgroups: CgroupPaths | null, argv: string[]): string[] {
  const files = cgroups ? procsFiles(cgroups) : [];
  return ['/bin/sh', '-c', CGROUP_ENTER, 'sh', String(files.length), ...files, ...argv];
}

/** The workshop's own uid, no capabilities, an empty bounding set, no_new_privs (the sandbox's idle process). */
function dropPrivileges(uid: number): string[] {
  const ids = [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups'];
  return ['/usr/bin/setpriv', ...ids, '--inh-caps=-all', '--bounding-set=-all', '--no-new-privs', '--'];
}

/** Prepares the workshop's directories (workspace excepted: the clone makes it). */
export function prepareLayout(spec: SandboxSpec): SandboxLayout {
  const layout = sandboxLayout(spec.root);
  for (const dir of [layout.tmp, layout.home, layout.etc, layout.rootfs]) mkdirSync(dir, { recursive: true, mode: 0o700 });
  mkdirSync(layout.run, { recursive: true, mode: 0o755 });
  const uid = spec.rootless ? 0 : spec.uid;
  for (const [name, content] of Object.entries(identityFiles({ uid, gid: uid, hostname: spec.hostname }))) {
    // hosts lives in run/ (see mountPlan) unless the server already wrote it with the workshop's services.
    const path = name === 'hosts' ? join(layout.run, name) : join(layout.etc, name);
    if (name === 'hosts' && existsSync(path)) continue;
    writeFileSync(path, content, { mode: 0o644 });
  }
  writeFileSync(join(layout.etc, LOGIN_PROFILE_NAME), LOGIN_PROFILE, { mode: 0o644 });
  if (!spec.rootless) for (const dir of [layout.tmp, layout.home]) chownSync(dir, spec.uid, spec.uid);
  // The workshop's own copy of the host's CA bundle, seen at its usual path (mountPlan): the
  // server adds the workshop's egress CA to it (every workshop, when the server has a credential broker).
  const bundle = join(layout.etc, TRUST_BUNDLE);
  if (!existsSync(bundle) && existsSync(HOST_TRUST_BUNDLE)) copyFileSync(HOST_TRUST_BUNDLE, bundle);
  return layout;
}

function bwrapArgs(spec: SandboxSpec, plan: MountStep[]): string[] {
  const args = ['--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try', '--hostname', spec.hostname];
  for (const step of plan) {
    switch (step.kind) {
      case 'ro':
        args.push('--ro-bind', step.src, step.dest);
        break;
      case 'rw':
        args.push('--bind', step.src, step.dest);
        break;
      case 'link':
        args.push('--symlink', step.target, step.dest);
        break;
      case 'dir':
        // Parents that bwrap would otherwise create 0700 (unreadable by the workshop uid).
        args.push('--perms', '0755', '--dir', step.dest);
        break;
      case 'tmpfs':
        args.push('--perms', '0755', '--size', String(16 << 20), '--tmpfs', step.dest);
        break;
      case 'empty':
        args.push('--perms', '0755', '--size', '4096', '--tmpfs', step.dest, '--remount-ro', step.dest);
        break;
      case 'proc':
        args.push('--proc', step.dest);
        break;
      case 'dev':
        args.push('--dev', step.dest);
        break;
    }
  }
  args.push('--chdir', '/workspace', '--info-fd', '3');
  // bwrap runs as root to build the namespaces (no user namespace), then setpriv drops to the
  // workshop's own host uid with no capabilities, an empty bounding set and no_new_privs, under
  // the system-call filter installed just before (seccomp.ts says why not bwrap's --seccomp).
  args.push('--', ...seccompWrap(dropPrivileges(spec.uid)), 'sleep', 'infinity');
  return args;
}

/**
 * Rootless set-up, run as uid 0 of a fresh user namespace (unshare --map-root-user): builds
 * the same root as bwrap does, pivots into it, then idles as a reaper. Arguments: the mount
 * point, the hostname, then the plan as triples (kind, source, destination).
 */
const ROOTLESS_SETUP = `set -eu
R=$1; HN=$2; shift 2
mount -t tmpfs -o mode=0755 tmpfs "$R"
while [ $# -gt 0 ]; do
  k=$1; s=$2; d=$3; shift 3
  case $k in
    ro|rw)
      # A file bound over one already there (the CA bundle in the read-only /etc/ssl/certs) needs no new mount point.
      if [ -d "$s" ]; then mkdir -p "$R$d"; elif [ ! -e "$R$d" ]; then mkdir -p "$(dirname "$R$d")"; : > "$R$d"; fi
      # Not recursive: a submount under a read-only tree would stay writable after the remount.
      mount --bind "$s" "$R$d"
      if [ "$k" = ro ]; then mount -o remount,bind,ro "$R$d"; fi ;;
    link) mkdir -p "$(dirname "$R$d")"; ln -s "$s" "$R$d" ;;
    dir) mkdir -p "$R$d" ;;
    tmpfs) mkdir -p "$R$d"; mount -t tmpfs -o mode=0755,size=16m tmpfs "$R$d" ;;
    empty) mkdir -p "$R$d"; mount -t tmpfs -o mode=0755,size=4k,ro tmpfs "$R$d" ;;
    proc) mkdir -p "$R$d"; mount -t proc proc "$R$d" ;;
    dev)
      mkdir -p "$R$d"; mount -t tmpfs -o mode=0755,size=64k tmpfs "$R$d"
      for n in null zero full random urandom tty; do : > "$R$d/$n"; mount --bind "/dev/$n" "$R$d/$n"; done
      ln -s /proc/self/fd "$R$d/fd"; ln -s /proc/self/fd/0 "$R$d/stdin"; ln -s /proc/self/fd/1 "$R$d/stdout"; ln -s /proc/self/fd/2 "$R$d/stderr"
      mkdir -p "$R$d/shm" ;;
  esac
done
hostname "$HN"
ip link set lo up 2>/dev/null || true
mkdir "$R/.oldroot"; cd "$R"; pivot_root . .oldroot; umount -l /.oldroot; rmdir /.oldroot
# The root and /dev are ours (uid 0 of this namespace): make them read-only, as bwrap's are to the workshop uid.
mount -o remount,bind,ro /dev; mount -o remount,bind,ro /
cd /workspace
exec ${SECCOMP_EXEC} perl -e '$SIG{CHLD} = sub { 1 while waitpid(-1, 1) > 0 }; sleep while 1'`;

function rootlessArgs(spec: SandboxSpec, layout: SandboxLayout, plan: MountStep[]): string[] {
  const triples: string[] = [];
  for (const step of plan) {
    if (step.kind === 'ro' || step.kind === 'rw') triples.push(step.kind, step.src, step.dest);
    else if (step.kind === 'link') triples.push('link', step.target, step.dest);
    else triples.push(step.kind, '-', step.dest);
  }
  return [
    'unshare',
    '--user',
    '--map-root-user',
    '--pid',
    '--fork',
    '--kill-child',
    '--mount',
    '--net',
    '--ipc',
    '--uts',
    '--propagation',
    'private',
    '--',
    '/bin/sh',
    '-c',
    ROOTLESS_SETUP,
    'sh',
    layout.rootfs,
    spec.hostname,
    ...triples,
  ];
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

function logTail(log: string): string {
  try {
    return readFileSync(log, 'utf8').slice(-1500).trim();
  } catch {
    return '';
  }
}

/** Starts the sandbox detached from the server: it outlives a server restart or `kill -9`. */
export async function startSandbox(spec: SandboxSpec): Promise<SandboxHandle> {
  const layout = sandboxLayout(spec.root);
  installLoader(layout.loader);
  const plan = mountPlan(layout);
  // bwrap reads its options from fd 4 (--args): its command line, which the sandbox's PID 1 keeps
  // and every process inside can read in /proc/1/cmdline, then names no host path.
  // The command after `--` stays on the command line (bwrap takes only options from --args).
  const options = spec.rootless ? [] : bwrapArgs(spec, plan);
  const command = options.splice(options.indexOf('--'));
  const argv = spec.rootless
    ? inCgroups(null, rootlessArgs(spec, layout, plan))
    : inCgroups(spec.cgroups, ['bwrap', '--args', '4', ...command]);
  const logFd = openSync(layout.log, 'a', 0o600);
  let child: ChildProcess;
  try {
    child = spawn(argv[0]!, argv.slice(1), {
      detached: true,
      stdio: spec.rootless ? ['ignore', logFd, logFd] : ['ignore', logFd, logFd, 'pipe', 'pipe'],
      env: PRIVILEGED_ENV,
    });
  } finally {
    closeSync(logFd);
  }
  if (!spec.rootless) {
    const args = child.stdio[4] as Writable;
    args.on('error', () => undefined);
    args.end(options.map((a) => a + '\0').join(''));
  }
  const exited = new Promise<never>((_, reject) => {
    child.on('error', reject);
    child.on('exit', (code) => reject(new Error(`sandbox exited at start (code ${code}): ${logTail(layout.log) || 'no output'}`)));
  });
  exited.catch(() => undefined);
  const deadline = new Promise<never>((_, reject) =>
    setTimeout(() => reject(new Error('sandbox did not start within 10 s')), 10_000).unref(),
  );
  deadline.catch(() => undefined);
  try {
    let pid: number;
    if (spec.rootless) {
      // unshare --fork: its child is PID 1 of the new namespace.
      pid = await Promise.race([firstChild(child.pid!, layout.log), exited, deadline]);
    } else {
      const info = child.stdio[3]!;
      const chunks: Buffer[] = [];
      const text = await Promise.race([
        new Promise<string>((resolve, reject) => {
          info.on('data', (c: Buffer) => chunks.push(c));
          info.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
          info.on('error', reject);
        }),
        exited,
        deadline,
      ]);
      info.destroy();
      try {
        pid = (JSON.parse(text) as { 'child-pid': number })['child-pid'];
      } catch {
        throw new Error(`bwrap gave no child pid: ${text.slice(0, 200)}`);
      }
    }
    child.removeAllListeners('exit');
    child.unref();
    const startTime = processStartTime(pid);
    if (startTime === undefined) throw new Error(`sandbox exited right after start: ${logTail(layout.log)}`);
    await waitReady(pid, spec.rootless, layout.log);
    return { pid, startTime, uid: spec.uid, rootless: spec.rootless, cgroups: spec.cgroups };
  } catch (err) {
    // Never leave a half-started sandbox behind: it leads its own process group.
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
    throw err;
  }
}

function children(pid: number): string[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
}

async function firstChild(pid: number, log: string): Promise<number> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    let kids: string[] = [];
    try {
      kids = children(pid);
    } catch {
      throw new Error(`sandbox exited during start: ${logTail(log) || 'no output'}`);
    }
    if (kids[0]) return Number(kids[0]);
    if (Date.now() > deadline) throw new Error('sandbox did not start within 10 s');
    await new Promise((r) => setTimeout(r, 1));
  }
}

function comm(pid: string | number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return '';
  }
}

/**
 * The namespaces are reported before the root is built. Entering earlier would see a half-built
 * root, so wait for the idle process: bwrap's PID 1 forks `sleep` once its root is complete;
 * the rootless set-up execs `perl` (the reaper) after its pivot_root.
 */
async function waitReady(pid: number, rootless: boolean, log: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (processStartTime(pid) === undefined) throw new Error(`sandbox exited during start: ${logTail(log) || 'no output'}`);
    if (rootless ? comm(pid) === 'perl' : children(pid).some((c) => comm(c) === 'sleep')) return;
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
  /**
   * A mark on the entry's command line on the host (`--label`), by which a driver recognises the
   * entries it marked (an agent session's, which outlives the server). The workload never sees it.
   */
  label?: string;
}

/**
 * `nsenter` options that enter the sandbox's `namespaces`, for the server's helpers that enter
 * some of them only (a port helper, the secrets' mount). Rootless: its user namespace first
 * (nsenter orders it), keeping our uid (0 inside).
 */
export function nsenterArgs(handle: SandboxHandle, namespaces: string[]): string[] {
  return ['-t', String(handle.pid), ...(handle.rootless ? ['-U', '--preserve-credentials'] : []), ...namespaces];
}

/** The workshop's variables travel to the sandbox in the environment under this prefix. */
const ENV_PREFIX = '__ATELIER_ENV_';

/**
 * The command line that runs `spec` inside the sandbox, for callers that spawn it themselves (a
 * PTY, an SSH channel, an agent session's holder): one program, sandbox-enter, joins the
 * workshop's cgroups, enters its namespaces, installs the system-call filter, drops privileges,
 * moves to the working directory, applies the workshop's environment and runs the command, in
 * that order (sandbox-enter.c says why). Run it with `privilegedEnv(spec)`: the workshop's
 * variables (ATELIER_TOKEN, granted secrets…) are handed over in the environment, never on the
 * command line, which every host user can read in /proc/PID/cmdline.
 *
 * The first options are in a fixed order, `--target PID [--label NAME]`: `entryOf` reads them.
 */
export function sandboxArgv(handle: SandboxHandle, spec: ExecSpec): string[] {
  const argv = [sandboxEnterPath(), '--target', String(handle.pid)];
  if (spec.label !== undefined) argv.push('--label', spec.label);
  // Rootless: the user namespace's uid 0 (the server's own uid on the host) with no capabilities.
  argv.push(...(handle.rootless ? ['--rootless'] : ['--uid', String(handle.uid)]));
  // Every process run in a workshop is the OOM killer's first choice, rootless too (no cgroups to join then).
  argv.push('--oom-score-adj', String(WORKSHOP_OOM_SCORE_ADJ));
  for (const file of handle.cgroups ? procsFiles(handle.cgroups) : []) argv.push('--cgroup', file);
  argv.push('--cwd', spec.cwd, '--', ...spec.command);
  return argv;
}

/**
 * The environment to run `sandboxArgv(handle, spec)` with: the fixed privileged one plus the
 * handover. Every variable of the workshop, whatever its name (`odd-name` too), is carried as
 * `__ATELIER_ENV_<name>`, which nothing privileged reads; sandbox-enter makes them the program's
 * whole environment after the privilege drop. An empty name cannot be carried and is left out.
 */
export function privilegedEnv(spec?: ExecSpec): Record<string, string> {
  const env: Record<string, string> = { ...PRIVILEGED_ENV };
  for (const [k, v] of Object.entries(spec?.env ?? {})) if (k !== '') env[`${ENV_PREFIX}${k}`] = v;
  return env;
}

/** How a server before sandbox-enter marked an agent session's chain: the label as `$0` of `sh -c APPLY_ENV LABEL …`. */
const LEGACY_APPLY_ENV_START = 'n=$1; shift; unset PATH LANG;';

/**
 * The sandbox a host process enters (its PID 1's host pid) and the entry's label, read from the
 * process's command line; undefined for any other process. For finding a previous server's
 * entries again: `sandbox-enter --target PID [--label NAME] …` (sandboxArgv), and `nsenter -t PID
 * …`, which the server's helpers still use and every entry used before sandbox-enter (whose
 * label, then, was the `$0` of its environment step: only the first such step counts, since the
 * workshop's own command comes after it and could carry the label too).
 */
export function entryOf(argv: string[]): { target: number; label: string | undefined } | undefined {
  const target = Number(argv[2]);
  if (!/^[1-9][0-9]*$/.test(argv[2] ?? '')) return undefined;
  if (argv[0]?.endsWith('/sandbox-enter') && argv[1] === '--target') return { target, label: argv[3] === '--label' ? argv[4] : undefined };
  if (!argv[0]?.endsWith('nsenter') || argv[1] !== '-t') return undefined;
  const step = argv.findIndex((a, i) => argv[i - 1] === '-c' && a.startsWith(LEGACY_APPLY_ENV_START));
  return { target, label: step > 0 ? argv[step + 1] : undefined };
}

/**
 * Runs a command inside a running sandbox (sandboxArgv). It leads its own process group, so that
 * the whole tree (inside the sandbox too) can be signalled at once.
 */
export function execInSandbox(handle: SandboxHandle, spec: ExecSpec): ChildProcess {
  const argv = sandboxArgv(handle, spec);
  return spawn(argv[0]!, argv.slice(1), { detached: true, stdio: ['pipe', 'pipe', 'pipe'], env: privilegedEnv(spec) });
}

/** Kills every process of the sandbox and waits until they are gone. */
export async function killSandbox(handle: SandboxHandle): Promise<void> {
  if (handle.cgroups) {
    await destroyCgroups(handle.cgroups);
  }
  if (isSandboxAlive(handle)) {
    try {
      // PID 1 of a PID namespace: its death takes every process of the namespace with it.
      process.kill(handle.pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
  for (let i = 0; i < 500 && isSandboxAlive(handle); i++) await new Promise((r) => setTimeout(r, 5));
}
