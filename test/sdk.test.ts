import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import type { z } from 'zod';
import { AtelierError, ROUTES, createClient, type AtelierClient, type RouteName } from '../src/sdk/index.js';
import { TestServer, makeRepo } from './helpers/server.js';

/**
 * The SDK (`atelier/sdk`) against a real server: every answer it gets is checked against the
 * route table's response schema, so the table cannot drift from what the server sends.
 */
describe('SDK', () => {
  let server: TestServer;
  let repo: string;
  let atelier: AtelierClient;

  /** The SDK over a transport that checks every JSON answer against the route table's schema for its route. */
  let api: AtelierClient;
  const checkedRoutes = new Set<string>();

  function routeOf(method: string, path: string): RouteName {
    const url = path.split('?')[0]!;
    const matches = (Object.keys(ROUTES) as RouteName[]).filter((n) => {
      const r = ROUTES[n];
      return r.method === method && new RegExp(`^${r.path.replace(/:[A-Za-z0-9_]+/g, '[^/]+')}$`).test(url);
    });
    // The most literal match wins (/v1/approvals/stream before /v1/approvals/:id).
    matches.sort((a, b) => ROUTES[a].path.split(':').length - ROUTES[b].path.split(':').length);
    assert.ok(matches[0], `no route in the table for ${method} ${url}`);
    return matches[0];
  }

  before(async () => {
    server = await TestServer.start();
    repo = makeRepo({ 'README.md': '# sdk\n' });
    atelier = createClient({ url: server.url, token: server.token });
    api = createClient({
      async json(req) {
        const answer = await atelier.transport.json(req);
        const name = routeOf(req.method, req.path);
        const schema = (ROUTES[name] as { response?: z.ZodType }).response;
        if (schema) {
          const r = schema.safeParse(answer);
          assert.ok(
            r.success,
            `${name}: the answer does not match the route table: ${r.success ? '' : JSON.stringify(r.error.issues.slice(0, 3))}`,
          );
          checkedRoutes.add(name);
        }
        return answer;
      },
      bytes: (req) => atelier.transport.bytes(req),
    });
  });
  after(async () => {
    await server?.dispose();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it("is what the package exports as 'atelier/sdk'", async () => {
    // Resolved through package.json's `exports` (the package's own name), from the build.
    const sdk = (await import('atelier/sdk' as string)) as Record<string, unknown>;
    assert.equal(typeof sdk.createClient, 'function');
    assert.equal(typeof sdk.ROUTES, 'object');
  });

  it('answers public routes without a token', async () => {
    const anonymous = createClient({ url: server.url });
    const health = await anonymous.call('health');
    assert.equal(health.status, 'ok');
    const config = await anonymous.call('authConfig');
    assert.match(config.tokenEndpoint, /\/v1\/auth\/device\/token$/);
    const doc = await anonymous.call('openapi');
    assert.equal(doc.openapi, '3.1.0');
  });

  it('creates a workshop, runs a command in it and reads its files, each answer as the table says', async () => {
    const me = await api.call('whoami');
    assert.equal(me.role, 'admin');
    const ws = await api.call('createWorkshop', { body: { repo, name: 'sdk-one' } });
    assert.equal(ws.status, 'Running', ws.statusReason ?? '');
    const list = await api.call('listWorkshops');
    assert.deepEqual(
      list.items.map((w) => w.name),
      ['sdk-one'],
    );
    await api.call('getWorkshop', { params: { id: ws.id } });
    const started = await api.call('startExec', {
      params: { id: ws.id },
      body: { command: ['sh', '-c', 'echo hello from sdk'], waitSeconds: 30 },
    });
    const read = await api.call('readExec', { params: { execId: started.id }, query: { after: 0, wait: 30 } });
    assert.equal(read.status, 'Exited');
    assert.equal(Buffer.concat(read.chunks.map((c) => Buffer.from(c.data, 'base64'))).toString(), 'hello from sdk\n');
    await api.call('writeFile', { params: { id: ws.id }, query: { path: 'notes.txt' }, raw: Buffer.from('kept\n') });
    const bytes = await atelier.bytes('readFile', { params: { id: ws.id }, query: { path: 'notes.txt' } });
    assert.equal(bytes.toString(), 'kept\n');
    const diff = await api.call('gitDiff', { params: { id: ws.id } });
    assert.deepEqual(diff.untracked, ['notes.txt']);
    await api.call('listSimulators', { params: { id: ws.id } });
    await api.call('egressLog', { params: { id: ws.id }, query: { limit: 10 } });
    await api.call('stopWorkshop', { params: { id: ws.id } });
    await api.call('resumeWorkshop', { params: { id: ws.id } });
    const filed = await api.call('createApproval', {
      params: { id: ws.id },
      body: { category: 'ALLOWLIST_EXPANSION', payload: { host: 'api.example.com', justification: 'sdk test' } },
    });
    const pending = await api.call('listApprovals', { query: { status: 'PENDING', workshop: ws.id } });
    assert.deepEqual(
      pending.items.map((a) => a.id),
      [filed.id],
    );
    await api.call('getApproval', { params: { id: filed.id } });
    await api.call('verifyAudit');
    const deleted = await api.call('deleteWorkshop', { params: { id: ws.id } });
    assert.equal(deleted.deleted, true);
    assert.ok(checkedRoutes.size >= 15, [...checkedRoutes].join(', '));
  });

  it('manages users, tokens and secrets', async () => {
    const added = await api.call('addUser', { body: { name: 'sdk-user', role: 'viewer' } });
    assert.equal(added.user.name, 'sdk-user');
    await api.call('listUsers');
    const token = await api.call('createToken', { body: { name: 'sdk', expiresInSeconds: 600 } });
    const asToken = createClient({ url: server.url, token: token.token });
    assert.equal((await asToken.call('whoami')).tokenId, token.id);
    await api.call('listTokens');
    await api.call('revokeToken', { params: { id: token.id } });
    await assert.rejects(asToken.call('whoami'), (err: unknown) => err instanceof AtelierError && err.code === 'TOKEN_REVOKED');
    await api.call('setSecret', { params: { name: 'SDK_SECRET' }, body: { value: 's3cret' } });
    const secrets = await api.call('listSecrets');
    assert.deepEqual(
      secrets.items.map((s) => s.name),
      ['SDK_SECRET'],
    );
    assert.equal(await atelier.call('deleteSecret', { params: { name: 'SDK_SECRET' } }), undefined);
  });

  it("turns the server's errors into AtelierError with the code and the field", async () => {
    await assert.rejects(
      atelier.call('getWorkshop', { params: { id: 'ws-missing' } }),
      (err: unknown) => err instanceof AtelierError && err.code === 'WORKSHOP_NOT_FOUND' && err.details?.id === 'ws-missing',
    );
    await assert.rejects(
      atelier.call('listApprovals', { query: { limit: 0, status: 'MAYBE' as 'PENDING' } }),
      (err: unknown) =>
        err instanceof AtelierError &&
        err.code === 'INVALID_ARGUMENT' &&
        err.details?.field === 'status' &&
        JSON.stringify(err.details?.fields) === JSON.stringify(['status', 'limit']),
    );
    await assert.rejects(
      createClient({ url: 'http://127.0.0.1:9' }).call('health'),
      (err: unknown) => err instanceof AtelierError && err.code === 'UNAVAILABLE',
    );
  });
});

// Compile-time checks (never run): the table types what a call takes and answers.
export function typeChecks(atelier: AtelierClient): void {
  // @ts-expect-error a workshop needs its repo
  void atelier.call('createWorkshop', { body: {} });
  // @ts-expect-error getWorkshop needs its id
  void atelier.call('getWorkshop');
  // @ts-expect-error listActions needs its project
  void atelier.call('listActions', { query: {} });
  // @ts-expect-error no such route
  void atelier.call('nope');
  void atelier.call('listWorkshops').then((r) => {
    // @ts-expect-error items are workshops
    const nothing: unknown = r.items[0]?.nothing;
    return nothing;
  });
}
