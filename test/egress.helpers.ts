// Shared pieces of the egress tests: local origin servers, and raw clients for the three
// ways into the proxy (CONNECT, absolute-form HTTP, SOCKS5), written byte by byte so that a
// test controls exactly what the proxy receives.
import http from 'node:http';
import net from 'node:net';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseIp } from '../src/egress/ip.js';

export interface Origin {
  address: string;
  port: number;
  /** TCP connections accepted so far. */
  connections: number;
  /** Requests seen, with the Host header as the origin received it. */
  requests: Array<{ method: string; url: string; host: string | undefined; headers: http.IncomingHttpHeaders }>;
  /** Resolve every request parked on `/hold`. */
  release(): void;
  close(): Promise<void>;
}

/**
 * An HTTP origin on `address:port` (port 0: any). `/hold` waits for `release()`; `/echo`
 * answers the request body; anything else answers JSON describing the request.
 */
export async function startOrigin(address: string, port = 0, opts: { closeConnections?: boolean } = {}): Promise<Origin> {
  let held: Array<() => void> = [];
  const origin: Origin = {
    address,
    port: 0,
    connections: 0,
    requests: [],
    release() {
      const h = held;
      held = [];
      for (const f of h) f();
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  const server = http.createServer((req, res) => {
    origin.requests.push({ method: req.method ?? '', url: req.url ?? '', host: req.headers.host, headers: req.headers });
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const answer = () => {
        const body =
          req.url === '/echo'
            ? Buffer.concat(chunks)
            : Buffer.from(JSON.stringify({ origin: `${address}:${origin.port}`, url: req.url, host: req.headers.host }));
        const headers: http.OutgoingHttpHeaders = { 'content-length': body.length, 'x-origin': `${address}:${origin.port}` };
        if (opts.closeConnections) headers.connection = 'close';
        res.writeHead(200, headers);
        res.end(body);
      };
      if (req.url === '/hold') held.push(answer);
      else answer();
    });
  });
  server.on('connection', () => origin.connections++);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, address, () => resolve());
  });
  origin.port = (server.address() as net.AddressInfo).port;
  return origin;
}

export async function tempDir(): Promise<{ path: string; [Symbol.asyncDispose](): Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), 'atelier-egress-'));
  return { path, [Symbol.asyncDispose]: () => rm(path, { recursive: true, force: true }) };
}

export interface HttpAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** A socket with a byte buffer that can be awaited for a pattern or for the end. */
export class RawClient {
  readonly socket: net.Socket;
  private buf = Buffer.alloc(0);
  private ended = false;
  private waiters: Array<() => void> = [];

