import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ALLOWED, checkConsoleArgv } from './console.js';

describe('the Console stays read-only (ADR-008 D5, criterion 7)', () => {
  it('ALLOWED is exactly this list, frozen', () => {
    assert.deepEqual(
      ALLOWED.map((c) => [c.command.join(' '), ...c.positionals, ...Object.keys(c.flags)].join(' ')),
      [
        'workshops list',
        'workshops status id',
        'workshops egress id --limit',
        'simulators list id',
        'simulators logs id name --tail',
        'approvals list --status --workshop --category --all',
        'approvals show id',
        'projects list',
        'actions list --project',
        'actions journal --project',
        'secrets list',
        'tokens list',
        'users list',
        'audit verify',
      ],
    );
    assert.ok(Object.isFrozen(ALLOWED));
    for (const c of ALLOWED) assert.ok(Object.isFrozen(c) && Object.isFrozen(c.command) && Object.isFrozen(c.flags));
    assert.throws(() => (ALLOWED as unknown as unknown[]).push({ command: ['actions', 'apply'] }), TypeError);
  });

  it('refuses every excluded command and every write, whatever follows it', () => {
    const refused = [
      ['init'],
      ['up'],
      ['migrate'],
      ['serve'],
      ['server', 'start'],
      ['server', 'rotate-keys'],
      ['upgrade'],
      ['ext'],
      ['plugins'],
      ['actions', 'apply', 'plan-0123456789', '--yes'],
      ['actions', 'plan', 'stack.start', '--project', 'p'],
      ['actions', 'rollback', 'exec-0123456789'],
      ['workshops', 'create', '--repo', '/tmp/x'],
      ['workshops', 'delete', 'ws-1'],
      ['workshops', 'stop', 'ws-1'],
      ['workshops', 'resume', 'ws-1'],
      ['workshops', 'publish', 'ws-1'],
      ['exec', 'ws-1', '--', 'rm', '-rf', '/'],
      ['ssh', 'ws-1'],
      ['run', 'ws-1'],
      ['attach', 'ws-1'],
      ['port-forward', 'ws-1', '80'],
      ['config-ssh'],
      ['code', 'ws-1'],
      ['approve', 'ap-1'],
      ['approvals', 'approve', 'ap-1'],
      ['approvals', 'reject', 'ap-1', '--reason', 'no'],
      ['approvals', 'request', '--category', 'SHELL_COMMAND', '--payload', '{}'],
      ['approvals', 'watch'],
      ['secrets', 'set', 'X'],
      ['secrets', 'delete', 'X'],
      ['tokens', 'create'],
      ['tokens', 'revoke', 'tok-1'],
      ['users', 'add', 'eve', '--role', 'admin'],
      ['users', 'disable', 'bob'],
      ['projects', 'add', '/tmp'],
      ['projects', 'remove', 'p'],
      ['simulators', 'request', 'ws-1', 'postgres'],
      ['simulators', 'reset', 'ws-1', 'pg'],
      ['context', 'add', 'x', '--url', 'http://evil'],
      ['auth', 'login'],
      ['auth', 'logout'],
      ['mcp', 'serve'],
      ['mcp', 'install-config'],
      // Aliases are not matched: only the exact words of ALLOWED.
      ['workshops', 'ls'],
      ['ws', 'list'],
      // Allowed commands with what they do not take.
      ['workshops', 'egress', 'ws-1', '--follow'],
      ['workshops', 'list', '--output', 'json'],
      ['workshops', 'list', '-o', 'json'],
      ['workshops', 'list', '--context', 'other'],
      ['workshops', 'list', '--help'],
      ['workshops', 'list', '--'],
      ['workshops', 'list', 'extra'],
      ['workshops', 'status'],
      ['workshops', 'status', '--help'],
      ['workshops', 'status', 'ws-1', 'ws-2'],
      ['approvals', 'list', '--status', 'PENDING;rm'],
      ['approvals', 'list', '--all=yes'],
      ['approvals', 'list', '--status'],
      ['workshops', 'egress', 'ws-1', '--limit', '-1'],
      ['actions', 'list', '--project', '../etc'],
      ['actions', 'list', '--project', '$(id)'],
      ['simulators', 'logs', 'ws-1', 'pg', '--tail', '1e9'],
      ['audit'],
      [],
    ];
    for (const argv of refused)
      assert.throws(
        () => checkConsoleArgv(argv),
        (err: Error & { code?: string }) =>
          err.code === 'PERMISSION_DENIED' && /the Console runs only read-only commands/.test(err.message),
        argv.join(' '),
      );
    for (const argv of [
      ['workshops', 'list'],
      ['workshops', 'egress', 'ws-1', '--limit', '20'],
      ['workshops', 'egress', 'ws-1', '--limit=20'],
      ['approvals', 'list', '--all', '--category', 'PR_GATEWAY'],
      ['actions', 'journal', '--project', 'my.project'],
      ['simulators', 'logs', 'ws-1', 'pg'],
    ])
      assert.doesNotThrow(() => checkConsoleArgv(argv), argv.join(' '));
  });

  it('the typed actions never import or extend the Console', () => {
    const root = fileURLToPath(new URL('../actions/', import.meta.url));
    const walk = (dir: string): string[] =>
      readdirSync(dir).flatMap((e) =>
        statSync(join(dir, e)).isDirectory() ? walk(join(dir, e)) : e.endsWith('.ts') ? [join(dir, e)] : [],
      );
    const files = walk(root);
    assert.ok(files.length > 10);
    for (const f of files) {
      const text = readFileSync(f, 'utf8');
      assert.doesNotMatch(text, /from\s+'[^']*(console|server)[^']*'/, `${f} imports the Console`);
      assert.doesNotMatch(text, /\bALLOWED\b|checkConsoleArgv|runConsoleCommand/, `${f} names the Console's list`);
    }
  });
});
