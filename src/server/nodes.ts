import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { freemem, hostname, totalmem } from 'node:os';
import type { FastifyBaseLogger } from 'fastify';
import { AtelierError, type NodeView } from '../core/index.js';
import { knownMigrations, queryRows, type Pool } from '../db/index.js';
import type { Principal } from '../identity/index.js';

/**
 * The nodes of an installation: every server sharing one PostgreSQL (docs/replicas.md). Each
 * registers a row at start, heartbeats every ATELIER_NODE_HEARTBEAT, and is "unreachable" to the
 * others once its heartbeat is older than their ATELIER_NODE_DEAD_AFTER. Node-to-node requests are
 * signed with the sending node's own HMAC key, made at each join and stored sealed with the
 * master key. A dead node may be removed (`atelier nodes remove`): its row goes, a tombstone in
 * removed_nodes keeps its name for the workshops it ran.
 */

/**
 * The node-to-node protocol this build speaks (the relay's signed headers); bumped on a change.
 * 2: a relayed body read whole (JSON) is signed too (x-atelier-node-body), sent only to a node of 2.
 */
export const NODE_PROTOCOL = 2;
/** The oldest protocol this build still talks to: the compatibility window is [MIN, NODE_PROTOCOL]. */
export const NODE_MIN_PROTOCOL = 1;
/** The defaults of ATELIER_NODE_HEARTBEAT and ATELIER_NODE_DEAD_AFTER (src/core/config.ts). */
export const HEARTBEAT_MS = 2000;
export const UNREACHABLE_AFTER_MS = 10_000;
/** How far a signed node request's clock may be from ours; a signature is accepted once in it. */
const SIGNATURE_WINDOW_MS = 60_000;

/** The signed headers of a node-to-node request. */
export const NODE_HEADERS = {
  node: 'x-atelier-node',
  target: 'x-atelier-node-target',
  time: 'x-atelier-node-time',
  /** Random per request: two identical calls in the same millisecond are not one replayed. */
  nonce: 'x-atelier-node-nonce',
  principal: 'x-atelier-node-principal',
  placement: 'x-atelier-node-placement',
  /** `LENGTH:SHA256` of the body, when the sender read it whole (protocol 2); signed with the rest. */
  body: 'x-atelier-node-body',
  signature: 'x-atelier-node-signature',
} as const;

/** What a relayed request's body must be: its length and SHA-256 (hex), as the sending node signed them. */
export interface SignedBody {
  length: number;
  sha256: string;
}

interface NodeRow {
  id: string;
  name: string;
  address: string;
  version: string;
  protocol: number;
  min_protocol: number;
  schema_version: string;
  memory_total_bytes: string;
  memory_free_bytes: string;
  workshops: number;
  draining: boolean;
  key_sealed: string;
  joined_at: Date;
  heartbeat_at: Date;
  /** Its own ATELIER_NODE_HEARTBEAT and ATELIER_NODE_DEAD_AFTER (null: a node of an older release). */
  heartbeat_ms: number | null;
  dead_after_ms: number | null;
  /** Milliseconds since its last heartbeat, by the database's clock. */
  age_ms: number;
}

interface RemovedRow {
  id: string;
  name: string;
  address: string;
  version: string;
  last_heartbeat_at: Date;
  removed_at: Date;
  removed_by: string;
}

/** What `atelier nodes remove` did: the node, and the workshops that stay behind it. */
export interface NodeRemoval {
  id: string;
  name: string;
  address: string;
  lastHeartbeatAt: string;
  removedAt: string;
  removedBy: string;
  workshops: { id: string; name: string; status: string }[];
}

interface Sealer {
  encrypt(plain: string, context: string): string;
  decrypt(sealed: string, context: string): Buffer;
}

