/**
 * 6. Egress proxy: the library in src/egress (as built in dist/) beside a direct connection and
 * `squid` (apt) with an equivalent allowlist, in one run against a local origin.
 *
 * - plain HTTP keep-alive: CONCURRENCY client connections, each sending its next GET as soon as
 *   the previous answer is in, for ROUND_MS per round, ROUNDS rounds interleaved across the
 *   variants (so a busy moment on the machine hits every variant); requests/s is the median of
 *   the rounds, latencies are pooled over the rounds.
 * - MiB/s through a CONNECT tunnel: one TCP stream of TRANSFER_BYTES, origin → client
 *   (download) and client → origin (upload), TRANSFERS times each, median.
 *
 * - a bare TCP relay in node (no HTTP, no policy) is measured beside them for plain HTTP: the
 *   ceiling of any proxy process here, since with the client, the proxy and the origin sharing
 *   the machine's cores each request pays an extra process hop whatever the proxy does.
 *
 * - `socat` (apt, optional: measured when installed) as a second bare relay, in C, one process per
 *   connection: the cost of one extra hop when the relay itself costs next to nothing.
 * - `bench/c/epoll-relay.c` (compiled here when a C compiler is installed) as a third: one process,
 *   one epoll loop, one read and one write per chunk, no HTTP. The cheapest relay process there
 *   can be, so what it costs against direct is the cost of any extra hop on this machine. A second
 *   instance relays to the origin's raw source/sink beside the CONNECT tunnels: what one extra hop
 *   costs a bulk stream, with no proxy work at all.
 *
 * Fairness: every variant gets the same client (this process, one minimal HTTP/1.1 client), the
 * same CONCURRENCY connections and the same GET (origin-form to the origin and the bare relays,
 * absolute-form to the proxies), against the same origin process. On 2 cores the client and the
 * origin share the machine with the proxy, so the CPU each of them spends per request (from
 * /proc, before/after each round) is printed beside the proxy's: together they say where the
 * ceiling of any proxy lies here.
 *
 * Atelier's proxy is measured the way a workshop reaches it in production: a TCP socket handed
 * to the proxy (in production opened inside the workshop's network namespace), and also on a
 * unix socket.
 * The origin, the proxy and squid each run in a process of their own; the load comes from
 * this process, with a minimal HTTP/1.1 client (no node:http parser on the client side).
 * Every process is started here and stopped at the end; their files live under the run's
 * scratch directory. ATELIER_BENCH_EGRESS_PROF=<dir> runs the proxy with `node --cpu-prof`;
 * ATELIER_BENCH_EGRESS_MODULE=<file> loads the proxy library from that file instead of dist/egress/index.js
 * (to compare two builds in the same conditions); ATELIER_BENCH_EGRESS_PARTS=http (or connect) runs one part only.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { chownSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { hasCommand, heading, line, ratioLine, REPO_ROOT, sleep, summarize, type BenchServer, type Summary } from './lib.js';

const CONCURRENCY = 16;
const ROUNDS = 3;
const ROUND_MS = 2500;
const WARMUP_MS = 1000;
const TRANSFER_BYTES = 64 * 2 ** 20;
const TRANSFERS = 9;
const ORIGIN_NAME = 'origin.bench.test';
const GOAL_RPS_OF_DIRECT = 0.7;
const GOAL_MBPS_OF_DIRECT = 0.8;

// ---------------------------------------------------------------- child processes

/** Origin: node:http (keep-alive, small fixed answer) and a raw TCP source/sink (`DOWN n\n`, `UP n\n`). */
const ORIGIN_JS = `
import http from 'node:http';
import net from 'node:net';
const BODY = Buffer.from('hello from the benchmark origin\\n');
const web = http.createServer({ keepAliveTimeout: 120000 }, (req, res) => {
  req.resume();
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length });
  res.end(BODY);
});
const CHUNK = Buffer.alloc(256 * 1024, 0x61);
const raw = net.createServer((s) => {
  s.setNoDelay(true);
  s.on('error', () => {});
  let head = Buffer.alloc(0);
  const onHead = (c) => {
    head = Buffer.concat([head, c]);
    const nl = head.indexOf(10);
    if (nl < 0) return;
    s.off('data', onHead);
    const [cmd, n] = head.toString('latin1', 0, nl).split(' ');
    const size = Number(n);
    if (cmd === 'DOWN') {
      let left = size;
      const pump = () => {
        while (left > 0) {
          const k = Math.min(left, CHUNK.length);
          left -= k;
          if (!s.write(k === CHUNK.length ? CHUNK : CHUNK.subarray(0, k))) return void s.once('drain', pump);
        }
      };
      pump();
    } else if (cmd === 'UP') {
      let got = head.length - nl - 1;
      let told = false;
      const check = () => { if (!told && got >= size) { told = true; s.write('OK\\n'); } };
      s.on('data', (d) => { got += d.length; check(); });
      check();
    } else s.destroy();
  };
  s.on('data', onHead);
});
await Promise.all([web, raw].map((srv) => new Promise((r) => srv.listen(0, '127.0.0.1', r))));
process.stdout.write(JSON.stringify({ http: web.address().port, tcp: raw.address().port }) + '\\n');
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
`;

