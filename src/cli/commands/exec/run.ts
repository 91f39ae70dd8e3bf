import { AtelierError, isErrorCode, loadYaml, type ExecFrame, type ExecRequest, type ExecResult } from '../../../core/index.js';
import { ndjsonLines, raiseFor, request } from '../../client.js';
import type { CommandContext } from '../../context.js';

export interface ExecFlags {
  cwd?: string;
  env: string[];
  interactive?: boolean;
  timeout?: string;
}

async function readStdin(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/**
 * `atelier exec ID -- CMD...`: streams stdout/stderr as they come and resolves to the
 * command's exit code. With `--output json`, prints one buffered result instead.
 */
export async function execCommand(ctx: CommandContext, id: string, command: string[], flags: ExecFlags): Promise<number> {
  if (command.length === 0)
    throw new AtelierError('INVALID_ARGUMENT', 'give the command after --, for example: atelier exec ws-1234abcd -- npm test');
  const env: Record<string, string> = {};
  for (const pair of flags.env) {
    const i = pair.indexOf('=');
    if (i <= 0) throw new AtelierError('INVALID_ARGUMENT', `--env ${pair} must be KEY=VALUE`, { field: 'env' });
    env[pair.slice(0, i)] = pair.slice(i + 1);
  }
  const body: ExecRequest = { command };
  if (flags.cwd !== undefined) body.cwd = flags.cwd;
  if (Object.keys(env).length > 0) body.env = env;
  if (flags.timeout !== undefined) body.timeoutSeconds = Number(flags.timeout);
  if (flags.interactive) body.stdin = (await readStdin()).toString('base64');
  const target = await ctx.target();
  const { path } = (await ctx.api()).request('exec', { params: { id }, body });
  if (ctx.output !== 'table') {
    const res = await request(target, { method: 'POST', path, body, accept: 'application/json' });
    await raiseFor(res);
    const chunks: Buffer[] = [];
    for await (const c of res) chunks.push(c as Buffer);
    const result = JSON.parse(Buffer.concat(chunks).toString('utf8')) as ExecResult;
    if (ctx.output === 'json') process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
    else process.stdout.write((await loadYaml()).stringify(result));
    return result.exitCode;
  }
  const res = await request(target, { method: 'POST', path, body, accept: 'application/x-ndjson' });
  await raiseFor(res);
  let exitCode: number | undefined;
  const handle = async (line: string): Promise<void> => {
    if (!line) return;
    const frame = JSON.parse(line) as ExecFrame;
    if ('stream' in frame) {
      const out = frame.stream === 'stdout' ? process.stdout : process.stderr;
      if (!out.write(Buffer.from(frame.data, 'base64'))) await new Promise((r) => out.once('drain', r));
    } else if ('exitCode' in frame) exitCode = frame.exitCode;
    else if ('approval' in frame) {
      const what = frame.approval.category
        ? `${frame.approval.category}${frame.approval.what ? ` ${frame.approval.what}` : ''}`
        : 'this command';
      process.stderr.write(
        `atelier: waiting for approval of ${what} (request ${frame.approval.id}): run \`atelier approve ${frame.approval.id}\`\n`,
      );
    } else throw new AtelierError(isErrorCode(frame.error.code) ? frame.error.code : 'INTERNAL', frame.error.message);
  };
  for await (const line of ndjsonLines(res)) await handle(line);
  if (exitCode === undefined) throw new AtelierError('UNAVAILABLE', 'the connection to the server ended before the command finished');
  return exitCode;
}