export interface JoinOptions {
  pool: Pool;
  id: string;
  /** --node-name; the default is defaultNodeName(id). */
  name: string | undefined;
  version: string;
  sealer: Sealer;
  log: FastifyBaseLogger;
  /** ATELIER_NODE_HEARTBEAT; default HEARTBEAT_MS. */
  heartbeatMs?: number;
  /** ATELIER_NODE_DEAD_AFTER; default UNREACHABLE_AFTER_MS. */
  deadAfterMs?: number;
  /**
   * What this node writes for the others with each heartbeat (its workshops' disk figures: only
   * it can read them); a failure is logged and tried again at the next heartbeat.
   */
  publish?: () => Promise<void>;
}

/** The default node name: the host's name and the first 4 characters of the data dir's node id (several nodes on one host differ). */
export function defaultNodeName(id: string): string {
  const host =
    hostname()
      .toLowerCase()
      .replace(/[^a-z0-9-]+/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 40) || 'node';
  return `${host}-${id.replace(/^node-/, '').slice(0, 4)}`;
}

export function checkNodeName(name: string): string {
  if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(name))
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `--node-name: lowercase letters, digits and -, at most 63, starting with a letter or digit; got "${name}"`,
      {
        field: 'node-name',
      },
    );
  return name;
}

const SELECT = `SELECT *, (extract(epoch FROM now() - heartbeat_at) * 1000)::float8 AS age_ms FROM nodes`;

/** What a node runs for the installation: its row, heartbeat, placement and the node-to-node signatures. */
export class NodeRegistry {
  private nodes = new Map<string, NodeRow>();
  private removed = new Map<string, RemovedRow>();
  private address: string | undefined;
  private keys = new Map<string, { sealed: string; key: Buffer }>();
  private readonly seen = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;

  readonly name: string;
  readonly heartbeatMs: number;
  readonly deadAfterMs: number;

  constructor(private readonly opts: JoinOptions) {
    this.name = checkNodeName(opts.name ?? defaultNodeName(opts.id));
    this.heartbeatMs = opts.heartbeatMs ?? HEARTBEAT_MS;
    this.deadAfterMs = opts.deadAfterMs ?? UNREACHABLE_AFTER_MS;
  }

  get id(): string {
    return this.opts.id;
  }

  /**
   * Registers this node, reachable by the others at `address`, or refuses with what to do (an
   * older schema or protocol, a name taken); then heartbeats until close().
   */
  async join(address: string): Promise<void> {
    this.address = address;
    await this.register();
    await this.beat();
    this.timer = setInterval(() => void this.beat(), this.heartbeatMs);
    this.timer.unref();
  }

