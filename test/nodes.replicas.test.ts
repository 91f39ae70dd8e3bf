import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import WebSocket from 'ws';
import { MasterKey, type Principal } from '../src/identity/index.js';
import { CliProcess, type TestServer } from './helpers/server.js';
import { startNodes, type Node, type Ws } from './helpers/nodes.js';

// Three server processes (separate data dirs) on one external PostgreSQL are one installation:
// each lists every node and every workshop, places new workshops, and relays what must run where
// the sandbox is (exec, files, git diff, a PTY, a port-forward) to the workshop's node; a node
// killed with -9 shows its workshops NodeUnreachable until it is back; a forged node-to-node
// request is refused; a draining node gets no new workshop.

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 40_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('nodes: three servers on one PostgreSQL are one installation', () => {
  const nodes = startNodes();
  let a: TestServer;
  let b: TestServer;
  let c: TestServer;
  let repo: string;
  let sql: pg.Client;
  let onA: Ws;
  let onC: Ws;

  before(() => {
    [a, b, c] = nodes.servers as [TestServer, TestServer, TestServer];
    ({ repo, sql } = nodes);
  });

  it('every node lists the three nodes, ready, with their address', async () => {
    for (const s of [a, b, c]) {
      const r = await s.api<{ items: Node[] }>('GET', '/v1/nodes');
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(r.body.items.map((n) => [n.name, n.state]).sort(), [
        ['node-a', 'ready'],
        ['node-b', 'ready'],
        ['node-c', 'ready'],
      ]);
      assert.equal(r.body.items.find((n) => n.name === 'node-a')!.address, a.url);
    }
    const cli = await b.cli(['nodes', 'list']);
    assert.equal(cli.code, 0, cli.stderr);
    assert.match(cli.stdout, /node-b \*.*ready/);
    assert.match(cli.stdout, /node-c .*ready/);
  });

  it('a workshop created through one node with --node runs there, and says why', async () => {
    // Asked of node b, placed on node a: the create is relayed (its phases streamed through).
    onA = (await b.createWorkshop({ repo, name: 'on-a', node: 'node-a' })) as unknown as Ws;
    assert.equal(onA.status, 'Running', onA.statusReason ?? '');
    assert.equal(onA.node, 'node-a');
    assert.equal(onA.placement, 'asked for with --node node-a; placed by node node-b');
    const row = await sql.query<{ node_id: string }>('SELECT node_id FROM workshops WHERE id = $1', [onA.id]);
    const nodes = (await a.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items;
    assert.equal(row.rows[0]!.node_id, nodes.find((n) => n.name === 'node-a')!.id);
  });

  it('without --node, a workshop goes to the least loaded accepting node', async () => {
    // node a runs one workshop, b and c none: a is never chosen.
    const w = (await a.createWorkshop({ repo, name: 'placed' })) as unknown as Ws;
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    assert.notEqual(w.node, 'node-a');
    assert.match(w.placement ?? '', /^least loaded of 3 accepting nodes \(0 workshops/);
    const status = await c.cli(['workshops', 'status', w.id]);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, new RegExp(`node:\\s+${w.node} \\(least loaded of 3 accepting nodes`));
    const del = await c.api('DELETE', `/v1/workshops/${w.id}`);
    assert.equal(del.status, 200, JSON.stringify(del.body));
  });

  it('every node lists every workshop of the installation', async () => {
    for (const s of [a, b, c]) {
      const r = await s.api<{ items: Ws[] }>('GET', '/v1/workshops');
      assert.deepEqual(
        r.body.items.map((w) => [w.name, w.node, w.status]),
        [['on-a', 'node-a', 'Running']],
      );
    }
  });

  it('exec, files and git diff through a non-owner node give what the owner gives', async () => {
    const put = await c.api('PUT', `/v1/workshops/${onA.id}/files?path=note.txt`, Buffer.from('written through node c\n'));
    assert.equal(put.status, 200, JSON.stringify(put.body));
    const viaOwner = await a.exec(onA.id, ['sh', '-c', 'cat note.txt; echo err >&2; hostname; exit 3']);
    const viaB = await b.exec(onA.id, ['sh', '-c', 'cat note.txt; echo err >&2; hostname; exit 3']);
    assert.deepEqual(viaB, viaOwner);
    assert.equal(viaB.exitCode, 3);
    assert.equal(viaB.stdout, 'written through node c\non-a\n');
    // NDJSON (the CLI's exec) streams through the relay too.
    const cli = await b.cli(['exec', 'on-a', '--', 'sh', '-c', 'echo streamed; exit 4']);
    assert.equal(cli.code, 4, cli.stderr);
    assert.equal(cli.stdout, 'streamed\n');
    // A command started through one non-owner node and read back through another.
    const started = await b.api<{ id: string }>('POST', `/v1/workshops/${onA.id}/execs`, { command: ['sh', '-c', 'sleep 1; echo later'] });
    assert.equal(started.status, 201, JSON.stringify(started.body));
    const read = await c.api<{ status: string; chunks: { data: string }[] }>('GET', `/v1/execs/${started.body.id}?wait=30`);
    assert.equal(read.body.status, 'Exited', JSON.stringify(read.body));
    assert.equal(Buffer.concat(read.body.chunks.map((x) => Buffer.from(x.data, 'base64'))).toString(), 'later\n');
    for (const s of [a, b]) {
      const r = await fetch(`${s.url}/v1/workshops/${onA.id}/files?path=note.txt`, { headers: { authorization: `Bearer ${s.token}` } });
      assert.equal(r.status, 200);
      assert.equal(await r.text(), 'written through node c\n');
    }
    await a.exec(onA.id, ['sh', '-c', 'echo changed >> README.md']);
    const diffs = await Promise.all([a, b, c].map((s) => s.api<unknown>('GET', `/v1/workshops/${onA.id}/git/diff`)));
    assert.equal(diffs[0]!.status, 200, JSON.stringify(diffs[0]!.body));
    assert.match(JSON.stringify(diffs[0]!.body), /changed/);
    assert.deepEqual(diffs[1], diffs[0]);
    assert.deepEqual(diffs[2], diffs[0]);
  });

  it("a workshop's usage through a non-owner node is read on its owner (its cgroups are there)", async () => {
    const held = await b.api<{ id: string }>('POST', `/v1/workshops/${onA.id}/execs`, { command: ['sleep', '30'] });
    assert.equal(held.status, 201, JSON.stringify(held.body));
    for (const s of [a, b, c]) {
      const u = await s.api<{ memoryBytes: number | null; cpuUsec: number | null; pids: number | null; note: string | null }>(
        'GET',
        `/v1/workshops/${onA.id}/usage`,
      );
      assert.equal(u.status, 200, JSON.stringify(u.body));
      // Read anywhere but on a, there would be no cgroups: every figure null, and a note.
      assert.equal(u.body.note, null, JSON.stringify(u.body));
      assert.ok(u.body.memoryBytes! > 0 && u.body.cpuUsec! > 0 && u.body.pids! >= 2, JSON.stringify(u.body));
    }
  });

  it('a PTY through a non-owner node', async () => {
    const ws = new WebSocket(`${c.url.replace('http', 'ws')}/v1/workshops/${onA.id}/pty`, {
      headers: { authorization: `Bearer ${c.token}` },
    });
    let output = '';
    const closed = new Promise<void>((r) => ws.on('close', () => r()));
    try {
      await new Promise<void>((resolve, reject) => {
        ws.once('error', reject);
        ws.once('open', () => ws.send(JSON.stringify({ type: 'start', command: ['sh'], cols: 80, rows: 24 })));
        ws.once('message', (d: Buffer) => (JSON.parse(d.toString()).type === 'started' ? resolve() : reject(new Error(d.toString()))));
      });
      ws.on('message', (d: Buffer, binary: boolean) => {
        if (binary) output += d.toString();
      });
      ws.send(Buffer.from('echo pty-$((6*7)) && hostname\n'), { binary: true });
      await until('the PTY output', async () => (/pty-42\r?\non-a/.test(output) ? true : undefined), 30_000);
    } finally {
      ws.close();
      await closed;
    }
  });

  it('`atelier ssh` and the simulators list through a non-owner node', async () => {
    const ssh = await c.cli(['ssh', onA.id, '--', 'sh', '-c', 'test -t 0 && echo "tty on $(hostname)"; exit 9']);
    assert.equal(ssh.code, 9, ssh.stderr);
    assert.match(ssh.stdout, /tty on on-a/);
    const sims = await Promise.all([a, b].map((s) => s.api('GET', `/v1/workshops/${onA.id}/simulators`)));
    assert.equal(sims[0]!.status, 200, JSON.stringify(sims[0]!.body));
    assert.deepEqual(sims[1], sims[0]);
  });

  it('a port-forward through a non-owner node', async () => {
    const echo =
      "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', 8300)); s.listen(8)\nopen('/tmp/echo.ready', 'w').close()\n" +
      'while True:\n    c, _ = s.accept()\n    while True:\n        d = c.recv(65536)\n        if not d: break\n        c.sendall(d.upper())\n    c.close()\n';
    await b.api('PUT', `/v1/workshops/${onA.id}/files?path=echo.py`, Buffer.from(echo));
    await b.exec(onA.id, [
      'sh',
      '-c',
      'rm -f /tmp/echo.ready; nohup python3 echo.py >/dev/null 2>&1 & while [ ! -e /tmp/echo.ready ]; do sleep 0.05; done',
    ]);
    const r = await b.cli(['port-forward', '--stdio', onA.id, '8300'], { input: 'through node b\n' });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'THROUGH NODE B\n');
  });

  it('an agent session started through one non-owner node, attached through another', async () => {
    const run = await b.cli([
      'run',
      onA.id,
      '--session',
      'bot',
      '-d',
      '--',
      'sh',
      '-c',
      'echo "agent on $(hostname)"; read line; echo "agent got $line"; exit 5',
    ]);
    assert.equal(run.code, 0, run.stderr);
    const listed = await c.api<{ items: { name: string; running: boolean }[] }>('GET', `/v1/workshops/${onA.id}/sessions`);
    assert.ok(
      listed.body.items.some((x) => x.name === 'bot' && x.running),
      JSON.stringify(listed.body),
    );
    const attached = new CliProcess(['attach', onA.id, '--session', 'bot'], c.env());
    try {
      await attached.waitFor(/agent on on-a/);
      attached.proc.stdin!.write('ping\n');
      assert.equal(await attached.exited, 5);
      assert.match(attached.stdout, /agent got ping/);
    } finally {
      await attached.stop();
    }
  });

  it('suspend and resume through a non-owner node', async () => {
    const stopped = await b.api<Ws>('POST', `/v1/workshops/${onA.id}/stop`);
    assert.equal(stopped.status, 200, JSON.stringify(stopped.body));
    assert.equal(stopped.body.status, 'Suspended');
    assert.equal((await c.api<Ws>('GET', `/v1/workshops/${onA.id}`)).body.status, 'Suspended');
    const resumed = await c.api<Ws>('POST', `/v1/workshops/${onA.id}/resume`);
    assert.equal(resumed.body.status, 'Running', JSON.stringify(resumed.body));
    assert.equal((await b.exec(onA.id, ['echo', 'awake'])).stdout, 'awake\n');
  });

  it('a forged node-to-node request is refused', async () => {
    const nodes = (await a.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items;
    const idOf = (name: string): string => nodes.find((n) => n.name === name)!.id;
    const principal = Buffer.from(
      JSON.stringify({
        kind: 'user',
        userId: 'us-x',
        userName: 'admin',
        tenantId: 'tn-default',
        tenantName: 'default',
        role: 'admin',
        workshopId: null,
        tokenId: null,
        via: 'api-token',
        expiresAt: null,
      }),
    ).toString('base64url');
    const forged = (from: string, key: Buffer): Record<string, string> => {
      const time = String(Date.now());
      const nonce = randomBytes(12).toString('hex');
      const path = `/v1/workshops/${onA.id}/exec`;
      const sig = createHmac('sha256', key)
        .update([from, idOf('node-a'), time, nonce, 'POST', path, principal, ''].join('\n'))
        .digest('hex');
      return {
        'x-atelier-node': from,
        'x-atelier-node-target': idOf('node-a'),
        'x-atelier-node-time': time,
        'x-atelier-node-nonce': nonce,
        'x-atelier-node-principal': principal,
        'x-atelier-node-signature': sig,
        'content-type': 'application/json',
      };
    };
    for (const headers of [forged(idOf('node-b'), randomBytes(32)), forged('node-unknown', randomBytes(32))]) {
      const r = await fetch(`${a.url}/v1/workshops/${onA.id}/exec`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ command: ['true'] }),
      });
      assert.equal(r.status, 401);
      const body = (await r.json()) as { code: string; message: string };
      assert.equal(body.code, 'UNAUTHENTICATED');
      assert.match(body.message, /node-to-node request refused: it is not signed by a node of this installation/);
    }
    // A node header alone, beside a valid token, is refused too (never taken for a relayed request).
    const r = await a.api<{ code: string }>(
      'POST',
      `/v1/workshops/${onA.id}/exec`,
      { command: ['true'] },
      { 'x-atelier-node': idOf('node-b') },
    );
    assert.equal(r.status, 401);
  });

  it("through a non-owner node, a refused caller gets the owner's answer, a node header is never taken, an exec gives the owner's bytes", async () => {
    // Node b has relayed to a before (it knows where on-a runs): what it refuses, it refuses as the owner does.
    const path = `/v1/workshops/${onA.id}/exec`;
    const ask = async (s: TestServer, headers: Record<string, string>): Promise<{ status: number; type: string | null; text: string }> => {
      const r = await fetch(`${s.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json', ...headers },
        body: JSON.stringify({ command: ['sh', '-c', 'echo fast; echo path >&2'] }),
      });
      return { status: r.status, type: r.headers.get('content-type'), text: await r.text() };
    };
    const withoutId = (text: string): unknown => ({ ...(JSON.parse(text) as object), requestId: undefined });
    assert.equal((await b.exec(onA.id, ['true'])).exitCode, 0);
    for (const [headers, status] of [
      [{ authorization: 'Bearer atl_not-a-token-of-this-installation' }, 401],
      [{ authorization: `Bearer ${a.token}`, 'x-atelier-tenant': 'no-such-tenant' }, 403],
    ] as const) {
      const viaOwner = await ask(a, headers);
      const viaB = await ask(b, headers);
      assert.equal(viaOwner.status, status, viaOwner.text);
      assert.equal(viaB.status, status, viaB.text);
      assert.deepEqual(withoutId(viaB.text), withoutId(viaOwner.text));
    }
    // A node header beside a valid token: never relayed from there, refused as any unsigned node request.
    const nodes = (await a.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items;
    const unsigned = await ask(b, { authorization: `Bearer ${a.token}`, 'x-atelier-node': nodes.find((n) => n.name === 'node-a')!.id });
    assert.equal(unsigned.status, 401, unsigned.text);
    assert.match(unsigned.text, /node-to-node request refused/);
    // Accepted: the owner's answer, byte for byte.
    const viaOwner = await ask(a, { authorization: `Bearer ${a.token}` });
    const viaB = await ask(b, { authorization: `Bearer ${a.token}` });
    assert.equal(viaOwner.status, 200, viaOwner.text);
    assert.deepEqual(viaB, viaOwner);
    assert.match(viaB.text, /"stdout":"fast\\n"/);
  });

  it('a request relayed to a node that does not run the workshop is refused, naming the node that does', async () => {
    // Signed with node b's own key (unsealed here with the installation's master key), as node b
    // would sign it, but sent to node c for a workshop node a runs.
    const nodeList = (await a.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items;
    const idOf = (name: string): string => nodeList.find((n) => n.name === name)!.id;
    const [row] = (await sql.query<{ key_sealed: string }>('SELECT key_sealed FROM nodes WHERE id = $1', [idOf('node-b')])).rows;
    const key = Buffer.from(
      MasterKey.loadOrCreate(nodes.env.ATELIER_MASTER_KEY_FILE!)
        .decrypt(row!.key_sealed, `node-key:${idOf('node-b')}`)
        .toString('utf8'),
      'hex',
    );
    const me = (await a.api<{ user: { id: string; name: string }; tenant: { id: string; name: string } }>('GET', '/v1/auth/whoami')).body;
    const caller: Principal = {
      kind: 'user',
      userId: me.user.id,
      userName: me.user.name,
      tenantId: me.tenant.id,
      tenantName: me.tenant.name,
      role: 'admin',
      workshopId: null,
      tokenId: null,
      via: 'api-token',
      expiresAt: null,
    };
    const principal = Buffer.from(JSON.stringify(caller)).toString('base64url');
    const path = `/v1/workshops/${onA.id}/exec`;
    const signed = (target: string): Record<string, string> => {
      const time = String(Date.now());
      const nonce = randomBytes(12).toString('hex');
      const sig = createHmac('sha256', key)
        .update([idOf('node-b'), target, time, nonce, 'POST', path, principal, ''].join('\n'))
        .digest('hex');
      return {
        'x-atelier-node': idOf('node-b'),
        'x-atelier-node-target': target,
        'x-atelier-node-time': time,
        'x-atelier-node-nonce': nonce,
        'x-atelier-node-principal': principal,
        'x-atelier-node-signature': sig,
        'content-type': 'application/json',
        accept: 'application/json',
      };
    };
    const send = (s: TestServer, target: string): Promise<Response> =>
      fetch(`${s.url}${path}`, { method: 'POST', headers: signed(target), body: JSON.stringify({ command: ['echo', 'here'] }) });
    const wrong = await send(c, idOf('node-c'));
    const body = (await wrong.json()) as { code: string; message: string };
    assert.equal(wrong.status, 409, JSON.stringify(body));
    assert.equal(body.code, 'CONFLICT');
    assert.match(body.message, new RegExp(`^workshop ${onA.id} runs on node node-a, not on node-c`));
    // The same, signed the same way, to the node that runs it: answered.
    const right = await send(a, idOf('node-a'));
    assert.equal(right.status, 200);
    assert.equal(((await right.json()) as { stdout: string }).stdout, 'here\n');
  });

  it('a relayed body changed on the way between two nodes is refused; unchanged, it passes', async () => {
    // Between node b and node a, a proxy that may change the bodies it passes on: node a's
    // address, as node b reads it, is the proxy's for this test.
    let change: ((body: string) => string) | undefined;
    const seen: string[] = [];
    const proxy = http.createServer((req, res) => {
      seen.push(req.url ?? '');
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        const body = Buffer.from(change ? change(text) : text);
        const up = http.request(
          new URL(req.url ?? '/', a.url),
          { method: req.method, headers: { ...req.headers, 'content-length': String(body.length) } },
          (answer) => {
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(res);
          },
        );
        up.on('error', () => res.destroy());
        up.end(body);
      });
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const setAddress = async (url: string): Promise<void> => {
      await sql.query("UPDATE nodes SET address = $1 WHERE name = 'node-a'", [url]);
      // Listing the nodes reads them again.
      const listed = (await b.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items;
      assert.equal(listed.find((n) => n.name === 'node-a')!.address, url);
    };
    try {
      await setAddress(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}`);
      assert.equal((await b.exec(onA.id, ['echo', 'original'])).stdout, 'original\n');
      // A workshop named by its name is relayed by its id, resolved by the relaying node (the
      // owner has nothing to look up again).
      seen.length = 0;
      const named = await b.api<{ stdout: string }>('POST', `/v1/workshops/${onA.name}/exec`, { command: ['echo', 'by name'] });
      assert.equal(named.body.stdout, 'by name\n', JSON.stringify(named.body));
      assert.deepEqual(seen, [`/v1/workshops/${onA.id}/exec`]);
      for (const [what, edit, why] of [
        ['the same length', (t: string) => t.replace('"original"', '"tampered"'), /its body is not the one it was signed with$/],
        [
          'another length',
          (t: string) => t.replace('"original"', '"tampered!"'),
          /its body is not the one it was signed with \(another length\)/,
        ],
      ] as const) {
        change = edit;
        const r = await b.api<{ code: string; message: string }>('POST', `/v1/workshops/${onA.id}/exec`, { command: ['echo', 'original'] });
        assert.equal(r.status, 401, `${what}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.code, 'UNAUTHENTICATED');
        assert.match(r.body.message, /^node-to-node request refused: /);
        assert.match(r.body.message, why);
      }
    } finally {
      await setAddress(a.url);
      proxy.closeAllConnections();
      await new Promise((r) => proxy.close(r));
    }
    assert.equal((await b.exec(onA.id, ['echo', 'direct again'])).stdout, 'direct again\n');
  });

  it('a draining node gets no new workshop; undrained, it does again', async () => {
    for (const n of ['node-b', 'node-c']) assert.equal((await a.api<Node>('POST', `/v1/nodes/${n}/drain`)).body.draining, true);
    const asked = await b.api<{ code: string; message: string }>('POST', '/v1/workshops', { repo, name: 'refused', node: 'node-b' });
    assert.equal(asked.status, 409);
    assert.match(asked.body.message, /node node-b is draining/);
    onC = (await c.createWorkshop({ repo, name: 'while-draining' })) as unknown as Ws;
    assert.equal(onC.node, 'node-a');
    assert.equal((await a.api('DELETE', `/v1/workshops/${onC.id}`)).status, 200);
    const cli = await a.cli(['nodes', 'undrain', 'node-c']);
    assert.equal(cli.code, 0, cli.stderr);
    await a.api('POST', '/v1/nodes/node-b/undrain');
    onC = (await a.createWorkshop({ repo, name: 'on-c', node: 'node-c' })) as unknown as Ws;
    assert.equal(onC.status, 'Running', onC.statusReason ?? '');
  });

  it('a node killed with -9: its workshops are NodeUnreachable elsewhere, others unaffected; restarted, they are back', async () => {
    await c.stop('SIGKILL');
    const seen = await until('node c unreachable', async () => {
      const w = (await a.api<Ws>('GET', `/v1/workshops/${onC.id}`)).body;
      return w.status === 'NodeUnreachable' ? w : undefined;
    });
    assert.match(seen.statusReason ?? '', /its node node-c has missed its heartbeats since .*; it was Running/);
    const nodes = (await b.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items;
    assert.equal(nodes.find((n) => n.name === 'node-c')!.state, 'unreachable');
    // The other node's workshop still works, through either live node.
    assert.equal((await b.exec(onA.id, ['echo', 'fine'])).stdout, 'fine\n');
    assert.equal((await b.api<Ws>('GET', `/v1/workshops/${onA.id}`)).body.status, 'Running');
    // What must run on node c says so; nothing is deleted for being unreachable.
    const exec = await a.api<{ code: string; message: string }>('POST', `/v1/workshops/${onC.id}/exec`, { command: ['true'] });
    assert.equal(exec.status, 503);
    assert.match(exec.body.message, /runs on node node-c, which has missed its heartbeats/);
    const del = await a.api<{ code: string }>('DELETE', `/v1/workshops/${onC.id}`);
    assert.equal(del.status, 503);
    const placed = await b.api<{ items: Ws[] }>('GET', '/v1/workshops');
    assert.ok(placed.body.items.some((w) => w.id === onC.id));
    await c.boot();
    const back = await until('node c back', async () => {
      const w = (await a.api<Ws>('GET', `/v1/workshops/${onC.id}`)).body;
      return w.status === 'Running' ? w : undefined;
    });
    assert.equal(back.statusReason, null);
    assert.equal((await a.exec(onC.id, ['hostname'])).stdout, 'on-c\n');
  });

  it('a node on a newer schema joins and says to upgrade; one outside the node protocol window refuses, and says what to do', async () => {
    const attempt = async (name: string, expected: RegExp): Promise<void> => {
      const s = nodes.node(name);
      try {
        await assert.rejects(s.boot(), (err: Error) => {
          assert.match(err.message, expected);
          return true;
        });
      } finally {
        await s.stop();
        rmSync(s.dataDir, { recursive: true, force: true });
      }
    };
    // A migration this build does not know (a newer node applied it): migrations only add, so the
    // node joins (the schema's window), and says it should be upgraded.
    await sql.query("INSERT INTO schema_migrations (version) VALUES ('999_from_a_newer_node.sql')");
    const older = nodes.node('old-schema');
    try {
      await older.boot();
      assert.match(
        older.log,
        /this node \(Atelier [^)]+\) is older than the database it joins: a newer node applied 999_from_a_newer_node\.sql; it joins/,
      );
      const listed = await a.cli(['nodes', 'list']);
      assert.match(listed.stdout, /old-schema/, listed.stderr);
    } finally {
      await older.stop();
      rmSync(older.dataDir, { recursive: true, force: true });
      await sql.query("DELETE FROM schema_migrations WHERE version = '999_from_a_newer_node.sql'");
      await sql.query("DELETE FROM nodes WHERE name = 'old-schema'");
    }
    // A live node that no longer talks to this build's node protocol.
    await sql.query(
      `INSERT INTO nodes (id, name, address, version, protocol, min_protocol, schema_version, key_sealed)
       VALUES ('node-future', 'future', 'http://127.0.0.1:9', '99.0.0', 4, 3, '999', 'x')`,
    );
    try {
      await attempt(
        'old-protocol',
        /this node speaks node protocol 2, and node future \(Atelier 99\.0\.0\) needs at least 3: upgrade this node/,
      );
    } finally {
      await sql.query("DELETE FROM nodes WHERE id = 'node-future'");
    }
  });
});
