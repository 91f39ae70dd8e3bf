import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { AtelierError, resetSocket, TUNNEL_ARMED_GO, type ErrorCode } from '../../core/index.js';
import { listenChannel, type NotificationBus, type Pool } from '../../db/index.js';

/** The channel migration 015's triggers notify: `token:ID`, `user:ID`, `workshop:ID`. */
const CHANNEL = 'atelier_tunnel_grants';
/** An armed tunnel not used within this long is closed (the client re-arms). */
export const ARMED_TTL_MS = 30_000;
/** At most this many armed tunnels per token and workshop (a forward keeps one or two). */
const MAX_PER_TOKEN = 8;
/** Changes are remembered this long, for requests still being authorised when they arrive. */
const CHANGES_KEPT_MS = 60_000;

interface Spare {
  id: string;
  workshop: string;
  /** What authorised it (`token:…`, `user:…`, `workshop:…`): a change to any cuts it. */
  keys: string[];
  socket: Socket;
  timer: NodeJS.Timeout;
  /** Forgets it (once) and tells the route how it ended. */
  end(how: Ending): void;
}

type Ending = { code?: ErrorCode; message: string; cut: boolean };

export interface ArmRequest {
  id: string;
  workshop: string;
  tokenId: string;
  userId: string;
  /** When the request started, before it was authenticated (performance.now()). */
  startedAt: number;
  /** The principal's own expiry (ISO), if any: the spare goes before it. */
  expiresAt: string | null;
  socket: Socket;
  /** Bytes the client sent behind its request (the go, if it was quick). */
  head: Buffer;
  /** Called once, when the client says go: `rest` is what came after the go byte. */
  onGo(socket: Socket, rest: Buffer): void;
  /** Called when the spare ends unused (expired, closed by the client, cut). */
  onEnd(how: Ending): void;
}

/**
 * Armed tunnels: a port-forward's spare connections, each authorised like any tunnel (token,
 * workshop, `operate`) but holding nothing inside the workshop until the client sends its go
 * byte (the client has a local connection then), so a new forwarded connection costs no TCP or
 * HTTP set-up and no database round trip. Nothing is dialled before the go: a server that speaks
 * first (SSH) never sees a connection nobody made.
 *
 * Safety: what authorised a spare can change while it waits. Migration 015's triggers notify
 * every server (LISTEN `atelier_tunnel_grants`) when a token is revoked or narrowed, a user
 * disabled or deleted, a membership changed or removed, a workshop stopped, moved or deleted;
 * the spares that change touches are reset at once. While the listener is not connected nothing
 * is armed, and the spares there were are reset (a notification could have been lost). A change
 * that lands while an arm request is being authorised (after its lookup, before it is held) is
 * caught by the time it arrived at: the request is refused.
 */
export class ArmedTunnels {
  private readonly spares = new Map<string, Spare>();
  private readonly changes = new Map<string, number>();
  private readonly lookups = new Map<string, { at: number; keys: string[]; value: unknown }>();
  private readonly syncs = new Map<string, () => void>();
  private pool: Pool | undefined;
  private bus: NotificationBus | undefined;
  private listening = false;
  /** When the listener last (re)connected: requests that started before are not armed. */
  private upSince = Infinity;
  private closed = false;

  constructor(private readonly log: { warn(obj: object, msg?: string): void }) {}

  /** Starts listening (armed tunnels are refused until the listener is up). */
  start(databaseUrl: string, pool: Pool): void {
    this.pool = pool;
    this.bus = listenChannel(databaseUrl, CHANNEL, {
      onNotify: (payload) => this.changed(payload),
      onResync: () => this.up(),
      onError: (err) => {
        if (this.listening) this.log.warn({ err: err.message }, 'armed tunnels: notification connection lost; none armed until it is back');
        this.listening = false;
        this.upSince = Infinity;
        this.cutAll('UNAVAILABLE', 'the server lost its notification connection');
      },
    });
    this.bus.ready.then(
      () => this.up(),
      () => undefined,
    );
  }

