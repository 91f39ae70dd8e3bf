import http from 'node:http';
import { mkdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import type { Pool } from '../db/index.js';

/** The connections that came in through a workshop's own `mcp.atelier.internal`, and from which workshop. */
const origins = new WeakMap<net.Socket, string>();

/** The workshop a connection came from, when it came through the in-workshop endpoint (else undefined). */
export function workshopOfConnection(socket: net.Socket | undefined): string | undefined {
  return socket ? origins.get(socket) : undefined;
}

/** How often listeners of workshops deleted by another server (or while this one was down) are looked for. */
const SWEEP_MS = 60_000;

export interface McpGatewayOptions {
  /** Where the per-workshop sockets live (a directory only the server reaches). */
  dir: string;
  pool: Pool;
  /** Unseals a workshop's agent token (`workshops.agent_token`). */
  unseal(sealed: string, workshopId: string): string;
  /** Fastify's request handler (`app.routing`): the gateway's requests go through the same routes and hooks. */
  route(req: http.IncomingMessage, res: http.ServerResponse): void;
  log: { warn(obj: object, msg?: string): void };
}

/**
 * `mcp.atelier.internal` (port 80) inside each workshop: a unix socket per workshop, the target of
 * that workshop's internal-network listener and of its egress proxy's route for the name. The
 * socket is the workshop's identity: a request that comes through it is tagged with the workshop,
 * and one without an Authorization header is authenticated as the workshop's own agent token (the
 * server holds it sealed), so an agent's MCP configuration needs no secret. A request that brings
 * a token must bring that same workshop's agent token (the /mcp route checks it). Only `/mcp` is
 * served here; the rest of the API stays at api.atelier.internal, with ATELIER_TOKEN.
 */
export class McpGateway {
  private readonly listeners = new Map<string, net.Server>();
  private readonly tokens = new Map<string, string>();
  private readonly http: http.Server;
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly opts: McpGatewayOptions) {
    rmSync(opts.dir, { recursive: true, force: true });
    mkdirSync(opts.dir, { recursive: true, mode: 0o700 });
    this.http = http.createServer((req, res) => void this.serve(req, res));
    this.http.on('clientError', (_err, socket) => socket.destroy());
    this.sweeper = setInterval(() => void this.sweep(), SWEEP_MS);
    this.sweeper.unref();
  }

  /** The target of the workshop's `mcp` internal service (its socket, listening from now on). */
  target(workshopId: string): { path: string } {
    const path = join(this.opts.dir, `${workshopId}.sock`);
    if (!this.listeners.has(workshopId)) {
      const server = net.createServer((socket) => {
        origins.set(socket, workshopId);
        this.http.emit('connection', socket);
      });
      server.on('error', (err) => this.opts.log.warn({ workshop: workshopId, err: err.message }, 'MCP endpoint listener failed'));
      rmSync(path, { force: true });
      // A unix socket binds synchronously: the path accepts connections when this returns.
      server.listen(path);
      this.listeners.set(workshopId, server);
    }
    return { path };
  }

  private async serve(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const workshopId = workshopOfConnection(req.socket);
    const path = (req.url ?? '').split('?')[0];
    if (!workshopId || (path !== '/mcp' && path !== '/mcp/')) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          code: 'NOT_FOUND',
          message: `mcp.atelier.internal serves only /mcp (the MCP endpoint); the API is at $ATELIER_URL with $ATELIER_TOKEN`,
        }),
      );
      return;
    }
    if (req.headers.authorization === undefined) {
      try {
        const token = await this.tokenOf(workshopId);
        if (token) req.headers.authorization = `Bearer ${token}`;
      } catch (err) {
        this.opts.log.warn({ workshop: workshopId, err: (err as Error).message }, 'workshop token cannot be read for its MCP endpoint');
      }
    }
    this.opts.route(req, res);
  }

  private async tokenOf(workshopId: string): Promise<string | undefined> {
    const known = this.tokens.get(workshopId);
    if (known) return known;
    const r = await this.opts.pool.query<{ agent_token: string | null }>('SELECT agent_token FROM workshops WHERE id = $1', [workshopId]);
    const sealed = r.rows[0]?.agent_token;
    if (!sealed) return undefined;
    const token = this.opts.unseal(sealed, workshopId);
    this.tokens.set(workshopId, token);
    return token;
  }

  /** Closes the listeners of workshops that no longer exist. */
  private async sweep(): Promise<void> {
    const ids = [...this.listeners.keys()];
    if (ids.length === 0) return;
    try {
      const r = await this.opts.pool.query<{ id: string }>('SELECT id FROM workshops WHERE id = ANY($1)', [ids]);
      const alive = new Set(r.rows.map((x) => x.id));
      for (const id of ids) if (!alive.has(id)) this.forget(id);
    } catch {
      // database down: next time
    }
  }

  /** Closes a workshop's endpoint and forgets its token (its workshop was deleted). */
  forget(workshopId: string): void {
    this.listeners.get(workshopId)?.close();
    this.listeners.delete(workshopId);
    this.tokens.delete(workshopId);
    rmSync(join(this.opts.dir, `${workshopId}.sock`), { force: true });
  }

  close(): void {
    clearInterval(this.sweeper);
    for (const id of [...this.listeners.keys()]) this.forget(id);
    this.http.closeAllConnections();
    this.http.close();
  }
}
