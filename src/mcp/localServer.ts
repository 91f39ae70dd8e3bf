import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { AtelierError, type Workshop } from '../core/index.js';
import type { ExecView } from '../workshops/index.js';

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

/** Longest a tool call waits for a command before answering with a handle and the output so far. */
export const DEFAULT_EXEC_WAIT_SECONDS = 20;
/** Larger files are refused by atelier_read_file (use atelier_exec_in_sandbox with head/sed). */
export const MAX_READ_FILE_BYTES = 1 << 20;
/** Content larger than this is refused by atelier_write_file. */
export const MAX_WRITE_FILE_BYTES = 4 << 20;

const workshopId = z
  .string()
  .regex(/^ws-[0-9a-z]{1,32}$/, 'a workshop id looks like ws-3f8k2m9q: call atelier_list_sandboxes to see them')
  .describe('the workshop (sandbox) id, as given by atelier_list_sandboxes or atelier_create_sandbox, e.g. ws-3f8k2m9q');

const sandbox = z.object({
  id: z.string(),
  name: z.string(),
  status: z.string().describe('Building, Running, Suspended, Failed, Deleting'),
  status_reason: z.string().nullable(),
  repo: z.string(),
  max_budget_usd: z.number().nullable(),
  warnings: z.array(z.string()),
  created_at: z.string(),
});
type Sandbox = z.infer<typeof sandbox>;

const execResult = {
  exec_id: z.string().describe('handle for atelier_exec_status'),
  workshop_id: z.string(),
  status: z.enum(['Running', 'Exited', 'Failed', 'Lost']).describe('Running: not finished yet, call atelier_exec_status'),
  exit_code: z.number().int().nullable().describe('the exit code once Exited (124: timeout, 128+n: killed by signal n)'),
  stdout: z.string().describe('standard output from offset on (UTF-8, invalid bytes replaced)'),
  stderr: z.string(),
  next_offset: z.number().int().describe('pass as after_offset to atelier_exec_status to get only what comes next'),
  truncated: z.boolean().describe('the command wrote more than 1 MiB: the rest was not kept'),
};

function toSandbox(w: Workshop): Sandbox {
  return {
    id: w.id,
    name: w.name,
    status: w.status,
    status_reason: w.statusReason,
    repo: w.repo,
    max_budget_usd: w.budgetUsd,
    warnings: w.warnings,
    created_at: w.createdAt,
  };
}

function describeSandbox(w: Sandbox): string {
  return `${w.id} (${w.name}) ${w.status}${w.status_reason ? `: ${w.status_reason}` : ''} — ${w.repo}`;
}

const enc = encodeURIComponent;

/**
 * The local stdio MCP server's tools (`atelier mcp serve`): workshops as sandboxes for a desktop
 * agent. Every failure is a tool error that starts with the Atelier error code and says what to do.
 */
