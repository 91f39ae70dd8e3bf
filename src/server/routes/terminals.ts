import type { Socket } from 'node:net';
import { createWebSocketStream, type RawData, type WebSocket } from 'ws';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  AddSshKeyRequest,
  AtelierError,
  PtyStart,
  StartSessionRequest,
  TUNNEL_ID_HEADER,
  TUNNEL_MODE_HEADER,
  TUNNEL_MODE_RAW,
  TUNNEL_PROTOCOL,
  TUNNEL_RESUMED_HEADER,
  type TunnelOutcome,
} from '../../core/index.js';
import type { RouteAccess } from '../../identity/index.js';
import { attachPty, bridgeSocket, failSocket, sendEvent, SSH_PORT, type OpenTarget, type Terminals } from '../../terminals/index.js';
import { approvalWhat, parse, principalOf } from './common.js';

const OPERATE: RouteAccess = { role: 'member', agent: true };
const READ: RouteAccess = { role: 'viewer', agent: true };
/** SSH keys belong to a person: agent tokens have no use for them. */
const USER: RouteAccess = { role: 'viewer' };

/** A PTY WebSocket must say what to run within this time. */
const START_TIMEOUT_MS = 10_000;

type IdParams = { Params: { id: string } };
type TunnelQuery = { Querystring: { port?: unknown; resume?: unknown } };

function boolParam(value: unknown, name: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (value === 'true' || value === '1') return true;
  if (value === 'false' || value === '0') return false;
  throw new AtelierError('INVALID_ARGUMENT', `query parameter ${name} must be true or false, given once`, { field: name });
}

function portParam(value: unknown): number {
  const n = typeof value === 'string' && /^\d{1,5}$/.test(value) ? Number(value) : NaN;
  if (!(n >= 1 && n <= 65535))
    throw new AtelierError('INVALID_ARGUMENT', 'query parameter port must be a TCP port from 1 to 65535, given once', { field: 'port' });
  return n;
}

function upgradeRequired(): never {
  throw new AtelierError(
    'UPGRADE_REQUIRED',
    'this endpoint is a WebSocket: connect with `Upgrade: websocket` (the CLI does: `atelier ssh`, `atelier port-forward`)',
  );
}

/** Whether this is an `Upgrade: atelier-tunnel` request (false: a WebSocket, a plain GET). */
function streamUpgrade(request: FastifyRequest): boolean {
  if (String(request.headers.upgrade ?? '').toLowerCase() !== TUNNEL_PROTOCOL) return false;
  const mode = String(request.headers[TUNNEL_MODE_HEADER] ?? '').toLowerCase();
  if (mode === TUNNEL_MODE_RAW) return true;
  throw new AtelierError(
    'INVALID_ARGUMENT',
    `an \`Upgrade: ${TUNNEL_PROTOCOL}\` request must ask for a raw tunnel (\`${TUNNEL_MODE_HEADER}: ${TUNNEL_MODE_RAW}\`); an older CLI does not: update it`,
    { field: TUNNEL_MODE_HEADER },
  );
}

/** Bytes that came after the upgrade request's headers (kept by @fastify/websocket on the raw request). */
function upgradeHead(raw: FastifyRequest['raw']): Buffer {
  const key = Object.getOwnPropertySymbols(raw).find((s) => s.description === 'ws-head');
  const head = key ? (raw as unknown as Record<symbol, unknown>)[key] : undefined;
  return Buffer.isBuffer(head) ? head : Buffer.alloc(0);
}

/** What the preHandler prepared for a WebSocket route, before the upgrade. */
interface Prepared {
  target: OpenTarget;
  socket?: Socket;
  /** Hands `socket` over (to a relay): the client's socket closing no longer destroys it. */
  release?: () => void;
}
const prepared = new WeakMap<FastifyRequest, Prepared>();

function firstMessage(ws: WebSocket, timeoutMs: number): Promise<RawData | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), timeoutMs);
    ws.once('message', (data) => {
      clearTimeout(timer);
      resolve(data);
    });
    ws.once('close', () => {
      clearTimeout(timer);
      resolve(undefined);
    });
  });
}

/**
 * Terminals and tunnels over HTTP: PTY and TCP-tunnel WebSockets into a workshop, the raw tunnel
 * (`Upgrade: atelier-tunnel`), its SSH endpoint (a tunnel to port 22), the SSH keys users
 * register, and agent sessions that outlive their client. The work is the terminals room's.
 */
