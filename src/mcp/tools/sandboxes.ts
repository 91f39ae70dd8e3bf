import { z } from 'zod';
import { AtelierError, type Workshop } from '../../core/index.js';
import { enc, ok, RO, type ToolContext } from './context.js';

const sandbox = z.object({
  id: z.string(),
  name: z.string(),
  status: z
    .string()
    .describe('Building, Running, Suspended, Dead, Failed, Deleting, NodeUnreachable (its server is down; it comes back as it was)'),
  status_reason: z.string().nullable(),
  repo: z.string(),
  max_budget_usd: z.number().nullable(),
  warnings: z.array(z.string()),
  created_at: z.string(),
});
type Sandbox = z.infer<typeof sandbox>;

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

/** atelier_create_sandbox (unscoped, not read-only) and atelier_list_sandboxes. */
export function registerSandboxTools(ctx: ToolContext): void {
  if (!ctx.scope && !ctx.readOnly) registerCreate(ctx);
  registerList(ctx);
}

function registerCreate({ server, api, fail }: ToolContext): void {
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
          .describe(
            'LLM budget in USD for agents inside: model requests through the LLM gateway are refused once it is spent (also exported as ATELIER_MAX_BUDGET_USD)',
          ),
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

function registerList({ server, api, scope, fail }: ToolContext): void {
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
}

/** atelier_suspend and atelier_resume (not read-only). */
export function registerSuspendResumeTools({ server, api, readOnly, wsArg, target, fail }: ToolContext): void {
  if (readOnly) return;
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
          id = await target(args.workshop_id);
          const w = toSandbox(await api.json<Workshop>('POST', `/v1/workshops/${enc(id)}/${path}`));
          return ok(w, describeSandbox(w));
        } catch (err) {
          return fail(err, id ?? args.workshop_id);
        }
      },
    );
  }
}
