import { execFile } from 'node:child_process';
import {
  closeSync,
  constants,
  fchmodSync,
  fchownSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AtelierError } from '../core/index.js';
import { queryRows, type Pool } from '../db/index.js';
import { atLeast, type Principal } from '../identity/index.js';
import { nsenterArgs, type SandboxHandle } from '../sandbox/index.js';
import { parseBinding, type CredentialBinding, type CredentialEntry } from '../egress/index.js';

const run = promisify(execFile);

/** A secret's name: also its file name under /run/atelier/secrets and its variable in execs. */
export const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
/** Variables a secret may not replace in an exec (the platform's own, the loader's, the proxy's, the shell's basics). */
const RESERVED =
  /^(ATELIER_.*|LD_.*|PATH|HOME|USER|LOGNAME|SHELL|PWD|TERM|LANG|HOSTNAME|TMPDIR|(HTTPS?|NO|ALL)_PROXY|(https?|no|all)_proxy)$/;
export const MAX_SECRET_BYTES = 64 << 10;
/** A grant lasts this long unless the request asks for less (or more, up to the payload's bound of 24 h). */
export const DEFAULT_GRANT_SECONDS = 3600;
/** Where granted secrets appear inside a workshop (a tmpfs of the workshop user's, 0700). */
export const SECRETS_DIR = '/run/atelier/secrets';

export interface SecretInfo {
  name: string;
  setBy: string;
  setAt: string;
}

/** A running workshop's sandbox on this server, as the secret grants need it. */
export interface LocalSandbox {
  handle: SandboxHandle;
  /** The host directory seen read-only at /run/atelier inside. */
  run: string;
}

export interface SecretStoreOptions {
  nodeId: string;
  sealer: { encrypt(plain: string, context: string): string; decrypt(sealed: string, context: string): Buffer };
  log: { warn(obj: object, msg?: string): void };
  sweepIntervalMs?: number;
}

/** Where use-mode grants go: the credential broker of this server (setGrantedBindings). */
export type GrantedBindings = (workshopId: string, bindings: CredentialBinding[]) => void;

/** Checks a secret's name; the message says what a valid one is. */
export function checkSecretName(name: string): void {
  if (!SECRET_NAME.test(name))
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `"${name.slice(0, 80)}" is not a secret name: letters, digits and _, not starting with a digit, at most 64`,
      {
        field: 'name',
      },
    );
  if (RESERVED.test(name))
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `${name} is reserved (a granted secret is also an environment variable of the workshop): choose another name`,
      {
        field: 'name',
      },
    );
}

function context(tenantId: string, name: string): string {
  return `secret:${tenantId}:${name}`;
}

/**
 * Secrets of a tenant (set by its maintainers, sealed with the master key) and their grants to
 * workshops (approved SECRET_REQUESTs): while a grant lives, the value is a file on a tmpfs
 * mounted in the workshop's own mount namespace (never on the host's disk) and a variable of
 * new execs; when it ends (its TTL, the secret deleted), the file is removed, also after a
 * server restart (the sweeper runs at start).
 */
export class SecretStore {
  private sweeper: NodeJS.Timeout | undefined;
  private sandboxOf: (workshopId: string) => Promise<LocalSandbox | undefined> = async () => undefined;
  private granted: GrantedBindings = () => undefined;
  /** Workshop → the sandbox pid its files were last written to (a resumed workshop has a new one, and an empty tmpfs). */
  private readonly synced = new Map<string, number>();
  private sweeping: Promise<void> | undefined;
  private closed = false;
  /** valueFor's short-lived copies: `workshop\0name` → value (undefined: none). */
  private readonly values = new Map<string, { value: string | undefined; until: number }>();

  constructor(
    private readonly pool: Pool,
    private readonly opts: SecretStoreOptions,
  ) {}

  // ---- the tenant's secrets --------------------------------------------------------------

