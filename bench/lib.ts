/**
 * Shared helpers for the benchmarks: statistics, printing, timed child processes, and a
 * throw-away Atelier server (its own data dir under /tmp, its own workshops, all removed at
 * the end). Nothing here touches anything outside the benchmark's temporary directory and the
 * cgroups of its own server node.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
export const ATELIER_BIN = join(REPO_ROOT, 'bin', 'atelier');

/**
 * Node flags that write a CPU profile of the server (and of the CLI processes a benchmark starts)
 * into ATELIER_BENCH_CPU_PROF/<who>/ when that variable names a directory (`--cpu-prof` is not
 * allowed in NODE_OPTIONS). Open the .cpuprofile files in Chrome DevTools.
 */
export function cpuProfileArgs(who: string): string[] {
  const dir = process.env.ATELIER_BENCH_CPU_PROF;
  return dir ? ['--cpu-prof', `--cpu-prof-dir=${join(resolve(dir), who)}`] : [];
}

// ---------------------------------------------------------------- statistics

export interface Summary {
  n: number;
  min: number;
  max: number;
  mean: number;
  p50: number;
  p95: number;
  p99: number;
}

/** Percentile with linear interpolation between closest ranks (numpy's default); `sorted` ascending. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  const a = sorted[lo]!;
  const b = sorted[hi]!;
  return a + (b - a) * (rank - lo);
}

export function summarize(samples: readonly number[]): Summary {
  const s = [...samples].sort((a, b) => a - b);
  const mean = s.reduce((x, y) => x + y, 0) / (s.length || 1);
  return {
    n: s.length,
    min: s[0] ?? Number.NaN,
    max: s[s.length - 1] ?? Number.NaN,
    mean,
    p50: percentile(s, 50),
    p95: percentile(s, 95),
    p99: percentile(s, 99),
  };
}

// ---------------------------------------------------------------- printing

/**
 * Times two variants alternately, `warmup` rounds dropped then `runs` kept, so that both see the
 * same machine state: each call's time is what it returns (its own measure of the part that
 * counts) or, when it returns nothing, its whole duration.
 */
export async function alternate(
  runs: number,
  warmup: number,
  a: () => Promise<number | void>,
  b: () => Promise<number | void>,
): Promise<[number[], number[]]> {
  const out: [number[], number[]] = [[], []];
  for (let i = 0; i < warmup + runs; i++) {
    for (const [k, f] of [a, b].entries()) {
      const t0 = performance.now();
      const own = await f();
      if (i >= warmup) out[k]!.push(typeof own === 'number' ? own : performance.now() - t0);
    }
  }
  return out;
}

export function ms(x: number): string {
  if (!Number.isFinite(x)) return 'n/a';
  return `${x < 10 ? x.toFixed(2) : x.toFixed(1)} ms`;
}

