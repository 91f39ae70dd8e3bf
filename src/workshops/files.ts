/**
 * A workspace's files: read, written and diffed by commands inside the sandbox, as the workshop
 * user, so that a symlink in the workspace can never make the server touch a host file.
 */
import { posix } from 'node:path';
import { AtelierError } from '../core/index.js';
import { type Principal } from '../identity/index.js';
import type { WorkshopExecs } from './exec.js';
import type { Access } from './shared.js';

const MAX_FILE_BYTES = 16 << 20;

function workspacePath(path: string): string {
  if (!path || path.includes('\0'))
    throw new AtelierError('INVALID_ARGUMENT', 'path is required and may not contain NUL', { field: 'path' });
  const full = posix.normalize(posix.isAbsolute(path) ? path : posix.join('/workspace', path));
  if (full !== '/workspace' && !full.startsWith('/workspace/'))
    throw new AtelierError('PERMISSION_DENIED', `path ${path} is outside /workspace`, { field: 'path' });
  return full;
}

// Runs inside the sandbox as the workshop user: a symlink can never reach a host file.
const READ_SCRIPT = `p=$(realpath -e -- "$1" 2>/dev/null) || exit 66
case "$p" in /workspace|/workspace/*) ;; *) exit 77;; esac
[ -f "$p" ] || exit 65
[ "$(stat -c %s -- "$p")" -le "$2" ] || exit 75
exec cat -- "$p"`;

const WRITE_SCRIPT = `p=$(realpath -m -- "$1") || exit 66
case "$p" in /workspace/*) ;; *) exit 77;; esac
mkdir -p -- "$(dirname -- "$p")" || exit 73
[ -d "$p" ] && exit 65
t="$p.atelier-$$"
if cat > "$t"; then mv -f -- "$t" "$p" || { rm -f -- "$t"; exit 74; }; else rm -f -- "$t"; exit 74; fi`;

function fileError(code: number, path: string, stderr: Buffer): AtelierError {
  switch (code) {
    case 66:
      return new AtelierError('NOT_FOUND', `${path} does not exist in the workspace`, { field: 'path' });
    case 77:
      return new AtelierError('PERMISSION_DENIED', `${path} resolves outside /workspace`, { field: 'path' });
    case 65:
      return new AtelierError('INVALID_ARGUMENT', `${path} is not a regular file`, { field: 'path' });
    case 75:
      return new AtelierError('PAYLOAD_TOO_LARGE', `${path} is larger than ${MAX_FILE_BYTES} bytes: read it with \`atelier exec\``, {
        field: 'path',
      });
    default:
      return new AtelierError('INVALID_ARGUMENT', `could not access ${path}: ${stderr.toString('utf8').trim() || `exit ${code}`}`, {
        field: 'path',
      });
  }
}

export class WorkshopFiles {
  constructor(private readonly execs: WorkshopExecs) {}

  /** Reads a file of the workspace (at most 16 MiB). */
  async readFile(id: string, path: string, actor: Principal): Promise<Buffer> {
    const full = workspacePath(path);
    const r = await this.execs.collectOutput(
      this.execs.startLocked(
        id,
        { actor, action: 'read' },
        ['/bin/sh', '-c', READ_SCRIPT, 'sh', full, String(MAX_FILE_BYTES)],
        '/workspace',
        {},
      ),
      {
        maxBytes: MAX_FILE_BYTES + 1,
      },
    );
    if (r.exitCode !== 0) throw fileError(r.exitCode, path, r.stderr);
    return r.stdout;
  }

  /** Writes a file of the workspace atomically (temporary file, then rename). */
  async writeFile(id: string, path: string, content: Buffer, actor: Principal): Promise<{ path: string; bytes: number }> {
    const full = workspacePath(path);
    if (content.length > MAX_FILE_BYTES)
      throw new AtelierError('PAYLOAD_TOO_LARGE', `file content is larger than ${MAX_FILE_BYTES} bytes`, { field: 'body' });
    const r = await this.execs.collectOutput(
      this.execs.startLocked(id, { actor, action: 'operate' }, ['/bin/sh', '-c', WRITE_SCRIPT, 'sh', full], '/workspace', {}, content),
      {
        maxBytes: 64 << 10,
      },
    );
    if (r.exitCode !== 0) throw fileError(r.exitCode, path, r.stderr);
    return { path: full, bytes: content.length };
  }

  /** The workspace's changes against HEAD, and the untracked files. */
  async gitDiff(id: string, actor: Principal): Promise<{ diff: string; untracked: string[]; truncated: boolean }> {
    const script =
      'b=HEAD; git rev-parse -q --verify HEAD >/dev/null 2>&1 || b=4b825dc642cb6eb9a060e54bf8d69288fbee4904; exec git -c core.quotepath=off diff --no-ext-diff --no-color "$b"';
    const access: Access = { actor, action: 'read' };
    const d = await this.execs.collectOutput(this.execs.startLocked(id, access, ['/bin/sh', '-c', script], '/workspace', {}), {
      maxBytes: 32 << 20,
    });
    if (d.exitCode !== 0 && !d.truncated)
      throw new AtelierError('INVALID_ARGUMENT', `git diff failed in the workspace: ${d.stderr.toString('utf8').trim()}`);
    const u = await this.execs.collectOutput(
      this.execs.startLocked(id, access, ['git', 'ls-files', '--others', '--exclude-standard', '-z'], '/workspace', {}),
      {
        maxBytes: 4 << 20,
      },
    );
    return { diff: d.stdout.toString('utf8'), untracked: u.stdout.toString('utf8').split('\0').filter(Boolean), truncated: d.truncated };
  }
}
