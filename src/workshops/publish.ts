import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AtelierError } from '../core/index.js';
import type { WorkshopService } from './service.js';

const run = promisify(execFile);

const EMPTY_TREE = '4b825dc642cb6eb9a060e54bf8d69288fbee4904';
const MAX_DIFF = 500 * 1024;
const MAX_STAT = 60 * 1024;
const MAX_BUNDLE = 512 << 20;

/**
 * The workspace as a tree, without touching the agent's index or HEAD: a temporary index from
 * HEAD plus every change (untracked files too, .gitignore respected). Prints the base commit
 * (empty without one) and the tree; then, to describe it, the stat and the patch; or, to publish
 * it, a bundle of one commit (author, committer and date fixed by the server, so that applying
 * the same approval twice makes the same commit) under a ref of its own approval, removed once
 * bundled (approvals of one workshop applied at once never take each other's commit).
 */
const SNAPSHOT = `set -e
idx=$(mktemp); trap 'rm -f "$idx"' EXIT
export GIT_INDEX_FILE="$idx"
if base=$(git rev-parse -q --verify 'HEAD^{commit}' 2>/dev/null); then git read-tree "$base"; else base=; git read-tree --empty; fi
git add -A
tree=$(git write-tree)
printf '%s\\n%s\\n' "$base" "$tree"
if [ "$1" = describe ]; then
  from=\${base:-${EMPTY_TREE}}
  git -c core.quotepath=off diff-tree --no-ext-diff --no-color --stat=200 "$from" "$tree"
  printf '\\0'
  exec git -c core.quotepath=off diff-tree --no-ext-diff --no-color -p --binary "$from" "$tree"
fi
if [ -n "$base" ]; then commit=$(git commit-tree "$tree" -p "$base" -m "$ATELIER_PUBLISH_MESSAGE"); else commit=$(git commit-tree "$tree" -m "$ATELIER_PUBLISH_MESSAGE"); fi
git update-ref "$ATELIER_PUBLISH_REF" "$commit"
rc=0; git bundle create - "$ATELIER_PUBLISH_REF" 2>/dev/null || rc=$?
git update-ref -d "$ATELIER_PUBLISH_REF"
exit $rc
`;

function failed(what: string, stderr: Buffer | string): Error {
  return new Error(`${what}: ${stderr.toString().trim().split('\n').slice(-3).join(' ').slice(0, 500)}`);
}

/** `{base, tree}` then the rest of the output. */
function head(out: Buffer): { base: string; tree: string; rest: Buffer } {
  const a = out.indexOf(10);
  const b = out.indexOf(10, a + 1);
  return { base: out.subarray(0, a).toString(), tree: out.subarray(a + 1, b).toString(), rest: out.subarray(b + 1) };
}

/**
 * PR_GATEWAY, server side. When filed: the diff and its stat are computed here, from the
 * workspace (what the agent sends is replaced: the decider sees what would really be pushed),
 * with the tree it makes. When approved: the server commits that workspace state (checked to be
 * the very tree that was shown) in a repository of its own and pushes it; the agent never holds
 * the remote's credentials and never runs the push.
 */
export class Publisher {
  constructor(private readonly workshops: WorkshopService) {}

  async prepare(workshopId: string, payload: Record<string, unknown>): Promise<Record<string, unknown>> {
    let remote: string;
    try {
      remote = await this.workshops.pushTarget(workshopId, payload.remote as string | undefined);
    } catch (err) {
      if (!(err instanceof AtelierError) || err.code === 'WORKSHOP_NOT_FOUND' || err.code === 'UNAVAILABLE') throw err;
      throw new AtelierError(
        'INVALID_ARGUMENT',
        `payload.remote: ${err.message}${payload.remote === undefined ? ' (the workshop was cloned from it): give --remote URL' : ''}`,
        { field: 'payload.remote' },
      );
    }
    const r = await this.workshops.runAsPlatform(workshopId, ['/bin/sh', '-c', SNAPSHOT, 'sh', 'describe'], {}, 8 << 20);
    if (r.exitCode !== 0 && !r.truncated)
      throw new AtelierError(
        'INVALID_ARGUMENT',
        `the workspace is not a git repository that can be published: ${r.stderr.toString().trim().slice(0, 300)}`,
      );
    const { base, tree, rest } = head(r.stdout);
    const nul = rest.indexOf(0);
    const stat = rest.subarray(0, nul < 0 ? rest.length : nul).toString('utf8');
    const patch = nul < 0 ? '' : rest.subarray(nul + 1).toString('utf8');
    if (base !== '' && stat.trim() === '')
      throw new AtelierError('INVALID_ARGUMENT', 'the workspace has no changes to publish (it is the commit it was cloned at)');
    // Cut by bytes (the request's payload is bounded in bytes), at a character boundary.
    const diff =
      Buffer.byteLength(patch) > MAX_DIFF || r.truncated
        ? `${Buffer.from(patch)
            .subarray(0, MAX_DIFF)
            .toString('utf8')
            .replace(/\uFFFD$/, '')}\n[diff truncated: see the workshop]\n`
        : patch;
    return {
      ...payload,
      remote,
      title: (payload.title as string | undefined) ?? `Changes from workshop ${workshopId}`,
      diff,
      diffStat: stat.slice(0, MAX_STAT),
      base,
      tree,
    };
  }

