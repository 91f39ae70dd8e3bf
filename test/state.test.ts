import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { TestServer, makeRepo, makeNobodyRepo, pollUntil, startRootlessServer } from './helpers/server.js';
import { ExternalPostgres } from './helpers/postgres.js';

// A workshop's state is the truth: a sandbox that died (killed from inside or from the host, out
// of memory, gone after a restart) is shown Dead with the reason within seconds, its pending
// approvals end saying why, and `atelier workshops resume` starts it again with its files.

interface W {
  id: string;
  status: string;
  statusReason: string | null;
}

const argv = (pid: string): string[] => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
};

/** True when the process names the workshop's directory: on its command line, or as its standard output (the sandbox's log; bwrap reads its options from a pipe). */
function names(pid: string, a: string[], marker: string): boolean {
  if (a.some((x) => x.includes(marker))) return true;
  try {
    return readlinkSync(`/proc/${pid}/fd/1`).startsWith(`${marker}/`);
  } catch {
    return false;
  }
}

/**
 * Host pid of a workshop's PID 1: as root, the bwrap process naming its directory whose parent
 * is the outer bwrap; rootless, the first child of the `unshare` naming it.
 */
function sandboxInit(dataDir: string, id: string): number {
  const marker = join(dataDir, 'workshops', id);
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    const a = argv(pid);
    if (a[0] === 'unshare' && names(pid, a, marker)) {
      const kids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/);
      if (kids[0]) return Number(kids[0]);
    }
    if (!a[0]?.endsWith('bwrap') || !names(pid, a, marker)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue;
    }
    const ppid = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]!;
    if (argv(ppid)[0]?.endsWith('bwrap')) return Number(pid);
  }
  throw new Error(`no sandbox init found for ${id}`);
}

