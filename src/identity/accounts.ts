import {
  AddUserRequest,
  AtelierError,
  CreateTokenRequest,
  TENANT_NAME,
  USER_NAME,
  hashToken,
  newApiToken,
  newId,
  type SetUserEmailRequest,
} from '../core/index.js';
import { asDatabaseError, queryRows, withTransaction, type Pool } from '../db/index.js';
import { generatePassword, hashPassword } from './passwords.js';
import { PLATFORM_TENANT_ID, type Principal } from './policy.js';
import { atLeast, isRole, weaker, type Role } from './roles.js';

// The request bodies are the wire contract's (core), re-exported for this room's callers.
export { AddUserRequest, CreateTokenRequest, TENANT_NAME, USER_NAME };

const DEFAULT_TOKEN_TTL_SECONDS = 30 * 86400;

export interface UserView {
  id: string;
  name: string;
  issuer: string;
  email: string | null;
  disabled: boolean;
  mustChangePassword: boolean;
  memberships: { tenant: string; role: Role }[];
  createdAt: string;
}

export interface TokenView {
  id: string;
  name: string;
  user: string;
  role: Role;
  tenant: string;
  workshopId: string | null;
  expiresAt: string | null;
  createdAt: string;
  lastUsedAt: string | null;
  revoked: boolean;
}

interface UserRow {
  id: string;
  name: string;
  issuer: string;
  email: string | null;
  disabled_at: Date | null;
  must_change_password: boolean;
  created_at: Date;
  memberships: { tenant: string; role: Role }[] | null;
}

interface TokenRow {
  id: string;
  name: string;
  user_name: string;
  role: Role;
  tenant_name: string;
  workshop_id: string | null;
  expires_at: Date | null;
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

function userView(r: UserRow): UserView {
  return {
    id: r.id,
    name: r.name,
    issuer: r.issuer,
    email: r.email,
    disabled: r.disabled_at !== null,
    mustChangePassword: r.must_change_password,
    memberships: r.memberships ?? [],
    createdAt: r.created_at.toISOString(),
  };
}

function tokenView(r: TokenRow): TokenView {
  return {
    id: r.id,
    name: r.name,
    user: r.user_name,
    role: r.role,
    tenant: r.tenant_name,
    workshopId: r.workshop_id,
    expiresAt: r.expires_at?.toISOString() ?? null,
    createdAt: r.created_at.toISOString(),
    lastUsedAt: r.last_used_at?.toISOString() ?? null,
    revoked: r.revoked_at !== null,
  };
}

/** Users, tenants and API tokens: what `atelier users` and `atelier tokens` manage. */
export class AccountService {
  constructor(private readonly pool: Pool) {}

  async whoami(p: Principal): Promise<object> {
    const tenants =
      p.kind === 'agent'
        ? [{ name: p.tenantName, role: p.role }]
        : await queryRows<{ name: string; role: string }>(
            this.pool,
            'SELECT tn.name, m.role FROM memberships m JOIN tenants tn ON tn.id = m.tenant_id WHERE m.user_id = $1 ORDER BY tn.name',
            [p.userId],
          );
    return {
      user: { id: p.userId, name: p.userName },
      tenant: { id: p.tenantId, name: p.tenantName },
      role: p.role,
      kind: p.kind,
      workshopId: p.workshopId,
      via: p.via,
      tokenId: p.tokenId,
      expiresAt: p.expiresAt,
      tenants,
    };
  }

  private async userRows(where: string, params: unknown[], tenantId: string): Promise<UserRow[]> {
    // Memberships are shown only within the caller's tenant: other tenants stay invisible.
    return queryRows<UserRow>(
      this.pool,
      `SELECT u.id, u.name, u.issuer, u.email, u.disabled_at, u.must_change_password, u.created_at,
              (SELECT json_agg(json_build_object('tenant', tn.name, 'role', m.role) ORDER BY tn.name)
                 FROM memberships m JOIN tenants tn ON tn.id = m.tenant_id WHERE m.user_id = u.id AND m.tenant_id = $1) AS memberships
         FROM users u WHERE ${where} ORDER BY u.name`,
      [tenantId, ...params],
    );
  }

  async listUsers(p: Principal): Promise<UserView[]> {
    return (await this.userRows('EXISTS (SELECT 1 FROM memberships m WHERE m.user_id = u.id AND m.tenant_id = $1)', [], p.tenantId)).map(
      userView,
    );
  }

