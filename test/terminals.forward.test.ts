import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { createServer, connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { CliProcess, type TestServer, makeRepo } from './helpers/server.js';
import { freePort, httpGet, startTerminalsWorkshop, stopTerminalsWorkshop } from './terminals.helpers.js';

describe('port-forward and raw tunnels', () => {
  let server: TestServer;
  let repo: string;
  let ws: string;
  let home: string;
  const procs: CliProcess[] = [];

  before(async () => {
    ({ server, repo, ws, home } = await startTerminalsWorkshop());
  });
  after(() => stopTerminalsWorkshop({ server, repo, home }, procs));

  const env = (): NodeJS.ProcessEnv => ({ ...server.env(), ATELIER_SSH_CONFIG: join(home, 'ssh_config') });
  const start = (args: string[]): CliProcess => {
    const p = new CliProcess(args, env());
    procs.push(p);
    return p;
  };

  describe('port-forward', () => {
    it('reports success only once the listener accepts and the remote port answered', async () => {
      const closed = await server.cli(['port-forward', ws, '0:8999'], { env: env() });
      assert.equal(closed.code, 1);
      assert.doesNotMatch(closed.stdout, /Forwarding/);
      assert.match(closed.stderr, /nothing listens on port 8999.*PORT_CLOSED/);
      const busy = createServer().listen(0, '127.0.0.1');
      await new Promise((r) => busy.once('listening', r));
      const port = (busy.address() as { port: number }).port;
      const inUse = await server.cli(['port-forward', ws, `${port}:8000`], { env: env() });
      busy.close();
      assert.equal(inUse.code, 1);
      assert.match(inUse.stderr, new RegExp(`local port ${port} is already in use`));
      const bad = await server.cli(['port-forward', ws, '80:99999'], { env: env() });
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /not a TCP port/);
    });

    it('forwards, shows health in --list, and comes back after a server restart', async () => {
      const pf = start(['port-forward', ws, '0:8000']);
      const local = Number((await pf.waitFor(/Forwarding from 127\.0\.0\.1:(\d+) -> ws-\w+:8000/))[1]);
      assert.match(await httpGet(local, '/index.html'), /inside the workshop/);
      const list = await server.cli(['port-forward', '--list', '-o', 'json'], { env: env() });
      const records = JSON.parse(list.stdout) as { pid: number; forwards: { local: number; remote: number; health: string }[] }[];
      const mine = records.find((r) => r.pid === pf.proc.pid);
      assert.deepEqual(
        mine?.forwards.map((f) => [f.local, f.remote, f.health]),
        [[local, 8000, 'ok']],
      );

      await server.stop();
      await pf.waitFor(/server unreachable .*reconnecting in/);
      const down = JSON.parse((await server.cli(['port-forward', '--list', '-o', 'json'], { env: env() })).stdout) as typeof records;
      assert.equal(down.find((r) => r.pid === pf.proc.pid)?.forwards[0]?.health, 'reconnecting');
      await server.boot();
      await pf.waitFor(/reconnected to the server/);
      assert.match(await httpGet(local, '/index.html'), /inside the workshop/);
      assert.equal(pf.proc.exitCode, null);
    });

    it("with no port given, forwards the devcontainer's forwardPorts", async () => {
      const port = await freePort();
      const withPorts = makeRepo({
        '.devcontainer/devcontainer.json': JSON.stringify({ forwardPorts: [port] }),
        'index.html': '<h1>devcontainer port</h1>\n',
      });
      try {
        const w = (await server.createWorkshop({ repo: withPorts })).id;
        await server.exec(w, ['sh', '-c', `nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & sleep 1`]);
        const pf = start(['port-forward', w]);
        await pf.waitFor(new RegExp(`Forwarding from 127\\.0\\.0\\.1:${port} -> ${w}:${port}`));
        assert.match(pf.stderr, new RegExp(`forwarding the devcontainer's forwardPorts: ${port}`));
        assert.match(await httpGet(port, '/index.html'), /devcontainer port/);
        await pf.stop();
        await server.api('DELETE', `/v1/workshops/${w}`);
      } finally {
        rmSync(withPorts, { recursive: true, force: true });
      }
    });

    it('--stdio relays standard input and output, and a deleted workshop stops a forward with the reason', async () => {
      const stdio = await server.cli(['port-forward', '--stdio', ws, '8000'], { input: 'GET /index.html HTTP/1.0\r\n\r\n' });
      assert.equal(stdio.code, 0, stdio.stderr);
      assert.match(stdio.stdout, /inside the workshop/);

      const doomed = (await server.createWorkshop({ repo })).id;
      await server.exec(doomed, ['sh', '-c', 'nohup python3 -m http.server 8100 --bind 127.0.0.1 >/dev/null 2>&1 & sleep 1']);
      const pf = start(['port-forward', doomed, '0:8100']);
      await pf.waitFor(/Forwarding from/);
      await server.api('DELETE', `/v1/workshops/${doomed}`);
      assert.equal(await pf.exited, 1);
      assert.match(pf.stderr, new RegExp(`forward stopped: workshop ${doomed} was deleted`));
    });
  });

  describe('raw tunnels (port-forward: the CLI and the server each relay raw bytes)', () => {
    /** Writes a python server into the workshop and starts it; resolves once it listens. */
    const serveInside = async (w: string, name: string, code: string): Promise<void> => {
      await server.api('PUT', `/v1/workshops/${w}/files?path=${name}.py`, Buffer.from(code));
      await server.exec(w, [
        'sh',
        '-c',
        `rm -f /tmp/${name}.*; nohup python3 ${name}.py >/dev/null 2>&1 & while [ ! -e /tmp/${name}.ready ]; do sleep 0.05; done`,
      ]);
    };
    const insideFile = async (w: string, path: string): Promise<string> =>
      (await server.exec(w, ['sh', '-c', `cat ${path} 2>/dev/null || true`])).stdout;
    const listening = (name: string, port: number): string =>
      'import socket, hashlib, struct, time, threading\n' +
      `s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', ${port})); s.listen(8)\n` +
      `open('/tmp/${name}.ready', 'w').close()\n`;
    const connectLocal = (port: number): Promise<Socket> =>
      new Promise((resolve, reject) => {
        const c = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => resolve(c));
        c.once('error', reject);
      });
    const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

    it('carries 20 MB both ways with identical checksums, and half-closes both ways', async () => {
      // Echoes what it reads; once the client half-closed, says so with the checksum of what came,
      // then closes its side too.
      await serveInside(
        ws,
        'echo20',
        listening('echo20', 8300) +
          'def serve(c):\n    h = hashlib.sha256()\n    while True:\n        d = c.recv(1 << 20)\n        if not d: break\n' +
          '        h.update(d); c.sendall(d)\n    c.sendall(b"EOF " + h.hexdigest().encode()); c.close()\n' +
          'while True:\n    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()\n',
      );
      const pf = start(['port-forward', ws, '0:8300']);
      const local = Number((await pf.waitFor(/Forwarding from 127\.0\.0\.1:(\d+) -> ws-\w+:8300/))[1]);
      const payload = randomBytes(20 << 20);
      const c = await connectLocal(local);
      const chunks: Buffer[] = [];
      c.on('data', (d: Buffer) => chunks.push(d));
      const ended = new Promise<void>((resolve, reject) => {
        c.once('end', () => resolve());
        c.once('error', reject);
      });
      // The payload, then a half-close: the answer comes after it.
      c.end(payload);
      await ended;
      const got = Buffer.concat(chunks);
      assert.equal(got.length, payload.length + 4 + 64);
      assert.equal(sha(got.subarray(0, payload.length)), sha(payload), 'the echo differs from what was sent');
      assert.equal(got.subarray(payload.length).toString(), `EOF ${sha(payload)}`);
      c.destroy();
      await pf.stop();
    });

    it('a reset inside the workshop resets the local connection and port-forward says so; a local reset resets the connection inside', async () => {
      await serveInside(
        ws,
        'rst',
        listening('rst', 8301) +
          'def serve(c):\n    c.sendall(b"ready")\n    try:\n        d = c.recv(10)\n' +
          '        if d == b"reset":\n            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); c.close(); return\n' +
          '        while d: d = c.recv(10)\n        open("/tmp/rst.seen", "w").write("EOF")\n' +
          '    except OSError as e:\n        open("/tmp/rst.seen", "w").write(type(e).__name__)\n' +
          'while True:\n    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()\n',
      );
      const pf = start(['port-forward', ws, '0:8301']);
      const local = Number((await pf.waitFor(/Forwarding from 127\.0\.0\.1:(\d+) -> ws-\w+:8301/))[1]);
      const waitReady = (c: Socket): Promise<void> => new Promise((r) => c.once('data', () => r()));

      // Inside -> local.
      const a = await connectLocal(local);
      await waitReady(a);
      const aEnd = new Promise<string>((resolve) => {
        a.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
        a.once('end', () => resolve('end'));
      });
      a.write('reset');
      assert.equal(await aEnd, 'ECONNRESET');
      await pf.waitFor(new RegExp(`a connection to 127\\.0\\.0\\.1:${local} ended: the connection inside the workshop was reset`));

      // Local -> inside.
      const b = await connectLocal(local);
      await waitReady(b);
      b.resetAndDestroy();
      let seen = '';
      for (let i = 0; i < 100 && !seen; i++) {
        await new Promise((r) => setTimeout(r, 100));
        seen = await insideFile(ws, '/tmp/rst.seen');
      }
      assert.equal(seen, 'ConnectionResetError');
      // The local side's own reset is no news to port-forward: nothing more said.
      assert.equal(pf.stderr.match(/ended:/g)?.length, 1, pf.stderr);
      await pf.stop();
    });

    it('a slow reader does not grow the server: the program inside is held back', async () => {
      await serveInside(
        ws,
        'flood',
        listening('flood', 8302) +
          "def serve(c):\n    c.settimeout(0.2); sent = 0; end = time.time() + 4; chunk = b'z' * 65536\n" +
          '    try:\n        while time.time() < end:\n            try:\n                sent += c.send(chunk)\n' +
          '            except socket.timeout:\n                pass\n    except OSError:\n        return\n' +
          "    open('/tmp/flood.sent', 'w').write(str(sent))\n" +
          '# (port-forward opens and closes one connection first, to see that the port answers)\n' +
          'while True:\n    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()\n',
      );
      const rss = (): number => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${server.proc!.pid}/status`, 'utf8'))![1]) * 1024;
      const pf = start(['port-forward', ws, '0:8302']);
      const local = Number((await pf.waitFor(/Forwarding from 127\.0\.0\.1:(\d+) -> ws-\w+:8302/))[1]);
      const before = rss();
      const c = await connectLocal(local);
      // Reads 16 KiB every 50 ms (320 KiB/s) while the program inside writes as fast as it can.
      let received = 0;
      c.pause();
      const reader = setInterval(() => {
        const chunk = c.read(16 << 10) as Buffer | null;
        if (chunk) received += chunk.length;
      }, 50);
      let peak = before;
      let sent = '';
      for (let i = 0; i < 100 && !sent; i++) {
        await new Promise((r) => setTimeout(r, 100));
        peak = Math.max(peak, rss());
        sent = await insideFile(ws, '/tmp/flood.sent');
      }
      clearInterval(reader);
      c.destroy();
      await pf.stop();
      assert.ok(sent !== '', 'the source never finished');
      assert.ok(received > 0, 'the reader got nothing');
      // Kernel socket buffers on the path, not 4 s of writing (gigabytes on loopback).
      assert.ok(Number(sent) - received < 64 << 20, `the program inside could write ${sent} bytes to a reader that took ${received}`);
      assert.ok(peak - before < 64 << 20, `the server grew by ${peak - before} bytes`);
    });

    it('deleting the workshop cuts a live forwarded connection, and port-forward says why', async () => {
      const doomed = (await server.createWorkshop({ repo })).id;
      await serveInside(
        doomed,
        'hold',
        listening('hold', 8303) + 'held = []\nwhile True:\n    c, _ = s.accept(); c.sendall(b"held"); held.append(c)\n',
      );
      const pf = start(['port-forward', doomed, '0:8303']);
      const local = Number((await pf.waitFor(/Forwarding from 127\.0\.0\.1:(\d+)/))[1]);
      const c = await connectLocal(local);
      const cut = new Promise<string>((resolve) => {
        c.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
        c.once('end', () => resolve('end'));
      });
      await new Promise((r) => c.once('data', r));
      const del = await server.api('DELETE', `/v1/workshops/${doomed}`);
      assert.equal(del.status, 200, JSON.stringify(del.body));
      assert.equal(await cut, 'ECONNRESET');
      await pf.waitFor(new RegExp(`a connection to 127\\.0\\.0\\.1:${local} ended: workshop ${doomed} was deleted`));
      assert.equal(await pf.exited, 1);
      assert.match(pf.stderr, new RegExp(`forward stopped: workshop ${doomed} was deleted`));
    });
  });
});
