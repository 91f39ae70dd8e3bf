import { spawn } from 'node:child_process';
import { AtelierError } from '../../../core/index.js';
import { sdkFor } from '../../client.js';
import type { CommandContext } from '../../context.js';
import { configSsh } from '../config-ssh/manage.js';

const EDITORS: Record<string, { binary: string; name: string; install: string }> = {
  code: {
    binary: 'code',
    name: 'Visual Studio Code',
    install: 'install VS Code and its "Remote - SSH" extension, then run "Shell Command: Install \'code\' command in PATH"',
  },
  cursor: { binary: 'cursor', name: 'Cursor', install: 'install Cursor, then run "Shell Command: Install \'cursor\' command in PATH"' },
};

/**
 * `atelier code ID|NAME [--editor code|cursor]`: writes the SSH config (config-ssh), then opens the
 * editor on /workspace over Remote-SSH (`code --remote ssh-remote+atelier-ID /workspace`).
 */
export async function openEditor(ctx: CommandContext, id: string, flags: { editor?: string }): Promise<{ editor: string; host: string }> {
  const editor = EDITORS[flags.editor ?? 'code'];
  if (!editor) throw new AtelierError('INVALID_ARGUMENT', `--editor must be code or cursor, not "${flags.editor}"`, { field: 'editor' });
  const r = await configSsh(ctx, {});
  // The SSH host is named by the workshop's id: the server says which workshop `id` (an id or a name) is.
  const workshop = await sdkFor(await ctx.target()).call('getWorkshop', { params: { id } });
  const host = `atelier-${workshop.id}`;
  if (!r.hosts.includes(host))
    throw new AtelierError(
      'WORKSHOP_NOT_FOUND',
      `workshop ${id} is not among your running or suspended workshops: run \`atelier workshops list\``,
    );
  await new Promise<void>((resolve, reject) => {
    const child = spawn(editor.binary, ['--remote', `ssh-remote+${host}`, '/workspace'], { stdio: 'inherit' });
    child.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        err.code === 'ENOENT'
          ? new AtelierError(
              'UNSUPPORTED',
              `${editor.name}'s \`${editor.binary}\` command is not on your PATH: ${editor.install}; or connect any SSH client to ${host}`,
            )
          : err,
      ),
    );
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new AtelierError('INTERNAL', `${editor.binary} exited with code ${code ?? 'unknown'}`)),
    );
  });
  return { editor: editor.binary, host };
}
