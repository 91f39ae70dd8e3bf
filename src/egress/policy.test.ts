import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AtelierError } from '../core/index.js';
import { canonicalizeHost } from './canonical.js';
import { createEgressPolicy, type EgressPolicy, type EgressProtocol } from './policy.js';

function judge(p: EgressPolicy, host: string, port: number, protocol: EgressProtocol = 'connect'): string {
  const h = canonicalizeHost(host);
  assert.notEqual(h.kind, 'refused');
  if (h.kind === 'refused') return 'refused';
  const o = p.evaluate(h, port, protocol);
  return o.outcome === 'deny' ? o.reason : o.outcome;
}

describe('EgressPolicy', () => {
  const p = createEgressPolicy({
    allow: [
      'example.com',
      '*.example.com',
      'registry.npmjs.org',
      'git.example.org:22',
      '*.ports.test:8443',
      '10.1.2.3',
      '[2001:db8::1]:8080',
      'both.test',
    ],
    deny: ['secret.example.com', '*.blocked.example.com', 'both.test', 'example.com:8080'],
  });

  it('matches wildcards only on a dot boundary, and the apex only by its own entry', () => {
    assert.equal(judge(p, 'example.com', 443), 'allow');
    assert.equal(judge(p, 'api.example.com', 443), 'allow');
    assert.equal(judge(p, 'a.b.example.com', 443), 'allow');
    assert.equal(judge(p, 'evil-example.com', 443), 'unknown');
    assert.equal(judge(p, 'evilexample.com', 443), 'unknown');
    assert.equal(judge(p, 'example.com.evil.com', 443), 'unknown');
    assert.equal(judge(p, 'ports.test', 8443), 'unknown');
    assert.equal(judge(p, 'x.ports.test', 8443), 'allow');
  });

  it('uses 443 for tunnels and 80 for plain HTTP unless an entry names the port', () => {
    assert.equal(judge(p, 'example.com', 443, 'connect'), 'allow');
    assert.equal(judge(p, 'example.com', 443, 'socks5'), 'allow');
    assert.equal(judge(p, 'example.com', 80, 'connect'), 'PORT_NOT_ALLOWED');
    assert.equal(judge(p, 'example.com', 80, 'http'), 'allow');
    assert.equal(judge(p, 'example.com', 443, 'http'), 'PORT_NOT_ALLOWED');
    assert.equal(judge(p, 'git.example.org', 22), 'allow');
    assert.equal(judge(p, 'git.example.org', 443), 'PORT_NOT_ALLOWED');
    assert.equal(judge(p, 'x.ports.test', 443), 'PORT_NOT_ALLOWED');
    assert.equal(judge(p, '[2001:db8::1]', 8080), 'allow');
    assert.equal(judge(p, '10.1.2.3', 443), 'allow');
  });

  it('lets deny win over allow, per port when the deny entry names one', () => {
    assert.equal(judge(p, 'both.test', 443), 'DENY_LISTED');
    assert.equal(judge(p, 'secret.example.com', 443), 'DENY_LISTED');
    assert.equal(judge(p, 'x.blocked.example.com', 443), 'DENY_LISTED');
    assert.equal(judge(p, 'blocked.example.com', 443), 'allow'); // apex of a deny wildcard is its own entry
    assert.equal(judge(p, 'example.com', 8080, 'http'), 'DENY_LISTED');
  });

  it('refuses dangerous entries when the policy is loaded, naming the entry', () => {
    const bad = [
      '*',
      '*.com',
      '*.co.uk',
      '*.github.io',
      '*.internal',
      'a.*.com',
      '*example.com',
      '*.*.example.com',
      '*.10.0.0.1',
      'a_b.com',
      'host:0',
      'host:65536',
      'host:',
      'host:http',
      'exa mple.com',
      '[fe80::1%25eth0]',
    ];
    for (const entry of bad) {
      assert.throws(
        () => createEgressPolicy({ allow: [entry] }),
        (err: unknown) => err instanceof AtelierError && err.code === 'INVALID_ARGUMENT' && err.details?.entry === entry,
        entry,
      );
    }
    assert.throws(() => createEgressPolicy({ allow: [], allowRanges: ['nope'] }), /allowRanges/);
    // Deny entries may be broad.
    assert.equal(judge(createEgressPolicy({ allow: ['a.com'], deny: ['*.com'] }), 'a.com', 443), 'DENY_LISTED');
  });

  it('canonicalises entries the same way as requests', () => {
    const q = createEgressPolicy({ allow: ['Exämple.COM.', '*.Example.ORG'] });
    assert.equal(judge(q, 'xn--exmple-cua.com', 443), 'allow');
    assert.equal(judge(q, 'WWW.example.org.', 443), 'allow');
  });
});
