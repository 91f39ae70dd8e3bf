// Egress policy: which canonical hosts and ports a workshop may reach. Loaded once from
// `{ allow, deny, allowRanges }` (refusing dangerous entries at load), then consulted for
// every request. Immutable: the proxy swaps a whole policy to change it.
import { AtelierError } from '../core/index.js';
import { AddressRanges } from './addresses.js';
import { type CanonicalHost, canonicalizeHost } from './canonical.js';

export interface EgressPolicyConfig {
  /** `host`, `host:port`, `*.suffix`, `*.suffix:port`, IP literals (`10.1.2.3`, `[::1]:8080`). */
  allow: readonly string[];
  /** Same forms; a deny entry without a port denies every port. Deny wins over allow. */
  deny?: readonly string[];
  /** CIDR ranges of otherwise-forbidden addresses (loopback, RFC 1918…) the admin allows. */
  allowRanges?: readonly string[];
  /** How long an unknown host is held while the ask hook waits for a human (0: answer at once). */
  askHoldSeconds?: number;
}

/** How the client asked: the mode decides the default port. */
export type EgressProtocol = 'connect' | 'http' | 'socks5';

/**
 * Default ports: a CONNECT tunnel (and a SOCKS5 tunnel, which is the same thing) is for TLS
 * on 443; plain HTTP is 80. Any other port must be named by an entry.
 */
export function defaultPort(protocol: EgressProtocol): number {
  return protocol === 'http' ? 80 : 443;
}

interface Entry {
  text: string;
  /** Canonical host, or the suffix (without `*.`) of a wildcard. */
  host: string;
  wildcard: boolean;
  port?: number;
}

export type PolicyOutcome =
  | { outcome: 'allow'; entry: string }
  | { outcome: 'deny'; reason: 'DENY_LISTED'; entry: string }
  | { outcome: 'deny'; reason: 'PORT_NOT_ALLOWED'; entry: string }
  | { outcome: 'unknown' };

// A small built-in list of public suffixes under which a wildcard would cover unrelated
// owners (`*.co.uk`, `*.github.io`). It is not the full Public Suffix List: every
// single-label suffix (`*.com`, `*.dev`, `*.internal`) is refused by rule, and this list adds
// the common multi-label registries and shared-hosting platforms.
const PUBLIC_SUFFIXES = new Set([
  ...['co', 'org', 'ac', 'gov', 'net', 'ltd', 'plc', 'me', 'sch', 'nhs'].map((s) => `${s}.uk`),
  ...['com', 'net', 'org', 'edu', 'gov', 'asn', 'id'].map((s) => `${s}.au`),
  ...['co', 'ne', 'or', 'ac', 'go', 'ad', 'ed', 'gr', 'lg'].map((s) => `${s}.jp`),
  ...['co', 'net', 'org', 'ac', 'govt', 'geek', 'gen', 'school'].map((s) => `${s}.nz`),
  ...['com', 'net', 'org', 'gov', 'edu'].map((s) => `${s}.br`),
  ...['com', 'net', 'org', 'gov', 'edu', 'ac'].map((s) => `${s}.cn`),
  ...['co', 'net', 'org', 'gov', 'ac', 'firm', 'gen', 'ind'].map((s) => `${s}.in`),
  ...['co', 'org', 'web', 'ac'].map((s) => `${s}.za`),
  ...['com', 'org', 'net', 'edu', 'gob'].map((s) => `${s}.mx`),
  ...['com', 'net', 'org'].map((s) => `${s}.tw`),
  ...['com', 'org', 'net', 'edu'].map((s) => `${s}.sg`),
  ...['co', 'or', 'ac', 'go'].map((s) => `${s}.kr`),
  ...['com', 'org', 'net'].map((s) => `${s}.tr`),
  ...['com', 'net', 'org', 'edu', 'gov'].map((s) => `${s}.hk`),
  'co.il',
  'org.il',
  'ac.il',
  'com.ar',
  'com.es',
  'com.pl',
  'com.ua',
  'co.id',
  'com.my',
  'com.ph',
  'com.vn',
  'com.co',
  'com.pe',
  'com.sa',
  'com.eg',
  'com.ng',
  'co.ke',
  'eu.org',
  // Shared hosting: each subdomain belongs to a different customer.
  'github.io',
  'githubusercontent.com',
  'gitlab.io',
  'bitbucket.io',
  'herokuapp.com',
  'appspot.com',
  'blogspot.com',
  'cloudfront.net',
  'amazonaws.com',
  's3.amazonaws.com',
  'elasticbeanstalk.com',
  'azurewebsites.net',
  'cloudapp.net',
  'azurestaticapps.net',
  'web.app',
  'firebaseapp.com',
  'netlify.app',
  'vercel.app',
  'now.sh',
  'pages.dev',
  'workers.dev',
  'fly.dev',
  'onrender.com',
  'glitch.me',
  'repl.co',
  'ngrok.io',
  'ngrok-free.app',
  'trycloudflare.com',
  'readthedocs.io',
  'surge.sh',
  'deno.dev',
]);

