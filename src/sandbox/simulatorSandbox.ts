import { existsSync, lstatSync, mkdirSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { procsFiles, WORKSHOP_OOM_SCORE_ADJ, type CgroupPaths } from './cgroups.js';
import { installLoader, SECCOMP_EXEC, seccompWrap } from './seccomp.js';

/**
 * The sandbox every simulator runs in (a simulator is as untrusted as the agent that configures
 * it: superuser SQL, server-side programs, stubs), built like a workshop's:
 *
 * - its own PID, network (loopback only: no egress at all), IPC, UTS, mount and cgroup
 *   namespaces; it is reached only through the unix sockets it creates in its socket directory,
 *   which the server's relay dials on its workshop's behalf;
 * - a curated read-only root: /usr and the top-level links into it, the loader's files, a
 *   generated passwd/group/hosts, whatever else its program names (a JRE's configuration,
 *   Atelier's node_modules), nothing else of the host; a private /tmp and /dev/shm;
 * - writable: only the directories its entry names (its data, its socket directory);
 * - an unprivileged uid, no capabilities, an empty bounding set, no_new_privs;
 * - its processes in the cgroups given (its workshop's: counted against the workshop's limits,
 *   frozen with it).
 *
 * Root mode: bwrap runs as root to build the namespaces, then setpriv drops to the workshop's
 * own host uid (as the workshop's launcher does). Rootless mode (the server is an ordinary
 * user): bwrap makes a user namespace mapping the server's own uid to itself, which leaves no
 * capability and an empty bounding set.
 *
 * bwrap's options, which name host paths, are read from a file (`--args`), so that the
 * sandbox's /proc/1/cmdline shows only its inside paths.
 */

/** One host path shown inside a simulator's sandbox. */
export interface SimulatorMount {
  /** Host path (file or directory); must exist. */
  src: string;
  /** Where it appears inside. */
  dest: string;
  /** Writable (its data, its socket directory); read-only when unset. */
  writable?: boolean;
}

export interface SimulatorSandboxSpec {
  /** The sandbox's hostname (the simulator's name). */
  hostname: string;
  /** Root mode: the unprivileged host uid/gid the program runs as. Undefined: rootless (the server's own uid). */
  runAs: { uid: number; gid: number } | undefined;
  /** What the program needs beyond the base system: its data and socket directories, its code. */
  mounts: SimulatorMount[];
  /** Cgroups the sandbox joins before anything of it runs (root mode). */
  cgroups?: CgroupPaths | undefined;
  /** `cgroup.procs` files to join, when the caller has them rather than the paths. */
  cgroupProcs?: string[] | undefined;
  /**
   * Server-only directory (not shown inside) where the sandbox's options and identity files are
   * written: bwrap reads the first, binds the others.
   */
  stateDir: string;
  /** The program and its arguments, as seen inside. */
  argv: string[];
  /** Working directory inside. */
  cwd: string;
}

const BWRAP = '/usr/bin/bwrap';
const SETPRIV = '/usr/bin/setpriv';
/** Private /tmp and /dev/shm: memory, counted against the workshop's memory limit. */
const TMPFS_BYTES = 64 << 20;

/** Entries of /etc a simulator's program reads that hold no secret (the loader's, time zones). */
const ETC_ENTRIES = ['ld.so.cache', 'ld.so.conf', 'ld.so.conf.d', 'localtime', 'nsswitch.conf', 'host.conf', 'gai.conf'];
const TOP_LEVEL_LINKS = ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32'];

/**
 * Joins the cgroups (as root: the files are root's), opens bwrap's options file as fd 3, then
 * execs bwrap: one pid from the spawn to the sandbox's monitor.
 */
// A simulator is the OOM killer's first choice, as a workshop's processes are (WORKSHOP_OOM_SCORE_ADJ).
const ENTER = `echo ${WORKSHOP_OOM_SCORE_ADJ} > /proc/self/oom_score_adj; f=$1; n=$2; shift 2; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 111; shift; n=$((n-1)); done; exec 3<"$f"; exec "$@"`;

function baseRoot(): string[] {
  const args: string[] = ['--ro-bind', '/usr', '/usr'];
  for (const name of TOP_LEVEL_LINKS) {
    const path = `/${name}`;
    let st;
    try {
      st = lstatSync(path);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) args.push('--symlink', readlinkSync(path), path);
    else if (st.isDirectory()) args.push('--ro-bind', path, path);
  }
  args.push('--perms', '0755', '--dir', '/etc');
  for (const entry of ETC_ENTRIES) if (existsSync(`/etc/${entry}`)) args.push('--ro-bind', `/etc/${entry}`, `/etc/${entry}`);
  return args;
}

/** passwd, group and hosts of the sandbox: the simulator's user only. */
function identity(spec: SimulatorSandboxSpec): Record<string, string> {
  const uid = spec.runAs?.uid ?? process.getuid?.() ?? 65534;
  const gid = spec.runAs?.gid ?? process.getgid?.() ?? 65534;
  return {
    passwd: `root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nsimulator:x:${uid}:${gid}:Atelier simulator:/tmp:/usr/sbin/nologin\n`,
    group: `root:x:0:\nsimulator:x:${gid}:\n`,
    hosts: `127.0.0.1\tlocalhost ${spec.hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n`,
  };
}

/** Parents bwrap would create 0700 (unreachable by the simulator's uid) are made 0755 first. */
function parents(dest: string, made: Set<string>, out: string[]): void {
  const parts = dest.split('/').filter(Boolean);
  for (let i = 1; i < parts.length; i++) {
    const dir = `/${parts.slice(0, i).join('/')}`;
    if (made.has(dir) || dir === '/usr' || dir === '/etc' || dir === '/tmp' || dir === '/dev') continue;
    made.add(dir);
    out.push('--perms', '0755', '--dir', dir);
  }
}

/** bwrap's options (namespaces, root, mounts), written to the options file. */
function bwrapOptions(spec: SimulatorSandboxSpec, files: Record<string, string>, loader: string): string[] {
  const args = [
    ...(spec.runAs ? [] : ['--unshare-user']),
    '--unshare-pid',
    '--unshare-net',
    '--unshare-ipc',
    '--unshare-uts',
    '--unshare-cgroup-try',
    '--hostname',
    spec.hostname,
    // No --die-with-parent: a simulator outlives the server (and its spawner), as a workshop does.
    ...baseRoot(),
  ];
  for (const [name, path] of Object.entries(files)) args.push('--ro-bind', path, `/etc/${name}`);
  args.push('--perms', '0755', '--dir', '/run', '--ro-bind', loader, SECCOMP_EXEC);
  args.push('--proc', '/proc', '--dev', '/dev');
  args.push('--perms', '1777', '--size', String(TMPFS_BYTES), '--tmpfs', '/tmp');
  args.push('--perms', '1777', '--size', String(TMPFS_BYTES), '--tmpfs', '/dev/shm');
  const made = new Set<string>();
  for (const m of spec.mounts) {
    if (!existsSync(m.src)) throw new Error(`the simulator's sandbox needs ${m.src}, which does not exist`);
    parents(m.dest, made, args);
    args.push(m.writable ? '--bind' : '--ro-bind', m.src, m.dest);
  }
  args.push('--chdir', spec.cwd, '--setenv', 'HOME', '/tmp');
  return args;
}

/** No capabilities, an empty bounding set, no_new_privs, the workshop's own uid (root mode). */
function dropPrivileges(runAs: { uid: number; gid: number }): string[] {
  return [
    SETPRIV,
    `--reuid=${runAs.uid}`,
    `--regid=${runAs.gid}`,
    '--clear-groups',
    '--inh-caps=-all',
    '--bounding-set=-all',
    '--no-new-privs',
    '--',
  ];
}

/**
 * The command line that starts a simulator's program in a sandbox of its own (see the top of
 * this file). Writes the sandbox's options and identity files into `spec.stateDir` (server-only).
 * The returned argv runs as the server (root, or the ordinary user of a rootless server), with
 * the simulators' fixed environment; its pid is the sandbox's monitor until the sandbox ends.
 */
export function simulatorSandboxArgv(spec: SimulatorSandboxSpec): string[] {
  mkdirSync(spec.stateDir, { recursive: true, mode: 0o700 });
  const files: Record<string, string> = {};
  for (const [name, content] of Object.entries(identity(spec))) {
    const path = join(spec.stateDir, name);
    writeFileSync(path, content, { mode: 0o644 });
    files[name] = path;
  }
  // The system-call filter's loader: a copy in the simulator's own (server-only) directory.
  const loader = join(spec.stateDir, 'seccomp-exec');
  installLoader(loader);
  const optionsFile = join(spec.stateDir, 'bwrap.args');
  writeFileSync(
    optionsFile,
    bwrapOptions(spec, files, loader)
      .map((a) => `${a}\0`)
      .join(''),
    { mode: 0o600 },
  );
  const procs = spec.cgroupProcs ?? (spec.cgroups ? procsFiles(spec.cgroups) : []);
  // The same system-call filter as a workshop's, installed before the privilege drop (seccomp.ts).
  const program = spec.argv;
  return [
    '/bin/sh',
    '-c',
    ENTER,
    'sh',
    optionsFile,
    String(procs.length),
    ...procs,
    BWRAP,
    '--args',
    '3',
    '--',
    ...seccompWrap([...(spec.runAs ? dropPrivileges(spec.runAs) : []), ...program]),
  ];
}
