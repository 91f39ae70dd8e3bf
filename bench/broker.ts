/**
 * 12. Credential broker (issue 22): HTTPS requests per second and p99 through a binding that
 * injects a header (the proxy terminates TLS and opens its own to the origin), beside the same
 * origin through a plain CONNECT tunnel of the same proxy (end-to-end TLS), and beside a direct
 * TLS connection, in one run. Goal: the binding at least 0.5× the tunnel's requests per second.
 *
 * The origin (node:https, keep-alive, a small fixed answer) and the proxy (src/egress as built in
 * dist/, on a unix socket as a workshop's listener is served) each run in a process of their
 * own; the load comes from this process: CONCURRENCY kept-alive connections, each sending its
 * next GET as soon as the previous answer is in, ROUNDS rounds of ROUND_MS interleaved across
 * the three ways (a busy moment falls on all of them). Requests/s is the median of the rounds;
 * latencies are pooled. Certificates are made here with openssl.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type tls from 'node:tls';
import {
  heading,
  line,
  ratioLine,
  REPO_ROOT,
  certificatesIn,
  connectThrough,
  startScript,
  statLine,
  stopChild,
  tlsOver,
  summarize,
  type BenchServer,
} from './lib.js';
import { makeOriginCertificates } from '../test/helpers/tls.js';

const CONCURRENCY = 8;
const ROUNDS = 3;
const ROUND_MS = 2000;
const WARMUP_MS = 500;
const GOAL_OF_TUNNEL = 0.5;
const BOUND = 'bound.bench.test';
const PLAIN = 'plain.bench.test';

const ORIGIN_JS = `
import https from 'node:https';
import { readFileSync } from 'node:fs';
const BODY = Buffer.from('hello from the benchmark origin\\n');
const s = https.createServer({ key: readFileSync(process.argv[2]), cert: readFileSync(process.argv[3]), keepAliveTimeout: 120000 }, (req, res) => {
  req.resume();
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length, 'x-saw-auth': req.headers.authorization ? 'yes' : 'no' });
  res.end(BODY);
});
s.listen(0, '127.0.0.1', () => console.log(s.address().port));
`;

const PROXY_JS = `
import { readFileSync } from 'node:fs';
const lib = await import(process.argv[2]);
const [socketPath, caFile, caDir] = process.argv.slice(3);
const broker = new lib.CredentialBroker({
  authorities: new lib.Authorities(caDir),
  secretValue: async () => 'bench-secret-value',
  upstreamCa: [readFileSync(caFile, 'utf8')],
});
const resolver = lib.createHostsResolver(new Map([['${BOUND}', ['127.0.0.1']], ['${PLAIN}', ['127.0.0.1']]]));
const proxy = new lib.EgressProxy({ resolver, broker });
const port = Number(process.argv[6]);
const policy = lib.createEgressPolicy({ allow: ['${BOUND}:' + port, '${PLAIN}:' + port], allowRanges: ['127.0.0.1/32'], askHoldSeconds: 0 });
await proxy.listen('ws-bench', socketPath, policy);
broker.setBindings('ws-bench', [{ host: '${BOUND}', port, header: 'Authorization', secret: 'TOKEN', prefix: 'Bearer ', suffix: '' }]);
console.log('ready');
`;

type Way = { name: string; open: () => Promise<tls.TLSSocket> };

/** One kept-alive connection's loop: GET, read the whole answer (by content-length), again, until `until`. */
async function loop(s: tls.TLSSocket, host: string, until: number, lat: number[] | undefined): Promise<number> {
  const req = Buffer.from(`GET /x HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer agent-own\r\n\r\n`);
  let buf: Buffer = Buffer.alloc(0);
  let waiting: (() => void) | undefined;
  s.on('data', (c: Buffer) => {
    buf = buf.length ? Buffer.concat([buf, c]) : c;
    waiting?.();
  });
  let n = 0;
  while (performance.now() < until) {
    const t0 = performance.now();
    s.write(req);
    for (;;) {
      const end = buf.indexOf('\r\n\r\n');
      if (end >= 0) {
        const len = Number(/content-length: (\d+)/i.exec(buf.subarray(0, end).toString('latin1'))?.[1] ?? 0);
        if (buf.length >= end + 4 + len) {
          buf = buf.subarray(end + 4 + len);
          break;
        }
      }
      if (s.destroyed) throw new Error('connection closed');
      await new Promise<void>((r) => (waiting = r));
    }
    lat?.push(performance.now() - t0);
    n++;
  }
  s.destroy();
  return n;
}