  /** The checks of a join and this node's row (at start, and again if it was removed meanwhile). */
  private async register(): Promise<void> {
    const opts = this.opts;
    const name = this.name;
    const address = this.address!;
    const known = knownMigrations();
    const applied = await queryRows<{ version: string }>(opts.pool, 'SELECT version FROM schema_migrations ORDER BY version');
    const unknown = applied.map((r) => r.version).filter((v) => !known.includes(v));
    // Migrations only add (tables, nullable columns): an older release runs on a newer schema. That
    // is the schema's compatibility window, which `server upgrade --rollback` relies on too; the
    // node protocol below is what an older node may be refused for.
    if (unknown.length > 0)
      opts.log.warn(
        { unknown },
        `this node (Atelier ${opts.version}) is older than the database it joins: a newer node applied ${unknown.join(', ')}; it joins (migrations only add), but upgrade it to the installation's version (atelier nodes list shows it)`,
      );
    const live = await queryRows<NodeRow>(opts.pool, `${SELECT} WHERE id <> $1 AND heartbeat_at > now() - $2 * interval '1 millisecond'`, [
      opts.id,
      this.deadAfterMs,
    ]);
    for (const n of live) {
      if (n.min_protocol > NODE_PROTOCOL)
        throw new AtelierError(
          'PRECONDITION_FAILED',
          `this node speaks node protocol ${NODE_PROTOCOL}, and node ${n.name} (Atelier ${n.version}) needs at least ${n.min_protocol}: upgrade this node to Atelier ${n.version} or later`,
          { node: n.name },
        );
      if (n.protocol < NODE_MIN_PROTOCOL)
        throw new AtelierError(
          'PRECONDITION_FAILED',
          `node ${n.name} (Atelier ${n.version}) speaks node protocol ${n.protocol}, older than this node talks to (${NODE_MIN_PROTOCOL}): upgrade ${n.name} first`,
          { node: n.name },
        );
      if (n.name === name)
        throw new AtelierError(
          'CONFLICT',
          `the node name ${name} is taken by a live node (${n.address}): start this one with another --node-name`,
          { node: name },
        );
    }
    const [holder] = await queryRows<{ id: string; n: string }>(
      opts.pool,
      'SELECT n.id, (SELECT count(*) FROM workshops w WHERE w.node_id = n.id) AS n FROM nodes n WHERE n.name = $1 AND n.id <> $2',
      [name, opts.id],
    );
    if (holder && Number(holder.n) > 0)
      throw new AtelierError(
        'CONFLICT',
        `the node name ${name} belongs to node ${holder.id}, which still has ${holder.n} workshops (it is down): start this one with another --node-name`,
        { node: name },
      );
    // A name left by a node without workshops (its data dir is gone) is taken over.
    if (holder) await opts.pool.query('DELETE FROM nodes WHERE id = $1', [holder.id]);
    // A new key at every join: a key taken from an old row is worthless once the node is back.
    const key = randomBytes(32).toString('hex');
    const sealed = opts.sealer.encrypt(key, `node-key:${opts.id}`);
    await opts.pool.query(
      `INSERT INTO nodes (id, name, address, version, protocol, min_protocol, schema_version, key_sealed, heartbeat_ms, dead_after_ms)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
       ON CONFLICT (id) DO UPDATE SET name = $2, address = $3, version = $4, protocol = $5, min_protocol = $6,
         schema_version = $7, key_sealed = $8, heartbeat_ms = $9, dead_after_ms = $10, joined_at = now(), heartbeat_at = now()`,
      [
        opts.id,
        name,
        address,
        opts.version,
        NODE_PROTOCOL,
        NODE_MIN_PROTOCOL,
        known.at(-1) ?? '',
        sealed,
        this.heartbeatMs,
        this.deadAfterMs,
      ],
    );
    // Removed by `atelier nodes remove` while it was down (or out of touch): it is a node again,
    // and the workshops that were not deleted meanwhile are back.
    const [was] = await queryRows<RemovedRow>(opts.pool, 'DELETE FROM removed_nodes WHERE id = $1 RETURNING *', [opts.id]);
    if (was)
      opts.log.warn(
        { removedAt: was.removed_at.toISOString(), removedBy: was.removed_by },
        `this node was removed from the installation by ${was.removed_by} on ${was.removed_at.toISOString()}; it joins again, with the workshops not deleted since`,
      );
    // Nodes judge each other by their own timeout: one set unlike the others is said at once.
    const unlike = live.filter((n) => n.dead_after_ms !== null && n.dead_after_ms !== this.deadAfterMs);
    if (unlike.length > 0)
      opts.log.warn(
        { nodes: unlike.map((n) => `${n.name}: ${n.dead_after_ms} ms`) },
        `this node takes a node for dead after ${this.deadAfterMs} ms of silence (ATELIER_NODE_DEAD_AFTER), and ${unlike.map((n) => n.name).join(', ')} after another time: set the same on every node`,
      );
  }