  async set(actor: Principal, name: string, value: string): Promise<SecretInfo> {
    checkSecretName(name);
    if (value.length === 0) throw new AtelierError('INVALID_ARGUMENT', 'the value is empty: pipe it on stdin', { field: 'value' });
    if (Buffer.byteLength(value) > MAX_SECRET_BYTES)
      throw new AtelierError('PAYLOAD_TOO_LARGE', `a secret is at most ${MAX_SECRET_BYTES} bytes`, { field: 'value' });
    if (value.includes('\0'))
      throw new AtelierError('INVALID_ARGUMENT', 'a secret may not contain NUL bytes (it becomes an environment variable)', {
        field: 'value',
      });
    const sealed = this.opts.sealer.encrypt(value, context(actor.tenantId, name));
    const [r] = await queryRows<{ name: string; set_by: string; set_at: Date }>(
      this.pool,
      `INSERT INTO secrets (tenant_id, name, sealed, set_by) VALUES ($1, $2, $3, $4)
       ON CONFLICT (tenant_id, name) DO UPDATE SET sealed = EXCLUDED.sealed, set_by = EXCLUDED.set_by, set_at = now()
       RETURNING name, set_by, set_at`,
      [actor.tenantId, name, sealed, actor.userName],
    );
    this.values.clear();
    // Workshops holding a grant of it get the new value.
    void this.syncGranted(actor.tenantId, name);
    return { name: r!.name, setBy: r!.set_by, setAt: r!.set_at.toISOString() };
  }

  async list(actor: Principal): Promise<SecretInfo[]> {
    const rows = await queryRows<{ name: string; set_by: string; set_at: Date }>(
      this.pool,
      'SELECT name, set_by, set_at FROM secrets WHERE tenant_id = $1 ORDER BY name',
      [actor.tenantId],
    );
    return rows.map((r) => ({ name: r.name, setBy: r.set_by, setAt: r.set_at.toISOString() }));
  }

  /** Deletes a secret; every live grant of it ends at once (the files go). */
  async delete(actor: Principal, name: string): Promise<void> {
    checkSecretName(name);
    const r = await queryRows<{ name: string }>(this.pool, 'DELETE FROM secrets WHERE tenant_id = $1 AND name = $2 RETURNING name', [
      actor.tenantId,
      name,
    ]);
    this.values.clear();
    if (r.length === 0)
      throw new AtelierError('NOT_FOUND', `secret ${name} does not exist in tenant ${actor.tenantName}: run \`atelier secrets list\``, {
        name,
      });
    await queryRows(
      this.pool,
      'UPDATE secret_grants SET expires_at = least(expires_at, now()) WHERE tenant_id = $1 AND name = $2 AND removed_at IS NULL',
      [actor.tenantId, name],
    );
    await this.sweep();
  }

  /**
   * The value of the workshop's tenant's secret, for the credential broker (it never enters the
   * workshop); undefined when there is none. Kept a second at most (a busy binding reads it once,
   * not per request); a set or delete on this server drops it at once.
   */
  async valueFor(workshopId: string, name: string): Promise<string | undefined> {
    const key = `${workshopId}\0${name}`;
    const hit = this.values.get(key);
    if (hit && hit.until > Date.now()) return hit.value;
    const [r] = await queryRows<{ sealed: string; tenant_id: string }>(
      this.pool,
      'SELECT s.sealed, s.tenant_id FROM secrets s JOIN workshops w ON w.tenant_id = s.tenant_id WHERE w.id = $1 AND s.name = $2',
      [workshopId, name],
    );
    const value = r ? this.opts.sealer.decrypt(r.sealed, context(r.tenant_id, name)).toString('utf8') : undefined;
    if (this.values.size > 10_000) this.values.clear();
    this.values.set(key, { value, until: Date.now() + 1000 });
    return value;
  }

  /** True when the workshop's tenant has this secret (a request for an unknown one is refused at once). */
  async existsFor(workshopId: string, name: string): Promise<boolean> {
    const r = await queryRows(
      this.pool,
      'SELECT 1 FROM secrets s JOIN workshops w ON w.tenant_id = s.tenant_id WHERE w.id = $1 AND s.name = $2',
      [workshopId, name],
    );
    return r.length > 0;
  }

  // ---- grants ----------------------------------------------------------------------------

