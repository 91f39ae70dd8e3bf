import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';

const HELPER = fileURLToPath(new URL('./spawner.py', import.meta.url));
const PYTHON = '/usr/bin/python3';

export interface SpawnRequest {
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  /** Standard output and error go there (appended); /dev/null when unset. */
  log?: string | undefined;
  /** In a session (and process group) of its own. */
  detached: boolean;
  /** This process stays alive until that one ends (a copy awaited), as for a child of its own. */
  awaited?: boolean;
}

export interface Spawned {
  pid: number;
  /** Resolves with the exit status (-N for a signal N) when the process ends. */
  exit: Promise<number>;
}

interface Helper {
  child: ChildProcess;
  nextId: number;
  replies: Map<number, { resolve: (pid: number) => void; reject: (err: Error) => void }>;
  exits: Map<number, (code: number) => void>;
  /** Exits that arrived before anyone asked (a process that ended at once). */
  early: Map<number, number>;
  /** Replies and awaited exits pending: while any is, the helper's pipe keeps this process alive. */
  holds: number;
}

function hold(h: Helper, delta: number): void {
  h.holds += delta;
  if (h.holds > 0) (h.child.stdout as Socket).ref();
  else (h.child.stdout as Socket).unref();
}

let helper: Helper | undefined;

/**
 * Forks through `spawner.py`, a small long-lived helper: a fork of the server itself (100+ MB)
 * costs 10–40 ms here and stops its event loop meanwhile (the workshops' relays, the API);
 * the helper's costs ~1 ms. Returns undefined when the helper cannot run (no python3): the
 * caller then spawns directly.
 */
export function spawnViaHelper(req: SpawnRequest): Promise<Spawned> | undefined {
  const h = running();
  if (!h) return undefined;
  const id = h.nextId++;
  const pid = new Promise<number>((resolve, reject) => h.replies.set(id, { resolve, reject }));
  hold(h, 1);
  const { awaited, ...wire } = req;
  h.child.stdin!.write(`${JSON.stringify({ id, ...wire })}\n`);
  return pid
    .finally(() => hold(h, -1))
    .then((p) => {
      if (awaited) hold(h, 1);
      const exit = new Promise<number>((resolve) => {
        const known = h.early.get(p);
        if (known !== undefined) {
          h.early.delete(p);
          resolve(known);
        } else h.exits.set(p, resolve);
      });
      return { pid: p, exit: awaited ? exit.finally(() => hold(h, -1)) : exit };
    });
}

function running(): Helper | undefined {
  if (helper) return helper;
  if (!existsSync(PYTHON) || !existsSync(HELPER)) return undefined;
  const child = spawn(PYTHON, ['-I', '-S', HELPER], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' },
  });
  const h: Helper = { child, nextId: 1, replies: new Map(), exits: new Map(), early: new Map(), holds: 0 };
  helper = h;
  // The helper must not keep the server alive, nor the server wait for it.
  child.unref();
  (child.stdin as Socket).unref();
  (child.stdout as Socket).unref();
  let buffer = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => {
    buffer += chunk;
    for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      let msg: { id?: number; pid?: number; error?: string; exit?: number; code?: number };
      try {
        msg = JSON.parse(line) as typeof msg;
      } catch {
        continue;
      }
      if (msg.exit !== undefined) {
        const waiter = h.exits.get(msg.exit);
        if (waiter) {
          h.exits.delete(msg.exit);
          waiter(msg.code ?? -1);
        } else h.early.set(msg.exit, msg.code ?? -1);
      } else if (msg.id !== undefined) {
        const reply = h.replies.get(msg.id);
        h.replies.delete(msg.id);
        if (msg.pid !== undefined) reply?.resolve(msg.pid);
        else reply?.reject(new Error(msg.error ?? 'the spawner did not say why'));
      }
    }
  });
  const gone = (why: string): void => {
    if (helper === h) helper = undefined;
    for (const r of h.replies.values()) r.reject(new Error(`the simulator spawner ${why}`));
    h.replies.clear();
    // Processes it started are no longer watched: whoever waits for one hears -1 now (a
    // simulator's start also checks /proc; a copy is then treated as failed).
    for (const w of h.exits.values()) w(-1);
    h.exits.clear();
  };
  child.on('error', (err) => gone(`could not run: ${err.message}`));
  child.on('exit', (code, signal) => gone(`exited (${signal ?? `code ${code}`})`));
  child.stdin!.on('error', () => undefined);
  return h;
}

/**
 * Runs `argv` to its end without a fork of the server (through the helper when it runs, else
 * `execFile`): for the short housekeeping commands the server runs while it serves (mount,
 * mkfs, rm), each of which would otherwise stop its event loop for the length of a fork.
 * Rejects with the command's last output lines when it fails. `logDir`: a directory only the
 * server writes, for that output (removed after); without it the error gives the exit status.
 */
export async function runOffServer(argv: string[], opts: { env: Record<string, string>; logDir?: string }): Promise<void> {
  const log = opts.logDir === undefined ? undefined : join(opts.logDir, `.run-${randomBytes(6).toString('hex')}.log`);
  const viaHelper = spawnViaHelper({ argv, cwd: '/', env: opts.env, log, detached: false, awaited: true });
  if (!viaHelper) {
    await new Promise<void>((resolve, reject) => {
      execFile(argv[0]!, argv.slice(1), { env: opts.env }, (err, _o, stderr) =>
        err ? reject(new Error(`${argv[0]} ${argv[1] ?? ''} failed: ${String(stderr).trim().slice(0, 300) || err.message}`)) : resolve(),
      );
    });
    return;
  }
  try {
    const code = await (await viaHelper).exit;
    if (code === 0) return;
    let said = '';
    try {
      if (log) said = readFileSync(log, 'utf8').trim().slice(-300);
    } catch {
      // it wrote nothing
    }
    throw new Error(`${argv[0]} ${argv[1] ?? ''} failed: ${said || (code < 0 ? `signal ${-code}` : `exit code ${code}`)}`);
  } finally {
    if (log) rmSync(log, { force: true });
  }
}
