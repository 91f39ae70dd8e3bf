import { connect, createServer } from 'node:net';

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
