import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import http from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import { CliProcess, TestServer, makeRepo } from './helpers/server.js';

/**
 * Armed tunnels: a port-forward's spare connections, authorised ahead of time, dialling nothing
 * inside the workshop until a local client connects, and cut by the server the moment what
 * authorised them changes (token revoked or narrowed, workshop stopped or deleted, the server's
 * notification connection lost).
 */

const SPEAKS_FIRST = 7000;
/** A server that speaks first (as SSH does), counting the connections it accepts in /tmp/accepts. */
const SPEAKS_FIRST_PY = `
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", ${SPEAKS_FIRST})); s.listen(64)
n = 0
open("/tmp/accepts", "w").write("0")
while True:
    c, _ = s.accept(); n += 1
    open("/tmp/accepts", "w").write(str(n))
    try:
        c.sendall(b"HELLO %d\\n" % n)
    except OSError:
        pass
    c.close()
`;

/** Everything a connection to a local port receives until it ends (a reset ends it too). */
function readAll(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    let data = '';
    s.on('data', (c: Buffer) => (data += c.toString()));
    s.on('close', () => resolve(data));
    s.on('error', () => undefined);
    s.setTimeout(20_000, () => {
      s.destroy();
      reject(new Error('timeout'));
    });
  });
}

type Armed = { socket: Socket; headers: http.IncomingHttpHeaders };
type Refused = { status: number; body: { code?: string; message?: string } };

