// Shell completion (issue 18, rough edge 16): the scripts `atelier completion bash|zsh|fish`
// prints, driven by the real shells against a real server: commands, flags, and workshop ids and
// names fetched from it; nothing at all (and quickly) when no server answers.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Command } from 'commander';
import { takesWorkshop } from '../src/cli/commands/completion/complete.js';
import { createProgram } from '../src/cli/program.js';
import { loadConfig } from '../src/core/index.js';
import { BIN, makeRepo, TestServer } from './helpers/server.js';

function has(shell: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${shell}`]).status === 0;
}

describe('shell completion', () => {
  let server: TestServer;
  let dir: string;
  let repo: string;
  let ws: { id: string; name: string };
  /** The environment of a user's shell: `atelier` on the PATH, the context the server wrote, nothing else. */
  let env: NodeJS.ProcessEnv;

  before(async () => {
    server = await TestServer.start();
    dir = mkdtempSync('/tmp/atelier-completion-');
    symlinkSync(BIN, join(dir, 'atelier'));
    env = {
      PATH: `${dir}:${dirname(process.execPath)}:/usr/bin:/bin`,
      HOME: dir,
      ATELIER_CONFIG_DIR: server.configDir,
      ...(process.env.NODE_OPTIONS ? { NODE_OPTIONS: process.env.NODE_OPTIONS } : {}),
    };
    repo = makeRepo();
    const w = await server.createWorkshop({ repo, name: 'comp-target' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    ws = { id: w.id, name: 'comp-target' };
    for (const shell of ['bash', 'zsh', 'fish']) {
      const r = await server.cli(['completion', shell]);
      assert.equal(r.code, 0, r.stderr);
      writeFileSync(join(dir, `atelier.${shell}`), r.stdout);
    }
  });

  after(async () => {
    await server?.dispose();
    if (dir) rmSync(dir, { recursive: true, force: true });
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  /** What bash completes for the words typed so far (the last one being completed). */
  const bash = (words: string[], extraEnv: NodeJS.ProcessEnv = {}): { lines: string[]; stderr: string } => {
    const script = [
      `source ${join(dir, 'atelier.bash')}`,
      'COMP_WORDS=(atelier "$@")',
      'COMP_CWORD=$#',
      'COMP_LINE="${COMP_WORDS[*]}"',
      'COMP_POINT=${#COMP_LINE}',
      '_atelier_complete',
      'printf "%s\\n" "${COMPREPLY[@]}"',
    ].join('\n');
    const r = spawnSync('bash', ['-c', script, 'bash', ...words], { env: { ...env, ...extraEnv }, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return { lines: r.stdout.split('\n').filter(Boolean), stderr: r.stderr };
  };

  it('bash: registers the function, and completes a command, a sub-command and a flag from the tree', () => {
    const registered = spawnSync('bash', ['-c', `source ${join(dir, 'atelier.bash')}; complete -p atelier`], { env, encoding: 'utf8' });
    assert.match(registered.stdout, /complete -o default -F _atelier_complete atelier/);
    assert.deepEqual(bash(['works']).lines, ['workshops']);
    assert.deepEqual(bash(['workshops', 'st']).lines, ['status', 'stop']);
    assert.deepEqual(bash(['workshops', 'create', '--re']).lines, ['--repo']);
    // The global options, wherever they stand, and an option's choices (also as bash splits `--output=`).
    assert.ok(bash(['workshops', 'list', '--']).lines.includes('--output'));
    assert.deepEqual(bash(['workshops', 'list', '-o', '']).lines, ['table', 'json', 'yaml']);
    assert.deepEqual(bash(['--output', '=', 'y']).lines, ['yaml']);
    assert.deepEqual(bash(['completion', '']).lines, ['bash', 'zsh', 'fish']);
    // The hidden command is never offered.
    assert.ok(!bash(['']).lines.some((l) => l.startsWith('__')));
  });

  it('bash: completes workshop names and ids fetched from the server', () => {
    assert.deepEqual(bash(['exec', 'comp']).lines, [ws.name]);
    assert.deepEqual(bash(['workshops', 'status', ws.id.slice(0, 5)]).lines, [ws.id]);
    assert.deepEqual(bash(['approvals', 'list', '--workshop', 'comp-']).lines, [ws.name]);
    // Not where the argument is something else: an approval's id, the command run inside.
    assert.deepEqual(bash(['approve', 'comp']).lines, []);
    assert.deepEqual(bash(['exec', ws.name, '--', 'comp']).lines, []);
  });

  it('prints nothing, and says nothing, when no server answers', () => {
    const t0 = Date.now();
    const r = bash(['exec', ''], { ATELIER_URL: 'http://127.0.0.1:9', ATELIER_TOKEN: 'atl_x' });
    assert.deepEqual(r.lines, []);
    assert.equal(r.stderr, '');
    const silent = spawnSync(join(dir, 'atelier'), ['__complete', '--', 'exec', ''], {
      env: { ...env, ATELIER_URL: 'http://127.0.0.1:9', ATELIER_TOKEN: 'atl_x' },
      encoding: 'utf8',
    });
    assert.equal(silent.status, 0);
    assert.equal(silent.stdout + silent.stderr, '');
    // Informational only (timings are not asserted): how long a completion took with no server.
    process.stdout.write(`# completion with no server: ${Date.now() - t0} ms for two runs\n`);
  });

  it('fish: completes a command and a workshop name with its description (fish itself driving it)', () => {
    assert.ok(has('fish'), 'fish is not installed: run ./scripts/install.sh (it installs fish and zsh for these tests)');
    const run = (line: string): string[] =>
      execFileSync('fish', ['--no-config', '-c', `source ${join(dir, 'atelier.fish')}; complete -C '${line}'`], { env, encoding: 'utf8' })
        .split('\n')
        .filter(Boolean);
    assert.deepEqual(run('atelier works'), ['workshops\tcreate, list, suspend, resume and delete workshops']);
    assert.deepEqual(run('atelier exec comp'), [`${ws.name}\t${ws.id} (Running)`]);
  });

  it('zsh: the script parses, registers _atelier with compinit, and completes a command and a workshop name', () => {
    assert.ok(has('zsh'), 'zsh is not installed: run ./scripts/install.sh (it installs fish and zsh for these tests)');
    execFileSync('zsh', ['-n', join(dir, 'atelier.zsh')], { env });
    const out = execFileSync(
      'zsh',
      ['-f', '-c', `autoload -U compinit; compinit -u -D; source ${join(dir, 'atelier.zsh')}; print -r -- $_comps[atelier]`],
      {
        env,
        encoding: 'utf8',
      },
    );
    assert.equal(out.trim(), '_atelier');
    // zsh itself runs _atelier on the words typed; compsys's _describe and _files print what they are given.
    const run = (...words: string[]): string =>
      execFileSync(
        'zsh',
        [
          '-f',
          '-c',
          [
            'compdef() { :; }',
            `source ${join(dir, 'atelier.zsh')}`,
            '_describe() { print -rl -- "${(@P)${@[-1]}}"; }',
            '_files() { print -r -- FILES; }',
            'words=(atelier "$@"); CURRENT=$(( $# + 1 ))',
            '_atelier',
          ].join('\n'),
          'zsh',
          ...words,
        ],
        { env, encoding: 'utf8' },
      );
    assert.equal(run('works'), 'workshops:create, list, suspend, resume and delete workshops\n');
    assert.equal(run('exec', 'comp'), `${ws.name}:${ws.id} (Running)\n`);
    assert.equal(run('workshops', 'create', '--repo', ''), 'FILES\n', 'a path: the files');
  });

  it('offers workshops exactly where an argument or option takes one', async () => {
    const { program } = await createProgram(loadConfig(), '0');
    const found: string[] = [];
    const walk = (cmd: Command, path: string[]): void => {
      for (const sub of cmd.commands) {
        const p = [...path, sub.name()];
        for (const arg of sub.registeredArguments) if (takesWorkshop(sub, arg)) found.push(`${p.join(' ')} <${arg.name()}>`);
        for (const o of sub.options) if (o.attributeName() === 'workshop') found.push(`${p.join(' ')} ${o.long!}`);
        walk(sub, p);
      }
    };
    walk(program, []);
    assert.deepEqual(found.sort(), [
      'approvals list --workshop',
      'approvals request --workshop',
      'attach <id>',
      'code <id>',
      'exec <id>',
      'mcp serve --workshop',
      'port-forward <id>',
      'run <id>',
      'simulators list <id>',
      'simulators logs <id>',
      'simulators request <id>',
      'simulators reset <id>',
      'simulators stop <id>',
      'ssh <id>',
      'tokens create --workshop',
      'workshops budget <id>',
      'workshops delete <id>',
      'workshops egress <id>',
      'workshops publish <id>',
      'workshops resume <id>',
      'workshops status <id>',
      'workshops stop <id>',
    ]);
  });
});
