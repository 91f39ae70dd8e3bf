import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isIP } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../core/index.js';
import { HOST_TRUST_BUNDLE } from '../sandbox/index.js';
import type { Pool } from '../db/index.js';
import {
  Authorities,
  CredentialBroker,
  EgressJournal,
  EgressProxy,
  LlmGateway,
  parseGatewayConfig,
  ResolveError,
  createDnsResolver,
  createEgressPolicy,
  createHostsResolver,
  type AskHook,
  type HostsEntry,
  type Resolver,
} from '../egress/index.js';
import { SpendLedger, type EgressWiring } from '../workshops/index.js';

/** The nameservers of /etc/resolv.conf: the proxy resolves with them, never through the workshop. */
function systemNameservers(): string[] {
  try {
    return readFileSync('/etc/resolv.conf', 'utf8')
      .split('\n')
      .map((l) => /^\s*nameserver\s+(\S+)/.exec(l)?.[1])
      .filter((x): x is string => Boolean(x));
  } catch {
    return [];
  }
}

/** A hosts-format file (`ADDRESS NAME...`), for air-gapped sites and tests. */
function readHostsFile(path: string): Map<string, HostsEntry> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`cannot read ATELIER_EGRESS_HOSTS ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const map = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    const [address, ...names] = line.replace(/#.*/, '').trim().split(/\s+/);
    if (!address) continue;
    for (const n of names) map.set(n.toLowerCase(), [...(map.get(n.toLowerCase()) ?? []), address]);
  }
  return map;
}

/** Names from the hosts file first, then DNS. */
function chain(first: Resolver | undefined, then: Resolver): Resolver {
  if (!first) return then;
  return {
    async resolve(name, signal) {
      try {
        return await first.resolve(name, signal);
      } catch {
        return then.resolve(name, signal);
      }
    },
  };
}

export interface EgressRuntime {
  wiring: EgressWiring;
  close(): Promise<void>;
}

/** The host's trust store (Debian's bundle), then the admin's own CAs: what brokered upstreams are verified against. */
function upstreamAuthorities(extra: string | undefined): string[] {
  const out: string[] = [];
  for (const [file, what] of [
    [HOST_TRUST_BUNDLE, 'the host trust store'],
    [extra, 'ATELIER_EGRESS_UPSTREAM_CA'],
  ] as const) {
    if (!file) continue;
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      if (file === extra) throw new Error(`cannot read ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
      continue;
    }
    const certs = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
    if (file === extra && certs.length === 0) throw new Error(`ATELIER_EGRESS_UPSTREAM_CA ${file} holds no PEM certificate`);
    out.push(...certs);
  }
  return out;
}

/** The LLM gateway of ATELIER_LLM_GATEWAY (undefined: none, or a file without providers). */
function llmGateway(config: Config, pool: Pool, logger: FastifyBaseLogger): LlmGateway | undefined {
  if (!config.llmGateway) return undefined;
  let text: string;
  try {
    text = readFileSync(config.llmGateway, 'utf8');
  } catch (err) {
    throw new Error(
      `cannot read ATELIER_LLM_GATEWAY ${config.llmGateway}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  const parsed = parseGatewayConfig(text, `ATELIER_LLM_GATEWAY ${config.llmGateway}`);
  if (parsed.providers.length === 0) return undefined;
  const ledger = new SpendLedger(pool);
  logger.info({ providers: parsed.providers.map((p) => `${p.kind} ${p.baseUrl} (key: secret ${p.secret})`) }, 'LLM gateway');
  return new LlmGateway({
    ...parsed,
    budget: (id) => ledger.budgetOf(id),
    record: async (id, r) => void (await ledger.record(id, r)),
    onError: (id, err) => logger.error({ workshop: id, err: String(err) }, 'LLM gateway: a request could not be recorded'),
  });
}

/** One proxy for all of this server's workshops, each with its own listener (in its sandbox) and policy. */
export async function startEgress(
  config: Config,
  pool: Pool,
  logger: FastifyBaseLogger,
  opts: { ask?: AskHook | undefined; dataDir: string; secretValue: (workshopId: string, name: string) => Promise<string | undefined> },
): Promise<EgressRuntime> {
  const ask = opts.ask;
  // The platform's part of every policy is checked now, not at the first workshop it would fail.
  try {
    createEgressPolicy({ allow: config.egressDefaults, allowRanges: config.egressAllowRanges });
  } catch (err) {
    throw new Error(`ATELIER_EGRESS_DEFAULTS / ATELIER_EGRESS_ALLOW_RANGES: ${(err as Error).message}`);
  }
  const badServer = config.egressDns?.find((s) => isIP(s) === 0);
  if (badServer !== undefined) throw new Error(`ATELIER_EGRESS_DNS must list IP addresses; "${badServer}" is not one`);
  const servers = config.egressDns ?? systemNameservers();
  if (servers.length === 0)
    logger.warn(
      'egress: no nameserver in /etc/resolv.conf and no ATELIER_EGRESS_DNS: workshops can reach only names of ATELIER_EGRESS_HOSTS',
    );
  const hosts = config.egressHosts ? createHostsResolver(readHostsFile(config.egressHosts)) : undefined;
  const dns = servers.length > 0 ? createDnsResolver({ servers }) : undefined;
  const resolver: Resolver = dns
    ? chain(hosts, dns)
    : (hosts ?? {
        resolve: async (name) => {
          throw new ResolveError('DNS_FAILED', `no nameserver is configured to resolve ${name}: set ATELIER_EGRESS_DNS`);
        },
      });
  const journal = new EgressJournal(pool, logger);
  const gateway = llmGateway(config, pool, logger);
  const broker = new CredentialBroker({
    authorities: new Authorities(join(opts.dataDir, 'egress-ca')),
    secretValue: opts.secretValue,
    upstreamCa: upstreamAuthorities(config.egressUpstreamCa),
    hook: gateway,
  });
  const proxy = new EgressProxy({
    broker,
    resolver,
    onDecision: (workshopId, d) => journal.record(workshopId, d),
    // Unknown hosts are asked about (approvals): the request is held for askHoldSeconds.
    ...(ask ? { ask } : {}),
    onError: (workshopId, err) => logger.error({ workshop: workshopId, err: String(err) }, 'egress proxy internal error'),
  });
  return {
    wiring: {
      proxy,
      journal,
      broker,
      // The providers' hosts join every workshop's allowlist, as the platform's.
      defaults: [...new Set([...config.egressDefaults, ...(gateway?.allowEntries() ?? [])])],
      allowRanges: config.egressAllowRanges,
      ...(gateway
        ? { llmGateway: { env: gateway.workshopEnv(), bindingFor: (host: string, port: number) => gateway.bindingFor(host, port) } }
        : {}),
    },
    async close() {
      await proxy.closeAll();
      broker.close();
      await journal.close();
    },
  };
}
