import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { TestServer, makeRepo, processesNaming, pollUntil } from './helpers/server.js';
import { ExternalPostgres } from './helpers/postgres.js';

// Recovery after a restart never gives a workshop up for a transient reason: the database
// unavailable while workshops are taken back is retried in the background (the server starts and
// serves meanwhile), every sandbox and its processes are left as they are, and each workshop's
// reason says what is happening. A workshop that failed comes back with `resume`, files kept;
// approvals of a workshop that failed or was deleted end at once, saying why.

interface W {
  id: string;
  status: string;
  statusReason: string | null;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Host pids of the processes whose command line is exactly `argv` (a workshop's marked sleep). */
function hostPids(argv: string[]): number[] {
  const want = argv.join('\0') + '\0';
  const found: number[] = [];
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      if (readFileSync(`/proc/${p}/cmdline`, 'utf8') === want) found.push(Number(p));
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

/** Kills every host process that names `path` (as processesNaming counts them: a bwrap sandbox by its log). */
function killNaming(path: string): void {
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    let named = false;
    try {
      named = readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(path) || readlinkSync(`/proc/${p}/fd/1`).startsWith(`${path}/`);
    } catch {
      // exited meanwhile, or no stdout
    }
    if (named) process.kill(Number(p), 'SIGKILL');
  }
}

/** The kernel's start time of a host process (field 22 of /proc/PID/stat): same pid and start, same process. */
function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/** Polls `fn` until `ok` says yes (a hang guard: a busy 2-core machine). */
const until = pollUntil;

describe('recovery after a restart meets an unavailable database', () => {
  let db: ExternalPostgres;
  let server: TestServer;
  let repo: string;
  let holder: pg.Client | undefined;
  let admin: pg.Client;

  before(async () => {
    db = ExternalPostgres.start();
    server = await TestServer.start({ databaseUrl: db.url });
    repo = makeRepo();
    admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
  });
  after(async () => {
    await holder?.end().catch(() => undefined);
    await admin?.end().catch(() => undefined);
    await server?.dispose();
    db?.stop();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  /** Ends (as the database does when it goes away: 57P01) every server connection waiting for the held lock; how many. */
  const cutWaiting = async (): Promise<number> => {
    const r = await admin.query<{ n: string }>(
      `SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity
        WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND query ILIKE '%workshop_simulators%'`,
    );
    return Number(r.rows[0]!.n);
  };

  it('keeps every sandbox and its processes, says it is retrying, and takes each workshop back once the database answers', async () => {
    const ids: string[] = [];
    const marks: string[][] = [];
    for (const n of [1, 2]) {
      const w = await server.createWorkshop({ repo, name: `recover-${n}` });
      assert.equal(w.status, 'Running', w.statusReason ?? '');
      const mark = ['sleep', String(86400 + n)];
      await server.exec(w.id, ['sh', '-c', `${mark.join(' ')} >/dev/null 2>&1 & echo mine > /workspace/kept.txt`]);
      ids.push(w.id);
      marks.push(mark);
    }
    const found = await until(
      async () => marks.map((m) => hostPids(m)),
      (p) => p.every((x) => x.length === 1),
      30,
    );
    const pids = found.map((p) => p[0]!);
    const starts = pids.map(startTime);

    await server.stop('SIGTERM');
    // Another connection holds the table every recovery reads: each of its reads waits, and is
    // then cut as a database going away cuts it, until the lock is released.
    holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE workshop_simulators IN ACCESS EXCLUSIVE MODE');
    let booted = false;
    const booting = server.boot().finally(() => (booted = true));
    let cut = 0;
    while (!booted) {
      cut += await cutWaiting();
      await sleep(100);
    }
    await booting;
    assert.ok(cut > 0, 'recovery met the unavailable database at start');

    // The server started and serves while the workshops are retried; each says what is happening.
    const seen = await until(
      async () => {
        cut += await cutWaiting();
        return Promise.all(ids.map(async (id) => (await server.api<W>('GET', `/v1/workshops/${id}`)).body));
      },
      (ws) => ws.every((w) => /^recovering after a restart: the database is unavailable; retrying/.test(w.statusReason ?? '')),
    );
    for (const w of seen) {
      assert.equal(w.status, 'Running', `${JSON.stringify(w)}\n${server.log}`);
      assert.match(w.statusReason ?? '', /^recovering after a restart: the database is unavailable; retrying/, server.log);
    }
    const list = await server.api<{ items: W[] }>('GET', '/v1/workshops');
    assert.equal(list.status, 200);
    assert.deepEqual(list.body.items.map((w) => w.id).sort(), [...ids].sort());
    const shown = await server.cli(['workshops', 'status', ids[0]!]);
    assert.match(shown.stdout, /reason:\s+recovering after a restart: the database is unavailable; retrying/, shown.stdout + shown.stderr);
    // Nothing was torn down meanwhile: the same processes, in the same sandboxes.
    assert.deepEqual(pids.map(startTime), starts, 'the processes started before the restart are still there');

    await holder.query('COMMIT');
    const back = await until(
      () => Promise.all(ids.map(async (id) => (await server.api<W>('GET', `/v1/workshops/${id}`)).body)),
      (ws) => ws.every((w) => w.status === 'Running' && w.statusReason === null),
    );
    for (const [i, w] of back.entries()) {
      assert.equal(w.status, 'Running', `${JSON.stringify(w)}\n${server.log}`);
      assert.equal(w.statusReason, null, server.log);
      assert.equal(startTime(pids[i]!), starts[i], `workshop ${w.id}'s process started before the restart is the same one`);
      assert.equal((await server.exec(w.id, ['cat', '/workspace/kept.txt'])).stdout, 'mine\n');
    }
  });
});

describe('a workshop that failed', () => {
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

  const psql = (sql: string): void =>
    void execFileSync('psql', ['-h', join(server.dataDir, 'pgsock'), '-U', 'atelier', '-d', 'atelier', '-c', sql], { stdio: 'ignore' });

  it('once built, comes back with `atelier workshops resume`, its files kept', async () => {
    const w = await server.createWorkshop({ repo, name: 'failed-once' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    await server.exec(w.id, ['sh', '-c', 'echo mine > /workspace/kept.txt']);
    // What a recovery that gave up left behind (before this fix, for a transient reason): Failed,
    // its sandbox gone, its files on disk. (The embedded database outlives a SIGKILL'd server.)
    await server.stop('SIGKILL');
    const workshopDir = join(server.dataDir, 'workshops', w.id);
    const gone = await until(
      async () => {
        killNaming(workshopDir);
        return processesNaming(workshopDir);
      },
      (n) => n === 0,
      30,
    );
    assert.equal(gone, 0, 'the sandbox was stopped');
    psql(
      `UPDATE workshops SET status = 'Failed', sandbox = NULL, status_reason = 'could not be recovered after a restart: the database is unavailable; Atelier retries by itself, try again in a few seconds' WHERE id = '${w.id}'`,
    );
    await server.boot();
    assert.equal((await server.api<W>('GET', `/v1/workshops/${w.id}`)).body.status, 'Failed');
    const r = await server.cli(['workshops', 'resume', w.id]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const back = (await server.api<W>('GET', `/v1/workshops/${w.id}`)).body;
    assert.equal(back.status, 'Running', JSON.stringify(back));
    assert.match(back.statusReason ?? '', /^started again, files kept; it had failed: could not be recovered after a restart/);
    assert.equal((await server.exec(w.id, ['cat', '/workspace/kept.txt'])).stdout, 'mine\n');
    assert.equal((await server.api('DELETE', `/v1/workshops/${w.id}`)).status, 200);
  });

  it('during its first build is refused: delete it and create it again', async (t) => {
    const broken = makeRepo({ '.devcontainer.json': '{ "postCreateCommand": "exit 3" }' });
    t.after(() => rmSync(broken, { recursive: true, force: true }));
    const w = await server.createWorkshop({ repo: broken, name: 'never-built' });
    assert.equal(w.status, 'Failed', JSON.stringify(w));
    const r = await server.api<{ code: string; message: string }>('POST', `/v1/workshops/${w.id}/resume`);
    assert.equal(r.body.code, 'WORKSHOP_NOT_RUNNING', JSON.stringify(r.body));
    assert.match(r.body.message, /failed during its first build .*delete it and create it again/);
    assert.equal((await server.api<W>('GET', `/v1/workshops/${w.id}`)).body.status, 'Failed');
    assert.equal((await server.api('DELETE', `/v1/workshops/${w.id}`)).status, 200);
  });
});

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
