import { spawn } from 'node:child_process';
import { chownSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AtelierError } from '../core/index.js';
import { ACTIONS_DIR, readProjectFile } from './projectFiles.js';
import type { Project } from './types.js';
import { readYamlMapping } from './yamlEdit.js';

/**
 * Long-lived local services of a project, from the kit's stack templates (deploy/stacks/*.tpl.yml),
 * named by catalog id, never by a path or an option from the client.
 */
export const STACKS = ['redis'] as const;
export type StackId = (typeof STACKS)[number];

const TEMPLATES = fileURLToPath(new URL('../../deploy/stacks/', import.meta.url));
/** The rendered file of a stack, inside the project (git-ignored). */
export function renderedPath(stack: StackId): string {
  return join(dirname(ACTIONS_DIR), 'stacks', `${stack}.yml`);
}

/** The template with the project's name filled in. */
export function renderTemplate(stack: StackId, project: Project): string {
  return readFileSync(join(TEMPLATES, `${stack}.tpl.yml`), 'utf8').replaceAll('{{project}}', project.name);
}

/** The restart policy of the rendered file (`unless-stopped` when it is not rendered yet, the template's). */
export function restartPolicy(project: Project, stack: StackId): string {
  const text = readProjectFile(project.path, renderedPath(stack)) ?? renderTemplate(stack, project);
  const doc = readYamlMapping(text, renderedPath(stack));
  const policy = (doc.services as Record<string, { restart?: unknown }> | undefined)?.[stack]?.restart;
  return policy === undefined ? 'no' : String(policy);
}

/** Where the native backend keeps one stack of one project: data (the named volume), socket, log, state. */
function stackDir(stacksDir: string, project: Project, stack: StackId): string {
  return join(stacksDir, project.id, stack);
}

interface State {
  pid: number;
  startTime: string;
  /** What the user last asked for: the server restarts only stacks that were not stopped on purpose. */
  desired: 'running' | 'stopped';
}

function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[0] === 'Z' || fields[0] === 'X' ? undefined : fields[19];
  } catch {
    return undefined;
  }
}

const RUN_AS = { uid: 65534, gid: 65534 };
const ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8', TZ: 'UTC' };

/** The redis-server argv the native backend runs for a stack (shown in plans). */
export function nativeArgv(stacksDir: string, project: Project, stack: StackId): string[] {
  const dir = stackDir(stacksDir, project, stack);
  return [
    'redis-server',
    '--port',
    '0',
    '--unixsocket',
    join(dir, 'redis.sock'),
    '--unixsocketperm',
    '770',
    '--dir',
    join(dir, 'data'),
    '--appendonly',
    'yes',
    '--daemonize',
    'no',
    '--protected-mode',
    'yes',
  ];
}

function readState(dir: string): State | undefined {
  try {
    return JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8')) as State;
  } catch {
    return undefined;
  }
}

function writeState(dir: string, state: State): void {
  writeFileSync(join(dir, 'state.json.tmp'), JSON.stringify(state));
  renameSync(join(dir, 'state.json.tmp'), join(dir, 'state.json'));
}

/** Running (the very process that was started answers) or stopped. */
export function stackStatus(
  stacksDir: string,
  project: Project,
  stack: StackId,
): { running: boolean; pid: number | null; desired: State['desired'] | null } {
  const st = readState(stackDir(stacksDir, project, stack));
  const running = st !== undefined && processStartTime(st.pid) === st.startTime;
  return { running, pid: running ? st!.pid : null, desired: st?.desired ?? null };
}

/** A PING over the stack's unix socket, answered by +PONG. */
export function pingStack(stacksDir: string, project: Project, stack: StackId, timeoutMs = 2000): Promise<boolean> {
  const socket = join(stackDir(stacksDir, project, stack), 'redis.sock');
  if (!existsSync(socket)) return Promise.resolve(false);
  return new Promise((resolve) => {
    const s = connect(socket);
    let buf = '';
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      s.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    s.on('connect', () => s.write('PING\r\n'));
    s.on('data', (d) => {
      buf += d.toString();
      if (buf.includes('\r\n')) done(buf.startsWith('+PONG'));
    });
    s.on('error', () => done(false));
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Starts the stack's process (detached: it outlives the server) and waits for its PING. Data already in its volume is kept. */
export async function startStack(stacksDir: string, project: Project, stack: StackId): Promise<{ pid: number }> {
  const dir = stackDir(stacksDir, project, stack);
  const isRoot = process.getuid?.() === 0;
  // Every level must let the stack's unprivileged user through; only its own directories are its.
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  mkdirSync(join(dir, 'data'), { recursive: true, mode: 0o750 });
  if (isRoot) {
    chownSync(dir, RUN_AS.uid, RUN_AS.gid);
    chownSync(join(dir, 'data'), RUN_AS.uid, RUN_AS.gid);
  }
  rmSync(join(dir, 'redis.sock'), { force: true });
  const log = openSync(join(dir, 'log'), 'a', 0o640);
  const [cmd, ...args] = nativeArgv(stacksDir, project, stack);
  let child;
  try {
    child = spawn(cmd!, args, { cwd: dir, detached: true, stdio: ['ignore', log, log], env: ENV, ...(isRoot ? RUN_AS : {}) });
  } finally {
    closeSync(log);
  }
  const pid = await new Promise<number>((resolve, reject) => {
    child.once('spawn', () => resolve(child.pid!));
    child.once('error', (err) => reject(new AtelierError('UNAVAILABLE', `could not start ${cmd}: ${err.message}`)));
  });
  child.unref();
  const startTime = processStartTime(pid);
  if (startTime === undefined) throw new AtelierError('UNAVAILABLE', `${stack} exited at once: see ${join(dir, 'log')}`);
  writeState(dir, { pid, startTime, desired: 'running' });
  const deadline = Date.now() + 15_000;
  while (!(await pingStack(stacksDir, project, stack, 500))) {
    if (processStartTime(pid) !== startTime)
      throw new AtelierError('UNAVAILABLE', `${stack} exited while starting: see ${join(dir, 'log')}`);
    if (Date.now() > deadline) throw new AtelierError('UNAVAILABLE', `${stack} did not answer within 15 s: see ${join(dir, 'log')}`);
    await sleep(20);
  }
  return { pid };
}

/** Stops the stack's process (SIGTERM: redis flushes its append-only file; SIGKILL after 10 s). Its data stays. */
export async function stopStack(stacksDir: string, project: Project, stack: StackId): Promise<void> {
  const dir = stackDir(stacksDir, project, stack);
  const st = readState(dir);
  if (!st) return;
  if (processStartTime(st.pid) === st.startTime) {
    process.kill(st.pid, 'SIGTERM');
    const deadline = Date.now() + 10_000;
    while (processStartTime(st.pid) === st.startTime) {
      if (Date.now() > deadline) {
        process.kill(st.pid, 'SIGKILL');
        break;
      }
      await sleep(20);
    }
  }
  writeState(dir, { ...st, desired: 'stopped' });
}
