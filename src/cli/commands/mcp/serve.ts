import type { AtelierApi } from '../../../mcp/index.js';
import { AtelierError } from '../../../core/index.js';
import { call, raiseFor, readBody, request, resolveTarget, type Target } from '../../client.js';
import type { CommandContext } from '../../context.js';

export interface ServeFlags {
  workshop?: string;
  readOnly?: boolean;
  /** `--http [HOST:]PORT`: Streamable HTTP instead of stdio (http.ts). */
  http?: string;
}

/** Anything a library prints goes to standard error (stdout is the stdio MCP channel). */
function consoleToStderr(): void {
  const toStderr = (...args: unknown[]): void => void process.stderr.write(`${args.map(String).join(' ')}\n`);
  console.log = toStderr;
  console.info = toStderr;
  console.debug = toStderr;
}

/**
 * The Atelier API as the MCP tools reach it: this CLI's own client (context, tenant, silent token
 * refresh). The context is resolved now, so that a missing one is said at once on stderr; a login
 * made in a terminal since the MCP server started is picked up on the next refusal.
 */
export async function cliApi(ctx: CommandContext): Promise<{ api: AtelierApi; target: () => Target }> {
  let target = await ctx.target();
  const again = async <T>(fn: (t: Target) => Promise<T>): Promise<T> => {
    try {
      return await fn(target);
    } catch (err) {
      if (!(err instanceof AtelierError) || err.status !== 401) throw err;
      const fresh = await resolveTarget(ctx.config, ctx.contextFlag);
      if (JSON.stringify(fresh.credential) === JSON.stringify(target.credential)) throw err;
      target = fresh;
      return fn(target);
    }
  };
  const api: AtelierApi = {
    json: (method, path, body) => again((t) => call(t, { method, path, ...(body !== undefined ? { body } : {}) })),
    bytes: (method, path, body) =>
      again(async (t) => {
        const res = await request(t, {
          method,
          path,
          accept: 'application/octet-stream, application/json',
          ...(body !== undefined ? { raw: body } : {}),
        });
        await raiseFor(res, t);
        return readBody(res);
      }),
  };
  return { api, target: () => target };
}

/** What the server serves, for its start line: context, URL, scope. */
export function servesWhat(target: Target, flags: ServeFlags): string {
  return `context ${target.context} (${target.url})${flags.workshop ? `, workshop ${flags.workshop}` : ''}${flags.readOnly ? ', read-only' : ''}`;
}

/**
 * `atelier mcp serve`: a stdio MCP server that reaches the Atelier server through this CLI's
 * own client. Standard output is the MCP channel: nothing else may be written there, so anything
 * printed by a library goes to standard error.
 */
export async function mcpServe(ctx: CommandContext, flags: ServeFlags, version: string): Promise<void> {
  consoleToStderr();
  const { createLocalMcpServer } = await import('../../../mcp/index.js');
  const { StdioServerTransport } = await import('@modelcontextprotocol/sdk/server/stdio.js');
  const { api, target } = await cliApi(ctx);
  const server = createLocalMcpServer({ api, version, workshop: flags.workshop, readOnly: flags.readOnly });
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    transport.onclose = () => resolve();
    // The client closed our standard input: it is gone.
    process.stdin.once('end', () => resolve());
  });
  await server.connect(transport);
  process.stderr.write(`atelier MCP server on stdio for ${servesWhat(target(), flags)}\n`);
  await closed;
  await server.close();
}
