import type { AtelierApi } from '../../../mcp/index.js';
import { call, raiseFor, readBody, request } from '../../client.js';
import type { CommandContext } from '../../context.js';

export interface ServeFlags {
  workshop?: string;
  readOnly?: boolean;
}

/**
 * `atelier mcp serve`: a stdio MCP server that reaches the Atelier server through this CLI's
 * own client (context, tenant, silent token refresh). Standard output is the MCP channel: nothing
 * else may be written there, so anything printed by a library goes to standard error.
 */
export async function mcpServe(ctx: CommandContext, flags: ServeFlags, version: string): Promise<void> {
  const toStderr = (...args: unknown[]): void => void process.stderr.write(`${args.map(String).join(' ')}\n`);
  console.log = toStderr;
  console.info = toStderr;
  console.debug = toStderr;
  const { createLocalMcpServer } = await import('../../../mcp/index.js');
  const { StdioServerTransport } = await import('@modelcontextprotocol/sdk/server/stdio.js');
  // The context is resolved now: a missing one is said at once on stderr, before any client connects.
  const target = await ctx.target();
  const api: AtelierApi = {
    json: (method, path, body) => call(target, { method, path, ...(body !== undefined ? { body } : {}) }),
    async bytes(method, path, body) {
      const res = await request(target, {
        method,
        path,
        accept: 'application/octet-stream, application/json',
        ...(body !== undefined ? { raw: body } : {}),
      });
      await raiseFor(res, target);
      return readBody(res);
    },
  };
  const server = createLocalMcpServer({ api, version, workshop: flags.workshop, readOnly: flags.readOnly });
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    transport.onclose = () => resolve();
    // The client closed our standard input: it is gone.
    process.stdin.once('end', () => resolve());
  });
  await server.connect(transport);
  process.stderr.write(
    `atelier MCP server on stdio for context ${target.context} (${target.url})${flags.workshop ? `, workshop ${flags.workshop}` : ''}${flags.readOnly ? ', read-only' : ''}\n`,
  );
  await closed;
  await server.close();
}
