// The egress proxy: one instance serves every workshop, each on its own unix socket (bridged
// into the sandbox), each with its own live policy. A connection's protocol is detected by
// its first byte: 0x05 is SOCKS5, a letter is HTTP (CONNECT or absolute-form requests).
import { chmod, lstat, unlink } from 'node:fs/promises';
import net from 'node:net';
import { AtelierError } from '../core/index.js';
import { spliceRelay } from '../relay/index.js';
import { type AddressClass, checkAddress } from './addresses.js';
import { type CanonicalHost, canonicalizeHost, describeRaw } from './canonical.js';
import {
  BodyFramer,
  FieldKind,
  forwarded,
  HttpFramingError,
  parseRequestHead,
  parseResponseHead,
  type RequestHead,
  type ResponseHead,
} from './http1.js';
import type { EgressPolicy, EgressProtocol } from './policy.js';
import { parseAnswers, type Resolver, ResolveError } from './resolver.js';

export type EgressReason =
  | 'ALLOW_LISTED'
  | 'ASK_ALLOWED'
  | 'DENY_LISTED'
  | 'NOT_ALLOWLISTED'
  | 'PORT_NOT_ALLOWED'
  | 'ASK_DENIED'
  | 'ASK_PENDING'
  | 'ASK_TIMEOUT'
  | 'HOST_INVALID'
  | 'ADDRESS_FORBIDDEN'
  | 'DNS_NOT_FOUND'
  | 'DNS_TIMEOUT'
  | 'DNS_FAILED'
  | 'UPGRADE_REFUSED'
  | 'BAD_REQUEST'
  | 'UNSUPPORTED'
  | 'NO_POLICY'
  | 'INTERNAL_SERVICE'
  | 'INTERNAL_UNKNOWN';

/** The suffix of the names a workshop's own services answer to (simulators, the API). */
export const INTERNAL_SUFFIX = '.atelier.internal';

/**
 * Where an internal name of a workshop leads, chosen by the server (never by the workshop): a
 * unix socket on the host, or a port on the host's loopback. It is dialed without the address
 * checks that protect the host from the workshop, since the server itself put it there.
 */
export type InternalTarget = { path: string } | { host: string; port: number };

/** One internal service of a workshop: `<label>.atelier.internal:port`. */
export interface InternalService {
  host: string;
  port: number;
  target: InternalTarget;
}

/** One decision about one request; the lead stores these per workshop. */
export interface EgressDecision {
  at: Date;
  protocol: EgressProtocol;
  /** The target as the client wrote it (bounded, JSON-escaped when odd). */
  target: string;
  /** The canonical host ('' when the host was refused before it could be canonicalised). */
  host: string;
  port: number;
  allowed: boolean;
  /** `unknown`: the policy does not name the host and it was not let through (asked or not). */
  outcome: 'allowed' | 'denied' | 'unknown';
  reason: EgressReason;
  /** A sentence for a human, saying what to do next when something was refused. */
  message: string;
  /** The canonicalisation refusal (`HOST_ZONE_ID`…) when reason is HOST_INVALID. */
  hostRefusal?: string;
  /** The policy entry that decided. */
  entry?: string;
  /** The address dialed (allowed), or the forbidden answer (ADDRESS_FORBIDDEN). */
  address?: string;
  addressClass?: AddressClass;
  approvalId?: string;
}

export type AskDecision = 'allow' | 'deny' | 'pending';
/** What the ask hook answers: a bare decision, or one with the id of the approval it filed. */
export type AskAnswer = AskDecision | { decision: AskDecision; approvalId?: string };
export interface AskContext {
  workshopId: string;
  protocol: EgressProtocol;
  /** How long the proxy holds the request; answer `pending` (with the approval id) by then. */
  holdMs: number;
  /** Aborted when the client goes away or the hold (plus a grace) runs out. */
  signal: AbortSignal;
}
/** Called for hosts the policy does not name (the approvals issue plugs in here). */
export type AskHook = (host: string, port: number, context: AskContext) => Promise<AskAnswer>;

export interface EgressLimits {
  /** A request head (or SOCKS5 handshake) must be complete within this, from connect or from the previous response. */
  headerTimeoutMs: number;
  maxHeaderBytes: number;
  /** No byte either way for this long ends a tunnel or a request in flight. */
  idleTimeoutMs: number;
  connectTimeoutMs: number;
  /** Deadline for one resolution, whatever the resolver does. */
  dnsTimeoutMs: number;
  /** Extra time the ask hook gets beyond the hold to report its approval id. */
  askGraceMs: number;
  maxConnectionsPerWorkshop: number;
}

export const DEFAULT_EGRESS_LIMITS: EgressLimits = {
  headerTimeoutMs: 10_000,
  maxHeaderBytes: 32 * 1024,
  idleTimeoutMs: 300_000,
  connectTimeoutMs: 10_000,
  dnsTimeoutMs: 5_000,
  askGraceMs: 2_000,
  maxConnectionsPerWorkshop: 1024,
};

export interface EgressProxyOptions {
  resolver: Resolver;
  onDecision?: (workshopId: string, decision: EgressDecision) => void;
  /** Without a hook, unknown hosts are denied at once (NOT_ALLOWLISTED). */
  ask?: AskHook;
  limits?: Partial<EgressLimits>;
  /** Unexpected internal errors (never client faults); the proxy keeps serving. */
  onError?: (workshopId: string, error: unknown) => void;
}

interface Listener {
  workshopId: string;
  socketPath: string;
  server: net.Server;
  policy: EgressPolicy | undefined;
  /** Every client and upstream socket, destroyed by close(). */
  sockets: Set<net.Socket>;
  clients: number;
  /** Idle plain-HTTP upstreams kept by this workshop's client connections (bounded). */
  pooled: number;
}

interface ClientConn {
  /** Waiting for a request head: the deadline timer's firing ends the connection. */
  armed: boolean;
  timer: NodeJS.Timeout | undefined;
  /** True while a kept-alive connection has not begun its next request: its deadline closes it without a 408. */
  quiet?: () => boolean;
}

/**
 * An allowed plain-HTTP decision kept by one client connection for the exact authority it was
 * made for (the bytes of the request target's `host[:port]`): what depends only on the policy
 * (the canonical host, the entry that allowed it) and what the resolver's answers gave (the
 * checked addresses). Used only while the workshop's policy is the same object and the
 * resolver, asked again for this request, gives the same answers; anything else decides afresh.
 */
interface ConnDecision {
  policy: EgressPolicy;
  host: string;
  port: number;
  entry: string | undefined;
  message: string;
  /** The resolver's answers, as it gave them, joined with newlines. */
  answers: string;
  dial: string[];
}

/** Decisions a client connection keeps (distinct authorities it alternates between). */
const MAX_CONN_DECISIONS = 16;

/**
 * An abort signal made only when something asks for it (the ask hook, a resolver): fired when
 * the client's socket closes. Requests decided from the cache never pay for one.
 */
class LazySignal {
  private ctl: AbortController | undefined;
  private readonly onClose = (): void => this.ctl?.abort();
  constructor(private readonly socket: net.Socket) {}
  get signal(): AbortSignal {
    if (!this.ctl) {
      this.ctl = new AbortController();
      if (this.socket.destroyed) this.ctl.abort();
      else this.socket.once('close', this.onClose);
    }
    return this.ctl.signal;
  }
  dispose(): void {
    if (this.ctl) this.socket.off('close', this.onClose);
  }
}

/** A decision plus, when allowed, the checked addresses that may be dialed (and only those). */
interface Verdict {
  decision: EgressDecision;
  dial: string[];
  /** Set for an internal name: the server's own target, dialed instead of any address. */
  internal?: InternalTarget;
  /** A list-allowed name: the resolver's answers it was decided on (a client connection may keep it). */
  answers?: string[];
}

function describeTarget(t: InternalTarget): string {
  return 'path' in t ? `unix:${t.path}` : `${t.host}:${t.port}`;
}

function connectTarget(t: InternalTarget, onread?: net.OnReadOpts): net.Socket {
  const common = { allowHalfOpen: true, ...(onread ? { onread } : {}) };
  return 'path' in t ? net.connect({ ...common, path: t.path }) : net.connect({ ...common, host: t.host, port: t.port });
}

const STATUS: Record<EgressReason, number> = {
  ALLOW_LISTED: 200,
  ASK_ALLOWED: 200,
  DENY_LISTED: 403,
  NOT_ALLOWLISTED: 403,
  PORT_NOT_ALLOWED: 403,
  ASK_DENIED: 403,
  ASK_PENDING: 403,
  ASK_TIMEOUT: 403,
  HOST_INVALID: 403,
  ADDRESS_FORBIDDEN: 403,
  UPGRADE_REFUSED: 403,
  NO_POLICY: 403,
  BAD_REQUEST: 400,
  UNSUPPORTED: 405,
  DNS_NOT_FOUND: 502,
  DNS_FAILED: 502,
  DNS_TIMEOUT: 504,
  INTERNAL_SERVICE: 200,
  INTERNAL_UNKNOWN: 502,
};

const PHRASE: Record<number, string> = {
  400: 'Bad Request',
  403: 'Forbidden',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
  502: 'Bad Gateway',
  504: 'Gateway Timeout',
};

