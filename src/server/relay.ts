import http, { type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AtelierError, isErrorCode } from '../core/index.js';
import type { Principal } from '../identity/index.js';
import { relaySpliced } from '../relay/index.js';
import { NODE_HEADERS, type NodeRegistry } from './nodes.js';

/**
 * The relay between nodes (docs/replicas.md): a request for a workshop that another node runs is
 * sent there as it came, raw (the body streamed, an upgrade piped both ways), with the caller's
 * identity in headers signed by this node's key instead of the caller's credentials. One generic
 * path for every such route, so no route has code of its own for it.
 */

// Kept-alive connections to the other nodes: a relayed exec costs no TCP handshake, and its
// request and answer are written at once (no Nagle delay on a small request behind another).
const agents = {
  'http:': new http.Agent({ keepAlive: true, maxSockets: 256, noDelay: true }),
  'https:': new https.Agent({ keepAlive: true, maxSockets: 256, noDelay: true }),
};

// Never forwarded: hop-by-hop headers, the caller's credentials (the signed principal replaces
// them) and any node header the caller sent.
const DROP = new Set<string>([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'host',
  'authorization',
  'cookie',
  'x-atelier-tenant',
  ...Object.values(NODE_HEADERS),
]);

function forwardHeaders(from: IncomingHttpHeaders, signed: Record<string, string>): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(from)) if (v !== undefined && !DROP.has(k)) out[k] = v;
  return { ...out, ...signed };
}

function errorBody(err: AtelierError, requestId: string): string {
  return JSON.stringify(err.toBody(requestId));
}

/** The installation as a server sees it: where workshops run, where new ones go, and the way to the others. */
export class Cluster {
  constructor(readonly nodes: NodeRegistry) {}

  get nodeId(): string {
    return this.nodes.id;
  }

  /**
   * A JSON request of this node's own to node `nodeId`'s API (not a caller's: a controller that
   * acts where a workshop runs), as `principal`, signed as a relayed request is; the parsed
   * answer, or the node's AtelierError. `what` names what runs there, for the errors of a node
   * that is gone.
   */
  call<T>(nodeId: string, principal: Principal, opts: { what: string; method: string; path: string; body?: unknown }): Promise<T> {
    return callNode<T>(this, nodeId, principal, opts);
  }

  isLive(nodeId: string): boolean {
    return this.nodes.isLive(nodeId);
  }

  /** Node `nodeId`'s address, or why nothing can be asked of it now (removed, or silent). */
  targetOf(nodeId: string, what: string): URL {
    const address = this.nodes.addressOf(nodeId);
    const { name, heartbeatAt, removedAt } = this.nodes.describe(nodeId);
    if (removedAt !== null)
      throw new AtelierError(
        'WORKSHOP_NOT_RUNNING',
        `${what} ran on node ${name}, removed from the installation on ${removedAt} (\`atelier nodes remove\`): nothing of it can run until ${name} is started again with its data dir; \`atelier workshops delete\` forgets it`,
        { node: name },
      );
    if (!address || !this.nodes.isLive(nodeId))
      throw new AtelierError(
        'UNAVAILABLE',
        `${what} runs on node ${name}, which has missed its heartbeats since ${heartbeatAt ?? 'it joined'}: nothing is lost; try again when it is back (\`atelier nodes list\`)`,
        { node: name },
      );
    return new URL(address);
  }

  /**
   * Sends the request to node `nodeId` and its answer back to the caller (the reply is hijacked).
   * `body`: the request's body when it was read already (a create); otherwise it is streamed.
   */
  async forward(
    request: FastifyRequest,
    reply: FastifyReply,
    nodeId: string,
    principal: Principal,
    opts: { what: string; placement?: string; body?: Buffer; url?: string },
  ): Promise<void> {
    const base = this.targetOf(nodeId, opts.what);
    const raw = request.raw;
    // `url`: the request's own with the workshop's id for the name it may give (resolved here,
    // and signed: the owner has nothing to look up again).
    const url = opts.url ?? raw.url ?? '/';
    // A body read whole is signed with the rest (the owner refuses it changed on the way): a
    // create's, and a JSON body of at most SIGNED_BODY_MAX, which the owner would read whole
    // anyway. Anything else (files, larger bodies, upgrades) streams through unsigned.
    let body = opts.body;
    if (body === undefined && raw.headers.upgrade === undefined && this.nodes.checksBodies(nodeId)) body = await wholeJsonBody(raw);
    const signed = await this.nodes.sign(
      nodeId,
      raw.method ?? 'GET',
      url,
      principal,
      opts.placement,
      body !== undefined && this.nodes.checksBodies(nodeId) ? body : undefined,
    );
    reply.hijack();
    if (raw.headers.upgrade !== undefined) return relayUpgrade(raw, url, raw.socket, upgradeHead(raw), base, signed, String(request.id));
    const headers = forwardHeaders(raw.headers, signed);
    if (body) {
      headers['content-length'] = String(body.length);
      if (opts.body) headers['content-type'] = 'application/json';
    }
    relayHttp(raw, url, reply.raw, base, headers, String(request.id), body);
  }
}

