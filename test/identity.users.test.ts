import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TestServer } from './helpers/server.js';

// A local account's e-mail address decides who a Slack click acts as (approvals.slack.test.ts
// shows the click): who may set it, and what is refused.
describe("local accounts' e-mail addresses", () => {
  let server: TestServer;
  before(async () => {
    server = await TestServer.start();
  });
  after(async () => {
    await server?.dispose();
  });

  it('set at creation or with users edit, shown in users list, removed with --no-email', async () => {
    const add = await server.cli(['users', 'add', 'ada', '--email', 'Ada@Example.com']);
    assert.equal(add.code, 0, add.stderr);
    let list = await server.cli(['users', 'list']);
    assert.match(list.stdout, /^ada\s.*Ada@Example\.com/m);
    const edit = await server.cli(['users', 'edit', 'ada', '--email', 'ada.l@example.com']);
    assert.equal(edit.code, 0, edit.stderr);
    const cleared = await server.cli(['users', 'edit', 'ada', '--no-email', '--output', 'json']);
    assert.equal(cleared.code, 0, cleared.stderr);
    assert.equal((JSON.parse(cleared.stdout) as { email: string | null }).email, null);
    list = await server.cli(['users', 'list', '--output', 'json']);
    assert.equal((JSON.parse(list.stdout) as { name: string; email: string | null }[]).find((u) => u.name === 'ada')?.email, null);
  });

  it('refuses a malformed address, one another account holds (any case), and an edit that says nothing', async () => {
    const bad = await server.api<{ code: string; details: { fields?: Record<string, string> } }>('PUT', '/v1/users/ada/email', {
      email: 'not an address',
    });
    assert.equal(bad.status, 400);
    assert.match(JSON.stringify(bad.body), /give an e-mail address such as ada@example\.com/);
    assert.equal((await server.cli(['users', 'add', 'bob', '--email', 'bob@example.com'])).code, 0);
    const taken = await server.cli(['users', 'edit', 'ada', '--email', 'BOB@example.com']);
    assert.equal(taken.code, 1);
    assert.match(taken.stderr, /BOB@example\.com is another account's address on this server/);
    const takenAtAdd = await server.api<{ code: string }>('POST', '/v1/users', { name: 'carol', email: 'bob@EXAMPLE.com' });
    assert.equal(takenAtAdd.status, 409);
    assert.equal((await server.api('GET', '/v1/users')).status, 200);
    const listed = await server.api<{ items: { name: string }[] }>('GET', '/v1/users');
    assert.ok(!listed.body.items.some((u) => u.name === 'carol'), 'a refused add creates nothing');
    const nothing = await server.cli(['users', 'edit', 'ada']);
    assert.equal(nothing.code, 1);
    assert.match(nothing.stderr, /say what to change: --email ADDRESS, or --no-email/);
    const unknown = await server.cli(['users', 'edit', 'nobody-here', '--email', 'x@example.com']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no user nobody-here on this server/);
  });

  it("only the server's admins may set an address: a tenant's admin may not", async () => {
    assert.equal((await server.api('POST', '/v1/users', { name: 'tadmin', role: 'admin', tenant: 'team-a' })).status, 201);
    const token = (await server.api<{ token: string }>('POST', '/v1/tokens', { user: 'tadmin', tenant: 'team-a', expiresInSeconds: 600 }))
      .body.token;
    assert.ok(token, 'a token for the tenant admin');
    const r = await server.api('PUT', '/v1/users/tadmin/email', { email: 'me@example.com' }, { authorization: `Bearer ${token}` });
    assert.equal(r.status, 403);
  });
});
