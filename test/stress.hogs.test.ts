import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { totalmem } from 'node:os';
import { join } from 'node:path';
import { TestServer, makeRepo, pollUntil } from './helpers/server.js';

// One workshop cannot starve the server (issue 18): with a fork bomb, a CPU hog on every core and
// a memory hog in workshop A, the server still answers, B's exec works, an approval is filed and
// decided, and a SIGTERM restart in the middle of the load brings every workshop back (B's files
// and its running process kept). The server keeps memory over all workshops together (their
// parent cgroup's limit: the host's memory minus ATELIER_SERVER_RESERVE_MEMORY), the workshops
// run at a low cpu.shares, and the server and its PostgreSQL are the OOM killer's last choice.
// No timing is asserted (bench/hogs.ts measures the answer times); deadlines only guard hangs.

interface W {
  id: string;
  status: string;
  statusReason: string | null;
}

/** All workshops together get this much in the test: small enough that A's hog meets the total, not its own limit. */
const WORKSHOPS_MEMORY = 2 ** 30;
const RESERVE_MB = Math.floor(totalmem() / 2 ** 20) - WORKSHOPS_MEMORY / 2 ** 20;

/** A's load: a memory hog that starts again when the OOM killer takes it, and a CPU hog per core… */
const HOGS = [
  "(while :; do perl -e 'my @a; while (1) { push @a, q(x) x (1 << 20) }'; done) </dev/null >/dev/null 2>&1 &",
  'for i in $(seq 1 $(nproc)); do (while :; do :; done) </dev/null >/dev/null 2>&1 & done',
].join('\n');
/** …then a fork bomb whose every process forks on for ever (it holds A's pids limit, never dies out). */
const FORK_BOMB = "perl -e 'while (1) { fork }' </dev/null >/dev/null 2>&1 &";

