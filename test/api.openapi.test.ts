import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Validator } from '@seriousme/openapi-schema-validator';
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

  it('serves an OpenAPI 3.1 document, without a token, that a validator accepts', async () => {
    const res = await fetch(`${server.url}/v1/openapi.json`);
    assert.equal(res.status, 200);
    const doc = (await res.json()) as {
      openapi: string;
      info: { version: string };
      paths: Record<string, Record<string, { operationId: string }>>;
    };
    assert.equal(doc.openapi, '3.1.0');
    const validator = new Validator();
    const r = await validator.validate(doc);
    assert.deepEqual(r.errors ?? [], [], 'the OpenAPI validator refused the document');
    assert.equal(r.valid, true);
    assert.equal(validator.version, '3.1');
  });

  it('documents exactly the routes the server serves (outside the listed exceptions)', async () => {
    const doc = (await (await fetch(`${server.url}/v1/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { operationId: string; security?: unknown[] }>>;
    };
    const documented = Object.entries(doc.paths)
      .flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path.replace(/\{([^}]+)\}/g, ':$1')}`))
      .sort();
    const outside = new Set(ROUTES_OUTSIDE_TABLE.map((r) => `${r.method} ${r.path}`));
    const live = served
      .map((r) => `${r.method} ${r.url}`)
      .filter((k) => !outside.has(k))
      .sort();
    assert.deepEqual(documented, live);
    // Public routes say so (no security), and only they.
    const access = new Map(served.map((r) => [`${r.method} ${r.url}`, r.access]));
    for (const [path, ops] of Object.entries(doc.paths))
      for (const [m, op] of Object.entries(ops)) {
        const key = `${m.toUpperCase()} ${path.replace(/\{([^}]+)\}/g, ':$1')}`;
        assert.equal(op.security?.length === 0, access.get(key) === 'public', key);
      }
    const ids = Object.values(doc.paths).flatMap((ops) => Object.values(ops).map((o) => o.operationId));
    assert.equal(new Set(ids).size, ids.length, 'operationIds are unique');
  });
});