function rawAnswer(status: number, reason: string, body: string, extra: Record<string, string> = {}): string {
  const text = `${body}\n`;
  const lines = [
    `HTTP/1.1 ${status} ${PHRASE[status] ?? 'Error'}`,
    'Content-Type: text/plain; charset=utf-8',
    `Content-Length: ${Buffer.byteLength(text)}`,
    'Connection: close',
    `X-Atelier-Egress-Reason: ${reason}`,
    ...Object.entries(extra).map(([k, v]) => `${k}: ${v}`),
  ];
  return `${lines.join('\r\n')}\r\n\r\n${text}`;
}

function answerBody(d: EgressDecision): string {
  return `atelier egress: ${d.protocol === 'connect' ? 'CONNECT' : d.protocol === 'http' ? 'request' : 'SOCKS5 CONNECT'} to ${d.target} refused (${d.reason}): ${d.message}`;
}

/** Split `host[:port]` (IPv6 bracketed). Port: undefined when absent, NaN when malformed. */
function splitAuthority(authority: string): { host: string; port: number | undefined } | null {
  let host: string;
  let rest: string;
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']');
    if (close < 0) return null;
    host = authority.slice(0, close + 1);
    rest = authority.slice(close + 1);
  } else {
    const colon = authority.lastIndexOf(':');
    if (colon >= 0 && authority.indexOf(':') !== colon) return null; // unbracketed IPv6
    host = colon < 0 ? authority : authority.slice(0, colon);
    rest = colon < 0 ? '' : authority.slice(colon);
  }
  if (rest === '' || rest === ':') return { host, port: undefined };
  if (!rest.startsWith(':')) return null;
  const p = rest.slice(1);
  return { host, port: /^[0-9]{1,5}$/.test(p) ? Number(p) : NaN };
}

function validPort(p: number): boolean {
  return Number.isInteger(p) && p >= 1 && p <= 65535;
}

function boundTarget(t: string): string {
  return /^[\x21-\x7e]{1,300}$/.test(t) ? t : describeRaw(t, 300);
}

/** Race a promise against a deadline; on timeout the signal aborts and `onTimeout` is thrown. */
async function withDeadline<T>(ms: number, parent: AbortSignal, run: (s: AbortSignal) => Promise<T>, onTimeout: () => Error): Promise<T> {
  const ctl = new AbortController();
  const abort = () => ctl.abort();
  parent.addEventListener('abort', abort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      run(ctl.signal),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          ctl.abort();
          reject(onTimeout());
        }, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    parent.removeEventListener('abort', abort);
  }
}

export class EgressProxy {
  private readonly resolver: Resolver;
  private readonly onDecision: NonNullable<EgressProxyOptions['onDecision']>;
  private readonly onError: NonNullable<EgressProxyOptions['onError']>;
  private readonly ask: AskHook | undefined;
  readonly limits: EgressLimits;
  private readonly listeners = new Map<string, Listener>();
  private readonly policies = new Map<string, EgressPolicy>();
  /** Per workshop: `host:port` of each internal service → where it leads. */
  private readonly internal = new Map<string, Map<string, InternalTarget>>();

  constructor(options: EgressProxyOptions) {
    this.resolver = options.resolver;
    this.onDecision = options.onDecision ?? (() => {});
    this.onError = options.onError ?? (() => {});
    this.ask = options.ask;
    this.limits = { ...DEFAULT_EGRESS_LIMITS, ...options.limits };
  }

  /** Replace a workshop's policy; the next request sees it, open tunnels and requests in flight are not touched. */
  setPolicy(workshopId: string, policy: EgressPolicy): void {
    this.policies.set(workshopId, policy);
    // Decisions kept by client connections hold the policy they were made under: they lapse now.
    const l = this.listeners.get(workshopId);
    if (l) l.policy = policy;
  }

  /**
   * Replace a workshop's internal services (`<label>.atelier.internal:port` → target). They are
   * reached whatever the policy says, and only they: any other internal name is refused.
   */
  setInternalServices(workshopId: string, services: readonly InternalService[]): void {
    const m = new Map<string, InternalTarget>();
    for (const s of services) m.set(`${s.host.toLowerCase()}:${s.port}`, s.target);
    this.internal.set(workshopId, m);
  }

  /** The policy a workshop's next request will be judged by. */
  getPolicy(workshopId: string): EgressPolicy | undefined {
    return this.policies.get(workshopId);
  }

  /** Open sockets (clients and upstreams) of a workshop; 0 when it has no listener. */
  openSockets(workshopId: string): number {
    return this.listeners.get(workshopId)?.sockets.size ?? 0;
  }

