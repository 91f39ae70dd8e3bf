import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import pg from 'pg';
import { egressPolicy } from '../src/cli/commands/workshops/render.js';
import { actors } from './helpers/actors.js';
import { ExternalPostgres } from './helpers/postgres.js';
import { TestServer, makeRepo } from './helpers/server.js';

// Issue 18, rough edge 5: hosts approved through ALLOWLIST_EXPANSION appeared nowhere. The
// workshop (API and `workshops status`) shows its live egress policy, every entry with where it
// came from: platform (server configuration), project (atelier.yaml) or approval (the request,
// who decided it, when), stored with the entry and kept for entries approved before (migration 020).

interface PolicyEntry {
  rule: string;
  entry: string;
  origin: string;
  approval: { requestId: string | null; decidedBy: string | null; decidedAt: string | null } | null;
}
interface WorkshopView {
  id: string;
  egress: { allow: string[]; deny: string[]; policy: PolicyEntry[] };
}
interface Approval {
  id: string;
  status: string;
  decidedBy: string | null;
  decidedAt: string | null;
  effect: { appliedAt: string | null; error: string | null };
}

describe('egress policy origins', () => {
  let db: ExternalPostgres;
  let sql: pg.Client;
  let server: TestServer;
  const { tokens, as, cliAs, workshopWithAgent } = actors(() => server);
  let repo: string;
  let ws: string;
  let approved: Approval;

  before(async () => {
    db = ExternalPostgres.start();
    server = await TestServer.start({
      databaseUrl: db.url,
      env: { ATELIER_EGRESS_DEFAULTS: 'platform.test', ATELIER_EGRESS_ALLOW_RANGES: '127.0.0.3/32', ATELIER_EGRESS_DNS: '127.0.0.1' },
    });
    tokens.admin = server.token;
    for (const [name, role] of [
      ['owner', 'member'],
      ['lead', 'maintainer'],
    ] as const) {
      assert.equal((await as('admin', 'POST', '/v1/users', { name, role })).status, 201);
      tokens[name] = (await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: name, expiresInSeconds: 3600 })).body.token;
    }
    repo = makeRepo({ 'atelier.yaml': 'egress:\n  allow: [project.test]\n  deny: [blocked.test]\n' });
    ws = await workshopWithAgent(repo, 'origins');
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
  });

  after(async () => {
    await sql?.end();
    await server?.dispose();
    db?.stop();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('an approved host shows in the live policy with the request, who decided it and when (API and CLI)', async () => {
    const filed = await as<Approval>('agent', 'POST', `/v1/workshops/${ws}/approvals`, {
      category: 'ALLOWLIST_EXPANSION',
      payload: { host: 'Asked.test', port: 8443, justification: 'the test needs it' },
    });
    assert.equal(filed.status, 201, JSON.stringify(filed.body));
    const ok = await cliAs('lead', ['approvals', 'approve', filed.body.id, '--reason', 'fine']);
    assert.equal(ok.code, 0, ok.stderr);
    const until = Date.now() + 30_000;
    do {
      approved = (await as<Approval>('owner', 'GET', `/v1/approvals/${filed.body.id}`)).body;
      if (approved.effect.appliedAt) break;
      await new Promise((r) => setTimeout(r, 100));
    } while (Date.now() < until);
    assert.ok(approved.effect.appliedAt, 'the effect was applied');
    assert.equal(approved.effect.error, null);

    const w = await as<WorkshopView>('owner', 'GET', `/v1/workshops/${ws}`);
    assert.equal(w.status, 200, JSON.stringify(w.body));
    assert.deepEqual(w.body.egress.policy, [
      { rule: 'allow', entry: 'platform.test', origin: 'platform', approval: null },
      { rule: 'allow', entry: 'project.test', origin: 'project', approval: null },
      {
        rule: 'allow',
        entry: 'asked.test:8443',
        origin: 'approval',
        approval: { requestId: filed.body.id, decidedBy: 'lead', decidedAt: approved.decidedAt },
      },
      { rule: 'deny', entry: 'blocked.test', origin: 'project', approval: null },
      { rule: 'allowRange', entry: '127.0.0.3/32', origin: 'platform', approval: null },
    ]);
    // The project's own lists are as before.
    assert.deepEqual(w.body.egress.allow, ['project.test']);

    const status = await cliAs('owner', ['workshops', 'status', ws]);
    assert.equal(status.code, 0, status.stderr);
    const line = status.stdout.split('\n').find((l) => l.includes('asked.test:8443'));
    assert.ok(line, status.stdout);
    assert.match(line, /allow\s+asked\.test:8443\s+approval by lead at \S+, request \S+/);
    assert.ok(line.includes(approved.decidedAt!) && line.includes(filed.body.id), line);
    assert.match(status.stdout, /allow\s+platform\.test\s+platform \(server configuration\)/);
    assert.match(status.stdout, /deny\s+blocked\.test\s+project \(atelier\.yaml\)/);
  });

  it('the OpenAPI document describes the policy and its origins', async () => {
    const doc = (await (await fetch(`${server.url}/v1/openapi.json`)).json()) as Record<string, unknown>;
    const text = JSON.stringify(doc);
    const at = text.indexOf('"policy"');
    assert.ok(at > 0, 'the workshop schema has egress.policy');
    assert.match(text.slice(at, at + 4000), /"platform","project","approval"/);
  });

  it('entries approved before origins were kept get theirs from the approved request (migration 020)', async () => {
    // The row as an older server left it: approved entries, no origins; one entry no request names.
    await sql.query(
      `UPDATE workshops SET egress = jsonb_set(egress - 'origins', '{approved}', egress->'approved' || '["legacy.test"]'::jsonb) WHERE id = $1`,
      [ws],
    );
    await sql.query(`DELETE FROM schema_migrations WHERE version = '020_egress_origins.sql'`);
    await server.stop();
    await server.boot();
    const w = await as<WorkshopView>('owner', 'GET', `/v1/workshops/${ws}`);
    assert.equal(w.status, 200, JSON.stringify(w.body));
    const byEntry = new Map(w.body.egress.policy.map((e) => [e.entry, e]));
    assert.deepEqual(byEntry.get('asked.test:8443')?.approval, {
      requestId: approved.id,
      decidedBy: 'lead',
      decidedAt: approved.decidedAt,
    });
    assert.deepEqual(byEntry.get('legacy.test'), {
      rule: 'allow',
      entry: 'legacy.test',
      origin: 'approval',
      approval: { requestId: null, decidedBy: null, decidedAt: null },
    });
    const status = await cliAs('owner', ['workshops', 'status', ws]);
    assert.match(status.stdout, /allow\s+legacy\.test\s+approval \(who and when not recorded\)/);
  });

  it('agent-written text in the policy is printed escaped, never as terminal control sequences', () => {
    const out = egressPolicy([
      {
        rule: 'allow',
        entry: 'evil\u001b[2J.test',
        origin: 'approval',
        approval: { requestId: 'r-1', decidedBy: 'x\u001b]0;owned\u0007y', decidedAt: '2026-12-02T00:00:00.000Z' },
      },
    ]);
    // eslint-disable-next-line no-control-regex
    assert.ok(!/[\u0000-\u001f\u007f-\u009f]/.test(out.replace(/\n/g, '')), JSON.stringify(out));
    assert.match(out, /evil\\u001b\[2J\.test/);
    assert.match(out, /x\\u001b\]0;owned\\u0007y/);
  });
});
