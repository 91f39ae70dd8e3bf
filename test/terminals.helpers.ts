import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { type CliProcess, TestServer, makeRepo } from './helpers/server.js';

// Shared by test/terminals.test.ts and test/terminals.forward.test.ts (one server each, so that
// each file stays well within the runner's per-file timeout on a busy machine).

/** A free TCP port on loopback (for a server that must come back on the same address). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

/** An HTTP GET through a local port, with a plain socket (no connection reuse). */
export function httpGet(port: number, path = '/'): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.end(`GET ${path} HTTP/1.0\r\nHost: x\r\n\r\n`));
    let data = '';
    s.on('data', (c: Buffer) => (data += c.toString()));
    s.on('end', () => resolve(data));
    s.on('error', reject);
    s.setTimeout(20_000, () => s.destroy(new Error('timeout')));
  });
}

/**
 * A server on a fixed loopback port (it comes back on the same address after a restart), a
 * workshop with an HTTP server on its own loopback (port 8000, serving app/), and an SSH home.
 */
export async function startTerminalsWorkshop(): Promise<{ server: TestServer; repo: string; ws: string; home: string }> {
  const server = await TestServer.start({ args: ['--listen', `127.0.0.1:${await freePort()}`] });
  const repo = makeRepo({ 'README.md': '# terminals\n', 'app/index.html': '<h1>inside the workshop</h1>\n' });
  const home = mkdtempSync('/tmp/atelier-ssh-home-');
  try {
    const ws = (await server.createWorkshop({ repo })).id;
    await server.exec(ws, ['sh', '-c', 'cd app && nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & sleep 0.1']);
    for (let i = 0; i < 100; i++) {
      const r = await server.exec(ws, ['python3', '-c', 'import socket; socket.create_connection(("127.0.0.1", 8000)).close()']);
      if (r.exitCode === 0) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    return { server, repo, ws, home };
  } catch (err) {
    await stopTerminalsWorkshop({ server, repo, home }, []);
    throw err;
  }
}

/** Stops what startTerminalsWorkshop started, and the CLI processes a test left running. */
export async function stopTerminalsWorkshop(
  f: { server?: TestServer | undefined; repo?: string | undefined; home?: string | undefined },
  procs: CliProcess[],
): Promise<void> {
  for (const p of procs) await p.stop();
  await f.server?.dispose();
  if (f.repo) rmSync(f.repo, { recursive: true, force: true });
  if (f.home) rmSync(f.home, { recursive: true, force: true });
}
