// The bypass battery: every case is tried over CONNECT, absolute-form HTTP and SOCKS5, and
// must be refused with the expected recorded reason, without the proxy dialing anything.
// Every name resolves to the test origin (unless a case says otherwise), so a rule that let
// a case through would show up as a 200 from the origin: these tests can fail.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import {
  createEgressPolicy,
  type EgressDecision,
  EgressProxy,
  type EgressProtocol,
  type EgressReason,
  ResolveError,
} from '../src/egress/index.js';
import { type Origin, startOrigin, tempDir, viaConnect, viaHttp, viaSocks, type ViaResult } from './egress.helpers.js';

const ORIGIN_IP = '127.0.0.2';
const PROTOCOLS: EgressProtocol[] = ['connect', 'http', 'socks5'];

interface Case {
  name: string;
  /** The host exactly as the client writes it (IPv6 bracketed). */
  host: string;
  /** A port, or the protocol's default (443 for tunnels, 80 for HTTP). */
  port?: number | 'origin';
  reason: EgressReason | Partial<Record<EgressProtocol, EgressReason>>;
  /** The canonical host the decision must record. */
  recorded?: string;
  /** The forbidden address the decision must record, and its class. */
  address?: string;
  cls?: string;
  only?: EgressProtocol[];
}

const long = (n: number) => 'a'.repeat(n);

