/**
 * LLM gateway (issue 22): model requests per second and p99 through the gateway (the broker with
 * its hook: budget check, request body read whole, usage read from a copy of the answer, priced,
 * recorded before the answer's end is sent), beside the same request through a plain injecting
 * binding of the same proxy (the peer: the broker without the hook), in one run. The ledger is
 * in memory here (the server's is one UPDATE…INSERT per request in PostgreSQL): this measures
 * what the hook itself costs.
 *
 * The origin answers `POST /v1/messages` with an Anthropic Messages JSON answer (usage included,
 * content-length framed); origin and proxy each run in a process of their own; CONCURRENCY
 * kept-alive connections from this process, ROUNDS rounds of ROUND_MS alternating the two ways.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
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
const BOUND = 'bound.bench.test';
const GATEWAY = 'gateway.bench.test';

const ORIGIN_JS = `
import https from 'node:https';
import { readFileSync } from 'node:fs';
const BODY = Buffer.from(JSON.stringify({ id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-sonnet-4-5',
  content: [{ type: 'text', text: 'hello from the benchmark origin' }], stop_reason: 'end_turn', usage: { input_tokens: 1200, output_tokens: 80 } }));
const s = https.createServer({ key: readFileSync(process.argv[2]), cert: readFileSync(process.argv[3]), keepAliveTimeout: 120000 }, (req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': BODY.length });
    res.end(BODY);
  });
});
s.listen(0, '127.0.0.1', () => console.log(s.address().port));
`;

const PROXY_JS = `
import { readFileSync } from 'node:fs';
const lib = await import(process.argv[2]);
const [socketPath, caFile, caDir] = process.argv.slice(3);
const port = Number(process.argv[6]);
let spent = 0;
const config = lib.parseGatewayConfig('providers:\\n  - { kind: anthropic, key: TOKEN, baseUrl: "https://${GATEWAY}:' + port + '" }\\n', 'bench');
const gateway = new lib.LlmGateway({
  ...config,
  budget: async () => ({ budgetUsd: 1e9, spentUsd: spent }),
  record: async (_id, r) => { spent += r.costUsd; },
  onError: (_id, err) => console.error(String(err)),
});
const broker = new lib.CredentialBroker({
  authorities: new lib.Authorities(caDir),
  secretValue: async () => 'bench-secret-value',
  upstreamCa: [readFileSync(caFile, 'utf8')],
  hook: gateway,
});
const resolver = lib.createHostsResolver(new Map([['${BOUND}', ['127.0.0.1']], ['${GATEWAY}', ['127.0.0.1']]]));
const proxy = new lib.EgressProxy({ resolver, broker });
const policy = lib.createEgressPolicy({ allow: ['${BOUND}:' + port, '${GATEWAY}:' + port], allowRanges: ['127.0.0.1/32'], askHoldSeconds: 0 });
await proxy.listen('ws-bench', socketPath, policy);
broker.setBindings('ws-bench', [{ host: '${BOUND}', port, header: 'x-api-key', secret: 'TOKEN', prefix: '', suffix: '' }]);
console.log('ready');
`;

const BODY = JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 64, messages: [{ role: 'user', content: 'Say hello.' }] });

/** One kept-alive connection's loop: POST a model request, read the whole answer (by content-length), again, until `until`. */
async function loop(s: tls.TLSSocket, host: string, until: number, lat: number[] | undefined): Promise<number> {
  const req = Buffer.from(
    `POST /v1/messages HTTP/1.1\r\nHost: ${host}\r\nx-api-key: placeholder\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(BODY)}\r\n\r\n${BODY}`,
  );
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
        const head = buf.subarray(0, end).toString('latin1');
        if (!head.startsWith('HTTP/1.1 200')) throw new Error(`answered ${head.split('\r\n')[0]}`);
        const len = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
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

export async function gateway(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`14. LLM gateway: model requests through the metering hook, beside a plain injecting binding (${CONCURRENCY} connections)`);
  const dir = join(server.scratch.dir, 'gateway');
  mkdirSync(join(dir, 'ca'), { recursive: true });
  const certs = makeOriginCertificates(dir, [BOUND, GATEWAY], 'bench origin CA');
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
    const open = async (host: string): Promise<tls.TLSSocket> => {
      const s = await connectThrough(socketPath, `${host}:${port}`);
      // The workshop's CA exists once the first bound CONNECT made it.
      return tlsOver(s, { servername: host, ca: certificatesIn(join(dir, 'ca')) });
    };
    const ways = [
      { name: 'binding', host: BOUND },
      { name: 'gateway', host: GATEWAY },
    ];
    const round = async (host: string, ms: number, lat: number[] | undefined): Promise<number> => {
      const socks = await Promise.all(Array.from({ length: CONCURRENCY }, () => open(host)));
      const t0 = performance.now();
      const counts = await Promise.all(socks.map((s) => loop(s, `${host}:${port}`, t0 + ms, lat)));
      return counts.reduce((a, b) => a + b, 0) / ((performance.now() - t0) / 1000);
    };
    for (const w of ways) await round(w.host, WARMUP_MS, undefined);
    const rates: Record<string, number[]> = { binding: [], gateway: [] };
    const lats: Record<string, number[]> = { binding: [], gateway: [] };
    for (let r = 0; r < ROUNDS; r++)
      for (const w of r % 2 ? [...ways].reverse() : ways) rates[w.name]!.push(await round(w.host, ROUND_MS, lats[w.name]));
    const med = (xs: number[]): number => summarize(xs).p50;
    const result: Record<string, unknown> = {};
    for (const w of ways) {
      const s = summarize(lats[w.name]!);
      const rps = med(rates[w.name]!);
      statLine(
        'atelier',
        `${w.name === 'gateway' ? 'gateway (budget, usage read, priced)' : 'plain injecting binding'}: ${rps.toFixed(0)} req/s`,
        s,
        ['p50', 'p99'],
      );
      result[w.name] = { rps, ...s };
    }
    ratioLine('gateway / plain binding (req/s)', med(rates.gateway!), med(rates.binding!));
    line('  (no goal set by the issue: the figure is what metering costs per request)');
    return result;
  } finally {
    await stopChild(proxy);
    await stopChild(origin);
  }
}