/** Atelier's proxy, from dist/: one workshop listening on a unix socket, allowing the origin's two ports. */
const PROXY_JS = `
const cfg = JSON.parse(process.argv[1]);
const { EgressProxy, createHostsResolver, createEgressPolicy } = await import(cfg.module);
const proxy = new EgressProxy({
  resolver: createHostsResolver({ [cfg.name]: '127.0.0.1' }),
  onError: (id, err) => process.stderr.write('proxy error: ' + (err && err.stack || err) + '\\n'),
});
const policy = createEgressPolicy({ allow: cfg.ports.map((p) => cfg.name + ':' + p), allowRanges: ['127.0.0.1/32'] });
await proxy.listen('ws-bench', cfg.socket, policy);
// As for a workshop: a TCP socket already listening (there, opened inside its network namespace).
const net = await import('node:net');
const tcp = net.createServer();
await new Promise((resolve) => tcp.listen({ host: '127.0.0.1', port: 0, backlog: 511 }, resolve));
await proxy.listen('ws-bench-tcp', tcp, policy);
process.stdout.write(JSON.stringify({ tcpPort: tcp.address().port }) + '\\n');
process.stdin.resume();
process.stdin.on('end', async () => { await proxy.closeAll(); process.exit(0); });
`;

/**
 * The ceiling of any proxy in node on this machine: a bare TCP relay (no HTTP parsing, no
 * policy) that joins each client connection to its own origin connection. The client speaks
 * origin-form to it, as to the origin. Whatever a proxy costs beyond this is its own work; what
 * this costs against direct is the extra process hop itself.
 */
const SPLICE_JS = `
import net from 'node:net';
const originPort = Number(process.argv[1]);
const srv = net.createServer((c) => {
  c.setNoDelay(true);
  const o = net.connect({ host: '127.0.0.1', port: originPort, noDelay: true });
  c.on('error', () => o.destroy());
  o.on('error', () => c.destroy());
  c.pipe(o);
  o.pipe(c);
});
await new Promise((r) => srv.listen({ host: '127.0.0.1', port: 0, backlog: 511 }, r));
process.stdout.write(JSON.stringify({ port: srv.address().port }) + '\\n');
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
`;

interface Child {
  name: string;
  proc: ChildProcess;
  stderr: string[];
}

function startChild(name: string, cmd: string, args: string[]): Child {
  const proc = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], cwd: REPO_ROOT });
  const c: Child = { name, proc, stderr: [] };
  proc.stderr?.on('data', (d: Buffer) => {
    c.stderr.push(d.toString('utf8'));
    if (c.stderr.length > 50) c.stderr.shift();
  });
  proc.on('error', (err) => c.stderr.push(String(err)));
  return c;
}

function firstLine(c: Child, timeoutMs = 15_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => fail(`no answer within ${timeoutMs} ms`), timeoutMs);
    const fail = (why: string): void => {
      clearTimeout(timer);
      reject(new Error(`${c.name}: ${why}: ${c.stderr.join('').trim().slice(-500)}`));
    };
    c.proc.stdout?.on('data', (d: Buffer) => {
      buf += d.toString('utf8');
      const nl = buf.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(timer);
        resolve(buf.slice(0, nl));
      }
    });
    c.proc.once('exit', (code, sig) => fail(`exited ${code ?? sig}`));
  });
}

