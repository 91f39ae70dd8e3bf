import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { statSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TestServer } from './helpers/server.js';

describe('CLI set-up by the first server start', () => {
  let server: TestServer;
  // The CLI as a user runs it: no ATELIER_URL/ATELIER_TOKEN, only the config the server wrote.
  const plain = { ATELIER_URL: '', ATELIER_TOKEN: '' };

  before(async () => {
    server = await TestServer.start();
  });
  after(async () => {
    await server?.dispose();
  });

  it('writes private credentials and a logged-in `local` context', () => {
    const mode = (p: string): number => statSync(p).mode & 0o777;
    const creds = join(server.dataDir, 'credentials.txt');
    assert.equal(mode(creds), 0o600);
    assert.match(readFileSync(creds, 'utf8'), new RegExp(`url: ${server.url}\\nuser: admin\\ntoken: atl_`));
    const config = join(server.configDir, 'config.yaml');
    assert.equal(mode(config), 0o600);
    const text = readFileSync(config, 'utf8');
    assert.match(text, /version: 2/);
    assert.match(text, /current-context: local/);
    assert.doesNotMatch(text, /atl_/, 'no token in config.yaml');
    assert.equal(mode(join(server.configDir, 'credentials.json')), 0o600);
  });

  it('works with the written context, also after a restart on a new port', async () => {
    const r = await server.cli(['workshops', 'list', '-o', 'json'], { env: plain });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), []);
    const oldUrl = server.url;
    await server.stop();
    await server.boot();
    assert.notEqual(server.url, oldUrl);
    const again = await server.cli(['workshops', 'list'], { env: plain });
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /No workshops/);
  });

  it('gives clear errors for an unknown context, a bad flag and an unreachable server', async () => {
    const ctx = await server.cli(['--context', 'nope', 'workshops', 'list'], { env: plain });
    assert.equal(ctx.code, 1);
    assert.match(ctx.stderr, /context "nope" does not exist: known contexts are local/);
    const out = await server.cli(['workshops', 'list', '--output', 'xml'], { env: plain });
    assert.equal(out.code, 2);
    assert.match(out.stderr, /Allowed choices are table, json, yaml/);
    const down = await server.cli(['workshops', 'list'], { env: { ATELIER_URL: 'http://127.0.0.1:9', ATELIER_TOKEN: 'atl_x' } });
    assert.equal(down.code, 1);
    assert.match(down.stderr, /cannot reach the Atelier server at http:\/\/127\.0\.0\.1:9/);
    const version = await server.cli(['--version']);
    assert.match(version.stdout, /^\d+\.\d+\.\d+\n$/);
    const missing = await server.cli(['workshops', 'create'], { env: plain });
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /--repo/);
  });
});