describe('a workshop whose sandbox died', () => {
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

  const get = async (id: string): Promise<W> => (await server.api<W>('GET', `/v1/workshops/${id}`)).body;
  /** Polls until the workshop leaves Running (a few seconds at most), then returns it. */
  const untilNotRunning = async (id: string): Promise<W> => {
    const until = Date.now() + 30_000;
    for (;;) {
      const w = await get(id);
      if (w.status !== 'Running' || Date.now() > until) return w;
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const resumeKeepsFiles = async (id: string): Promise<void> => {
    const r = await server.cli(['workshops', 'resume', id]);
    assert.equal(r.code, 0, r.stderr);
    const w = await get(id);
    assert.equal(w.status, 'Running');
    assert.match(w.statusReason ?? '', /started again, files kept/);
    const e = await server.exec(id, ['cat', '/workspace/kept.txt']);
    assert.equal(e.stdout, 'mine\n');
    assert.equal((await server.exec(id, ['true'])).exitCode, 0);
  };

  it('killed from inside: shown Dead with the reason, its pending approvals ended, resumed with its files', async (t) => {
    const gated = makeRepo({ 'atelier.yaml': 'approvals:\n  commands: ["git push*"]\n' });
    t.after(() => rmSync(gated, { recursive: true, force: true }));
    const w = await server.createWorkshop({ repo: gated, name: 'inside' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    await server.exec(w.id, ['sh', '-c', 'echo mine > /workspace/kept.txt']);
    const token = (await server.api<{ token: string }>('POST', '/v1/tokens', { workshopId: w.id, expiresInSeconds: 600 })).body.token;
    const agent = { authorization: `Bearer ${token}` };
    const filed = await server.api<{ id: string; status: string }>(
      'POST',
      `/v1/workshops/${w.id}/approvals`,
      { category: 'ALLOWLIST_EXPANSION', payload: { host: 'example.com', port: 443, justification: 'docs' } },
      agent,
    );
    assert.equal(filed.status, 201, JSON.stringify(filed.body));
    // An exec waiting for its approval when the workshop dies is answered at once, with the reason.
    const waiting = server.api<{ code: string; message: string }>(
      'POST',
      `/v1/workshops/${w.id}/exec`,
      { command: ['git', 'push'] },
      agent,
    );
    const until = Date.now() + 30_000;
    for (;;) {
      const l = await server.api<{ items: unknown[] }>('GET', `/v1/approvals?status=PENDING&category=SHELL_COMMAND&workshop=${w.id}`);
      if (l.body.items.length > 0 || Date.now() > until) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // The agent kills everything it can: the sandbox's idle process, so its init ends.
    const killed = await server.api<{ exitCode: number }>('POST', `/v1/workshops/${w.id}/exec`, { command: ['kill', '-9', '-1'] }, agent);
    assert.equal(killed.status, 200, JSON.stringify(killed.body));
    const dead = await untilNotRunning(w.id);
    assert.equal(dead.status, 'Dead', JSON.stringify(dead));
    assert.match(dead.statusReason ?? '', /^killed: .*atelier workshops resume/);
    const list = await server.cli(['workshops', 'list']);
    assert.match(list.stdout, new RegExp(`${w.id}.*Dead \\(killed\\)`));
    const status = await server.cli(['workshops', 'status', w.id]);
    assert.match(status.stdout, /status:\s+Dead/);
    assert.match(status.stdout, /reason:\s+killed: /);
    const exec = await server.api<{ code: string; message: string }>('POST', `/v1/workshops/${w.id}/exec`, { command: ['true'] });
    assert.equal(exec.body.code, 'WORKSHOP_NOT_RUNNING');
    assert.match(exec.body.message, /Dead .*atelier workshops resume/);
    const approval = await server.api<{ status: string; decidedBy: string; decisionReason: string }>(
      'GET',
      `/v1/approvals/${filed.body.id}`,
    );
    assert.equal(approval.body.status, 'REJECTED');
    assert.equal(approval.body.decidedBy, 'system');
    assert.match(approval.body.decisionReason, /sandbox died: killed/);
    const answered = await waiting;
    assert.equal(answered.status, 403, JSON.stringify(answered.body));
    assert.match(answered.body.message, /rejected .*sandbox died: killed/);
    await resumeKeepsFiles(w.id);
    await server.api('DELETE', `/v1/workshops/${w.id}`);
  });

  it('killed from the host (kill -9 of its PID 1): shown Dead, resumed with its files', async () => {
    const w = await server.createWorkshop({ repo, name: 'outside' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    await server.exec(w.id, ['sh', '-c', 'echo mine > /workspace/kept.txt']);
    process.kill(sandboxInit(server.dataDir, w.id), 'SIGKILL');
    const dead = await untilNotRunning(w.id);
    assert.equal(dead.status, 'Dead', JSON.stringify(dead));
    assert.match(dead.statusReason ?? '', /^killed: /);
    await resumeKeepsFiles(w.id);
    // Dead again and deleted: nothing left.
    process.kill(sandboxInit(server.dataDir, w.id), 'SIGKILL');
    assert.equal((await untilNotRunning(w.id)).status, 'Dead');
    assert.equal((await server.api('DELETE', `/v1/workshops/${w.id}`)).status, 200);
  });

  it('out of memory: a hog killed alone leaves it Running; its init killed by the OOM killer makes it Dead, out of memory', async () => {
    const w = await server.createWorkshop({ repo, name: 'oom', memory: '64m' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    await server.exec(w.id, ['sh', '-c', 'echo mine > /workspace/kept.txt']);
    // tail keeps the last line in memory, and this one has no end: it grows until the cgroup's OOM killer kills it.
    const hog = ['sh', '-c', 'head -c 400m /dev/zero | tail -n 1 >/dev/null'];
    const alone = await server.exec(w.id, hog);
    assert.notEqual(alone.exitCode, 0, 'the hog was killed');
    // The watcher looks every second: after a few looks the workshop is still Running, no reason.
    await new Promise((r) => setTimeout(r, 3000));
    const still = await get(w.id);
    assert.equal(still.status, 'Running', JSON.stringify(still));
    assert.equal(still.statusReason, null);
    assert.equal((await server.exec(w.id, ['true'])).exitCode, 0);
    // The idle process under init is made the OOM killer's first choice: the next hog takes the workshop down.
    const marked = await server.exec(w.id, [
      'sh',
      '-c',
      'for p in $(cat /proc/1/task/1/children); do echo 1000 > /proc/$p/oom_score_adj; done',
    ]);
    assert.equal(marked.exitCode, 0, marked.stderr);
    // Every workshop process enters at oom_score_adj 500 (the server's reserve): the hogs go back
    // to 0 (allowed unprivileged where nothing privileged raised the floor), so the marked one is
    // chosen. The kernel scores the marked one at adj × (limit in pages / 1000), truncated, plus
    // its size: a single hog that nearly fills the limit can tie with that. Six hogs that each hold
    // 16 MiB (and wait) fill it together, and none comes near.
    await server.api('POST', `/v1/workshops/${w.id}/exec`, {
      command: [
        'sh',
        '-c',
        'echo 0 > /proc/self/oom_score_adj; for i in 1 2 3 4 5 6; do { head -c 16m /dev/zero; sleep 120; } | tail -n 1 >/dev/null & done; wait',
      ],
    });
    const dead = await untilNotRunning(w.id);
    assert.equal(dead.status, 'Dead', JSON.stringify(dead));
    assert.match(dead.statusReason ?? '', /^out of memory: .*64m memory limit/);
    await resumeKeepsFiles(w.id);
    await server.api('DELETE', `/v1/workshops/${w.id}`);
  });

  it('gone while the server was stopped: Dead at its start, with the reason', async () => {
    const w = await server.createWorkshop({ repo, name: 'offline' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    await server.exec(w.id, ['sh', '-c', 'echo mine > /workspace/kept.txt']);
    await server.stop();
    process.kill(sandboxInit(server.dataDir, w.id), 'SIGKILL');
    await server.boot();
    const dead = await get(w.id);
    assert.equal(dead.status, 'Dead', JSON.stringify(dead));
    assert.match(dead.statusReason ?? '', /^killed: its processes ended while the server was not running/);
    await resumeKeepsFiles(w.id);
    await server.api('DELETE', `/v1/workshops/${w.id}`);
  });
});

// The server started by an ordinary user: PID 1 of a workshop is its own reaper, which no
// process inside can kill; killed from the host, the workshop is Dead as with a root server.

describe('a rootless workshop whose sandbox died', () => {
  let server: TestServer;
  let base: string;
  let repo: string;

  before(async () => {
    ({ server, base } = await startRootlessServer('/tmp/atelier-state-rootless-'));
    repo = makeNobodyRepo();
  });
  after(async () => {
    await server?.dispose();
    if (base) rmSync(base, { recursive: true, force: true });
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('kill -9 -1 inside leaves it Running; killed from the host it is Dead, and resumed with its files', async () => {
    const w = await server.createWorkshop({ repo });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    await server.exec(w.id, ['sh', '-c', 'echo mine > /workspace/kept.txt']);
    await server.api('POST', `/v1/workshops/${w.id}/exec`, { command: ['kill', '-9', '-1'] });
    // The watcher looks every second: after a few looks it is still Running, and works.
    await new Promise((r) => setTimeout(r, 3000));
    const still = (await server.api<W>('GET', `/v1/workshops/${w.id}`)).body;
    assert.equal(still.status, 'Running', JSON.stringify(still));
    assert.equal((await server.exec(w.id, ['cat', '/workspace/kept.txt'])).stdout, 'mine\n');
    process.kill(sandboxInit(server.dataDir, w.id), 'SIGKILL');
    const until = Date.now() + 30_000;
    let dead = still;
    while (dead.status === 'Running' && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 100));
      dead = (await server.api<W>('GET', `/v1/workshops/${w.id}`)).body;
    }
    assert.equal(dead.status, 'Dead', JSON.stringify(dead));
    assert.match(dead.statusReason ?? '', /^killed: /);
    assert.equal((await server.api<W>('POST', `/v1/workshops/${w.id}/resume`)).body.status, 'Running');
    assert.equal((await server.exec(w.id, ['cat', '/workspace/kept.txt'])).stdout, 'mine\n');
    assert.equal((await server.api('DELETE', `/v1/workshops/${w.id}`)).status, 200);
  });
});

// Two servers on one database: only the node that runs a sandbox decides that it died.
describe('a dead workshop with two servers on one database', () => {
  let db: ExternalPostgres;
  let a: TestServer;
  let b: TestServer;
  let keyDir: string;
  let repo: string;
  let sql: pg.Client;

  before(async () => {
    db = ExternalPostgres.start();
    keyDir = mkdtempSync('/tmp/atelier-key-');
    const env = { ATELIER_MASTER_KEY_FILE: join(keyDir, 'master.key') };
    a = await TestServer.start({ databaseUrl: db.url, env, args: ['--node-name', 'dead-a'] });
    b = await TestServer.start({ databaseUrl: db.url, env, args: ['--node-name', 'dead-b'] });
    b.token = a.token;
    repo = makeRepo();
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
  });
  after(async () => {
    await sql?.end();
    await a?.dispose();
    await b?.dispose();
    db?.stop();
    if (keyDir) rmSync(keyDir, { recursive: true, force: true });
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('the other node shows it NodeUnreachable and leaves it alone; its own node records it Dead when it is back', async () => {
    const w = await a.createWorkshop({ repo, name: 'replica-dead', node: 'dead-a' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    await a.stop('SIGKILL');
    process.kill(sandboxInit(a.dataDir, w.id), 'SIGKILL');
    // B watches only its own sandboxes: once A has missed its heartbeats, B shows the workshop
    // NodeUnreachable (never Dead: that is A's to find), and work that must run there is refused.
    const seen = await pollUntil(
      async () => (await b.api<{ status: string }>('GET', `/v1/workshops/${w.id}`)).body,
      (v) => v.status === 'NodeUnreachable',
    );
    assert.equal(seen.status, 'NodeUnreachable', JSON.stringify(seen));
    const exec = await b.api<{ code: string }>('POST', `/v1/workshops/${w.id}/exec`, { command: ['true'] });
    assert.equal(exec.body.code, 'UNAVAILABLE', 'B says the node that runs it is away');
    const row = await sql.query<{ status: string }>('SELECT status FROM workshops WHERE id = $1', [w.id]);
    assert.equal(row.rows[0]?.status, 'Running');
    await a.boot();
    const dead = (await a.api<W>('GET', `/v1/workshops/${w.id}`)).body;
    assert.equal(dead.status, 'Dead', JSON.stringify(dead));
    assert.match(dead.statusReason ?? '', /^killed: its processes ended while the server was not running/);
    assert.equal((await a.api('DELETE', `/v1/workshops/${w.id}`)).status, 200);
  });
});
