import { createHash } from 'node:crypto';
import { AtelierError, hashToken, newId } from '../core/index.js';
import { asDatabaseError, queryRows, withTransaction, type Pool } from '../db/index.js';
import { membershipsFromGroups, type ExternalIssuerConfig } from './external.js';
import type { Principal } from './policy.js';
import { isRole, weaker, type Role } from './roles.js';
import { looksLikeJwt, type JwtVerifier } from './verify.js';

/** How JWT access tokens are checked: the embedded issuer's, or an external issuer's. */
export type TokenAuthority =
  | { kind: 'embedded'; issuer: string; verifier: JwtVerifier }
  | { kind: 'external'; issuer: string; verifier: JwtVerifier; config: ExternalIssuerConfig };

interface TokenRow {
  id: string;
  user_id: string;
  cap: string;
  workshop_id: string | null;
  expires_at: Date | null;
  expired: boolean;
  revoked: boolean;
  tenant_id: string;
  tenant_name: string;
  name: string;
  disabled: boolean;
  member_role: string | null;
  stale: boolean;
}

interface MembershipRow {
  tenant_id: string;
  tenant_name: string;
  role: string;
}

/**
 * Turns an `Authorization: Bearer …` header into a Principal. Two kinds of bearer:
 * `atl_…` API tokens (hashed in the database: scoped, expiring, revocable, possibly bound to one
 * workshop) and JWT access tokens from the configured OIDC issuer (verified with jose).
 */
export class Authenticator {
  private authority: TokenAuthority | undefined;

  constructor(private readonly pool: Pool) {}

  setAuthority(authority: TokenAuthority): void {
    this.authority = authority;
  }

  async authenticate(authorization: string | undefined, tenantHeader: string | undefined): Promise<Principal> {
    const m = authorization ? /^Bearer\s+(\S+)$/i.exec(authorization) : null;
    if (!m)
      throw new AtelierError(
        'UNAUTHENTICATED',
        'missing bearer token: log in with `atelier auth login`, or set ATELIER_TOKEN to an API token (`atelier tokens create`)',
      );
    const bearer = m[1]!;
    if (looksLikeJwt(bearer)) return this.fromJwt(bearer, tenantHeader);
    return this.fromApiToken(bearer, tenantHeader);
  }

  private async fromApiToken(token: string, tenantHeader: string | undefined): Promise<Principal> {
    const [row] = await queryRows<TokenRow>(
      this.pool,
      `SELECT t.id, t.user_id, t.role AS cap, t.workshop_id, t.expires_at,
              (t.expires_at IS NOT NULL AND t.expires_at <= now()) AS expired, t.revoked_at IS NOT NULL AS revoked,
              t.tenant_id, tn.name AS tenant_name, u.name, u.disabled_at IS NOT NULL AS disabled, m.role AS member_role,
              (t.last_used_at IS NULL OR t.last_used_at < now() - interval '60 seconds') AS stale
         FROM api_tokens t
         JOIN users u ON u.id = t.user_id
         JOIN tenants tn ON tn.id = t.tenant_id
         LEFT JOIN memberships m ON m.user_id = t.user_id AND m.tenant_id = t.tenant_id
        WHERE t.token_hash = $1`,
      [hashToken(token)],
    );
    if (!row)
      throw new AtelierError(
        'UNAUTHENTICATED',
        'this token is not valid here (unknown, or for another server): check `atelier context current`',
      );
    if (row.revoked)
      throw new AtelierError('TOKEN_REVOKED', `token ${row.id} was revoked: create a new one with \`atelier tokens create\``);
    if (row.expired)
      throw new AtelierError(
        'TOKEN_EXPIRED',
        `token ${row.id} expired at ${row.expires_at?.toISOString()}: create a new one with \`atelier tokens create\``,
      );
    if (row.disabled) throw new AtelierError('USER_DISABLED', `user ${row.name} is disabled: ask an admin`);
    if (!row.member_role || !isRole(row.member_role) || !isRole(row.cap))
      throw new AtelierError('UNAUTHENTICATED', `user ${row.name} is no longer a member of tenant ${row.tenant_name}: ask an admin`);
    if (tenantHeader !== undefined && tenantHeader !== row.tenant_name)
      throw new AtelierError('PERMISSION_DENIED', `this token is for tenant ${row.tenant_name}, not ${tenantHeader}`);
    if (row.stale) {
      // Last use, to a minute: no write on every request.
      this.pool.query('UPDATE api_tokens SET last_used_at = now() WHERE id = $1', [row.id]).catch(() => undefined);
    }
    return {
      kind: row.workshop_id ? 'agent' : 'user',
      userId: row.user_id,
      userName: row.name,
      tenantId: row.tenant_id,
      tenantName: row.tenant_name,
      role: weaker(row.cap, row.member_role),
      workshopId: row.workshop_id,
      tokenId: row.id,
      via: 'api-token',
      expiresAt: row.expires_at?.toISOString() ?? null,
    };
  }