  /**
   * The effect of an approved SECRET_REQUEST: idempotent (the grant row is keyed by the request).
   * `use`: the secret is bound to a host at the egress proxy for the grant's life, never revealed.
   */
  async grant(requestId: string, workshopId: string, name: string, ttlSeconds: number, use?: CredentialEntry): Promise<void> {
    if (use) parseBinding(use, 'payload');
    const r = await queryRows<{ workshop_id: string }>(
      this.pool,
      `INSERT INTO secret_grants (request_id, workshop_id, tenant_id, name, expires_at, binding)
       SELECT $1, w.id, w.tenant_id, $3, now() + make_interval(secs => $4), $5::jsonb FROM workshops w WHERE w.id = $2
       ON CONFLICT (request_id) DO NOTHING RETURNING workshop_id`,
      [requestId, workshopId, name, ttlSeconds, use ? JSON.stringify({ host: use.host, header: use.header, value: use.value }) : null],
    );
    if (r.length === 0 && (await queryRows(this.pool, 'SELECT 1 FROM secret_grants WHERE request_id = $1', [requestId])).length === 0)
      throw new Error(`workshop ${workshopId} no longer exists: the secret was not granted`);
    if (!(await this.existsFor(workshopId, name)))
      throw new Error(`secret ${name} was deleted before the grant: ask a maintainer to set it again, then ask again`);
    await this.sync(workshopId);
  }

