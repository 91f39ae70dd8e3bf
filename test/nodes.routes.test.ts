import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import type { TestServer } from './helpers/server.js';
import type { WorkshopDisk as Disk } from '../src/core/index.js';
import { startNodes, type Node, type Ws } from './helpers/nodes.js';

// Three server processes (separate data dirs) on one external PostgreSQL, as in
// test/nodes.replicas.test.ts: what a workshop's node alone knows (its SSH endpoint, its
// simulators' logs and reset, its disk usage) gives the same answer through a non-owner node;
// then a node killed with -9 is seen dead after the installation's short dead-after timeout
// (ATELIER_NODE_DEAD_AFTER), and `atelier nodes remove` takes it out of the installation.

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv, cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'], cwd });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

describe('nodes: what only the owner node knows, through another; a dead node removed', () => {
  // A heartbeat every 0.5 s, a node dead after 3 s of silence (the defaults: 2 s and 10 s).
  const nodes = startNodes({
    env: { ATELIER_NODE_HEARTBEAT: '500ms', ATELIER_NODE_DEAD_AFTER: '3s', ATELIER_DEFAULT_DISK: '256m' },
    repo: { 'README.md': '# routes\n' },
  });
  let a: TestServer;
  let b: TestServer;
  let c: TestServer;
  let home: string;
  let repo: string;
  let sql: pg.Client;
  let onA: Ws;
  let onC: Ws;
  let keptOnC: Ws;

  before(async () => {
    [a, b, c] = nodes.servers as [TestServer, TestServer, TestServer];
    ({ repo, sql } = nodes);
    home = mkdtempSync('/tmp/atelier-ssh-home-');
    onA = (await b.createWorkshop({ repo, name: 'on-a', node: 'node-a' })) as unknown as Ws;
    assert.equal(onA.status, 'Running', onA.statusReason ?? '');
    assert.equal(onA.node, 'node-a');
  });

  after(() => {
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it('the SSH endpoint of a workshop on another node, with the real ssh client, through a non-owner node', async () => {
    const env = { ...b.env(), ATELIER_SSH_CONFIG: join(home, 'ssh_config') };
    const info = await Promise.all([a, b].map((s) => s.api<{ hostKey: string }>('GET', `/v1/workshops/${onA.id}/ssh`)));
    assert.equal(info[0]!.status, 200, JSON.stringify(info[0]!.body));
    assert.deepEqual(info[1], info[0]);
    const config = await b.cli(['config-ssh'], { env });
    assert.equal(config.code, 0, config.stderr);
    const sshConfig = readFileSync(join(home, 'ssh_config'), 'utf8');
    // The ProxyCommand goes through node b (the CLI's context), which relays to node a.
    assert.ok(sshConfig.includes(`Host atelier-${onA.id}\n`), sshConfig);
    const r = await run(
      'ssh',
      ['-F', join(home, 'ssh_config'), '-o', 'BatchMode=yes', `atelier-${onA.id}`, 'echo "ssh on $(hostname)"; git status; exit 5'],
      env,
      home,
    );
    assert.equal(r.code, 5, r.stderr);
    assert.match(r.stdout, /ssh on on-a\n/);
    assert.match(r.stdout, /On branch main/);
    // A terminal too, and a file put with sftp, read back through the owner.
    const t = await run('ssh', ['-F', join(home, 'ssh_config'), '-tt', `atelier-${onA.id}`, 'stty size; exit 4'], env, home);
    assert.equal(t.code, 4, t.stderr);
    assert.match(t.stdout, /^\d+ \d+/m);
    writeFileSync(join(home, 'up.txt'), 'put with sftp through node b\n');
    writeFileSync(join(home, 'batch'), 'put up.txt /workspace/up.txt\n');
    const put = await run('sftp', ['-q', '-F', join(home, 'ssh_config'), '-b', join(home, 'batch'), `atelier-${onA.id}`], env, home);
    assert.equal(put.code, 0, put.stderr);
    assert.equal((await a.exec(onA.id, ['cat', '/workspace/up.txt'])).stdout, 'put with sftp through node b\n');
  });

  it("a simulator's logs and reset through a non-owner node give what the owner gives", async () => {
    const started = await b.api<{ name: string; status: string }>('POST', `/v1/workshops/${onA.id}/simulators`, {
      type: 'redis',
      name: 'cache',
    });
    assert.equal(started.status, 201, JSON.stringify(started.body));
    assert.equal(started.body.status, 'Running');
    const redis = async (...args: string[]): Promise<string> => {
      const r = await a.exec(onA.id, ['redis-cli', '-h', 'cache.atelier.internal', ...args]);
      assert.equal(r.exitCode, 0, r.stderr);
      return r.stdout;
    };
    assert.equal(await redis('SET', 'k', 'through-b'), 'OK\n');
    const logs = await Promise.all(
      [a, b, c].map((s) =>
        fetch(`${s.url}/v1/workshops/${onA.id}/simulators/cache/logs?tail=4096`, { headers: { authorization: `Bearer ${a.token}` } }),
      ),
    );
    const texts = await Promise.all(logs.map((r) => r.text()));
    assert.equal(logs[0]!.status, 200, texts[0]);
    assert.match(logs[0]!.headers.get('content-type') ?? '', /^text\/plain/);
    assert.ok(texts[0]!.length > 0);
    assert.deepEqual(
      logs.map((r) => [r.status, r.headers.get('content-type')]),
      logs.map(() => [200, logs[0]!.headers.get('content-type')]),
    );
    assert.equal(texts[1], texts[0]);
    assert.equal(texts[2], texts[0]);
    // An unknown simulator: the same refusal through either node.
    const missing = await Promise.all([a, b].map((s) => s.api<{ code: string }>('GET', `/v1/workshops/${onA.id}/simulators/nothere/logs`)));
    assert.equal(missing[0]!.status, 404, JSON.stringify(missing[0]!.body));
    assert.equal(missing[1]!.status, missing[0]!.status);
    assert.equal(missing[1]!.body.code, missing[0]!.body.code);
    const reset = await b.api<{ name: string; status: string }>('POST', `/v1/workshops/${onA.id}/simulators/cache/reset`);
    assert.equal(reset.status, 200, JSON.stringify(reset.body));
    assert.equal(reset.body.name, 'cache');
    assert.equal(reset.body.status, 'Running');
    assert.equal(await redis('GET', 'k'), '\n');
    const list = await Promise.all([a, b].map((s) => s.api('GET', `/v1/workshops/${onA.id}/simulators`)));
    assert.deepEqual(list[1], list[0]);
  });

  it('the disk usage against the quota through a non-owner node is what the owner read, published with its heartbeat', async () => {
    await a.exec(onA.id, ['sh', '-c', 'head -c 3000000 /dev/urandom > /workspace/blob && sync']);
    // The owner reads it live; the others read what it wrote in the workshop's row at its last
    // heartbeat (0.5 s here). Read again until all agree: something in the workshop (its
    // simulator's log) may write between two heartbeats.
    const read = async (): Promise<{ owner: Disk; others: Disk[]; row: Disk }> => {
      const owner = (await a.api<Ws>('GET', `/v1/workshops/${onA.id}`)).body.disk!;
      const one = await Promise.all([b, c].map((s) => s.api<Ws>('GET', `/v1/workshops/${onA.id}`)));
      const all = await Promise.all([a, b, c].map((s) => s.api<{ items: Ws[] }>('GET', '/v1/workshops')));
      const row = (await sql.query<{ disk: Disk }>('SELECT disk FROM workshops WHERE id = $1', [onA.id])).rows[0]!.disk;
      return { owner, others: [...one.map((r) => r.body.disk!), ...all.map((r) => r.body.items.find((w) => w.id === onA.id)!.disk!)], row };
    };
    const same = (x: Disk, y: Disk): boolean => JSON.stringify(x) === JSON.stringify(y);
    const seen = await until("the owner's disk figure everywhere", async () => {
      const r = await read();
      return r.owner.usedBytes! >= 3_000_000 && r.others.every((d) => same(d, r.owner)) ? r : undefined;
    });
    assert.ok(seen.owner.enforced, JSON.stringify(seen.owner));
    for (const d of seen.others) assert.deepEqual(d, seen.owner);
    // What the others show is the published figure, from the database.
    assert.deepEqual(seen.row, seen.owner);
    const status = await b.cli(['workshops', 'status', onA.id]);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /disk:?\s+\d+\.\dm of 2\d\d\.\dm used \(\d+%\)/);
  });
  it('a node killed with -9 is dead after the short ATELIER_NODE_DEAD_AFTER: its workshops NodeUnreachable', async () => {
    onC = (await a.createWorkshop({ repo, name: 'on-c', node: 'node-c' })) as unknown as Ws;
    keptOnC = (await b.createWorkshop({ repo, name: 'kept-on-c', node: 'node-c' })) as unknown as Ws;
    assert.equal(onC.status, 'Running', onC.statusReason ?? '');
    // Every node says how it beats and when it takes another for dead.
    const nodes = (await a.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items;
    assert.deepEqual(
      nodes.map((n) => [n.name, n.heartbeatMs, n.deadAfterMs]),
      [
        ['node-a', 500, 3000],
        ['node-b', 500, 3000],
        ['node-c', 500, 3000],
      ],
    );
    assert.match(a.log, /node node-a \(node-\w+\) joined the installation, .*; heartbeat every 0\.5 s, a node silent 3 s is unreachable/);
    const listed = await b.cli(['nodes', 'list']);
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, /node-c .*0\.5s \/ 3s/);
    // The disk figure node c published last, the same as it read itself.
    await c.exec(onC.id, ['sh', '-c', 'head -c 2000000 /dev/urandom > /workspace/blob && sync']);
    const published = await until("node c's disk figure published", async () => {
      const own = (await c.api<Ws>('GET', `/v1/workshops/${onC.id}`)).body.disk!;
      const elsewhere = (await a.api<Ws>('GET', `/v1/workshops/${onC.id}`)).body.disk;
      return own.usedBytes! >= 2_000_000 && JSON.stringify(elsewhere) === JSON.stringify(own) ? own : undefined;
    });
    await c.stop('SIGKILL');
    for (const s of [a, b]) {
      const seen = await until('node c unreachable', async () => {
        const w = (await s.api<Ws>('GET', `/v1/workshops/${onC.id}`)).body;
        return w.status === 'NodeUnreachable' ? w : undefined;
      });
      assert.match(
        seen.statusReason ?? '',
        /^its node node-c has missed its heartbeats since \S+ \(silent for more than 3 s\); it was Running/,
      );
      // A dead node's workshop shows its disk as last published (its reason says since when).
      assert.deepEqual(seen.disk, published);
    }
    const state = (await b.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items.find((n) => n.name === 'node-c')!.state;
    assert.equal(state, 'unreachable');
    // Another tenant's admin is not told the workshop exists, nor where it ran.
    assert.equal((await a.api('POST', '/v1/users', { name: 'stranger', role: 'admin', tenant: 'other' })).status, 201);
    const token = (await a.api<{ token: string }>('POST', '/v1/tokens', { user: 'stranger', tenant: 'other', expiresInSeconds: 3600 })).body
      .token;
    for (const s of [a, b]) {
      const r = await s.api<{ code: string; message: string }>(
        'POST',
        `/v1/workshops/${onC.id}/exec`,
        { command: ['true'] },
        { authorization: `Bearer ${token}` },
      );
      assert.equal(r.status, 404, JSON.stringify(r.body));
      assert.equal(r.body.code, 'WORKSHOP_NOT_FOUND');
      assert.doesNotMatch(r.body.message, /node-c/);
    }
    // The live nodes' workshop is not touched.
    assert.equal((await b.api<Ws>('GET', `/v1/workshops/${onA.id}`)).body.status, 'Running');
  });

  it('`atelier nodes remove` refuses a live node, saying to stop or drain it first, and an unknown one', async () => {
    for (const [s, name] of [
      [a, 'node-b'],
      [a, 'node-a'],
    ] as const) {
      const r = await s.cli(['nodes', 'remove', name]);
      assert.equal(r.code, 1, r.stdout);
      assert.match(
        r.stderr,
        new RegExp(
          `node ${name} is live \\(its last heartbeat [\\d.]+ s ago.*\\): only a dead node is removed\\. Stop it first \\(\`atelier nodes drain ${name}\` keeps new workshops off it meanwhile\\)`,
        ),
      );
    }
    const unknown = await a.api<{ code: string; message: string }>('DELETE', '/v1/nodes/no-such-node');
    assert.equal(unknown.status, 404);
    assert.match(unknown.body.message, /no node named no-such-node: run `atelier nodes list`/);
    assert.equal((await b.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items.length, 3);
  });

  it('`atelier nodes remove` takes the dead node out; its workshops stay listed, refused with why, deletable from any node', async () => {
    const r = await b.cli(['nodes', 'remove', 'node-c']);
    assert.equal(r.code, 0, r.stderr);
    // Read at once through another node: the removal is what it says (not the missed heartbeats).
    assert.match(
      (await a.api<Ws>('GET', `/v1/workshops/${onC.id}`)).body.statusReason ?? '',
      /^its node node-c was removed from the installation/,
    );
    assert.match(
      r.stdout,
      /^node node-c \(node-\S+, last heartbeat \S+\) is removed from the installation\.\nIts 2 workshops stay listed as NodeUnreachable/,
    );
    assert.ok(r.stdout.includes(`  ${onC.id}  on-c  (was Running)\n`), r.stdout);
    assert.ok(r.stdout.includes(`  ${keptOnC.id}  kept-on-c  (was Running)\n`), r.stdout);
    assert.match(r.stdout, /`atelier workshops delete ID` forgets one/);
    for (const s of [a, b]) {
      const nodes = (await s.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items;
      assert.deepEqual(
        nodes.map((n) => n.name),
        ['node-a', 'node-b'],
      );
    }
    // Removed once: a second time says so.
    const again = await a.api<{ message: string }>('DELETE', '/v1/nodes/node-c');
    assert.equal(again.status, 404);
    assert.match(again.body.message, /node node-c was removed already \(by admin on /);
    // Still listed, with its node's name and what to do.
    const w = (await a.api<{ items: Ws[] }>('GET', '/v1/workshops')).body.items.find((x) => x.id === onC.id)!;
    assert.equal(w.status, 'NodeUnreachable');
    assert.equal(w.node, 'node-c');
    assert.match(
      w.statusReason ?? '',
      new RegExp(
        `^its node node-c was removed from the installation on \\S+ \\(silent since \\S+\\); it was Running: delete it \\(\`atelier workshops delete ${onC.id}\`\\)`,
      ),
    );
    const exec = await a.api<{ code: string; message: string }>('POST', `/v1/workshops/${onC.id}/exec`, { command: ['true'] });
    assert.equal(exec.status, 409, JSON.stringify(exec.body));
    assert.equal(exec.body.code, 'WORKSHOP_NOT_RUNNING');
    assert.match(exec.body.message, /ran on node node-c, removed from the installation on .*`atelier workshops delete` forgets it/);
    // Deleted through a node: its record, from the database; gone for every node.
    const del = await b.cli(['workshops', 'delete', onC.id]);
    assert.equal(del.code, 0, del.stderr);
    for (const s of [a, b]) {
      const ids = (await s.api<{ items: Ws[] }>('GET', '/v1/workshops')).body.items.map((x) => x.id);
      assert.ok(!ids.includes(onC.id) && ids.includes(keptOnC.id), JSON.stringify(ids));
    }
    assert.equal((await sql.query('SELECT 1 FROM workshops WHERE id = $1', [onC.id])).rowCount, 0);
    // Gone for every route too, on the node that deleted it and on another.
    for (const s of [b, a]) {
      const gone = await s.api<{ code: string }>('POST', `/v1/workshops/${onC.id}/exec`, { command: ['true'] });
      assert.equal(gone.status, 404, JSON.stringify(gone.body));
      assert.equal(gone.body.code, 'WORKSHOP_NOT_FOUND');
    }
  });

  it('a removed node started again joins again: the workshops not deleted are back, the deleted one is cleaned up there', async () => {
    await c.boot();
    assert.match(
      c.log,
      /this node was removed from the installation by admin on \S+; it joins again, with the workshops not deleted since/,
    );
    const back = await until('the kept workshop back', async () => {
      const w = (await a.api<Ws>('GET', `/v1/workshops/${keptOnC.id}`)).body;
      return w.status === 'Running' ? w : undefined;
    });
    assert.equal(back.statusReason, null);
    assert.equal((await b.exec(keptOnC.id, ['hostname'])).stdout, 'kept-on-c\n');
    assert.deepEqual(
      (await a.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items.map((n) => [n.name, n.state]),
      [
        ['node-a', 'ready'],
        ['node-b', 'ready'],
        ['node-c', 'ready'],
      ],
    );
    // The deleted workshop's directory, left on node c, is an orphan there: removed.
    await until('the deleted workshop cleaned up on node c', async () =>
      existsSync(join(c.dataDir, 'workshops', onC.id)) ? undefined : true,
    );
  });

  it('a node removed while its heartbeats did not reach the database joins again at its next heartbeat', async () => {
    // As `nodes remove` leaves it (done here in SQL: the API refuses a live node), node b's
    // heartbeats having stopped reaching the database for a while.
    await sql.query(
      `WITH gone AS (DELETE FROM nodes WHERE name = 'node-b' RETURNING *)
       INSERT INTO removed_nodes (id, name, address, version, last_heartbeat_at, removed_by)
       SELECT id, name, address, version, heartbeat_at, 'admin' FROM gone`,
    );
    await until('node b back', async () => {
      const nodes = (await a.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items;
      return nodes.find((n) => n.name === 'node-b')?.state === 'ready' ? true : undefined;
    });
    await until('node b says so', async () =>
      /this node was removed from the installation by admin on \S+; it joins again/.test(b.log) ? true : undefined,
    );
    assert.equal((await sql.query("SELECT 1 FROM removed_nodes WHERE name = 'node-b'")).rowCount, 0);
    // And it relays again: it signs with the new key it made on joining again.
    assert.equal((await b.exec(onA.id, ['echo', 'relayed'])).stdout, 'relayed\n');
  });
});
