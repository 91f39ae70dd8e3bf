/**
 * 7. Terminals and tunnels, each beside its peers in the same run:
 *
 * - Port-forward throughput (MiB/s, one TCP stream of TRANSFER_BYTES each way, TRANSFERS times,
 *   median) and round-trip latency (1-byte ping-pong on one connection, RTT_SAMPLES) through
 *   `atelier port-forward ID 0:PORT`, beside a direct loopback connection to the same kind of
 *   server on the host and beside OpenSSH `ssh -L` through the workshop's SSH endpoint (the
 *   managed config's ProxyCommand: the same tunnel, plus SSH).
 * - A new connection to its first byte back, back to back (a burst) and one every 100 ms, on the
 *   same three paths (port-forward opens a tunnel per connection); then the parts of an
 *   authenticated tunnel request.
 * - PTY keystroke echo: one byte sent on the PTY WebSocket, the kernel's echo back (a program in
 *   non-canonical mode), ECHO_SAMPLES times, p50/p99, beside a PTY on the host (node-pty, no
 *   sandbox, no WebSocket); and the same through an agent session, whose PTY is held by a process
 *   of its own (one more hop: server -> holder).
 *
 * The same small TCP server (python3: `DOWN n`, `UP n`, `PING`) runs inside the workshop and on
 * the host. Every process is started here and stopped at the end.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { join } from 'node:path';
import * as nodePty from 'node-pty';
import WebSocket from 'ws';
import {
  ATELIER_BIN,
  cpuProfileArgs,
  goalLine,
  hasCommand,
  heading,
  line,
  ratioLine,
  sleep,
  statLine,
  summarize,
  type BenchServer,
} from './lib.js';

const TRANSFER_BYTES = 64 * 2 ** 20;
const TRANSFERS = 3;
const RTT_SAMPLES = 300;
const CONNECT_SAMPLES = 30;
const CONNECT_GAP_MS = 100;
const ECHO_SAMPLES = 300;
const PORT_IN_WORKSHOP = 9000;
const GOAL_THROUGHPUT_OF_DIRECT = 0.5;
const GOAL_ECHO_P99_MS = 10;

export const SERVER_PY = `
import socket, sys, threading
CHUNK = b"a" * 262144
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = c.makefile("rb")
    head = f.readline().split()
    if head[0] == b"DOWN":
        left = int(head[1])
        while left > 0:
            k = min(left, len(CHUNK)); c.sendall(CHUNK[:k]); left -= k
    elif head[0] == b"UP":
        left = int(head[1])
        while left > 0:
            d = f.read1(min(left, 1 << 20))
            if not d: break
            left -= len(d)
        c.sendall(b"OK\\n")
    elif head[0] == b"PING":
        while True:
            d = f.read1(1)
            if not d: break
            c.sendall(d)
    c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
print("listening", s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
`;

function connectTo(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => resolve(s));
    s.setNoDelay(true);
    s.once('error', reject);
  });
}

async function download(port: number): Promise<number> {
  const s = await connectTo(port);
  const t0 = performance.now();
  s.write(`DOWN ${TRANSFER_BYTES}\n`);
  let got = 0;
  await new Promise<void>((resolve, reject) => {
    s.on('data', (c: Buffer) => {
      got += c.length;
      if (got >= TRANSFER_BYTES) resolve();
    });
    s.on('error', reject);
    s.on('close', () => (got >= TRANSFER_BYTES ? resolve() : reject(new Error(`closed after ${got} bytes`))));
  });
  const mibs = TRANSFER_BYTES / 2 ** 20 / ((performance.now() - t0) / 1000);
  s.destroy();
  return mibs;
}

async function upload(port: number): Promise<number> {
  const s = await connectTo(port);
  const chunk = Buffer.alloc(256 << 10, 0x62);
  const t0 = performance.now();
  s.write(`UP ${TRANSFER_BYTES}\n`);
  const ok = new Promise<void>((resolve, reject) => {
    s.on('data', (c: Buffer) => c.includes(10) && resolve());
    s.on('error', reject);
    s.on('close', () => reject(new Error('closed before OK')));
  });
  let left = TRANSFER_BYTES;
  while (left > 0) {
    const k = Math.min(left, chunk.length);
    left -= k;
    if (!s.write(k === chunk.length ? chunk : chunk.subarray(0, k))) await new Promise((r) => s.once('drain', r));
  }
  await ok;
  const mibs = TRANSFER_BYTES / 2 ** 20 / ((performance.now() - t0) / 1000);
  s.destroy();
  return mibs;
}

async function rtt(port: number): Promise<number[]> {
  const s = await connectTo(port);
  s.write('PING\n');
  const samples: number[] = [];
  let waiting: (() => void) | undefined;
  s.on('data', () => waiting?.());
  for (let i = 0; i < RTT_SAMPLES + 20; i++) {
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      waiting = resolve;
      s.write('x');
    });
    if (i >= 20) samples.push(performance.now() - t0);
  }
  s.destroy();
  return samples;
}

/**
 * A new connection, then its first byte back: what a short request pays for the tunnel's set-up.
 * Back to back (`gapMs` 0: a burst), or one every `gapMs` (a client's requests now and then).
 */
