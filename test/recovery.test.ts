import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { TestServer, makeRepo, processesNaming } from './helpers/server.js';

// Approvals of a workshop that failed or was deleted end at once, saying why.

interface W {
  id: string;
  status: string;
  statusReason: string | null;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` until `ok` says yes (generous deadline: a busy 2-core machine), then returns the last value. */
async function until<T>(fn: () => Promise<T>, ok: (v: T) => boolean, seconds = 120): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > deadline) return v;
    await sleep(200);
  }
}

describe('approvals of a workshop that failed or was deleted', () => {
  let server: TestServer;
  let repo: string;

  before(async () => {
    server = await TestServer.start();
    repo = makeRepo();
  });
  after(async () => {
    await server?.dispose();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  interface Approval {
    status: string;
    decidedBy: string | null;
    decisionReason: string | null;
  }

  /** Files an ALLOWLIST_EXPANSION request as the workshop's agent; its id. */
  const file = async (id: string): Promise<string> => {
    const token = (await server.api<{ token: string }>('POST', '/v1/tokens', { workshopId: id, expiresInSeconds: 600 })).body.token;
    const filed = await server.api<{ id: string; status: string }>(
      'POST',
      `/v1/workshops/${id}/approvals`,
      { category: 'ALLOWLIST_EXPANSION', payload: { host: 'example.com', port: 443, justification: 'docs' } },
      { authorization: `Bearer ${token}` },
    );
    assert.equal(filed.status, 201, JSON.stringify(filed.body));
    assert.equal(filed.body.status, 'PENDING');
    return filed.body.id;
  };
  const approval = async (id: string): Promise<Approval> => (await server.api<Approval>('GET', `/v1/approvals/${id}`)).body;

  it('deleted: its pending requests end at once, REJECTED by system, saying why', async () => {
    const w = await server.createWorkshop({ repo, name: 'to-delete' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    const filed = await file(w.id);
    assert.equal((await server.api('DELETE', `/v1/workshops/${w.id}`)).status, 200);
    const a = await approval(filed);
    assert.equal(a.status, 'REJECTED', JSON.stringify(a));
    assert.equal(a.decidedBy, 'system');
    assert.match(a.decisionReason ?? '', /the workshop was deleted/);
  });

  it('failed (the server stopped during its build): its pending requests end, saying why', async () => {
    const slow = makeRepo({ '.devcontainer.json': '{ "postCreateCommand": "sleep 120" }' });
    try {
      const creating = server.api('POST', '/v1/workshops', { repo: slow, name: 'interrupted' }).catch(() => undefined);
      const building = await until(
        async () =>
          (await server.api<{ items: W[] }>('GET', '/v1/workshops')).body.items.find(
            (w) => w.status === 'Building' && processesNaming(join(server.dataDir, 'workshops', w.id)) > 0,
          ),
        (w) => w !== undefined,
      );
      assert.ok(building, 'the workshop reached its build');
      const filed = await file(building.id);
      await server.stop('SIGKILL');
      await creating;
      await server.boot();
      const w = (await server.api<W>('GET', `/v1/workshops/${building.id}`)).body;
      assert.equal(w.status, 'Failed', JSON.stringify(w));
      const a = await approval(filed);
      assert.equal(a.status, 'REJECTED', JSON.stringify(a));
      assert.equal(a.decidedBy, 'system');
      assert.match(a.decisionReason ?? '', /^the workshop failed: the server stopped while this workshop was being created/);
      assert.equal((await server.api('DELETE', `/v1/workshops/${building.id}`)).status, 200);
    } finally {
      rmSync(slow, { recursive: true, force: true });
    }
  });
});
