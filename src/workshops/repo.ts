import { execFile } from 'node:child_process';
import { existsSync, realpathSync, statSync } from 'node:fs';
import { isAbsolute, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AtelierError } from '../core/index.js';

/** A repository source the server agreed to clone. */
export type RepoSource = { kind: 'local'; path: string; display: string } | { kind: 'remote'; url: string; display: string };

function within(path: string, root: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);
}

/** The URL without its secrets: an https user and password, an ssh password; what users see. */
export function redactUrl(url: string): string {
  if (!/^(https|ssh):\/\//.test(url)) return url;
  try {
    const u = new URL(url);
    if (u.protocol === 'https:') u.username = '';
    u.password = '';
    return u.toString();
  } catch {
    return url.replace(/\/\/.*@/, '//');
  }
}

/**
 * Accepts an absolute local path, file://, https://, ssh:// or git@host:path; refuses every
 * other scheme and any local path outside the admin's allowed roots.
 */
export function resolveRepoSource(repo: string, allowRoots: string[]): RepoSource {
  if (/[\0\n\r]/.test(repo) || repo.startsWith('-')) {
    throw new AtelierError('REPO_REFUSED', 'repo contains a control character or starts with "-"', { field: 'repo' });
  }
  if (
    /^https:\/\/[^\s/]+\/\S+$/.test(repo) ||
    /^ssh:\/\/[^\s/]+\/\S+$/.test(repo) ||
    /^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$/.test(repo)
  ) {
    return { kind: 'remote', url: repo, display: redactUrl(repo) };
  }
  let path: string;
  if (repo.startsWith('file://')) {
    try {
      path = fileURLToPath(repo);
    } catch {
      throw new AtelierError('REPO_REFUSED', `repo ${repo} is not a valid file:// URL`, { field: 'repo' });
    }
  } else if (isAbsolute(repo)) {
    path = repo;
  } else if (/^[A-Za-z][A-Za-z0-9+.-]*:/.test(repo)) {
    throw new AtelierError(
      'REPO_REFUSED',
      `repo scheme of "${repo}" is not accepted: use a local path, file://, https://, ssh:// or git@host:path`,
      { field: 'repo' },
    );
  } else {
    throw new AtelierError('REPO_REFUSED', `repo "${repo}" is a relative path: give an absolute path (the CLI does this for you)`, {
      field: 'repo',
    });
  }
  let real: string;
  try {
    real = realpathSync(path);
  } catch {
    throw new AtelierError('REPO_NOT_FOUND', `repo ${path} does not exist`, { field: 'repo' });
  }
  const roots = allowRoots.map((r) => {
    try {
      return realpathSync(r);
    } catch {
      return r;
    }
  });
  if (!roots.some((root) => within(real, root))) {
    throw new AtelierError(
      'REPO_REFUSED',
      `repo ${path} is outside the directories this server allows (${roots.join(', ')}); the admin can add one with --allow-repo-root`,
      { field: 'repo', allowed: roots },
    );
  }
  if (!statSync(real).isDirectory()) throw new AtelierError('REPO_NOT_FOUND', `repo ${path} is not a directory`, { field: 'repo' });
  const isBare = existsSync(join(real, 'HEAD')) && existsSync(join(real, 'objects'));
  if (!existsSync(join(real, '.git')) && !isBare) {
    throw new AtelierError(
      'REPO_NOT_FOUND',
      `${path} is not a git repository (run \`git init && git add -A && git commit -m init\` there first)`,
      { field: 'repo' },
    );
  }
  return { kind: 'local', path: real, display: path };
}

/**
 * Clones as the server (the agent never holds the credentials: a URL's secrets are removed from
 * the clone's remote afterwards), with no prompt and a deadline. Errors never repeat the secret.
 */
export function cloneRepo(source: RepoSource, dest: string, timeoutMs = 10 * 60_000): Promise<void> {
  const from = source.kind === 'local' ? source.path : source.url;
  const args = ['-c', 'safe.directory=*', '-c', 'protocol.file.allow=always', 'clone', '--quiet', '--no-hardlinks', '--', from, dest];
  const env = {
    PATH: '/usr/bin:/bin',
    GIT_TERMINAL_PROMPT: '0',
    GIT_ASKPASS: '/bin/false',
    SSH_ASKPASS: '/bin/false',
    GIT_SSH_COMMAND: 'ssh -o BatchMode=yes',
    HOME: '/nonexistent',
    LANG: 'C',
  };
  const scrub = (text: string): string =>
    source.kind === 'remote' && source.url !== source.display ? text.split(source.url).join(source.display) : text;
  return new Promise((resolve, reject) => {
    execFile('git', args, { timeout: timeoutMs, env, maxBuffer: 1 << 20 }, (err, _stdout, stderr) => {
      if (!err) {
        if (source.kind === 'remote' && source.url !== source.display) {
          execFile('git', ['-C', dest, 'remote', 'set-url', 'origin', source.display], { env }, (e) =>
            e
              ? reject(new AtelierError('REPO_NOT_FOUND', `could not remove the credentials from the clone of ${source.display}`))
              : resolve(),
          );
        } else resolve();
        return;
      }
      const text = scrub(String(stderr).trim().split('\n').slice(-3).join(' ').slice(0, 500));
      const e = err as Error & { killed?: boolean; code?: number | string };
      if (/not a git repository|does not appear to be a git repository/i.test(text)) {
        reject(
          new AtelierError('REPO_NOT_FOUND', `${source.display} is not a git repository (run \`git init && git commit\` there first)`, {
            field: 'repo',
          }),
        );
      } else if (/No space left on device/i.test(text)) {
        reject(new AtelierError('INSUFFICIENT_STORAGE', `the server's disk is full while cloning ${source.display}`));
      } else if (e.killed) {
        reject(
          new AtelierError(
            'REPO_NOT_FOUND',
            `cloning ${source.display} took longer than ${Math.round(timeoutMs / 1000)} s and was stopped`,
            { field: 'repo' },
          ),
        );
      } else {
        reject(
          new AtelierError('REPO_NOT_FOUND', `cloning ${source.display} failed: ${text || `git exited with ${String(e.code)}`}`, {
            field: 'repo',
          }),
        );
      }
    });
  });
}
