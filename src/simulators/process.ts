import { execFile, spawn } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { dirname } from 'node:path';
import { promisify } from 'node:util';
import { AtelierError } from '../core/index.js';
import { spawnViaHelper } from './spawner.js';
import type { RunAs } from './types.js';

export const run = promisify(execFile);

/**
 * The whole environment of a simulator process: never the server's own, which holds its
 * secrets (database URL, master key path, tokens).
 */
export const SIMULATOR_ENV: Record<string, string> = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8', TZ: 'UTC' };

/** Reads the start time (field 22 of /proc/PID/stat), or undefined when the pid is gone or a zombie. */
export function processStartTime(pid: number): string | undefined {
  const fields = statFields(pid);
  if (!fields || fields[0] === 'Z' || fields[0] === 'X') return undefined;
  return fields[19];
}

/** Fields of /proc/PID/stat after the command name (fields[0] is the state, fields[2] the process group). */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/**
 * Live (non-zombie) processes that belong to the simulator led by `pid`: its process group and
 * (only while `pid` is known to be the leader: a pid can be reused) its descendants. Both are
 * needed: PostgreSQL puts each child in a process group of its own.
 */
export function processTree(pid: number, descendants = true): Array<{ pid: number; startTime: string }> {
  const parent = new Map<number, number>();
  const found = new Map<number, string>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const fields = statFields(Number(entry));
    if (!fields || fields[0] === 'Z' || fields[0] === 'X') continue;
    parent.set(Number(entry), Number(fields[1]));
    if (fields[2] === String(pid)) found.set(Number(entry), fields[19]!);
  }
  for (let grew = descendants; grew;) {
    grew = false;
    for (const [child, ppid] of parent) {
      if (!found.has(child) && (ppid === pid || found.has(ppid))) {
        const startTime = processStartTime(child);
        if (startTime !== undefined) {
          found.set(child, startTime);
          grew = true;
        }
      }
    }
  }
  return [...found].map(([p, startTime]) => ({ pid: p, startTime }));
}

/** The last `bytes` of a log file ('' when there is none). */
export async function readTail(file: string, bytes: number): Promise<string> {
  let fh;
  try {
    fh = await open(file, 'r');
  } catch {
    return '';
  }
  try {
    const { size } = await fh.stat();
    const length = Math.min(size, Math.max(0, bytes));
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, size - length);
    return buf.toString('utf8');
  } finally {
    await fh.close();
  }
}

export interface Started {
  pid: number;
  startTime: string;
  /** Rejects with the exit status as soon as the process exits (used while waiting for readiness). */
  exited: Promise<never>;
}

/**
 * Starts a simulator's sandbox detached from the server, in a session and process group of its
 * own: it survives a server restart (like the workshops' sandboxes) and its whole tree can be
 * signalled at once. Output goes to `logFile`. `argv` is the sandbox's command line (it joins
 * the cgroups and drops privileges itself): it runs as the server, with the simulators' fixed
 * environment.
 */
export async function spawnDetached(opts: { argv: string[]; cwd: string; logFile: string }): Promise<Started> {
  const viaHelper = spawnViaHelper({
    argv: opts.argv,
    cwd: opts.cwd,
    env: SIMULATOR_ENV,
    log: opts.logFile,
    detached: true,
  });
  if (viaHelper) {
    const { pid, exit } = await viaHelper;
    const exited = exit.then((code): never => {
      throw new Error(`the simulator's sandbox exited during start (${code < 0 ? `signal ${-code}` : `code ${code}`})`);
    });
    exited.catch(() => undefined);
    const startTime = processStartTime(pid);
    if (startTime === undefined) await exited;
    return { pid, startTime: startTime!, exited };
  }

  const logFd = openSync(opts.logFile, 'a', 0o640);
  const argv = opts.argv;
  let child;
  try {
    child = spawn(argv[0]!, argv.slice(1), {
      cwd: opts.cwd,
      detached: true,
      stdio: ['ignore', logFd, logFd],
      env: SIMULATOR_ENV,
    });
  } finally {
    closeSync(logFd);
  }
  const exited = new Promise<never>((_, reject) => {
    child.once('error', (err) => reject(new Error(`the simulator's sandbox could not be started: ${err.message}`)));
    child.once('exit', (code, signal) => reject(new Error(`the simulator's sandbox exited during start (${signal ?? `code ${code}`})`)));
  });
  exited.catch(() => undefined);
  child.unref();
  const pid = await new Promise<number>((resolve, reject) => {
    if (child.pid !== undefined) resolve(child.pid);
    else child.once('error', reject);
  });
  const startTime = processStartTime(pid);
  if (startTime === undefined) await exited;
  return { pid, startTime: startTime!, exited };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * The program of a simulator's sandbox led by `pid` (bwrap's monitor → the namespace's init →
 * the program), which gets a stop's first signal: bwrap's monitor would die of it at once and
 * take the namespace with it, cutting the program's own shutdown short (a socket left behind,
 * no last log line). Undefined when `pid` is not a sandbox's monitor (a handle of an older server).
 */