export function mb(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(2)} MiB`;
}

export function heading(text: string): void {
  process.stdout.write(`== ${text} ==\n`);
}

export function line(text: string): void {
  process.stdout.write(`  ${text}\n`);
}

/** One row: who, what, sample count and the asked percentiles. */
export function statLine(who: string, what: string, s: Summary, pcts: ('p50' | 'p95' | 'p99')[]): void {
  const parts = pcts.map((p) => `${p} ${ms(s[p]).padStart(9)}`);
  line(`${who.padEnd(8)} ${what.padEnd(44)} n=${String(s.n).padEnd(4)} ${parts.join('  ')}`);
}

export function ratioLine(label: string, a: number, b: number): void {
  line(`ratio ${label}: ${(a / b).toFixed(2)}x`);
}

export function goalLine(text: string, value: number, limit: number, unit: (x: number) => string = ms): void {
  line(`goal: ${text} -> ${value < limit ? 'MET' : 'NOT MET'} (${unit(value)} vs ${unit(limit)})`);
}

// ---------------------------------------------------------------- child processes

/** Children this run started and that may still be running (killed at clean-up). */
const liveChildren = new Set<ChildProcess>();

export interface TimedRun {
  ms: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Spawns a command and resolves once it exited and its output is drained; `ms` is the wall time. */
export function timedSpawn(cmd: string, args: string[], opts: SpawnOptions = {}, timeoutMs = 30_000): Promise<TimedRun> {
  return new Promise((resolvePromise, reject) => {
    const t0 = performance.now();
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
    liveChildren.add(child);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on('data', (c: Buffer) => out.push(c));
    child.stderr?.on('data', (c: Buffer) => err.push(c));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      liveChildren.delete(child);
      reject(e);
    });
    child.on('close', (code, signal) => {
      const elapsed = performance.now() - t0;
      clearTimeout(timer);
      liveChildren.delete(child);
      resolvePromise({
        ms: elapsed,
        code,
        signal,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
      });
    });
  });
}

/** Runs a node script of a bench (`node script args…`); `first` is the first line it prints. */
export function startScript(script: string, args: string[]): { child: ChildProcess; first: Promise<string> } {
  const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const first = new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const nl = out.indexOf('\n');
      if (nl >= 0) resolve(out.slice(0, nl).trim());
    });
    child.once('exit', (code) => reject(new Error(`${script} exited ${code}: ${err.slice(0, 500)}`)));
  });
  return { child, first };
}

/** Stops a child: SIGTERM, then SIGKILL after 3 s. */
export async function stopChild(c: ChildProcess | undefined): Promise<void> {
  if (!c || c.exitCode !== null || c.signalCode !== null) return;
  const exited = new Promise((r) => c.once('exit', r));
  c.kill('SIGTERM');
  await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
  if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
}

/** A CONNECT through the egress proxy's unix socket: the tunnelled socket once it answered 200. */
export function connectThrough(socketPath: string, authority: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(socketPath, () => s.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`));
    let head = '';
    const onData = (c: Buffer): void => {
      head += c.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      s.off('data', onData);
      if (!/^HTTP\/1\.1 200/.test(head)) return reject(new Error(`CONNECT ${authority}: ${head.split('\r\n')[0]}`));
      resolve(s);
    };
    s.on('data', onData);
    s.once('error', reject);
  });
}

/** TLS over `socket` (a tunnel), or straight to `opts.host:port` when there is none. */
export function tlsOver(socket: net.Socket | undefined, opts: tls.ConnectionOptions): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const t = tls.connect({ ...opts, ...(socket ? { socket } : {}) }, () => resolve(t));
    t.once('error', reject);
  });
}

/** Every `*.crt` of `dir`, concatenated (the broker's per-workshop authorities, once made). */
export function certificatesIn(dir: string): Buffer {
  return Buffer.concat(
    readdirSync(dir)
      .filter((f) => f.endsWith('.crt'))
      .map((f) => readFileSync(join(dir, f))),
  );
}

export function killLiveChildren(): void {
  for (const c of liveChildren) {
    try {
      c.kill('SIGKILL');
    } catch {
      // gone
    }
  }
  liveChildren.clear();
}