  /** Commits and pushes; idempotent (the same approval makes the same commit, and pushing it again changes nothing). */
  async apply(a: { id: string; workshopId: string; decidedAt: string | null; payload: Record<string, unknown> }): Promise<void> {
    const p = a.payload as { branch: string; remote: string; title: string; base: string; tree: string; requestedBy?: string };
    const date = `${Math.floor(Date.parse(a.decidedAt ?? '1970-01-01T00:00:00Z') / 1000)} +0000`;
    const ref = `refs/atelier/publish/${a.id}`;
    const env = {
      ATELIER_PUBLISH_REF: ref,
      ATELIER_PUBLISH_MESSAGE: `${p.title}\n\nPublished by Atelier from workshop ${a.workshopId} (approval ${a.id}).`,
      GIT_AUTHOR_NAME: 'Atelier',
      GIT_AUTHOR_EMAIL: 'atelier@localhost',
      GIT_AUTHOR_DATE: date,
      GIT_COMMITTER_NAME: 'Atelier',
      GIT_COMMITTER_EMAIL: 'atelier@localhost',
      GIT_COMMITTER_DATE: date,
    };
    const r = await this.workshops.runAsPlatform(a.workshopId, ['/bin/sh', '-c', SNAPSHOT, 'sh', 'bundle'], env, MAX_BUNDLE);
    if (r.truncated) throw new Error(`the workspace's history is larger than ${MAX_BUNDLE >> 20} MiB: nothing was pushed`);
    if (r.exitCode !== 0) throw failed('the workspace could not be committed (nothing was pushed)', r.stderr);
    const { base, tree, rest } = head(r.stdout);
    if (tree !== p.tree || base !== p.base)
      throw new Error(
        'the workspace changed after the request was filed: nothing was pushed; publish again so that the new diff is decided',
      );
    const dir = mkdtempSync(join(tmpdir(), 'atelier-publish-'));
    try {
      writeFileSync(join(dir, 'bundle'), rest);
      const repo = join(dir, 'repo.git');
      // The server's own repository, with git's defaults: nothing of the workshop's configuration or hooks applies.
      const git = async (args: string[]): Promise<string> => {
        try {
          const out = await run('git', ['-c', 'protocol.allow=never', ...PROTOCOLS, ...args], {
            env: { ...process.env, GIT_TERMINAL_PROMPT: '0', GIT_DIR: repo },
            maxBuffer: 16 << 20,
          });
          return out.stdout.trim();
        } catch (err) {
          throw failed(`git ${args[0]} failed`, (err as { stderr?: string }).stderr ?? String(err));
        }
      };
      await run('git', ['init', '-q', '--bare', repo]);
      await git(['-c', 'transfer.fsckObjects=true', 'fetch', '-q', join(dir, 'bundle'), `${ref}:refs/atelier/publish`]);
      const commit = await git(['rev-parse', '--verify', 'refs/atelier/publish^{commit}']);
      // Checked again here, by the server's git: the commit is the tree that was shown, on the base that was shown.
      const [gotTree, parents] = [
        await git(['rev-parse', `${commit}^{tree}`]),
        (await git(['rev-list', '--parents', '-n', '1', commit])).split(' ').slice(1),
      ];
      if (gotTree !== p.tree || parents.join(' ') !== p.base)
        throw new Error('the workshop produced a commit other than the approved one: nothing was pushed');
      await git(['push', '-q', '--', p.remote, `${commit}:refs/heads/${p.branch}`]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
}

const PROTOCOLS = ['-c', 'protocol.file.allow=always', '-c', 'protocol.https.allow=always', '-c', 'protocol.ssh.allow=always'];
