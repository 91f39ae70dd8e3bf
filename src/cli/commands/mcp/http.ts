import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { AtelierError } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';
import { cliApi, servesWhat, type ServeFlags } from './serve.js';

/** A request body larger than this is refused (413): the largest tool call is a 4 MiB file write, base64. */
const MAX_BODY_BYTES = 8 << 20;
/** Open MCP sessions at once; one more initialize is refused (503) until one ends. */
const MAX_SESSIONS = 64;
/** The file the generated bearer token is written to (0600), under the CLI's config dir. */
export const TOKEN_FILE = 'mcp-http.token';

/** `[HOST:]PORT` → host and port; loopback when no host is given. */
export function parseListen(value: string): { host: string; port: number } {
  const m = /^(?:(\[[0-9a-fA-F:]+\]|[^:[\]]+):)?(\d{1,5})$/.exec(value.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535)
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `--http ${JSON.stringify(value)}: give [HOST:]PORT, for example 7880 or 127.0.0.1:7880 (0: any free port)`,
    );
  const host = (m[1] ?? '127.0.0.1').replace(/^\[(.*)\]$/, '$1');
  return { host, port };
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

function answer(res: ServerResponse, status: number, message: string, headers: Record<string, string> = {}): void {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

function readJson(req: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        reject(new AtelierError('PAYLOAD_TOO_LARGE', `a request body is at most ${MAX_BODY_BYTES} bytes`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      } catch {
        reject(new AtelierError('INVALID_ARGUMENT', 'the body is not JSON: send JSON-RPC messages'));
      }
    });
    req.on('error', reject);
  });
}

/**
 * `atelier mcp serve --http [HOST:]PORT`: the same tools and scoping as the stdio server, over
 * MCP's Streamable HTTP transport (POST for requests, its SSE stream on GET, DELETE to end a
 * session), for MCP clients that connect to a URL rather than start a process.
 *
 * - Every request must carry `Authorization: Bearer TOKEN`: `ATELIER_MCP_TOKEN` when set, else a
 *   token made at each start and written to `CONFIG_DIR/mcp-http.token` (0600); the tools then act
 *   with this CLI's own credentials for its context, as on stdio.
 * - Loopback by default. On a loopback address the Host header must name it (a web page that
 *   rebinds a DNS name to 127.0.0.1 is refused); another address is allowed, said to be reachable
 *   from the network, and still needs the token.
 */
