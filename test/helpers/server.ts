import { spawn, spawnSync, execFileSync, type ChildProcess } from 'node:child_process';
import {
  chownSync,
  cpSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  mkdirSync,
  writeFileSync,
} from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BIN = join(REPO_ROOT, 'bin', 'atelier');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface ApiResult<T = unknown> {
  status: number;
  body: T;
}

/** A real `atelier server start` process in a temporary data dir, with helpers to drive it. */
export class TestServer {
  url = '';
  token = '';
  /** The first admin's one-time password (must be changed at the first browser login). */
  password = '';
  proc: ChildProcess | undefined;
  log = '';

  /** Runs the server as this user instead of root (rootless mode), from `bin`. */
  runAs: { uid: number; gid: number; home: string; bin: string } | undefined;

  constructor(
    readonly dataDir: string,
    readonly extraArgs: string[] = [],
  ) {}

  /** Extra environment for the server process (ATELIER_MASTER_KEY_FILE, …). */
  serverEnv: NodeJS.ProcessEnv = {};

  /** The `atelier` it runs (another build's, for an upgrade); this checkout's by default. */
  bin: string | undefined;

  static async start(opts: { databaseUrl?: string; args?: string[]; env?: NodeJS.ProcessEnv } = {}): Promise<TestServer> {
    const dir = mkdtempSync('/tmp/atelier-test-');
    const args = [...(opts.databaseUrl ? ['--database-url', opts.databaseUrl] : []), ...(opts.args ?? [])];
    const s = new TestServer(dir, args);
    s.serverEnv = opts.env ?? {};
    await s.boot();
    return s;
  }

  get configDir(): string {
    return join(this.dataDir, 'config');
  }

  env(): NodeJS.ProcessEnv {
    return {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      ATELIER_CONFIG_DIR: this.configDir,
      ATELIER_LOG_LEVEL: 'warn',
      ATELIER_URL: this.url,
      ATELIER_TOKEN: this.token,
    };
  }

