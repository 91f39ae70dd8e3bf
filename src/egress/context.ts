// What the protocol handlers (plain HTTP, CONNECT, SOCKS5) share with the listeners that
// hand them connections: the workshop's listener, the proxy's limits and decision pipeline,
// and the bookkeeping every socket goes through.
import type net from 'node:net';
import type { CredentialBroker } from './broker.js';
import type { EgressDecider } from './decide.js';
import type { EgressPolicy } from './policy.js';
import type { EgressDecision, EgressLimits } from './types.js';

/** One workshop's listener: its server, its live policy, every socket it opened or accepted. */
export interface Listener {
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

/** The proxy as its protocol handlers see it. */
export interface ProxyContext {
  readonly limits: EgressLimits;
  readonly decider: EgressDecider;
  /** Injects bound credentials (broker.ts); none: every CONNECT is a tunnel. */
  readonly broker?: CredentialBroker | undefined;
  /** Count a socket as the workshop's (close() destroys it) and keep its errors from going uncaught. */
  track(l: Listener, s: net.Socket): void;
  /** Journal a decision made outside the pipeline (a malformed request, a refused upgrade). */
  record(l: Listener, d: EgressDecision): void;
  /** Unexpected internal errors; the proxy keeps serving. */
  onError(workshopId: string, error: unknown): void;
  /** (Re)start a client connection's deadline for its next request head. */
  armHeaderDeadline(s: net.Socket): void;
  /** A head is complete: the deadline no longer applies. */
  clearHeaderDeadline(s: net.Socket): void;
  /** While `quiet()` is true, the head deadline closes the connection without a 408 (a kept-alive connection between requests). */
  setQuiet(s: net.Socket, quiet: () => boolean): void;
}

/**
 * An abort signal made only when something asks for it (the ask hook, a resolver): fired when
 * the client's socket closes. Requests decided from the cache never pay for one.
 */
export class LazySignal {
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
