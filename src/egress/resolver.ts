// Pluggable name resolution for the proxy. A resolver answers once per request with every
// address it knows; the proxy checks them all and dials one of exactly those addresses, so
// no second lookup (by the OS, by `net.connect`) can rebind the name in between.
import { Resolver as DnsResolver } from 'node:dns/promises';
import { parseIp } from './ip.js';

export type ResolveErrorCode = 'DNS_NOT_FOUND' | 'DNS_TIMEOUT' | 'DNS_FAILED';

export class ResolveError extends Error {
  readonly code: ResolveErrorCode;
  constructor(code: ResolveErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ResolveError';
    this.code = code;
  }
}

export interface Resolver {
  /**
   * Every address (IPv4 dotted-quad or IPv6 text) for a canonical name. Throws
   * `ResolveError` when there is none; should stop when `signal` aborts.
   */
  resolve(name: string, signal?: AbortSignal): Promise<string[]>;
}

export type HostsEntry = string | readonly string[] | ((name: string) => string[] | Promise<string[]>);

/**
 * A fixed map from canonical names to addresses (tests, and `*.atelier.internal` names the
 * server owns). A function value is called for each lookup (a test's rebinding resolver).
 */
export function createHostsResolver(hosts: Record<string, HostsEntry> | Map<string, HostsEntry>): Resolver {
  const map = hosts instanceof Map ? hosts : new Map(Object.entries(hosts));
  return {
    async resolve(name) {
      const entry = map.get(name);
      if (entry === undefined) throw new ResolveError('DNS_NOT_FOUND', `${name} is not in the hosts map`);
      const answers = typeof entry === 'function' ? await entry(name) : typeof entry === 'string' ? [entry] : [...entry];
      if (answers.length === 0) throw new ResolveError('DNS_NOT_FOUND', `${name} has no address`);
      return answers;
    },
  };
}

export interface DnsResolverOptions {
  /** DNS servers as `ip`, `ip:port` or `[ipv6]:port` (node:dns `setServers` syntax). */
  servers: readonly string[];
  /** Whole-lookup deadline (A and AAAA together), default 5000 ms. */
  timeoutMs?: number;
}

/** A resolver that asks the given DNS servers for A and AAAA records (never the OS resolver). */
export function createDnsResolver(options: DnsResolverOptions): Resolver {
  const timeoutMs = options.timeoutMs ?? 5000;
  const servers = [...options.servers];
  return {
    async resolve(name, signal) {
      // One c-ares channel per lookup so that `cancel()` on timeout affects only this lookup.
      const r = new DnsResolver({ timeout: Math.max(50, Math.floor(timeoutMs / 2)), tries: 2 });
      r.setServers(servers);
      let timer: NodeJS.Timeout | undefined;
      const onAbort = () => r.cancel();
      signal?.addEventListener('abort', onAbort, { once: true });
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          r.cancel();
          reject(new ResolveError('DNS_TIMEOUT', `no answer for ${name} from ${servers.join(', ')} within ${timeoutMs} ms`));
        }, timeoutMs);
      });
      const ask = async (rrtype: 'A' | 'AAAA'): Promise<string[] | Error> => {
        try {
          return rrtype === 'A' ? await r.resolve4(name) : await r.resolve6(name);
        } catch (err) {
          return err as Error;
        }
      };
      try {
        const [a, aaaa] = await Promise.race([Promise.all([ask('A'), ask('AAAA')]), deadline]);
        const found = [...(Array.isArray(a) ? a : []), ...(Array.isArray(aaaa) ? aaaa : [])];
        if (found.length > 0) return found;
        const errs = [a, aaaa].filter((x): x is Error => x instanceof Error);
        const codes = errs.map((e) => (e as NodeJS.ErrnoException).code);
        if (codes.some((c) => c === 'ETIMEOUT' || c === 'ECANCELLED')) {
          throw new ResolveError('DNS_TIMEOUT', `no answer for ${name} within ${timeoutMs} ms`, { cause: errs[0] });
        }
        if (errs.length === 0 || codes.every((c) => c === 'ENOTFOUND' || c === 'ENODATA')) {
          throw new ResolveError('DNS_NOT_FOUND', `${name} has no A or AAAA record`);
        }
        throw new ResolveError('DNS_FAILED', `resolving ${name} failed: ${codes.join(', ')}`, { cause: errs[0] });
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      }
    },
  };
}

/** Parse a resolver's answers; an answer that is not an IP address is a resolver fault. */
export function parseAnswers(name: string, answers: readonly string[]): Uint8Array[] {
  return answers.map((a) => {
    const b = parseIp(a);
    if (b === null)
      throw new ResolveError('DNS_FAILED', `the resolver answered ${JSON.stringify(a)} for ${name}, which is not an IP address`);
    return b;
  });
}