/** An armed tunnel, as the CLI asks for one (`Atelier-Tunnel-Mode: armed`), or the refusal. */
function arm(server: TestServer, workshop: string, port: number, token = server.token): Promise<Armed | Refused> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${server.url}/v1/workshops/${workshop}/tunnel?port=${port}&resume=false`, {
      agent: false,
      headers: { authorization: `Bearer ${token}`, connection: 'Upgrade', upgrade: 'atelier-tunnel', 'atelier-tunnel-mode': 'armed' },
    });
    req.once('upgrade', (res, socket: Socket) => resolve({ socket, headers: res.headers }));
    req.once('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(body || '{}') as Refused['body'] }));
    });
    req.once('error', reject);
    req.end();
  });
}

async function armed(server: TestServer, workshop: string, port: number, token?: string): Promise<Armed> {
  const r = await arm(server, workshop, port, token);
  if (!('socket' in r)) throw new Error(`not armed: ${r.status} ${JSON.stringify(r.body)}`);
  assert.equal(r.headers['atelier-tunnel-mode'], 'armed');
  assert.match(String(r.headers['atelier-tunnel-id']), /^tun-/);
  r.socket.on('error', () => undefined);
  return r;
}

/** Resolves when the socket is closed (by the server), rejects after 15 s. */
function closed(socket: Socket): Promise<void> {
  if (socket.closed) return Promise.resolve();
  socket.resume();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the armed tunnel was not cut')), 15_000);
    socket.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('armed tunnels (port-forward spares)', () => {
  let server: TestServer;
  let repo: string;
  let ws: string;
  const procs: CliProcess[] = [];

  const accepts = async (id = ws): Promise<number> => Number((await server.exec(id, ['cat', '/tmp/accepts'])).stdout.trim());
  /** The server's own count of armed tunnels (the `atelier_tunnels` gauge). */
  const armedCount = async (): Promise<number> => {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    return Number(/^atelier_tunnels\{state="armed"\} (\d+)/m.exec(text)?.[1] ?? NaN);
  };
  const query = async (sql: string, params: unknown[] = []): Promise<pg.QueryResult> => {
    const client = new pg.Client({
      connectionString: `postgresql://atelier@/atelier?host=${encodeURIComponent(join(server.dataDir, 'pgsock'))}`,
    });
    await client.connect();
    try {
      return await client.query(sql, params);
    } finally {
      await client.end();
    }
  };
  const startSpeaker = async (id: string): Promise<void> => {
    await server.api('POST', `/v1/workshops/${id}/exec`, {
      command: ['sh', '-c', 'cat > /tmp/speaks-first.py'],
      stdin: Buffer.from(SPEAKS_FIRST_PY).toString('base64'),
    });
    await server.exec(id, ['sh', '-c', 'nohup python3 /tmp/speaks-first.py >/tmp/speaks-first.log 2>&1 & sleep 0.3']);
    for (let i = 0; i < 100 && (await server.exec(id, ['test', '-s', '/tmp/accepts'])).exitCode !== 0; i++)
      await new Promise((r) => setTimeout(r, 100));
  };
  const newToken = async (): Promise<{ id: string; token: string }> => {
    const r = await server.api<{ id: string; token: string }>('POST', '/v1/tokens', { name: `pf-${Date.now()}` });
    assert.equal(r.status, 201);
    return r.body;
  };

  before(async () => {
    server = await TestServer.start();
    repo = makeRepo({ 'README.md': '# armed\n' });
    ws = (await server.createWorkshop({ repo })).id;
    await startSpeaker(ws);
  });

  after(async () => {
    for (const p of procs) await p.stop();
    await server?.dispose();
    rmSync(repo, { recursive: true, force: true });
  });

  const start = (args: string[], env: NodeJS.ProcessEnv = {}): CliProcess => {
    const p = new CliProcess(args, { ...server.env(), ...env });
    procs.push(p);
    return p;
  };

  it('an armed tunnel dials nothing until its go byte; the go dials; a refused dial resets it with the reason', async () => {
    const before = await accepts();
    const a = await armed(server, ws, SPEAKS_FIRST);
    // Held idle past Node's 5 s keep-alive timeout: still there.
    await new Promise((r) => setTimeout(r, 6000));
    // A server that speaks first saw nothing: no phantom connection.
    assert.equal(await accepts(), before);
    assert.equal(await armedCount(), 1);
    const greeting = new Promise<string>((resolve) => {
      let text = '';
      a.socket.on('data', (c: Buffer) => (text += c.toString()));
      a.socket.on('close', () => resolve(text));
    });
    a.socket.write(Buffer.from([0x01]));
    assert.equal(await greeting, `HELLO ${before + 1}\n`);
    assert.equal(await accepts(), before + 1);

    // Nothing listens on 7999: the go is answered by a reset, and the server says why.
    const b = await armed(server, ws, 7999);
    const id = String(b.headers['atelier-tunnel-id']);
    const gone = closed(b.socket);
    b.socket.write(Buffer.from([0x01]));
    await gone;
    const why = await server.api<{ state: string; code: string; message: string }>('GET', `/v1/workshops/${ws}/tunnels/${id}`);
    assert.equal(why.body.state, 'reset');
    assert.equal(why.body.code, 'PORT_CLOSED');
    assert.match(why.body.message, /nothing listens on port 7999/);

    // Anything but the go byte first ends it, dialling nothing.
    const c = await armed(server, ws, SPEAKS_FIRST);
    const cGone = closed(c.socket);
    c.socket.write('GET / HTTP/1.0\r\n\r\n');
    await cGone;
    assert.equal(await accepts(), before + 1);

    // Port 22 (the SSH endpoint) and unknown modes are refused with a clear error.
    const ssh = (await arm(server, ws, 22)) as Refused;
    assert.equal(ssh.body.code, 'UNSUPPORTED');
    assert.match(String(ssh.body.message), /port 22/);
    await until('no spare is left', async () => (await armedCount()) === 0);
  });

  it('port-forward keeps spares that dial nothing before a client connects, and does not leak them', async () => {
    const pf = start(['port-forward', ws, `0:${SPEAKS_FIRST}`]);
    const local = Number((await pf.waitFor(/Forwarding from 127\.0\.0\.1:(\d+)/))[1]);
    await until('a spare is armed', async () => (await armedCount()) >= 1);
    // Only the start-up check (the remote port must answer before "Forwarding") reached the server inside.
    const afterStart = await accepts();
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(await accepts(), afterStart);
    for (let i = 1; i <= 30; i++) assert.equal(await readAll(local), `HELLO ${afterStart + i}\n`);
    assert.equal(await accepts(), afterStart + 30);
    // The spares kept are bounded (8 per forward at most), whatever the number of connections.
    const held = await armedCount();
    assert.ok(held >= 1 && held <= 8, `armed on the server: ${held}`);
    await pf.stop();
    await until('the spares of a stopped forward are gone from the server', async () => (await armedCount()) === 0);
    assert.equal(await accepts(), afterStart + 30);
  });

  it('revoking the token cuts its spares at once and stops new connections', async () => {
    const t = await newToken();
    const a = await armed(server, ws, SPEAKS_FIRST, t.token);
    const pf = start(['port-forward', ws, `0:${SPEAKS_FIRST}`], { ATELIER_TOKEN: t.token });
    const local = Number((await pf.waitFor(/Forwarding from 127\.0\.0\.1:(\d+)/))[1]);
    await until('the forward armed a spare', async () => (await armedCount()) >= 2);
    const before = await accepts();
    const cut = closed(a.socket);
    assert.equal((await server.api('DELETE', `/v1/tokens/${t.id}`)).status, 200);
    await cut;
    await until('no spare is left', async () => (await armedCount()) === 0);
    // A new connection through the forward reaches nothing inside: the token is refused.
    assert.equal(await readAll(local), '');
    await pf.waitFor(/revoked/);
    assert.equal(await accepts(), before);
    const again = (await arm(server, ws, SPEAKS_FIRST, t.token)) as Refused;
    assert.equal(again.status, 401);
    assert.equal(again.body.code, 'TOKEN_REVOKED');
  });

  it('the tunnel route takes tokens from a cache, yet a revoked or narrowed token opens nothing once the change is made', async () => {
    /** A raw tunnel, as `port-forward --stdio` opens one: the 101's socket, or the refusal. */
    const raw = (token: string): Promise<{ socket?: Socket; status: number; code?: string }> =>
      new Promise((resolve, reject) => {
        const req = http.request(`${server.url}/v1/workshops/${ws}/tunnel?port=${SPEAKS_FIRST}`, {
          agent: false,
          headers: { authorization: `Bearer ${token}`, connection: 'Upgrade', upgrade: 'atelier-tunnel', 'atelier-tunnel-mode': 'raw' },
        });
        req.once('upgrade', (_res, socket: Socket) => resolve({ socket, status: 101 }));
        req.once('response', (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, code: (JSON.parse(body || '{}') as { code?: string }).code }));
        });
        req.once('error', reject);
        req.end();
      });
    const t = await newToken();
    for (let i = 0; i < 3; i++) {
      const ok = await raw(t.token);
      assert.equal(ok.status, 101);
      ok.socket!.destroy();
    }
    // Revoked on this server: the very next tunnel is refused (the answer to the revoke waited
    // until the server heard the change).
    assert.equal((await server.api('DELETE', `/v1/tokens/${t.id}`)).status, 200);
    const revoked = await raw(t.token);
    assert.equal(revoked.status, 401);
    assert.equal(revoked.code, 'TOKEN_REVOKED');

    // Narrowed straight in the database (as another server would): refused once the notification is heard.
    const u = await newToken();
    const ok = await raw(u.token);
    assert.equal(ok.status, 101);
    ok.socket!.destroy();
    await query("UPDATE api_tokens SET role = 'viewer' WHERE id = $1", [u.id]);
    await until('the narrowed token is refused', async () => (await raw(u.token)).status === 403);
    assert.equal((await raw(u.token)).status, 403);
  });

  it('a change made straight in the database (as by another server) cuts the spares it touches, and only those', async () => {
    const t = await newToken();
    const mine = await armed(server, ws, SPEAKS_FIRST, t.token);
    const other = await armed(server, ws, SPEAKS_FIRST);
    const cut = closed(mine.socket);
    await query("UPDATE api_tokens SET role = 'viewer' WHERE id = $1", [t.id]);
    await cut;
    assert.equal(other.socket.closed, false);
    assert.equal(await armedCount(), 1);
    // A viewer may not operate the workshop: no new spare either.
    const refused = (await arm(server, ws, SPEAKS_FIRST, t.token)) as Refused;
    assert.equal(refused.status, 403);
    other.socket.destroy();
  });

  it('while the server is not listening for changes nothing is armed, and the spares there were are cut', async () => {
    const a = await armed(server, ws, SPEAKS_FIRST);
    const cut = closed(a.socket);
    await query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN atelier_tunnel_grants%'");
    await cut;
    // The listener comes back on its own (within a second or so); arming works again then.
    await until('arming works again', async () => {
      const r = await arm(server, ws, SPEAKS_FIRST);
      if (!('socket' in r)) {
        assert.equal(r.body.code, 'UNAVAILABLE');
        return false;
      }
      r.socket.destroy();
      return true;
    });
  });

  it('stopping or deleting the workshop cuts its spares at once', async () => {
    const other = (await server.createWorkshop({ repo })).id;
    await startSpeaker(other);
    const a = await armed(server, other, SPEAKS_FIRST);
    const stopped = closed(a.socket);
    const stop = await server.api('POST', `/v1/workshops/${other}/stop`);
    assert.equal(stop.status, 200, JSON.stringify(stop.body));
    await stopped;
    // A suspended workshop is never resumed for a spare.
    const refused = (await arm(server, other, SPEAKS_FIRST)) as Refused;
    assert.equal(refused.body.code, 'WORKSHOP_SUSPENDED');
    assert.equal((await server.api<{ status: string }>('GET', `/v1/workshops/${other}`)).body.status, 'Suspended');
    assert.equal((await server.api('POST', `/v1/workshops/${other}/resume`)).status, 200);

    const pf = start(['port-forward', other, `0:${SPEAKS_FIRST}`]);
    await pf.waitFor(/Forwarding from/);
    const b = await armed(server, other, SPEAKS_FIRST);
    await until('the forward armed a spare', async () => (await armedCount()) >= 2);
    const deleted = closed(b.socket);
    assert.equal((await server.api('DELETE', `/v1/workshops/${other}`)).status, 200);
    await deleted;
    await until('no spare is left', async () => (await armedCount()) === 0);
    await pf.waitFor(/workshop .* was deleted/);
    assert.equal(await pf.exited, 1);
  });
});