  /**
   * Adds a local user to a tenant (the caller's by default) with a one-time password they must
   * change at first login. User names are server-wide: adding an existing user to a tenant, and
   * creating a tenant (with the caller as its admin), are for server admins (admins of the
   * default tenant) only; a tenant's admin cannot pull someone else's account into their tenant.
   */
  async addUser(p: Principal, req: AddUserRequest): Promise<{ user: UserView; temporaryPassword: string | null }> {
    const tenantName = req.tenant ?? p.tenantName;
    const password = generatePassword();
    const hash = await hashPassword(password);
    let created = false;
    let tenantId = '';
    try {
      await withTransaction(this.pool, async (c) => {
        const platformAdmin = p.tenantId === PLATFORM_TENANT_ID && atLeast(p.role, 'admin');
        let t = (await c.query<{ id: string }>('SELECT id FROM tenants WHERE name = $1', [tenantName])).rows[0];
        if (!t) {
          if (!platformAdmin)
            throw new AtelierError(
              'PERMISSION_DENIED',
              `tenant ${tenantName} does not exist: only an admin of the default tenant may create tenants`,
              {
                field: 'tenant',
              },
            );
          t = (await c.query<{ id: string }>('INSERT INTO tenants (id, name) VALUES ($1, $2) RETURNING id', [newId('tn'), tenantName]))
            .rows[0]!;
          await c.query(`INSERT INTO memberships (user_id, tenant_id, role) VALUES ($1, $2, 'admin')`, [p.userId, t.id]);
        } else if (t.id !== p.tenantId) {
          const mine = (
            await c.query<{ role: string }>('SELECT role FROM memberships WHERE user_id = $1 AND tenant_id = $2', [p.userId, t.id])
          ).rows[0];
          if (!mine || !isRole(mine.role) || !atLeast(mine.role, 'admin'))
            throw new AtelierError('PERMISSION_DENIED', `adding users to tenant ${tenantName} needs the admin role there`);
        }
        tenantId = t.id;
        let u = (await c.query<{ id: string; issuer: string }>('SELECT id, issuer FROM users WHERE name = $1', [req.name])).rows[0];
        if (u && !platformAdmin)
          throw new AtelierError('ALREADY_EXISTS', `the user name ${req.name} is taken on this server: pick another`, { field: 'name' });
        if (u && u.issuer !== 'local')
          throw new AtelierError(
            'INVALID_ARGUMENT',
            `${req.name} is an account of the external issuer: its tenants and roles come from its groups`,
            {
              field: 'name',
            },
          );
        if (u && req.email !== undefined)
          throw new AtelierError(
            'INVALID_ARGUMENT',
            `${req.name} exists already: leave out email here and set it with \`atelier users edit ${req.name} --email ADDRESS\``,
            { field: 'email' },
          );
        if (!u) {
          const id = newId('u');
          if (req.email !== undefined) await this.checkEmailFree(c, req.email, id);
          u = (
            await c.query<{ id: string; issuer: string }>(
              `INSERT INTO users (id, name, password_hash, must_change_password, email) VALUES ($1, $2, $3, true, $4) RETURNING id, issuer`,
              [id, req.name, hash, req.email ?? null],
            )
          ).rows[0]!;
          created = true;
        }
        const m = await c.query('INSERT INTO memberships (user_id, tenant_id, role) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [
          u.id,
          t.id,
          req.role,
        ]);
        if (m.rowCount === 0)
          throw new AtelierError('ALREADY_EXISTS', `user ${req.name} is already a member of tenant ${tenantName}`, { field: 'name' });
      });
    } catch (err) {
      throw asDatabaseError(err);
    }
    const [row] = await this.userRows('u.name = $2', [req.name], tenantId);
    return { user: userView(row!), temporaryPassword: created ? password : null };
  }

