import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, type CliResult } from './helpers/server.js';

// The CLI's own files, no server: each test gets a fresh config directory. No D-Bus session
// address is passed, so on Linux no Secret Service answers and the file store is used.
function cli(dir: string, args: string[], opts: { input?: string; env?: NodeJS.ProcessEnv; uid?: number } = {}): Promise<CliResult> {
  return runCli(args, {
    env: { PATH: process.env.PATH, HOME: dir, ATELIER_CONFIG_DIR: join(dir, 'config'), ...opts.env },
    ...(opts.input !== undefined ? { input: opts.input } : {}),
    ...(opts.uid !== undefined ? { uid: opts.uid } : {}),
  });
}

function tempHome(t: { after: (fn: () => void) => void }): { home: string; config: string } {
  const home = mkdtempSync('/tmp/atelier-cli-config-');
  t.after(() => rmSync(home, { recursive: true, force: true }));
  const config = join(home, 'config');
  return { home, config };
}

const mode = (p: string): number => statSync(p).mode & 0o777;
const json = <T>(r: CliResult): T => {
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as T;
};

interface Row {
  name: string;
  url: string;
  tenant: string | null;
  auth: string;
  current: boolean;
  loggedIn: boolean;
}

describe('CLI config file', () => {
  it('migrates a version 1 config and tokens.json to version 2, once', async (t) => {
    const { home, config } = tempHome(t);
    mkdirSync(config, { mode: 0o700 });
    writeFileSync(
      join(config, 'config.yaml'),
      'version: 1\ncurrent-context: local\ncontexts:\n  - name: local\n    url: http://127.0.0.1:7878\n  - name: team\n    url: https://atelier.example.com\n',
      { mode: 0o600 },
    );
    writeFileSync(join(config, 'tokens.json'), JSON.stringify({ version: 1, tokens: { local: 'atl_v1local' } }), { mode: 0o600 });

    const first = await cli(home, ['context', 'list', '-o', 'json']);
    const rows = json<Row[]>(first);
    assert.deepEqual(
      rows.map((r) => [r.name, r.url, r.auth, r.current, r.loggedIn]),
      [
        ['local', 'http://127.0.0.1:7878', 'token', true, true],
        ['team', 'https://atelier.example.com', 'token', false, false],
      ],
    );
    assert.match(first.stderr, /config\.yaml was migrated to version 2; tokens moved to .*credentials\.json/);
    assert.equal(first.stderr.trim().split('\n').length, 1, first.stderr);

    const yaml = readFileSync(join(config, 'config.yaml'), 'utf8');
    assert.match(yaml, /^version: 2$/m);
    assert.match(yaml, /^current-context: local$/m);
    assert.doesNotMatch(yaml, /atl_/);
    assert.equal(existsSync(join(config, 'tokens.json')), false);
    assert.equal(mode(join(config, 'credentials.json')), 0o600);
    assert.deepEqual(JSON.parse(readFileSync(join(config, 'credentials.json'), 'utf8')), {
      version: 2,
      credentials: { local: { kind: 'api-token', token: 'atl_v1local' } },
    });

    const again = await cli(home, ['context', 'list', '-o', 'json']);
    assert.deepEqual(json<Row[]>(again), rows);
    assert.equal(again.stderr, '', 'no second migration notice');
  });

  it('moves inline tokens of an unversioned (v0) config out of the YAML', async (t) => {
    const { home, config } = tempHome(t);
    mkdirSync(config, { mode: 0o700 });
    writeFileSync(
      join(config, 'config.yaml'),
      'current-context: prod\ncontexts:\n  - name: prod\n    url: https://prod.example.com\n    token: atl_inline0\n',
      { mode: 0o600 },
    );
    const r = await cli(home, ['context', 'current', '-o', 'json']);
    assert.deepEqual(json(r), { name: 'prod', url: 'https://prod.example.com', tenant: null, source: 'config.yaml' });
    assert.match(r.stderr, /migrated to version 2; tokens moved/);
    const yaml = readFileSync(join(config, 'config.yaml'), 'utf8');
    assert.doesNotMatch(yaml, /atl_inline0|token:/);
    assert.match(yaml, /version: 2/);
    const creds = JSON.parse(readFileSync(join(config, 'credentials.json'), 'utf8')) as { credentials: Record<string, unknown> };
    assert.deepEqual(creds.credentials.prod, { kind: 'api-token', token: 'atl_inline0' });
  });

  it('refuses a config from a newer version and invalid YAML with a clear message', async (t) => {
    const { home, config } = tempHome(t);
    mkdirSync(config, { mode: 0o700 });
    writeFileSync(join(config, 'config.yaml'), 'version: 3\ncontexts: []\n', { mode: 0o600 });
    const r = await cli(home, ['context', 'list']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /config\.yaml has version 3, which this atelier does not know \(it reads versions up to 2\): upgrade atelier/);
    assert.match(readFileSync(join(config, 'config.yaml'), 'utf8'), /version: 3/, 'left untouched');

    writeFileSync(join(config, 'config.yaml'), 'contexts: [\n', { mode: 0o600 });
    const bad = await cli(home, ['workshops', 'list']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /config\.yaml is not valid YAML .*: fix it or move it away/);
  });

  it('tightens permissions open to others, with one notice each, and refuses files of another user', async (t) => {
    const { home, config } = tempHome(t);
    mkdirSync(config);
    chmodSync(config, 0o755);
    writeFileSync(join(config, 'config.yaml'), 'version: 2\ncurrent-context: null\ncontexts: []\n');
    chmodSync(join(config, 'config.yaml'), 0o644);
    writeFileSync(join(config, 'credentials.json'), JSON.stringify({ version: 2, credentials: {} }));
    chmodSync(join(config, 'credentials.json'), 0o640);

    const r = await cli(home, ['context', 'list']);
    assert.equal(r.code, 0, r.stderr);
    const notices = r.stderr.trim().split('\n');
    assert.equal(notices.length, 3, r.stderr);
    assert.match(r.stderr, new RegExp(`${config} had mode 755 \\(open to other users\\); it is now 700`));
    assert.match(r.stderr, /config\.yaml had mode 644 .* it is now 600/);
    assert.match(r.stderr, /credentials\.json had mode 640 .* it is now 600/);
    assert.equal(mode(config), 0o700);
    assert.equal(mode(join(config, 'config.yaml')), 0o600);
    assert.equal(mode(join(config, 'credentials.json')), 0o600);
    assert.equal((await cli(home, ['context', 'list'])).stderr, '');

    if (process.getuid?.() !== 0) return t.skip('needs root to run the CLI as another user');
    // The same mistake in a directory that belongs to someone else: refused, not "fixed".
    chmodSync(home, 0o755);
    chmodSync(config, 0o755);
    chmodSync(join(config, 'config.yaml'), 0o644);
    const other = await cli(home, ['context', 'list'], { uid: 65534 });
    assert.equal(other.code, 1);
    assert.match(other.stderr, /has mode 755 \(open to other users\) and belongs to uid 0, not to you: ask its owner to run `chmod 700/);
    assert.equal(mode(config), 0o755, 'not changed');
  });
});

describe('CLI contexts', () => {
  it('adds, lists, switches, shows and removes contexts; --context and ATELIER_CONTEXT choose one', async (t) => {
    const { home, config } = tempHome(t);
    const none = await cli(home, ['context', 'current']);
    assert.equal(none.code, 1);
    assert.match(none.stderr, /no current context: add one with `atelier context add NAME --url URL`/);

    const dev = await cli(home, ['context', 'add', 'dev', '--url', 'http://127.0.0.1:7878/']);
    assert.equal(dev.code, 0, dev.stderr);
    assert.match(dev.stdout, /log in with `atelier auth login --context dev`/);
    assert.equal(dev.stderr, '', 'no credential yet, so no notice');

    // The first stored secret announces the file fallback once; the next one does not.
    const ci = await cli(home, ['context', 'add', 'ci', '--url', 'https://ci.example.com', '--tenant', 'acme', '--token-stdin'], {
      input: 'atl_citoken\n',
    });
    assert.equal(ci.code, 0, ci.stderr);
    assert.match(ci.stderr, /^notice: no OS keyring is available; credentials are stored in .*credentials\.json \(mode 0600\)\n$/);
    const ci2 = await cli(home, ['context', 'add', 'ci2', '--url', 'https://ci.example.com', '--token-stdin'], { input: 'atl_second' });
    assert.equal(ci2.code, 0, ci2.stderr);
    assert.equal(ci2.stderr, '');
    assert.doesNotMatch(readFileSync(join(config, 'config.yaml'), 'utf8'), /atl_/);
    assert.equal(mode(join(config, 'credentials.json')), 0o600);

    const rows = json<Row[]>(await cli(home, ['context', 'list', '-o', 'json']));
    assert.deepEqual(rows, [
      { name: 'dev', url: 'http://127.0.0.1:7878', tenant: null, auth: 'oidc', current: true, loggedIn: false },
      { name: 'ci', url: 'https://ci.example.com', tenant: 'acme', auth: 'token', current: false, loggedIn: true },
      { name: 'ci2', url: 'https://ci.example.com', tenant: null, auth: 'token', current: false, loggedIn: true },
    ]);

    const use = await cli(home, ['context', 'use', 'ci']);
    assert.equal(use.code, 0, use.stderr);
    assert.equal((await cli(home, ['context', 'current'])).stdout, 'ci\n');
    assert.equal((await cli(home, ['context', 'current'], { env: { ATELIER_CONTEXT: 'ci2' } })).stdout, 'ci2\n');
    assert.equal((await cli(home, ['--context', 'dev', 'context', 'current'], { env: { ATELIER_CONTEXT: 'ci2' } })).stdout, 'dev\n');
    const table = await cli(home, ['context', 'list'], { env: { ATELIER_CONTEXT: 'ci2' } });
    assert.match(table.stdout, /^\*\s+ci2\s/m);

    // A command uses the chosen context's URL (nothing listens there: the error names it).
    const down = await cli(home, ['workshops', 'list'], { env: { ATELIER_CONTEXT: 'dev' } });
    assert.equal(down.code, 1);
    assert.match(down.stderr, /cannot reach the Atelier server at http:\/\/127\.0\.0\.1:7878 \(context dev\)/);

    const dup = await cli(home, ['context', 'add', 'ci', '--url', 'https://x.example.com']);
    assert.equal(dup.code, 1);
    assert.match(dup.stderr, /context "ci" already exists: remove it first/);
    const badName = await cli(home, ['context', 'add', '../x', '--url', 'https://x.example.com']);
    assert.match(badName.stderr, /context name "\.\.\/x" is not valid/);
    const badUrl = await cli(home, ['context', 'add', 'x', '--url', 'ftp://x.example.com']);
    assert.match(badUrl.stderr, /--url must be http:\/\/ or https:\/\//);
    const secretUrl = await cli(home, ['context', 'add', 'x', '--url', 'https://me:pw@x.example.com']);
    assert.match(secretUrl.stderr, /must not contain a user name or password/);
    const empty = await cli(home, ['context', 'add', 'x', '--url', 'https://x.example.com', '--token-stdin'], { input: '\n' });
    assert.match(empty.stderr, /--token-stdin read no token/);
    const unknown = await cli(home, ['context', 'use', 'nope']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /context "nope" does not exist: known contexts are dev, ci, ci2/);

    const rm = await cli(home, ['context', 'remove', 'ci', '-o', 'json']);
    assert.deepEqual(json(rm), { name: 'ci', removed: true, credentialRemoved: true });
    const creds = JSON.parse(readFileSync(join(config, 'credentials.json'), 'utf8')) as { credentials: Record<string, unknown> };
    assert.deepEqual(Object.keys(creds.credentials), ['ci2']);
    const after = await cli(home, ['context', 'current']);
    assert.equal(after.code, 1, 'the removed context was the current one');
    assert.deepEqual(
      json<Row[]>(await cli(home, ['context', 'list', '-o', 'json'])).map((r) => r.name),
      ['dev', 'ci2'],
    );
  });
});