export function sandboxProgram(pid: number): number | undefined {
  try {
    if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== 'bwrap') return undefined;
  } catch {
    return undefined;
  }
  const init = childrenOf(pid)[0];
  return init === undefined ? undefined : childrenOf(init)[0];
}

function kill(pid: number, signal: NodeJS.Signals = 'SIGKILL'): void {
  try {
    process.kill(pid, signal);
  } catch {
    // gone meanwhile
  }
}

/**
 * Stops the process group led by `pid` if `pid` is still the process started at `startTime`:
 * `signal` first, SIGKILL after `graceMs`, then any member of the group left behind. Returns
 * once no process of the group is left.
 */
export async function stopGroup(
  pid: number,
  startTime: string,
  signal: NodeJS.Signals,
  graceMs: number,
  /** Who gets the first signal when not the whole group: a sandbox's program (see sandboxProgram). */
  first?: number,
): Promise<void> {
  const ours = (): boolean => processStartTime(pid) === startTime;
  const killGroup = (sig: NodeJS.Signals): void => {
    try {
      process.kill(-pid, sig);
    } catch {
      // the group is gone already
    }
  };
  // Known once the leader is verified: children of a dead leader are reparented and could no
  // longer be told from anyone else's, so they are recorded (with their start times) first.
  let tree: Array<{ pid: number; startTime: string }> = [];
  if (ours()) {
    tree = processTree(pid);
    if (first === undefined) killGroup(signal);
    else kill(first, signal);
    const deadline = Date.now() + graceMs;
    while (ours() && Date.now() < deadline) await sleep(5);
    if (ours()) {
      tree = processTree(pid);
      killGroup('SIGKILL');
      for (const p of tree) if (processStartTime(p.pid) === p.startTime) kill(p.pid);
    }
    for (let i = 0; i < 1000 && ours(); i++) await sleep(5);
  }
  // Whatever is left of the recorded tree (a postgres backend, a redis fork), and of the group:
  // a number in use as a process group is not handed to a new process, so its members are ours.
  // (A live process under that pid with another start time is someone else's: then no group of ours exists.)
  for (let i = 0; i < 200; i++) {
    const group = processStartTime(pid) === undefined ? processTree(pid, false).map((p) => p.pid) : [];
    const left = [...tree.filter((p) => processStartTime(p.pid) === p.startTime).map((p) => p.pid), ...group];
    if (left.length === 0) return;
    for (const p of left) kill(p);
    await sleep(5);
  }
  throw new AtelierError('INTERNAL', `processes of the simulator's group ${pid} did not exit after SIGKILL`, { pid });
}

/** Recursive chown (the instance files must belong to the user the simulator runs as). */
export async function chownTree(path: string, runAs: RunAs | undefined): Promise<void> {
  if (runAs) await run('chown', ['-R', `${runAs.uid}:${runAs.gid}`, path]);
}

/**
 * The simulator user must be able to walk down to `path` (PostgreSQL checks its data directory
 * and opens it as that user): name the directory that stops it rather than fail later with a
 * bare "permission denied" in a log.
 */
export function assertReachable(path: string, runAs: RunAs | undefined, what: string): void {
  if (!runAs) return;
  const blocked: string[] = [];
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    const st = statSync(dir);
    const mode = st.uid === runAs.uid ? st.mode >> 6 : st.gid === runAs.gid ? st.mode >> 3 : st.mode;
    if ((mode & 0o1) === 0) blocked.push(dir);
    if (dirname(dir) === dir) break;
  }
  if (blocked.length > 0) {
    throw new AtelierError(
      'UNAVAILABLE',
      `the simulator runs as uid ${runAs.uid}, which cannot enter ${blocked.join(', ')} to reach its ${what} ${path}: ` +
        `run \`chmod o+x ${blocked.join(' ')}\` or use a directory it can reach`,
      { path, uid: runAs.uid, blocked },
    );
  }
}