  constructor(path: string) {
    this.socket = net.connect(path);
    this.socket.on('data', (c: Buffer) => {
      this.buf = Buffer.concat([this.buf, c]);
      this.wake();
    });
    const end = () => {
      this.ended = true;
      this.wake();
    };
    this.socket.on('end', end);
    this.socket.on('close', end);
    this.socket.on('error', end);
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private async until(pred: () => boolean, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pred()) {
      if (this.ended) return;
      if (Date.now() > deadline)
        throw new Error(`timed out; received so far: ${JSON.stringify(this.buf.toString('latin1').slice(0, 300))}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  write(data: string | Buffer): void {
    this.socket.write(data);
  }

  /** Read exactly n bytes (or what there is when the peer closes first). */
  async read(n: number, timeoutMs = 10_000): Promise<Buffer> {
    await this.until(() => this.buf.length >= n, timeoutMs);
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /**
   * Read one HTTP response (head, then a body by Content-Length, chunked, or to the end). An
   * interim (1xx), 204 or 304 answer, or the answer to a HEAD (`head`), has no body.
   */
  async response(timeoutMs = 10_000, opts: { head?: boolean } = {}): Promise<HttpAnswer> {
    await this.until(() => this.buf.includes('\r\n\r\n'), timeoutMs);
    const at = this.buf.indexOf('\r\n\r\n');
    if (at < 0) throw new Error(`connection closed before a response head: ${JSON.stringify(this.buf.toString('latin1'))}`);
    const head = this.buf.subarray(0, at).toString('latin1').split('\r\n');
    this.buf = this.buf.subarray(at + 4);
    const status = Number(head[0]!.split(' ')[1]);
    const headers: Record<string, string> = {};
    for (const line of head.slice(1)) {
      const i = line.indexOf(':');
      headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    let body: Buffer;
    if (opts.head || status < 200 || status === 204 || status === 304) {
      body = Buffer.alloc(0);
    } else if (headers['content-length'] !== undefined) {
      body = await this.read(Number(headers['content-length']), timeoutMs);
    } else if (headers['transfer-encoding'] === 'chunked') {
      const parts: Buffer[] = [];
      for (;;) {
        await this.until(() => this.buf.includes('\r\n'), timeoutMs);
        const nl = this.buf.indexOf('\r\n');
        const size = parseInt(this.buf.subarray(0, nl).toString('latin1'), 16);
        this.buf = this.buf.subarray(nl + 2);
        if (!(size > 0)) {
          await this.read(2, timeoutMs);
          break;
        }
        parts.push(await this.read(size, timeoutMs));
        await this.read(2, timeoutMs);
      }
      body = Buffer.concat(parts);
    } else if (status === 200 && headers['content-length'] === undefined && head[0]!.includes('Connection Established')) {
      body = Buffer.alloc(0);
    } else {
      await this.until(() => false, timeoutMs);
      body = this.buf;
      this.buf = Buffer.alloc(0);
    }
    return { status, headers, body: body.toString('utf8') };
  }

  /** True once the peer has closed (within the timeout). */
  async closed(timeoutMs = 5_000): Promise<boolean> {
    await this.until(() => false, timeoutMs).catch(() => {});
    return this.ended;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

export interface ViaResult {
  /** The proxy's answer: HTTP status (CONNECT/HTTP) or SOCKS5 reply code. */
  status: number;
  reason: string | undefined;
  proxyBody: string;
  /** The origin's answer when the proxy let the request through. */
  origin?: HttpAnswer;
}

/** `CONNECT authority`, then (if 200) a GET through the tunnel. */
export async function viaConnect(sock: string, authority: string, opts: { path?: string; hostHeader?: string } = {}): Promise<ViaResult> {
  const c = new RawClient(sock);
  try {
    c.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
    const r = await c.response();
    if (r.status !== 200) return { status: r.status, reason: r.headers['x-atelier-egress-reason'], proxyBody: r.body };
    c.write(`GET ${opts.path ?? '/'} HTTP/1.1\r\nHost: ${opts.hostHeader ?? 'tunnel'}\r\nConnection: close\r\n\r\n`);
    return { status: 200, reason: undefined, proxyBody: '', origin: await c.response() };
  } finally {
    c.destroy();
  }
}

/** An absolute-form `GET url` (with a Host header that disagrees, to see it rewritten). */
export async function viaHttp(sock: string, url: string, opts: { hostHeader?: string; method?: string } = {}): Promise<ViaResult> {
  const c = new RawClient(sock);
  try {
    c.write(`${opts.method ?? 'GET'} ${url} HTTP/1.1\r\nHost: ${opts.hostHeader ?? 'spoofed.invalid'}\r\nConnection: close\r\n\r\n`);
    const r = await c.response();
    const reason = r.headers['x-atelier-egress-reason'];
    if (reason !== undefined) return { status: r.status, reason, proxyBody: r.body };
    return { status: r.status, reason, proxyBody: '', origin: r };
  } finally {
    c.destroy();
  }
}

/** The SOCKS5 request bytes for a host: dotted IPv4 and bracketed IPv6 as addresses, the rest as a domain. */
export function socksAddress(host: string): Buffer {
  if (/^[0-9]{1,3}(\.[0-9]{1,3}){3}$/.test(host)) {
    const b = parseIp(host);
    if (b) return Buffer.from([0x01, ...b]);
  }
  if (host.startsWith('[') && host.endsWith(']')) {
    const b = parseIp(host.slice(1, -1));
    if (b) return Buffer.from([0x04, ...b]);
  }
  const name = Buffer.from(host, 'utf8');
  if (name.length > 255) throw new Error('SOCKS5 domain too long');
  return Buffer.concat([Buffer.from([0x03, name.length]), name]);
}

export async function viaSocks(sock: string, host: string, port: number, opts: { path?: string } = {}): Promise<ViaResult> {
  const c = new RawClient(sock);
  try {
    const portBytes = Buffer.alloc(2);
    portBytes.writeUInt16BE(port);
    c.write(Buffer.from([0x05, 0x01, 0x00]));
    const hello = await c.read(2);
    if (hello[1] !== 0x00) throw new Error(`SOCKS5 greeting refused: ${hello.toString('hex')}`);
    c.write(Buffer.concat([Buffer.from([0x05, 0x01, 0x00]), socksAddress(host), portBytes]));
    const reply = await c.read(10);
    if (reply.length < 2) throw new Error('SOCKS5 connection closed without a reply');
    const code = reply[1]!;
    if (code !== 0x00) return { status: code, reason: undefined, proxyBody: '' };
    c.write(`GET ${opts.path ?? '/'} HTTP/1.1\r\nHost: tunnel\r\nConnection: close\r\n\r\n`);
    return { status: 0, reason: undefined, proxyBody: '', origin: await c.response() };
  } finally {
    c.destroy();
  }
}

/** Open file descriptors of this process. */
export async function fdCount(): Promise<number> {
  return (await readdir('/proc/self/fd')).length;
}

/** Wait until `pred()` holds, polling; returns its last value. */
export async function eventually<T>(f: () => Promise<T> | T, pred: (v: T) => boolean, timeoutMs = 5_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let v = await f();
  while (!pred(v) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 25));
    v = await f();
  }
  return v;
}