/** Cluster.call. */
async function callNode<T>(
  cluster: Cluster,
  nodeId: string,
  principal: Principal,
  opts: { what: string; method: string; path: string; body?: unknown },
): Promise<T> {
  const base = cluster.targetOf(nodeId, opts.what);
  const payload = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body));
  const signed = await cluster.nodes.sign(
    nodeId,
    opts.method,
    opts.path,
    principal,
    undefined,
    payload && cluster.nodes.checksBodies(nodeId) ? payload : undefined,
  );
  const headers: OutgoingHttpHeaders = { ...signed, accept: 'application/json' };
  if (payload) Object.assign(headers, { 'content-type': 'application/json', 'content-length': String(payload.length) });
  const { status, text } = await new Promise<{ status: number; text: string }>((resolve, reject) => {
    const mod = base.protocol === 'https:' ? https : http;
    const req = mod.request(
      { ...endpoint(base), path: opts.path, method: opts.method, headers, agent: agents[base.protocol === 'https:' ? 'https:' : 'http:'] },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 502, text: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', (err) => reject(unreachable(err)));
      },
    );
    req.setTimeout(300_000, () => req.destroy(new Error('no answer within 5 minutes')));
    req.on('error', (err) => reject(unreachable(err)));
    req.end(payload);
  });
  let parsed: { code?: unknown; message?: string } | undefined;
  try {
    parsed = text ? (JSON.parse(text) as typeof parsed) : undefined;
  } catch {
    parsed = undefined;
  }
  if (status >= 400)
    throw new AtelierError(
      isErrorCode(parsed?.code) ? parsed.code : 'UNAVAILABLE',
      parsed?.message ?? `node ${cluster.nodes.describe(nodeId).name} answered ${status}: ${text.slice(0, 200)}`,
    );
  return parsed as T;
}

/** The most of a JSON body a relaying node reads whole to sign it (the server's own body limit). */
const SIGNED_BODY_MAX = 1 << 20;

/**
 * The request's body, read whole, when it is JSON with a length of at most SIGNED_BODY_MAX
 * (every request of the CLI and the SDK but a large exec stdin); otherwise undefined, the body
 * left to stream.
 */
function wholeJsonBody(raw: IncomingMessage): Promise<Buffer | undefined> | undefined {
  const length = Number(raw.headers['content-length']);
  if (!/^application\/json\b/i.test(raw.headers['content-type'] ?? '') || raw.headers['transfer-encoding'] !== undefined) return undefined;
  if (!Number.isSafeInteger(length) || length <= 0 || length > SIGNED_BODY_MAX) return undefined;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    raw.on('data', (c: Buffer) => chunks.push(c));
    raw.once('end', () => resolve(Buffer.concat(chunks)));
    raw.once('error', reject);
    raw.once('aborted', () => reject(new AtelierError('INVALID_ARGUMENT', 'the request was cut short before its body ended')));
  });
}

/** Bytes that came after the upgrade request's headers (kept by @fastify/websocket on the raw request). */
function upgradeHead(raw: IncomingMessage): Buffer {
  const key = Object.getOwnPropertySymbols(raw).find((s) => s.description === 'ws-head');
  const head = key ? (raw as unknown as Record<symbol, unknown>)[key] : undefined;
  return Buffer.isBuffer(head) ? head : Buffer.alloc(0);
}

/** Where a node is, as http.request takes it (the path is the relayed request's). */
function endpoint(base: URL): { protocol: string; hostname: string; port: string } {
  // An IPv6 address comes bracketed in a URL, and bare to http.request.
  return { protocol: base.protocol, hostname: base.hostname.replace(/^\[(.*)\]$/, '$1'), port: base.port };
}