/** Whether this process (root) may lower an oom_score_adj (CAP_SYS_RESOURCE, bit 24): a container may drop it. */
function canLowerOomScore(): boolean {
  const eff = /^CapEff:\s+([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0';
  return (BigInt(`0x${eff}`) & (1n << 24n)) !== 0n;
}
const SERVER_OOM = canLowerOomScore() ? -900 : 0;

function cgroupFile(controller: string, node: string, rel: string): string {
  // Workshops nest under the server's own cgroup (sandbox/cgroups.ts): find `atelier/<node>` below the controller's root.
  const own = readFileSync('/proc/self/cgroup', 'utf8')
    .split('\n')
    .map((l) => l.split(':'))
    .find((f) => f[1]?.split(',').includes(controller))?.[2];
  return join('/sys/fs/cgroup', controller, own ?? '/', 'atelier', node, rel);
}

function read(path: string): string {
  return readFileSync(path, 'utf8').trim();
}

function oomScoreAdj(pid: number): number {
  return Number(read(`/proc/${pid}/oom_score_adj`));
}

/** Host pids of the processes whose command line is exactly `argv` (B's marked sleep). */
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

function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/** Polls `fn` until `ok` says yes (a hang guard only: a busy 2-core machine), then returns the last value. */
const until = <T>(fn: () => Promise<T>, ok: (v: T) => boolean, seconds = 180): Promise<T> => pollUntil(fn, ok, seconds, 250);

/** Proportional set size of `pid` and every descendant outside workshops (shared memory counted once over them), in bytes. */
function treePss(pid: number): number {
  const children = new Map<number, number[]>();
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(p)]);
    } catch {
      // exited meanwhile
    }
  }
  let total = 0;
  const walk = (p: number): void => {
    try {
      // A sandbox the server started is its child, but the workshop's, not the server's.
      if (readFileSync(`/proc/${p}/cgroup`, 'utf8').includes('/atelier/')) return;
      total += Number(/^Pss:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${p}/smaps_rollup`, 'utf8'))?.[1] ?? 0) * 1024;
    } catch {
      // exited meanwhile
    }
    for (const c of children.get(p) ?? []) walk(c);
  };
  walk(pid);
  return total;
}

function postmasterPid(dataDir: string): number {
  return Number(read(join(dataDir, 'pg', 'postmaster.pid')).split('\n')[0]);
}

describe('one workshop cannot starve the server (fork bomb, CPU and memory hogs)', () => {
  let server: TestServer;
  let repo: string;
  let node: string;
  const ws: Record<'a' | 'b' | 'c' | 'd', string> = { a: '', b: '', c: '', d: '' };
  const mark = ['sleep', '86417'];
  let markPid = 0;
  let markStart: string | undefined;

  before(async () => {
    repo = makeRepo();
    server = await TestServer.start({ env: { ATELIER_SERVER_RESERVE_MEMORY: `${RESERVE_MB}m` } });
    node = read(join(server.dataDir, 'node-id'));
  });
  after(async () => {
    // Deleting A freezes its cgroups and kills every process in them, the fork bomb included;
    // dispose also kills whatever a failed run left in this server's cgroups.
    await server?.dispose();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('keeps memory, CPU and the OOM killer away from the server and its PostgreSQL', async () => {
    assert.match(server.log, /server reserve: \d+(\.\d)?[kmg] of [\d.]+[kmg] memory kept for the server and its PostgreSQL/, server.log);
    const limit = Number(read(cgroupFile('memory', node, 'memory.limit_in_bytes')));
    // The kernel rounds a limit down to whole pages.
    const expected = Math.floor((totalmem() - RESERVE_MB * 2 ** 20) / 4096) * 4096;
    assert.equal(limit, expected, 'all workshops together get the host memory minus the reserve');
    assert.equal(read(cgroupFile('cpu', node, 'cpu.shares')), '256');
    assert.equal(read(join(cgroupFile('cpu', node, '..'), 'cpu.shares')), '256');
    assert.equal(oomScoreAdj(server.proc!.pid!), SERVER_OOM);
    assert.equal(oomScoreAdj(postmasterPid(server.dataDir)), SERVER_OOM);
  });

  it('creates four workshops and loads A with a fork bomb, a CPU hog per core and a memory hog', async () => {
    for (const k of ['b', 'c', 'd'] as const) {
      const w = await server.createWorkshop({ repo, name: `quiet-${k}` });
      assert.equal(w.status, 'Running', w.statusReason ?? '');
      ws[k] = w.id;
    }
    // A's own memory limit is above what all workshops together may use: the total stops its hog.
    const a = await server.createWorkshop({ repo, name: 'hog-a', memory: '2g', pids: 256 });
    assert.equal(a.status, 'Running', a.statusReason ?? '');
    ws.a = a.id;
    // A workshop's processes are the OOM killer's first choice.
    assert.equal((await server.exec(ws.a, ['cat', '/proc/self/oom_score_adj'])).stdout, '500\n');

    await server.exec(ws.b, ['sh', '-c', `echo kept > /workspace/b.txt; ${mark.join(' ')} </dev/null >/dev/null 2>&1 &`]);
    const pids = await until(
      async () => hostPids(mark),
      (p) => p.length === 1,
      60,
    );
    assert.equal(pids.length, 1, "B's marked process runs");
    markPid = pids[0]!;
    markStart = startTime(markPid);

    const r = await server.exec(ws.a, ['sh', '-c', HOGS]);
    assert.equal(r.exitCode, 0, r.stderr);
    // The load is really there: the memory hog meets the limit of all workshops together (not its
    // own, which is higher) before the fork bomb takes every pid A may have.
    const ownLimit = Number(read(cgroupFile('memory', node, `${ws.a}/memory.limit_in_bytes`)));
    const total = Number(read(cgroupFile('memory', node, 'memory.limit_in_bytes')));
    assert.ok(total < ownLimit);
    const oomKills = await until(
      async () => Number(/^oom_kill (\d+)$/m.exec(read(cgroupFile('memory', node, `${ws.a}/memory.oom_control`)))?.[1] ?? 0),
      (n) => n > 0,
    );
    assert.ok(oomKills > 0, "the OOM killer took A's memory hog");
    const peak = Number(read(cgroupFile('memory', node, `${ws.a}/memory.max_usage_in_bytes`)));
    assert.ok(peak <= total, `A peaked at ${peak} bytes, within the ${total} of all workshops together (its own limit is ${ownLimit})`);
    const bomb = await server.exec(ws.a, ['sh', '-c', FORK_BOMB]);
    assert.equal(bomb.exitCode, 0, bomb.stderr);
    const pidsEvents = await until(
      async () => read(cgroupFile('pids', node, `${ws.a}/pids.events`)),
      (e) => /^max [1-9]/m.test(e),
    );
    assert.match(pidsEvents, /^max [1-9]/m, 'the fork bomb reached its pids limit');
  });

  it('meanwhile answers, runs B’s exec, and files and decides an approval', async (t) => {
    for (let round = 0; round < 3; round++) {
      const one = await server.api<W>('GET', `/v1/workshops/${ws.b}`);
      assert.equal(one.status, 200, JSON.stringify(one.body));
      assert.equal(one.body.status, 'Running');
      const list = await server.api<{ items: W[] }>('GET', '/v1/workshops');
      assert.equal(list.status, 200);
      assert.deepEqual(list.body.items.map((w) => w.id).sort(), Object.values(ws).sort());
      const e = await server.exec(ws.b, ['sh', '-c', 'cat /workspace/b.txt && echo $((6 * 7))']);
      assert.equal(e.stdout, 'kept\n42\n');
      assert.equal(e.exitCode, 0);
    }
    const agent = (await server.api<{ token: string }>('POST', '/v1/tokens', { workshopId: ws.b, expiresInSeconds: 600 })).body.token;
    const filed = await server.api<{ id: string; status: string }>(
      'POST',
      `/v1/workshops/${ws.b}/approvals`,
      { category: 'ALLOWLIST_EXPANSION', payload: { host: 'example.org', justification: 'docs under load' } },
      { authorization: `Bearer ${agent}` },
    );
    assert.equal(filed.status, 201, JSON.stringify(filed.body));
    const decided = await server.api<{ status: string }>('POST', `/v1/approvals/${filed.body.id}/decision`, {
      decision: 'APPROVE',
      reason: 'fine',
    });
    assert.equal(decided.status, 200, JSON.stringify(decided.body));
    const a = await server.api<{ status: string }>('GET', `/v1/approvals/${filed.body.id}`);
    assert.equal(a.body.status, 'APPROVED');
    // A is still loaded: its hogs run on.
    assert.ok(Number(read(cgroupFile('pids', node, `${ws.a}/pids.current`))) > 100, 'the fork bomb still holds A');
    // What the reserve must hold (docs/server.md): the server (its helpers included) and PostgreSQL, under this load.
    const mib = (b: number): string => `${(b / 2 ** 20).toFixed(0)} MiB`;
    t.diagnostic(`memory (PSS): server ${mib(treePss(server.proc!.pid!))}, PostgreSQL ${mib(treePss(postmasterPid(server.dataDir)))}`);
  });

  it(
    'restarted (SIGTERM) in the middle of the load, takes every workshop back: B’s files and its running process kept',
    { timeout: 600_000 },
    async (t) => {
      await server.stop('SIGTERM');
      const t0 = Date.now();
      // A generous hang guard: the host this runs on may be loaded by much more than workshop A.
      await server.boot(300_000);
      t.diagnostic(`restarted in ${((Date.now() - t0) / 1000).toFixed(1)} s (load average ${read('/proc/loadavg')})`);
      assert.equal(oomScoreAdj(server.proc!.pid!), SERVER_OOM);
      assert.equal(oomScoreAdj(postmasterPid(server.dataDir)), SERVER_OOM, 'the PostgreSQL started again is protected too');
      const back = await until(
        () => Promise.all(Object.values(ws).map(async (id) => (await server.api<W>('GET', `/v1/workshops/${id}`)).body)),
        (all) => all.every((w) => w.status === 'Running' && w.statusReason === null),
      );
      for (const w of back) {
        assert.equal(w.status, 'Running', `${JSON.stringify(w)}\n${server.log}`);
        assert.equal(w.statusReason, null, `${JSON.stringify(w)}\n${server.log}`);
      }
      assert.equal(startTime(markPid), markStart, "B's process started before the restart is the same one");
      assert.equal((await server.exec(ws.b, ['cat', '/workspace/b.txt'])).stdout, 'kept\n');
      for (const k of ['c', 'd'] as const) assert.equal((await server.exec(ws[k], ['true'])).exitCode, 0);
      // The load went on across the restart.
      assert.ok(Number(read(cgroupFile('pids', node, `${ws.a}/pids.current`))) > 100, 'the fork bomb still holds A');
    },
  );
});
