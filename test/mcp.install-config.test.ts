import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parse } from 'jsonc-parser';
import { clientConfigPath } from '../src/cli/commands/mcp/installConfig.js';
import { runCli } from './helpers/server.js';

const CLIENTS = ['claude-desktop', 'claude-code', 'cursor', 'vscode', 'windsurf'] as const;

describe('atelier mcp install-config (fixture config files, real CLI)', () => {
  let home: string;
  const env = (): NodeJS.ProcessEnv => ({ PATH: process.env.PATH, HOME: home, ATELIER_CONFIG_DIR: join(home, 'atelier-config') });
  const cli = (...args: string[]) => runCli(args, { env: env() });
  const path = (c: (typeof CLIENTS)[number]): string => clientConfigPath(c, 'linux', home);

  before(async () => {
    home = mkdtempSync('/tmp/atelier-mcp-home-');
    const r = await cli('context', 'add', 'team', '--url', 'http://127.0.0.1:9');
    assert.equal(r.code, 0, r.stderr);
  });
  after(() => rmSync(home, { recursive: true, force: true }));

  it("knows each client's documented per-OS location", () => {
    assert.equal(
      clientConfigPath('claude-desktop', 'darwin', '/Users/u'),
      '/Users/u/Library/Application Support/Claude/claude_desktop_config.json',
    );
    assert.equal(clientConfigPath('claude-desktop', 'linux', '/home/u'), '/home/u/.config/Claude/claude_desktop_config.json');
    assert.match(
      clientConfigPath('claude-desktop', 'win32', 'C:/Users/u'),
      /AppData[/\\]Roaming[/\\]Claude[/\\]claude_desktop_config\.json$/,
    );
    assert.equal(clientConfigPath('claude-code', 'linux', '/home/u'), '/home/u/.claude.json');
    assert.equal(clientConfigPath('cursor', 'darwin', '/Users/u'), '/Users/u/.cursor/mcp.json');
    assert.equal(clientConfigPath('vscode', 'darwin', '/Users/u'), '/Users/u/Library/Application Support/Code/User/mcp.json');
    assert.equal(clientConfigPath('vscode', 'linux', '/home/u'), '/home/u/.config/Code/User/mcp.json');
    assert.equal(clientConfigPath('windsurf', 'linux', '/home/u'), '/home/u/.codeium/windsurf/mcp_config.json');
  });

  for (const client of CLIENTS) {
    it(`${client}: merges with the servers already there, keeps a backup, is idempotent, removes`, async () => {
      const file = path(client);
      const key = client === 'vscode' ? 'servers' : 'mcpServers';
      mkdirSync(dirname(file), { recursive: true });
      const original =
        client === 'vscode'
          ? `{\n  // my servers\n  "servers": {\n    "memory": { "type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"] },\n  },\n  "inputs": []\n}\n`
          : `{\n  "theme": "dark",\n  "${key}": {\n    "other": { "command": "other-mcp", "env": { "KEY": "secret" } }\n  }\n}\n`;
      writeFileSync(file, original, { mode: 0o600 });

      const dry = await cli('mcp', 'install-config', '--client', client, '--dry-run');
      assert.equal(dry.code, 0, dry.stderr);
      assert.match(dry.stdout, /would be added atelier-team/);
      assert.match(dry.stdout, /^\+.*"atelier-team"/m);
      assert.equal(readFileSync(file, 'utf8'), original, 'dry-run writes nothing');

      const add = await cli('mcp', 'install-config', '--client', client, '-o', 'json');
      assert.equal(add.code, 0, add.stderr);
      const [res] = JSON.parse(add.stdout) as { action: string; backup: string; path: string }[];
      assert.equal(res!.action, 'added');
      assert.equal(res!.path, file);
      assert.equal(readFileSync(res!.backup, 'utf8'), original, 'backup holds the previous content');
      const text = readFileSync(file, 'utf8');
      const doc = parse(text) as Record<string, Record<string, unknown>>;
      const expected = {
        ...(client === 'vscode' || client === 'claude-code' ? { type: 'stdio' } : {}),
        command: 'atelier',
        args: ['mcp', 'serve', '--context', 'team'],
      };
      assert.deepEqual(doc[key]!['atelier-team'], expected);
      if (client === 'vscode') {
        assert.match(text, /\/\/ my servers/, 'comments are kept in JSONC');
        assert.ok(doc.servers!.memory);
        assert.deepEqual(doc.inputs, []);
      } else {
        assert.equal(JSON.parse(text).theme, 'dark', 'plain JSON, other keys kept');
        assert.deepEqual(doc[key]!.other, { command: 'other-mcp', env: { KEY: 'secret' } });
      }
      assert.equal(statSync(file).mode & 0o777, 0o600, 'mode kept');
      assert.deepEqual(
        readdirSync(dirname(file)).filter((f) => f.includes('.tmp')),
        [],
        'no temporary file left',
      );

      const again = await cli('mcp', 'install-config', '--client', client, '-o', 'json');
      assert.equal((JSON.parse(again.stdout) as { action: string }[])[0]!.action, 'unchanged');
      assert.equal(readFileSync(file, 'utf8'), text, 'idempotent');

      const rm = await cli('mcp', 'install-config', '--client', client, '--remove');
      assert.equal(rm.code, 0, rm.stderr);
      assert.match(rm.stdout, /removed atelier-team/);
      const left = parse(readFileSync(file, 'utf8')) as Record<string, Record<string, unknown>>;
      assert.equal(left[key]!['atelier-team'], undefined);
      assert.equal(Object.keys(left[key]!).length, 1, 'the other server is kept');
      const rm2 = await cli('mcp', 'install-config', '--client', client, '--remove');
      assert.match(rm2.stdout, /has no atelier-team/);
    });
  }

  it('creates a missing file (0600), and refuses a broken one without touching it', async () => {
    const file = path('cursor');
    rmSync(dirname(file), { recursive: true, force: true });
    const r = await cli('mcp', 'install-config', '--client', 'cursor');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.ok(!existsSync(`${file}.atelier-backup`), 'no backup of a file that did not exist');
    const broken = '{ "mcpServers": { "x": { "command": "y" } // comment\n}';
    writeFileSync(path('windsurf'), broken);
    const bad = await cli('mcp', 'install-config', '--client', 'windsurf');
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /not valid JSON.*nothing was changed/);
    assert.equal(readFileSync(path('windsurf'), 'utf8'), broken);
  });

  it('refuses an unknown context or client', async () => {
    const r = await cli('--context', 'nope', 'mcp', 'install-config', '--client', 'cursor');
    assert.equal(r.code, 1);
    assert.match(r.stderr, /context "nope" does not exist/);
    const c = await cli('mcp', 'install-config', '--client', 'emacs');
    assert.equal(c.code, 2);
    assert.match(c.stderr, /claude-desktop/);
  });
});
