import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execInputs, gateCommand, matchCommand } from './commandGate.js';
import { PAYLOADS } from './types.js';

const PATTERNS = ['git push*', 'rm -rf *'];
const sh = (script: string): string[] => ['sh', '-c', script];

/** Spellings that run `git push` or `rm -rf`: each must be gated. */
export const GATED: string[][] = [
  ['git', 'push'],
  ['git', 'push', 'origin', 'main'],
  ['git', 'push', '--force'],
  ['/usr/bin/git', 'push'],
  ['env', 'git', 'push'],
  ['env', '-i', 'FOO=1', 'git', 'push'],
  ['env', '-u', 'HOME', '--', 'git', 'push'],
  ['env', '-S', 'git push'],
  ['command', 'git', 'push'],
  ['nice', '-n', '10', 'git', 'push'],
  ['nice', '-5', 'git', 'push'],
  ['time', '-p', 'git', 'push'],
  ['nohup', 'git', 'push'],
  ['timeout', '-s', 'KILL', '30', 'git', 'push'],
  ['setsid', '-f', 'git', 'push'],
  ['stdbuf', '-oL', 'git', 'push'],
  ['xargs', 'git', 'push'],
  ['git', '-C', '.', 'push'],
  ['git', '-C.', 'push'],
  ['git', '-c', 'user.name=x', 'push'],
  ['git', '--git-dir=.git', '--work-tree', '.', 'push'],
  ['git', '--no-pager', '-P', 'push'],
  ['git', '-c', 'alias.p=push', 'p'],
  ['/usr/lib/git-core/git-push', 'origin'],
  ['rm', '-rf', '/workspace/x'],
  ['rm', '-r', '-f', '/workspace/x'],
  ['rm', '-fr', '/workspace/x'],
  ['rm', '-Rf', '/workspace/x'],
  ['rm', '-rfv', '/workspace/x'],
  ['rm', '-r', '-v', '-f', '/workspace/x'],
  ['rm', '--recursive', '--force', '/workspace/x'],
  ['rm', '/workspace/x', '-rf'],
  ['/bin/rm', '-rf', 'x'],
  ['busybox', 'rm', '-rf', 'x'],
  ['find', '.', '-name', 'x', '-exec', 'rm', '-rf', '{}', ';'],
  sh('git  push'),
  sh('git\tpush'),
  sh(' git push '),
  sh('echo hi; git push'),
  sh('true && git push'),
  sh('false || git push'),
  sh('ls | git push'),
  sh('(cd /workspace && git push)'),
  sh('{ git push; }'),
  sh('echo $(git push)'),
  sh('echo `git push`'),
  sh('echo "$(git push)"'),
  sh('cat <(git push)'),
  sh("'git' push"),
  sh('g"it" pu\\sh'),
  sh('\\git push'),
  sh('GIT_TRACE=1 git push'),
  sh('if true; then git push; fi'),
  sh('while true; do rm -rf /tmp/x; done'),
  sh('for f in a b; do rm -r -f "$f"; done'),
  sh('case x in x) git push;; esac'),
  sh('f() { git push; }; f'),
  sh('exec git push'),
  sh('eval git push'),
  sh('eval "git push"'),
  sh('trap "git push" EXIT'),
  sh('git push 2>&1 >/dev/null'),
  sh('x=$(git push)'),
  sh('sh -c "bash -c \'git push\'"'),
  sh('git push &'),
  sh('! git push'),
  sh('echo ok\ngit push'),
  ['bash', '-lc', 'git push'],
  ['bash', '-e', '-c', 'git push'],
  ['/bin/dash', '-c', 'rm -rf /'],
  ['command', '-p', 'git', 'push'],
  ['ionice', '-c', '3', 'git', 'push'],
  ['chrt', '-f', '10', 'git', 'push'],
  ['taskset', '-c', '0', 'git', 'push'],
  ['flock', '/tmp/l', 'git', 'push'],
  ['flock', '/tmp/l', '-c', 'git push'],
  ['sudo', '-u', 'root', 'rm', '-rf', 'x'],
  ['xargs', '-I{}', 'rm', '-rf', '{}'],
  ['find', '.', '-execdir', 'rm', '-rf', '{}', '+'],
  ['env', '--split-string=git push'],
  ['sh', '-c', 'git push', 'arg0'],
  sh('exec -a name git push'),
  sh('GIT_DIR=x exec env -i nice git push'),
  sh('echo "a $(rm -rf x) b"'),
  sh('cat list | xargs rm -rf'),
  sh('[[ -n x ]] && git push'),
  sh("sh -c 'rm -rf x'"),
];

