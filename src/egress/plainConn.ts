// The state of the plain-HTTP forwarder (forward.ts): a client connection, the exchange (one
// request and its answer) it serves, its idle upstreams, and the bounds on them.
import type net from 'node:net';
import type { Listener } from './context.js';
import type { KeptDecisions, Verdict } from './decide.js';
import type { BoundRoute, InjectedField } from './forward.js';
import type { PlainReader } from './dial.js';
import { BodyFramer, type RequestHead } from './http1.js';

/** One client connection on the plain-HTTP path (its kept decisions: decide.ts). */
export interface PlainConn extends KeptDecisions {
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
  /** No more requests are read (answered and closing, or handed over to a tunnel). */
  done: boolean;
  /** The client half-closed. */
  ended: boolean;
  /** Every request goes to this route (the broker's connections). */
  bound?: BoundRoute | undefined;
}

/** One request and its answer. */
export interface PlainExchange {
  head: RequestHead;
  path: string;
  port: number;
  target: string;
  verdict: Verdict | undefined;
  /** The field the proxy sets on this request (a bound connection's credential). */
  inject?: InjectedField | undefined;
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
export interface PlainUpstream {
  sock: net.Socket;
  reader: PlainReader;
  key: string;
  address: string;
  ex: PlainExchange | undefined;
  listening?: boolean;
}

export const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);
/** A response head from an origin larger than this is refused (502). */
export const RESPONSE_HEAD_BYTES = 64 * 1024;
/** Idle upstreams a client connection keeps (distinct hosts it alternates between). */
export const MAX_POOLED_PER_CLIENT = 4;
/**
 * Idle upstreams all of a workshop's connections keep together: beyond, an answered request's
 * upstream is closed, so that a workshop's idle connections cannot use up the server's descriptors.
 */
export const MAX_POOLED_PER_WORKSHOP = 256;

/** A client connection as it starts: nothing read, nothing kept. */
export function newPlainConn(l: Listener, s: net.Socket): PlainConn {
  return {
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
}

/** The exchange for a request head whose target parsed: its request body framed as the head says. */
export function newExchange(
  head: RequestHead,
  parsed: { path: string; port: number },
  target: string,
  clientEnded: boolean,
  maxHeaderBytes: number,
): PlainExchange {
  return {
    head,
    path: parsed.path,
    port: parsed.port,
    target,
    up: undefined,
    reqBody: head.chunked
      ? new BodyFramer('chunked', 0, true, 400, maxHeaderBytes)
      : head.contentLength
        ? new BodyFramer('length', head.contentLength, true, 400, 0)
        : undefined,
    res: undefined,
    rbuf: undefined,
    rscanned: 0,
    headSent: false,
    close: head.minor === 0 || head.connection.has('close') || clientEnded,
    retried: false,
    reused: false,
    bytesIn: 0,
    verdict: undefined,
  };
}