  /**
   * Changes an account's e-mail address, by which a Slack click is matched to it (the route lets
   * only the default tenant's admins do it: it decides who a Slack user acts as). An address
   * another active account holds is refused, so that a click never matches two accounts.
   * Accounts of the external issuer take theirs from its tokens at each login.
   */
  async setUserEmail(p: Principal, name: string, req: SetUserEmailRequest): Promise<UserView> {
    const [target] = await this.userRows('u.name = $2', [name], p.tenantId);
    if (!target) throw new AtelierError('NOT_FOUND', `no user ${name} on this server: see \`atelier users list\``);
    if (target.issuer !== 'local')
      throw new AtelierError(
        'INVALID_ARGUMENT',
        `${name} is an account of the external issuer: its e-mail address comes from that issuer`,
        {
          field: 'email',
        },
      );
    try {
      await withTransaction(this.pool, async (c) => {
        // One change of addresses at a time: two admins cannot give one address to two accounts.
        await c.query("SELECT pg_advisory_xact_lock(hashtext('atelier.users.email'))");
        if (req.email !== null) await this.checkEmailFree(c, req.email, target.id);
        await c.query('UPDATE users SET email = $2 WHERE id = $1', [target.id, req.email]);
      });
    } catch (err) {
      throw asDatabaseError(err);
    }
    const [row] = await this.userRows('u.id = $2', [target.id], p.tenantId);
    return userView(row!);
  }

  private async checkEmailFree(c: { query: Pool['query'] }, email: string, self: string): Promise<void> {
    const taken = await c.query('SELECT 1 FROM users WHERE lower(email) = lower($1) AND id <> $2 AND disabled_at IS NULL', [email, self]);
    if ((taken.rowCount ?? 0) > 0)
      throw new AtelierError(
        'ALREADY_EXISTS',
        `${email} is another account's address on this server: each address belongs to one account`,
        {
          field: 'email',
        },
      );
  }

  /**
   * Disables an account everywhere (the route lets only the default tenant's admins do it):
   * their tokens and sessions stop working at once.
   */
  async disableUser(p: Principal, name: string): Promise<UserView> {
    const [target] = await this.userRows('u.name = $2', [name], p.tenantId);
    if (!target) throw new AtelierError('NOT_FOUND', `no user ${name} on this server: see \`atelier users list\``);
    if (target.id === p.userId) throw new AtelierError('INVALID_ARGUMENT', 'you cannot disable yourself: ask another admin');
    await queryRows(this.pool, 'UPDATE users SET disabled_at = coalesce(disabled_at, now()) WHERE id = $1', [target.id]);
    // Sessions, grants and refresh tokens of the embedded issuer go too: nothing can be refreshed.
    await queryRows(this.pool, `DELETE FROM oidc_payloads WHERE payload->>'accountId' = $1`, [target.id]);
    const [row] = await this.userRows('u.id = $2', [target.id], p.tenantId);
    return userView(row!);
  }