function invalid(field: string, text: string, why: string): AtelierError {
  return new AtelierError('INVALID_ARGUMENT', `egress.${field}: ${JSON.stringify(text)} ${why}`, { field: `egress.${field}`, entry: text });
}

function parseEntry(field: 'allow' | 'deny', text: string): Entry {
  const t = text.trim();
  let hostPart = t;
  let port: number | undefined;
  // Split a port off: `[v6]:port`, `host:port`; a bare IPv6 literal must be bracketed to take a port.
  const m = /^(\[[^\]]*\]|[^:[\]]*):([^:]*)$/.exec(t);
  if (m) {
    hostPart = m[1]!;
    if (!/^[1-9][0-9]{0,4}$/.test(m[2]!) || Number(m[2]) > 65535) throw invalid(field, text, 'has a port that is not 1–65535');
    port = Number(m[2]);
  }
  let wildcard = false;
  if (hostPart.startsWith('*.')) {
    wildcard = true;
    hostPart = hostPart.slice(2);
  }
  if (hostPart.includes('*')) {
    throw invalid(field, text, "is not a host: wildcards are only allowed as a leading '*.' (`*.example.com`), never '*' alone");
  }
  const host = canonicalizeHost(hostPart);
  if (host.kind === 'refused') throw invalid(field, text, `is not a valid host (${host.reason}: ${host.message})`);
  if (wildcard) {
    if (host.kind !== 'name') throw invalid(field, text, 'puts a wildcard on an IP address');
    // Deny entries may be as broad as the admin likes; only allow entries are limited.
    if (field === 'allow' && (!host.value.includes('.') || PUBLIC_SUFFIXES.has(host.value))) {
      throw invalid(field, text, `covers a whole public suffix (${host.value}): name the domains instead`);
    }
  }
  const entry: Entry = { text: t, host: host.value, wildcard };
  if (port !== undefined) entry.port = port;
  return entry;
}

/** Host part matches: exact for plain entries, strict subdomain (dot boundary) for `*.suffix`. */
function hostMatches(e: Entry, host: string): boolean {
  return e.wildcard ? host.endsWith(`.${e.host}`) : host === e.host;
}

export class EgressPolicy {
  readonly allowRanges: AddressRanges;
  readonly askHoldMs: number;
  readonly config: EgressPolicyConfig;
  private readonly allow: Entry[];
  private readonly deny: Entry[];

  /** Throws `AtelierError('INVALID_ARGUMENT')` naming the first bad entry. */
  constructor(config: EgressPolicyConfig) {
    this.config = config;
    this.allow = config.allow.map((t) => parseEntry('allow', t));
    this.deny = (config.deny ?? []).map((t) => parseEntry('deny', t));
    try {
      this.allowRanges = new AddressRanges(config.allowRanges ?? []);
    } catch (err) {
      throw new AtelierError('INVALID_ARGUMENT', `egress.${(err as Error).message}`, { field: 'egress.allowRanges' });
    }
    const hold = config.askHoldSeconds ?? 30;
    if (!Number.isFinite(hold) || hold < 0 || hold > 3600) {
      throw new AtelierError('INVALID_ARGUMENT', 'egress.askHoldSeconds must be between 0 and 3600', { field: 'egress.askHoldSeconds' });
    }
    this.askHoldMs = hold * 1000;
  }

  /** What the lists say about a canonical host and port, before any address is known. */
  evaluate(host: CanonicalHost, port: number, protocol: EgressProtocol): PolicyOutcome {
    // Deny first, on any port unless the entry names one: deny wins over every allow.
    for (const e of this.deny) {
      if (hostMatches(e, host.value) && (e.port === undefined || e.port === port))
        return { outcome: 'deny', reason: 'DENY_LISTED', entry: e.text };
    }
    let portMiss: Entry | undefined;
    for (const e of this.allow) {
      if (!hostMatches(e, host.value)) continue;
      if (e.port === undefined ? port === defaultPort(protocol) : e.port === port) return { outcome: 'allow', entry: e.text };
      portMiss ??= e;
    }
    // A host the policy names, on a port it does not: a refusal, not a question for a human.
    if (portMiss) return { outcome: 'deny', reason: 'PORT_NOT_ALLOWED', entry: portMiss.text };
    return { outcome: 'unknown' };
  }
}

/** Load a policy; throws `AtelierError('INVALID_ARGUMENT')` for `*`, public-suffix wildcards, bad hosts or ports. */
export function createEgressPolicy(config: EgressPolicyConfig): EgressPolicy {
  return new EgressPolicy(config);
}