export function terminalRoutes(app: FastifyInstance, terminals: Terminals): void {
  /**
   * While a terminal is attached to a workshop, anything that workshop asks a human for (a held
   * egress request, a command, a secret…) is announced to it in one event; the CLI prints the
   * line with the command that approves it.
   */
  const announceApprovals = (ws: WebSocket, workshopId: string): void => {
    const stop = terminals.onApproval(workshopId, (a) =>
      sendEvent(ws, { type: 'approval', id: a.id, category: a.category, what: approvalWhat(a.payload) }),
    );
    ws.once('close', stop);
  };
  // Upgraded connections are not the HTTP server's any more, yet it waits for them to close:
  // reset them first (clients then say "the tunnel was cut"), as @fastify/websocket closes its sockets.
  app.addHook('preClose', (done) => {
    terminals.cutTunnels();
    done();
  });

  /** Authorises and finds the running sandbox (resuming unless ?resume=false) before any upgrade. */
  const prepare = async (request: FastifyRequest<IdParams & TunnelQuery>, withPort: boolean, upgrade: boolean): Promise<void> => {
    const actor = principalOf(request);
    const port = withPort ? portParam(request.query.port) : undefined;
    const resume = boolParam(request.query.resume, 'resume', true);
    if (!upgrade) {
      await terminals.authorize(request.params.id, actor);
      return;
    }
    const target = await terminals.target(request.params.id, actor, { resume });
    if (port === undefined || port === SSH_PORT) {
      prepared.set(request, { target });
      return;
    }
    // The remote port must answer before the client is told the tunnel is up.
    const socket = await terminals.dial(target, port);
    // Never left open inside the workshop by a client that went away before the upgrade.
    const drop = (): void => void socket.destroy();
    request.raw.socket.once('close', drop);
    if (request.raw.socket.destroyed) socket.destroy();
    prepared.set(request, { target, socket, release: () => request.raw.socket.off('close', drop) });
  };

  app.route<IdParams & TunnelQuery>({
    method: 'GET',
    url: '/v1/workshops/:id/pty',
    config: { access: OPERATE },
    preHandler: async (request) => prepare(request, false, !!(request as FastifyRequest & { ws?: boolean }).ws),
    handler: async () => upgradeRequired(),
    wsHandler: async (ws: WebSocket, request: FastifyRequest) => {
      const p = prepared.get(request)!;
      const first = await firstMessage(ws, START_TIMEOUT_MS);
      if (first === undefined) return failSocket(ws, 'INVALID_ARGUMENT', 'send {type: "start", cols, rows} first');
      let start: PtyStart;
      try {
        start = parse(PtyStart, JSON.parse(first.toString()));
      } catch (err) {
        return failSocket(ws, 'INVALID_ARGUMENT', err instanceof AtelierError ? err.message : 'the first message must be JSON');
      }
      const session = terminals.startPty(p.target, start.command ?? ['/bin/bash', '-l'], start);
      sendEvent(ws, { type: 'started', resumed: p.target.resumed });
      announceApprovals(ws, (request.params as { id: string }).id);
      void attachPty(ws, session, { replay: false }).then(() => session.close());
      session.onExit((e) => {
        // Output still queued in the kernel is read before the exit event (node-pty waits for the PTY to close).
        sendEvent(ws, { type: 'exit', exitCode: e.exitCode, signal: e.signal });
        ws.close(1000);
      });
    },
  });

  app.route<IdParams & TunnelQuery>({
    method: 'GET',
    url: '/v1/workshops/:id/tunnel',
    config: { access: OPERATE },
    preHandler: async (request, reply) => {
      const stream = streamUpgrade(request);
      await prepare(request, true, stream || !!(request as FastifyRequest & { ws?: boolean }).ws);
      if (!stream) return;
      // `Upgrade: atelier-tunnel` (the CLI): the connection itself becomes the tunnel, raw bytes.
      const p = prepared.get(request)!;
      const socket = request.raw.socket as Socket;
      const id = terminals.newTunnelId();
      reply.hijack();
      const head = upgradeHead(request.raw);
      socket.write(
        `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${TUNNEL_PROTOCOL}\r\n${TUNNEL_MODE_HEADER}: ${TUNNEL_MODE_RAW}\r\n` +
          `${TUNNEL_ID_HEADER}: ${id}\r\n${TUNNEL_RESUMED_HEADER}: ${p.target.resumed}\r\n\r\n`,
      );
      if (p.socket) {
        p.release?.();
        return terminals.relay(id, p.target.id, socket, p.socket, head);
      }
      // Port 22: the workshop's SSH endpoint, for the user the tunnel authenticated.
      terminals.serveSsh(id, socket, head, p.target, principalOf(request).userId);
    },
    handler: async () => upgradeRequired(),
    wsHandler: async (ws: WebSocket, request: FastifyRequest) => {
      const p = prepared.get(request)!;
      sendEvent(ws, { type: 'connected', resumed: p.target.resumed });
      if (p.socket) return bridgeSocket(ws, p.socket);
      // Port 22: the workshop's SSH endpoint, for the user the tunnel authenticated.
      const stream = createWebSocketStream(ws);
      stream.on('error', () => undefined);
      await terminals.serveSshStream(stream, p.target, principalOf(request).userId).catch((err: Error) => {
        failSocket(ws, 'UNAVAILABLE', `the SSH endpoint could not start: ${err.message}`);
      });
    },
  });

  // Why a raw tunnel ended: asked by a client that saw its tunnel reset.
  app.get<IdParams & { Params: { tunnel: string } }>(
    '/v1/workshops/:id/tunnels/:tunnel',
    { config: { access: OPERATE } },
    async (request): Promise<TunnelOutcome> => terminals.tunnelOutcome(request.params.id, request.params.tunnel, principalOf(request)),
  );

  app.get<IdParams>('/v1/workshops/:id/ssh', { config: { access: READ } }, async (request) =>
    terminals.sshInfo(request.params.id, principalOf(request)),
  );

  app.post('/v1/ssh/keys', { config: { access: USER } }, async (request, reply) => {
    const body = parse(AddSshKeyRequest, request.body);
    const key = await terminals.addSshKey(principalOf(request).userId, body.publicKey);
    if (!key)
      throw new AtelierError(
        'INVALID_ARGUMENT',
        'publicKey must be one OpenSSH public key line (ssh-ed25519 AAAA…, ssh-rsa, ecdsa-sha2-…)',
        {
          field: 'publicKey',
        },
      );
    return reply.status(201).send(key);
  });
  app.get('/v1/ssh/keys', { config: { access: USER } }, async (request) => ({
    items: await terminals.sshKeys(principalOf(request).userId),
  }));
  app.delete<{ Params: { fingerprint: string } }>('/v1/ssh/keys/:fingerprint', { config: { access: USER } }, async (request) => {
    const fingerprint = request.params.fingerprint;
    if (!(await terminals.removeSshKey(principalOf(request).userId, fingerprint)))
      throw new AtelierError('NOT_FOUND', `no SSH key ${fingerprint} is registered for you: see \`GET /v1/ssh/keys\``);
    return { fingerprint, deleted: true };
  });

  // Agent sessions: a PTY that outlives its client, reattached with its recent output.
  app.post<IdParams>('/v1/workshops/:id/sessions', { config: { access: OPERATE } }, async (request, reply) => {
    const body = parse(StartSessionRequest, request.body);
    const r = await terminals.startSession(request.params.id, principalOf(request), body);
    return reply.status(r.created ? 201 : 200).send(r.session);
  });
  app.get<IdParams>('/v1/workshops/:id/sessions', { config: { access: READ } }, async (request) => ({
    items: await terminals.listSessions(request.params.id, principalOf(request)),
  }));
  app.delete<IdParams & { Params: { name: string } }>(
    '/v1/workshops/:id/sessions/:name',
    { config: { access: OPERATE } },
    async (request) => terminals.stopSession(request.params.id, request.params.name, principalOf(request)),
  );
  app.route<IdParams & { Params: { name: string } } & TunnelQuery>({
    method: 'GET',
    url: '/v1/workshops/:id/sessions/:name/attach',
    config: { access: OPERATE },
    preHandler: async (request: FastifyRequest<IdParams & { Params: { name: string } } & TunnelQuery>, _reply: FastifyReply) => {
      const actor = principalOf(request);
      const resume = boolParam(request.query.resume, 'resume', true);
      const target = await terminals.findSession(request.params.id, request.params.name, actor, { resume });
      if (!(request as FastifyRequest & { ws?: boolean }).ws) return;
      prepared.set(request, { target });
    },
    handler: async () => upgradeRequired(),
    wsHandler: async (ws: WebSocket, request: FastifyRequest<IdParams & { Params: { name: string } }>) => {
      const p = prepared.get(request)!;
      const session = terminals.session(request.params.id, request.params.name);
      if (!session) return failSocket(ws, 'NOT_FOUND', `session ${request.params.name} has ended`);
      sendEvent(ws, { type: 'started', resumed: p.target.resumed, session: request.params.name });
      announceApprovals(ws, request.params.id);
      const onExit = (e: { exitCode: number; signal: string | null }): void => {
        sendEvent(ws, { type: 'exit', exitCode: e.exitCode, signal: e.signal });
        ws.close(1000);
      };
      // Detaching (the client goes away) leaves the session running.
      void attachPty(ws, session, { replay: true });
      session.onExit(onExit);
    },
  });
}