/** Stops a child this benchmark started: stdin closed (node children exit), then SIGTERM, then SIGKILL. */
async function stopChild(c: Child, graceMs = 3000): Promise<void> {
  const p = c.proc;
  if (p.exitCode !== null || p.signalCode !== null) return;
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  p.stdin?.end();
  if (await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)])) return;
  p.kill('SIGTERM');
  if (await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)])) return;
  p.kill('SIGKILL');
  await Promise.race([exited, sleep(2000)]);
}

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** Waits until a TCP port on loopback accepts connections (or the child exits). */
async function waitForPort(port: number, c: Child, timeoutMs = 15_000): Promise<void> {
  const t0 = performance.now();
  for (;;) {
    if (c.proc.exitCode !== null || c.proc.signalCode !== null)
      throw new Error(`${c.name} exited ${c.proc.exitCode ?? c.proc.signalCode}: ${c.stderr.join('').trim().slice(-500)}`);
    const ok = await new Promise<boolean>((r) => {
      const s = net.connect({ host: '127.0.0.1', port }, () => {
        s.destroy();
        r(true);
      });
      s.on('error', () => r(false));
    });
    if (ok) return;
    if (performance.now() - t0 > timeoutMs) throw new Error(`${c.name} did not listen on 127.0.0.1:${port} within ${timeoutMs} ms`);
    await sleep(100);
  }
}

// ---------------------------------------------------------------- squid

function squidConfig(dir: string, port: number, originPorts: number[]): string {
  return `# generated by bench/egress.ts: an allowlist of one name, no cache, no logs outside ${dir}
http_port 127.0.0.1:${port}
visible_hostname atelier-bench
pid_filename ${join(dir, 'squid.pid')}
cache_log ${join(dir, 'cache.log')}
access_log none
cache_store_log none
netdb_filename none
coredump_dir ${dir}
hosts_file ${join(dir, 'hosts')}
dns_nameservers 127.0.0.1
cache deny all
cache_mem 8 MB
pinger_enable off
icp_port 0
htcp_port 0
client_db off
shutdown_lifetime 0 seconds
acl origin dstdomain ${ORIGIN_NAME}
acl origin_ports port ${originPorts.join(' ')}
acl CONNECT method CONNECT
http_access allow CONNECT origin origin_ports
http_access deny CONNECT
http_access allow origin origin_ports
http_access deny all
`;
}

async function startSquid(dir: string, originPorts: number[]): Promise<{ child: Child; port: number }> {
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const conf = join(dir, 'squid.conf');
  writeFileSync(conf, squidConfig(dir, port, originPorts));
  writeFileSync(join(dir, 'hosts'), `127.0.0.1 ${ORIGIN_NAME}\n`);
  if (process.getuid?.() === 0) {
    // As root squid switches to cache_effective_user (Debian: proxy) and writes its pid and log there.
    try {
      const uid = Number(execFileSync('id', ['-u', 'proxy'], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', 'proxy'], { encoding: 'utf8' }).trim());
      chownSync(dir, uid, gid);
    } catch {
      // no `proxy` user: squid then runs as nobody, which needs the directory writable
    }
  }
  const child = startChild('squid', 'squid', ['-N', '-f', conf]);
  try {
    await waitForPort(port, child);
  } catch (err) {
    let log = '';
    try {
      log = readFileSync(join(dir, 'cache.log'), 'utf8').trim().split('\n').slice(-5).join(' | ');
    } catch {
      // no log
    }
    await stopChild(child, 500);
    throw new Error(`${(err as Error).message}${log ? ` (cache.log: ${log})` : ''}`);
  }
  return { child, port };
}

// ---------------------------------------------------------------- load

type Target = { port: number } | { path: string };

function connectTo(t: Target): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = 'path' in t ? net.connect({ path: t.path }) : net.connect({ host: '127.0.0.1', port: t.port });
    s.once('connect', () => {
      s.off('error', reject);
      if (!('path' in t)) s.setNoDelay(true);
      resolve(s);
    });
    s.once('error', reject);
  });
}

interface HttpRun {
  requests: number;
  ms: number;
  latencies: number[];
}

/**
 * CONCURRENCY keep-alive connections, each sending `request` again as soon as the previous
 * answer (Content-Length framed) is complete, for `durationMs`. Any status but 200 fails the run.
 */