const CASES: Case[] = [
  // Suffix and prefix confusion.
  { name: 'suffix confusion with a hyphen', host: 'evil-example.com', reason: 'NOT_ALLOWLISTED', recorded: 'evil-example.com' },
  { name: 'allowed name as a prefix label', host: 'example.com.evil.com', reason: 'NOT_ALLOWLISTED', recorded: 'example.com.evil.com' },
  { name: 'no dot boundary', host: 'evilexample.com', reason: 'NOT_ALLOWLISTED' },
  { name: 'exact entry as a prefix label', host: 'allowed.com.evil.com', reason: 'NOT_ALLOWLISTED' },
  { name: 'exact entry as a suffix without dot', host: 'notallowed.com', reason: 'NOT_ALLOWLISTED' },
  { name: 'apex of a wildcard-only entry', host: 'wild.test', reason: 'NOT_ALLOWLISTED' },
  { name: 'mixed case confusion', host: 'EXAMPLE.com.Evil.COM', reason: 'NOT_ALLOWLISTED', recorded: 'example.com.evil.com' },
  { name: 'unknown single-label name', host: 'localhost', reason: 'NOT_ALLOWLISTED' },
  { name: 'unknown domain', host: 'unlisted.org', reason: 'NOT_ALLOWLISTED' },
  { name: 'allowed address range but not allowlisted', host: ORIGIN_IP, reason: 'NOT_ALLOWLISTED', recorded: ORIGIN_IP },
  // Trailing dots and empty labels.
  { name: 'two trailing dots', host: 'example.com..', reason: 'HOST_INVALID' },
  { name: 'leading dot', host: '.example.com', reason: 'HOST_INVALID' },
  { name: 'empty inner label', host: 'api..example.com', reason: 'HOST_INVALID' },
  // Deny wins, and cannot be dodged by spelling.
  { name: 'deny entry in mixed case', host: 'DENIED.Example.COM', reason: 'DENY_LISTED', recorded: 'denied.example.com' },
  { name: 'deny entry with a trailing dot', host: 'secret.example.com.', reason: 'DENY_LISTED', recorded: 'secret.example.com' },
  { name: 'deny wins over an identical allow', host: 'both.test', reason: 'DENY_LISTED' },
  { name: 'deny wildcard', host: 'x.blocked.example.com', reason: 'DENY_LISTED' },
  {
    name: 'deny entry written in punycode-equivalent fullwidth',
    host: 'ｄｅｎｉｅｄ.example.com',
    reason: 'DENY_LISTED',
    recorded: 'denied.example.com',
    only: ['socks5'],
  },
  // IDNA and punycode.
  { name: 'Cyrillic homograph', host: 'аllowed.com', reason: 'NOT_ALLOWLISTED', recorded: 'xn--llowed-2nf.com', only: ['socks5'] },
  { name: 'homograph written as punycode', host: 'xn--llowed-2nf.com', reason: 'NOT_ALLOWLISTED', recorded: 'xn--llowed-2nf.com' },
  { name: 'invalid punycode under an allowed wildcard', host: 'xn--zz.example.com', reason: 'HOST_INVALID' },
  { name: 'non-ASCII bytes on the HTTP request line', host: 'аllowed.com', reason: 'BAD_REQUEST', only: ['connect', 'http'] },
  // Characters and lengths.
  { name: 'underscore under an allowed wildcard', host: 'a_b.example.com', reason: 'HOST_INVALID' },
  { name: 'label of 64 characters under an allowed wildcard', host: `${long(64)}.example.com`, reason: 'HOST_INVALID' },
  {
    name: 'name of 254 characters under an allowed wildcard',
    host: `${long(60)}.${long(60)}.${long(60)}.${long(60)}.example.com`,
    reason: 'HOST_INVALID',
  },
  { name: 'percent-encoded dot', host: 'allowed.com%2e.evil.com', reason: 'HOST_INVALID' },
  { name: 'percent-encoded NUL', host: 'allowed.com%00.evil.com', reason: 'HOST_INVALID' },
  { name: 'raw NUL in a SOCKS5 domain', host: 'allowed.com\u0000.evil.com', reason: 'HOST_INVALID', only: ['socks5'] },
  { name: 'CR LF in a SOCKS5 domain', host: 'allowed.com\r\nHost: evil.com', reason: 'HOST_INVALID', only: ['socks5'] },
  { name: 'a wildcard as a host', host: '*.example.com', reason: 'HOST_INVALID' },
  {
    name: 'user info in the authority',
    host: 'allowed.com@evil.com',
    reason: { connect: 'HOST_INVALID', http: 'BAD_REQUEST', socks5: 'HOST_INVALID' },
  },
  // IPv4 spellings of loopback.
  { name: 'decimal IPv4', host: '2130706433', reason: 'ADDRESS_FORBIDDEN', recorded: '127.0.0.1' },
  { name: 'hex IPv4 parts', host: '0x7f.1', reason: 'ADDRESS_FORBIDDEN', recorded: '127.0.0.1' },
  { name: 'octal IPv4', host: '0177.0.0.1', reason: 'ADDRESS_FORBIDDEN', recorded: '127.0.0.1' },
  { name: 'hex IPv4 in one part', host: '0x7f000001', reason: 'ADDRESS_FORBIDDEN', recorded: '127.0.0.1' },
  { name: 'short IPv4', host: '127.1', reason: 'ADDRESS_FORBIDDEN', recorded: '127.0.0.1' },
  { name: 'unspecified as 0', host: '0', reason: 'ADDRESS_FORBIDDEN', recorded: '0.0.0.0' },
  { name: 'out-of-range IPv4', host: '1.2.3.256', reason: 'HOST_INVALID' },
  // IPv6 forms, including those that embed IPv4.
  { name: 'IPv6 loopback', host: '[::1]', reason: 'ADDRESS_FORBIDDEN', recorded: '::1' },
  { name: 'IPv6 unspecified', host: '[::]', reason: 'ADDRESS_FORBIDDEN' },
  { name: 'IPv4-mapped loopback', host: '[::ffff:127.0.0.1]', reason: 'ADDRESS_FORBIDDEN', address: '127.0.0.1', cls: 'loopback' },
  {
    name: 'IPv4-mapped metadata in hex',
    host: '[::ffff:a9fe:a9fe]',
    reason: 'ADDRESS_FORBIDDEN',
    address: '169.254.169.254',
    cls: 'metadata',
  },
  { name: 'NAT64 metadata', host: '[64:ff9b::a9fe:a9fe]', reason: 'ADDRESS_FORBIDDEN', cls: 'metadata' },
  {
    name: 'NAT64 of the allowed range is still not the allowed range',
    host: `[64:ff9b::${ORIGIN_IP}]`,
    reason: 'ADDRESS_FORBIDDEN',
    cls: 'loopback',
  },
  { name: '6to4 loopback', host: '[2002:7f00:1::]', reason: 'ADDRESS_FORBIDDEN', cls: 'loopback' },
  { name: 'Teredo loopback client', host: '[2001:0:4136:e378:8000:63bf:80ff:fffe]', reason: 'ADDRESS_FORBIDDEN', cls: 'loopback' },
  { name: 'IPv4-compatible loopback', host: '[::127.0.0.1]', reason: 'ADDRESS_FORBIDDEN', cls: 'loopback' },
  { name: 'IPv6 zone id', host: '[fe80::1%25eth0]', reason: 'HOST_INVALID' },
  { name: 'IPv6 link-local', host: '[fe80::1]', reason: 'ADDRESS_FORBIDDEN' },
  { name: 'IPv6 unique-local', host: '[fc00::1]', reason: 'ADDRESS_FORBIDDEN' },
  { name: 'IPv6 metadata (AWS)', host: '[fd00:ec2::254]', reason: 'ADDRESS_FORBIDDEN', cls: 'metadata' },
  // Forbidden IPv4 ranges.
  { name: 'metadata address', host: '169.254.169.254', reason: 'ADDRESS_FORBIDDEN', recorded: '169.254.169.254', cls: 'metadata' },
  { name: 'RFC 1918 literal even when allowlisted', host: '10.0.0.1', reason: 'ADDRESS_FORBIDDEN' },
  { name: 'RFC 1918 192.168', host: '192.168.1.1', reason: 'ADDRESS_FORBIDDEN' },
  { name: 'RFC 1918 172.16', host: '172.16.0.1', reason: 'ADDRESS_FORBIDDEN' },
  { name: 'CGNAT', host: '100.64.0.1', reason: 'ADDRESS_FORBIDDEN', cls: 'cgnat' },
  { name: 'multicast', host: '224.0.0.1', reason: 'ADDRESS_FORBIDDEN' },
  { name: 'broadcast', host: '255.255.255.255', reason: 'ADDRESS_FORBIDDEN' },
  { name: 'reserved 240/4', host: '240.0.0.1', reason: 'ADDRESS_FORBIDDEN' },
  // Names whose answers are forbidden.
  { name: 'DNS rebinding: one answer of two is loopback', host: 'rebind.example.com', reason: 'ADDRESS_FORBIDDEN', address: '127.0.0.1' },
  {
    name: 'name resolving to the metadata address',
    host: 'meta.example.com',
    reason: 'ADDRESS_FORBIDDEN',
    address: '169.254.169.254',
    cls: 'metadata',
  },
  {
    name: 'name resolving to an IPv4-mapped private address',
    host: 'mapped.example.com',
    reason: 'ADDRESS_FORBIDDEN',
    address: '10.0.0.1',
    cls: 'private',
  },
  { name: 'name resolving to NAT64 metadata', host: 'nat64.example.com', reason: 'ADDRESS_FORBIDDEN', cls: 'metadata' },
  { name: 'DNS that never answers', host: 'slow.example.com', reason: 'DNS_TIMEOUT' },
  { name: 'name that does not exist', host: 'nx.example.com', reason: 'DNS_NOT_FOUND' },
  // Ports.
  { name: 'allowed host on a non-default port', host: 'allowed.com', port: 8443, reason: 'PORT_NOT_ALLOWED' },
  { name: 'allowed host on ssh', host: 'allowed.com', port: 22, reason: 'PORT_NOT_ALLOWED' },
  { name: 'CONNECT to port 80 of an allowed host', host: 'allowed.com', port: 80, reason: 'PORT_NOT_ALLOWED', only: ['connect', 'socks5'] },
  { name: 'plain HTTP to port 443 of an allowed host', host: 'allowed.com', port: 443, reason: 'PORT_NOT_ALLOWED', only: ['http'] },
  { name: 'a port entry allows only its port', host: 'ported.test', reason: 'PORT_NOT_ALLOWED' },
  { name: 'port 0', host: 'allowed.com', port: 0, reason: 'BAD_REQUEST' },
  { name: 'port 65536', host: 'allowed.com', port: 65536, reason: 'BAD_REQUEST', only: ['connect', 'http'] },
];