  private up(): void {
    if (this.closed) return;
    this.listening = true;
    this.upSince = performance.now();
  }

  /** Whether tunnels can be armed now (the listener is connected). */
  get available(): boolean {
    return this.listening && !this.closed;
  }

  /** Since when every change is heard (performance.now()): Infinity while not listening (a GrantWatch). */
  get watchingSince(): number {
    return this.available ? this.upSince : Infinity;
  }

  /** Whether any of `keys` (`token:ID`, `user:ID`, `workshop:ID`) changed at or after `at`. */
  changedSince(keys: string[], at: number): boolean {
    return keys.some((key) => (this.changes.get(key) ?? -Infinity) >= at);
  }

  /** Spares held now (all, or of one workshop). */
  count(workshop?: string): number {
    let n = 0;
    for (const s of this.spares.values()) if (workshop === undefined || s.workshop === workshop) n++;
    return n;
  }

  /**
   * Resolves once every change committed before the call has been heard: a notification of its
   * own, heard back (a listener gets notifications in commit order). After a write on this server
   * that may change a grant (revoking a token, disabling a user, stopping or deleting a workshop),
   * its answer waits for this, so the client's next request already finds the change applied. Not
   * heard within 2 s: everything cached or armed before is forgotten.
   */
  async sync(): Promise<void> {
    const pool = this.pool;
    if (!this.available || !pool) return;
    const nonce = randomBytes(9).toString('base64url');
    let timer: NodeJS.Timeout | undefined;
    const heard = new Promise<boolean>((resolve) => {
      this.syncs.set(nonce, () => resolve(true));
      timer = setTimeout(() => resolve(false), 2000);
    });
    let ok: boolean;
    try {
      await pool.query('SELECT pg_notify($1, $2)', [CHANNEL, `sync:${nonce}`]);
      ok = await heard;
    } catch {
      ok = false;
    }
    clearTimeout(timer);
    this.syncs.delete(nonce);
    if (!ok && this.available) {
      this.upSince = performance.now();
      this.cutAll('UNAVAILABLE', 'the server could not confirm it heard every change');
    }
  }

  private changed(key: string): void {
    if (key.startsWith('sync:')) return this.syncs.get(key.slice(5))?.();
    const now = performance.now();
    this.changes.set(key, now);
    if (this.changes.size > 10_000) for (const [k, at] of this.changes) if (at < now - CHANGES_KEPT_MS) this.changes.delete(k);
    const [kind] = key.split(':');
    const why =
      kind === 'workshop'
        ? { code: 'WORKSHOP_NOT_RUNNING' as const, message: 'the workshop was stopped, moved or deleted' }
        : {
            code: 'UNAUTHENTICATED' as const,
            message: 'what authorised the tunnel changed (token revoked, user disabled or membership changed)',
          };
    for (const s of [...this.spares.values()]) if (s.keys.includes(key)) this.cut(s, why.code, why.message);
  }

  /**
   * Holds `req.socket` armed (after the 101 was written). Throws (before anything is written)
   * when it cannot be: the listener is down, or what authorised it changed meanwhile.
   */
  check(req: Pick<ArmRequest, 'workshop' | 'tokenId' | 'userId' | 'startedAt'>): void {
    if (!this.available || this.upSince > req.startedAt)
      throw new AtelierError(
        'UNAVAILABLE',
        'this server cannot arm tunnels right now (its notification connection is down): open one per connection',
      );
    for (const key of this.keysOf(req))
      if ((this.changes.get(key) ?? -Infinity) >= req.startedAt)
        throw new AtelierError('UNAVAILABLE', 'what authorised this tunnel changed while it was being armed: try again');
    let n = 0;
    for (const s of this.spares.values()) if (s.keys[0] === `token:${req.tokenId}` && s.workshop === req.workshop) n++;
    if (n >= MAX_PER_TOKEN)
      throw new AtelierError('RATE_LIMITED', `this token already holds ${MAX_PER_TOKEN} armed tunnels to workshop ${req.workshop}`);
  }