async function round(way: Way, host: string, ms: number, lat: number[] | undefined): Promise<number> {
  const socks = await Promise.all(Array.from({ length: CONCURRENCY }, () => way.open()));
  const t0 = performance.now();
  const counts = await Promise.all(socks.map((s) => loop(s, host, t0 + ms, lat)));
  return counts.reduce((a, b) => a + b, 0) / ((performance.now() - t0) / 1000);
}

export async function broker(server: BenchServer): Promise<Record<string, unknown>> {
  heading(
    `12. credential broker: HTTPS keep-alive through an injecting binding (${CONCURRENCY} connections; goal >= ${GOAL_OF_TUNNEL}x the plain tunnel's requests/s)`,
  );
  const dir = join(server.scratch.dir, 'broker');
  mkdirSync(join(dir, 'ca'), { recursive: true });
  const certs = makeOriginCertificates(dir, [BOUND, PLAIN], 'bench origin CA');
  writeFileSync(join(dir, 'origin.mjs'), ORIGIN_JS);
  writeFileSync(join(dir, 'proxy.mjs'), PROXY_JS);
  let origin: ChildProcess | undefined;
  let proxy: ChildProcess | undefined;
  try {
    const o = startScript(join(dir, 'origin.mjs'), [certs.key, certs.cert]);
    origin = o.child;
    const port = Number(await o.first);
    const socketPath = join(dir, 'proxy.sock');
    const p = startScript(join(dir, 'proxy.mjs'), [
      join(REPO_ROOT, 'dist/egress/index.js'),
      socketPath,
      certs.ca,
      join(dir, 'ca'),
      String(port),
    ]);
    proxy = p.child;
    await p.first;
    const originCa = readFileSync(certs.ca);
    const workshopCa = certificatesIn(join(dir, 'ca'));
    const ways: Way[] = [
      { name: 'direct', open: () => tlsOver(undefined, { host: '127.0.0.1', port, servername: PLAIN, ca: originCa }) },
      {
        name: 'tunnel',
        open: async () => tlsOver(await connectThrough(socketPath, `${PLAIN}:${port}`), { servername: PLAIN, ca: originCa }),
      },
      {
        name: 'broker',
        open: async () => {
          const s = await connectThrough(socketPath, `${BOUND}:${port}`);
          // The workshop's CA exists once the first bound CONNECT made it.
          const ca = workshopCa.length > 0 ? workshopCa : certificatesIn(join(dir, 'ca'));
          return tlsOver(s, { servername: BOUND, ca });
        },
      },
    ];
    const hostOf = (w: Way): string => `${w.name === 'broker' ? BOUND : PLAIN}:${port}`;
    for (const w of ways) await round(w, hostOf(w), WARMUP_MS, undefined);
    const rates: Record<string, number[]> = { direct: [], tunnel: [], broker: [] };
    const lats: Record<string, number[]> = { direct: [], tunnel: [], broker: [] };
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 ? [...ways].reverse() : ways;
      for (const w of order) rates[w.name]!.push(await round(w, hostOf(w), ROUND_MS, lats[w.name]));
    }
    const med = (xs: number[]): number => summarize(xs).p50;
    const result: Record<string, unknown> = {};
    for (const w of ways) {
      const s = summarize(lats[w.name]!);
      const rps = med(rates[w.name]!);
      statLine(
        w.name === 'broker' ? 'atelier' : w.name === 'tunnel' ? 'atelier' : 'direct',
        `${w.name === 'broker' ? 'binding (TLS ended, header set, new TLS)' : w.name === 'tunnel' ? 'plain CONNECT tunnel' : 'direct TLS connection'}: ${rps.toFixed(0)} req/s`,
        s,
        ['p50', 'p99'],
      );
      result[w.name] = { rps, ...s };
    }
    const b = med(rates.broker!);
    const t = med(rates.tunnel!);
    ratioLine('binding / tunnel (req/s)', b, t);
    ratioLine('binding / direct (req/s)', b, med(rates.direct!));
    line(
      `  goal: binding >= ${GOAL_OF_TUNNEL}x the tunnel's req/s -> ${b >= GOAL_OF_TUNNEL * t ? 'MET' : 'NOT MET'} (${(b / t).toFixed(2)}x)`,
    );
    return result;
  } finally {
    await stopChild(proxy);
    await stopChild(origin);
  }
}
