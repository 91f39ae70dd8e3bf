import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import pg from 'pg';
import { actors } from './helpers/actors.js';
import { ExternalPostgres } from './helpers/postgres.js';
import { TestServer, makeRepo } from './helpers/server.js';

// A server killed (SIGKILL) while decisions are in flight, on an external PostgreSQL that
// outlives it: every decision that was answered is there after the restart; every committed
// decision's effect is applied exactly once — including those whose effect had not been applied
// (or not recorded) when the process died, and with a second SIGKILL during that re-drive: each
// domain once in the workshop's persisted policy (and reachable through its proxy), each branch
// pushed once to a real bare remote (one reflog entry, the approval's own commit), one audit row
// per decision, and an audit chain that still verifies.
const ORIGIN = '127.0.0.6';
const PORT = 18196;
const DOMAINS = 40;
const BRANCHES = 6;

interface Approval {
  id: string;
  status: string;
  category: string;
  payload: Record<string, unknown>;
  effect: { appliedAt: string | null; error: string | null };
}

interface State {
  id: string;
  status: string;
  applied: boolean;
  error: string | null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const git = (dir: string, ...args: string[]): string => execFileSync('git', ['-C', dir, ...args], { encoding: 'utf8' }).trim();

describe('approvals: a server killed during decisions', () => {
  let db: ExternalPostgres;
  let server: TestServer;
  let sql: pg.Client;
  let dir: string;
  let repo: string;
  let remote: string;
  let origin: Server;
  let ws: string;
  const { tokens, as } = actors(() => server);

  const states = async (ids: string[]): Promise<Map<string, State>> => {
    const r = await sql.query<State>(
      `SELECT r.id, r.status, c.effect_applied_at IS NOT NULL AS applied, c.effect_error AS error
         FROM hitl_requests r JOIN hitl_request_context c ON c.request_id = r.id WHERE r.id = ANY($1::uuid[])`,
      [ids],
    );
    return new Map(r.rows.map((s) => [s.id, s]));
  };
  /** Waits (by the database, whatever the server answers) until every approved request's effect is recorded. */
  const allApplied = async (ids: string[]): Promise<Map<string, State>> => {
    const until = Date.now() + 90_000;
    for (;;) {
      const s = await states(ids);
      const left = [...s.values()].filter((x) => x.status === 'APPROVED' && !x.applied);
      if (left.length === 0 || Date.now() > until) return s;
      await sleep(100);
    }
  };
  /**
   * Waits until the killed server's database sessions are gone. A COMMIT the process sent just
   * before SIGKILL is still carried out by its backend, which only then sees the closed socket:
   * reading the states before that would take a decision committed a moment later for one the
   * dead server never committed.
   */
  const deadSessionsGone = async (): Promise<void> => {
    const until = Date.now() + 60_000;
    for (;;) {
      const r = await sql.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
      );
      if (r.rows[0]!.n === 0) return;
      assert.ok(Date.now() < until, `${r.rows[0]!.n} sessions of the killed server still open after 60 s`);
      await sleep(50);
    }
  };
  const approvedEntries = async (): Promise<string[]> =>
    (await sql.query<{ e: string[] | null }>("SELECT egress->'approved' AS e FROM workshops WHERE id = $1", [ws])).rows[0]?.e ?? [];

  before(async () => {
    db = ExternalPostgres.start();
    dir = mkdtempSync('/tmp/atelier-approvals-kill-');
    origin = createServer((req, res) => res.end(`origin says hi to ${req.headers.host ?? '?'}\n`));
    await new Promise<void>((r) => origin.listen(PORT, ORIGIN, r));
    const hosts = join(dir, 'hosts');
    writeFileSync(hosts, `${ORIGIN} ${Array.from({ length: DOMAINS }, (_, i) => `d${i}.test`).join(' ')}\n`);
    server = await TestServer.start({
      databaseUrl: db.url,
      env: {
        ATELIER_MASTER_KEY_FILE: join(dir, 'master.key'),
        ATELIER_EGRESS_HOSTS: hosts,
        ATELIER_EGRESS_ALLOW_RANGES: `${ORIGIN}/32`,
        ATELIER_EGRESS_DEFAULTS: 'none',
        ATELIER_EGRESS_DNS: '127.0.0.1',
      },
    });
    tokens.admin = server.token;
    assert.equal((await as('admin', 'POST', '/v1/users', { name: 'owner', role: 'member' })).status, 201);
    tokens.owner = (await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: 'owner', expiresInSeconds: 3600 })).body.token;
    repo = makeRepo({ 'README.md': '# kill\n', 'atelier.yaml': 'egress:\n  allow: []\n' });
    remote = join(dir, 'origin.git');
    execFileSync('git', ['clone', '-q', '--bare', repo, remote]);
    git(remote, 'config', 'core.logAllRefUpdates', 'always');
    const w = await as<{ id: string; status: string; statusReason: string }>('owner', 'POST', '/v1/workshops', { repo, name: 'kill' });
    assert.equal(w.status, 201, JSON.stringify(w.body));
    assert.equal(w.body.status, 'Running', w.body.statusReason);
    ws = w.body.id;
    tokens.agent = (await as<{ token: string }>('owner', 'POST', '/v1/tokens', { workshopId: ws, expiresInSeconds: 3600 })).body.token;
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
  });

  after(async () => {
    await sql?.end();
    await server?.dispose();
    origin?.close();
    db?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('every answered decision survives, every committed effect is applied exactly once', async (t) => {
    await server.exec(ws, ['sh', '-c', 'echo "made in the workshop" > kill.txt']);
    const file = async (category: string, payload: Record<string, unknown>): Promise<Approval> => {
      const r = await as<Approval>('agent', 'POST', `/v1/workshops/${ws}/approvals`, {
        category,
        payload: { justification: 'kill test', ...payload },
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return r.body;
    };
    const prs: Approval[] = [];
    for (let i = 0; i < BRANCHES; i++) prs.push(await file('PR_GATEWAY', { branch: `kill/${i}`, remote, title: `Kill ${i}` }));
    const hosts: Approval[] = [];
    for (let i = 0; i < DOMAINS; i++) hosts.push(await file('ALLOWLIST_EXPANSION', { host: `d${i}.test`, port: PORT }));
    const all = [...prs, ...hosts];
    const ids = all.map((a) => a.id);

    // Every decision at once; SIGKILL once a quarter of them are answered (so some are
    // committed, some in the middle of their transaction, some not sent yet, effects under way).
    let enough!: () => void;
    const answered = new Promise<void>((r) => (enough = r));
    let n = 0;
    const decisions = all.map((a) =>
      as('owner', 'POST', `/v1/approvals/${a.id}/decision`, { decision: 'APPROVE', reason: 'ship it' }).then(
        (r) => {
          if (r.status === 200 && ++n === Math.ceil(all.length / 4)) enough();
          return r.status;
        },
        () => 'lost' as const,
      ),
    );
    await Promise.race([answered, Promise.all(decisions)]);
    await server.stop('SIGKILL');
    const answers = await Promise.all(decisions);
    await deadSessionsGone();

    const atKill = await states(ids);
    const ok = ids.filter((_, i) => answers[i] === 200);
    assert.ok(ok.length > 0);
    for (const [i, answer] of answers.entries())
      assert.ok(answer === 200 || answer === 'lost', `decision ${i}: ${String(answer)} (only 200 or a lost answer)`);
    for (const id of ok) assert.equal(atKill.get(id)?.status, 'APPROVED', `answered 200, so committed: ${id}`);
    const committed = [...atKill.values()].filter((s) => s.status === 'APPROVED');
    const unapplied = committed.filter((s) => !s.applied);
    t.diagnostic(`at the kill: ${ok.length} answered, ${committed.length} committed, ${unapplied.length} with their effect not recorded`);
    // The answers come back right after their commits; the effects (PR pushes most of all) take longer.
    assert.ok(unapplied.length > 0, 'some committed decisions had their effect still to apply');

    // Back, killed again while it re-drives those effects, back again.
    await server.boot();
    await server.stop('SIGKILL');
    await server.boot();
    const redriven = await allApplied(ids);
    for (const s of committed) {
      const now = redriven.get(s.id)!;
      assert.equal(now.status, 'APPROVED');
      assert.ok(now.applied, `effect of ${s.id} applied after the restart`);
      assert.equal(now.error, null, `effect of ${s.id}`);
    }
    // Nothing a dead server did not commit is decided: those are still PENDING, decided now.
    for (const id of ids) if (!committed.some((s) => s.id === id)) assert.equal(redriven.get(id)?.status, 'PENDING');
    // All at once again: many effects under way together must not starve each other of connections.
    const rest = await Promise.all(
      ids
        .filter((id) => redriven.get(id)?.status === 'PENDING')
        .map((id) => as('owner', 'POST', `/v1/approvals/${id}/decision`, { decision: 'APPROVE', reason: 'after the restart' })),
    );
    for (const r of rest) assert.equal(r.status, 200, JSON.stringify(r.body));
    const final = await allApplied(ids);
    for (const id of ids) {
      const s = final.get(id)!;
      assert.equal(s.status, 'APPROVED');
      assert.ok(s.applied, `effect of ${id} recorded`);
      assert.equal(s.error, null);
    }

    // Each domain once in the persisted policy, nothing else; reachable through the live proxy.
    const entries = await approvedEntries();
    assert.deepEqual([...entries].sort(), Array.from({ length: DOMAINS }, (_, i) => `d${i}.test:${PORT}`).sort());
    for (const i of [0, DOMAINS - 1]) {
      const r = await server.exec(ws, ['sh', '-c', `curl -sS -m 20 -o /dev/null -w '%{http_code}' http://d${i}.test:${PORT}/`]);
      assert.equal(r.stdout, '200', r.stderr);
    }

    // Each branch pushed once: one reflog entry, the approval's own commit, the workspace's change.
    const base = git(repo, 'rev-parse', 'HEAD');
    for (const [i, a] of prs.entries()) {
      const branch = `kill/${i}`;
      assert.equal(git(remote, 'reflog', 'show', '--format=%H', `refs/heads/${branch}`).split('\n').length, 1, branch);
      assert.equal(git(remote, 'show', `${branch}:kill.txt`), 'made in the workshop');
      assert.equal(git(remote, 'rev-parse', `${branch}^`), base);
      assert.match(git(remote, 'log', '-1', '--format=%B', branch), new RegExp(`^Kill ${i}\\n[^]*\\(approval ${a.id}\\)`));
    }

    // One creation and one decision in the audit per request; the chain verifies.
    const audit = await sql.query<{ request_id: string; event: string; n: string }>(
      'SELECT request_id, event, count(*) AS n FROM hitl_audit WHERE request_id = ANY($1::uuid[]) GROUP BY 1, 2',
      [ids],
    );
    assert.equal(audit.rows.length, ids.length * 2, JSON.stringify(audit.rows));
    for (const row of audit.rows) {
      assert.ok(row.event === 'CREATED' || row.event === 'APPROVED', row.event);
      assert.equal(Number(row.n), 1, `${row.request_id} ${row.event}`);
    }
    const verify = await server.cli(['audit', 'verify']);
    assert.equal(verify.code, 0, verify.stdout + verify.stderr);
    // The workspace keeps no trace of the pushes (their refs are removed once bundled).
    assert.equal((await server.exec(ws, ['git', 'for-each-ref', 'refs/atelier'])).stdout, '');
  });
});
