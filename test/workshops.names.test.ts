import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { actors } from './helpers/actors.js';
import { BIN, TestServer, makeRepo } from './helpers/server.js';

// Workshops addressed by name wherever an id is accepted (issue 18, rough edge 7): a name is unique
// per owner; it means the caller's own workshop of that name, else the tenant's only one; several
// others of that name are a 409 listing their ids; an unknown name says so and what to do.
describe('workshops addressed by name', () => {
  let server: TestServer;
  const { tokens, as, cliAs } = actors(() => server);
  let repo: string;
  /** owner's and mate's workshops, both named `api`; owner's `solo`. */
  let ownersApi: string;
  let matesApi: string;
  let solo: string;

  before(async () => {
    server = await TestServer.start();
    tokens.admin = server.token;
    for (const [name, role] of [
      ['owner', 'member'],
      ['mate', 'member'],
      ['watcher', 'viewer'],
    ] as const) {
      assert.equal((await as('admin', 'POST', '/v1/users', { name, role })).status, 201);
      tokens[name] = (await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: name, expiresInSeconds: 3600 })).body.token;
    }
    repo = makeRepo({ 'README.md': '# names\n', 'atelier.yaml': 'egress:\n  allow: [example.test]\n' });
    const create = async (who: string, name: string): Promise<string> => {
      const w = await as<{ id: string; status: string; statusReason: string | null }>(who, 'POST', '/v1/workshops', { repo, name });
      assert.equal(w.status, 201, JSON.stringify(w.body));
      assert.equal(w.body.status, 'Running', w.body.statusReason ?? '');
      return w.body.id;
    };
    ownersApi = await create('owner', 'api');
    matesApi = await create('mate', 'api');
    solo = await create('owner', 'solo');
  });

  after(async () => {
    await server?.dispose();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('a name is unique per owner, and a name shaped like an id is refused at create time', async () => {
    const again = await as<{ code: string; message: string }>('owner', 'POST', '/v1/workshops', { repo, name: 'api' });
    assert.equal(again.status, 409, JSON.stringify(again.body));
    assert.equal(again.body.code, 'ALREADY_EXISTS');
    assert.match(again.body.message, /you already have a workshop named "api"/);
    const idLike = await cliAs('owner', ['workshops', 'create', '--repo', repo, '--name', 'ws-1234abcd']);
    assert.notEqual(idLike.code, 0);
    assert.match(idLike.stderr, /workshop ids look/, idLike.stderr);
  });

  it('the CLI takes a name where it takes an id: status, exec, simulators, egress, ssh, stop and resume', async () => {
    const status = await cliAs('owner', ['workshops', 'status', 'api', '--output', 'json']);
    assert.equal(status.code, 0, status.stderr);
    assert.equal(JSON.parse(status.stdout).id, ownersApi);
    // Each member's `api` is their own.
    const mates = await cliAs('mate', ['workshops', 'status', 'api', '--output', 'json']);
    assert.equal(mates.code, 0, mates.stderr);
    assert.equal(JSON.parse(mates.stdout).id, matesApi);

    await as('owner', 'PUT', `/v1/workshops/api/files?path=whose.txt`, Buffer.from('owner\n'));
    const exec = await cliAs('owner', ['exec', 'api', '--', 'cat', '/workspace/whose.txt']);
    assert.equal(exec.code, 0, exec.stderr);
    assert.equal(exec.stdout, 'owner\n');
    const matesFile = await as<{ code: string }>('mate', 'GET', '/v1/workshops/api/files?path=whose.txt');
    assert.equal(matesFile.status, 404, 'the mate reads their own api, which has no such file');

    for (const args of [
      ['simulators', 'list', 'solo'],
      ['workshops', 'egress', 'solo'],
    ]) {
      const r = await cliAs('owner', args);
      assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    }
    const ssh = await as<{ hostAlias: string }>('owner', 'GET', '/v1/workshops/solo/ssh');
    assert.equal(ssh.status, 200, JSON.stringify(ssh.body));
    assert.match(ssh.body.hostAlias, new RegExp(solo));

    // The WebSocket routes too: a terminal by name.
    const pty = await cliAs('owner', ['ssh', 'solo', '--', 'sh', '-c', 'cat /workspace/README.md; exit 3']);
    assert.equal(pty.code, 3, pty.stderr);
    assert.match(pty.stdout, /# names/);

    const stop = await cliAs('owner', ['workshops', 'stop', 'solo', '--output', 'json']);
    assert.equal(stop.code, 0, stop.stderr);
    assert.equal(JSON.parse(stop.stdout).status, 'Suspended');
    const resume = await cliAs('owner', ['workshops', 'resume', 'solo', '--output', 'json']);
    assert.equal(resume.code, 0, resume.stderr);
    assert.equal(JSON.parse(resume.stdout).status, 'Running');
  });

  it('an ambiguous name is a 409 listing the ids; an unknown one says it does not exist and what to do', async () => {
    // The viewer owns neither `api`.
    const both = await as<{ code: string; message: string; details: { ids: string[] } }>('watcher', 'GET', '/v1/workshops/api');
    assert.equal(both.status, 409, JSON.stringify(both.body));
    assert.equal(both.body.code, 'CONFLICT');
    assert.deepEqual([...both.body.details.ids].sort(), [ownersApi, matesApi].sort());
    const cli = await cliAs('watcher', ['workshops', 'status', 'api']);
    assert.notEqual(cli.code, 0);
    assert.ok(cli.stderr.includes(ownersApi) && cli.stderr.includes(matesApi), cli.stderr);
    // Unambiguous in the tenant: the viewer reaches owner's `solo` by name.
    const one = await as<{ id: string }>('watcher', 'GET', '/v1/workshops/solo');
    assert.equal(one.status, 200, JSON.stringify(one.body));
    assert.equal(one.body.id, solo);

    const missing = await cliAs('owner', ['exec', 'nope', '--', 'true']);
    assert.notEqual(missing.code, 0);
    assert.match(missing.stderr, /workshop nope does not exist: run `atelier workshops list`/);
    const weird = await as<{ code: string }>('owner', 'GET', `/v1/workshops/${encodeURIComponent('Not A Name')}`);
    assert.equal(weird.status, 404);
    assert.equal(weird.body.code, 'WORKSHOP_NOT_FOUND');
  });

  it('an agent token is made for a workshop by name; its names reach its own workshop only', async () => {
    const t = await as<{ token: string }>('owner', 'POST', '/v1/tokens', { workshopId: 'solo', expiresInSeconds: 3600 });
    assert.equal(t.status, 201, JSON.stringify(t.body));
    tokens.agent = t.body.token;
    assert.equal((await as<{ workshopId: string }>('agent', 'GET', '/v1/auth/whoami')).body.workshopId, solo);
    // The approvals filter takes a name too.
    const filed = await as<{ id: string }>('agent', 'POST', '/v1/workshops/solo/approvals', {
      category: 'ALLOWLIST_EXPANSION',
      payload: { host: 'named.test', justification: 'names' },
    });
    assert.equal(filed.status, 201, JSON.stringify(filed.body));
    const listed = await cliAs('owner', ['approvals', 'list', '--workshop', 'solo', '--output', 'json']);
    assert.equal(listed.code, 0, listed.stderr);
    assert.deepEqual(
      (JSON.parse(listed.stdout) as { id: string }[]).map((a) => a.id),
      [filed.body.id],
    );
    assert.equal((await as<{ id: string }>('agent', 'GET', '/v1/workshops/solo')).body.id, solo);
    const other = await as<{ code: string }>('agent', 'GET', '/v1/workshops/api');
    assert.equal(other.status, 404);
    assert.equal(other.body.code, 'WORKSHOP_NOT_FOUND');
  });

  it('MCP tools take a name as workshop_id, and a server scoped by name accepts the id too', async () => {
    const open = async (args: string[]) => {
      const transport = new StdioClientTransport({
        command: process.execPath,
        args: [BIN, 'mcp', 'serve', ...args],
        env: { ...server.env(), ATELIER_TOKEN: tokens.owner! } as Record<string, string>,
        stderr: 'pipe',
      });
      const client = new Client({ name: 'atelier-test', version: '1.0.0' });
      await client.connect(transport);
      return client;
    };
    const text = (r: CallToolResult): string => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
    const free = await open([]);
    try {
      const r = (await free.callTool({
        name: 'atelier_exec_in_sandbox',
        arguments: { workshop_id: 'api', command: 'cat /workspace/whose.txt' },
      })) as CallToolResult;
      assert.ok(!r.isError, text(r));
      assert.match(text(r), /owner/);
    } finally {
      await free.close();
    }
    const scoped = await open(['--workshop', 'solo']);
    try {
      const byId = (await scoped.callTool({
        name: 'atelier_exec_in_sandbox',
        arguments: { workshop_id: solo, command: 'true' },
      })) as CallToolResult;
      assert.ok(!byId.isError, text(byId));
      const other = (await scoped.callTool({
        name: 'atelier_exec_in_sandbox',
        arguments: { workshop_id: 'api', command: 'true' },
      })) as CallToolResult;
      assert.ok(other.isError);
      assert.match(text(other), /limited to workshop solo/);
    } finally {
      await scoped.close();
    }
  });

  it('delete by name removes that workshop and answers its id', async () => {
    const r = await as<{ id: string; deleted: boolean }>('mate', 'DELETE', '/v1/workshops/api');
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.id, matesApi);
    // One `api` left in the tenant: the viewer's name is no longer ambiguous.
    assert.equal((await as<{ id: string }>('watcher', 'GET', '/v1/workshops/api')).body.id, ownersApi);
  });
});