export function hasCommand(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export function sleep(msec: number): Promise<void> {
  return new Promise((r) => setTimeout(r, msec));
}

// ---------------------------------------------------------------- /proc

/** Resident set size of a process in bytes (VmRSS), 0 when it is gone. */
export function rssBytes(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** Proportional set size in bytes (shared pages split between their users), 0 when unknown. */
export function pssBytes(pid: number): number {
  try {
    const m = /^Pss:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

export interface ProcInfo {
  pid: number;
  ppid: number;
  comm: string;
  state: string;
}

export function processTable(): Map<number, ProcInfo> {
  const out = new Map<number, ProcInfo>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const comm = stat.slice(stat.indexOf('(') + 1, close);
      const rest = stat.slice(close + 2).split(' ');
      out.set(Number(entry), { pid: Number(entry), ppid: Number(rest[1]), comm, state: rest[0] ?? '?' });
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** Every descendant of `root` (not `root` itself). */
export function descendants(root: number, table = processTable()): ProcInfo[] {
  const children = new Map<number, ProcInfo[]>();
  for (const p of table.values()) {
    const list = children.get(p.ppid) ?? [];
    list.push(p);
    children.set(p.ppid, list);
  }
  const out: ProcInfo[] = [];
  const stack = [root];
  while (stack.length > 0) {
    for (const c of children.get(stack.pop()!) ?? []) {
      out.push(c);
      stack.push(c.pid);
    }
  }
  return out;
}

/** Host memory in use (MemTotal - MemAvailable), bytes. */
export function hostUsedBytes(): number {
  const text = readFileSync('/proc/meminfo', 'utf8');
  const get = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? 0) * 1024;
  return get('MemTotal') - get('MemAvailable');
}

function readPids(file: string): number[] {
  try {
    return readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

// ---------------------------------------------------------------- scratch space

export interface Scratch {
  dir: string;
  /** A git repository with one small commit, under dir (so under /tmp, an allowed repo root). */
  repo: string;
}

export function makeScratch(): Scratch {
  const dir = mkdtempSync('/tmp/atelier-bench-');
  // The embedded PostgreSQL runs as `postgres` and must traverse to DATA_DIR/pg.
  chmodSync(dir, 0o711);
  const repo = join(dir, 'repo');
  mkdirSync(repo);
  writeFileSync(join(repo, 'README.md'), '# bench\n');
  writeFileSync(join(repo, 'main.sh'), '#!/bin/sh\necho hello\n');
  const git = (...args: string[]): void => {
    execFileSync('git', ['-c', 'user.name=bench', '-c', 'user.email=bench@localhost', '-c', 'init.defaultBranch=main', ...args], {
      cwd: repo,
      stdio: 'ignore',
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir },
    });
  };
  git('init', '-q');
  git('add', '.');
  git('commit', '-q', '-m', 'bench');
  return { dir, repo };
}

// ---------------------------------------------------------------- the server under test

export interface WorkshopJson {
  id: string;
  name: string;
  status: string;
  statusReason: string | null;
}

export interface ExecJson {
  exitCode: number;
  signal: string | null;
  stdout: string;
  stderr: string;
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
    what: string,
  ) {
    super(`${what}: HTTP ${status}: ${body.slice(0, 400)}`);
  }
}

const CONTROLLERS = ['memory', 'cpu', 'pids', 'freezer'] as const;
type Controller = (typeof CONTROLLERS)[number];

/** An `atelier server start` of this checkout (dist/), on a loopback port, with a data dir of its own. */
export class BenchServer {
  /** Every workshop this run created and has not yet seen deleted. */
  readonly created = new Set<string>();
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
  private stopped = false;
  aborted = false;
  private nameSeq = 0;

  private constructor(
    readonly scratch: Scratch,
    readonly child: ChildProcess,
    readonly url: string,
    readonly token: string,
    readonly nodeId: string,
    readonly dataDir: string,
    readonly configDir: string,
    readonly startMs: number,
    /** The server's own cgroup per controller (workshops nest under it). */
    private readonly ownCgroup: Record<Controller, string>,
  ) {}

  get pid(): number {
    return this.child.pid!;
  }

  /** The environment of a CLI run against this server (its own config dir, URL and token; no context). */
  cliEnv(): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { ...process.env, ATELIER_CONFIG_DIR: this.configDir, ATELIER_URL: this.url, ATELIER_TOKEN: this.token };
    delete env.ATELIER_CONTEXT;
    return env;
  }

  static async start(scratch: Scratch, extraEnv: NodeJS.ProcessEnv = {}): Promise<BenchServer> {
    const dataDir = join(scratch.dir, 'data');
    const configDir = join(scratch.dir, 'config');
    const logPath = join(scratch.dir, 'server.log');
    const env: NodeJS.ProcessEnv = {
      // 21 workshops live at once (create → exec) must fit the data dir's free space with their quotas.
      ATELIER_DEFAULT_DISK: '1g',
      ...process.env,
      ATELIER_CONFIG_DIR: configDir,
      ATELIER_LOG_LEVEL: 'info',
      ...extraEnv,
    };
    for (const k of ['ATELIER_URL', 'ATELIER_TOKEN', 'ATELIER_CONTEXT', 'ATELIER_DATA_DIR', 'ATELIER_LISTEN', 'ATELIER_DATABASE_URL'])
      delete env[k];
    const logFd = openSync(logPath, 'a');
    const t0 = performance.now();
    let child: ChildProcess;
    try {
      // Detached (own process group): a Ctrl-C on the benchmark must not stop the server before
      // the benchmark has deleted its workshops.
      child = spawn(
        process.execPath,
        [
          ...cpuProfileArgs('server'),
          ATELIER_BIN,
          'server',
          'start',
          '--data-dir',
          dataDir,
          '--listen',
          '127.0.0.1:0',
          '--allow-repo-root',
          '/tmp',
        ],
        {
          env,
          stdio: ['ignore', logFd, logFd],
          detached: true,
        },
      );
    } finally {
      closeSync(logFd);
    }
    let exited: string | undefined;
    child.on('exit', (code, signal) => {
      exited = `exited with ${signal ?? `code ${code}`}`;
    });
    const logTail = (): string => {
      try {
        return readFileSync(logPath, 'utf8').trim().split('\n').slice(-15).join('\n');
      } catch {
        return '';
      }
    };
    const credPath = join(dataDir, 'credentials.txt');
    const deadline = performance.now() + 90_000;
    let url: string | undefined;
    let token: string | undefined;
    for (;;) {
      if (exited) throw new Error(`the server ${exited} before it was ready:\n${logTail()}`);
      if (performance.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`the server was not ready within 90 s:\n${logTail()}`);
      }
      if (existsSync(credPath)) {
        const text = readFileSync(credPath, 'utf8');
        // Written once before listening (the token is never lost), then again with the real URL.
        url = text.includes('not listening yet') ? undefined : /^url:\s*(http\S+)/m.exec(text)?.[1];
        token = /^token:\s*(atl_\S+)/m.exec(text)?.[1];
        if (url && token) break;
      }
      await sleep(50);
    }
    for (;;) {
      const ok = await new Promise<boolean>((res) => {
        const req = http.get(`${url}/healthz`, (r) => {
          r.resume();
          res(r.statusCode === 200);
        });
        req.on('error', () => res(false));
      });
      if (ok) break;
      if (exited) throw new Error(`the server ${exited}:\n${logTail()}`);
      if (performance.now() > deadline) throw new Error(`/healthz did not answer 200 within 90 s:\n${logTail()}`);
      await sleep(50);
    }
    const startMs = performance.now() - t0;
    const nodeId = readFileSync(join(dataDir, 'node-id'), 'utf8').trim();
    const ownCgroup = {} as Record<Controller, string>;
    const lines = readFileSync(`/proc/${child.pid}/cgroup`, 'utf8').split('\n');
    for (const c of CONTROLLERS) {
      let path = '/';
      for (const l of lines) {
        const [, ctrls, p] = l.split(':');
        if (ctrls !== undefined && p !== undefined && ctrls.split(',').includes(c)) path = p;
      }
      ownCgroup[c] = path;
    }
    return new BenchServer(scratch, child, url!, token!, nodeId, dataDir, configDir, startMs, ownCgroup);
  }

  /** This server's parent cgroup directory for its workshops, for one controller. */
  nodeCgroupDir(c: Controller): string {
    return join('/sys/fs/cgroup', c, this.ownCgroup[c], 'atelier', this.nodeId);
  }

  workshopCgroupDir(c: Controller, id: string): string {
    return join(this.nodeCgroupDir(c), id);
  }

  /** Pids in the workshop's pids cgroup (bwrap, its PID 1, the idle command, running execs). */
  workshopPids(id: string): number[] {
    return readPids(join(this.workshopCgroupDir('pids', id), 'cgroup.procs'));
  }

  memcgUsage(id: string): number {
    try {
      return Number(readFileSync(join(this.workshopCgroupDir('memory', id), 'memory.usage_in_bytes'), 'utf8'));
    } catch {
      return Number.NaN;
    }
  }

  /** One API call; refused once the run is aborted (Ctrl-C), so that a benchmark stops making workshops. */
  async request<T>(method: string, path: string, body?: unknown, accept = 'application/json'): Promise<T> {
    if (this.aborted) throw new Error('aborted');
    return this.send<T>(method, path, body, accept);
  }

  /** One API call, also after an abort (clean-up). */
  private send<T>(method: string, path: string, body?: unknown, accept = 'application/json'): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}`, accept };
    if (payload) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(payload.length);
    }
    return new Promise<T>((res, rej) => {
      const req = http.request(`${this.url}${path}`, { method, headers, agent: this.agent }, (r) => {
        const chunks: Buffer[] = [];
        r.on('data', (c: Buffer) => chunks.push(c));
        r.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          if ((r.statusCode ?? 500) >= 300) return rej(new HttpError(r.statusCode ?? 500, text, `${method} ${path}`));
          try {
            res((text ? JSON.parse(text) : undefined) as T);
          } catch (e) {
            rej(e as Error);
          }
        });
        r.on('error', rej);
      });
      req.on('error', rej);
      req.end(payload);
    });
  }

  /** POST /v1/workshops; the id is remembered for clean-up whatever happens next. */
  async createWorkshop(opts: { memory?: string; cpus?: number; pids?: number; simulators?: unknown[] } = {}): Promise<WorkshopJson> {
    const name = `bench-${process.pid}-${++this.nameSeq}`;
    let ws: WorkshopJson;
    try {
      ws = await this.request<WorkshopJson>('POST', '/v1/workshops', {
        repo: this.scratch.repo,
        name,
        memory: opts.memory ?? '256m',
        ...(opts.cpus !== undefined ? { cpus: opts.cpus } : {}),
        ...(opts.pids !== undefined ? { pids: opts.pids } : {}),
        ...(opts.simulators !== undefined ? { simulators: opts.simulators } : {}),
      });
    } catch (err) {
      // A create that failed on the wire may still have made the workshop: find it by name.
      await this.adoptByName(name);
      throw err;
    }
    this.created.add(ws.id);
    if (ws.status !== 'Running') throw new Error(`workshop ${ws.id} is ${ws.status}: ${ws.statusReason ?? ''}`);
    return ws;
  }

  private async adoptByName(name: string): Promise<void> {
    try {
      const { items } = await this.request<{ items: WorkshopJson[] }>('GET', '/v1/workshops');
      for (const w of items) if (w.name === name) this.created.add(w.id);
    } catch {
      // the final clean-up lists again
    }
  }

  async exec(id: string, command: string[]): Promise<ExecJson> {
    const r = await this.request<ExecJson>('POST', `/v1/workshops/${id}/exec`, { command });
    if (r.exitCode !== 0) throw new Error(`exec ${command.join(' ')} in ${id} exited ${r.exitCode}: ${r.stderr.slice(0, 300)}`);
    return r;
  }

  async deleteWorkshop(id: string, cleanUp = false): Promise<number> {
    const t0 = performance.now();
    try {
      await (cleanUp ? this.send('DELETE', `/v1/workshops/${id}`) : this.request('DELETE', `/v1/workshops/${id}`));
    } catch (err) {
      if (!(err instanceof HttpError && err.status === 404)) throw err;
    }
    this.created.delete(id);
    return performance.now() - t0;
  }

  /** Deletes the given workshops, `concurrency` at a time; returns each delete's latency. */
  async deleteMany(ids: string[], concurrency = 10, cleanUp = false): Promise<number[]> {
    const queue = [...ids];
    const times: number[] = [];
    const errors: string[] = [];
    const worker = async (): Promise<void> => {
      for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
        try {
          times.push(await this.deleteWorkshop(id, cleanUp));
        } catch (err) {
          errors.push(`${id}: ${(err as Error).message}`);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, ids.length) }, worker));
    if (errors.length > 0) throw new Error(`delete failed for ${errors.length} workshop(s): ${errors.slice(0, 3).join('; ')}`);
    return times;
  }

  /**
   * Deletes every workshop this run created (and any other this server lists: the data dir and
   * node are this run's own), then stops the server with SIGTERM.
   */
  async shutdown(): Promise<string[]> {
    const problems: string[] = [];
    if (this.stopped) return problems;
    this.stopped = true;
    // List again after each pass: a create that was in flight at an abort lands meanwhile.
    for (let pass = 0; pass < 5; pass++) {
      try {
        const { items } = await this.send<{ items: WorkshopJson[] }>('GET', '/v1/workshops');
        for (const w of items) this.created.add(w.id);
      } catch (err) {
        problems.push(`listing workshops for clean-up: ${(err as Error).message}`);
        break;
      }
      if (this.created.size === 0) break;
      try {
        await this.deleteMany([...this.created], 10, true);
      } catch (err) {
        if (pass === 4) problems.push((err as Error).message);
      }
      await sleep(200);
    }
    if (this.created.size > 0) problems.push(`workshops not deleted through the API: ${[...this.created].join(', ')}`);
    this.agent.destroy();
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise<void>((r) => this.child.once('exit', () => r()));
      this.child.kill('SIGTERM');
      const ok = await Promise.race([exited.then(() => true), sleep(20_000).then(() => false)]);
      if (!ok) {
        problems.push('the server did not stop within 20 s of SIGTERM: killed');
        this.child.kill('SIGKILL');
        await Promise.race([exited, sleep(5000)]);
      }
    }
    return problems;
  }

  /** Lines of the server's log other than its usual start and stop messages. */
  logNotes(): string[] {
    let text = '';
    try {
      text = readFileSync(join(this.scratch.dir, 'server.log'), 'utf8');
    } catch {
      return [];
    }
    const usual =
      /^atelier: (isolation: |creating the embedded|the CLI on this machine|the CLI now uses this server|the CLI has a new context|server ready|admin credentials|create a workshop|SIGTERM: stopping)/;
    return text
      .split('\n')
      .filter((l) => l.trim() && !usual.test(l) && !/^\{"level":(10|20|30),/.test(l))
      .map((l) => l.slice(0, 400));
  }

  /** The server's info-level log records whose message is `msg` (the server logs at info for the benches). */
  logRecords(msg: string): Array<Record<string, unknown>> {
    let text = '';
    try {
      text = readFileSync(join(this.scratch.dir, 'server.log'), 'utf8');
    } catch {
      return [];
    }
    const out: Array<Record<string, unknown>> = [];
    for (const l of text.split('\n')) {
      if (!l.startsWith('{')) continue;
      try {
        const r = JSON.parse(l) as Record<string, unknown>;
        if (r.msg === msg) out.push(r);
      } catch {
        // not a record
      }
    }
    return out;
  }

  /**
   * Last resort after shutdown: kills whatever is left in this node's workshop cgroups or names
   * this run's scratch directory on its command line, then removes this node's cgroup dirs.
   * Touches only this run's own node id and directory.
   */
  async sweep(): Promise<string[]> {
    const found = sweepScratch(this.scratch.dir, this);
    for (let i = 0; i < 100; i++) {
      if (leftoverPids(this.scratch.dir, this).length === 0) break;
      await sleep(50);
    }
    const remaining = leftoverPids(this.scratch.dir, this);
    for (const c of CONTROLLERS) {
      const base = this.nodeCgroupDir(c);
      let entries: string[] = [];
      try {
        entries = readdirSync(base).filter((e) => e.startsWith('ws-'));
      } catch {
        continue;
      }
      for (const e of entries) {
        try {
          rmdirSync(join(base, e));
        } catch {
          // still busy: reported below
        }
      }
      try {
        rmdirSync(base);
      } catch {
        // still has children
      }
    }
    const problems: string[] = [];
    if (found.length > 0) problems.push(`killed ${found.length} leftover process(es) of this run: ${found.join(', ')}`);
    if (remaining.length > 0) problems.push(`processes still present after clean-up: ${remaining.join(', ')}`);
    return problems;
  }
}

/** Live (non-zombie) pids of this run: in its node's workshop cgroups, or naming its scratch dir. */
function leftoverPids(dir: string, server: BenchServer | undefined): number[] {
  const out = new Set<number>();
  const table = processTable();
  if (server) {
    let ids: string[] = [];
    try {
      ids = readdirSync(server.nodeCgroupDir('pids')).filter((e) => e.startsWith('ws-'));
    } catch {
      // no cgroups
    }
    for (const id of ids) for (const pid of server.workshopPids(id)) out.add(pid);
  }
  for (const p of table.values()) {
    if (p.pid === process.pid) continue;
    try {
      if (readFileSync(`/proc/${p.pid}/cmdline`, 'utf8').includes(dir)) out.add(p.pid);
    } catch {
      // exited
    }
  }
  return [...out].filter((pid) => {
    const info = table.get(pid);
    return info !== undefined && info.state !== 'Z';
  });
}

function sweepScratch(dir: string, server: BenchServer | undefined): string[] {
  const pids = leftoverPids(dir, server);
  if (pids.length === 0) return [];
  const described = pids.map((pid) => {
    try {
      return `${pid} (${readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, 3).join(' ').slice(0, 60)})`;
    } catch {
      return String(pid);
    }
  });
  if (server) {
    let ids: string[] = [];
    try {
      ids = readdirSync(server.nodeCgroupDir('freezer')).filter((e) => e.startsWith('ws-'));
    } catch {
      // none
    }
    for (const id of ids) {
      try {
        writeFileSync(join(server.workshopCgroupDir('freezer', id), 'freezer.state'), 'THAWED');
      } catch {
        // gone
      }
    }
  }
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  return described;
}

/** Removes the scratch directory, first killing anything of this run that still names it. */
export async function removeScratch(scratch: Scratch): Promise<string[]> {
  const problems: string[] = [];
  const found = sweepScratch(scratch.dir, undefined);
  if (found.length > 0) {
    problems.push(`killed ${found.length} leftover process(es) naming ${scratch.dir}: ${found.join(', ')}`);
    await sleep(200);
  }
  try {
    rmSync(scratch.dir, { recursive: true, force: true, maxRetries: 3 });
  } catch (err) {
    problems.push(`could not remove ${scratch.dir}: ${(err as Error).message}`);
  }
  return problems;
}
