/**
 * Commands in a workshop: the environment they start from, starting them under the workshop's
 * lock, collecting their output, and killing them.
 */
import { existsSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { posix } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { type Readable } from 'node:stream';
import { AtelierError, type ExecRequest } from '../core/index.js';
import { findPgBinDir } from '../db/index.js';
import { type Principal } from '../identity/index.js';
import { EGRESS_PORT, type SandboxHandle } from '../sandbox/index.js';
import type { WorkshopDriver } from './driver.js';
import type { Access, RunningExec, ServiceOptions, WorkshopRow, WorkshopShared } from './shared.js';

/** Every workshop process starts from this environment (then devcontainer.json, then the request). */
const PROXY_URL = `http://127.0.0.1:${EGRESS_PORT}`;

/**
 * The installed PostgreSQL's own bin directory (Debian: /usr/lib/postgresql/N/bin), first on a
 * workshop's PATH: Debian's /usr/bin/psql is a Perl wrapper that picks a cluster, which costs
 * ~50 ms per call here, and a workshop has no local cluster to pick (its databases are
 * simulators reached by URL). The directory holds the same version's client and server tools.
 */
function postgresBin(): string | undefined {
  try {
    const dir = findPgBinDir(undefined);
    return existsSync(`${dir}/psql`) ? dir : undefined;
  } catch {
    return undefined;
  }
}

const PG_BIN = postgresBin();

export const BASE_ENV: Record<string, string> = {
  PATH: `${PG_BIN ? `${PG_BIN}:` : ''}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
  HOME: '/home/atelier',
  USER: 'atelier',
  LOGNAME: 'atelier',
  SHELL: '/bin/bash',
  LANG: 'C.UTF-8',
  // The only way out is the egress proxy (see sandbox/launcher.ts); every tool that reads the
  // usual variables (curl, git, npm, pip, Go, Node's undici with a dispatcher…) goes through it.
  HTTP_PROXY: PROXY_URL,
  HTTPS_PROXY: PROXY_URL,
  ALL_PROXY: `socks5h://127.0.0.1:${EGRESS_PORT}`,
  http_proxy: PROXY_URL,
  https_proxy: PROXY_URL,
  all_proxy: `socks5h://127.0.0.1:${EGRESS_PORT}`,
  NO_PROXY: 'localhost,127.0.0.1,::1,.atelier.internal',
  no_proxy: 'localhost,127.0.0.1,::1,.atelier.internal',
};

/**
 * Resolves when `stream` ends, or once it has been idle (no data, not paused by a slow reader)
 * for 100 ms, which means a background process holds the pipe: it is then closed on our side.
 */
function drainAfterExit(stream: Readable): Promise<void> {
  return new Promise((resolve) => {
    if (stream.readableEnded || stream.destroyed) return resolve();
    let active = true;
    const onData = (): void => {
      active = true;
    };
    const timer = setInterval(() => {
      if (active || stream.isPaused()) {
        active = false;
        return;
      }
      stream.destroy();
      done();
    }, 100);
    const done = (): void => {
      clearInterval(timer);
      stream.off('data', onData);
      resolve();
    };
    stream.on('data', onData);
    stream.once('end', done);
    stream.once('close', done);
  });
}

function resolveCwd(cwd: string | undefined): string {
  const p = posix.normalize(posix.join('/workspace', cwd ?? '.'));
  return cwd !== undefined && posix.isAbsolute(cwd) ? posix.normalize(cwd) : p;
}

export class WorkshopExecs {
  private readonly driver: WorkshopDriver;
  private readonly opts: ServiceOptions;
  private readonly running: Map<string, Set<RunningExec>>;

  constructor(private readonly shared: WorkshopShared) {
    this.driver = shared.driver;
    this.opts = shared.opts;
    this.running = shared.running;
  }

  /**
   * Starts a command in a running workshop; output streams as it is produced. A command the
   * project's `approvals.commands` names waits for a human's approval first (`gate`).
   */
  async exec(
    id: string,
    req: ExecRequest,
    actor: Principal,
    gate: { onApproval?: (approvalId: string) => void; signal?: AbortSignal } = {},
  ): Promise<RunningExec> {
    // The granted secrets are read while the workshop's row is (one database round trip less on
    // every exec); a command that waited for an approval reads them again, as they are then.
    const secretEnv = this.opts.secretEnv;
    let secretsRead: Promise<Record<string, string>> = secretEnv ? secretEnv(id) : Promise.resolve({});
    if (this.opts.execGate) {
      let row: WorkshopRow;
      try {
        row = await this.shared.row(id, { actor, action: 'operate' });
      } catch (err) {
        secretsRead.catch(() => undefined);
        throw err;
      }
      if (row.approval_commands.length > 0) {
        secretsRead.catch(() => undefined);
        await this.opts.execGate(id, row.approval_commands, req, actor, gate);
        secretsRead = secretEnv ? secretEnv(id) : Promise.resolve({});
      }
    }
    const stdin = req.stdin === undefined ? undefined : Buffer.from(req.stdin, 'base64');
    const secrets = await secretsRead;
    return this.startLocked(
      id,
      { actor, action: 'operate' },
      req.command,
      resolveCwd(req.cwd),
      { ...secrets, ...(req.env ?? {}) },
      stdin,
      req.timeoutSeconds,
    );
  }

  /**
   * Checks the workshop and starts the command under its lock: a concurrent `stop` then either
   * comes first (the exec is refused) or waits until the command has joined the cgroups.
   */
  startLocked(
    id: string,
    access: Access | undefined,
    command: string[],
    cwd: string,
    env: Record<string, string>,
    stdin?: Buffer,
    timeoutSeconds?: number,
  ): Promise<RunningExec> {
    return this.shared.locked(id, async () => this.spawn(await this.shared.runnable(id, access), command, cwd, env, stdin, timeoutSeconds));
  }

  /**
   * Collects a command's output up to `maxBytes`. Past it: `kill` stops the command, `drop`
   * keeps the beginning and lets the command finish, `keep-tail` keeps the end (build logs).
   */
  async collectOutput(
    started: RunningExec | Promise<RunningExec>,
    opts: { maxBytes: number; overflow?: 'kill' | 'drop' | 'keep-tail' },
  ): Promise<{ exitCode: number; signal: string | null; stdout: Buffer; stderr: Buffer; truncated: boolean }> {
    const run = await started;
    const mode = opts.overflow ?? 'kill';
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    let truncated = false;
    const collect = (into: Buffer[]) => (c: Buffer) => {
      // Past the limit nothing more is kept (unless keeping the tail), even if a detached process keeps writing.
      if (truncated && mode !== 'keep-tail') return;
      if (mode === 'drop' && size + c.length > opts.maxBytes) {
        truncated = true;
        return;
      }
      into.push(c);
      size += c.length;
      if (size <= opts.maxBytes) return;
      truncated = true;
      if (mode === 'keep-tail') {
        // Long build output (npm ci) is normal: keep only its end, for the failure reason.
        while (size > opts.maxBytes && (out.length > 1 || err.length > 1)) {
          const from = out.length >= err.length ? out : err;
          size -= from.shift()!.length;
        }
      } else run.kill();
    };
    run.stdout.on('data', collect(out));
    run.stderr.on('data', collect(err));
    const { exitCode, signal } = await run.done;
    return { exitCode, signal, stdout: Buffer.concat(out), stderr: Buffer.concat(err), truncated };
  }

  spawn(
    row: WorkshopRow & { sandbox: SandboxHandle },
    command: string[],
    cwd: string,
    env: Record<string, string>,
    stdin: Buffer | undefined,
    timeoutSeconds?: number,
  ): RunningExec {
    let child: ChildProcess;
    try {
      child = this.driver.exec(row.sandbox, { command, cwd, env: this.sandboxEnv(row, env) });
    } catch (err) {
      // spawn refuses some arguments synchronously (E2BIG, NUL bytes): that is bad input.
      throw new AtelierError('INVALID_ARGUMENT', `the command could not be started: ${(err as Error).message}`, { field: 'command' });
    }
    if (!child.stdin || !child.stdout || !child.stderr) {
      // Out of file descriptors (EMFILE): Node made no pipes; the 'error' event follows.
      child.on('error', () => undefined);
      throw new AtelierError('UNAVAILABLE', 'the server could not start the command (out of file descriptors?); try again');
    }
    let settled = false;
    const kill = (): void => {
      // Once settled, the group id may belong to someone else: never signal it again.
      if (settled) return;
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // group already gone
      }
    };
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(stdin);
    let timedOut = false;
    const timer = timeoutSeconds
      ? setTimeout(() => {
          timedOut = true;
          kill();
        }, timeoutSeconds * 1000)
      : undefined;
    const done = new Promise<{ exitCode: number; signal: string | null }>((resolve, reject) => {
      child.on('error', (err) => reject(new AtelierError('SANDBOX_FAILED', `could not enter the workshop: ${err.message}`)));
      child.on('exit', (code, signal) => {
        if (timer) clearTimeout(timer);
        // A command killed by a signal exits 128+n, as in a shell; a timeout is 124, as with timeout(1).
        const result = {
          exitCode: timedOut ? 124 : (code ?? 128 + (signal ? (osConstants.signals[signal] ?? 9) : 0)),
          signal: timedOut ? 'SIGKILL' : signal,
        };
        // The command has exited; a process it left in the background may still hold its output
        // pipes open. Read what is there, then stop waiting for them, in any case within 2 s.
        const hard = setTimeout(() => {
          kill();
          child.stdout!.destroy();
          child.stderr!.destroy();
        }, 2000);
        void Promise.all([drainAfterExit(child.stdout!), drainAfterExit(child.stderr!)]).then(() => {
          clearTimeout(hard);
          settled = true;
          resolve(result);
        });
      });
    });
    const exec: RunningExec = { pid: child.pid ?? 0, stdout: child.stdout!, stderr: child.stderr!, done, kill };
    const set = this.running.get(row.id) ?? new Set<RunningExec>();
    set.add(exec);
    this.running.set(row.id, set);
    void done
      .finally(() => {
        set.delete(exec);
        if (set.size === 0) this.running.delete(row.id);
      })
      .catch(() => undefined);
    return exec;
  }

  /** Kills the commands running in one workshop (or all), waiting at most a few seconds. */
  async killExecs(id?: string): Promise<void> {
    const pending = id === undefined ? [...this.running.values()].flatMap((s) => [...s]) : [...(this.running.get(id) ?? [])];
    for (const exec of pending) exec.kill();
    // A command in a frozen (suspended) workshop dies only once thawed: do not wait for it forever.
    await Promise.race([Promise.allSettled(pending.map((e) => e.done)), new Promise((r) => setTimeout(r, 3000).unref())]);
  }

  sandboxEnv(row: WorkshopRow, extra: Record<string, string> = {}): Record<string, string> {
    const env: Record<string, string> = {
      ...BASE_ENV,
      ATELIER_WORKSHOP_ID: row.id,
      ATELIER_WORKSHOP_NAME: row.name,
      ...this.agentEnv(row),
      ...row.env,
      // The simulators' connection details win over the devcontainer's (which name compose services).
      ...this.opts.simulators.env(row.id),
      ...extra,
    };
    // The simulators' own commands (the `aws` wrapper) come first, whoever set the PATH: each
    // runs the next one of its name on the PATH.
    const first = this.opts.simulators.pathDirs(row.id).filter((d) => !(env.PATH ?? '').split(':').includes(d));
    if (first.length > 0) env.PATH = [...first, env.PATH ?? BASE_ENV.PATH].join(':');
    return env;
  }

  /** ATELIER_URL, ATELIER_TOKEN and ATELIER_MCP_URL: the API and MCP endpoint from inside, as this workshop's agent. */
  private agentEnv(row: WorkshopRow): Record<string, string> {
    if (!row.agent_token) return {};
    try {
      return {
        ATELIER_URL: 'http://api.atelier.internal',
        // The workshop's MCP endpoint (no token needed from inside: the server knows the workshop by its socket).
        ATELIER_MCP_URL: 'http://mcp.atelier.internal/mcp',
        ATELIER_TOKEN: this.opts.sealer.decrypt(row.agent_token, `workshop-token:${row.id}`).toString('utf8'),
      };
    } catch (err) {
      this.opts.log.warn({ workshop: row.id, err: (err as Error).message }, 'workshop token cannot be unsealed: ATELIER_TOKEN not set');
      return {};
    }
  }
}
