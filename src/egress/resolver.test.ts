import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import { createDnsResolver, createHostsResolver, ResolveError } from './resolver.js';

/** A minimal authoritative DNS server on 127.0.0.1 (A/AAAA answers, NXDOMAIN, or silence). */
function startDns(
  zone: Record<string, { A?: number[][]; AAAA?: number[][]; silent?: boolean }>,
): Promise<{ port: number; close: () => void; queries: string[] }> {
  const sock = dgram.createSocket('udp4');
  const queries: string[] = [];
  sock.on('message', (msg, rinfo) => {
    const labels: string[] = [];
    let i = 12;
    while (msg[i]! !== 0) {
      labels.push(msg.subarray(i + 1, i + 1 + msg[i]!).toString('latin1'));
      i += 1 + msg[i]!;
    }
    const qEnd = i + 5;
    const qtype = msg.readUInt16BE(i + 1);
    const name = labels.join('.').toLowerCase();
    queries.push(`${name}/${qtype}`);
    const z = zone[name];
    if (z?.silent) return;
    const records = z === undefined ? [] : qtype === 1 ? (z.A ?? []) : qtype === 28 ? (z.AAAA ?? []) : [];
    const header = Buffer.alloc(12);
    msg.copy(header, 0, 0, 2);
    header.writeUInt16BE(z === undefined ? 0x8183 : 0x8180, 2);
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(records.length, 6);
    const answers = records.map((rdata) => {
      const rr = Buffer.alloc(12 + rdata.length);
      rr.writeUInt16BE(0xc00c, 0);
      rr.writeUInt16BE(qtype, 2);
      rr.writeUInt16BE(1, 4);
      rr.writeUInt32BE(60, 6);
      rr.writeUInt16BE(rdata.length, 10);
      Buffer.from(rdata).copy(rr, 12);
      return rr;
    });
    sock.send(Buffer.concat([header, msg.subarray(12, qEnd), ...answers]), rinfo.port, rinfo.address);
  });
  return new Promise((resolve) =>
    sock.bind(0, '127.0.0.1', () => resolve({ port: sock.address().port, close: () => sock.close(), queries })),
  );
}

describe('createHostsResolver', () => {
  it('answers from the map, calls function entries each time, and says NOT_FOUND otherwise', async () => {
    let n = 0;
    const r = createHostsResolver({
      'a.test': '127.0.0.2',
      'b.test': ['127.0.0.3', '::1'],
      'flip.test': () => [n++ % 2 ? '10.0.0.1' : '127.0.0.2'],
    });
    assert.deepEqual(await r.resolve('a.test'), ['127.0.0.2']);
    assert.deepEqual(await r.resolve('b.test'), ['127.0.0.3', '::1']);
    assert.deepEqual(await r.resolve('flip.test'), ['127.0.0.2']);
    assert.deepEqual(await r.resolve('flip.test'), ['10.0.0.1']);
    await assert.rejects(r.resolve('c.test'), (e: unknown) => e instanceof ResolveError && e.code === 'DNS_NOT_FOUND');
  });
});

describe('createDnsResolver (against a DNS server started by the test)', () => {
  let dns: Awaited<ReturnType<typeof startDns>>;
  before(async () => {
    dns = await startDns({
      'one.test': { A: [[203, 0, 113, 7]], AAAA: [[0x20, 0x01, 0x0d, 0xb8, ...new Array<number>(11).fill(0), 7]] },
      'v4only.test': {
        A: [
          [198, 51, 100, 1],
          [198, 51, 100, 2],
        ],
      },
      'empty.test': {},
      'silent.test': { silent: true },
    });
  });
  after(() => dns.close());

  it('returns every A and AAAA answer', async () => {
    const r = createDnsResolver({ servers: [`127.0.0.1:${dns.port}`], timeoutMs: 2000 });
    assert.deepEqual((await r.resolve('one.test')).sort(), ['2001:db8::7', '203.0.113.7']);
    assert.deepEqual((await r.resolve('v4only.test')).sort(), ['198.51.100.1', '198.51.100.2']);
  });

  it('says DNS_NOT_FOUND for NXDOMAIN and for names without addresses', async () => {
    const r = createDnsResolver({ servers: [`127.0.0.1:${dns.port}`], timeoutMs: 2000 });
    await assert.rejects(r.resolve('nope.test'), (e: unknown) => e instanceof ResolveError && e.code === 'DNS_NOT_FOUND');
    await assert.rejects(r.resolve('empty.test'), (e: unknown) => e instanceof ResolveError && e.code === 'DNS_NOT_FOUND');
  });

  it('gives up with DNS_TIMEOUT when the server never answers', async () => {
    const r = createDnsResolver({ servers: [`127.0.0.1:${dns.port}`], timeoutMs: 300 });
    const t0 = Date.now();
    await assert.rejects(r.resolve('silent.test'), (e: unknown) => e instanceof ResolveError && e.code === 'DNS_TIMEOUT');
    assert.ok(Date.now() - t0 < 2000);
    assert.ok(dns.queries.includes('silent.test/1'));
  });
});
