import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { AtelierError } from '../../core/index.js';
import type { ExecView } from '../../workshops/index.js';
import { enc, ok, RO, type ToolContext } from './context.js';

/** Longest a tool call waits for a command before answering with a handle and the output so far. */
export const DEFAULT_EXEC_WAIT_SECONDS = 20;

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
type ExecResult = z.infer<z.ZodObject<typeof execResult>>;

function execOut(v: ExecView): ExecResult {
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
}

function execText(r: ExecResult, v: ExecView): string {
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
}

const answer = (v: ExecView): CallToolResult => {
  const r = execOut(v);
  return ok(r, execText(r, v));
};

/** atelier_exec_in_sandbox and atelier_exec_status (not read-only). */
export function registerExecTools(ctx: ToolContext): void {
  if (ctx.readOnly) return;
  registerExec(ctx);
  registerExecStatus(ctx);
}

function registerExec({ server, api, wsArg, target, fail }: ToolContext): void {
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
        id = await target(args.workshop_id);
        const v = await api.json<ExecView>('POST', `/v1/workshops/${enc(id)}/execs`, {
          command: ['/bin/sh', '-c', args.command],
          waitSeconds: args.wait_seconds ?? DEFAULT_EXEC_WAIT_SECONDS,
        });
        return answer(v);
      } catch (err) {
        return fail(err, id ?? args.workshop_id);
      }
    },
  );
}

function registerExecStatus({ server, api, scope, fail }: ToolContext): void {
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
        return answer(v);
      } catch (err) {
        return fail(err);
      }
    },
  );
}