  /** One heartbeat: this node's load, then everyone's rows. */
  beat(): Promise<void> {
    this.beating ??= (async () => {
      try {
        const beat = await this.opts.pool.query(
          `UPDATE nodes SET heartbeat_at = now(), memory_total_bytes = $2, memory_free_bytes = $3,
             workshops = (SELECT count(*) FROM workshops WHERE node_id = $1) WHERE id = $1`,
          [this.opts.id, totalmem(), freemem()],
        );
        // Its row is gone: removed (`atelier nodes remove`) while its heartbeats did not reach the
        // database. It joins again (or says why it cannot), rather than run unknown to the others.
        if (beat.rowCount === 0 && this.address !== undefined) await this.register();
        await Promise.all([this.refresh(), this.opts.publish?.()]);
      } catch (err) {
        this.opts.log.warn({ err: (err as Error).message }, 'node heartbeat failed; trying again');
      } finally {
        this.beating = undefined;
      }
    })();
    return this.beating;
  }

  /** Reads every node's row (and the removed ones') again. */
  async refresh(): Promise<void> {
    const [rows, removed] = await Promise.all([
      queryRows<NodeRow>(this.opts.pool, `${SELECT} ORDER BY name`),
      queryRows<RemovedRow>(this.opts.pool, 'SELECT * FROM removed_nodes'),
    ]);
    this.nodes = new Map(rows.map((r) => [r.id, r]));
    this.removed = new Map(removed.map((r) => [r.id, r]));
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.beating;
  }

  /** Whether a node answered its heartbeats lately (this node always has). */
  isLive(id: string): boolean {
    if (id === this.opts.id) return true;
    const n = this.nodes.get(id);
    return n !== undefined && n.age_ms < this.deadAfterMs;
  }

  /** Whether the node was removed from the installation (`atelier nodes remove`), as last read. */
  isRemoved(id: string): boolean {
    return !this.nodes.has(id) && this.removed.has(id);
  }

  /** The node's name and since when it is silent (and when it was removed), for the workshops it runs. */
  describe(id: string): { name: string; address: string; heartbeatAt: string | null; removedAt: string | null } {
    const n = this.nodes.get(id);
    if (n) return { name: n.name, address: n.address, heartbeatAt: n.heartbeat_at.toISOString(), removedAt: null };
    const r = this.removed.get(id);
    if (r)
      return { name: r.name, address: r.address, heartbeatAt: r.last_heartbeat_at.toISOString(), removedAt: r.removed_at.toISOString() };
    return { name: id, address: '', heartbeatAt: null, removedAt: null };
  }

  private view(n: NodeRow): NodeView {
    return {
      id: n.id,
      name: n.name,
      address: n.address,
      version: n.version,
      protocol: n.protocol,
      schemaVersion: n.schema_version,
      memoryTotalBytes: Number(n.memory_total_bytes),
      memoryFreeBytes: Number(n.memory_free_bytes),
      workshops: n.workshops,
      draining: n.draining,
      state: n.id !== this.opts.id && n.age_ms >= this.deadAfterMs ? 'unreachable' : n.draining ? 'draining' : 'ready',
      heartbeatMs: n.heartbeat_ms,
      deadAfterMs: n.dead_after_ms,
      joinedAt: n.joined_at.toISOString(),
      heartbeatAt: n.heartbeat_at.toISOString(),
      self: n.id === this.opts.id,
    };
  }

  /** Every node of the installation, read now. */
  async list(): Promise<NodeView[]> {
    await this.refresh();
    return [...this.nodes.values()].map((n) => this.view(n));
  }

  /** `atelier nodes drain|undrain N`: no new workshops there (those it runs stay). */
  async setDraining(name: string, draining: boolean): Promise<NodeView> {
    const [row] = await queryRows<{ id: string }>(this.opts.pool, 'UPDATE nodes SET draining = $2 WHERE name = $1 RETURNING id', [
      name,
      draining,
    ]);
    if (!row) throw new AtelierError('NOT_FOUND', `no node named ${name}: run \`atelier nodes list\``, { node: name });
    await this.refresh();
    return this.view(this.nodes.get(row.id)!);
  }