  private async fromJwt(token: string, tenantHeader: string | undefined): Promise<Principal> {
    const authority = this.authority;
    if (!authority) throw new AtelierError('UNAVAILABLE', 'the identity provider is still starting: try again in a second');
    const { claims, expiresAt } = await authority.verifier.verify(token);
    const sub = String(claims.sub);
    let user: { id: string; name: string; disabled: boolean } | undefined;
    if (authority.kind === 'embedded') {
      // The grant behind the token must still exist: `atelier auth logout` (revocation) and a
      // disabled user take effect at once, not when the access token expires.
      [user] = await queryRows<{ id: string; name: string; disabled: boolean }>(
        this.pool,
        `SELECT u.id, u.name, u.disabled_at IS NOT NULL AS disabled FROM users u WHERE u.id = $1 AND u.issuer = 'local'`,
        [sub],
      );
      if (!user) throw new AtelierError('UNAUTHENTICATED', 'the user of this token no longer exists: log in again');
      // Every access token of the embedded issuer names its grant; one that does not was not made by it.
      if (typeof claims.gid !== 'string') throw new AtelierError('TOKEN_INVALID', 'this access token names no grant: log in again');
      {
        const live = await queryRows(
          this.pool,
          `SELECT 1 FROM oidc_payloads WHERE type = 'Grant' AND id = $1 AND (expires_at IS NULL OR expires_at > now())`,
          [claims.gid],
        );
        if (live.length === 0) throw new AtelierError('TOKEN_REVOKED', 'this session was logged out: run `atelier auth login`');
      }
    } else {
      user = await this.externalUser(authority, sub, claims);
    }
    if (user.disabled) throw new AtelierError('USER_DISABLED', `user ${user.name} is disabled: ask an admin`);
    const memberships = await queryRows<MembershipRow>(
      this.pool,
      `SELECT m.tenant_id, tn.name AS tenant_name, m.role FROM memberships m JOIN tenants tn ON tn.id = m.tenant_id
        WHERE m.user_id = $1 ORDER BY m.created_at, tn.name`,
      [user.id],
    );
    const chosen = tenantHeader === undefined ? memberships[0] : memberships.find((x) => x.tenant_name === tenantHeader);
    if (!chosen || !isRole(chosen.role)) {
      if (memberships.length === 0)
        throw new AtelierError(
          'PERMISSION_DENIED',
          authority.kind === 'external'
            ? `user ${user.name} belongs to no Atelier tenant: none of their groups (claim "${authority.config.groupsClaim}") is mapped in the server's identity config`
            : `user ${user.name} belongs to no tenant: ask an admin`,
        );
      throw new AtelierError(
        'PERMISSION_DENIED',
        `you are not a member of tenant ${tenantHeader}: yours are ${memberships.map((x) => x.tenant_name).join(', ')}`,
      );
    }
    return {
      kind: 'user',
      userId: user.id,
      userName: user.name,
      tenantId: chosen.tenant_id,
      tenantName: chosen.tenant_name,
      role: chosen.role,
      workshopId: null,
      tokenId: null,
      via: 'oidc',
      expiresAt,
    };
  }

  /** A user of the external issuer: created on first sight; tenants and roles follow their groups at every request. */
  private async externalUser(
    authority: Extract<TokenAuthority, { kind: 'external' }>,
    sub: string,
    claims: Record<string, unknown>,
  ): Promise<{ id: string; name: string; disabled: boolean }> {
    const cfg = authority.config;
    // A name the issuer gives is made safe for ours (letters, digits, . _ @ -).
    const wanted =
      String(claims[cfg.usernameClaim] ?? claims.email ?? sub)
        .replace(/[^a-zA-Z0-9._@-]+/g, '-')
        .replace(/^[^a-zA-Z0-9]+/, '')
        .slice(0, 60) || 'user';
    const email = typeof claims.email === 'string' ? claims.email : null;
    let [user] = await queryRows<{ id: string; name: string; disabled: boolean }>(
      this.pool,
      'SELECT id, name, disabled_at IS NOT NULL AS disabled FROM users WHERE issuer = $1 AND subject = $2',
      [authority.issuer, sub],
    );
    // Names are unique server-wide: when the issuer's name is taken (a local account, another
    // issuer's user), a short hash of the subject tells them apart. The same user arriving twice
    // at once is one row (ON CONFLICT on issuer + subject).
    const suffix = createHash('sha256').update(`${authority.issuer}\n${sub}`).digest('hex').slice(0, 8);
    for (const name of [wanted, `${wanted}-${suffix}`]) {
      if (user) break;
      try {
        [user] = await queryRows<{ id: string; name: string; disabled: boolean }>(
          this.pool,
          `INSERT INTO users (id, name, issuer, subject, email) VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (issuer, subject) WHERE subject IS NOT NULL DO UPDATE SET email = EXCLUDED.email
           RETURNING id, name, disabled_at IS NOT NULL AS disabled`,
          [newId('u'), name, authority.issuer, sub, email],
        );
      } catch (err) {
        if ((err as { code?: string }).code !== '23505') throw err;
      }
    }
    if (!user) throw new AtelierError('CONFLICT', `the user name ${wanted} is taken on this server: ask an admin`);
    const desired = membershipsFromGroups(cfg, claims[cfg.groupsClaim]);
    await this.syncGroupMemberships(user!.id, desired);
    return user!;
  }

  private async syncGroupMemberships(userId: string, desired: Map<string, Role>): Promise<void> {
    const current = await queryRows<{ tenant_name: string; role: string }>(
      this.pool,
      `SELECT tn.name AS tenant_name, m.role FROM memberships m JOIN tenants tn ON tn.id = m.tenant_id WHERE m.user_id = $1 AND m.source = 'groups'`,
      [userId],
    );
    const same = current.length === desired.size && current.every((c) => desired.get(c.tenant_name) === c.role);
    if (same) return;
    try {
      await withTransaction(this.pool, async (c) => {
        await c.query(`DELETE FROM memberships WHERE user_id = $1 AND source = 'groups'`, [userId]);
        for (const [tenant, role] of desired) {
          await c.query('INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING', [newId('tn'), tenant]);
          await c.query(
            `INSERT INTO memberships (user_id, tenant_id, role, source) SELECT $1, id, $3, 'groups' FROM tenants WHERE name = $2
             ON CONFLICT (user_id, tenant_id) DO NOTHING`,
            [userId, tenant, role],
          );
        }
      });
    } catch (err) {
      throw asDatabaseError(err);
    }
  }
}
