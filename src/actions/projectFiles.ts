import { createHash } from 'node:crypto';
import {
  chownSync,
  closeSync,
  constants,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { AtelierError, syncDir, writeFileAtomic } from '../core/index.js';

/** The project's settings file, at its root. */
export const PROJECT_FILE = 'atelier.yaml';
/** Where the journal and the snapshots live, inside the project (git-ignored). */
export const ACTIONS_DIR = join('.atelier', 'runtime', 'actions');
export const JOURNAL_FILE = join(ACTIONS_DIR, 'journal.jsonl');
const MAX_FILE = 1 << 20;

export function sha256(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

function ownerOf(root: string): { uid: number; gid: number } {
  const s = statSync(root);
  return { uid: s.uid, gid: s.gid };
}

/** Gives a path the project directory's owner, so that a root server leaves nothing the user cannot edit. */
function giveToOwner(root: string, path: string): void {
  if (process.getuid?.() !== 0) return;
  const o = ownerOf(root);
  chownSync(path, o.uid, o.gid);
}

/** Refuses a symbolic link at `path` (a link could send a write outside the project). */
function assertNotLink(path: string, what: string): boolean {
  try {
    const s = lstatSync(path);
    if (s.isSymbolicLink())
      throw new AtelierError('PRECONDITION_FAILED', `${what} is a symbolic link: Atelier writes only real files of the project`, {
        path: what,
      });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

/** The bytes of `atelier.yaml` (a regular file, not a link, at most 1 MiB), or null when absent. */
export function readProjectFile(root: string, rel = PROJECT_FILE): string | null {
  const full = join(root, rel);
  if (!assertNotLink(full, rel)) return null;
  const s = lstatSync(full);
  if (!s.isFile()) throw new AtelierError('PRECONDITION_FAILED', `${rel} is not a regular file`, { path: rel });
  if (s.size > MAX_FILE) throw new AtelierError('PRECONDITION_FAILED', `${rel} is larger than 1 MiB`, { path: rel });
  return readFileSync(full, 'utf8');
}

/** Digest of a project file's state: its sha256, or `absent`. */
export function fileState(root: string, rel = PROJECT_FILE): string {
  const text = readProjectFile(root, rel);
  return text === null ? 'absent' : sha256(text);
}

/**
 * Replaces a project file atomically (temporary file in the same directory, fsync, rename): a
 * crash leaves the old or the new content, never half of one. Mode and owner are kept.
 */
export function writeProjectFile(root: string, rel: string, content: string): void {
  const full = join(root, rel);
  const existed = assertNotLink(full, rel);
  const prev = existed ? statSync(full) : undefined;
  const owner = prev ?? ownerOf(root);
  writeFileAtomic(full, content, prev ? prev.mode & 0o777 : 0o644, {
    durable: true,
    ...(process.getuid?.() === 0 ? { owner: { uid: owner.uid, gid: owner.gid } } : {}),
  });
}

export function removeProjectFile(root: string, rel: string): void {
  const full = join(root, rel);
  if (assertNotLink(full, rel)) unlinkSync(full);
  syncDir(dirname(full));
}

/**
 * Creates `.atelier/runtime/actions/` (each level a real directory, not a link) with a
 * `.gitignore` that keeps the runtime directory out of git. Returns its absolute path.
 */
export function ensureActionsDir(root: string): string {
  let cur = root;
  for (const part of ACTIONS_DIR.split('/')) {
    cur = join(cur, part);
    if (!assertNotLink(cur, cur.slice(root.length + 1))) {
      mkdirSync(cur, { mode: 0o755 });
      giveToOwner(root, cur);
    } else if (!lstatSync(cur).isDirectory()) {
      throw new AtelierError(
        'JOURNAL_UNWRITABLE',
        `${cur.slice(root.length + 1)} is not a directory: move it away so that the journal can be written`,
      );
    }
  }
  const ignore = join(root, '.atelier', 'runtime', '.gitignore');
  if (!assertNotLink(ignore, '.atelier/runtime/.gitignore')) {
    const fd = openSync(ignore, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o644);
    writeSync(fd, '# Written by Atelier: the actions journal and snapshots stay out of git.\n*\n');
    closeSync(fd);
    giveToOwner(root, ignore);
  }
  return cur;
}

/** Where the snapshot of `name` taken by an execution lives, relative to the project. */
export function snapshotPath(executionId: string, name: string): string {
  return join(ACTIONS_DIR, 'snapshots', `${executionId}.${name}`);
}

/** A real directory `.atelier/runtime/<name>` of the project (rendered stack files). */
export function ensureRuntimeDir(root: string, name: string): string {
  const dir = join(dirname(ensureActionsDir(root)), name);
  if (!assertNotLink(dir, `.atelier/runtime/${name}`)) {
    mkdirSync(dir, { mode: 0o755 });
    giveToOwner(root, dir);
  }
  return dir;
}

/** Keeps a copy of a file's content for a later rollback: `snapshots/<execution>.<name>`, mode 0600. */
export function writeSnapshot(root: string, executionId: string, name: string, content: string): string {
  const dir = join(ensureActionsDir(root), 'snapshots');
  if (!assertNotLink(dir, 'snapshots')) mkdirSync(dir, { mode: 0o700 });
  const rel = snapshotPath(executionId, name);
  const fd = openSync(join(root, rel), constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o600);
  try {
    writeSync(fd, content);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return rel;
}

export function readSnapshot(root: string, rel: string): string {
  const text = readProjectFile(root, rel);
  if (text === null) throw new AtelierError('ROLLBACK_CONFLICT', `the snapshot ${rel} needed for this rollback is missing`, { path: rel });
  return text;
}
