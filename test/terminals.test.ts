import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import WebSocket from 'ws';
import { CliProcess, type TestServer } from './helpers/server.js';
import { freePort, httpGet, startTerminalsWorkshop, stopTerminalsWorkshop } from './terminals.helpers.js';

/** An `Upgrade: atelier-tunnel` request, as the CLI makes it: the 101's socket, or the HTTP refusal. */
function upgradeTunnel(
  server: TestServer,
  path: string,
  headers: Record<string, string>,
): Promise<{ socket: Socket; head: Buffer } | { status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${server.url}${path}`, {
      agent: false,
      headers: { connection: 'Upgrade', upgrade: 'atelier-tunnel', 'atelier-tunnel-mode': 'raw', ...headers },
    });
    req.once('upgrade', (_res, socket: Socket, head: Buffer) => resolve({ socket, head }));
    req.once('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.once('error', reject);
    req.end();
  });
}

/** A PTY WebSocket driven directly (the wire protocol the CLI speaks). */
class PtyClient {
  output = '';
  exit: { exitCode: number; signal: string | null } | undefined;
  readonly closed: Promise<void>;
  private constructor(readonly ws: WebSocket) {
    ws.on('message', (d: Buffer, binary: boolean) => {
      if (binary) this.output += d.toString();
      else {
        const e = JSON.parse(d.toString()) as { type: string; exitCode: number; signal: string | null };
        if (e.type === 'exit') this.exit = { exitCode: e.exitCode, signal: e.signal };
      }
    });
    this.closed = new Promise((r) => ws.on('close', () => r()));
  }

  static open(server: TestServer, id: string, start: object): Promise<PtyClient> {
    const ws = new WebSocket(`${server.url.replace('http', 'ws')}/v1/workshops/${id}/pty`, {
      headers: { authorization: `Bearer ${server.token}` },
    });
    return new Promise((resolve, reject) => {
      ws.once('error', reject);
      ws.once('open', () => ws.send(JSON.stringify({ type: 'start', ...start })));
      ws.once('message', (d: Buffer) => {
        const e = JSON.parse(d.toString()) as { type: string };
        if (e.type !== 'started') return reject(new Error(d.toString()));
        resolve(new PtyClient(ws));
      });
    });
  }

  send(text: string | Buffer): void {
    this.ws.send(Buffer.from(text), { binary: true });
  }

  control(msg: object): void {
    this.ws.send(JSON.stringify(msg));
  }

  async waitFor(re: RegExp): Promise<RegExpMatchArray> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const m = re.exec(this.output);
      if (m) return m;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${re}; output so far:\n${this.output}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

describe('terminals and tunnels', () => {
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

  describe('PTY', () => {
    it('runs one command on a terminal and returns its exit code, 128+n when killed by signal n', async () => {
      const ok = await server.cli(['ssh', ws, '--', 'sh', '-c', 'test -t 0 && test -t 1 && echo on-a-tty; exit 9']);
      assert.equal(ok.code, 9, ok.stderr);
      assert.match(ok.stdout, /on-a-tty/);
      const killed = await server.cli(['ssh', ws, '--', 'sh', '-c', 'kill -TERM $$']);
      assert.equal(killed.code, 143, killed.stderr);
    });

    it('Ctrl-C interrupts a sleep, not the shell; the shell exit code comes back', async () => {
      const p = start(['ssh', ws]);
      p.proc.stdin!.write('sleep 60\n');
      await p.waitFor(/sleep 60\r?\n/);
      await new Promise((r) => setTimeout(r, 300));
      p.proc.stdin!.write('\x03');
      p.proc.stdin!.write('echo "alive after $?"\n');
      await p.waitFor(/alive after 130/);
      p.proc.stdin!.write('exit 7\n');
      assert.equal(await p.exited, 7, p.stderr);
    });

    it('a resize is seen by stty size, and signals reach the foreground program', async () => {
      const pty = await PtyClient.open(server, ws, { cols: 100, rows: 30 });
      pty.send('stty size\n');
      await pty.waitFor(/30 100\r\n/);
      pty.control({ type: 'resize', cols: 132, rows: 43 });
      pty.send('stty size\n');
      await pty.waitFor(/43 132\r\n/);
      pty.send('sleep 60; echo "sleep ended $?"\n');
      await new Promise((r) => setTimeout(r, 500));
      pty.control({ type: 'signal', signal: 'SIGTERM' });
      await pty.waitFor(/sleep ended 143/);
      pty.send('exit 3\n');
      await pty.closed;
      assert.deepEqual(pty.exit, { exitCode: 3, signal: null });
    });

    it('a huge paste reaches the program whole', async () => {
      const pty = await PtyClient.open(server, ws, {
        cols: 80,
        rows: 24,
        command: ['sh', '-c', 'stty raw -echo; echo ready; head -c 4000000 | sha256sum'],
      });
      const data = Buffer.alloc(4_000_000);
      // Printable bytes only: in raw mode nothing is interpreted, but keep the test readable.
      for (let i = 0; i < data.length; i++) data[i] = 0x41 + (i % 26);
      // In canonical mode a line longer than 4095 bytes is cut: send once the terminal is raw.
      await pty.waitFor(/ready/);
      for (let i = 0; i < data.length; i += 256 << 10) pty.send(data.subarray(i, i + (256 << 10)));
      await pty.closed;
      assert.match(pty.output, new RegExp(createHash('sha256').update(data).digest('hex')));
      assert.equal(pty.exit?.exitCode, 0);
    });

    it('refuses bad input with a clear error and never a 500', async () => {
      const bad = await server.cli(['ssh', 'ws-nothere', '--', 'true']);
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /WORKSHOP_NOT_FOUND/);
      const plain = await server.api<{ code: string }>('GET', `/v1/workshops/${ws}/pty`);
      assert.equal(plain.status, 426);
      assert.equal(plain.body.code, 'UPGRADE_REQUIRED');
      const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/workshops/${ws}/pty`, {
        headers: { authorization: `Bearer ${server.token}` },
      });
      const answer = await new Promise<string>((resolve) => {
        socket.once('open', () => socket.send('{"type":"start","cols":0}'));
        socket.once('message', (d: Buffer) => resolve(d.toString()));
      });
      assert.match(answer, /"code":"INVALID_ARGUMENT"/);
    });
  });

  describe('flow control and suspended workshops', () => {
    it('a client that never reads blocks the program inside instead of growing the server', async () => {
      // A source that writes as fast as it can for 3 s, then says how much the tunnel took.
      const source =
        'import socket, time\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n' +
        "s.bind(('127.0.0.1', 8200)); s.listen(1); open('/tmp/source.ready', 'w').close()\n" +
        "c, _ = s.accept(); c.settimeout(0.2); sent = 0; end = time.time() + 3; chunk = b'z' * 65536\n" +
        'while time.time() < end:\n    try:\n        sent += c.send(chunk)\n    except socket.timeout:\n        pass\n' +
        "open('/tmp/source.sent', 'w').write(str(sent))\n";
      await server.api('PUT', `/v1/workshops/${ws}/files?path=source.py`, Buffer.from(source));
      await server.exec(ws, [
        'sh',
        '-c',
        'rm -f /tmp/source.*; nohup python3 source.py >/dev/null 2>&1 & while [ ! -e /tmp/source.ready ]; do sleep 0.05; done',
      ]);
      const client = new WebSocket(`${server.url.replace('http', 'ws')}/v1/workshops/${ws}/tunnel?port=8200`, {
        headers: { authorization: `Bearer ${server.token}` },
      });
      await new Promise((r) => client.once('message', r));
      // The client stops reading from its socket: nothing it has not read may pile up anywhere.
      client.pause();
      let sent = '';
      for (let i = 0; i < 100 && !sent; i++) {
        await new Promise((r) => setTimeout(r, 100));
        sent = (await server.exec(ws, ['sh', '-c', 'cat /tmp/source.sent 2>/dev/null || true'])).stdout;
      }
      client.terminate();
      assert.ok(sent !== '', 'the source never finished');
      // Kernel socket buffers and the 1 MiB window, not the 3 s of writing (gigabytes on loopback).
      assert.ok(Number(sent) < 64 << 20, `the source could write ${sent} bytes to a client that reads nothing`);
    });

    it('the raw tunnel (Upgrade: atelier-tunnel) is authenticated, tells an older CLI to update, and is bounded for a client that never reads', async () => {
      const anonymous = await upgradeTunnel(server, `/v1/workshops/${ws}/tunnel?port=8000`, {});
      assert.ok('status' in anonymous);
      assert.equal(anonymous.status, 401);
      assert.match(anonymous.body, /"code":"UNAUTHENTICATED"/);
      // An older CLI (framed tunnels, or armed spares) is told to update, before anything is connected inside.
      for (const mode of ['framed', 'armed']) {
        const older = await upgradeTunnel(server, `/v1/workshops/${ws}/tunnel?port=8000`, {
          authorization: `Bearer ${server.token}`,
          'atelier-tunnel-mode': mode,
        });
        assert.ok('status' in older, mode);
        assert.equal(older.status, 400, mode);
        assert.match(older.body, /"code":"INVALID_ARGUMENT".*atelier-tunnel-mode: raw.*update it/, mode);
      }
      const closed = await upgradeTunnel(server, `/v1/workshops/${ws}/tunnel?port=8999`, { authorization: `Bearer ${server.token}` });
      assert.ok('status' in closed);
      assert.equal(closed.status, 409);
      assert.match(closed.body, /"code":"PORT_CLOSED"/);

      const source =
        'import socket, time\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n' +
        "s.bind(('127.0.0.1', 8201)); s.listen(1); open('/tmp/source2.ready', 'w').close()\n" +
        "c, _ = s.accept(); c.settimeout(0.2); sent = 0; end = time.time() + 3; chunk = b'z' * 65536\n" +
        'while time.time() < end:\n    try:\n        sent += c.send(chunk)\n    except socket.timeout:\n        pass\n' +
        "open('/tmp/source2.sent', 'w').write(str(sent))\n";
      await server.api('PUT', `/v1/workshops/${ws}/files?path=source2.py`, Buffer.from(source));
      await server.exec(ws, [
        'sh',
        '-c',
        'rm -f /tmp/source2.*; nohup python3 source2.py >/dev/null 2>&1 & while [ ! -e /tmp/source2.ready ]; do sleep 0.05; done',
      ]);
      const up = await upgradeTunnel(server, `/v1/workshops/${ws}/tunnel?port=8201`, { authorization: `Bearer ${server.token}` });
      assert.ok('socket' in up, JSON.stringify(up));
      // The client reads nothing at all.
      up.socket.pause();
      let sent = '';
      for (let i = 0; i < 100 && !sent; i++) {
        await new Promise((r) => setTimeout(r, 100));
        sent = (await server.exec(ws, ['sh', '-c', 'cat /tmp/source2.sent 2>/dev/null || true'])).stdout;
      }
      up.socket.destroy();
      assert.ok(sent !== '', 'the source never finished');
      assert.ok(Number(sent) < 64 << 20, `the source could write ${sent} bytes to a client that reads nothing`);
    });

    it('each tunnel is authorised when it opens: a token revoked a moment ago opens nothing', async () => {
      const made = await server.api<{ id: string; token: string }>('POST', '/v1/tokens', { name: 'tunnel-revoke' });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      const { id, token } = made.body;
      const first = await upgradeTunnel(server, `/v1/workshops/${ws}/tunnel?port=8000`, { authorization: `Bearer ${token}` });
      assert.ok('socket' in first, JSON.stringify(first));
      first.socket.destroy();
      assert.equal((await server.api('DELETE', `/v1/tokens/${id}`)).status, 200);
      const next = await upgradeTunnel(server, `/v1/workshops/${ws}/tunnel?port=8000`, { authorization: `Bearer ${token}` });
      assert.ok('status' in next);
      assert.equal(next.status, 401);
      assert.match(next.body, /"code":"TOKEN_REVOKED"/);
    });

    it('a connection reset inside the workshop is reported as such by port-forward --stdio', async () => {
      const resetter =
        'import socket, struct\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n' +
        "s.bind(('127.0.0.1', 8202)); s.listen(8); open('/tmp/reset.ready', 'w').close()\n" +
        'while True:\n    c, _ = s.accept(); c.recv(10)\n' +
        "    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0)); c.close()\n";
      await server.api('PUT', `/v1/workshops/${ws}/files?path=reset.py`, Buffer.from(resetter));
      await server.exec(ws, [
        'sh',
        '-c',
        'rm -f /tmp/reset.ready; nohup python3 reset.py >/dev/null 2>&1 & while [ ! -e /tmp/reset.ready ]; do sleep 0.05; done',
      ]);
      const r = await server.cli(['port-forward', '--stdio', ws, '8202'], { input: 'hello\n' });
      assert.equal(r.code, 1);
      assert.match(r.stderr, /the connection inside the workshop was reset/);
    });

    it('resumes a suspended workshop first and says so, unless --no-resume', async () => {
      const stop = await server.api('POST', `/v1/workshops/${ws}/stop`);
      assert.equal(stop.status, 200, JSON.stringify(stop.body));
      const refused = await server.cli(['ssh', ws, '--no-resume', '--', 'true']);
      assert.equal(refused.code, 1);
      assert.match(refused.stderr, /is suspended.*WORKSHOP_SUSPENDED/);
      const r = await server.cli(['ssh', ws, '--', 'sh', '-c', 'echo awake']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, new RegExp(`workshop ${ws} was suspended: resumed it`));
      assert.match(r.stdout, /awake/);
      const w = await server.api<{ status: string }>('GET', `/v1/workshops/${ws}`);
      assert.equal(w.body.status, 'Running');
    });
  });

  describe('SSH with the OpenSSH tools', () => {
    const sshConfig = (): string => join(home, 'ssh_config');
    const run = (cmd: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> =>
      new Promise((resolve) => {
        const p = spawn(cmd, args, { env: env(), stdio: ['ignore', 'pipe', 'pipe'], cwd: home });
        let stdout = '';
        let stderr = '';
        p.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
        p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
        p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
      });

    it('config-ssh writes a managed block (idempotent, user lines intact) and --remove takes it out', async () => {
      const mine = 'Host mine\n  User me\n  Port 2222\n';
      writeFileSync(sshConfig(), mine);
      const r = await server.cli(['config-ssh'], { env: env() });
      assert.equal(r.code, 0, r.stderr);
      const first = readFileSync(sshConfig(), 'utf8');
      assert.ok(first.includes(`Host atelier-${ws}\n`));
      assert.ok(first.includes(mine));
      assert.match(first, /ProxyCommand .* port-forward --stdio ws-\w+ 22/);
      assert.match(first, /StrictHostKeyChecking yes/);
      const again = await server.cli(['config-ssh'], { env: env() });
      assert.equal(again.code, 0, again.stderr);
      assert.equal(readFileSync(sshConfig(), 'utf8'), first);
      const removed = await server.cli(['config-ssh', '--remove'], { env: env() });
      assert.equal(removed.code, 0, removed.stderr);
      assert.equal(readFileSync(sshConfig(), 'utf8'), mine);
      assert.equal((await server.cli(['config-ssh'], { env: env() })).code, 0);
    });

    it('ssh runs git status through the ProxyCommand, with the pinned host key and the exit status', async () => {
      const r = await run('ssh', ['-F', sshConfig(), '-o', 'BatchMode=yes', `atelier-${ws}`, 'git status; exit 5']);
      assert.equal(r.code, 5, r.stderr);
      assert.match(r.stdout, /On branch main/);
      // A key that was never registered is refused (public-key authentication only).
      const stranger = join(home, 'stranger');
      await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', stranger]);
      const strangerConfig = join(home, 'stranger_config');
      writeFileSync(strangerConfig, readFileSync(sshConfig(), 'utf8').replace(/IdentityFile .*/g, `IdentityFile ${stranger}`));
      const refused = await run('ssh', ['-F', strangerConfig, '-o', 'BatchMode=yes', `atelier-${ws}`, 'true']);
      assert.equal(refused.code, 255);
      assert.match(refused.stderr, /Permission denied \(publickey\)/);
    });

    it('sftp puts and gets 20 MB with identical checksums', async () => {
      const data = randomBytes(20_000_000);
      writeFileSync(join(home, 'up.bin'), data);
      const batch = join(home, 'batch');
      writeFileSync(batch, 'put up.bin /tmp/up.bin\nget /tmp/up.bin down.bin\n');
      const r = await run('sftp', ['-q', '-F', sshConfig(), '-b', batch, `atelier-${ws}`]);
      assert.equal(r.code, 0, r.stderr);
      const sum = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
      assert.equal(sum(readFileSync(join(home, 'down.bin'))), sum(data));
      const inside = await server.exec(ws, ['sha256sum', '/tmp/up.bin']);
      assert.ok(inside.stdout.startsWith(sum(data)));
    });

    it('atelier code says clearly when the editor is not installed', async () => {
      const r = await server.cli(['code', ws], { env: { ...env(), PATH: '/usr/bin:/bin' } });
      assert.equal(r.code, 1);
      assert.match(r.stderr, /Visual Studio Code's `code` command is not on your PATH/);
      const cursor = await server.cli(['code', ws, '--editor', 'cursor'], { env: { ...env(), PATH: '/usr/bin:/bin' } });
      assert.match(cursor.stderr, /Cursor's `cursor` command is not on your PATH/);
      const bad = await server.cli(['code', ws, '--editor', 'vim'], { env: env() });
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /--editor must be code or cursor/);
    });

    it('an SSH session cut by a server restart ends with a message saying so', async () => {
      const session = spawn('ssh', ['-F', sshConfig(), `atelier-${ws}`, 'echo connected; sleep 120'], { env: env() });
      let out = '';
      let err = '';
      session.stdout.on('data', (c: Buffer) => (out += c.toString()));
      session.stderr.on('data', (c: Buffer) => (err += c.toString()));
      const exited = new Promise<number>((r) => session.on('close', (code) => r(code ?? -1)));
      for (let i = 0; i < 300 && !out.includes('connected'); i++) await new Promise((r) => setTimeout(r, 50));
      assert.match(out, /connected/, err);
      await server.stop();
      try {
        assert.equal(await exited, 255);
        assert.match(err, /the tunnel was cut \(server restarted or network down\)/);
      } finally {
        await server.boot();
      }
      // And the next connection works once the server is back.
      const again = await run('ssh', ['-F', sshConfig(), `atelier-${ws}`, 'echo back']);
      assert.equal(again.code, 0, again.stderr);
      assert.match(again.stdout, /back/);
    });

    it('ssh -L forwards to a server inside the workshop; ssh -t gets a terminal', async () => {
      const local = await freePort();
      const tunnel = spawn('ssh', ['-F', sshConfig(), '-N', '-L', `${local}:127.0.0.1:8000`, `atelier-${ws}`], { env: env() });
      try {
        let page = '';
        for (let i = 0; i < 100 && !page.includes('inside the workshop'); i++) {
          page = await httpGet(local, '/index.html').catch(() => '');
          if (!page) await new Promise((r) => setTimeout(r, 100));
        }
        assert.match(page, /inside the workshop/);
      } finally {
        tunnel.kill();
      }
      const t = await run('ssh', ['-F', sshConfig(), '-tt', `atelier-${ws}`, 'stty size; exit 4']);
      assert.equal(t.code, 4, t.stderr);
      assert.match(t.stdout, /^\d+ \d+/m);
    });
  });

  describe('SSH host keys', () => {
    const query = async <T extends object>(sql: string, params: unknown[] = []): Promise<T[]> => {
      const client = new pg.Client({
        connectionString: `postgresql://atelier@/atelier?host=${encodeURIComponent(join(server.dataDir, 'pgsock'))}`,
      });
      await client.connect();
      try {
        return (await client.query<T>(sql, params)).rows;
      } finally {
        await client.end();
      }
    };

    it('the database no longer notifies grant changes for armed spare tunnels (migration 016 dropped them)', async () => {
      const triggers = await query<{ tgname: string }>(`SELECT tgname FROM pg_trigger WHERE tgname LIKE '%tunnel_grants%'`);
      assert.deepEqual(triggers, []);
      const fns = await query<{ proname: string }>(`SELECT proname FROM pg_proc WHERE proname = 'atelier_tunnel_grants_notify'`);
      assert.deepEqual(fns, []);
      const applied = await query<{ version: string }>(`SELECT version FROM schema_migrations WHERE version LIKE '01%_tunnel_grants.sql'`);
      assert.deepEqual(applied.map((r) => r.version).sort(), ['015_tunnel_grants.sql', '016_drop_tunnel_grants.sql']);
    });

    it('are sealed with the master key, and keys stored in clear by an older server are sealed at start', async () => {
      const hostKey = async (id: string): Promise<string> =>
        (await server.api<{ hostKey: string }>('GET', `/v1/workshops/${id}/ssh`)).body.hostKey;
      const first = await hostKey(ws);
      const [row] = await query<{ private_key: string | null; private_key_sealed: string }>(
        'SELECT private_key, private_key_sealed FROM workshop_host_keys WHERE workshop_id = $1',
        [ws],
      );
      assert.equal(row?.private_key, null);
      assert.doesNotMatch(Buffer.from(row!.private_key_sealed, 'base64url').toString('latin1'), /PRIVATE KEY|ssh-ed25519/);

      // A row as a server before migration 013 wrote it: the private key in clear.
      const old = (await server.createWorkshop({ repo })).id;
      const keyFile = join(home, 'legacy_host_key');
      await new Promise((r) => spawn('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', keyFile]).on('close', r));
      const legacyPublic = readFileSync(`${keyFile}.pub`, 'utf8').trim().split(/\s+/).slice(0, 2).join(' ');
      await query('INSERT INTO workshop_host_keys (workshop_id, private_key, public_key) VALUES ($1, $2, $3)', [
        old,
        readFileSync(keyFile, 'utf8'),
        legacyPublic,
      ]);
      await server.stop();
      await server.boot();
      let left: { private_key: string | null }[] = [];
      for (let i = 0; i < 100; i++) {
        left = await query<{ private_key: string | null }>('SELECT private_key FROM workshop_host_keys WHERE private_key IS NOT NULL');
        if (left.length === 0) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.deepEqual(left, []);
      // The same key pairs: the fingerprints pinned in users' SSH configs stay valid.
      assert.equal(await hostKey(old), legacyPublic);
      assert.equal(await hostKey(ws), first);
      // The endpoint serves with the unsealed key: ssh (StrictHostKeyChecking yes) accepts it.
      assert.equal((await server.cli(['config-ssh'], { env: env() })).code, 0);
      const ssh = await new Promise<{ code: number; out: string }>((resolve) => {
        const p = spawn('ssh', ['-F', join(home, 'ssh_config'), '-o', 'BatchMode=yes', `atelier-${old}`, 'echo sealed-ok'], { env: env() });
        let out = '';
        p.stdout.on('data', (c: Buffer) => (out += c.toString()));
        p.stderr.on('data', (c: Buffer) => (out += c.toString()));
        p.on('close', (code) => resolve({ code: code ?? -1, out }));
      });
      assert.equal(ssh.code, 0, ssh.out);
      assert.match(ssh.out, /sealed-ok/);
      await server.api('DELETE', `/v1/workshops/${old}`);
    });
  });

  describe('agent sessions', () => {
    it('survive the client and reattach with the recent output', async () => {
      const script = 'echo "agent says hello"; read line; echo "agent got $line"; exit 6';
      const r = await server.cli(['run', ws, '--session', 'bot', '-d', '--', 'sh', '-c', script]);
      assert.equal(r.code, 0, r.stderr);
      // A first client comes and goes (killed, as when a laptop closes): the agent goes on.
      const first = start(['attach', ws, '--session', 'bot']);
      await first.waitFor(/agent says hello/);
      first.proc.kill('SIGKILL');
      await first.exited;
      const sessions = await server.api<{ items: { name: string; running: boolean }[] }>('GET', `/v1/workshops/${ws}/sessions`);
      assert.ok(sessions.body.items.some((s) => s.name === 'bot' && s.running));
      // The next one sees the scrollback first, then talks to the same agent.
      const second = start(['attach', ws, '--session', 'bot']);
      await second.waitFor(/agent says hello/);
      second.proc.stdin!.write('ping\n');
      assert.equal(await second.exited, 6);
      assert.match(second.stdout, /agent got ping/);
    });

    it('an attached terminal prints one line when the workshop asks a human for something, with the command that approves it', async () => {
      const r = await server.cli(['run', ws, '--session', 'asks', '-d', '--', 'sh', '-c', 'echo "agent ready"; read line; exit 0']);
      assert.equal(r.code, 0, r.stderr);
      const attached = start(['attach', ws, '--session', 'asks']);
      await attached.waitFor(/agent ready/);
      const filed = await server.api<{ id: string }>('POST', `/v1/workshops/${ws}/approvals`, {
        category: 'ALLOWLIST_EXPANSION',
        payload: { host: 'asked.example', port: 443, justification: 'terminal notice test' },
      });
      assert.equal(filed.status, 201, JSON.stringify(filed.body));
      await attached.waitFor(
        new RegExp(
          `waiting for approval of ALLOWLIST_EXPANSION asked\\.example \\(request ${filed.body.id}\\): run \`atelier approve ${filed.body.id}\``,
        ),
      );
      attached.proc.stdin!.write('done\n');
      assert.equal(await attached.exited, 0, attached.stderr);
    });

    it('runs the agent atelier.yaml names, and says how to configure one when there is none', async () => {
      const none = await server.cli(['run', ws, '-d']);
      assert.equal(none.code, 1);
      assert.match(none.stderr, /no atelier\.yaml saying which agent to run/);
      await server.api('PUT', `/v1/workshops/${ws}/files?path=atelier.yaml`, Buffer.from('agent: claude\n'));
      const preset = await server.cli(['run', ws, '--session', 'claude']);
      assert.equal(preset.code, 127);
      assert.match(preset.stdout, /claude is not installed in this workshop/);
      await server.api(
        'PUT',
        `/v1/workshops/${ws}/files?path=atelier.yaml`,
        Buffer.from('agent:\n  command: [sh, -c, \'echo "custom agent $AGENT_MODE"\']\n  env: [AGENT_MODE=review]\n'),
      );
      const custom = await server.cli(['run', ws, '--session', 'custom']);
      assert.equal(custom.code, 0, custom.stderr);
      assert.match(custom.stdout, /custom agent review/);
    });
  });
});
