import { z } from 'zod';
import { AtelierError } from '../../core/index.js';
import { enc, ok, RO, type ToolContext } from './context.js';

/** Larger files are refused by atelier_read_file (use atelier_exec_in_sandbox with head/sed). */
export const MAX_READ_FILE_BYTES = 1 << 20;
/** Content larger than this is refused by atelier_write_file. */
export const MAX_WRITE_FILE_BYTES = 4 << 20;

/** atelier_read_file, atelier_write_file (not read-only) and atelier_git_diff. */
export function registerFileTools(ctx: ToolContext): void {
  registerReadFile(ctx);
  if (!ctx.readOnly) registerWriteFile(ctx);
  registerGitDiff(ctx);
}

function registerReadFile({ server, api, wsArg, target, fail }: ToolContext): void {
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
        id = await target(args.workshop_id);
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
}

function registerWriteFile({ server, api, wsArg, target, fail }: ToolContext): void {
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
        id = await target(args.workshop_id);
        const data = Buffer.from(args.content, 'utf8');
        if (data.length > MAX_WRITE_FILE_BYTES)
          throw new AtelierError('PAYLOAD_TOO_LARGE', `content is ${data.length} bytes, over ${MAX_WRITE_FILE_BYTES}: write it in parts`);
        const r = JSON.parse((await api.bytes('PUT', `/v1/workshops/${enc(id)}/files?path=${enc(args.path)}`, data)).toString('utf8')) as {
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

function registerGitDiff({ server, api, wsArg, target, fail }: ToolContext): void {
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
        id = await target(args.workshop_id);
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
}