  /**
   * Serve a workshop on a unix socket (mode 0666: the directory, which the caller controls,
   * is the access boundary). A stale socket file at the path is replaced; any other file is refused.
   */
  async listen(workshopId: string, target: string | net.Server, policy?: EgressPolicy): Promise<void> {
    if (this.listeners.has(workshopId)) throw new AtelierError('ALREADY_EXISTS', `the egress proxy already serves workshop ${workshopId}`);
    if (policy) this.policies.set(workshopId, policy);
    // A unix socket path to listen on, or a server already listening (the workshops' case: a TCP
    // socket opened inside the workshop's network namespace, see sandbox/netns.ts).
    const socketPath = typeof target === 'string' ? target : '';
    if (socketPath) {
      try {
        const st = await lstat(socketPath);
        if (!st.isSocket()) throw new AtelierError('CONFLICT', `${socketPath} exists and is not a socket: refusing to replace it`);
        await unlink(socketPath);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
    const l: Listener = {
      workshopId,
      socketPath,
      server: typeof target === 'string' ? net.createServer({ allowHalfOpen: true }) : target,
      policy: this.policies.get(workshopId),
      sockets: new Set(),
      clients: 0,
      pooled: 0,
    };
    l.server.on('connection', (s) => {
      // A handed-over server was made without allowHalfOpen: the tunnel logic needs it.
      s.allowHalfOpen = true;
      this.onConnection(l, s);
    });
    l.server.on('error', (err) => this.onError(workshopId, err));
    if (socketPath) {
      await new Promise<void>((resolve, reject) => {
        l.server.once('error', reject);
        l.server.listen(socketPath, () => {
          l.server.off('error', reject);
          resolve();
        });
      });
      await chmod(socketPath, 0o666);
    }
    this.listeners.set(workshopId, l);
  }

  /** Stop serving a workshop: its listener, every connection and tunnel, its socket file. */
  async close(workshopId: string): Promise<void> {
    // The workshop's policy goes with its listener (deleted and failed workshops leave nothing).
    this.policies.delete(workshopId);
    this.internal.delete(workshopId);
    const l = this.listeners.get(workshopId);
    if (!l) return;
    this.listeners.delete(workshopId);
    const closed = new Promise<void>((resolve) => l.server.close(() => resolve()));
    for (const s of l.sockets) s.destroy();
    spliceRelay().closeTag(`egress:${workshopId}`);
    await closed;
  }

  /** Close every workshop's listener. */
  async closeAll(): Promise<void> {
    await Promise.all([...this.listeners.keys()].map((id) => this.close(id)));
  }

  private track(l: Listener, s: net.Socket): void {
    l.sockets.add(s);
    s.once('close', () => l.sockets.delete(s));
    // A socket error is always handled by whoever owns the exchange; this only keeps an
    // unexpected one from becoming an uncaught exception.
    s.on('error', () => {});
  }

  private record(l: Listener, d: EgressDecision): void {
    try {
      this.onDecision(l.workshopId, d);
    } catch (err) {
      this.onError(l.workshopId, err);
    }
  }

  // ---- connection and protocol detection -------------------------------------------------

  /** Per client connection: its one head-deadline timer and the requests it has in flight. */
  private readonly conns = new WeakMap<net.Socket, ClientConn>();

  /**
   * Total-time limit on a request head (slowloris): byte-by-byte dribbling does not reset it.
   * One timer per connection, restarted with refresh() when the connection waits for a head
   * again; while it is disarmed its firing does nothing.
   */
  private armHeaderDeadline(s: net.Socket): void {
    const c = this.conns.get(s);
    if (!c) return;
    c.armed = true;
    if (c.timer) c.timer.refresh();
    else {
      const t = setTimeout(() => {
        if (!c.armed || s.destroyed) return;
        // Best effort: the client is told, then dropped.
        if (s.writable && !c.quiet?.()) s.write(rawAnswer(408, 'BAD_REQUEST', 'atelier egress: the request head was not complete in time'));
        s.destroy();
      }, this.limits.headerTimeoutMs);
      t.unref();
      c.timer = t;
    }
  }

  private clearHeaderDeadline(s: net.Socket): void {
    const c = this.conns.get(s);
    if (c) c.armed = false;
  }

  private onConnection(l: Listener, s: net.Socket): void {
    if (l.clients >= this.limits.maxConnectionsPerWorkshop) {
      s.destroy();
      return;
    }
    l.clients++;
    this.track(l, s);
    const c: ClientConn = { armed: false, timer: undefined };
    this.conns.set(s, c);
    s.once('close', () => {
      l.clients--;
      c.armed = false;
      if (c.timer) clearTimeout(c.timer);
    });
    this.armHeaderDeadline(s);
    s.once('data', (first: Buffer) => {
      s.pause();
      s.unshift(first);
      const b = first[0]!;
      if (b === 0x05) {
        this.serveSocks(l, s);
      } else if ((b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a)) {
        this.serveHttp1(l, s);
      } else {
        // SOCKS4, a TLS ClientHello (an https:// proxy URL), or noise.
        s.destroy();
      }
    });
  }

  // ---- HTTP: absolute-form requests, CONNECT, Upgrade -----------------------------------
  //
  // Why a forwarder of our own rather than node:http on both sides: a proxied request through
  // node's server and client is parsed twice, turned into objects, re-serialised twice and
  // given an agent, which cost ~4× the CPU of squid per request (bench/egress.ts). Here the
  // request head is parsed once, strictly and within maxHeaderBytes (http1.ts refuses every
  // ambiguous framing a smuggling attack relies on), decided exactly as before (the one
  // decide() path: canonical host, ports, addresses, ask hook, internal names, a recorded
  // decision per request), rewritten to origin-form without hop-by-hop fields, and written to
  // an upstream socket kept per client connection and (canonical host, port, dialed address),
  // so that no upstream connection ever carries two clients' requests. Bodies are streamed by
  // their framing both ways; only the response head and framing are parsed, so the next
  // request on the client connection (pipelined or not) starts exactly where this answer
  // ended, whatever host it names. Requests on one client connection are served one at a time.

  private serveHttp1(l: Listener, s: net.Socket): void {
    const p: PlainConn = {
      l,
      s,
      buf: undefined,
      scanned: 0,
      ex: undefined,
      pool: new Map(),
      decisions: undefined,
      dnsAbort: undefined,
      dnsTimer: undefined,
      onDnsTimeout: undefined,
      done: false,
      ended: false,
    };
    s.setNoDelay(true);
    const c = this.conns.get(s);
    if (c) c.quiet = () => !p.buf && !p.ex;
    s.on('data', (chunk: Buffer) => {
      if (p.done) return;
      p.buf = p.buf ? Buffer.concat([p.buf, chunk]) : chunk;
      this.pumpClient(p);
    });
    s.on('end', () => {
      p.ended = true;
      // A half-closed client still gets the answer to a request it completed; then the end.
      if (!p.ex) this.finishClient(p);
      else if (p.ex.reqBody && !p.ex.reqBody.done) this.abortExchange(p, 'the client closed before its request body was complete');
    });
    s.once('close', () => {
      p.done = true;
      if (p.ex?.up) p.ex.up.sock.destroy();
      this.drainPool(p);
      p.dnsAbort?.abort();
      if (p.dnsTimer) clearTimeout(p.dnsTimer);
    });
    s.setTimeout(this.limits.idleTimeoutMs, () => s.destroy());
    s.resume();
  }

  /** Consume what the client sent: a request head when idle, body bytes while a request is out. */
  private pumpClient(p: PlainConn): void {
    if (p.done) return;
    const cur = p.ex;
    if (cur) {
      if (cur.up && cur.reqBody && !cur.reqBody.done) this.sendBody(p, cur);
      // Bytes of a pipelined request wait (bounded: reading stops) until this answer is out.
      if (p.ex && p.buf && (!cur.reqBody || cur.reqBody.done || !cur.up)) p.s.pause();
      return;
    }
    if (!p.buf) return;
    let head: RequestHead | undefined;
    try {
      head = parseRequestHead(p.buf, this.limits.maxHeaderBytes, p.scanned);
    } catch (err) {
      if (!(err instanceof HttpFramingError)) throw err;
      this.clientFault(p, err.status, err.message);
      return;
    }
    if (!head) {
      p.scanned = p.buf.length;
      return;
    }
    this.clearHeaderDeadline(p.s);
    p.scanned = 0;
    const rest = p.buf.length > head.end ? p.buf.subarray(head.end) : undefined;
    p.buf = rest;
    const s = p.s;
    const l = p.l;
    if (head.method === 'CONNECT') {
      // The socket becomes a tunnel (or is answered and closed): this path lets go of it.
      p.done = true;
      s.removeAllListeners('data');
      s.removeAllListeners('end');
      s.setTimeout(0);
      s.pause();
      this.serveConnect(l, head.target, s, rest ?? Buffer.alloc(0)).catch((err: unknown) => {
        this.onError(l.workshopId, err);
        s.destroy();
      });
      return;
    }
    const target = boundTarget(head.target);
    const parsed = this.parseAbsolute(head.target);
    if (head.upgrade !== undefined || head.connection.has('upgrade') || head.http2Settings) {
      // Upgrade (WebSocket, h2c) on plain HTTP would turn a checked request into an unchecked
      // byte stream: refused. Clients reach wss:// and ws:// through CONNECT instead.
      const canonical = parsed ? canonicalizeHost(parsed.host) : null;
      const d: EgressDecision = {
        at: new Date(),
        protocol: 'http',
        target,
        host: canonical && canonical.kind !== 'refused' ? canonical.value : '',
        port: parsed?.port ?? 0,
        allowed: false,
        outcome: 'denied',
        reason: 'UPGRADE_REFUSED',
        message: `protocol upgrade to ${describeRaw(head.upgrade ?? '', 40)} over plain HTTP is not allowed: use CONNECT (wss://, https://)`,
      };
      this.record(l, d);
      this.closeWith(p, rawAnswer(403, d.reason, answerBody(d)));
      return;
    }
    if (!parsed) {
      const why = /^https:/i.test(head.target)
        ? 'https:// URLs go through CONNECT, not as a plain request'
        : head.target.startsWith('/')
          ? 'this is a proxy: send the absolute URL (http://host/path) or use CONNECT'
          : 'the target is not an absolute http:// URL without user info';
      const d = this.badRequest('http', target, why);
      this.record(l, d);
      this.closeWith(p, rawAnswer(400, d.reason, answerBody(d)));
      return;
    }
    if (head.expect !== undefined && head.expect !== '100-continue') {
      this.clientFault(p, 417, `Expect: ${describeRaw(head.expect, 40)} is not supported (only 100-continue)`);
      return;
    }
    const ex: PlainExchange = {
      head,
      path: parsed.path,
      port: parsed.port,
      target,
      up: undefined,
      reqBody: head.chunked
        ? new BodyFramer('chunked', 0, true, 400, this.limits.maxHeaderBytes)
        : head.contentLength
          ? new BodyFramer('length', head.contentLength, true, 400, 0)
          : undefined,
      res: undefined,
      rbuf: undefined,
      rscanned: 0,
      headSent: false,
      close: head.minor === 0 || head.connection.has('close') || p.ended,
      retried: false,
      reused: false,
      bytesIn: 0,
      verdict: undefined,
    };
    p.ex = ex;
    // Nothing more is read until the request is decided and has an upstream to go to.
    s.pause();
    const policyAt = l.policy;
    const gone = new LazySignal(s);
    const kept = p.decisions?.get(parsed.authority);
    const decided =
      kept && kept.policy === l.policy && kept.port === parsed.port
        ? this.decideKept(p, kept, parsed.host, target, gone)
        : this.decide(l, 'http', parsed.host, parsed.port, target, gone);
    decided.then(
      (v) => {
        gone.dispose();
        if (v.answers && v.decision.reason === 'ALLOW_LISTED' && l.policy && l.policy === policyAt)
          this.keepDecision(p, parsed.authority, l.policy, v);
        this.startExchange(p, ex, v);
      },
      (err: unknown) => {
        gone.dispose();
        this.onError(l.workshopId, err);
        this.closeWith(p, rawAnswer(502, 'UPSTREAM_FAILED', 'atelier egress: the request could not be decided'));
      },
    );
  }

  /** A malformed request: recorded, answered with `status`, and the connection closed (its framing is lost). */
  private clientFault(p: PlainConn, status: number, message: string): void {
    this.clearHeaderDeadline(p.s);
    this.record(p.l, {
      at: new Date(),
      protocol: 'http',
      target: '',
      host: '',
      port: 0,
      allowed: false,
      outcome: 'denied',
      reason: 'BAD_REQUEST',
      message: `malformed request: ${message}`,
    });
    this.closeWith(p, rawAnswer(status, 'BAD_REQUEST', `atelier egress: malformed request: ${message}`));
  }

  /** Answer and close; nothing the client sends afterwards is read. */
  private closeWith(p: PlainConn, answer: string): void {
    p.done = true;
    const ex = p.ex;
    p.ex = undefined;
    if (ex?.up) ex.up.sock.destroy();
    const s = p.s;
    s.removeAllListeners('data');
    if (s.destroyed) return;
    if (s.writable) s.end(answer);
    s.destroySoon();
    // The client may never read the answer: it goes at the idle deadline like anyone else.
    s.resume();
  }

  private startExchange(p: PlainConn, ex: PlainExchange, v: Verdict): void {
    if (p.done || p.ex !== ex) return;
    const d = v.decision;
    if (!d.allowed) {
      const extra: Record<string, string> = {};
      if (d.approvalId !== undefined) extra['X-Atelier-Approval'] = d.approvalId;
      // The request's body (if any) is never read: the answer, then close.
      this.closeWith(p, rawAnswer(STATUS[d.reason], d.reason, answerBody(d), extra));
      return;
    }
    ex.verdict = v;
    if (ex.head.expect === '100-continue' && ex.head.minor === 1) p.s.write('HTTP/1.1 100 Continue\r\n\r\n');
    const key = v.internal ? `internal|${describeTarget(v.internal)}` : `${d.host}|${ex.port}`;
    const pooled = p.pool.get(key);
    if (pooled) {
      this.unpool(p, key);
      // Reused only while its address is still one the decision just checked.
      if (v.internal || v.dial.includes(pooled.address)) {
        ex.reused = true;
        this.attachUpstream(p, ex, pooled);
        return;
      }
      pooled.sock.destroy();
    }
    this.dialUpstream(p, ex, key);
  }

  private dialUpstream(p: PlainConn, ex: PlainExchange, key: string): void {
    const v = ex.verdict!;
    this.dialPlain(p.l, v.dial, ex.port, v.internal).then(
      ({ sock, address, reader }) => {
        if (p.done || p.ex !== ex) {
          sock.destroy();
          return;
        }
        this.attachUpstream(p, ex, { sock, key, address, reader, ex: undefined });
      },
      (err: NodeJS.ErrnoException) => {
        if (p.done || p.ex !== ex) return;
        const where = v.internal ? describeTarget(v.internal) : v.dial.join(', ');
        this.closeWith(
          p,
          rawAnswer(
            502,
            'UPSTREAM_FAILED',
            `atelier egress: ${hostFor(v.decision.host)}:${ex.port} (${where}) could not be reached: ${err.code ?? err.message}`,
          ),
        );
      },
    );
  }

  /** Connect to the first checked address that answers (or the internal target); a plain socket. */
  private async dialPlain(
    l: Listener,
    addresses: readonly string[],
    port: number,
    internal?: InternalTarget,
  ): Promise<{ sock: net.Socket; address: string; reader: PlainReader }> {
    let last: unknown = new Error('no address');
    for (const address of internal ? [describeTarget(internal)] : addresses) {
      // Reads land in one buffer shared by every plain upstream (see PLAIN_READ_BUFFER).
      const reader: PlainReader = { on: undefined };
      const onread: net.OnReadOpts = {
        buffer: PLAIN_READ_BUFFER,
        callback: (n: number) => {
          if (reader.on) reader.on(PLAIN_READ_BUFFER.subarray(0, n));
          // Nobody to give the bytes to yet: an upstream does not speak first.
          else up.destroy();
          return true;
        },
      };
      let up: net.Socket;
      try {
        const sock = await new Promise<net.Socket>((resolve, reject) => {
          up = internal
            ? connectTarget(internal, onread)
            : net.connect({ host: address, port, lookup: pinnedLookup(address), noDelay: true, onread });
          this.track(l, up);
          const t = connectDeadline(up, `${address}:${port}`, this.limits.connectTimeoutMs);
          up.once('connect', () => {
            clearTimeout(t);
            up.off('error', fail);
            resolve(up);
          });
          const fail = (err: Error): void => {
            clearTimeout(t);
            up.destroy();
            reject(err);
          };
          up.once('error', fail);
        });
        return { sock, address, reader };
      } catch (err) {
        last = err;
      }
    }
    throw last;
  }

  /** Give an upstream to an exchange: listeners (once per socket), the request head, the body so far. */
  private attachUpstream(p: PlainConn, ex: PlainExchange, u: PlainUpstream): void {
    ex.up = u;
    u.ex = ex;
    const sock = u.sock;
    if (!u.listening) {
      u.listening = true;
      // `chunk` is PLAIN_READ_BUFFER: whatever outlives this call is copied (writeOut, rbuf).
      u.reader.on = (chunk: Buffer) => {
        const cur = u.ex;
        if (!cur) {
          // An idle upstream does not speak first: it is not reused.
          sock.destroy();
          return;
        }
        this.onUpstreamData(p, cur, chunk);
      };
      sock.on('end', () => this.onUpstreamGone(p, u, undefined));
      sock.on('close', () => {
        if (p.pool.get(u.key) === u) this.unpool(p, u.key);
        this.onUpstreamGone(p, u, new Error('closed'));
      });
      sock.on('drain', () => {
        if (u.ex && !p.done) p.s.resume();
      });
      sock.setTimeout(this.limits.idleTimeoutMs, () => sock.destroy());
      // Flowing, so that the end of the stream is seen ('end'); the bytes go to reader.on.
      sock.resume();
    }
    const head = ex.head;
    const d = ex.verdict!.decision;
    // RFC 9112 §3.2.2: a proxy replaces Host with the authority of the absolute URL, so a
    // request checked for one name cannot be routed by the origin to another (domain fronting).
    const authority = ex.port === 80 ? hostFor(d.host) : `${hostFor(d.host)}:${ex.port}`;
    const bytes = requestHeadBytes(head, ex.path, authority);
    if (ex.reqBody && !ex.reqBody.done) {
      sock.cork();
      sock.write(bytes);
      this.sendBody(p, ex);
      sock.uncork();
    } else sock.write(bytes);
    if (!ex.reqBody || ex.reqBody.done) this.requestSent(p, ex);
  }

  /** Pass the client's buffered body bytes on, by the request's framing. */
  private sendBody(p: PlainConn, ex: PlainExchange): void {
    const framer = ex.reqBody!;
    const buf = p.buf;
    if (!ex.up) return;
    if (!buf) {
      // The rest of the body is still to come.
      p.s.resume();
      return;
    }
    const out: Buffer[] = [];
    let used: number;
    try {
      used = framer.push(buf, 0, out);
    } catch (err) {
      if (!(err instanceof HttpFramingError)) throw err;
      if (ex.headSent) p.s.destroy();
      else this.clientFault(p, err.status, err.message);
      return;
    }
    p.buf = used < buf.length ? buf.subarray(used) : undefined;
    let ok = true;
    for (const b of out) ok = ex.up.sock.write(b) && ok;
    if (framer.done) this.requestSent(p, ex);
    else if (ok) p.s.resume();
    else p.s.pause();
  }

  /** The whole request is upstream: what the client sends next is the next request, read after this answer. */
  private requestSent(p: PlainConn, ex: PlainExchange): void {
    if (p.ex !== ex) return;
    if (p.buf) p.s.pause();
    else p.s.resume();
  }

  private onUpstreamData(p: PlainConn, ex: PlainExchange, chunk: Buffer): void {
    if (p.done || p.ex !== ex) return;
    // One write to the client per read from the origin (head and body together): what is to be
    // written is collected in `out` and written at the end, or before anything else happens.
    const out: Buffer[] = [];
    try {
      this.relayAnswer(p, ex, chunk, out);
    } finally {
      this.writeOut(p, ex, out);
    }
  }

  /** Write what an origin read produced for the client, as one buffer (never a view of PLAIN_READ_BUFFER). */
  private writeOut(p: PlainConn, ex: PlainExchange, out: Buffer[]): void {
    if (out.length === 0) return;
    const s = p.s;
    if (!s.writable) {
      // Answered and ending, or gone: nothing more goes to this client.
      out.length = 0;
      return;
    }
    let ok: boolean;
    if (out.length === 1) {
      const b = out[0]!;
      ok = s.write(b.buffer === PLAIN_READ_BUFFER.buffer ? Buffer.from(b) : b);
    }
    // One read's worth (at most the read buffer, a head, chunk framing): one copy, one write.
    else ok = s.write(Buffer.concat(out));
    out.length = 0;
    // The client reads slower than the origin sends: the origin waits.
    if (!ok && ex.up && ex.res && !ex.res.done && p.ex === ex) {
      const up = ex.up.sock;
      up.pause();
      s.once('drain', () => up.resume());
    }
  }

  private relayAnswer(p: PlainConn, ex: PlainExchange, chunk: Buffer, out: Buffer[]): void {
    ex.bytesIn += chunk.length;
    let buf = chunk;
    let from = 0;
    while (from < buf.length || (ex.res && ex.res.done)) {
      if (!ex.res) {
        // The head is parsed where it is; only an incomplete one is kept, as a copy (concat), since
        // the read buffer is reused.
        const hb = ex.rbuf ? (ex.rbuf = Buffer.concat([ex.rbuf, buf.subarray(from)])) : from ? buf.subarray(from) : buf;
        let rh: ResponseHead | undefined;
        try {
          rh = parseResponseHead(hb, RESPONSE_HEAD_BYTES, ex.rscanned);
        } catch (err) {
          if (!(err instanceof HttpFramingError)) throw err;
          this.writeOut(p, ex, out);
          this.upstreamFailed(p, ex, err.message);
          return;
        }
        if (!rh) {
          ex.rbuf ??= Buffer.from(hb);
          ex.rscanned = ex.rbuf.length;
          return;
        }
        buf = hb;
        from = rh.end;
        ex.rbuf = undefined;
        ex.rscanned = 0;
        if (!this.responseHead(p, ex, rh, out)) return;
        continue;
      }
      if (ex.res.done) {
        // Bytes after the end of the answer: the origin does not frame its answers as it says.
        const extra = from < buf.length;
        this.writeOut(p, ex, out);
        this.exchangeDone(p, ex, !extra && ex.keepUp === true);
        return;
      }
      let used: number;
      try {
        used = ex.res.push(buf, from, out);
      } catch (err) {
        if (!(err instanceof HttpFramingError)) throw err;
        this.writeOut(p, ex, out);
        this.upstreamFailed(p, ex, err.message);
        return;
      }
      from += used;
      if (!ex.res.done) return;
    }
  }

  /** A response head from upstream: relayed (1xx, then the final one) with its framing decided. False when the exchange ended. */
  private responseHead(p: PlainConn, ex: PlainExchange, rh: ResponseHead, out: Buffer[]): boolean {
    const clientMinor = ex.head.minor;
    if (rh.status < 200) {
      if (rh.status === 101) {
        this.writeOut(p, ex, out);
        this.upstreamFailed(p, ex, 'the origin switched protocols without being asked to');
        return false;
      }
      // 100 was answered by the proxy itself; other interim answers (103) go to HTTP/1.1 clients.
      if (rh.status !== 100 && clientMinor === 1) out.push(responseHeadBytes(rh, '', false));
      return true;
    }
    const noBody = ex.head.method === 'HEAD' || rh.status === 204 || rh.status === 304;
    let framing: string;
    if (rh.otherCoding && !noBody) {
      // A transfer coding (gzip…) the client was never offered cannot be passed on as it is.
      this.writeOut(p, ex, out);
      this.upstreamFailed(p, ex, 'the origin answered with a transfer coding other than chunked');
      return false;
    }
    if (noBody) {
      ex.res = new BodyFramer('length', 0, true, 502, 0);
      framing = '';
    } else if (rh.chunked) {
      ex.res = new BodyFramer('chunked', 0, clientMinor === 1, 502, RESPONSE_HEAD_BYTES);
      if (clientMinor === 1) framing = 'Transfer-Encoding: chunked\r\n';
      else {
        framing = '';
        ex.close = true;
      }
    } else if (rh.contentLength !== undefined && !rh.otherCoding) {
      ex.res = new BodyFramer('length', rh.contentLength, true, 502, 0);
      framing = '';
    } else {
      // Delimited by the origin's close: so is the answer to the client.
      ex.res = new BodyFramer('close', 0, true, 502, 0);
      framing = '';
      ex.close = true;
    }
    ex.keepUp = rh.minor === 1 && !rh.connection.has('close') && ex.res.kind !== 'close';
    // A request whose body is not all upstream yet cannot be followed by another on this connection.
    if (ex.reqBody && !ex.reqBody.done) ex.close = true;
    ex.headSent = true;
    out.push(responseHeadBytes(rh, framing, ex.close));
    return true;
  }

  /** The answer is complete: the upstream goes back to this connection's pool (or away), the next request is read. */
  private exchangeDone(p: PlainConn, ex: PlainExchange, reusable: boolean): void {
    const u = ex.up;
    p.ex = undefined;
    if (u) {
      u.ex = undefined;
      if (
        reusable &&
        ex.reqBody?.done !== false &&
        !p.pool.has(u.key) &&
        p.pool.size < MAX_POOLED_PER_CLIENT &&
        p.l.pooled < MAX_POOLED_PER_WORKSHOP
      ) {
        p.pool.set(u.key, u);
        p.l.pooled++;
      } else u.sock.destroy();
    }
    if (ex.close) {
      this.finishClient(p);
      return;
    }
    this.armHeaderDeadline(p.s);
    p.s.resume();
    if (p.buf) this.pumpClient(p);
    else if (p.ended) this.finishClient(p);
  }

  private unpool(p: PlainConn, key: string): void {
    if (p.pool.delete(key)) p.l.pooled--;
  }

  /** Every idle upstream of a client connection closed (the connection is done). */
  private drainPool(p: PlainConn): void {
    for (const u of p.pool.values()) u.sock.destroy();
    p.l.pooled -= p.pool.size;
    p.pool.clear();
  }

  /** No more requests on this connection: end it once what was written is flushed. */
  private finishClient(p: PlainConn): void {
    p.done = true;
    p.s.removeAllListeners('data');
    p.s.end();
    p.s.destroySoon();
    p.s.resume();
    this.drainPool(p);
  }

  /** The upstream ended or failed while it served this exchange. */
  private onUpstreamGone(p: PlainConn, u: PlainUpstream, err: Error | undefined): void {
    const ex = u.ex;
    if (!ex || p.ex !== ex || p.done) {
      if (!err) u.sock.destroy();
      return;
    }
    if (ex.res && ex.res.kind === 'close' && !err) {
      ex.res.done = true;
      this.exchangeDone(p, ex, false);
      return;
    }
    if (ex.res?.done) return;
    // The keep-alive race: an origin closed an idle connection just as a request without a body
    // was written to it. Nothing was answered, so the request is sent once more on a fresh one.
    // Only an idempotent request (RFC 9110 §9.2.2) is retried.
    if (ex.reused && !ex.retried && ex.bytesIn === 0 && !ex.reqBody && IDEMPOTENT.has(ex.head.method)) {
      ex.retried = true;
      ex.reused = false;
      u.ex = undefined;
      ex.up = undefined;
      u.sock.destroy();
      this.dialUpstream(p, ex, u.key);
      return;
    }
    this.upstreamFailed(
      p,
      ex,
      err ? 'the connection to the origin failed' : 'the origin closed the connection before its answer was complete',
    );
  }

  /** The origin failed mid-exchange: a 502 if nothing was answered yet, else the client is cut (a truncated answer must not look whole). */
  private upstreamFailed(p: PlainConn, ex: PlainExchange, why: string): void {
    if (ex.up) {
      ex.up.ex = undefined;
      ex.up.sock.destroy();
    }
    if (ex.headSent) {
      p.done = true;
      p.s.destroy();
      return;
    }
    const d = ex.verdict?.decision;
    this.closeWith(p, rawAnswer(502, 'UPSTREAM_FAILED', `atelier egress: ${d ? `${hostFor(d.host)}:${ex.port}` : ex.target}: ${why}`));
  }

  /** The client stopped in the middle of its request: the exchange cannot complete. */
  private abortExchange(p: PlainConn, _why: string): void {
    p.done = true;
    if (p.ex?.up) p.ex.up.sock.destroy();
    p.ex = undefined;
    p.s.destroy();
  }

  /** `http://host[:port]/path` → parts; null when the target is not absolute-form http. */
  private parseAbsolute(url: string): { authority: string; host: string; port: number; path: string } | null {
    const m = /^http:\/\/([^/?#]*)(.*)$/i.exec(url);
    if (!m) return null;
    const authority = m[1]!;
    // userinfo (`http://allowed.com@evil.com/`) is where URL parsers disagree: refused.
    if (authority.includes('@')) return null;
    const a = splitAuthority(authority);
    if (!a) return null;
    const port = a.port ?? 80;
    let path = m[2]!;
    if (path === '') path = '/';
    else if (path.startsWith('?')) path = `/${path}`;
    else if (!path.startsWith('/')) return null;
    return { authority, host: a.host, port, path };
  }

  private async serveConnect(l: Listener, authority: string, s: net.Socket, head: Buffer): Promise<void> {
    const target = boundTarget(authority);
    const a = splitAuthority(authority);
    let v: Verdict;
    if (!a || a.port === undefined) {
      v = { decision: this.badRequest('connect', target, 'CONNECT needs host:port'), dial: [] };
      this.record(l, v.decision);
    } else {
      const gone = new LazySignal(s);
      try {
        v = await this.decide(l, 'connect', a.host, a.port, target, gone);
      } finally {
        gone.dispose();
      }
    }
    if (s.destroyed) return;
    if (!v.decision.allowed) {
      const extra: Record<string, string> = {};
      if (v.decision.approvalId !== undefined) extra['X-Atelier-Approval'] = v.decision.approvalId;
      // Anything the client sent after the CONNECT is never read: the answer, then close.
      s.end(rawAnswer(STATUS[v.decision.reason], v.decision.reason, answerBody(v.decision), extra));
      s.destroySoon();
      return;
    }
    let up: Upstream;
    try {
      up = await this.dial(l, v.dial, v.decision.port, v.internal);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      s.end(rawAnswer(502, 'UPSTREAM_FAILED', `atelier egress: ${target} could not be reached: ${code}`));
      s.destroySoon();
      return;
    }
    if (s.destroyed) {
      up.socket.destroy();
      return;
    }
    s.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) up.socket.write(head);
    this.splice(l, s, up);
  }

  // ---- SOCKS5 (RFC 1928): no authentication, CONNECT only -------------------------------

  private serveSocks(l: Listener, s: net.Socket): void {
    let buf = Buffer.alloc(0);
    let stage: 'greeting' | 'request' = 'greeting';
    const fail = (code: number) => {
      s.end(Buffer.from([0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0]));
      s.destroySoon();
    };
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (buf.length > 1024) {
        s.destroy();
        return;
      }
      if (stage === 'greeting') {
        if (buf.length < 2) return;
        const n = buf[1]!;
        if (buf.length < 2 + n) return;
        const methods = buf.subarray(2, 2 + n);
        buf = buf.subarray(2 + n);
        if (!methods.includes(0x00)) {
          s.end(Buffer.from([0x05, 0xff]));
          s.destroySoon();
          s.off('data', onData);
          return;
        }
        s.write(Buffer.from([0x05, 0x00]));
        stage = 'request';
      }
      if (buf.length < 5) return;
      if (buf[0] !== 0x05) {
        s.off('data', onData);
        s.destroy();
        return;
      }
      const cmd = buf[1]!;
      const atyp = buf[3]!;
      let host: string;
      let end: number;
      if (atyp === 0x01) {
        end = 4 + 4;
        if (buf.length < end + 2) return;
        host = `${buf[4]}.${buf[5]}.${buf[6]}.${buf[7]}`;
      } else if (atyp === 0x04) {
        end = 4 + 16;
        if (buf.length < end + 2) return;
        host = `[${Array.from({ length: 8 }, (_, i) => buf.readUInt16BE(4 + i * 2).toString(16)).join(':')}]`;
      } else if (atyp === 0x03) {
        const len = buf[4]!;
        end = 5 + len;
        if (buf.length < end + 2) return;
        // Domain bytes are UTF-8 (IDNA happens in canonicalisation); invalid UTF-8 becomes
        // U+FFFD, which canonicalisation refuses.
        host = buf.subarray(5, end).toString('utf8');
      } else {
        s.off('data', onData);
        fail(0x08);
        return;
      }
      const port = buf.readUInt16BE(end);
      const rest = buf.subarray(end + 2);
      s.off('data', onData);
      s.pause();
      this.clearHeaderDeadline(s);
      if (cmd !== 0x01) {
        const d = this.badRequest('socks5', `${host}:${port}`, `SOCKS5 command ${cmd} is not supported: only CONNECT`);
        d.reason = 'UNSUPPORTED';
        this.record(l, d);
        fail(0x07);
        return;
      }
      this.socksConnect(l, s, host, port, rest).catch((err: unknown) => {
        this.onError(l.workshopId, err);
        s.destroy();
      });
    };
    s.on('data', onData);
    s.resume();
  }

  private async socksConnect(l: Listener, s: net.Socket, host: string, port: number, rest: Buffer): Promise<void> {
    const target = boundTarget(`${host}:${port}`);
    const gone = new LazySignal(s);
    let v: Verdict;
    try {
      v = await this.decide(l, 'socks5', host, port, target, gone);
    } finally {
      gone.dispose();
    }
    if (s.destroyed) return;
    const reply = (code: number) => Buffer.from([0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0]);
    if (!v.decision.allowed) {
      const r = v.decision.reason;
      // 0x02 "not allowed by ruleset"; 0x04 "host unreachable" for names that do not resolve.
      s.end(reply(r === 'DNS_NOT_FOUND' || r === 'INTERNAL_UNKNOWN' || r === 'DNS_FAILED' || r === 'DNS_TIMEOUT' ? 0x04 : 0x02));
      s.destroySoon();
      return;
    }
    let up: Upstream;
    try {
      up = await this.dial(l, v.dial, port, v.internal);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      s.end(reply(code === 'ECONNREFUSED' ? 0x05 : code === 'ETIMEDOUT' ? 0x06 : 0x01));
      s.destroySoon();
      return;
    }
    if (s.destroyed) {
      up.socket.destroy();
      return;
    }
    s.write(reply(0x00));
    if (rest.length > 0) up.socket.write(rest);
    this.splice(l, s, up);
  }

  // ---- decision ------------------------------------------------------------------------

  private badRequest(protocol: EgressProtocol, target: string, message: string): EgressDecision {
    return { at: new Date(), protocol, target, host: '', port: 0, allowed: false, outcome: 'denied', reason: 'BAD_REQUEST', message };
  }

  /**
   * The one decision path for all three protocols. Order matters:
   * - an IP literal is checked as an address first, so a forbidden address is never offered
   *   to the ask hook;
   * - a name is checked against the lists before it is resolved, so names the policy does not
   *   allow never reach DNS (a lookup is itself a way to leak data);
   * - a name is resolved once, every answer is checked, and only checked answers are dialed.
   */
  private async decide(
    l: Listener,
    protocol: EgressProtocol,
    rawHost: string,
    port: number,
    target: string,
    gone: LazySignal,
    resolved?: { answers: string[] } | { error: unknown },
  ): Promise<Verdict> {
    const base = { at: new Date(), protocol, target, port };
    const done = (d: EgressDecision, dial: string[] = []): Verdict => {
      this.record(l, d);
      return { decision: d, dial };
    };
    const refuse = (reason: EgressReason, host: string, message: string, extra: Partial<EgressDecision> = {}): Verdict =>
      done({ ...base, host, allowed: false, outcome: 'denied', reason, message, ...extra });

    const policy = l.policy;
    if (!policy) return refuse('NO_POLICY', '', `workshop ${l.workshopId} has no egress policy yet: nothing may leave`);
    if (!validPort(port)) return refuse('BAD_REQUEST', '', `port ${port} is not 1–65535`);
    const h = canonicalizeHost(rawHost);
    if (h.kind === 'refused') return refuse('HOST_INVALID', '', h.message, { hostRefusal: h.reason });
    const hostPort = `${hostFor(h.value)}:${port}`;

    if (h.kind === 'name' && (h.value === INTERNAL_SUFFIX.slice(1) || h.value.endsWith(INTERNAL_SUFFIX))) {
      // The workshop's own services: never the policy's business, never DNS, never the internet.
      const services = this.internal.get(l.workshopId);
      const target = services?.get(hostPort);
      if (!target) {
        const known = [...(services?.keys() ?? [])].sort();
        return refuse(
          'INTERNAL_UNKNOWN',
          h.value,
          `${hostPort} is not a service of this workshop` +
            (known.length ? ` (it has ${known.join(', ')})` : ' (it has none yet: see `atelier simulators list`)'),
        );
      }
      this.record(l, {
        ...base,
        host: h.value,
        allowed: true,
        outcome: 'allowed',
        reason: 'INTERNAL_SERVICE',
        message: `${hostPort} is a service of this workshop`,
        address: describeTarget(target),
      });
      return {
        decision: { ...base, host: h.value, allowed: true, outcome: 'allowed', reason: 'INTERNAL_SERVICE', message: '' },
        dial: [],
        internal: target,
      };
    }

    if (h.kind !== 'name') {
      const a = checkAddress(h.bytes, policy.allowRanges);
      if (!a.allowed)
        return refuse('ADDRESS_FORBIDDEN', h.value, forbiddenMessage(h.value, a.address, a.class), {
          address: a.address,
          addressClass: a.class,
        });
    }

    let reason: EgressReason = 'ALLOW_LISTED';
    let entry: string | undefined;
    let approvalId: string | undefined;
    const p = policy.evaluate(h, port, protocol);
    switch (p.outcome) {
      case 'deny':
        return refuse(
          p.reason,
          h.value,
          p.reason === 'DENY_LISTED'
            ? `${hostPort} is denied by the entry "${p.entry}" of egress.deny`
            : `${h.value} is allowed on other ports only (entry "${p.entry}"): add "${hostPort}" to egress.allow`,
          { entry: p.entry },
        );
      case 'allow':
        entry = p.entry;
        break;
      case 'unknown': {
        const asked = await this.askHuman(l, policy, h, port, protocol, gone.signal);
        approvalId = asked.approvalId;
        if (asked.decision !== 'allow') {
          const extra: Partial<EgressDecision> = {};
          if (approvalId !== undefined) extra.approvalId = approvalId;
          return done({
            ...base,
            host: h.value,
            allowed: false,
            outcome: 'unknown',
            reason: asked.reason,
            message: asked.message,
            ...extra,
          });
        }
        reason = 'ASK_ALLOWED';
        break;
      }
    }

    let dial: string[];
    let raw: string[] | undefined;
    if (h.kind === 'name') {
      let answers: Uint8Array[];
      try {
        // Resolved already when a client connection's kept decision was checked for this request.
        if (resolved && 'error' in resolved) throw resolved.error;
        raw = resolved ? resolved.answers : await this.resolve(h.value, gone);
        answers = parseAnswers(h.value, raw);
        if (answers.length === 0) throw new ResolveError('DNS_NOT_FOUND', `${h.value} has no address`);
      } catch (err) {
        const code: EgressReason = err instanceof ResolveError ? err.code : 'DNS_FAILED';
        return refuse(code, h.value, `${(err as Error).message}`);
      }
      dial = [];
      for (const b of answers) {
        const a = checkAddress(b, policy.allowRanges);
        // One forbidden answer condemns the name: a name that points at both a public and an
        // internal address is how rebinding attacks pick their moment.
        if (!a.allowed)
          return refuse('ADDRESS_FORBIDDEN', h.value, forbiddenMessage(h.value, a.address, a.class), {
            address: a.address,
            addressClass: a.class,
          });
        if (!dial.includes(a.address)) dial.push(a.address);
      }
    } else {
      dial = [checkAddress(h.bytes, policy.allowRanges).address];
    }
    const d: EgressDecision = {
      ...base,
      host: h.value,
      allowed: true,
      outcome: 'allowed',
      reason,
      message: reason === 'ASK_ALLOWED' ? `${hostPort} allowed by a human` : `${hostPort} allowed by "${entry}"`,
      address: dial[0]!,
    };
    if (entry !== undefined) d.entry = entry;
    if (approvalId !== undefined) d.approvalId = approvalId;
    const v = done(d, dial);
    // A list-allowed name may be kept by the client connection (plain HTTP; see decideKept()).
    if (raw && protocol === 'http' && reason === 'ALLOW_LISTED') v.answers = raw;
    return v;
  }

  /** The resolver's answers for a canonical name, within dnsTimeoutMs. */
  private resolve(name: string, gone: LazySignal): Promise<string[]> {
    return withDeadline(
      this.limits.dnsTimeoutMs,
      gone.signal,
      (sig) => this.resolver.resolve(name, sig),
      () => new ResolveError('DNS_TIMEOUT', `no answer for ${name} within ${this.limits.dnsTimeoutMs} ms`),
    );
  }

  /**
   * A plain-HTTP request for an authority its client connection has a kept decision for, under
   * the same policy: the name is resolved again (one lookup per request, as always), and when
   * the answers are exactly those the kept decision checked, it stands (recorded like any other
   * decision); any other answer, or a failure, is decided afresh from those same answers.
   */
  private async decideKept(p: PlainConn, k: ConnDecision, rawHost: string, target: string, gone: LazySignal): Promise<Verdict> {
    const l = p.l;
    let answers: string[];
    try {
      answers = await this.resolveKept(p, k.host);
    } catch (error) {
      return this.decide(l, 'http', rawHost, k.port, target, gone, { error });
    }
    if (l.policy !== k.policy || answers.join('\n') !== k.answers)
      return this.decide(l, 'http', rawHost, k.port, target, gone, { answers });
    const d: EgressDecision = {
      at: new Date(),
      protocol: 'http',
      target,
      host: k.host,
      port: k.port,
      allowed: true,
      outcome: 'allowed',
      reason: 'ALLOW_LISTED',
      message: k.message,
      address: k.dial[0]!,
    };
    if (k.entry !== undefined) d.entry = k.entry;
    this.record(l, d);
    return { decision: d, dial: k.dial, answers };
  }

  /**
   * resolve() for a connection's kept decisions, without the two abort controllers and the timer
   * per request: one controller per connection (aborted when it closes) and one timer, re-armed.
   * A timeout aborts the connection's controller: a DNS_TIMEOUT is answered and the connection closed.
   */
  private resolveKept(p: PlainConn, name: string): Promise<string[]> {
    const ctl = (p.dnsAbort ??= new AbortController());
    return new Promise<string[]>((resolve, reject) => {
      let settled = false;
      p.onDnsTimeout = () => {
        if (settled) return;
        settled = true;
        ctl.abort();
        reject(new ResolveError('DNS_TIMEOUT', `no answer for ${name} within ${this.limits.dnsTimeoutMs} ms`));
      };
      if (p.dnsTimer) p.dnsTimer.refresh();
      else {
        p.dnsTimer = setTimeout(() => p.onDnsTimeout?.(), this.limits.dnsTimeoutMs);
        p.dnsTimer.unref();
      }
      this.resolver.resolve(name, ctl.signal).then(
        (answers) => {
          if (settled) return;
          settled = true;
          p.onDnsTimeout = undefined;
          resolve(answers);
        },
        (err: unknown) => {
          if (settled) return;
          settled = true;
          p.onDnsTimeout = undefined;
          reject(err);
        },
      );
    });
  }

  /** Keep an allowed decision on its client connection, for the exact authority of the request. */
  private keepDecision(p: PlainConn, authority: string, policy: EgressPolicy, v: Verdict): void {
    const d = v.decision;
    p.decisions ??= new Map();
    if (p.decisions.size >= MAX_CONN_DECISIONS && !p.decisions.has(authority)) p.decisions.clear();
    p.decisions.set(authority, {
      policy,
      host: d.host,
      port: d.port,
      entry: d.entry,
      message: d.message,
      answers: v.answers!.join('\n'),
      dial: v.dial,
    });
  }

  private async askHuman(
    l: Listener,
    policy: EgressPolicy,
    h: CanonicalHost,
    port: number,
    protocol: EgressProtocol,
    signal: AbortSignal,
  ): Promise<{ decision: AskDecision; reason: EgressReason; message: string; approvalId?: string }> {
    const hostPort = `${hostFor(h.value)}:${port}`;
    const notListed = `${hostPort} is not in this workshop's egress allowlist: add it to egress.allow in atelier.yaml`;
    const ask = this.ask;
    if (!ask) return { decision: 'deny', reason: 'NOT_ALLOWLISTED', message: notListed };
    const holdMs = policy.askHoldMs;
    let answer: AskAnswer;
    try {
      answer = await withDeadline(
        holdMs + this.limits.askGraceMs,
        signal,
        (sig) => ask(h.value, port, { workshopId: l.workshopId, protocol, holdMs, signal: sig }),
        () => new Error('ask timeout'),
      );
    } catch (err) {
      if ((err as Error).message !== 'ask timeout') this.onError(l.workshopId, err);
      return { decision: 'deny', reason: 'ASK_TIMEOUT', message: `${notListed}; nobody decided within ${Math.round(holdMs / 1000)} s` };
    }
    const a = typeof answer === 'string' ? { decision: answer } : answer;
    const out: { decision: AskDecision; reason: EgressReason; message: string; approvalId?: string } = {
      decision: a.decision,
      reason: a.decision === 'allow' ? 'ASK_ALLOWED' : a.decision === 'pending' ? 'ASK_PENDING' : 'ASK_DENIED',
      message:
        a.decision === 'pending'
          ? `${hostPort} is waiting for a human's approval${a.approvalId ? ` (request ${a.approvalId})` : ''}: retry once it is approved`
          : `${hostPort} was refused by a human`,
    };
    if (a.approvalId !== undefined) out.approvalId = a.approvalId;
    return out;
  }

  // ---- dialing and tunnels -------------------------------------------------------------

  /** Connect to the first checked address that answers; never anything else. */
  private async dial(l: Listener, addresses: readonly string[], port: number, internal?: InternalTarget): Promise<Upstream> {
    let last: unknown = new Error('no address');
    for (const address of internal ? [describeTarget(internal)] : addresses) {
      try {
        return await new Promise<Upstream>((resolve, reject) => {
          const reader = new RelayReader();
          const onread = { buffer: reader.buffer, callback: reader.callback };
          const up = internal
            ? connectTarget(internal, onread)
            : net.connect({ host: address, port, allowHalfOpen: true, lookup: pinnedLookup(address), onread });
          // Nothing is read before splice() has somewhere to put it.
          up.pause();
          this.track(l, up);
          const t = connectDeadline(up, `${address}:${port}`, this.limits.connectTimeoutMs);
          up.once('connect', () => {
            clearTimeout(t);
            resolve({ socket: up, reader });
          });
          up.once('error', (err) => {
            clearTimeout(t);
            up.destroy();
            reject(err);
          });
        });
      } catch (err) {
        last = err;
      }
    }
    throw last;
  }

  /**
   * Join a client and an upstream. A FIN from one side is passed on (half-close) while the
   * other direction keeps flowing; an error or reset on either side ends both; no traffic
   * either way for idleTimeoutMs ends both. Either direction stops reading while the other
   * side's write buffer is full (backpressure).
   *
   * Once a tunnel is decided and dialled its bytes are opaque, so plain sockets are handed to
   * the zero-copy relay (src/relay/splice.ts): same rules, enforced by splice-relay.py, with the
   * bytes never copied through this process (CONNECT upload ran at ~0.5× of a direct connection
   * relayed here). The tunnel still counts against the workshop's connections until it ends,
   * and closing the workshop's listener cuts it (its tag).
   */
  private splice(l: Listener, a: net.Socket, up: Upstream): void {
    const relay = spliceRelay();
    if (relay.usable(a, up.socket)) {
      l.clients++;
      void relay.relay(a, up.socket, { tag: `egress:${l.workshopId}`, idleMs: this.limits.idleTimeoutMs }).finally(() => l.clients--);
      return;
    }
    const b = up.socket;
    const kill = tieSockets(a, b);
    a.setTimeout(this.limits.idleTimeoutMs, kill);
    b.setTimeout(this.limits.idleTimeoutMs, kill);
    // client → upstream: node's own read buffers (an accepted socket cannot be given reused
    // buffers through a public API; the upstream side, which we connect, can: see dial()).
    a.on('data', (chunk: Buffer) => {
      if (!b.write(chunk)) a.pause();
    });
    b.on('drain', () => a.resume());
    a.once('end', () => b.end());
    // upstream → client: reused buffers (RelayReader, set up in dial()).
    up.reader.attach(b, a);
    a.on('drain', () => b.resume());
    b.once('end', () => a.end());
    b.resume();
    a.resume();
  }
}

/** Destroys `up` with an ETIMEDOUT error when it has not connected within `ms`; clear the timer on connect. */
function connectDeadline(up: net.Socket, what: string, ms: number): NodeJS.Timeout {
  return setTimeout(() => {
    const e: NodeJS.ErrnoException = new Error(`connect to ${what} timed out`);
    e.code = 'ETIMEDOUT';
    up.destroy(e);
  }, ms);
}

/**
 * Ties the lifetimes of the two sockets of a relay: an error on either ends both; a side that
 * closes after a clean FIN has already passed it on (its 'end' ended the other side, which then
 * closes by itself once flushed), any other close ends the other side now. Returns the kill.
 */
function tieSockets(a: net.Socket, b: net.Socket): () => void {
  const kill = (): void => {
    a.destroy();
    b.destroy();
  };
  a.on('error', kill);
  b.on('error', kill);
  a.once('close', (hadError) => {
    if (hadError || !a.readableEnded) b.destroy();
  });
  b.once('close', (hadError) => {
    if (hadError || !b.readableEnded) a.destroy();
  });
  return kill;
}

/** A connected upstream of a tunnel and the reader that owns its read buffer. */
interface Upstream {
  socket: net.Socket;
  reader: RelayReader;
}

/** Bytes read at once on either side of a tunnel. */
const RELAY_BUFFER_BYTES = 128 * 1024;
/** Read buffers a tunnel direction keeps for reuse once the writes holding them complete. */
const RELAY_SPARE_BUFFERS = 2;

interface RelaySlot {
  buf: Buffer;
  release: () => void;
}

/**
 * Reads a socket into reused buffers (net's `onread`) and writes each chunk to the other side
 * of the tunnel: a fresh 64 KiB buffer per read is what made tunnels spend their time in GC.
 * A chunk the kernel took at once leaves its buffer free for the next read; a chunk that had
 * to be queued keeps its buffer until that write completes, and the next read gets a spare.
 * When the other side's write buffer is full, reading stops until it drains.
 */
class RelayReader {
  private to: net.Socket | undefined;
  private from: net.Socket | undefined;
  private slot: RelaySlot | undefined;
  private readonly spare: RelaySlot[] = [];

  attach(from: net.Socket, to: net.Socket): void {
    this.from = from;
    this.to = to;
  }

  private newSlot(): RelaySlot {
    const slot: RelaySlot = {
      buf: Buffer.allocUnsafeSlow(RELAY_BUFFER_BYTES),
      release: () => {
        if (this.spare.length < RELAY_SPARE_BUFFERS) this.spare.push(slot);
      },
    };
    return slot;
  }

  readonly buffer = (): Buffer => (this.slot ??= this.spare.pop() ?? this.newSlot()).buf;

  readonly callback = (n: number, buf: Uint8Array): boolean => {
    const to = this.to;
    const slot = this.slot;
    if (!to || !slot || to.destroyed || to.writableEnded || buf !== slot.buf) {
      // Only after the tunnel is gone (reading starts in splice()): nowhere to put the bytes.
      this.from?.destroy();
      return false;
    }
    const ok = to.write(Buffer.from(slot.buf.buffer, slot.buf.byteOffset, n), slot.release);
    // Queued rather than written: the queue holds this buffer until its write completes.
    if (to.writableLength > 0) this.slot = undefined;
    return ok;
  };
}

/** One client connection on the plain-HTTP path. */
interface PlainConn {
  l: Listener;
  s: net.Socket;
  /** Bytes from the client not consumed yet (a head in the making, body bytes, a pipelined request). */
  buf: Buffer | undefined;
  /** How much of buf was already searched for the end of a head. */
  scanned: number;
  /** The request being served; one at a time per connection. */
  ex: PlainExchange | undefined;
  /** Idle upstreams of this connection by `canonical host|port` (or internal target). */
  pool: Map<string, PlainUpstream>;
  /** Allowed decisions this connection keeps, by the exact authority of the request target. */
  decisions: Map<string, ConnDecision> | undefined;
  /** Aborts the resolutions of kept decisions when the client goes (or one of them times out: the connection is then answered and closed). */
  dnsAbort: AbortController | undefined;
  /** One deadline timer per connection for those resolutions (one at a time), re-armed with refresh(). */
  dnsTimer: NodeJS.Timeout | undefined;
  onDnsTimeout: (() => void) | undefined;
  /** No more requests are read (answered and closing, or handed over to a tunnel). */
  done: boolean;
  /** The client half-closed. */
  ended: boolean;
}

/** One request and its answer. */
interface PlainExchange {
  head: RequestHead;
  path: string;
  port: number;
  target: string;
  verdict: Verdict | undefined;
  up: PlainUpstream | undefined;
  /** The request body's framing; undefined when there is none. */
  reqBody: BodyFramer | undefined;
  /** The answer's framing, once its (final) head arrived. */
  res: BodyFramer | undefined;
  /** Bytes of a response head not complete yet. */
  rbuf: Buffer | undefined;
  rscanned: number;
  /** The final response head went to the client: a failure now can only cut the connection. */
  headSent: boolean;
  /** Close the client connection after this answer. */
  close: boolean;
  /** The upstream may carry the next request of this client connection. */
  keepUp?: boolean;
  reused: boolean;
  retried: boolean;
  bytesIn: number;
}

/** An upstream socket of a client connection, dialed to `address` (a checked answer) or an internal target. */
interface PlainUpstream {
  sock: net.Socket;
  reader: PlainReader;
  key: string;
  address: string;
  ex: PlainExchange | undefined;
  listening?: boolean;
}

const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);
/** A response head from an origin larger than this is refused (502). */
const RESPONSE_HEAD_BYTES = 64 * 1024;
/** Idle upstreams a client connection keeps (distinct hosts it alternates between). */
const MAX_POOLED_PER_CLIENT = 4;
/**
 * Idle upstreams all of a workshop's connections keep together: beyond, an answered request's
 * upstream is closed, so that a workshop's idle connections cannot use up the server's descriptors.
 */
const MAX_POOLED_PER_WORKSHOP = 256;

/** Where an upstream's reads go once it serves an exchange. */
interface PlainReader {
  on: ((chunk: Buffer) => void) | undefined;
}

/**
 * The read buffer of every plain-HTTP upstream (net's `onread`): reads are handled at once, one
 * at a time, so one buffer serves them all; what must outlive a read (a response head still
 * incomplete, a chunk written to a client that could not take it at once) is copied.
 */
const PLAIN_READ_BUFFER = Buffer.allocUnsafeSlow(64 * 1024);

const CRLF_BYTES = 2;

/**
 * The request head for the origin, as one buffer: the request line in origin-form, the fields
 * that go on copied as the client sent them (parsed and checked already), then Host (the
 * checked authority) and the framing the proxy itself writes.
 */
function requestHeadBytes(head: RequestHead, path: string, authority: string): Buffer {
  const raw = head.raw;
  const sp = head.spans;
  // Method (token), path (visible ASCII) and authority (canonical, ASCII): one byte per char.
  const line = `${head.method} ${path} HTTP/1.1\r\n`;
  const tail =
    `Host: ${authority}\r\n` +
    (head.chunked
      ? 'Transfer-Encoding: chunked\r\n'
      : head.contentLength !== undefined
        ? `Content-Length: ${head.contentLength}\r\n`
        : '') +
    '\r\n';
  let n = line.length + tail.length;
  for (let i = 0; i < sp.length; i += 5) if (forwarded(head, i)) n += sp[i + 3]! - sp[i]! + CRLF_BYTES;
  const out = Buffer.allocUnsafe(n);
  let o = out.write(line, 0, 'latin1');
  for (let i = 0; i < sp.length; i += 5) {
    if (!forwarded(head, i)) continue;
    o += raw.copy(out, o, sp[i], sp[i + 3]);
    out[o++] = 0x0d;
    out[o++] = 0x0a;
  }
  out.write(tail, o, 'latin1');
  return out;
}

/** Whether a response field goes on to the client: Host and Content-Length (unless chunked) besides the ordinary ones. */
function responseKeeps(rh: ResponseHead, i: number): boolean {
  const kind = rh.spans[i + 4];
  if (kind === FieldKind.ContentLength) return !rh.chunked && !rh.otherCoding;
  if (kind === FieldKind.Host) return !rh.connectionNamesFields || !rh.connection.has('host');
  return forwarded(rh, i);
}

/** A response head for the client, as one buffer: `HTTP/1.1`, the origin's status and reason, its fields but hop-by-hop ones, the framing. */
function responseHeadBytes(rh: ResponseHead, framing: string, close: boolean): Buffer {
  const raw = rh.raw;
  const sp = rh.spans;
  const tail = `${framing}${close ? 'Connection: close\r\n' : ''}\r\n`;
  // "HTTP/1.1 " + the status code + SP + the reason as the origin sent it (RFC 9112 §4: the SP even without a reason).
  let n = 9 + 3 + 1 + (rh.reasonEnd - rh.reasonStart) + CRLF_BYTES + tail.length;
  for (let i = 0; i < sp.length; i += 5) if (responseKeeps(rh, i)) n += sp[i + 3]! - sp[i]! + CRLF_BYTES;
  const out = Buffer.allocUnsafe(n);
  let o = out.write('HTTP/1.1 ', 0, 'latin1');
  o += raw.copy(out, o, 9, 12);
  out[o++] = 0x20;
  o += raw.copy(out, o, rh.reasonStart, rh.reasonEnd);
  out[o++] = 0x0d;
  out[o++] = 0x0a;
  for (let i = 0; i < sp.length; i += 5) {
    if (!responseKeeps(rh, i)) continue;
    o += raw.copy(out, o, sp[i], sp[i + 3]);
    out[o++] = 0x0d;
    out[o++] = 0x0a;
  }
  out.write(tail, o, 'latin1');
  return out;
}

function hostFor(value: string): string {
  return value.includes(':') ? `[${value}]` : value;
}

function forbiddenMessage(host: string, address: string, cls: AddressClass): string {
  const what = host === address ? host : `${host} resolves to ${address}, which`;
  return `${what} is a ${cls} address that workshops may not reach; an admin may allow its range in allowRanges`;
}

/** A `lookup` that can only ever answer the address that was checked. */
function pinnedLookup(address: string): net.LookupFunction {
  const family = net.isIPv6(address) ? 6 : 4;
  return ((_host: string, opts: { all?: boolean }, cb: (...args: unknown[]) => void) => {
    if (opts?.all) cb(null, [{ address, family }]);
    else cb(null, address, family);
  }) as unknown as net.LookupFunction;
}