async function httpLoad(target: Target, request: Buffer, durationMs: number): Promise<HttpRun> {
  const sockets = await Promise.all(Array.from({ length: CONCURRENCY }, () => connectTo(target)));
  const latencies: number[] = [];
  const t0 = performance.now();
  const deadline = t0 + durationMs;
  try {
    await Promise.all(
      sockets.map(
        (s) =>
          new Promise<void>((resolve, reject) => {
            let buf: Buffer | null = null;
            let need = -1;
            let sent = 0;
            const send = (): void => {
              sent = performance.now();
              s.write(request);
            };
            s.on('error', reject);
            s.on('close', () => reject(new Error('the connection closed during the run')));
            s.on('data', (chunk: Buffer) => {
              buf = buf ? Buffer.concat([buf, chunk]) : chunk;
              for (;;) {
                if (need < 0) {
                  const end = buf.indexOf('\r\n\r\n');
                  if (end < 0) return;
                  const head = buf.toString('latin1', 0, end);
                  const status = head.slice(9, 12);
                  const cl = /\r\ncontent-length:[ \t]*(\d+)/i.exec(head);
                  if (status !== '200' || !cl) {
                    reject(new Error(`answer not 200 with Content-Length: ${head.split('\r\n').slice(0, 6).join(' | ').slice(0, 400)}`));
                    return;
                  }
                  need = end + 4 + Number(cl[1]);
                }
                if (buf.length < need) return;
                const now = performance.now();
                buf = buf.length > need ? buf.subarray(need) : null;
                need = -1;
                if (now > deadline) {
                  s.removeAllListeners('close');
                  resolve();
                  return;
                }
                latencies.push(now - sent);
                send();
                if (!buf) return;
              }
            });
            send();
          }),
      ),
    );
  } finally {
    for (const s of sockets) s.destroy();
  }
  return { requests: latencies.length, ms: durationMs, latencies };
}

/** CONNECT host:port through a proxy; resolves with the tunnel once the proxy answered 200. */
async function openTunnel(proxy: Target, port: number): Promise<net.Socket> {
  const s = await connectTo(proxy);
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (c: Buffer): void => {
      buf = Buffer.concat([buf, c]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      s.off('data', onData);
      s.off('error', reject);
      const head = buf.toString('latin1', 0, end);
      if (!/^HTTP\/1\.[01] 200/.test(head)) {
        s.destroy();
        reject(new Error(`CONNECT refused: ${head.split('\r\n').slice(0, 6).join(' | ').slice(0, 400)}`));
        return;
      }
      s.pause();
      if (buf.length > end + 4) s.unshift(buf.subarray(end + 4));
      resolve(s);
    };
    s.on('data', onData);
    s.once('error', reject);
    s.write(`CONNECT ${ORIGIN_NAME}:${port} HTTP/1.1\r\nHost: ${ORIGIN_NAME}:${port}\r\n\r\n`);
  });
}

const UP_CHUNK = Buffer.alloc(256 * 1024, 0x62);

/** One transfer of `bytes` over an open stream to the origin's source/sink; returns milliseconds. */
function transfer(s: net.Socket, direction: 'down' | 'up', bytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    s.on('error', reject);
    s.on('close', () => reject(new Error('the stream closed during the transfer')));
    const t0 = performance.now();
    if (direction === 'down') {
      let got = 0;
      s.on('data', (c: Buffer) => {
        got += c.length;
        if (got >= bytes) resolve(performance.now() - t0);
      });
      s.resume();
      s.write(`DOWN ${bytes}\n`);
    } else {
      s.on('data', (c: Buffer) => {
        if (c.includes('OK\n')) resolve(performance.now() - t0);
      });
      s.resume();
      s.write(`UP ${bytes}\n`);
      let left = bytes;
      const pump = (): void => {
        while (left > 0) {
          const k = Math.min(left, UP_CHUNK.length);
          left -= k;
          if (!s.write(k === UP_CHUNK.length ? UP_CHUNK : UP_CHUNK.subarray(0, k))) {
            s.once('drain', pump);
            return;
          }
        }
      };
      pump();
    }
  });
}

// ---------------------------------------------------------------- printing

function rps(x: number): string {
  return `${Math.round(x)} req/s`;
}

function mibps(x: number): string {
  return `${x.toFixed(0)} MiB/s`;
}

function fmtMs(x: number): string {
  return `${x < 10 ? x.toFixed(2) : x.toFixed(1)} ms`;
}

function goalAtLeast(text: string, value: number, limit: number, unit: (x: number) => string): void {
  line(`goal: ${text} -> ${value >= limit ? 'MET' : 'NOT MET'} (${unit(value)} vs ${unit(limit)})`);
}

function median(xs: readonly number[]): number {
  return summarize(xs).p50;
}

// ---------------------------------------------------------------- the benchmark

interface HttpResult {
  rps: number;
  rounds: number[];
  latency: Summary;
  /** CPU per request of the relay or proxy process (absent for direct). */
  proxyCpuUsPerRequest?: number;
  /** CPU per request of the load generator (this process) and of the origin. */
  clientCpuUsPerRequest: number;
  originCpuUsPerRequest: number;
}

interface Variant {
  who: string;
  what: string;
  key: string;
  target: Target;
  /** Absolute-form requests (through a proxy) or origin-form (direct). */
  proxied: boolean;
  /** The proxy's process, whose CPU time is reported. */
  pid?: number;
  /** Count the CPU of the process's children too (socat: one child per connection). */
  tree?: boolean;
}

