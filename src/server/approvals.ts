import type { FastifyBaseLogger } from 'fastify';
import type { Pool } from '../db/index.js';
import {
  createApprovals as createApprovalsRoom,
  type Approvals,
  type SlackConfig,
  type TeamsConfig,
  type TeamsLinks,
} from '../approvals/index.js';
import { canonicalizeHost, createEgressPolicy, hostForAuthority, type CanonicalHost } from '../egress/index.js';
import { DEFAULT_GRANT_SECONDS, Publisher, SecretStore, type WorkshopService } from '../workshops/index.js';

// Wiring only: the approvals room (src/approvals/runtime.ts) owns the service, the gates and what
// each category does; this gives it the secret store, the egress allowlist and the publisher.

export interface ApprovalsRuntime extends Omit<Approvals, 'start'> {
  /** The tenants' secrets and their grants (SECRET_REQUEST). */
  secrets: SecretStore;
  /** Wires each category to its effect once the workshop service exists, then starts listening and sweeping. */
  start(workshops: WorkshopService): Promise<void>;
}

/** The allowlist entry an approval adds: the bare host for the default ports (80, 443), else host:port. */
function entryFor(host: CanonicalHost, port: number | undefined): string {
  const h = hostForAuthority(host);
  return port === undefined || port === 443 || port === 80 ? h : `${h}:${port}`;
}

export function createApprovals(opts: {
  ttl: string | undefined;
  selfConfirm: 'off' | 'sole-maintainer';
  slack: SlackConfig;
  teams: TeamsConfig;
  links: TeamsLinks;
  isLeader: () => boolean;
  pool: Pool;
  databaseUrl: string;
  logger: FastifyBaseLogger;
  nodeId: string;
  sealer: { encrypt(plain: string, context: string): string; decrypt(sealed: string, context: string): Buffer };
}): ApprovalsRuntime {
  const secrets = new SecretStore(opts.pool, { nodeId: opts.nodeId, sealer: opts.sealer, log: opts.logger });
  const approvals = createApprovalsRoom({
    ttl: opts.ttl,
    selfConfirm: opts.selfConfirm,
    isLeader: opts.isLeader,
    slack: opts.slack,
    teams: opts.teams,
    links: opts.links,
    pool: opts.pool,
    databaseUrl: opts.databaseUrl,
    log: opts.logger,
  });
  return {
    ...approvals,
    secrets,
    async start(workshops) {
      const publisher = new Publisher(workshops);
      await approvals.start({
        isLocal: (id) => workshops.isLocal(id),
        secrets: {
          existsFor: (id, name) => secrets.existsFor(id, name),
          grant: (approvalId, id, name, ttlSeconds, use) => secrets.grant(approvalId, id, name, ttlSeconds, use),
          checkUse: (id, name, use) => workshops.checkSecretUse(id, name, use),
          defaultTtlSeconds: DEFAULT_GRANT_SECONDS,
        },
        allowlist: {
          entryFor(host, port) {
            const h = canonicalizeHost(host);
            if (h.kind === 'refused') throw new Error(h.message);
            const entry = entryFor(h, port);
            // Throws when the policy would refuse the entry (the approval must not be filed).
            createEgressPolicy({ allow: [entry] });
            return { host: h.value, entry };
          },
          add: (id, entry, origin) => workshops.addApprovedEgress(id, entry, origin),
        },
        publisher: { prepare: (id, payload) => publisher.prepare(id, payload), apply: (a) => publisher.apply(a) },
      });
      secrets.start(
        (id) => workshops.localSandbox(id),
        (id, bindings) => workshops.setGrantedBindings(id, bindings),
      );
    },
    async close() {
      await secrets.close();
      await approvals.close();
    },
  };
}
