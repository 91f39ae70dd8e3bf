import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { TestServer, makeRepo } from './helpers/server.js';
import { ExternalPostgres } from './helpers/postgres.js';

// Two server processes sharing one external PostgreSQL: one decision wins whatever replica it
// reaches, a waiter on one replica is woken by a decision on the other, requests expire closed
// by the database clock (also while every server is down), effects are applied once by the
// workshop's own server, and the audit refuses edits and reveals those made behind its back.
interface Approval {
  id: string;
  status: string;
  decidedBy: string | null;
  effect: { appliedAt: string | null; error: string | null };
}

describe('approvals across replicas', () => {
  let db: ExternalPostgres;
  let a: TestServer;
  let b: TestServer;
  let keyDir: string;
  let repo: string;
  let ws: string;
  let agent: string;
  let sql: pg.Client;

  const file = async (server: TestServer, payload: Record<string, unknown>, ttlSeconds?: number): Promise<Approval> => {
    const r = await server.api<Approval>(
      'POST',
      `/v1/workshops/${ws}/approvals`,
      { category: 'ALLOWLIST_EXPANSION', payload: { justification: 'replica test', ...payload }, ...(ttlSeconds ? { ttlSeconds } : {}) },
      { authorization: `Bearer ${agent}` },
    );
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  };

  before(async () => {
    db = ExternalPostgres.start();
    keyDir = mkdtempSync('/tmp/atelier-key-');
    const env = { ATELIER_MASTER_KEY_FILE: join(keyDir, 'master.key') };
    a = await TestServer.start({ databaseUrl: db.url, env, args: ['--node-name', 'replica-a'] });
    b = await TestServer.start({ databaseUrl: db.url, env, args: ['--node-name', 'replica-b'] });
    b.token = a.token;
    repo = makeRepo();
    // On node a: the tests stop it to see what its own workshop's effects wait for.
    const w = await a.createWorkshop({ repo, name: 'replicas', node: 'replica-a' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    ws = w.id;
    agent = (await a.api<{ token: string }>('POST', '/v1/tokens', { workshopId: ws, expiresInSeconds: 3600 })).body.token;
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
  });

  after(async () => {
    await sql?.end();
    await a?.dispose();
    await b?.dispose();
    db?.stop();
    rmSync(keyDir, { recursive: true, force: true });
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('50 concurrent decisions over two servers: exactly one wins, one audit row, everyone else gets 409', async () => {
    const req = await file(a, { host: 'race.example' });
    const calls = Array.from({ length: 50 }, (_, i) =>
      (i % 2 === 0 ? a : b).api<{ code?: string; status?: string; details?: { approval: Approval } }>(
        'POST',
        `/v1/approvals/${req.id}/decision`,
        { decision: i % 3 === 0 ? 'REJECT' : 'APPROVE', reason: `decider ${i}` },
      ),
    );
    const results = await Promise.all(calls);
    const won = results.filter((r) => r.status === 200);
    const lost = results.filter((r) => r.status === 409);
    assert.equal(won.length, 1, JSON.stringify(results.map((r) => r.status)));
    assert.equal(lost.length, 49);
    const final = (await b.api<Approval>('GET', `/v1/approvals/${req.id}`)).body;
    for (const r of lost) assert.equal(r.body.details?.approval.status, final.status);
    const audit = await sql.query<{ n: string }>(
      "SELECT count(*) AS n FROM hitl_audit WHERE request_id = $1 AND event IN ('APPROVED', 'REJECTED')",
      [req.id],
    );
    assert.equal(Number(audit.rows[0]!.n), 1);
  });

  it('a waiter on one server is woken by a decision on the other', async () => {
    const req = await file(a, { host: 'wake.example' });
    const waiting = b.api<Approval>('GET', `/v1/approvals/${req.id}/wait?timeout=120`, undefined, { authorization: `Bearer ${agent}` });
    // The decision lands on the other replica only once the wait is surely in place.
    await new Promise((r) => setTimeout(r, 300));
    const d = await a.api('POST', `/v1/approvals/${req.id}/decision`, { decision: 'REJECT', reason: 'not this one' });
    assert.equal(d.status, 200);
    const w = await waiting;
    assert.equal(w.status, 200);
    assert.equal(w.body.status, 'REJECTED');
  });

  it('an approval decided while the workshop’s server is down takes effect once when it is back', async () => {
    const req = await file(a, { host: 'later.example' });
    await a.stop();
    const d = await b.api<Approval>('POST', `/v1/approvals/${req.id}/decision`, { decision: 'APPROVE', reason: 'ok' });
    assert.equal(d.status, 200);
    // B does not run the workshop: nothing applied yet.
    assert.equal((await b.api<Approval>('GET', `/v1/approvals/${req.id}`)).body.effect.appliedAt, null);
    await a.boot();
    let applied: Approval | undefined;
    const until = Date.now() + 20_000;
    while (Date.now() < until) {
      applied = (await a.api<Approval>('GET', `/v1/approvals/${req.id}`)).body;
      if (applied.effect.appliedAt) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(applied?.effect.appliedAt, 'applied after the restart');
    const egress = await sql.query<{ approved: string[] }>("SELECT egress->'approved' AS approved FROM workshops WHERE id = $1", [ws]);
    assert.deepEqual(
      egress.rows[0]!.approved.filter((e) => e === 'later.example'),
      ['later.example'],
    );
  });

  it('expires closed by the database clock while every server is down; a late decision is 409', async () => {
    const req = await file(a, { host: 'slow.example' }, 2);
    await Promise.all([a.stop('SIGKILL'), b.stop('SIGKILL')]);
    await new Promise((r) => setTimeout(r, 3000));
    await a.boot();
    const got = await a.api<Approval>('GET', `/v1/approvals/${req.id}`, undefined, { authorization: `Bearer ${agent}` });
    assert.equal(got.body.status, 'EXPIRED');
    const late = await a.api<{ code: string; message: string }>('POST', `/v1/approvals/${req.id}/decision`, {
      decision: 'APPROVE',
      reason: 'too late',
    });
    assert.equal(late.status, 409);
    assert.match(late.body.message, /expired/);
    const cli = await a.cli(['approvals', 'show', req.id, '-o', 'json'], { env: { ATELIER_TOKEN: agent } });
    assert.equal((JSON.parse(cli.stdout) as Approval).status, 'EXPIRED');
    const waited = await a.api<Approval>('GET', `/v1/approvals/${req.id}/wait?timeout=5`, undefined, { authorization: `Bearer ${agent}` });
    assert.equal(waited.body.status, 'EXPIRED');
    const expired = await sql.query<{ n: string }>("SELECT count(*) AS n FROM hitl_audit WHERE request_id = $1 AND event = 'EXPIRED'", [
      req.id,
    ]);
    assert.equal(Number(expired.rows[0]!.n), 1);
    await b.boot();
    b.token = a.token;
  });

  it('one node runs the periodic jobs; when it dies another takes over and expires what comes due', async () => {
    const leading = async (s: TestServer): Promise<number> => {
      const text = await (await fetch(`${s.url}/metrics`)).text();
      return Number(/^atelier_leader (\d)$/m.exec(text)?.[1] ?? -1);
    };
    const until = async (what: string, ok: () => Promise<boolean>): Promise<void> => {
      const end = Date.now() + 60_000;
      while (!(await ok())) {
        if (Date.now() > end) assert.fail(`not within 60 s: ${what}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    const states = [await leading(a), await leading(b)];
    assert.deepEqual([...states].sort(), [0, 1], `exactly one leader (a: ${states[0]}, b: ${states[1]})`);
    const [leader, other] = states[0] === 1 ? [a, b] : [b, a];
    const req = await file(other, { host: 'takeover.example' }, 2);
    await leader.stop('SIGKILL');
    await until('the other node leads', async () => (await leading(other)) === 1);
    await until('the request expired', async () => (await other.api<Approval>('GET', `/v1/approvals/${req.id}`)).body.status === 'EXPIRED');
    await leader.boot();
    b.token = a.token;
    // The lock stays where it is: the node that comes back does not lead.
    assert.equal(await leading(leader), 0);
    assert.equal(await leading(other), 1);
  });

  it('the audit refuses UPDATE, DELETE and TRUNCATE, and `audit verify` detects edits made behind its back', async () => {
    const ok = await a.cli(['audit', 'verify']);
    assert.equal(ok.code, 0, ok.stdout + ok.stderr);
    assert.match(ok.stdout, /audit intact/);
    for (const statement of ["UPDATE hitl_audit SET subject = 'nobody'", 'DELETE FROM hitl_audit', 'TRUNCATE hitl_audit'])
      await assert.rejects(sql.query(statement), /append-only/);
    // A superuser can switch triggers off; the chain still tells.
    await sql.query('BEGIN');
    await sql.query('SET LOCAL session_replication_role = replica');
    await sql.query("UPDATE hitl_audit SET subject = 'user/mallory' WHERE seq = 3");
    await sql.query('COMMIT');
    const bad = await a.cli(['audit', 'verify']);
    assert.equal(bad.code, 1);
    assert.match(bad.stdout, /row 3 .*content does not match its hash/);
    const json = JSON.parse((await b.cli(['audit', 'verify', '-o', 'json'])).stdout) as { ok: boolean; problems: { seq: number }[] };
    assert.equal(json.ok, false);
    // A request changed directly in its table no longer matches its last audited state.
    await sql.query("UPDATE hitl_requests SET status = 'APPROVED', decided_by = 'mallory' WHERE status = 'EXPIRED'");
    const changed = await a.cli(['audit', 'verify']);
    assert.match(changed.stdout, /differs from its last audited state/);
  });
});
