import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ROUTES, ROUTES_OUTSIDE_TABLE, type RouteDef } from '../src/core/index.js';
import { TestServer } from './helpers/server.js';

/**
 * The route table in core (src/core/routes.ts) against the routes a real server serves: none
 * missing, none extra, and the same rule on who needs a token.
 */
describe('route table', () => {
  let server: TestServer;
  let served: { method: string; url: string; access: unknown }[];
  before(async () => {
    server = await TestServer.start();
    const r = await server.api<{ items: typeof served }>('GET', '/v1/admin/routes');
    assert.equal(r.status, 200, JSON.stringify(r.body));
    served = r.body.items;
  });
  after(async () => {
    await server?.dispose();
  });

  const table = Object.values(ROUTES as Record<string, RouteDef>);

  it('names every route the server serves, and no other', () => {
    const live = served.map((r) => `${r.method} ${r.url}`).sort();
    const known = [...table.map((r) => `${r.method} ${r.path}`), ...ROUTES_OUTSIDE_TABLE.map((r) => `${r.method} ${r.path}`)].sort();
    const missing = live.filter((r) => !known.includes(r));
    const extra = known.filter((r) => !live.includes(r));
    assert.deepEqual(
      { missing, extra },
      { missing: [], extra: [] },
      'routes served but not in the table (missing), or in it but not served (extra)',
    );
  });

  it('has one entry per method and path', () => {
    const keys = table.map((r) => `${r.method} ${r.path}`);
    assert.equal(new Set(keys).size, keys.length);
  });

  it('says public exactly for the routes that need no token', () => {
    const access = new Map(served.map((r) => [`${r.method} ${r.url}`, r.access]));
    const wrong = table.filter((r) => (access.get(`${r.method} ${r.path}`) === 'public') !== (r.auth === 'public')).map((r) => r.path);
    assert.deepEqual(wrong, []);
  });
});