  /** Starts (or restarts) the server process and waits for /healthz (`timeoutMs`: a hang guard only). */
  async boot(timeoutMs = 60_000): Promise<void> {
    const credentials = join(this.dataDir, 'credentials.txt');
    const before = existsSync(credentials) ? readFileSync(credentials, 'utf8') : '';
    rmSync(credentials, { force: true });
    const bin = this.runAs?.bin ?? this.bin ?? BIN;
    const proc = spawn(
      process.execPath,
      [bin, 'server', 'start', '--data-dir', this.dataDir, '--listen', '127.0.0.1:0', '--allow-repo-root', '/tmp', ...this.extraArgs],
      {
        env: {
          PATH: process.env.PATH,
          HOME: this.runAs?.home ?? process.env.HOME,
          ATELIER_CONFIG_DIR: this.configDir,
          ATELIER_LOG_LEVEL: 'warn',
          // The PostgreSQL simulator template is made on first use, not at every test server's boot.
          ATELIER_SIMULATORS_WARM: '0',
          // A checkout whose node_modules is a link (a git worktree sharing another's) runs its
          // tests with --preserve-symlinks: the server must resolve its packages the same way.
          ...(process.env.NODE_OPTIONS ? { NODE_OPTIONS: process.env.NODE_OPTIONS } : {}),
          ...this.serverEnv,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
        ...(this.runAs ? { uid: this.runAs.uid, gid: this.runAs.gid, cwd: this.runAs.home } : {}),
      },
    );
    this.proc = proc;
    proc.stdout!.on('data', (c: Buffer) => (this.log += c.toString()));
    proc.stderr!.on('data', (c: Buffer) => (this.log += c.toString()));
    const deadline = Date.now() + timeoutMs;
    // The file is written once before listening (so the first token is never lost), then again with the URL.
    while (!existsSync(credentials) || readFileSync(credentials, 'utf8').includes('not listening yet')) {
      if (proc.exitCode !== null) throw new Error(`server exited (${proc.exitCode}):\n${this.log}`);
      if (Date.now() > deadline) throw new Error(`server did not start:\n${this.log}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const text = readFileSync(credentials, 'utf8');
    this.url = /^url: (\S+)/m.exec(text)![1]!;
    const token = /^token: (atl_\S+)/m.exec(text)?.[1] ?? /^token: (atl_\S+)/m.exec(before)?.[1];
    if (token) this.token = token;
    const password = /^password: (\S+)/m.exec(text)?.[1] ?? /^password: (\S+)/m.exec(before)?.[1];
    if (password && !password.startsWith('(')) this.password = password;
    const res = await fetch(`${this.url}/healthz`);
    if (res.status !== 200) throw new Error(`healthz ${res.status}`);
  }

  /** SIGTERM (clean shutdown) or SIGKILL, then waits for the process to exit. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    const proc = this.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return proc?.exitCode ?? null;
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    proc.kill(signal);
    return exited;
  }

  async api<T = unknown>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<ApiResult<T>> {
    const init: RequestInit = { method, headers: { authorization: `Bearer ${this.token}`, accept: 'application/json', ...headers } };
    if (body !== undefined) {
      if (Buffer.isBuffer(body)) {
        init.body = body;
        (init.headers as Record<string, string>)['content-type'] = 'application/octet-stream';
      } else {
        init.body = typeof body === 'string' ? body : JSON.stringify(body);
        (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
      }
    }
    let res: Response;
    try {
      res = await fetch(`${this.url}${path}`, init);
    } catch (err) {
      // A kept-alive connection the server closed (its idle timeout) just as it was reused: likelier
      // on a busy machine after a long test. An idempotent request is sent again, once.
      const code = ((err as { cause?: { code?: string } }).cause ?? {}).code;
      if (!['GET', 'HEAD', 'DELETE'].includes(method) || !['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED'].includes(code ?? ''))
        throw err;
      res = await fetch(`${this.url}${path}`, init);
    }
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // raw
    }
    return { status: res.status, body: parsed as T };
  }

  /** Runs the real CLI against this server. */
  cli(args: string[], opts: { input?: string; env?: NodeJS.ProcessEnv } = {}): Promise<CliResult> {
    return runCli(args, { env: { ...this.env(), ...opts.env }, ...(opts.input !== undefined ? { input: opts.input } : {}) });
  }

  async createWorkshop(
    body: Record<string, unknown>,
  ): Promise<{ id: string; status: string; statusReason: string | null; [k: string]: unknown }> {
    const r = await this.api<{ id: string; status: string; statusReason: string | null }>('POST', '/v1/workshops', body);
    if (r.status !== 201) throw new Error(`create failed: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }

  async exec(
    id: string,
    command: string[],
    extra: Record<string, unknown> = {},
  ): Promise<{ exitCode: number; stdout: string; stderr: string }> {
    const r = await this.api<{ exitCode: number; stdout: string; stderr: string }>('POST', `/v1/workshops/${id}/exec`, {
      command,
      ...extra,
    });
    if (r.status !== 200) throw new Error(`exec failed: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }

  /** Deletes every workshop, stops the server, removes the data dir. */
  async dispose(): Promise<void> {
    try {
      if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
        const list = await this.api<{ items: { id: string }[] }>('GET', '/v1/workshops');
        for (const w of list.body.items ?? []) await this.api('DELETE', `/v1/workshops/${w.id}`);
      }
    } finally {
      await this.stop();
      killStrays(this.dataDir);
      rmSync(this.dataDir, { recursive: true, force: true });
    }
  }
}

/** Last resort: kills any sandbox whose command line names this data dir (a failed test's leftovers). */
export function killStrays(dataDir: string): void {
  try {
    execFileSync('pkill', ['-9', '-f', '--', `${dataDir}/workshops/`], { stdio: 'ignore' });
  } catch {
    // none
  }
  try {
    execFileSync('pkill', ['-9', '-f', '--', `${dataDir}/simulators/`], { stdio: 'ignore' });
  } catch {
    // none
  }
  // Workshops' own filesystems (disk quotas) and spares left mounted by a failed test.
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m.startsWith(`${dataDir}/`));
  for (const m of mounts.reverse()) {
    try {
      execFileSync('umount', ['-l', m], { stdio: 'ignore' });
    } catch {
      // gone already
    }
  }
  const nodeFile = join(dataDir, 'node-id');
  if (!existsSync(nodeFile)) return;
  const node = readFileSync(nodeFile, 'utf8').trim();
  try {
    execFileSync('sh', [
      '-c',
      `find /sys/fs/cgroup -depth -type d -path "*/atelier/${node}*" 2>/dev/null | while read d; do [ -f "$d/freezer.state" ] && echo THAWED > "$d/freezer.state"; for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -9 $p 2>/dev/null; done; rmdir "$d" 2>/dev/null; done; true`,
    ]);
  } catch {
    // nothing left
  }
}

/** Runs the real CLI with exactly this environment (and uid), feeding `input` on stdin. */
export function runCli(args: string[], opts: { env: NodeJS.ProcessEnv; input?: string; uid?: number }): Promise<CliResult> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [BIN, ...args], {
      env: opts.env,
      stdio: ['pipe', 'pipe', 'pipe'],
      ...(opts.uid !== undefined ? { uid: opts.uid, gid: opts.uid, cwd: '/' } : {}),
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    p.stdin.end(opts.input ?? '');
    p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

/** A git repository in a temporary directory under /tmp, with the given files committed. */
/** The repositories `makeRepo` made in this test process: removed when it exits. */
const madeRepos = new Set<string>();
process.once('exit', () => {
  for (const dir of madeRepos) rmSync(dir, { recursive: true, force: true });
});

/**
 * A git repository of `files` (one commit on `main`) in a new folder under /tmp, removed when the
 * test process exits: a test may hand it to a server that clones it at any time until then.
 */
export function makeRepo(files: Record<string, string> = { 'README.md': '# test\n' }): string {
  const dir = mkdtempSync('/tmp/atelier-repo-');
  madeRepos.add(dir);
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, name)), { recursive: true });
    writeFileSync(join(dir, name), content);
  }
  const git = (...args: string[]): void => {
    execFileSync('git', ['-c', 'user.email=test@example.com', '-c', 'user.name=test', ...args], { cwd: dir, stdio: 'ignore' });
  };
  git('init', '-q', '-b', 'main');
  git('add', '-A');
  git('commit', '-qm', 'initial');
  return dir;
}

function fdTarget(pid: string, fd: number): string {
  try {
    return readlinkSync(`/proc/${pid}/fd/${fd}`);
  } catch {
    return '';
  }
}

/** How many host processes name `path` on their command line (a workshop's leftovers). */
export function processesNaming(path: string): number {
  let n = 0;
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      // A bwrap sandbox's command line names no path (its options come from a pipe): its output, the workshop's log, does.
      if (readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(path) || fdTarget(p, 1).startsWith(`${path}/`)) n++;
    } catch {
      // exited meanwhile
    }
  }
  return n;
}

/**
 * Shell that leaves what a naive delete cannot remove: a tree deeper than PATH_MAX and
 * read-only directories (a Go module cache).
 */
export const HARD_TO_DELETE =
  "perl -e 'for (1..30) { mkdir q(x) x 200; chdir q(x) x 200 or die }' && mkdir -p /home/atelier/go/pkg/mod/x && touch /home/atelier/go/pkg/mod/x/f && chmod -R a-w /home/atelier/go";

/** A long-running CLI process (port-forward, attach) whose output is watched as it comes. */
export class CliProcess {
  stdout = '';
  stderr = '';
  readonly proc: ChildProcess;
  readonly exited: Promise<number>;

  constructor(args: string[], env: NodeJS.ProcessEnv) {
    this.proc = spawn(process.execPath, [BIN, ...args], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.proc.stdout!.on('data', (c: Buffer) => (this.stdout += c.toString()));
    this.proc.stderr!.on('data', (c: Buffer) => (this.stderr += c.toString()));
    this.exited = new Promise((resolve) => this.proc.on('close', (code) => resolve(code ?? -1)));
  }

  /** Waits until stdout+stderr match `re` (or the process exits, or 60 s pass). */
  async waitFor(re: RegExp): Promise<RegExpMatchArray> {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const m = re.exec(this.stdout + this.stderr);
      if (m) return m;
      if (this.proc.exitCode !== null) throw new Error(`exited ${this.proc.exitCode} before ${re}:\n${this.stdout}\n${this.stderr}`);
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${re}:\n${this.stdout}\n${this.stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  stop(): Promise<number> {
    if (this.proc.exitCode === null) this.proc.kill('SIGTERM');
    return this.exited;
  }
}

/** The uid and gid the rootless tests run their server as. */
export const NOBODY = 65534;

/** Runs `args` as `nobody`: true when it exits 0. */
export function asNobody(args: string[]): boolean {
  return spawnSync('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', ...args]).status === 0;
}

/**
 * A server run by `nobody` (rootless), its data dir and home in a new scratch directory named
 * from `prefix` (removed by the caller, or here when the start fails). `nobody` must read the
 * checkout: one under /root is copied into the scratch directory first.
 */
export async function startRootlessServer(prefix: string): Promise<{ server: TestServer; base: string }> {
  const base = mkdtempSync(prefix);
  let server: TestServer | undefined;
  try {
    chownSync(base, NOBODY, NOBODY);
    let bin = join(REPO_ROOT, 'bin', 'atelier');
    if (!asNobody(['test', '-r', join(REPO_ROOT, 'package.json')])) {
      const copy = join(base, 'app');
      for (const part of ['bin', 'dist', 'node_modules', 'package.json'])
        cpSync(join(REPO_ROOT, part), join(copy, part), { recursive: true });
      execFileSync('chmod', ['-R', 'a+rX', copy]);
      bin = join(copy, 'bin', 'atelier');
    }
    const home = join(base, 'home');
    mkdirSync(home);
    chownSync(home, NOBODY, NOBODY);
    server = new TestServer(join(base, 'data'));
    server.runAs = { uid: NOBODY, gid: NOBODY, home, bin };
    await server.boot();
    return { server, base };
  } catch (err) {
    await server?.dispose();
    rmSync(base, { recursive: true, force: true });
    throw err;
  }
}

/** A test repository (makeRepo) that `nobody` owns. */
export function makeNobodyRepo(files?: Record<string, string>): string {
  const repo = makeRepo(files);
  execFileSync('chown', ['-R', `${NOBODY}:${NOBODY}`, repo]);
  return repo;
}

/** Polls `fn` until `ok` says yes or `seconds` pass (a hang guard: a busy 2-core machine), then returns the last value. */
export async function pollUntil<T>(fn: () => Promise<T>, ok: (v: T) => boolean, seconds = 120, everyMs = 200): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > deadline) return v;
    await new Promise((res) => setTimeout(res, everyMs));
  }
}