async function firstByte(port: number, gapMs = 0): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < CONNECT_SAMPLES + 3; i++) {
    if (gapMs > 0) await sleep(gapMs);
    const t0 = performance.now();
    const s = await connectTo(port);
    await new Promise<void>((resolve, reject) => {
      s.once('data', () => resolve());
      s.once('error', reject);
      s.write('PING\nx');
    });
    if (i >= 3) samples.push(performance.now() - t0);
    s.destroy();
  }
  return samples;
}

/** One request on a fresh connection (as each forwarded connection makes): time to its answer (or its 101). */
function timedRequest(server: BenchServer, path: string, upgrade: boolean): Promise<number> {
  const t0 = performance.now();
  const headers: Record<string, string> = { authorization: `Bearer ${server.token}` };
  if (upgrade) Object.assign(headers, { connection: 'Upgrade', upgrade: 'atelier-tunnel', 'atelier-tunnel-mode': 'raw' });
  return new Promise((resolve, reject) => {
    const req = http.request(`${server.url}${path}`, { agent: false, headers });
    req.once('upgrade', (_res, socket: net.Socket) => {
      resolve(performance.now() - t0);
      socket.destroy();
    });
    req.once('response', (res) => {
      res.resume();
      res.once('end', () => (upgrade ? reject(new Error(`${path}: ${res.statusCode}`)) : resolve(performance.now() - t0)));
    });
    req.once('error', reject);
    req.end();
  });
}

async function timedRequests(server: BenchServer, path: string, upgrade: boolean): Promise<ReturnType<typeof summarize>> {
  const samples: number[] = [];
  for (let i = 0; i < CONNECT_SAMPLES + 3; i++) {
    const t = await timedRequest(server, path, upgrade);
    if (i >= 3) samples.push(t);
  }
  return summarize(samples);
}

export interface PathResult {
  down: number;
  up: number;
  rtt: ReturnType<typeof summarize>;
  connect: ReturnType<typeof summarize>;
  connectSpaced: ReturnType<typeof summarize>;
}

export async function measure(port: number): Promise<PathResult> {
  const downs: number[] = [];
  const ups: number[] = [];
  for (let i = 0; i < TRANSFERS; i++) {
    downs.push(await download(port));
    ups.push(await upload(port));
  }
  return {
    down: summarize(downs).p50,
    up: summarize(ups).p50,
    rtt: summarize(await rtt(port)),
    connect: summarize(await firstByte(port)),
    connectSpaced: summarize(await firstByte(port, CONNECT_GAP_MS)),
  };
}

export function watch(child: ChildProcess, re: RegExp, what: string): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    let text = '';
    const on = (c: Buffer): void => {
      text += c.toString();
      const m = re.exec(text);
      if (m) resolve(m);
    };
    child.stdout?.on('data', on);
    child.stderr?.on('data', on);
    child.once('exit', (code) => reject(new Error(`${what} exited (${code}) before it was ready: ${text.slice(-500)}`)));
    setTimeout(() => reject(new Error(`${what} was not ready within 60 s: ${text.slice(-500)}`)), 60_000).unref();
  });
}

async function ptyEcho(server: BenchServer, id: string): Promise<number[]> {
  return wsEcho(server, `/v1/workshops/${id}/pty`, {
    type: 'start',
    cols: 80,
    rows: 24,
    command: ['sh', '-c', 'stty -icanon; echo ready; exec cat >/dev/null'],
  });
}

/** The same echo through an agent session: the WebSocket, the server, the session's holder process, its PTY. */
async function sessionEcho(server: BenchServer, id: string): Promise<number[]> {
  await server.request('POST', `/v1/workshops/${id}/sessions`, {
    name: 'bench-echo',
    command: ['sh', '-c', 'stty -icanon; echo ready; exec cat >/dev/null'],
  });
  const samples = await wsEcho(server, `/v1/workshops/${id}/sessions/bench-echo/attach`);
  await server.request('DELETE', `/v1/workshops/${id}/sessions/bench-echo`);
  return samples;
}