  /**
   * `atelier nodes remove NAME`: takes a dead node out of the installation. Refused for a live
   * node (it would run on, unknown to the others): stop it first. Its workshops keep their rows,
   * shown NodeUnreachable (removed) and deletable from any node; started again, it joins again.
   */
  async remove(name: string, by: string): Promise<NodeRemoval> {
    const client = await this.opts.pool.connect();
    try {
      await client.query('BEGIN');
      // Locked: a heartbeat of that node waits for the answer, and then finds its row gone.
      const [n] = (await client.query<NodeRow>(`${SELECT} WHERE name = $1 FOR UPDATE`, [name])).rows;
      if (!n) {
        const [gone] = (await client.query<RemovedRow>('SELECT * FROM removed_nodes WHERE name = $1', [name])).rows;
        throw new AtelierError(
          'NOT_FOUND',
          gone
            ? `node ${name} was removed already (by ${gone.removed_by} on ${gone.removed_at.toISOString()})`
            : `no node named ${name}: run \`atelier nodes list\``,
          { node: name },
        );
      }
      // Dead by this node's timeout and by its own: never one a node still takes for live.
      const deadAfter = Math.max(this.deadAfterMs, n.dead_after_ms ?? 0);
      if (n.id === this.opts.id || n.age_ms < deadAfter)
        throw new AtelierError(
          'CONFLICT',
          `node ${name} is live (its last heartbeat ${(n.age_ms / 1000).toFixed(1)} s ago${n.id === this.opts.id ? ', and it answered this request' : ''}): ` +
            `only a dead node is removed. Stop it first (\`atelier nodes drain ${name}\` keeps new workshops off it meanwhile), ` +
            `then remove it once it has missed its heartbeats for ${deadAfter / 1000} s`,
          { node: name, heartbeatAt: n.heartbeat_at.toISOString() },
        );
      const [removed] = (
        await client.query<RemovedRow>(
          `INSERT INTO removed_nodes (id, name, address, version, last_heartbeat_at, removed_by) VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (id) DO UPDATE SET name = $2, address = $3, version = $4, last_heartbeat_at = $5, removed_by = $6, removed_at = now()
           RETURNING *`,
          [n.id, n.name, n.address, n.version, n.heartbeat_at, by],
        )
      ).rows;
      await client.query('DELETE FROM nodes WHERE id = $1', [n.id]);
      const workshops = (
        await client.query<{ id: string; name: string; status: string }>(
          'SELECT id, name, status FROM workshops WHERE node_id = $1 ORDER BY created_at',
          [n.id],
        )
      ).rows;
      await client.query('COMMIT');
      this.opts.log.warn({ node: n.name, id: n.id, by, workshops: workshops.length }, 'a dead node was removed from the installation');
      await this.refresh();
      return {
        id: n.id,
        name: n.name,
        address: n.address,
        lastHeartbeatAt: n.heartbeat_at.toISOString(),
        removedAt: removed!.removed_at.toISOString(),
        removedBy: by,
        workshops,
      };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }

  /**
   * Where a new workshop goes: `requested` (a node name, `--node`), or the least loaded accepting
   * node (live and not draining): fewest workshops, then most free memory, then by name.
   */
  async place(requested: string | undefined): Promise<{ id: string; name: string; reason: string }> {
    await this.refresh();
    // Counted now, not at the last heartbeat: two creates in a row go to two nodes.
    const counts = await queryRows<{ node_id: string; n: number }>(
      this.opts.pool,
      "SELECT node_id, count(*)::int AS n FROM workshops WHERE status <> 'Deleting' GROUP BY node_id",
    );
    const all = [...this.nodes.values()].map((n) => ({ ...n, workshops: counts.find((c) => c.node_id === n.id)?.n ?? 0 }));
    if (requested !== undefined) {
      const n = all.find((x) => x.name === requested);
      if (!n) throw new AtelierError('INVALID_ARGUMENT', `no node named ${requested}: run \`atelier nodes list\``, { field: 'node' });
      if (!this.isLive(n.id))
        throw new AtelierError(
          'UNAVAILABLE',
          `node ${requested} has missed its heartbeats since ${n.heartbeat_at.toISOString()}: choose another --node`,
          {
            node: requested,
          },
        );
      if (n.draining)
        throw new AtelierError(
          'PRECONDITION_FAILED',
          `node ${requested} is draining: choose another --node, or \`atelier nodes undrain ${requested}\``,
          {
            node: requested,
          },
        );
      return { id: n.id, name: n.name, reason: `asked for with --node ${n.name}` };
    }
    const accepting = all
      .filter((n) => this.isLive(n.id) && !n.draining)
      .sort(
        (a, b) => a.workshops - b.workshops || Number(b.memory_free_bytes) - Number(a.memory_free_bytes) || a.name.localeCompare(b.name),
      );
    const best = accepting[0];
    if (!best)
      throw new AtelierError(
        'UNAVAILABLE',
        'no node accepts new workshops (all are draining or unreachable): `atelier nodes undrain NAME`',
      );
    const free = (Number(best.memory_free_bytes) / 2 ** 30).toFixed(1);
    return {
      id: best.id,
      name: best.name,
      reason: `least loaded of ${accepting.length} accepting node${accepting.length === 1 ? '' : 's'} (${best.workshops} workshops, ${free} GiB memory free)`,
    };
  }

  /** The id of the member node named `name` (names are unique), as last read. */
  idNamed(name: string): string | undefined {
    for (const n of this.nodes.values()) if (n.name === name) return n.id;
    return undefined;
  }

  /** The address of a node (for the relay). */
  addressOf(id: string): string | undefined {
    return this.nodes.get(id)?.address;
  }

  private async keyOf(id: string, fresh = false): Promise<Buffer | undefined> {
    if (fresh || !this.nodes.has(id)) await this.refresh();
    const row = this.nodes.get(id);
    if (!row) return undefined;
    const cached = this.keys.get(id);
    if (cached?.sealed === row.key_sealed) return cached.key;
    const key = Buffer.from(this.opts.sealer.decrypt(row.key_sealed, `node-key:${id}`).toString('utf8'), 'hex');
    this.keys.set(id, { sealed: row.key_sealed, key });
    return key;
  }

  private static payload(h: Record<string, string>, method: string, url: string): string {
    return [
      h[NODE_HEADERS.node],
      h[NODE_HEADERS.target],
      h[NODE_HEADERS.time],
      h[NODE_HEADERS.nonce],
      method.toUpperCase(),
      url,
      h[NODE_HEADERS.principal],
      h[NODE_HEADERS.placement] ?? '',
      // Only when there is one: a request without it is signed as by protocol 1.
      ...(h[NODE_HEADERS.body] === undefined ? [] : [h[NODE_HEADERS.body]]),
    ].join('\n');
  }

  /** Whether node `id` checks a signed body (protocol 2 and later), as last read. */
  checksBodies(id: string): boolean {
    return (this.nodes.get(id)?.protocol ?? 0) >= 2;
  }

  /**
   * The headers that carry a request to node `target` with the caller's identity, signed with
   * this node's key; with `body` (read whole, for a node that checksBodies), its digest too.
   */
  async sign(
    target: string,
    method: string,
    url: string,
    principal: Principal,
    placement?: string,
    body?: Buffer,
  ): Promise<Record<string, string>> {
    const key = await this.keyOf(this.opts.id);
    if (!key) throw new AtelierError('INTERNAL', 'this node is not registered');
    const h: Record<string, string> = {
      [NODE_HEADERS.node]: this.opts.id,
      [NODE_HEADERS.target]: target,
      [NODE_HEADERS.time]: String(Date.now()),
      [NODE_HEADERS.nonce]: randomBytes(12).toString('hex'),
      [NODE_HEADERS.principal]: Buffer.from(JSON.stringify(principal)).toString('base64url'),
    };
    if (placement !== undefined) h[NODE_HEADERS.placement] = encodeURIComponent(placement);
    if (body !== undefined) h[NODE_HEADERS.body] = `${body.length}:${createHash('sha256').update(body).digest('hex')}`;
    h[NODE_HEADERS.signature] = createHmac('sha256', key)
      .update(NodeRegistry.payload(h, method, url))
      .digest('hex');
    return h;
  }

  /** Whether a request says it comes from a node (then it must verify). */
  static isNodeRequest(headers: Record<string, string | string[] | undefined>): boolean {
    return Object.values(NODE_HEADERS).some((h) => headers[h] !== undefined);
  }

  /**
   * The caller's identity (and the placement, on a relayed create) of a request another node
   * signed; refused unless its signature is by a node of this installation, for this node, recent
   * and not seen before.
   */
  async verify(
    method: string,
    url: string,
    headers: Record<string, string | string[] | undefined>,
  ): Promise<{ principal: Principal; placement: string | undefined; from: string; body: SignedBody | undefined }> {
    const refuse = (why: string): never => {
      throw new AtelierError('UNAUTHENTICATED', `node-to-node request refused: ${why}`);
    };
    const h: Record<string, string> = {};
    for (const name of Object.values(NODE_HEADERS)) {
      const v = headers[name];
      if (Array.isArray(v)) refuse(`${name} sent twice`);
      if (typeof v === 'string') h[name] = v;
    }
    const from = h[NODE_HEADERS.node];
    const signature = h[NODE_HEADERS.signature];
    if (!from || !signature || !h[NODE_HEADERS.target] || !h[NODE_HEADERS.time] || !h[NODE_HEADERS.nonce] || !h[NODE_HEADERS.principal])
      refuse('its node headers are incomplete');
    if (h[NODE_HEADERS.target] !== this.opts.id) refuse('it was meant for another node');
    const time = Number(h[NODE_HEADERS.time]);
    if (!Number.isFinite(time) || Math.abs(Date.now() - time) > SIGNATURE_WINDOW_MS)
      refuse('its signature is too old (or the clocks of the nodes differ)');
    const expected = async (fresh: boolean): Promise<Buffer | undefined> => {
      const key = await this.keyOf(from!, fresh);
      return (
        key &&
        createHmac('sha256', key)
          .update(NodeRegistry.payload(h, method, url))
          .digest()
      );
    };
    const given = Buffer.from(signature!, 'hex');
    const matches = (e: Buffer | undefined): boolean => e !== undefined && e.length === given.length && timingSafeEqual(e, given);
    // A node that joined again since we read its key signs with a new one: read once more.
    if (!matches(await expected(false)) && !matches(await expected(true))) refuse('it is not signed by a node of this installation');
    this.forgetOld();
    if (this.seen.has(signature!)) refuse('it was replayed');
    this.seen.set(signature!, time);
    let principal: Principal;
    try {
      principal = JSON.parse(Buffer.from(h[NODE_HEADERS.principal]!, 'base64url').toString('utf8')) as Principal;
    } catch {
      return refuse('its principal is not JSON');
    }
    const placement = h[NODE_HEADERS.placement];
    let body: SignedBody | undefined;
    const digest = h[NODE_HEADERS.body];
    if (digest !== undefined) {
      const m = /^(\d{1,12}):([0-9a-f]{64})$/.exec(digest);
      if (!m) return refuse(`its ${NODE_HEADERS.body} is not LENGTH:SHA256`);
      // Checked as the body is read (the server's preParsing hook); its length already here.
      if (headers['content-length'] !== m[1]) refuse('its body is not the one it was signed with (another length)');
      body = { length: Number(m[1]), sha256: m[2]! };
    }
    return { principal, placement: placement === undefined ? undefined : decodeURIComponent(placement), from: from!, body };
  }

  private forgetOld(): void {
    const oldest = Date.now() - 2 * SIGNATURE_WINDOW_MS;
    for (const [s, t] of this.seen) {
      if (t >= oldest) break;
      this.seen.delete(s);
    }
  }
}
