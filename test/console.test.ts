// The Console's server side against a real server: POST /api/workspace/console runs our own CLI
// (argv, no shell) with the caller's own credential, bounded in time and output.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ALLOWED, runConsoleCommand, type ConsoleResult } from '../src/server/console.js';
import { BIN, TestServer } from './helpers/server.js';

describe('the Console (server side)', () => {
  let s: TestServer;
  let dir = '';
  let viewer = '';

  before(async () => {
    s = await TestServer.start();
    dir = mkdtempSync('/tmp/atelier-console-project-');
    writeFileSync(join(dir, 'atelier.yaml'), '# console\nslots: []\n');
    assert.equal((await s.api('POST', '/v1/projects', { path: dir, name: 'consoled' })).status, 201);
    assert.equal((await s.cli(['users', 'add', 'console-viewer', '--role', 'viewer'])).code, 0);
    const t = await s.api<{ token: string }>('POST', '/v1/tokens', { name: 'console', user: 'console-viewer', role: 'viewer' });
    assert.equal(t.status, 201, JSON.stringify(t.body));
    viewer = t.body.token;
  });
  after(async () => {
    await s?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  it('every ALLOWED command is a command of our CLI', async () => {
    for (const c of ALLOWED) {
      const r = await s.cli([...c.command, '--help']);
      assert.equal(r.code, 0, `${c.command.join(' ')}: ${r.stderr}`);
      assert.match(r.stdout, new RegExp(`^Usage: atelier ${c.command.join(' ')}`, 'm'));
    }
  });

  it('runs an allowed command with the caller\u2019s own rights, and refuses the rest without running anything', async () => {
    const run = (argv: string[], token = s.token, output?: string) =>
      s.api<ConsoleResult & { code?: string; message?: string }>(
        'POST',
        '/api/workspace/console',
        { argv, ...(output ? { output } : {}) },
        { authorization: `Bearer ${token}` },
      );
    const listed = await run(['projects', 'list'], s.token, 'json');
    assert.equal(listed.status, 200, JSON.stringify(listed.body));
    assert.equal(listed.body.exitCode, 0, listed.body.stderr);
    assert.deepEqual(listed.body.argv, ['atelier', '--output', 'json', 'projects', 'list']);
    assert.ok((JSON.parse(listed.body.stdout) as { name: string }[]).some((p) => p.name === 'consoled'));

    const journal = await run(['actions', 'journal', '--project', 'consoled'], viewer);
    assert.equal(journal.body.exitCode, 0, journal.body.stderr);

    // A viewer's Console is a viewer: users list needs an admin, and the CLI says so.
    const users = await run(['users', 'list'], viewer);
    assert.equal(users.status, 200);
    assert.equal(users.body.exitCode, 1);
    assert.match(users.body.stderr, /PERMISSION_DENIED/);
    const asAdmin = await run(['users', 'list']);
    assert.equal(asAdmin.body.exitCode, 0, asAdmin.body.stderr);
    assert.match(asAdmin.body.stdout, /console-viewer/);

    for (const argv of [
      ['actions', 'apply', 'plan-0123456789', '--yes'],
      ['server', 'start'],
      ['projects', 'remove', 'consoled'],
      ['workshops', 'list', '--context', 'x'],
    ]) {
      const r = await run(argv);
      assert.equal(r.status, 403, argv.join(' '));
      assert.equal(r.body.code, 'PERMISSION_DENIED');
    }
    const still = await run(['projects', 'list'], s.token, 'json');
    assert.ok(
      (JSON.parse(still.body.stdout) as { name: string }[]).some((p) => p.name === 'consoled'),
      'the refused remove ran nothing',
    );

    for (const bad of [
      { argv: [] },
      { argv: ['projects', 'list\nx'] },
      { argv: 'projects list' },
      { argv: ['projects', 'list'], shell: true },
    ]) {
      const r = await s.api<{ code: string }>('POST', '/api/workspace/console', bad);
      assert.equal(r.status, 400, JSON.stringify(bad));
      assert.equal(r.body.code, 'INVALID_ARGUMENT');
    }
    const listing = await s.api<{ allowed: { command: string }[] }>('GET', '/api/workspace/console');
    assert.deepEqual(
      listing.body.allowed.map((c) => c.command),
      ALLOWED.map((c) => c.command.join(' ')),
    );
  });

  it('output and time are bounded', async () => {
    const small = await runConsoleCommand(['projects', 'list'], {
      cli: BIN,
      url: s.url,
      token: s.token,
      output: 'json',
      maxOutputBytes: 10,
    });
    assert.equal(small.truncated, true);
    assert.ok(Buffer.byteLength(small.stdout + small.stderr) <= 10);
    const late = await runConsoleCommand(['projects', 'list'], { cli: BIN, url: s.url, token: s.token, output: 'json', timeoutMs: 1 });
    assert.equal(late.timedOut, true);
    assert.equal(late.exitCode, null, 'killed');
  });
});