export function createLocalMcpServer(opts: LocalServerOptions): McpServer {
  const { api } = opts;
  const scope = opts.workshop;
  const server = new McpServer({ name: 'atelier', version: opts.version }, { capabilities: { tools: {} } });

  const hint = (e: AtelierError, id: string | undefined): string => {
    if (e.code === 'WORKSHOP_SUSPENDED')
      return opts.readOnly ? '' : ` Call atelier_resume with workshop_id ${id ?? String(e.details?.id ?? '')} first, then try again.`;
    if (e.code === 'WORKSHOP_NOT_FOUND') return scope ? '' : ' Call atelier_list_sandboxes to see the workshops you can use.';
    if (e.code === 'UNAUTHENTICATED' || e.code.startsWith('TOKEN_'))
      return ' The user must log in again in a terminal; this MCP server picks the new login up without a restart.';
    return '';
  };

  const fail = (err: unknown, id?: string): CallToolResult => {
    const e =
      err instanceof AtelierError
        ? err
        : new AtelierError('INTERNAL', `unexpected failure: ${err instanceof Error ? err.message : String(err)}`);
    return {
      isError: true,
      content: [{ type: 'text', text: `${e.code}: ${e.message.replace(/\.$/, '')}.${hint(e, id)}` }],
    };
  };

  /** The workshop a call acts on: its argument, or the scoped one; another one is refused. */
  const target = (given: string | undefined): string => {
    if (scope) {
      if (given !== undefined && given !== scope)
        throw new AtelierError('PERMISSION_DENIED', `this MCP server is limited to workshop ${scope} (--workshop): use that id`, {
          id: given,
        });
      return scope;
    }
    if (!given) throw new AtelierError('INVALID_ARGUMENT', 'workshop_id is required: call atelier_list_sandboxes to see them');
    return given;
  };
  // Scoped, the id may be left out (it can only be the one workshop).
  const wsArg = scope ? workshopId.optional() : workshopId;

  const ok = <T extends Record<string, unknown>>(structured: T, text: string): CallToolResult => ({
    content: [{ type: 'text', text }],
    structuredContent: structured,
  });

  const execOut = (v: ExecView): z.infer<z.ZodObject<typeof execResult>> => {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    for (const c of v.chunks) (c.stream === 'stdout' ? out : err).push(Buffer.from(c.data, 'base64'));
    return {
      exec_id: v.id,
      workshop_id: v.workshopId,
      status: v.status,
      exit_code: v.exitCode,
      stdout: Buffer.concat(out).toString('utf8'),
      stderr: Buffer.concat(err).toString('utf8'),
      next_offset: v.nextOffset,
      truncated: v.truncated,
    };
  };
  const execText = (r: z.infer<z.ZodObject<typeof execResult>>, v: ExecView): string => {
    const head =
      r.status === 'Running'
        ? `still running (exec_id ${r.exec_id}): this is the output so far; call atelier_exec_status with exec_id ${r.exec_id} and after_offset ${r.next_offset} for the rest`
        : r.status === 'Exited'
          ? `exited with code ${r.exit_code}${v.signal ? ` (${v.signal})` : ''}`
          : r.status === 'Lost'
            ? 'lost: the Atelier server restarted while it ran; its end is unknown'
            : `failed to run: ${v.error?.code ?? ''} ${v.error?.message ?? ''}`;
    const parts = [head];
    if (r.truncated) parts.push('(output over 1 MiB: the rest was not kept)');
    parts.push(r.stdout ? `--- stdout ---\n${r.stdout}` : '--- stdout: (empty) ---');
    if (r.stderr) parts.push(`--- stderr ---\n${r.stderr}`);
    return parts.join('\n');
  };

  const RO = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false };

  if (!scope && !opts.readOnly) {
    server.registerTool(
      'atelier_create_sandbox',
      {
        title: 'Create a sandbox',
        description:
          'Creates a new Atelier workshop (an isolated sandbox with its own copy of a git repository at /workspace, no network but an allowlisted egress proxy) and waits until it runs. Returns its id for the other tools.',
        inputSchema: {
          repo_url: z
            .string()
            .min(1)
            .max(4096)
            .describe('repository to clone: https://, ssh://, git@host:path, file:// or a path on the Atelier server'),
          devcontainer_path: z
            .string()
            .min(1)
            .max(4096)
            .optional()
            .describe('devcontainer.json inside the repository (default .devcontainer/devcontainer.json)'),
          max_budget_usd: z
            .number()
            .nonnegative()
            .max(1_000_000)
            .optional()
            .describe('LLM budget in USD for agents inside (exported as ATELIER_MAX_BUDGET_USD)'),
          disk: z
            .string()
            .min(1)
            .max(32)
            .optional()
            .describe("disk quota for everything the sandbox writes, for example 20g (default: the server's)"),
        },
        outputSchema: sandbox.shape,
        annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
      },
      async (args) => {
        try {
          const w = toSandbox(
            await api.json<Workshop>('POST', '/v1/workshops', {
              repo: args.repo_url,
              ...(args.devcontainer_path !== undefined ? { devcontainer: args.devcontainer_path } : {}),
              ...(args.max_budget_usd !== undefined ? { budgetUsd: args.max_budget_usd } : {}),
              ...(args.disk !== undefined ? { disk: args.disk } : {}),
            }),
          );
          if (w.status === 'Failed')
            return fail(new AtelierError('SANDBOX_FAILED', `workshop ${w.id} failed to start: ${w.status_reason ?? 'no reason given'}`));
          return ok(w, `created ${describeSandbox(w)}${w.warnings.length ? `\nwarnings: ${w.warnings.join('; ')}` : ''}`);
        } catch (err) {
          return fail(err);
        }
      },
    );
  }

  server.registerTool(
    'atelier_list_sandboxes',
    {
      title: 'List sandboxes',
      description: scope
        ? `Shows the one workshop this server is limited to (${scope}) and its state.`
        : 'Lists the Atelier workshops (sandboxes) you can use, with their id, state and repository.',
      inputSchema: {},
      outputSchema: { sandboxes: z.array(sandbox) },
      annotations: RO,
    },
    async () => {
      try {
        const items = scope
          ? [await api.json<Workshop>('GET', `/v1/workshops/${enc(scope)}`)]
          : (await api.json<{ items: Workshop[] }>('GET', '/v1/workshops')).items;
        const sandboxes = items.map(toSandbox);
        return ok(
          { sandboxes },
          sandboxes.length ? sandboxes.map(describeSandbox).join('\n') : 'no workshops yet: create one with atelier_create_sandbox',
        );
      } catch (err) {
        return fail(err, scope);
      }
    },
  );

  if (!opts.readOnly) {
    server.registerTool(
      'atelier_exec_in_sandbox',
      {
        title: 'Run a command in a sandbox',
        description:
          'Runs a shell command (sh -c) in /workspace of a workshop, as its unprivileged user. Returns the exit code and output if it ends within wait_seconds; otherwise status Running, an exec_id and the output so far: the command keeps running and atelier_exec_status reads the rest (output is kept on the server, even if this client goes away). Standard input is empty.',
        inputSchema: {
          workshop_id: wsArg,
          command: z
            .string()
            .min(1, 'command is empty')
            .max(128 * 1024 - 1, 'command is limited to 128 KiB')
            .describe('shell command line, e.g. "npm test 2>&1 | tail -50"'),
          wait_seconds: z
            .number()
            .min(0)
            .max(60)
            .optional()
            .describe(`how long to wait for the command to end before answering (default ${DEFAULT_EXEC_WAIT_SECONDS}, at most 60)`),
        },
        outputSchema: execResult,
        annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
      },
      async (args) => {
        let id: string | undefined;
        try {
          id = target(args.workshop_id);
          const v = await api.json<ExecView>('POST', `/v1/workshops/${enc(id)}/execs`, {
            command: ['/bin/sh', '-c', args.command],
            waitSeconds: args.wait_seconds ?? DEFAULT_EXEC_WAIT_SECONDS,
          });
          const r = execOut(v);
          return ok(r, execText(r, v));
        } catch (err) {
          return fail(err, id ?? args.workshop_id);
        }
      },
    );

    server.registerTool(
      'atelier_exec_status',
      {
        title: 'Status and output of a command',
        description:
          'For a command started by atelier_exec_in_sandbox that was still running: its state, exit code once it ended, and its output from after_offset on. Waits up to wait_seconds for it to end.',
        inputSchema: {
          exec_id: z
            .string()
            .regex(/^ex-[0-9a-z]{1,40}$/, 'an exec id looks like ex-…, as returned by atelier_exec_in_sandbox')
            .describe('exec_id returned by atelier_exec_in_sandbox'),
          after_offset: z
            .number()
            .int()
            .min(0)
            .optional()
            .describe('return only output after this byte offset (next_offset of the previous answer); default 0: all of it'),
          wait_seconds: z.number().min(0).max(60).optional().describe('how long to wait for the command to end (default 10, at most 60)'),
        },
        outputSchema: execResult,
        annotations: RO,
      },
      async (args) => {
        try {
          const v = await api.json<ExecView>(
            'GET',
            `/v1/execs/${enc(args.exec_id)}?after=${args.after_offset ?? 0}&wait=${args.wait_seconds ?? 10}`,
          );
          if (scope && v.workshopId !== scope)
            throw new AtelierError(
              'NOT_FOUND',
              `exec ${args.exec_id} does not belong to workshop ${scope}, the one this server is limited to`,
            );
          const r = execOut(v);
          return ok(r, execText(r, v));
        } catch (err) {
          return fail(err);
        }
      },
    );
  }

  server.registerTool(
    'atelier_read_file',
    {
      title: 'Read a file of a sandbox',
      description: `Reads a UTF-8 text file of a workshop's /workspace (paths are relative to /workspace; nothing outside it, symlinks included). At most ${MAX_READ_FILE_BYTES} bytes; binary files are refused.`,
      inputSchema: {
        workshop_id: wsArg,
        path: z.string().min(1).max(4096).describe('file path relative to /workspace (or absolute under /workspace), e.g. src/index.ts'),
      },
      outputSchema: { path: z.string(), bytes: z.number().int(), content: z.string() },
      annotations: RO,
    },
    async (args) => {
      let id: string | undefined;
      try {
        id = target(args.workshop_id);
        const data = await api.bytes('GET', `/v1/workshops/${enc(id)}/files?path=${enc(args.path)}`);
        if (data.length > MAX_READ_FILE_BYTES)
          throw new AtelierError(
            'PAYLOAD_TOO_LARGE',
            `${args.path} is ${data.length} bytes, over the ${MAX_READ_FILE_BYTES} this tool returns: read a part with atelier_exec_in_sandbox (head, sed -n, grep)`,
          );
        const text = new TextDecoder('utf-8', { fatal: false }).decode(data);
        if (data.includes(0) || text.includes('\uFFFD'))
          throw new AtelierError(
            'UNSUPPORTED',
            `${args.path} is a binary file (not UTF-8 text): inspect it with atelier_exec_in_sandbox (file, xxd | head)`,
          );
        return ok({ path: args.path, bytes: data.length, content: text }, text);
      } catch (err) {
        return fail(err, id ?? args.workshop_id);
      }
    },
  );

  if (!opts.readOnly) {
    server.registerTool(
      'atelier_write_file',
      {
        title: 'Write a file of a sandbox',
        description: `Writes (creates or replaces, atomically) a text file in a workshop's /workspace, creating missing directories. Paths outside /workspace (.., absolute, symlinks) are refused. At most ${MAX_WRITE_FILE_BYTES} bytes.`,
        inputSchema: {
          workshop_id: wsArg,
          path: z.string().min(1).max(4096).describe('file path relative to /workspace'),
          content: z
            .string()
            .max(MAX_WRITE_FILE_BYTES, `content is limited to ${MAX_WRITE_FILE_BYTES} characters`)
            .describe('the whole new content of the file (UTF-8)'),
        },
        outputSchema: { path: z.string().describe('absolute path written'), bytes: z.number().int() },
        annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
      },
      async (args) => {
        let id: string | undefined;
        try {
          id = target(args.workshop_id);
          const data = Buffer.from(args.content, 'utf8');
          if (data.length > MAX_WRITE_FILE_BYTES)
            throw new AtelierError('PAYLOAD_TOO_LARGE', `content is ${data.length} bytes, over ${MAX_WRITE_FILE_BYTES}: write it in parts`);
          const r = JSON.parse(
            (await api.bytes('PUT', `/v1/workshops/${enc(id)}/files?path=${enc(args.path)}`, data)).toString('utf8'),
          ) as {
            path: string;
            bytes: number;
          };
          return ok({ path: r.path, bytes: r.bytes }, `wrote ${r.bytes} bytes to ${r.path}`);
        } catch (err) {
          return fail(err, id ?? args.workshop_id);
        }
      },
    );
  }

  server.registerTool(
    'atelier_git_diff',
    {
      title: 'Changes in a sandbox',
      description: "The workspace's changes against HEAD (git diff, including staged changes) and the list of untracked files.",
      inputSchema: { workshop_id: wsArg },
      outputSchema: { diff: z.string(), untracked: z.array(z.string()), truncated: z.boolean() },
      annotations: RO,
    },
    async (args) => {
      let id: string | undefined;
      try {
        id = target(args.workshop_id);
        const d = await api.json<{ diff: string; untracked: string[]; truncated: boolean }>('GET', `/v1/workshops/${enc(id)}/git/diff`);
        const text = [
          d.diff || '(no changes to tracked files)',
          d.untracked.length ? `untracked files:\n${d.untracked.join('\n')}` : '(no untracked files)',
          ...(d.truncated ? ['(diff truncated)'] : []),
        ].join('\n');
        return ok(d, text);
      } catch (err) {
        return fail(err, id ?? args.workshop_id);
      }
    },
  );

  if (!opts.readOnly) {
    for (const [verb, path, title, description] of [
      [
        'suspend',
        'stop',
        'Suspend a sandbox',
        'Suspends a workshop: its processes are frozen, nothing is lost; commands and writes are refused until atelier_resume.',
      ],
      ['resume', 'resume', 'Resume a sandbox', 'Resumes a suspended workshop exactly as it was.'],
    ] as const) {
      server.registerTool(
        `atelier_${verb}`,
        {
          title,
          description,
          inputSchema: { workshop_id: wsArg },
          outputSchema: sandbox.shape,
          annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
        },
        async (args) => {
          let id: string | undefined;
          try {
            id = target(args.workshop_id);
            const w = toSandbox(await api.json<Workshop>('POST', `/v1/workshops/${enc(id)}/${path}`));
            return ok(w, describeSandbox(w));
          } catch (err) {
            return fail(err, id ?? args.workshop_id);
          }
        },
      );
    }
  }

  return server;
}