  /**
   * An API token for automation, shown once and stored hashed. Its role is at most the caller's.
   * With `workshopId` it is an agent token: it acts only on that workshop (the caller must be
   * allowed to operate it — checked by the route) and can never decide an approval.
   */
  async createToken(p: Principal, req: CreateTokenRequest): Promise<TokenView & { token: string }> {
    // The caller's role where the token will act: never more than their current (possibly capped) role.
    let tenantId = p.tenantId;
    let callerRole = p.role;
    if (req.tenant !== undefined && req.tenant !== p.tenantName) {
      // A token acts in one tenant; one minted with it stays there (a server admin's excepted:
      // that token administers every tenant already).
      if (p.via === 'api-token' && !(p.tenantId === PLATFORM_TENANT_ID && atLeast(p.role, 'admin')))
        throw new AtelierError(
          'PERMISSION_DENIED',
          `this API token acts in tenant ${p.tenantName} only: log in (\`atelier auth login\`) to make tokens for another tenant`,
          { field: 'tenant' },
        );
      if (req.workshopId)
        throw new AtelierError('INVALID_ARGUMENT', "an agent token acts in its workshop's tenant: leave out --tenant", { field: 'tenant' });
      const [m] = await queryRows<{ tenant_id: string; role: string }>(
        this.pool,
        'SELECT m.tenant_id, m.role FROM memberships m JOIN tenants tn ON tn.id = m.tenant_id WHERE m.user_id = $1 AND tn.name = $2',
        [p.userId, req.tenant],
      );
      if (!m || !isRole(m.role))
        throw new AtelierError('PERMISSION_DENIED', `you are not a member of tenant ${req.tenant}`, { field: 'tenant' });
      tenantId = m.tenant_id;
      callerRole = weaker(p.role, m.role);
    }
    let userId = p.userId;
    let ceiling = callerRole;
    if (req.user !== undefined && req.user !== p.userName && req.user !== p.userId) {
      if (!atLeast(callerRole, 'admin'))
        throw new AtelierError('PERMISSION_DENIED', 'only an admin may create tokens for another user', { field: 'user' });
      const [u] = await queryRows<{ id: string; role: string; disabled: boolean }>(
        this.pool,
        `SELECT u.id, m.role, u.disabled_at IS NOT NULL AS disabled FROM users u JOIN memberships m ON m.user_id = u.id AND m.tenant_id = $2
          WHERE u.name = $1`,
        [req.user, tenantId],
      );
      if (!u || !isRole(u.role))
        throw new AtelierError('NOT_FOUND', `no user ${req.user} in this tenant: see \`atelier users list\``, { field: 'user' });
      if (u.disabled) throw new AtelierError('INVALID_ARGUMENT', `user ${req.user} is disabled`, { field: 'user' });
      userId = u.id;
      ceiling = weaker(callerRole, u.role);
    }
    const role: Role = req.workshopId ? weaker(req.role ?? 'member', ceiling) : (req.role ?? ceiling);
    if (!atLeast(ceiling, role))
      throw new AtelierError(
        'PERMISSION_DENIED',
        `a token cannot have more rights than ${userId === p.userId ? 'you' : 'its user'}: ${ceiling}, asked ${role}`,
        {
          field: 'role',
        },
      );
    const token = newApiToken();
    const ttl = req.expiresInSeconds === undefined ? DEFAULT_TOKEN_TTL_SECONDS : req.expiresInSeconds;
    const id = newId('tok');
    // Made with an API token: it never outlives that token and is revoked with it.
    const parent = p.via === 'api-token' ? p.tokenId : null;
    await queryRows(
      this.pool,
      `INSERT INTO api_tokens (id, user_id, name, token_hash, tenant_id, role, workshop_id, expires_at, parent_id)
       SELECT $1, $2, $3, $4, $5, $6, $7,
              CASE WHEN $8::int IS NULL THEN p.expires_at
                   ELSE least(now() + make_interval(secs => $8::int), coalesce(p.expires_at, 'infinity')) END,
              $9
         FROM (SELECT (SELECT expires_at FROM api_tokens WHERE id = $9) AS expires_at) p`,
      [
        id,
        userId,
        req.name ?? (req.workshopId ? `agent ${req.workshopId}` : 'cli'),
        hashToken(token),
        tenantId,
        role,
        req.workshopId ?? null,
        ttl,
        parent,
      ],
    );
    const [row] = await this.tokenRows('t.id = $2', [id], tenantId);
    return { ...tokenView(row!), token };
  }

  private tokenRows(where: string, params: unknown[], tenantId: string): Promise<TokenRow[]> {
    return queryRows<TokenRow>(
      this.pool,
      `SELECT t.id, t.name, u.name AS user_name, t.role, tn.name AS tenant_name, t.workshop_id, t.expires_at, t.created_at,
              t.last_used_at, t.revoked_at
         FROM api_tokens t JOIN users u ON u.id = t.user_id JOIN tenants tn ON tn.id = t.tenant_id
        WHERE t.tenant_id = $1 AND ${where} ORDER BY t.created_at`,
      [tenantId, ...params],
    );
  }

  /** Your tokens; an admin sees every token of the tenant. Never their secret. */
  async listTokens(p: Principal): Promise<TokenView[]> {
    const rows = atLeast(p.role, 'admin')
      ? await this.tokenRows('true', [], p.tenantId)
      : await this.tokenRows('t.user_id = $2', [p.userId], p.tenantId);
    return rows.map(tokenView);
  }

  async revokeToken(p: Principal, id: string): Promise<{ id: string; revoked: true }> {
    const owner = atLeast(p.role, 'admin') ? 'true' : 't.user_id = $3';
    const rows = await queryRows(
      this.pool,
      `UPDATE api_tokens t SET revoked_at = coalesce(revoked_at, now()) WHERE t.tenant_id = $1 AND t.id = $2 AND ${owner} RETURNING id`,
      atLeast(p.role, 'admin') ? [p.tenantId, id] : [p.tenantId, id, p.userId],
    );
    if (rows.length === 0) throw new AtelierError('NOT_FOUND', `no token ${id} of yours: see \`atelier tokens list\``);
    // And every token minted with it, at any depth.
    await queryRows(
      this.pool,
      `WITH RECURSIVE minted AS (
         SELECT id FROM api_tokens WHERE parent_id = $1
         UNION SELECT t.id FROM api_tokens t JOIN minted m ON t.parent_id = m.id)
       UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id IN (SELECT id FROM minted)`,
      [id],
    );
    return { id, revoked: true };
  }
}
