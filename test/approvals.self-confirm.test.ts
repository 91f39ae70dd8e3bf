import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { TestServer, makeRepo } from './helpers/server.js';

interface Approval {
  id: string;
  status: string;
  decidedBy: string | null;
  decisionReason: string | null;
}

// A person alone on their server (ATELIER_APPROVALS_SELF_CONFIRM=sole-maintainer): the lone owner
// may confirm what they filed by their own hand, never what an agent filed, and no longer once
// someone else could decide.
describe('approvals: the sole maintainer confirms their own requests (ATELIER_APPROVALS_SELF_CONFIRM)', () => {
  let server: TestServer;
  let off: TestServer;
  let repo: string;
  let ws: string;
  let agent: string;

  before(async () => {
    repo = makeRepo();
    server = await TestServer.start({ env: { ATELIER_APPROVALS_SELF_CONFIRM: 'sole-maintainer' } });
    ws = (await server.createWorkshop({ repo })).id;
    agent = (await server.api<{ token: string }>('POST', '/v1/tokens', { workshopId: ws, expiresInSeconds: 600 })).body.token;
    off = await TestServer.start();
  });
  after(async () => {
    await server?.dispose();
    await off?.dispose();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  const file = async (s: TestServer, workshop: string, token?: string): Promise<string> => {
    const r = await s.api<Approval>(
      'POST',
      `/v1/workshops/${workshop}/approvals`,
      { category: 'ALLOWLIST_EXPANSION', payload: { host: 'example.org', justification: 'docs' } },
      token ? { authorization: `Bearer ${token}` } : {},
    );
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id;
  };

  it('lets the lone owner confirm a request filed with their own token, marked as self-confirmed in the history', async () => {
    const id = await file(server, ws);
    const r = await server.cli(['approve', id, '--reason', 'alone here']);
    assert.equal(r.code, 0, r.stderr);
    const a = await server.api<Approval>('GET', `/v1/approvals/${id}`);
    assert.equal(a.body.status, 'APPROVED');
    assert.match(
      a.body.decisionReason ?? '',
      /^self-confirmed by the workshop's only maintainer \(ATELIER_APPROVALS_SELF_CONFIRM\): alone here$/,
    );
  });

  it('never lets them decide what an agent token filed', async () => {
    const id = await file(server, ws, agent);
    const r = await server.api<{ code: string; message: string }>('POST', `/v1/approvals/${id}/decision`, {
      decision: 'APPROVE',
      reason: 'x',
    });
    // The agent filed it: an owner may decide it in any case (the ordinary rule), but only as themselves.
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const own = await file(server, ws, agent);
    const byAgent = await server.api<{ code: string }>(
      'POST',
      `/v1/approvals/${own}/decision`,
      { decision: 'APPROVE', reason: 'x' },
      { authorization: `Bearer ${agent}` },
    );
    assert.equal(byAgent.status, 403);
  });

  it('refuses once another person of the tenant could decide (a maintainer added)', async () => {
    assert.equal((await server.api('POST', '/v1/users', { name: 'lead', role: 'maintainer' })).status, 201);
    const id = await file(server, ws);
    const r = await server.api<{ code: string; message: string }>('POST', `/v1/approvals/${id}/decision`, {
      decision: 'APPROVE',
      reason: 'x',
    });
    assert.equal(r.status, 403);
    assert.match(r.body.message, /you filed this request: someone else .* must decide it; only the owner who is the sole maintainer/);
    assert.equal((await server.api<Approval>('GET', `/v1/approvals/${id}`)).body.status, 'PENDING');
  });

  it('is off by default, and says how an admin turns it on', async () => {
    const w = (await off.createWorkshop({ repo })).id;
    const id = await file(off, w);
    const r = await off.api<{ code: string; message: string }>('POST', `/v1/approvals/${id}/decision`, {
      decision: 'APPROVE',
      reason: 'x',
    });
    assert.equal(r.status, 403);
    assert.match(r.body.message, /alone on this server\? an admin can set ATELIER_APPROVALS_SELF_CONFIRM=sole-maintainer/);
  });
});