/** Echo samples over a terminal WebSocket (`start`: its first message, if it takes one), once it printed "ready". */
async function wsEcho(server: BenchServer, path: string, start?: object): Promise<number[]> {
  const ws = new WebSocket(`${server.url.replace('http', 'ws')}${path}`, {
    headers: { authorization: `Bearer ${server.token}` },
  });
  let onData: ((d: Buffer) => void) | undefined;
  let seen = '';
  const ready = new Promise<void>((resolve) => {
    onData = (d) => {
      seen += d.toString();
      if (seen.includes('ready')) resolve();
    };
  });
  ws.on('message', (d: Buffer, binary: boolean) => binary && onData?.(d));
  await new Promise<void>((resolve, reject) => {
    ws.once('error', reject);
    ws.once('open', () => resolve());
  });
  if (start) ws.send(JSON.stringify(start));
  await ready;
  const samples = await echoLoop(
    (b) => ws.send(b, { binary: true }),
    (fn) => (onData = fn),
  );
  ws.close();
  return samples;
}

async function echoLoop(send: (b: Buffer) => void, listen: (fn: (d: Buffer) => void) => void): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < ECHO_SAMPLES + 20; i++) {
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      listen(() => resolve());
      send(Buffer.from('k'));
    });
    if (i >= 20) samples.push(performance.now() - t0);
  }
  return samples;
}

async function localPtyEcho(): Promise<number[]> {
  const term = nodePty.spawn('/bin/sh', ['-c', 'stty -icanon; echo ready; exec cat >/dev/null'], { cols: 80, rows: 24, encoding: null });
  let onData: ((d: Buffer) => void) | undefined;
  term.onData((d: string | Buffer) => onData?.(typeof d === 'string' ? Buffer.from(d) : d));
  await new Promise<void>((resolve) => {
    let seen = '';
    onData = (d) => {
      seen += d.toString();
      if (seen.includes('ready')) resolve();
    };
  });
  const samples = await echoLoop(
    (b) => term.write(b as unknown as string),
    (fn) => (onData = fn),
  );
  term.kill('SIGKILL');
  return samples;
}