/** Similar commands that run neither: never gated. */
export const FREE: string[][] = [
  ['git', 'status'],
  ['git', 'log', '--', 'push'],
  ['git', 'commit', '-m', 'git push later'],
  ['echo', 'git', 'push'],
  ['rm', 'file'],
  ['rm', '-r', 'dir'],
  ['rm', '-f', 'file'],
  ['rm', '--', '-rf'],
  ['grep', '-rf', 'patterns', '.'],
  ['env'],
  ['env', 'FOO=1', 'ls'],
  sh('echo "git push"'),
  sh("echo 'rm -rf /'"),
  sh('git status && git log'),
  sh('cat <<EOF\ngit push\nEOF'),
  sh('# git push\nls'),
  sh('echo $HOME'),
  ['bash', '-c', 'ls -la'],
  ['timeout', '5', 'git', 'fetch'],
  ['xargs', 'echo'],
];

describe('command gate', () => {
  it('gates every spelling that runs a gated command', () => {
    const missed = GATED.filter((c) => matchCommand(PATTERNS, c) === undefined).map((c) => JSON.stringify(c));
    assert.deepEqual(missed, []);
  });

  it('lets similar commands that run none of them through', () => {
    const gated = FREE.map((c) => [JSON.stringify(c), gateCommand(PATTERNS, c)] as const).filter(([, m]) => m !== undefined);
    assert.deepEqual(gated, []);
  });

  it('names the pattern that matched and the command as read', () => {
    assert.deepEqual(gateCommand(PATTERNS, sh('cd /x && nice -n 5 /usr/bin/git -C /x push origin')), {
      pattern: 'git push*',
      command: 'git push origin',
    });
    assert.equal(gateCommand(PATTERNS, ['rm', '-f', '-r', 'x'])?.pattern, 'rm -rf *');
  });

  it('gates what it cannot read, saying why, and only for the patterns concerned', () => {
    for (const c of [
      sh('$GIT push'),
      sh('"$(echo git)" push'),
      sh('eval "$CMD"'),
      sh('. ./script.sh'),
      ['bash', 'script.sh'],
      sh('echo git push | sh'),
      sh('alias g=git; g push'),
    ]) {
      const m = gateCommand(PATTERNS, c);
      assert.ok(m?.uncertain, `${JSON.stringify(c)} was not gated as unreadable: ${JSON.stringify(m)}`);
    }
    // A git alias or extension is unknowable for git patterns only.
    assert.match(gateCommand(PATTERNS, ['git', 'lg'])?.uncertain ?? '', /not one of git's own/);
    assert.equal(gateCommand(['rm -rf *'], ['git', 'lg']), undefined);
    assert.match(gateCommand(PATTERNS, ['git', '-c', 'alias.p=!git push', 'p'])?.uncertain ?? '', /shell command/);
  });

  it('never throws on malformed or hostile scripts, and gates what nests too deep', () => {
    for (const script of [
      '$('.repeat(5000),
      '`'.repeat(3001),
      '"'.repeat(7),
      "'unterminated",
      'a &&& b ||| c',
      '<<',
      'case',
      'for',
      '(((',
      '))))',
      '\\',
    ]) {
      assert.doesNotThrow(() => gateCommand(PATTERNS, sh(script)), script.slice(0, 20));
    }
    const deep = Array.from({ length: 20 }).reduce<string>((inner) => `sh -c ${JSON.stringify(inner)}`, 'echo hi');
    assert.match(gateCommand(PATTERNS, sh(deep))?.uncertain ?? '', /nested too deeply/);
  });

  it('reads a shell script given on stdin', () => {
    assert.equal(matchCommand(PATTERNS, ['sh'], { stdin: 'echo a\ngit push\n' }), 'git push*');
    assert.equal(matchCommand(PATTERNS, ['bash', '-s'], { stdin: 'ls\n' }), undefined);
  });

  it('keeps the glob meaning of patterns: whole text, * anywhere, literal otherwise', () => {
    assert.equal(matchCommand(['npm publish'], ['npm', 'publish']), 'npm publish');
    assert.equal(matchCommand(['npm publish'], ['npm', 'publish', '--tag', 'x']), undefined);
    assert.equal(matchCommand(['npm publish*'], ['npm', 'publish', '--tag', 'x']), 'npm publish*');
    assert.equal(matchCommand(['touch /workspace/gated*'], ['touch', '/workspace/gated-1']), 'touch /workspace/gated*');
    assert.equal(matchCommand(['touch /workspace/gated*'], ['touch', '/workspace/free']), undefined);
    assert.equal(matchCommand(['*'], ['anything', 'at', 'all']), '*');
    assert.equal(matchCommand(['/usr/bin/git push*'], ['git', 'push']), '/usr/bin/git push*');
    assert.equal(matchCommand(['git push *'], ['git', 'push']), 'git push *');
    assert.equal(matchCommand(['git push *'], ['git', 'status']), undefined);
    // `git push*` is a glob: it also names `git pushx`; with `git push *` that one is not git's
    // own command (an alias or a git-pushx program, unknowable): gated as unreadable.
    assert.equal(gateCommand(['git push*'], ['git', 'pushx'])?.uncertain, undefined);
    assert.match(gateCommand(['git push *'], ['git', 'pushx'])?.uncertain ?? '', /not one of git's own/);
    assert.equal(matchCommand(['git push *'], ['git', 'pull']), undefined);
    assert.equal(matchCommand([], ['git', 'push']), undefined);
    assert.equal(matchCommand(PATTERNS, []), undefined);
  });
  describe('security review', () => {
    const gated = (c: string[], opts: { stdin?: string; env?: Record<string, string> } = {}, patterns = PATTERNS): void =>
      assert.ok(gateCommand(patterns, c, opts), `${JSON.stringify(c)} ${JSON.stringify(opts)} was not gated`);
    const free = (c: string[], opts: { stdin?: string; env?: Record<string, string> } = {}): void =>
      assert.equal(gateCommand(PATTERNS, c, opts), undefined, `${JSON.stringify(c)} was gated`);

    it('1: a case inside $(…) or backquotes is uncertain (its pattern ) would end the substitution)', () => {
      assert.match(gateCommand(PATTERNS, sh('echo $(case a in a) git push -f;; esac)'))?.uncertain ?? '', /case inside a substitution/);
      gated(sh('echo `case a in a) git push -f;; esac`'));
      gated(sh('echo "$(case a in a) rm -rf /;; esac)"'), {}, ['rm -rf *']);
      free(sh('case a in a) echo hi;; esac'));
    });

    it('2: coproc runs its command', () => {
      assert.equal(matchCommand(PATTERNS, ['bash', '-c', 'coproc git push']), 'git push*');
      assert.equal(matchCommand(PATTERNS, ['bash', '-c', 'coproc P { git push; }']), 'git push*');
      assert.equal(matchCommand(PATTERNS, ['coproc', 'git', 'push']), 'git push*');
    });

    it('3: BASH_ENV, ENV, GIT_*, LD_PRELOAD, PROMPT_COMMAND as assignments or in the exec env are uncertain', () => {
      gated(['sh', '-c', 'BASH_ENV=/workspace/x bash -c :']);
      gated(sh('ENV=/workspace/x sh -i'));
      gated(sh('GIT_SSH_COMMAND="sh -c x" git fetch'));
      gated(['env', 'GIT_CONFIG_COUNT=1', 'git', 'fetch']);
      gated(['env', 'LD_PRELOAD=/workspace/x.so', 'ls']);
      gated(sh('PROMPT_COMMAND="git push" bash -i'));
      gated(['bash', '-c', ':'], { env: { BASH_ENV: '/workspace/x' } });
      gated(['git', 'status'], { env: { GIT_CONFIG_PARAMETERS: "'core.pager=sh'" } });
      gated(['ls'], { env: { LD_PRELOAD: '/x.so' } }, ['rm -rf *']);
      free(['ls'], { env: { FOO: '1', HOME: '/home/me' } });
      free(sh('FOO=1 ls'));
      gated(sh('export GIT_SSH_COMMAND="sh -c x"; git fetch'));
      gated(sh('declare -x LD_PRELOAD=/x.so; ls'));
      free(sh('export FOO=1; ls'));
    });

    it('4: git -c KEY=VALUE outside aliases and a short safe list (and --config-env) is uncertain, for any pattern', () => {
      gated(['git', '-c', 'core.pager=sh -c "git push -f"', 'log']);
      gated(['git', '-c', 'core.fsmonitor=/workspace/x', 'status']);
      gated(['git', '-c', 'core.sshCommand=sh -c "rm -rf /"', 'fetch'], {}, ['rm -rf *']);
      gated(['git', '-c', 'core.hooksPath=/workspace/h', 'commit', '-m', 'x']);
      gated(['git', '--config-env=core.pager=X', 'log']);
      gated(sh('git -c core.pager=\'sh -c "git push -f"\' log'));
      free(['git', '-c', 'user.name=x', '-c', 'user.email=x@y', '-c', 'color.ui=never', 'log']);
      free(['git', '-c', 'core.quotePath=false', '-c', 'advice.detachedHead=false', '-c', 'init.defaultBranch=main', 'status']);
      free(['git', '-c', 'safe.directory=*', 'status']);
    });

    it('5: script -c, su -c, runuser -c and watch are read; inline programs and awk with system() are uncertain', () => {
      assert.equal(matchCommand(PATTERNS, ['script', '-qc', 'git push', '/dev/null']), 'git push*');
      assert.equal(matchCommand(PATTERNS, ['script', '-q', '-c', 'rm -rf /x']), 'rm -rf *');
      assert.equal(matchCommand(PATTERNS, ['su', '-c', 'git push', 'me']), 'git push*');
      assert.equal(matchCommand(PATTERNS, ['runuser', '-u', 'me', '--', 'git', 'push']), 'git push*');
      assert.equal(matchCommand(PATTERNS, ['runuser', '-l', 'me', '-c', 'git push']), 'git push*');
      assert.equal(matchCommand(PATTERNS, ['watch', '-n', '1', 'git', 'push']), 'git push*');
      assert.equal(matchCommand(PATTERNS, ['watch', 'git push; ls']), 'git push*');
      gated(['su', 'me']);
      for (const c of [
        ['awk', 'BEGIN { system("git push") }'],
        ['awk', 'BEGIN { print | "sh" }'],
        ['awk', '-f', 'prog.awk'],
        ['perl', '-e', 'system "git push"'],
        ['perl', '-ne', 'print'],
        ['python3', '-c', 'import os'],
        ['node', '-e', 'require("child_process")'],
        ['ruby', '-e', 'system "x"'],
      ])
        gated(c, {}, ['rm -rf *']);
      free(['awk', '{ print $1 }', 'file']);
    });

    it('6: an executable path outside the system directories is uncertain, like `sh x`', () => {
      gated(['./x']);
      gated(['/workspace/x.sh'], {}, ['rm -rf *']);
      gated(sh('./git push'));
      gated(['/usr/bin/../../workspace/x']);
      free(['/usr/bin/git', 'status']);
      free(['/bin/ls']);
      free(['/usr/local/bin/node', 'app.js']);
      free(['/usr/lib/git-core/git-status']);
      assert.equal(gateCommand(PATTERNS, ['/usr/lib/git-core/git-push'])?.uncertain, undefined);
    });

    it('7: hostile nesting is capped (uncertain), never a stack overflow', () => {
      assert.match(gateCommand(PATTERNS, sh('${'.repeat(20000)))?.uncertain ?? '', /too deeply/);
      assert.doesNotThrow(() => gateCommand(PATTERNS, sh('<<-'.repeat(50000))));
      assert.doesNotThrow(() => gateCommand(PATTERNS, sh('<<'.repeat(50000))));
      assert.equal(matchCommand(PATTERNS, ['sh'], { stdin: 'cat <<-EOF\n\tgit push\n\tEOF\ngit push\n' }), 'git push*');
      free(sh('cat <<EOF\ngit push\nEOF'));
    });

    it('8: an approval records digests of the exec stdin and env, so it cannot be reused with another', () => {
      const b64 = (t: string): string => Buffer.from(t).toString('base64');
      const a = execInputs(b64('git push\n'), { A: '1' });
      assert.notEqual(a.stdinSha256, execInputs(b64('rm -rf /\n'), { A: '1' }).stdinSha256);
      assert.notEqual(a.envSha256, execInputs(b64('git push\n'), { A: '2' }).envSha256);
      assert.notEqual(a.envSha256, execInputs(b64('git push\n'), { A: '1', B: '1' }).envSha256);
      assert.equal(a.envSha256, execInputs(b64('x'), { A: '1' }).envSha256);
      assert.deepEqual(execInputs(undefined, undefined), { stdinSha256: null, envSha256: null, payload: {} });
      assert.deepEqual(execInputs(undefined, {}).envSha256, null);
      assert.equal(a.payload.stdinPreview, 'git push\n');
      assert.deepEqual(Object.keys(a.payload.env as object), ['A']);
      assert.ok(!JSON.stringify(a.payload).includes('"1"'), 'env values are not recorded');
      // The payload passes the category's schema (a NUL in stdin is not shown as one).
      const p = { command: ['sh'], justification: 'x', ...execInputs(b64('a\0b'), { A: '1' }).payload };
      assert.equal(PAYLOADS.SHELL_COMMAND.safeParse(p).success, true);
    });

    it('ordinary commands stay ungated; programs in other languages run from a file (node app.js, python3 script.py) are not read, and not gated', () => {
      for (const c of [
        ['git', 'status'],
        ['git', 'log'],
        ['rm', 'file'],
        ['npm', 'test'],
        ['node', 'app.js'],
        ['python3', 'script.py'],
        ['python3', '-m', 'pytest'],
        sh('npm test && git log --oneline'),
      ])
        free(c);
    });
  });
});