  /**
   * A workshop lookup made for an earlier arm request by the same principal (same token, user,
   * tenant, role), while nothing it depended on changed since that request started: the workshop's
   * row (status, sandbox, owner, tenant, node: `workshop:ID`), the token, the user. A spare re-armed
   * for the same forward then costs the token lookup only. Kept at most ARMED_TTL_MS.
   */
  lookup<T>(principal: string, workshop: string): T | undefined {
    const hit = this.lookups.get(`${principal}\n${workshop}`);
    if (!hit) return undefined;
    const now = performance.now();
    if (!this.available || this.upSince > hit.at || now - hit.at > ARMED_TTL_MS) return undefined;
    for (const key of hit.keys) if ((this.changes.get(key) ?? -Infinity) >= hit.at) return undefined;
    return hit.value as T;
  }

  /** Keeps a workshop lookup made by a request that started at `at` (see `lookup`). */
  remember(
    principal: string,
    workshop: string,
    at: number,
    keys: Pick<ArmRequest, 'workshop' | 'tokenId' | 'userId'>,
    value: unknown,
  ): void {
    if (this.lookups.size >= 10_000) this.lookups.clear();
    this.lookups.set(`${principal}\n${workshop}`, { at, keys: this.keysOf(keys), value });
  }

  private keysOf(req: Pick<ArmRequest, 'workshop' | 'tokenId' | 'userId'>): string[] {
    return [`token:${req.tokenId}`, `user:${req.userId}`, `workshop:${req.workshop}`];
  }

  /** Holds a spare; `check()` must have passed in the same tick. */
  arm(req: ArmRequest): void {
    const expiry = req.expiresAt ? Date.parse(req.expiresAt) - Date.now() : Infinity;
    const ttl = Math.max(0, Math.min(ARMED_TTL_MS, expiry));
    const { socket } = req;
    let gone = false;
    const spare: Spare = {
      id: req.id,
      workshop: req.workshop,
      keys: this.keysOf(req),
      socket,
      timer: setTimeout(() => this.drop(spare, { message: 'the armed tunnel expired unused', cut: false }), ttl),
      end: (how) => {
        if (gone) return;
        gone = true;
        clearTimeout(spare.timer);
        this.spares.delete(spare.id);
        req.onEnd(how);
      },
    };
    spare.timer.unref();
    this.spares.set(spare.id, spare);
    const end = spare.end;
    const onData = (chunk: Buffer): void => {
      socket.pause();
      socket.off('data', onData);
      if (chunk[0] !== TUNNEL_ARMED_GO) {
        end({ message: 'the client sent something other than its go byte', cut: true });
        socket.destroy();
        return;
      }
      if (gone) return;
      gone = true;
      clearTimeout(spare.timer);
      this.spares.delete(spare.id);
      socket.off('end', onEnd);
      socket.off('close', onClose);
      req.onGo(socket, chunk.subarray(1));
    };
    const onEnd = (): void => {
      end({ message: 'the client closed the armed tunnel unused', cut: false });
      socket.destroy();
    };
    const onClose = (): void => end({ message: 'the client closed the armed tunnel unused', cut: false });
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('close', onClose);
    socket.on('error', () => undefined);
    if (req.head.length > 0) onData(req.head);
    else socket.resume();
  }

  private drop(s: Spare, how: Ending): void {
    s.end(how);
    if (how.cut) resetSocket(s.socket);
    else s.socket.destroy();
  }

  private cut(s: Spare, code: ErrorCode, message: string): void {
    this.drop(s, { code, message, cut: true });
  }

  /** Resets the spares of a workshop (it is being deleted). */
  cutWorkshop(workshop: string, code: ErrorCode, message: string): number {
    let n = 0;
    for (const s of [...this.spares.values()])
      if (s.workshop === workshop) {
        this.cut(s, code, message);
        n++;
      }
    return n;
  }

  cutAll(code: ErrorCode, message: string): void {
    for (const s of [...this.spares.values()]) this.cut(s, code, message);
  }

  close(message: string): void {
    this.closed = true;
    this.listening = false;
    this.cutAll('UNAVAILABLE', message);
    void this.bus?.close();
  }
}
