// A tenant's credential policy (issue 22): what its maintainers bind for every workshop of the
// tenant (`credentials`, in atelier.yaml's form) and the hosts no project binding nor approved
// SECRET_REQUEST may bind (`forbid`). Checked when set, with the place named; applied when a
// workshop is created (a workshop keeps the bindings it was created with, as with atelier.yaml).
import { AtelierError, type CredentialPolicy, type CredentialPolicyView } from '../core/index.js';
import { queryRows, type Pool } from '../db/index.js';
import { atLeast, type Principal } from '../identity/index.js';
import { canonicalizeHost, parseBinding, type CredentialBinding, type CredentialEntry } from '../egress/index.js';

/** Is `host:port` allowed to every workshop (the platform's allowlist)? */
export type PlatformAllows = (host: string, port: number) => boolean;

interface Stored {
  credentials: CredentialEntry[];
  forbid: string[];
}

function invalid(field: string, message: string): AtelierError {
  return new AtelierError('INVALID_ARGUMENT', message, { field });
}

/** A `forbid` entry as the policy keeps it: a canonical host (any port). */
function forbiddenHost(entry: string, where: string): string {
  const h = canonicalizeHost(entry.trim());
  if (h.kind === 'refused' || entry.includes('*') || entry.includes(':'))
    throw invalid(where, `${where}: "${entry.slice(0, 100)}" is not a host name (write one host, no port and no wildcard)`);
  return h.value;
}

export class CredentialPolicies {
  constructor(
    private readonly pool: Pool,
    private readonly platformAllows: PlatformAllows,
  ) {}

  private async stored(tenantId: string): Promise<(Stored & { set_by: string; set_at: Date }) | undefined> {
    const [r] = await queryRows<{ policy: Stored; set_by: string; set_at: Date }>(
      this.pool,
      'SELECT policy, set_by, set_at FROM tenant_credential_policies WHERE tenant_id = $1',
      [tenantId],
    );
    return r ? { ...r.policy, set_by: r.set_by, set_at: r.set_at } : undefined;
  }

  async get(actor: Principal): Promise<CredentialPolicyView> {
    const s = await this.stored(actor.tenantId);
    return {
      tenant: actor.tenantName,
      credentials: s?.credentials ?? [],
      forbid: s?.forbid ?? [],
      setBy: s?.set_by ?? null,
      setAt: s?.set_at.toISOString() ?? null,
    };
  }

  /** Replaces the tenant's policy, every entry checked (maintainers and admins; never an agent). */
  async set(actor: Principal, policy: CredentialPolicy): Promise<CredentialPolicyView> {
    if (actor.kind !== 'user' || !atLeast(actor.role, 'maintainer'))
      throw new AtelierError('PERMISSION_DENIED', `only a maintainer or admin of ${actor.tenantName} sets its credential policy`);
    const forbid = [...new Set(policy.forbid.map((f, i) => forbiddenHost(f, `forbid.${i}`)))];
    const seen = new Set<string>();
    for (const [i, entry] of policy.credentials.entries()) {
      const where = `credentials.${i}`;
      let b: CredentialBinding;
      try {
        b = parseBinding(entry, where);
      } catch (err) {
        const message = (err as Error).message;
        throw invalid(/^credentials\.\d+\.\w+/.exec(message)?.[0] ?? where, message);
      }
      if (forbid.includes(b.host)) throw invalid(`${where}.host`, `${where}.host: ${b.host} is in this policy's forbid list`);
      if (seen.has(`${b.host}:${b.port}`)) throw invalid(`${where}.host`, `${where}.host: ${b.host}:${b.port} is bound twice`);
      seen.add(`${b.host}:${b.port}`);
      if (!this.platformAllows(b.host, b.port))
        throw invalid(
          `${where}.host`,
          `${where}.host: ${b.host}:${b.port} is not allowed to every workshop (the server's ATELIER_EGRESS_DEFAULTS): ask the server's admin to add it there, or bind it in the project's atelier.yaml, which allows its own hosts`,
        );
      const known = await queryRows(this.pool, 'SELECT 1 FROM secrets WHERE tenant_id = $1 AND name = $2', [actor.tenantId, b.secret]);
      if (known.length === 0)
        throw invalid(
          `${where}.value`,
          `${where}.value: the secret ${b.secret} does not exist in tenant ${actor.tenantName}: set it first (\`atelier secrets set ${b.secret}\`)`,
        );
    }
    const stored: Stored = { credentials: policy.credentials, forbid };
    await queryRows(
      this.pool,
      `INSERT INTO tenant_credential_policies (tenant_id, policy, set_by) VALUES ($1, $2, $3)
       ON CONFLICT (tenant_id) DO UPDATE SET policy = EXCLUDED.policy, set_by = EXCLUDED.set_by, set_at = now()`,
      [actor.tenantId, JSON.stringify(stored), actor.userName],
    );
    return this.get(actor);
  }

  /**
   * The bindings a new workshop of `tenantId` gets from the policy, and a check of the project's
   * own (`egress.credentials.N` of atelier.yaml) and of use grants against it: a host it forbids
   * or binds itself is refused, with the place named.
   */
  async forTenant(tenantId: string): Promise<{ credentials: CredentialEntry[]; check(b: CredentialBinding, where: string): void }> {
    const s = await this.stored(tenantId);
    const own = (s?.credentials ?? []).map((e, i) => parseBinding(e, `credentials.${i}`));
    const forbid = new Set(s?.forbid ?? []);
    return {
      credentials: s?.credentials ?? [],
      check(b, where) {
        if (forbid.has(b.host))
          throw invalid(
            where,
            `${where}: the tenant's credential policy forbids binding ${b.host} (\`atelier secrets policy show\`; its maintainers set it)`,
          );
        if (own.some((p) => p.host === b.host && p.port === b.port))
          throw invalid(where, `${where}: the tenant's credential policy binds ${b.host}:${b.port} already; that binding is used`);
      },
    };
  }
}