/** Fields of /proc/PID/stat after the command name (index 0 is the state); undefined when the process is gone. */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/**
 * CPU time (user + system) of a process in ms, from /proc (clock ticks assumed 100 Hz, Linux's
 * USER_HZ). With `tree`, also its children, live (their own time) and reaped (cutime, cstime):
 * socat serves each connection in a child process of its own, and atelier's CONNECT tunnels are
 * relayed by its zero-copy child (splice-relay.py), whose time is the proxy's.
 */
function cpuMs(pid: number | undefined, tree = false): number {
  if (pid === undefined) return Number.NaN;
  const f = statFields(pid);
  if (!f) return Number.NaN;
  let ticks = Number(f[11]) + Number(f[12]);
  if (tree) {
    ticks += Number(f[13]) + Number(f[14]);
    let kids: string[] = [];
    try {
      kids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    } catch {
      // no children file (old kernel): reaped children only
    }
    for (const k of kids) {
      const c = statFields(Number(k));
      if (c) ticks += Number(c[11]) + Number(c[12]);
    }
  }
  return ticks * 10;
}

/** This process's CPU time (the load generator) in ms. */
function selfCpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

function cpuText(cpu: number, wallMs: number, per: number, unit: string): string {
  if (!Number.isFinite(cpu)) return '';
  return `  proxy CPU ${`${Math.round((100 * cpu) / wallMs)} %`.padStart(5)}, ${`${Math.round((cpu * 1000) / per)} µs`.padStart(7)}/${unit}`;
}