export async function mcpServeHttp(ctx: CommandContext, flags: ServeFlags & { http: string }, version: string): Promise<void> {
  const listen = parseListen(flags.http);
  const { createLocalMcpServer } = await import('../../../mcp/index.js');
  const { StreamableHTTPServerTransport } = await import('@modelcontextprotocol/sdk/server/streamableHttp.js');
  const { isInitializeRequest } = await import('@modelcontextprotocol/sdk/types.js');
  const { api, target } = await cliApi(ctx);

  let token = process.env.ATELIER_MCP_TOKEN?.trim() ?? '';
  let tokenFile: string | undefined;
  if (token === '') {
    token = `atl_mcp_${randomBytes(32).toString('base64url')}`;
    mkdirSync(ctx.config.configDir, { recursive: true, mode: 0o700 });
    tokenFile = join(ctx.config.configDir, TOKEN_FILE);
    // Whole or not at all: a client never reads half a token.
    writeFileSync(`${tokenFile}.tmp`, `${token}\n`, { mode: 0o600 });
    renameSync(`${tokenFile}.tmp`, tokenFile);
  } else if (token.length < 16) {
    throw new AtelierError('INVALID_ARGUMENT', 'ATELIER_MCP_TOKEN is too short: give at least 16 characters, or unset it to have one made');
  }
  const expected = digest(`Bearer ${token}`);
  const authorised = (req: IncomingMessage): boolean => {
    const given = req.headers.authorization;
    return typeof given === 'string' && timingSafeEqual(digest(given), expected);
  };

  const sessions = new Map<string, { transport: StreamableHTTPServerTransport; server: McpServer }>();
  let hosts: Set<string> | undefined;

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? '').split('?')[0];
    if (hosts && !hosts.has((req.headers.host ?? '').toLowerCase()))
      return answer(res, 403, `the Host header must name this server (${[...hosts][0]})`);
    if (path !== '/mcp') return answer(res, 404, 'the MCP endpoint is /mcp');
    if (!authorised(req))
      return answer(
        res,
        401,
        'send Authorization: Bearer TOKEN (the token atelier mcp serve --http printed the path of, or ATELIER_MCP_TOKEN)',
        {
          'www-authenticate': 'Bearer',
        },
      );
    const id = req.headers['mcp-session-id'];
    const known = typeof id === 'string' ? sessions.get(id) : undefined;
    if (req.method === 'POST') {
      const body = await readJson(req);
      if (known) return known.transport.handleRequest(req, res, body);
      if (typeof id === 'string') return answer(res, 404, 'no such MCP session: it ended or this server restarted; initialize a new one');
      if (!isInitializeRequest(body)) return answer(res, 400, 'start with an initialize request (no mcp-session-id header yet)');
      if (sessions.size >= MAX_SESSIONS) return answer(res, 503, `${MAX_SESSIONS} MCP sessions are open: end one (DELETE /mcp) first`);
      const server = createLocalMcpServer({ api, version, workshop: flags.workshop, readOnly: flags.readOnly });
      const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sid) => void sessions.set(sid, { transport, server }),
      });
      transport.onclose = () => {
        if (transport.sessionId) sessions.delete(transport.sessionId);
        void server.close().catch(() => undefined);
      };
      await server.connect(transport);
      return transport.handleRequest(req, res, body);
    }
    if (req.method === 'GET' || req.method === 'DELETE') {
      if (!known) return answer(res, typeof id === 'string' ? 404 : 400, 'send the mcp-session-id header of an open session');
      return known.transport.handleRequest(req, res);
    }
    return answer(res, 405, 'the MCP endpoint takes POST, GET and DELETE', { allow: 'POST, GET, DELETE' });
  };

  const http = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      const e = err instanceof AtelierError ? err : undefined;
      answer(res, e?.status ?? 500, e?.message ?? 'internal error');
      if (!e) process.stderr.write(`atelier: MCP HTTP request failed: ${err instanceof Error ? err.message : String(err)}\n`);
    });
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        err.code === 'EADDRINUSE'
          ? new AtelierError('CONFLICT', `--http ${flags.http}: the port is in use; choose another (0: any free port)`)
          : err,
      ),
    );
    http.listen(listen.port, listen.host, () => resolve());
  });
  const port = (http.address() as AddressInfo).port;
  const shown = listen.host.includes(':') ? `[${listen.host}]` : listen.host;
  if (isLoopback(listen.host)) hosts = new Set([`${shown}:${port}`, `localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`]);
  process.stderr.write(`atelier MCP server on http://${shown}:${port}/mcp (Streamable HTTP) for ${servesWhat(target(), flags)}\n`);
  process.stderr.write(
    tokenFile
      ? `atelier: clients send Authorization: Bearer TOKEN, the token in ${tokenFile} (made at this start)\n`
      : 'atelier: clients send Authorization: Bearer $ATELIER_MCP_TOKEN\n',
  );
  if (!isLoopback(listen.host))
    process.stderr.write(
      `atelier: ${listen.host} is reachable from the network, over plain HTTP: keep it behind TLS or on a trusted network\n`,
    );

  await new Promise<void>((resolve) => {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => resolve());
  });
  for (const { transport } of [...sessions.values()]) await transport.close().catch(() => undefined);
  http.closeAllConnections();
  await new Promise<void>((resolve) => http.close(() => resolve()));
}