describe('egress bypass battery (CONNECT, absolute-form HTTP, SOCKS5)', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let proxy: EgressProxy;
  let sock: string;
  const origins: Origin[] = [];
  let main: Origin;
  const decisions: EgressDecision[] = [];
  const lookups: string[] = [];

  before(async () => {
    dir = await tempDir();
    main = await startOrigin(ORIGIN_IP);
    origins.push(main);
    // The default ports, when this machine lets us bind them (tests run as root, like CI).
    for (const p of [80, 443]) {
      try {
        origins.push(await startOrigin(ORIGIN_IP, p));
      } catch {
        /* the allowed-on-default-port controls below are skipped */
      }
    }
    const special: Record<string, () => Promise<string[]>> = {
      'rebind.example.com': async () => [ORIGIN_IP, '127.0.0.1'],
      'meta.example.com': async () => ['169.254.169.254'],
      'mapped.example.com': async () => ['::ffff:10.0.0.1'],
      'nat64.example.com': async () => ['64:ff9b::a9fe:a9fe'],
      'slow.example.com': () => new Promise<string[]>(() => {}),
      'nx.example.com': async () => {
        throw new ResolveError('DNS_NOT_FOUND', 'nx.example.com does not exist');
      },
    };
    proxy = new EgressProxy({
      resolver: {
        resolve: async (name) => {
          lookups.push(name);
          return special[name] ? special[name]() : [ORIGIN_IP];
        },
      },
      onDecision: (_ws, d) => decisions.push(d),
      limits: { dnsTimeoutMs: 300, headerTimeoutMs: 2_000 },
    });
    const policy = createEgressPolicy({
      allow: [
        'allowed.com',
        `allowed.com:${main.port}`,
        'example.com',
        '*.example.com',
        '*.wild.test',
        `ported.test:${main.port}`,
        'both.test',
        '10.0.0.1',
      ],
      deny: ['denied.example.com', 'secret.example.com', '*.blocked.example.com', 'both.test'],
      allowRanges: [`${ORIGIN_IP}/32`],
    });
    sock = join(dir.path, 'battery.sock');
    await proxy.listen('ws-battery', sock, policy);
  });

  after(async () => {
    await proxy.closeAll();
    for (const o of origins) await o.close();
    await dir[Symbol.asyncDispose]();
  });

  function portFor(c: Case, protocol: EgressProtocol): number {
    if (c.port === 'origin') return main.port;
    return c.port ?? (protocol === 'http' ? 80 : 443);
  }

  async function attempt(protocol: EgressProtocol, host: string, port: number | undefined): Promise<ViaResult> {
    switch (protocol) {
      case 'connect':
        return viaConnect(sock, port === undefined ? host : `${host}:${port}`);
      case 'http':
        return viaHttp(sock, `http://${host}${port === undefined || port === 80 ? '' : `:${port}`}/`);
      case 'socks5':
        return viaSocks(sock, host, port ?? 443);
    }
  }

  it(`has at least 40 cases (${CASES.length})`, () => {
    assert.ok(CASES.length >= 40);
  });

  for (const protocol of PROTOCOLS) {
    describe(protocol, () => {
      for (const c of CASES) {
        if (c.only && !c.only.includes(protocol)) continue;
        it(`refuses: ${c.name} (${JSON.stringify(c.host)})`, async () => {
          const expected = typeof c.reason === 'string' ? c.reason : c.reason[protocol]!;
          const before = {
            decisions: decisions.length,
            lookups: lookups.length,
            connections: origins.reduce((n, o) => n + o.connections, 0),
          };
          const port = portFor(c, protocol);
          const r = await attempt(protocol, c.host, port);
          assert.equal(r.origin, undefined, `the request reached the origin: ${JSON.stringify(r.origin)}`);
          if (protocol === 'socks5') assert.ok(r.status === 0x02 || r.status === 0x04, `SOCKS5 reply ${r.status}`);
          else {
            assert.ok([400, 403, 502, 504].includes(r.status), `status ${r.status}`);
            assert.equal(r.reason, expected, r.proxyBody);
            assert.match(r.proxyBody, /atelier egress/);
          }
          const fresh = decisions.slice(before.decisions);
          assert.equal(fresh.length, 1, `exactly one decision recorded: ${JSON.stringify(fresh)}`);
          const d = fresh[0]!;
          assert.equal(d.reason, expected, d.message);
          assert.equal(d.allowed, false);
          assert.notEqual(d.outcome, 'allowed');
          if (expected !== 'BAD_REQUEST') assert.equal(d.protocol, protocol);
          if (c.recorded !== undefined) assert.equal(d.host, c.recorded);
          if (c.address !== undefined) assert.equal(d.address, c.address);
          if (c.cls !== undefined) assert.equal(d.addressClass, c.cls);
          if (expected === 'NOT_ALLOWLISTED') assert.equal(d.outcome, 'unknown');
          // Names the lists refuse never reach DNS; nothing refused is ever dialed.
          const resolved =
            ['DNS_TIMEOUT', 'DNS_NOT_FOUND'].includes(expected) || (expected === 'ADDRESS_FORBIDDEN' && d.host.endsWith('.example.com'));
          assert.equal(lookups.length - before.lookups, resolved ? 1 : 0, `lookups: ${lookups.slice(before.lookups).join(', ')}`);
          assert.equal(
            origins.reduce((n, o) => n + o.connections, 0),
            before.connections,
          );
        });
      }
    });
  }

  describe('controls: the same proxy lets allowed requests through', () => {
    for (const protocol of PROTOCOLS) {
      it(`${protocol}: allowed.com on its named port, in odd spellings`, async () => {
        for (const host of ['allowed.com', 'ALLOWED.com.', 'Allowed.COM']) {
          const r = await attempt(protocol, host, main.port);
          assert.equal(r.origin?.status, 200, `${host}: ${r.status} ${r.proxyBody}`);
          const d = decisions.at(-1)!;
          assert.deepEqual(
            [d.allowed, d.reason, d.host, d.address, d.entry],
            [true, 'ALLOW_LISTED', 'allowed.com', ORIGIN_IP, `allowed.com:${main.port}`],
          );
          if (protocol === 'http')
            assert.equal(JSON.parse(r.origin!.body).host, `allowed.com:${main.port}`, 'Host is rewritten to the canonical authority');
        }
      });

      it(`${protocol}: a wildcard subdomain and a port entry`, async () => {
        assert.equal((await attempt(protocol, 'ported.test', main.port)).origin?.status, 200);
        assert.equal(decisions.at(-1)!.entry, `ported.test:${main.port}`);
      });

      it(`${protocol}: allowed.com. on the default port`, async (t) => {
        const defaultPort = protocol === 'http' ? 80 : 443;
        if (!origins.some((o) => o.port === defaultPort)) return t.skip(`cannot bind ${ORIGIN_IP}:${defaultPort} here`);
        const r = await attempt(protocol, 'allowed.com.', defaultPort);
        assert.equal(r.origin?.status, 200, r.proxyBody);
        assert.deepEqual(
          [decisions.at(-1)!.reason, decisions.at(-1)!.host, decisions.at(-1)!.port],
          ['ALLOW_LISTED', 'allowed.com', defaultPort],
        );
        const r2 = await attempt(protocol, 'api.example.com', defaultPort);
        assert.equal(r2.origin?.status, 200);
        if (protocol === 'http') assert.equal(JSON.parse(r2.origin!.body).host, 'api.example.com');
      });
    }
  });

  it('refuses `*`, public-suffix wildcards and bad entries when a policy is loaded', () => {
    for (const entry of ['*', '*.com', '*.co.uk', '*.com.au', '*.github.io', 'a.*.example.com', '*.127.0.0.1']) {
      assert.throws(() => createEgressPolicy({ allow: [entry] }), /egress\.allow/, entry);
    }
  });
});