export async function egress(server: BenchServer): Promise<Record<string, unknown>> {
  heading(
    `6. egress proxy vs direct vs squid (${CONCURRENCY} keep-alive connections, ${ROUNDS}×${ROUND_MS / 1000} s rounds; ` +
      `CONNECT ${TRANSFER_BYTES / 2 ** 20} MiB ×${TRANSFERS}; goals ≥ ${GOAL_RPS_OF_DIRECT * 100} % of direct req/s, ≥ squid req/s, ` +
      `≥ ${GOAL_MBPS_OF_DIRECT * 100} % of direct MiB/s)`,
  );
  const dir = join(server.scratch.dir, 'egress');
  mkdirSync(dir, { recursive: true });
  const result: Record<string, unknown> = {};
  const children: Child[] = [];
  try {
    const origin = startChild('origin', process.execPath, ['--input-type=module', '-e', ORIGIN_JS, dir]);
    children.push(origin);
    const ports = JSON.parse(await firstLine(origin)) as { http: number; tcp: number };

    const socket = join(dir, 'proxy.sock');
    const prof = process.env.ATELIER_BENCH_EGRESS_PROF;
    const proxyCfg = {
      module: pathToFileURL(process.env.ATELIER_BENCH_EGRESS_MODULE ?? join(REPO_ROOT, 'dist', 'egress', 'index.js')).href,
      name: ORIGIN_NAME,
      ports: [ports.http, ports.tcp],
      socket,
    };
    const proxy = startChild('atelier proxy', process.execPath, [
      ...(prof ? ['--cpu-prof', `--cpu-prof-dir=${prof}`] : []),
      '--input-type=module',
      '-e',
      PROXY_JS,
      JSON.stringify(proxyCfg),
    ]);
    children.push(proxy);
    const { tcpPort } = JSON.parse(await firstLine(proxy)) as { tcpPort: number };

    // Bare relays to the origin's raw source/sink, measured with the CONNECT tunnels only.
    const bulkRelays: Variant[] = [];
    const variants: Variant[] = [
      { who: 'direct', what: 'node:http origin, no proxy', key: 'direct', target: { port: ports.http }, proxied: false },
    ];
    // Production: the proxy accepts on a TCP socket it opened inside the workshop's network
    // namespace (sandbox/netns.ts); here the same kind of socket, on the host's loopback.
    variants.push({
      who: 'atelier',
      what: 'TCP listener handed to the proxy (production)',
      key: 'atelierTcp',
      target: { port: tcpPort },
      proxied: true,
      pid: proxy.proc.pid,
    });
    const production = 'atelierTcp';
    variants.push({
      who: 'atelier',
      what: 'unix socket (the library can listen on one)',
      key: 'atelierUnix',
      target: { path: socket },
      proxied: true,
      pid: proxy.proc.pid,
    });

    const splice = startChild('tcp relay', process.execPath, ['--input-type=module', '-e', SPLICE_JS, String(ports.http)]);
    children.push(splice);
    const { port: splicePort } = JSON.parse(await firstLine(splice)) as { port: number };
    variants.push({
      who: 'relay',
      what: 'bare TCP relay in node (ceiling of a proxy)',
      key: 'relay',
      target: { port: splicePort },
      proxied: false,
      pid: splice.proc.pid,
    });

    if (!hasCommand('socat')) {
      line('socat    skipped: socat is not installed (apt-get install socat): no C relay beside the node one');
    } else {
      const port = await freePort();
      const socat = startChild('socat relay', 'socat', [
        `TCP-LISTEN:${port},bind=127.0.0.1,reuseaddr,fork,backlog=511,nodelay`,
        `TCP:127.0.0.1:${ports.http},nodelay`,
      ]);
      children.push(socat);
      await waitForPort(port, socat);
      variants.push({
        who: 'socat',
        what: 'bare TCP relay in C (socat, a process per conn.)',
        key: 'socat',
        target: { port },
        proxied: false,
        pid: socat.proc.pid,
        tree: true,
      });
    }

    if (!hasCommand('cc')) {
      line('c-relay  skipped: no C compiler (apt-get install gcc): no epoll relay in C beside the others');
    } else {
      const exe = join(dir, 'epoll-relay');
      execFileSync('cc', ['-O2', '-o', exe, join(REPO_ROOT, 'bench', 'c', 'epoll-relay.c')]);
      const crelay = startChild('epoll relay', exe, [String(ports.http)]);
      children.push(crelay);
      const { port } = JSON.parse(await firstLine(crelay)) as { port: number };
      variants.push({
        who: 'c-relay',
        what: 'bare TCP relay in C (one epoll loop, no HTTP)',
        key: 'crelay',
        target: { port },
        proxied: false,
        pid: crelay.proc.pid,
      });
      // And one to the origin's raw source/sink: what one extra hop costs a bulk stream.
      const bulk = startChild('epoll relay (bulk)', exe, [String(ports.tcp)]);
      children.push(bulk);
      const { port: bulkPort } = JSON.parse(await firstLine(bulk)) as { port: number };
      bulkRelays.push({
        who: 'c-relay',
        what: 'bare TCP relay in C (read/write, 64 KiB buffer)',
        key: 'crelayBulk',
        target: { port: bulkPort },
        proxied: false,
        pid: bulk.proc.pid,
      });
    }

    if (!hasCommand('squid')) {
      line('squid    skipped: squid is not installed (apt-get install squid)');
    } else {
      try {
        const sq = await startSquid(join(dir, 'squid'), [ports.http, ports.tcp]);
        children.push(sq.child);
        const version = /Version (\S+)/.exec(execFileSync('squid', ['-v'], { encoding: 'utf8' }))?.[1] ?? '?';
        variants.push({
          who: 'squid',
          what: `squid ${version}, allowlist of one name, no cache`,
          key: 'squid',
          target: { port: sq.port },
          proxied: true,
          pid: sq.child.proc.pid,
        });
      } catch (err) {
        line(`squid    skipped: could not be started: ${(err as Error).message}`);
      }
    }

    // ---- (1) plain HTTP keep-alive
    const parts = (process.env.ATELIER_BENCH_EGRESS_PARTS ?? 'http,connect').split(',');
    const authority = `${ORIGIN_NAME}:${ports.http}`;
    const direct = Buffer.from(`GET / HTTP/1.1\r\nHost: ${authority}\r\nUser-Agent: atelier-bench\r\n\r\n`);
    const absolute = Buffer.from(`GET http://${authority}/ HTTP/1.1\r\nHost: ${authority}\r\nUser-Agent: atelier-bench\r\n\r\n`);
    const http: Record<string, HttpResult> = {};
    if (parts.includes('http')) {
      for (const v of variants) await httpLoad(v.target, v.proxied ? absolute : direct, WARMUP_MS);
      const rounds = new Map<string, number[]>(variants.map((v) => [v.key, []]));
      // CPU ms of the relay/proxy, the client (this process) and the origin, and requests, summed over the rounds.
      const cpu = new Map(variants.map((v) => [v.key, { ms: 0, client: 0, origin: 0, wall: 0, requests: 0 }]));
      const lat = new Map<string, number[]>(variants.map((v) => [v.key, []]));
      const originPid = origin.proc.pid;
      for (let r = 0; r < ROUNDS; r++) {
        for (const v of variants) {
          // Connections of the previous variant are gone before this one is measured (socat's children exit).
          await sleep(50);
          const c0 = cpuMs(v.pid, v.tree);
          const k0 = selfCpuMs();
          const o0 = cpuMs(originPid);
          const w0 = performance.now();
          const run = await httpLoad(v.target, v.proxied ? absolute : direct, ROUND_MS);
          const wall = performance.now() - w0;
          const k1 = selfCpuMs();
          const o1 = cpuMs(originPid);
          if (v.tree) await sleep(50); // socat's children exit (and are reaped) once the client closed
          const c1 = cpuMs(v.pid, v.tree);
          rounds.get(v.key)!.push((run.requests / run.ms) * 1000);
          const c = cpu.get(v.key)!;
          c.ms += c1 - c0;
          c.client += k1 - k0;
          c.origin += o1 - o0;
          c.wall += wall;
          c.requests += run.requests;
          for (const x of run.latencies) lat.get(v.key)!.push(x);
        }
      }
      line('plain HTTP keep-alive GET (absolute-form through the proxies), median of rounds; latency pooled:');
      for (const v of variants) {
        const s = summarize(lat.get(v.key)!);
        const r = median(rounds.get(v.key)!);
        const c = cpu.get(v.key)!;
        const us = (x: number): number => (x * 1000) / c.requests;
        http[v.key] = {
          rps: r,
          rounds: rounds.get(v.key)!,
          latency: s,
          clientCpuUsPerRequest: us(c.client),
          originCpuUsPerRequest: us(c.origin),
        };
        if (Number.isFinite(c.ms)) http[v.key]!.proxyCpuUsPerRequest = us(c.ms);
        line(
          `${v.who.padEnd(8)} ${v.what.padEnd(48)} ${rps(r).padStart(12)}  p50 ${fmtMs(s.p50).padStart(9)}  p99 ${fmtMs(s.p99).padStart(9)}${cpuText(c.ms, c.wall, c.requests, 'req')}`,
        );
      }
      line('CPU per request of each process (µs, from /proc; the machine has 2 cores, so 2 000 000 / total is the ceiling in req/s):');
      for (const v of variants) {
        const h = http[v.key]!;
        const mid = h.proxyCpuUsPerRequest ?? 0;
        const total = h.clientCpuUsPerRequest + h.originCpuUsPerRequest + mid;
        line(
          `${v.who.padEnd(8)} client ${Math.round(h.clientCpuUsPerRequest).toString().padStart(4)}  origin ${Math.round(h.originCpuUsPerRequest).toString().padStart(4)}  ` +
            `relay/proxy ${(v.pid === undefined ? '-' : Math.round(mid).toString()).padStart(4)}  total ${Math.round(total).toString().padStart(4)} µs/req` +
            `  -> 2-core ceiling ${rps(2e6 / total).padStart(12)}, measured ${rps(h.rps).padStart(12)}`,
        );
      }
      result.http = http;
    }

    // ---- (2) CONNECT throughput (the bare relays are HTTP-only references: not here)
    const tunnelled = [...variants.filter((v) => v.key !== 'relay' && v.key !== 'socat' && v.key !== 'crelay'), ...bulkRelays];
    const tput: Record<
      string,
      { down: number[]; up: number[]; downMiBps: number; upMiBps: number; cpu: { ms: number; wall: number; mib: number } }
    > = {};
    if (parts.includes('connect')) {
      const open = (v: Variant): Promise<net.Socket> =>
        v.proxied
          ? openTunnel(v.target, ports.tcp)
          : connectTo({ port: v.key === 'direct' ? ports.tcp : (v.target as { port: number }).port });
      const once = async (v: Variant, d: 'down' | 'up', bytes: number): Promise<number> => {
        const s = await open(v);
        try {
          const c0 = cpuMs(v.pid, true);
          const ms = await transfer(s, d, bytes);
          const c = tput[v.key]!.cpu;
          c.ms += cpuMs(v.pid, true) - c0;
          c.wall += ms;
          c.mib += bytes / 2 ** 20;
          return ((bytes / 2 ** 20) * 1000) / ms;
        } finally {
          s.destroy();
        }
      };
      for (const v of tunnelled) {
        tput[v.key] = { down: [], up: [], downMiBps: 0, upMiBps: 0, cpu: { ms: 0, wall: 0, mib: 0 } };
        await once(v, 'down', 16 * 2 ** 20);
        await once(v, 'up', 16 * 2 ** 20);
      }
      for (const v of tunnelled) tput[v.key]!.cpu = { ms: 0, wall: 0, mib: 0 };
      for (let i = 0; i < TRANSFERS; i++) {
        for (const v of tunnelled) {
          tput[v.key]!.down.push(await once(v, 'down', TRANSFER_BYTES));
          tput[v.key]!.up.push(await once(v, 'up', TRANSFER_BYTES));
        }
      }
      line(`one TCP stream, ${TRANSFER_BYTES / 2 ** 20} MiB, median of ${TRANSFERS} (direct: plain TCP; proxies: CONNECT tunnel):`);
      for (const v of tunnelled) {
        const t = tput[v.key]!;
        t.downMiBps = median(t.down);
        t.upMiBps = median(t.up);
        line(
          `${v.who.padEnd(8)} ${v.what.padEnd(48)} download ${mibps(t.downMiBps).padStart(11)}  upload ${mibps(t.upMiBps).padStart(11)}${cpuText(t.cpu.ms, t.cpu.wall, t.cpu.mib, 'MiB')}`,
        );
      }
      result.connect = tput;
    }

    // ---- ratios and goals (on the production path)
    const p = http[production];
    const d = http.direct;
    const sq = http.squid;
    if (p && d) {
      ratioLine(`atelier (${production}) / direct req/s`, p.rps, d.rps);
      if (http.relay) {
        ratioLine('bare TCP relay in node / direct req/s (what the extra hop costs a node process)', http.relay.rps, d.rps);
        ratioLine(`atelier (${production}) / bare TCP relay in node req/s`, p.rps, http.relay.rps);
      }
      if (http.socat) {
        ratioLine('socat relay / direct req/s (what one extra hop in C costs)', http.socat.rps, d.rps);
        ratioLine(`atelier (${production}) / socat relay req/s`, p.rps, http.socat.rps);
      }
      if (http.crelay) {
        ratioLine('epoll relay in C / direct req/s (the cheapest extra hop there can be)', http.crelay.rps, d.rps);
        ratioLine(`atelier (${production}) / epoll relay in C req/s`, p.rps, http.crelay.rps);
      }
      if (http.atelierUnix) ratioLine('atelier (unix socket) / direct req/s', http.atelierUnix.rps, d.rps);
      if (sq) {
        ratioLine(`atelier (${production}) / squid req/s`, p.rps, sq.rps);
        ratioLine(`atelier (${production}) / squid p99`, p.latency.p99, sq.latency.p99);
        ratioLine('squid / direct req/s', sq.rps, d.rps);
      }
      goalAtLeast(`req/s ≥ ${GOAL_RPS_OF_DIRECT * 100} % of direct`, p.rps, GOAL_RPS_OF_DIRECT * d.rps, rps);
      if (sq) goalAtLeast('req/s ≥ squid', p.rps, sq.rps, rps);
      else line('goal: req/s ≥ squid -> NOT MEASURED (no squid)');
    }
    const pt = tput[production];
    const dt = tput.direct;
    if (pt && dt) {
      ratioLine(`atelier (${production}) / direct MiB/s download`, pt.downMiBps, dt.downMiBps);
      ratioLine(`atelier (${production}) / direct MiB/s upload`, pt.upMiBps, dt.upMiBps);
      if (tput.atelierUnix) {
        ratioLine('atelier (unix socket) / direct MiB/s download', tput.atelierUnix.downMiBps, dt.downMiBps);
        ratioLine('atelier (unix socket) / direct MiB/s upload', tput.atelierUnix.upMiBps, dt.upMiBps);
      }
      if (tput.crelayBulk) {
        ratioLine('epoll relay in C / direct MiB/s download (one extra hop, no proxy work)', tput.crelayBulk.downMiBps, dt.downMiBps);
        ratioLine('epoll relay in C / direct MiB/s upload (one extra hop, no proxy work)', tput.crelayBulk.upMiBps, dt.upMiBps);
      }
      if (tput.squid) {
        ratioLine('squid / direct MiB/s download', tput.squid.downMiBps, dt.downMiBps);
        ratioLine('squid / direct MiB/s upload', tput.squid.upMiBps, dt.upMiBps);
      }
      goalAtLeast(`CONNECT download ≥ ${GOAL_MBPS_OF_DIRECT * 100} % of direct`, pt.downMiBps, GOAL_MBPS_OF_DIRECT * dt.downMiBps, mibps);
      goalAtLeast(`CONNECT upload ≥ ${GOAL_MBPS_OF_DIRECT * 100} % of direct`, pt.upMiBps, GOAL_MBPS_OF_DIRECT * dt.upMiBps, mibps);
    }
    result.production = production;
    for (const c of children) {
      const err = c.stderr.join('').trim();
      if (err && c.name !== 'squid' && c.name !== 'socat relay') line(`${c.name} stderr: ${err.slice(-300)}`);
    }
  } finally {
    for (const c of children.reverse()) await stopChild(c);
  }
  return result;
}