function unreachable(err: Error): AtelierError {
  return new AtelierError('UNAVAILABLE', `the workshop's node did not answer (${err.message}): try again in a few seconds`);
}

function relayHttp(
  raw: IncomingMessage,
  url: string,
  res: ServerResponse,
  base: URL,
  headers: OutgoingHttpHeaders,
  requestId: string,
  body?: Buffer,
): void {
  const mod = base.protocol === 'https:' ? https : http;
  const up = mod.request(
    { ...endpoint(base), path: url, method: raw.method, headers, agent: agents[base.protocol === 'https:' ? 'https:' : 'http:'] },
    (answer) => {
      const out: OutgoingHttpHeaders = {};
      for (const [k, v] of Object.entries(answer.headers))
        if (v !== undefined && k !== 'connection' && k !== 'transfer-encoding' && k !== 'keep-alive') out[k] = v;
      res.writeHead(answer.statusCode ?? 502, out);
      answer.pipe(res);
      answer.on('error', () => res.destroy());
    },
  );
  up.on('error', (err) => {
    if (res.headersSent) return void res.destroy();
    res
      .writeHead(503, { 'content-type': 'application/json; charset=utf-8', 'retry-after': '1' })
      .end(errorBody(unreachable(err), requestId));
  });
  // The caller went away: so does the relayed request (an exec stops as it would on the owner).
  res.on('close', () => {
    if (!res.writableFinished) up.destroy();
  });
  if (body) up.end(body);
  else raw.pipe(up);
}

function headLines(statusCode: number, statusMessage: string, rawHeaders: string[]): string {
  let s = `HTTP/1.1 ${statusCode} ${statusMessage}\r\n`;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) s += `${rawHeaders[i]}: ${rawHeaders[i + 1]}\r\n`;
  return `${s}\r\n`;
}

function relayUpgrade(
  raw: IncomingMessage,
  url: string,
  socket: Socket,
  head: Buffer,
  base: URL,
  signed: Record<string, string>,
  requestId: string,
): void {
  const mod = base.protocol === 'https:' ? https : http;
  const headers = forwardHeaders(raw.headers, signed);
  headers.connection = 'Upgrade';
  headers.upgrade = raw.headers.upgrade;
  const up = mod.request({ ...endpoint(base), path: url, method: raw.method, headers, agent: false });
  up.setNoDelay(true);
  const onClientError = (): void => void up.destroy();
  socket.on('error', onClientError);
  up.on('upgrade', (answer, upSocket: Socket, upHead: Buffer) => {
    // The owner's 101 and what followed it go first; then both ways through the splice relay
    // (zero copy, as the owner relays its tunnels), a reset on one side passed on to the other.
    const head101 = Buffer.from(headLines(answer.statusCode ?? 101, answer.statusMessage ?? 'Switching Protocols', answer.rawHeaders));
    relaySpliced(socket, upSocket, { tag: `node-relay-${requestId}`, fromA: head, fromB: Buffer.concat([head101, upHead]) });
  });
  // Refused by the owner (401, 404, 409…): its answer as it is, then the connection ends.
  up.on('response', (answer) => {
    const pairs: string[] = [];
    for (let i = 0; i + 1 < answer.rawHeaders.length; i += 2)
      if (!/^(connection|transfer-encoding|keep-alive|content-length)$/i.test(answer.rawHeaders[i]!))
        pairs.push(answer.rawHeaders[i]!, answer.rawHeaders[i + 1]!);
    const chunks: Buffer[] = [];
    answer.on('data', (c: Buffer) => chunks.push(c));
    answer.on('end', () => {
      const body = Buffer.concat(chunks);
      socket.end(
        Buffer.concat([
          Buffer.from(
            headLines(answer.statusCode ?? 502, answer.statusMessage ?? '', [
              ...pairs,
              'content-length',
              String(body.length),
              'connection',
              'close',
            ]),
          ),
          body,
        ]),
      );
    });
    answer.on('error', () => socket.destroy());
  });
  up.on('error', (err) => {
    if (socket.destroyed) return;
    const body = errorBody(unreachable(err), requestId);
    socket.end(
      `HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  });
  up.end();
}