  /**
   * Ends a grant now (the approved SECRET_REQUEST `requestId`): a revealed value's file and
   * variable go, a use grant's binding stops (the next request, kept-alive connections
   * included). The workshop's owner or a maintainer of its tenant may; ending one already ended is a no-op.
   */
  async revoke(actor: Principal, requestId: string): Promise<void> {
    const list = '`atelier approvals list --category SECRET_REQUEST --status APPROVED` shows the approved requests';
    if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(requestId))
      throw new AtelierError('INVALID_ARGUMENT', `that is not an approval request's id (a UUID): ${list}`, { field: 'id' });
    const missing = (): AtelierError =>
      new AtelierError('NOT_FOUND', `no grant of request ${requestId} in tenant ${actor.tenantName}: ${list}`, { id: requestId });
    const [g] = await queryRows<{ workshop_id: string; owner_id: string | null }>(
      this.pool,
      'SELECT g.workshop_id, w.owner_id FROM secret_grants g LEFT JOIN workshops w ON w.id = g.workshop_id WHERE g.request_id = $1 AND g.tenant_id = $2',
      [requestId, actor.tenantId],
    );
    if (!g) throw missing();
    if (actor.kind !== 'user' || (!atLeast(actor.role, 'maintainer') && g.owner_id !== actor.userId))
      throw new AtelierError(
        'PERMISSION_DENIED',
        `only the owner of workshop ${g.workshop_id} or a maintainer of ${actor.tenantName} may revoke its grants`,
        { id: requestId },
      );
    await queryRows(this.pool, 'UPDATE secret_grants SET expires_at = least(expires_at, now()) WHERE request_id = $1', [requestId]);
    await this.sync(g.workshop_id);
  }

  /** Live reveal grants of a workshop with their values (by the database clock); use grants never reach the workshop. */
  private async live(workshopId: string): Promise<{ at: Date; values: Map<string, string> }> {
    const { rows, values } = await this.liveValues(workshopId);
    const at = rows[0]?.at ?? (await queryRows<{ at: Date }>(this.pool, 'SELECT now() AS at'))[0]!.at;
    return { at, values };
  }

  /** live() without the time when there is no grant: an exec needs only the values (one query less on its path). */
  private async liveValues(workshopId: string): Promise<{ rows: { at: Date }[]; values: Map<string, string> }> {
    const rows = await queryRows<{ name: string; sealed: string; tenant_id: string; at: Date }>(
      this.pool,
      `SELECT DISTINCT s.name, s.sealed, s.tenant_id, now() AS at FROM secret_grants g
         JOIN secrets s ON s.tenant_id = g.tenant_id AND s.name = g.name
        WHERE g.workshop_id = $1 AND g.removed_at IS NULL AND g.expires_at > now() AND g.binding IS NULL`,
      [workshopId],
    );
    const values = new Map<string, string>();
    for (const r of rows) values.set(r.name, this.opts.sealer.decrypt(r.sealed, context(r.tenant_id, r.name)).toString('utf8'));
    return { rows, values };
  }

  /** The variables new execs of this workshop get: one per live grant, named as the secret. */
  async envFor(workshopId: string): Promise<Record<string, string>> {
    try {
      return Object.fromEntries((await this.liveValues(workshopId)).values);
    } catch (err) {
      // A value that cannot be unsealed (another server's key): the exec runs without it.
      this.opts.log.warn({ workshop: workshopId, err: (err as Error).message }, 'secrets: granted secrets not passed to an exec');
      return {};
    }
  }

  private async syncGranted(tenantId: string, name: string): Promise<void> {
    try {
      const rows = await queryRows<{ workshop_id: string }>(
        this.pool,
        'SELECT DISTINCT workshop_id FROM secret_grants WHERE tenant_id = $1 AND name = $2 AND removed_at IS NULL AND expires_at > now()',
        [tenantId, name],
      );
      for (const r of rows) await this.sync(r.workshop_id);
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message }, 'secrets: a workshop holding the secret was not updated');
    }
  }

  /**
   * Makes the workshop's secrets directory hold exactly its live grants, then records the ended
   * grants as removed. A workshop not running here has no files: its ended grants are just recorded.
   */
  async sync(workshopId: string): Promise<void> {
    await this.syncUses(workshopId);
    const sb = await this.sandboxOf(workshopId);
    const { at, values } = await this.live(workshopId);
    if (sb) {
      const dir = await this.mounted(sb);
      const inside = (n: string): string => join(dir, n);
      for (const entry of readdirSync(dir)) {
        // Leftovers of an interrupted write, and every secret no longer granted.
        if (entry.startsWith('.atelier-') || (SECRET_NAME.test(entry) && !values.has(entry))) rmEntry(inside(entry));
      }
      for (const [name, value] of values) writeSecret(dir, name, value, sb.handle.rootless ? null : sb.handle.uid);
      this.synced.set(workshopId, sb.handle.pid);
    }
    await queryRows(
      this.pool,
      'UPDATE secret_grants SET removed_at = now() WHERE workshop_id = $1 AND removed_at IS NULL AND expires_at <= $2',
      [workshopId, at],
    );
  }

  /**
   * Gives this server's broker the workshop's live use grants (none: all ended), each with its
   * end by the database clock; a later grant for the same host wins over an earlier one.
   */
  private async syncUses(workshopId: string): Promise<void> {
    const rows = await queryRows<{ request_id: string; name: string; binding: CredentialEntry; until: string; local: boolean }>(
      this.pool,
      `SELECT g.request_id, g.name, g.binding, (extract(epoch FROM g.expires_at) * 1000)::bigint AS until, w.node_id = $2 AS local
         FROM secret_grants g JOIN workshops w ON w.id = g.workshop_id
         JOIN secrets s ON s.tenant_id = g.tenant_id AND s.name = g.name
        WHERE g.workshop_id = $1 AND g.removed_at IS NULL AND g.expires_at > now() AND g.binding IS NOT NULL
        ORDER BY g.granted_at, g.request_id`,
      [workshopId, this.opts.nodeId],
    );
    if (rows.length > 0 && !rows[0]!.local) return;
    const out: CredentialBinding[] = [];
    for (const r of rows) {
      try {
        out.push({ ...parseBinding(r.binding, 'binding'), grant: { requestId: r.request_id, until: Number(r.until) } });
      } catch (err) {
        // Checked when it was filed and granted; a rule made stricter since leaves it out.
        this.opts.log.warn(
          { workshop: workshopId, request: r.request_id, err: (err as Error).message },
          'secrets: a use grant was not bound',
        );
      }
    }
    this.granted(workshopId, out);
  }

  /**
   * The host path of the workshop's secrets tmpfs (through /proc/PID/root: the mount exists only
   * in the sandbox's mount namespace), mounting it first if needed.
   */
  private async mounted(sb: LocalSandbox): Promise<string> {
    const pid = sb.handle.pid;
    const mountinfo = readFileSync(`/proc/${pid}/mountinfo`, 'utf8');
    if (!mountinfo.split('\n').some((l) => l.split(' ')[4] === SECRETS_DIR)) {
      // The mount point, empty, in the host directory bound read-only at /run/atelier.
      mkdirSync(join(sb.run, 'secrets'), { recursive: true, mode: 0o755 });
      const owner = sb.handle.rootless ? '' : `,uid=${sb.handle.uid},gid=${sb.handle.uid}`;
      await run(
        '/usr/bin/nsenter',
        [
          ...nsenterArgs(sb.handle, ['-m']),
          '--',
          '/bin/mount',
          '-t',
          'tmpfs',
          '-o',
          `mode=0700,size=4m,nosuid,nodev,noexec${owner}`,
          'atelier-secrets',
          SECRETS_DIR,
        ],
        { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } },
      );
    }
    return `/proc/${pid}/root${SECRETS_DIR}`;
  }

  // ---- expiry ----------------------------------------------------------------------------

  /**
   * Gives the store its way to the workshops' sandboxes and to this server's broker, then sweeps
   * now (grants that ended while the server was down, use grants to bind again) and every second.
   */
  start(sandboxOf: (workshopId: string) => Promise<LocalSandbox | undefined>, granted?: GrantedBindings): void {
    this.sandboxOf = sandboxOf;
    if (granted) this.granted = granted;
    void this.sweep();
    this.sweeper = setInterval(() => void this.sweep(), this.opts.sweepIntervalMs ?? 1000);
    this.sweeper.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.sweeper) clearInterval(this.sweeper);
    await this.sweeping;
  }

  /**
   * Workshops of this server with a grant that ended and is not yet removed, or live grants whose
   * sandbox was restarted (a resumed workshop's tmpfs is new and empty): synced.
   */
  async sweep(): Promise<void> {
    if (this.closed) return;
    if (this.sweeping) return this.sweeping;
    this.sweeping = (async () => {
      try {
        await queryRows(
          this.pool,
          'UPDATE secret_grants g SET removed_at = now() WHERE removed_at IS NULL AND NOT EXISTS (SELECT 1 FROM workshops w WHERE w.id = g.workshop_id)',
        );
        const rows = await queryRows<{ workshop_id: string; ended: boolean; pid: number | null }>(
          this.pool,
          `SELECT g.workshop_id, bool_or(g.expires_at <= now()) AS ended, (w.sandbox->>'pid')::int AS pid
             FROM secret_grants g JOIN workshops w ON w.id = g.workshop_id
            WHERE g.removed_at IS NULL AND w.node_id = $1 GROUP BY g.workshop_id, w.sandbox`,
          [this.opts.nodeId],
        );
        for (const r of rows) {
          if (!r.ended && (r.pid === null || this.synced.get(r.workshop_id) === r.pid)) continue;
          try {
            await this.sync(r.workshop_id);
          } catch (err) {
            this.opts.log.warn({ workshop: r.workshop_id, err: (err as Error).message }, 'secrets: could not update a workshop');
          }
        }
      } catch (err) {
        this.opts.log.warn({ err: (err as Error).message }, 'secrets: sweep failed');
      } finally {
        this.sweeping = undefined;
      }
    })();
    return this.sweeping;
  }
}

function rmEntry(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // A directory the workshop made there, or already gone: not ours to care about.
  }
}

/**
 * Writes NAME in the secrets directory whole or not at all, without following anything the
 * workshop user (who owns the directory) may have placed there: a fresh file (O_EXCL, never
 * through a link), then renamed over the name.
 */
function writeSecret(dir: string, name: string, value: string, uid: number | null): void {
  const tmp = join(dir, `.atelier-${name}.${process.pid}`);
  rmEntry(tmp);
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o400);
  try {
    if (uid !== null) fchownSync(fd, uid, uid);
    fchmodSync(fd, 0o400);
    writeSync(fd, value);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, join(dir, name));
}
