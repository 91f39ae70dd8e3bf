import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { AtelierError, isWorkshopId } from '../../core/index.js';

/** What the MCP server needs from the Atelier API (the CLI gives its own client: contexts, token refresh). */
export interface AtelierApi {
  /** JSON request → parsed JSON answer; a non-2xx answer throws the server's AtelierError. */
  json<T>(method: string, path: string, body?: unknown): Promise<T>;
  /** Raw bytes in and out (files). */
  bytes(method: string, path: string, body?: Buffer): Promise<Buffer>;
}

export interface LocalServerOptions {
  api: AtelierApi;
  version: string;
  /** Every tool acts on this workshop only; creating another is not offered. */
  workshop?: string | undefined;
  /** Only list, read and diff are offered. */
  readOnly?: boolean | undefined;
}

/** What every group of tools shares: the API, the scope and how a call fails. */
export interface ToolContext {
  server: McpServer;
  api: AtelierApi;
  /** The one workshop every tool is limited to (`--workshop`), if any. */
  scope: string | undefined;
  readOnly: boolean;
  /** The `workshop_id` argument: optional when scoped (it can only be the one workshop). */
  wsArg: z.ZodOptional<z.ZodString> | z.ZodString;
  /** The workshop a call acts on: its argument, or the scoped one; another one is refused (by id or by name). */
  target: (given: string | undefined) => Promise<string>;
  /** A tool error that starts with the Atelier error code and says what to do. */
  fail: (err: unknown, id?: string) => CallToolResult;
}

const workshopId = z
  .string()
  .regex(
    /^[a-z0-9][a-z0-9-]{0,62}$/,
    'a workshop is given by its id (ws-3f8k2m9q) or its name (lowercase letters, digits and -): call atelier_list_sandboxes to see them',
  )
  .describe(
    'the workshop (sandbox): its id or its name, as given by atelier_list_sandboxes or atelier_create_sandbox, e.g. ws-3f8k2m9q or api',
  );

export const enc = encodeURIComponent;

/** Annotations of a tool that only reads. */
export const RO = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false };

export const ok = <T extends Record<string, unknown>>(structured: T, text: string): CallToolResult => ({
  content: [{ type: 'text', text }],
  structuredContent: structured,
});

export function createToolContext(server: McpServer, opts: LocalServerOptions): ToolContext {
  const scope = opts.workshop;

  const hint = (e: AtelierError, id: string | undefined): string => {
    if (e.code === 'WORKSHOP_SUSPENDED')
      return opts.readOnly ? '' : ` Call atelier_resume with workshop_id ${id ?? String(e.details?.id ?? '')} first, then try again.`;
    if (e.code === 'WORKSHOP_NOT_FOUND') return scope ? '' : ' Call atelier_list_sandboxes to see the workshops you can use.';
    if (e.code === 'UNAUTHENTICATED' || e.code.startsWith('TOKEN_'))
      return ' The user must log in again in a terminal; this MCP server picks the new login up without a restart.';
    return '';
  };

  return {
    server,
    api: opts.api,
    scope,
    readOnly: !!opts.readOnly,
    wsArg: scope ? workshopId.optional() : workshopId,
    target: async (given) => {
      if (scope) {
        // The scope and the argument may each be an id or a name: the server says which workshop each is.
        const same = async (a: string, b: string): Promise<boolean> => {
          if (a === b) return true;
          const idOf = async (ref: string) =>
            isWorkshopId(ref) ? ref : (await opts.api.json<{ id: string }>('GET', `/v1/workshops/${enc(ref)}`)).id;
          return Promise.all([idOf(a), idOf(b)]).then(
            ([x, y]) => x === y,
            () => false,
          );
        };
        if (given !== undefined && !(await same(given, scope)))
          throw new AtelierError(
            'PERMISSION_DENIED',
            `this MCP server is limited to workshop ${scope} (--workshop): leave workshop_id out, or give that one`,
            {
              id: given,
            },
          );
        return scope;
      }
      if (!given) throw new AtelierError('INVALID_ARGUMENT', 'workshop_id is required: call atelier_list_sandboxes to see them');
      return given;
    },
    fail: (err, id) => {
      const e =
        err instanceof AtelierError
          ? err
          : new AtelierError('INTERNAL', `unexpected failure: ${err instanceof Error ? err.message : String(err)}`);
      return {
        isError: true,
        content: [{ type: 'text', text: `${e.code}: ${e.message.replace(/\.$/, '')}.${hint(e, id)}` }],
      };
    },
  };
}
