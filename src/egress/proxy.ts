// The egress proxy: one instance serves every workshop, each on its own unix socket (bridged
// into the sandbox) or a server handed to it, each with its own live policy. This file holds the
// listeners and the dispatch: a connection's protocol is detected by its first byte (0x05 is
// SOCKS5, a letter is HTTP: CONNECT or absolute-form requests) and handed to its room:
// forward.ts (plain HTTP), tunnel.ts (CONNECT), socks5.ts; all of them decide through
// decide.ts, the one decision pipeline.
import { chmod, lstat, unlink } from 'node:fs/promises';
import net from 'node:net';
import { AtelierError } from '../core/index.js';
import { spliceRelay } from '../relay/index.js';
import { rawAnswer } from './answers.js';
import type { Listener, ProxyContext } from './context.js';
import { EgressDecider } from './decide.js';
import { PlainForwarder } from './forward.js';
import type { EgressPolicy } from './policy.js';
import { serveSocks } from './socks5.js';
import {
  DEFAULT_EGRESS_LIMITS,
  type EgressDecision,
  type EgressLimits,
  type EgressProxyOptions,
  type InternalService,
  type InternalTarget,
} from './types.js';

interface ClientConn {
  /** Waiting for a request head: the deadline timer's firing ends the connection. */
  armed: boolean;
  timer: NodeJS.Timeout | undefined;
  /** True while a kept-alive connection has not begun its next request: its deadline closes it without a 408. */
  quiet?: () => boolean;
}

/** The egress proxy: one instance for all workshops, each served on its own listener with its own live policy. */
export class EgressProxy {
  private readonly onDecision: NonNullable<EgressProxyOptions['onDecision']>;
  private readonly onError: NonNullable<EgressProxyOptions['onError']>;
  readonly limits: EgressLimits;
  private readonly listeners = new Map<string, Listener>();
  private readonly policies = new Map<string, EgressPolicy>();
  /** Per workshop: `host:port` of each internal service → where it leads. */
  private readonly internal = new Map<string, Map<string, InternalTarget>>();
  /** What the protocol handlers see of the proxy. */
  private readonly ctx: ProxyContext;
  private readonly forwarder: PlainForwarder;
  /** Per client connection: its one head-deadline timer and the requests it has in flight. */
  private readonly conns = new WeakMap<net.Socket, ClientConn>();

  constructor(options: EgressProxyOptions) {
    this.onDecision = options.onDecision ?? (() => {});
    this.onError = options.onError ?? (() => {});
    this.limits = { ...DEFAULT_EGRESS_LIMITS, ...options.limits };
    const decider = new EgressDecider({
      resolver: options.resolver,
      ask: options.ask,
      limits: this.limits,
      internalServices: (workshopId) => this.internal.get(workshopId),
      record: (workshopId, d) => this.record(workshopId, d),
      onError: (workshopId, err) => this.onError(workshopId, err),
    });
    this.ctx = {
      limits: this.limits,
      decider,
      broker: options.broker,
      track: (l, s) => this.track(l, s),
      record: (l, d) => this.record(l.workshopId, d),
      onError: (workshopId, err) => this.onError(workshopId, err),
      armHeaderDeadline: (s) => this.armHeaderDeadline(s),
      clearHeaderDeadline: (s) => this.clearHeaderDeadline(s),
      setQuiet: (s, quiet) => {
        const c = this.conns.get(s);
        if (c) c.quiet = quiet;
      },
    };
    this.forwarder = new PlainForwarder(this.ctx);
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

  private record(workshopId: string, d: EgressDecision): void {
    try {
      this.onDecision(workshopId, d);
    } catch (err) {
      this.onError(workshopId, err);
    }
  }

  // ---- connection and protocol detection -------------------------------------------------

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
        serveSocks(this.ctx, l, s);
      } else if ((b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a)) {
        this.forwarder.serve(l, s);
      } else {
        // SOCKS4, a TLS ClientHello (an https:// proxy URL), or noise.
        s.destroy();
      }
    });
  }
}