export async function terminals(server: BenchServer): Promise<Record<string, unknown>> {
  heading(
    `7. port-forward (${TRANSFER_BYTES / 2 ** 20} MiB x${TRANSFERS} each way, ${RTT_SAMPLES} round trips) beside direct loopback and ssh -L; PTY echo (${ECHO_SAMPLES} keys)`,
  );
  const result: Record<string, unknown> = {};
  const children: ChildProcess[] = [];
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ATELIER_URL: server.url,
    ATELIER_TOKEN: server.token,
    ATELIER_CONFIG_DIR: server.configDir,
    ATELIER_SSH_CONFIG: join(server.scratch.dir, 'ssh_config'),
  };
  delete env.ATELIER_CONTEXT;
  const ws = await server.createWorkshop({ memory: '512m' });
  try {
    const script = join(server.scratch.dir, 'tcp-bench.py');
    writeFileSync(script, SERVER_PY);
    // The same server inside the workshop (written there through the API) and on the host.
    await server.request('POST', `/v1/workshops/${ws.id}/exec`, {
      command: ['sh', '-c', 'cat > tcp-bench.py'],
      stdin: Buffer.from(SERVER_PY).toString('base64'),
    });
    await server.exec(ws.id, ['sh', '-c', `nohup python3 tcp-bench.py ${PORT_IN_WORKSHOP} >/tmp/tcp-bench.log 2>&1 & sleep 0.5`]);
    const host = spawn('python3', [script, '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(host);
    const directPort = Number((await watch(host, /listening (\d+)/, 'the host TCP server'))[1]);

    const pf = spawn(process.execPath, [...cpuProfileArgs('cli'), ATELIER_BIN, 'port-forward', ws.id, `0:${PORT_IN_WORKSHOP}`], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(pf);
    const pfPort = Number((await watch(pf, /Forwarding from 127\.0\.0\.1:(\d+)/, 'atelier port-forward'))[1]);

    const rows: [string, string, number][] = [
      ['direct', 'loopback connection on the host', directPort],
      ['atelier', 'atelier port-forward (relayed twice)', pfPort],
    ];
    let sshNote = '';
    if (hasCommand('ssh') && hasCommand('ssh-keygen')) {
      const cfg = spawn(process.execPath, [ATELIER_BIN, 'config-ssh'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      await new Promise((r) => cfg.once('exit', r));
      const sshPort = await new Promise<number>((resolve) => {
        const s = net.createServer().listen(0, '127.0.0.1', () => {
          const p = (s.address() as net.AddressInfo).port;
          s.close(() => resolve(p));
        });
      });
      const ssh = spawn(
        'ssh',
        ['-F', env.ATELIER_SSH_CONFIG!, '-N', '-L', `${sshPort}:127.0.0.1:${PORT_IN_WORKSHOP}`, `atelier-${ws.id}`],
        {
          env,
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      children.push(ssh);
      for (let i = 0; i < 200; i++) {
        const ok = await connectTo(sshPort).then(
          (s) => (s.destroy(), true),
          () => false,
        );
        if (ok) break;
        await sleep(50);
      }
      rows.push(['ssh -L', 'OpenSSH ssh -L via the workshop SSH endpoint', sshPort]);
    } else sshNote = 'ssh -L skipped: the OpenSSH client is not installed';

    const measured: Record<string, PathResult> = {};
    for (const [who, what, port] of rows) {
      const r = await measure(port);
      measured[who] = r;
      line(`${who.padEnd(8)} ${what.padEnd(44)} down ${r.down.toFixed(1).padStart(7)} MiB/s  up ${r.up.toFixed(1).padStart(7)} MiB/s`);
      statLine(who, 'round trip of 1 byte', r.rtt, ['p50', 'p99']);
      statLine(who, 'new connection to its first byte back', r.connect, ['p50', 'p99']);
      statLine(who, `the same, one every ${CONNECT_GAP_MS} ms`, r.connectSpaced, ['p50', 'p99']);
    }
    if (sshNote) line(sshNote);
    const a = measured.atelier!;
    const d = measured.direct!;
    ratioLine('atelier / direct download', a.down, d.down);
    ratioLine('atelier / direct upload', a.up, d.up);
    ratioLine('atelier / direct RTT p50', a.rtt.p50, d.rtt.p50);
    ratioLine('atelier / direct new connection p50', a.connect.p50, d.connect.p50);
    const share = a.down / d.down;
    line(
      `goal: port-forward download >= ${GOAL_THROUGHPUT_OF_DIRECT * 100}% of direct -> ${share >= GOAL_THROUGHPUT_OF_DIRECT ? 'MET' : 'NOT MET'} (${(share * 100).toFixed(0)}%)`,
    );
    const s = measured['ssh -L'];
    if (s) {
      ratioLine('atelier / ssh -L download', a.down, s.down);
      ratioLine('atelier / ssh -L upload', a.up, s.up);
      ratioLine('atelier / ssh -L RTT p50', a.rtt.p50, s.rtt.p50);
      ratioLine('atelier / ssh -L new connection p50', a.connect.p50, s.connect.p50);
      ratioLine(`atelier / ssh -L new connection p50, one every ${CONNECT_GAP_MS} ms`, a.connectSpaced.p50, s.connectSpaced.p50);
    }
    result.portForward = measured;

    // Where a new forwarded connection's time goes: each connection is one authenticated request.
    const parts = {
      get: await timedRequests(server, `/v1/workshops/${ws.id}`, false),
      upgrade22: await timedRequests(server, `/v1/workshops/${ws.id}/tunnel?port=22`, true),
      upgrade: await timedRequests(server, `/v1/workshops/${ws.id}/tunnel?port=${PORT_IN_WORKSHOP}`, true),
    };
    statLine('request', 'GET /v1/workshops/ID (token + 1 lookup, uncached)', parts.get, ['p50', 'p99']);
    statLine('request', 'tunnel 101, no connection inside (port 22)', parts.upgrade22, ['p50', 'p99']);
    statLine('request', 'tunnel 101 once the port inside answered', parts.upgrade, ['p50', 'p99']);
    result.newConnection = parts;

    const echo = summarize(await ptyEcho(server, ws.id));
    statLine('atelier', 'PTY echo over the WebSocket (sandboxed)', echo, ['p50', 'p99']);
    const held = summarize(await sessionEcho(server, ws.id));
    statLine('session', 'PTY echo through an agent session (held PTY)', held, ['p50', 'p99']);
    const local = summarize(await localPtyEcho());
    statLine('local', 'PTY echo, node-pty on the host', local, ['p50', 'p99']);
    ratioLine('atelier / local PTY echo p50', echo.p50, local.p50);
    ratioLine('agent session / local PTY echo p50', held.p50, local.p50);
    goalLine(`PTY echo p99 < ${GOAL_ECHO_P99_MS} ms`, echo.p99, GOAL_ECHO_P99_MS);
    goalLine(`agent session PTY echo p99 < ${GOAL_ECHO_P99_MS} ms`, held.p99, GOAL_ECHO_P99_MS);
    result.ptyEcho = { atelier: echo, session: held, local };
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await server.deleteWorkshop(ws.id, true);
  }
  return result;
}
