// The egress proxy's public vocabulary: what a decision says, the ask hook, the limits, and
// where an internal name leads. Shared by the listeners, the forwarders and the decision pipeline.
import type { AddressClass } from './addresses.js';
import type { CredentialBroker } from './broker.js';
import type { EgressProtocol } from './policy.js';
import type { Resolver } from './resolver.js';

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
  /** The credential broker (broker.ts): bound hosts' CONNECTs are served by it. */
  broker?: CredentialBroker;
}

/** An internal target as text (`unix:/path` or `host:port`): journal entries, pool keys, error messages. */
export function describeTarget(t: InternalTarget): string {
  return 'path' in t ? `unix:${t.path}` : `${t.host}:${t.port}`;
}
