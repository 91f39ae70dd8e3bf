import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { canonicalizeHost } from './canonical.js';

function value(raw: string): string {
  const h = canonicalizeHost(raw);
  assert.notEqual(h.kind, 'refused', `${JSON.stringify(raw)} was refused: ${JSON.stringify(h)}`);
  return `${h.kind}:${(h as { value: string }).value}`;
}

function refusal(raw: string): string {
  const h = canonicalizeHost(raw);
  assert.equal(h.kind, 'refused', `${JSON.stringify(raw)} was accepted as ${JSON.stringify(h)}`);
  return (h as { reason: string }).reason;
}

describe('canonicalizeHost', () => {
  it('lowercases names and strips exactly one trailing dot', () => {
    assert.equal(value('Example.COM'), 'name:example.com');
    assert.equal(value('example.com.'), 'name:example.com');
    assert.equal(refusal('example.com..'), 'HOST_EMPTY_LABEL');
    assert.equal(refusal('.example.com'), 'HOST_EMPTY_LABEL');
    assert.equal(refusal('a..b.com'), 'HOST_EMPTY_LABEL');
    assert.equal(refusal('.'), 'HOST_EMPTY_LABEL');
    assert.equal(refusal(''), 'HOST_EMPTY');
  });

  it('turns internationalised names into punycode and validates punycode labels', () => {
    assert.equal(value('exämple.com'), 'name:xn--exmple-cua.com');
    assert.equal(value('XN--EXMPLE-CUA.com'), 'name:xn--exmple-cua.com');
    assert.equal(value('ｅｘａｍｐｌｅ.com'), 'name:example.com'); // fullwidth letters
    assert.equal(value('example。com'), 'name:example.com'); // ideographic full stop
    assert.equal(value('аllowed.com'), 'name:xn--llowed-2nf.com'); // Cyrillic а: a different name
    assert.equal(refusal('xn--zz.com'), 'HOST_IDNA_INVALID');
    assert.equal(refusal('evil.com／.allowed.com'), 'HOST_IDNA_INVALID'); // fullwidth solidus
  });

  it('reads every inet_aton spelling of an IPv4 address', () => {
    for (const s of [
      '127.0.0.1',
      '2130706433',
      '0x7f000001',
      '0x7f.1',
      '0177.0.0.1',
      '127.1',
      '127.0.1',
      '0x7F.0.0.01',
      '１２７.０.０.１',
      '127.0.0.1.',
    ]) {
      assert.equal(value(s), 'ipv4:127.0.0.1', s);
    }
    assert.equal(value('0'), 'ipv4:0.0.0.0');
    assert.equal(refusal('1.2.3.256'), 'HOST_INVALID_IPV4');
    assert.equal(refusal('4294967296'), 'HOST_INVALID_IPV4');
    assert.equal(refusal('1.2.3.4.5'), 'HOST_INVALID_IPV4');
    assert.equal(refusal('08.1.1.1'), 'HOST_INVALID_IPV4'); // 08 is neither octal nor decimal
    assert.equal(refusal('example.123'), 'HOST_INVALID_IPV4'); // a numeric last label is never a name
    assert.equal(value('1.2.3.example'), 'name:1.2.3.example');
  });

  it('normalises IPv6 literals, bracketed or not, and refuses zone ids', () => {
    assert.equal(value('[::1]'), 'ipv6:::1');
    assert.equal(value('::1'), 'ipv6:::1');
    assert.equal(value('[0:0:0:0:0:0:0:1]'), 'ipv6:::1');
    assert.equal(value('[2001:DB8:0:0:1:0:0:1]'), 'ipv6:2001:db8::1:0:0:1');
    assert.equal(value('[::ffff:127.0.0.1]'), 'ipv6:::ffff:7f00:1');
    assert.equal(value('[1:2:3:4:5:6:7::]'), 'ipv6:1:2:3:4:5:6:7:0');
    assert.equal(refusal('[fe80::1%25eth0]'), 'HOST_ZONE_ID');
    assert.equal(refusal('fe80::1%eth0'), 'HOST_ZONE_ID');
    assert.equal(refusal('[::1'), 'HOST_INVALID_IPV6');
    assert.equal(refusal('[1:2:3:4:5:6:7:8:9]'), 'HOST_INVALID_IPV6');
    assert.equal(refusal('[1::2::3]'), 'HOST_INVALID_IPV6');
    assert.equal(refusal('[::12345]'), 'HOST_INVALID_IPV6');
  });

  it('refuses control characters, percent, underscores and other punctuation', () => {
    assert.equal(refusal('allowed.com\u0000.evil.com'), 'HOST_CONTROL_CHAR');
    assert.equal(refusal('allowed.com\r\nx'), 'HOST_CONTROL_CHAR');
    assert.equal(refusal('allowed.com\u0085'), 'HOST_CONTROL_CHAR');
    assert.equal(refusal('a b.com'), 'HOST_CONTROL_CHAR');
    assert.equal(refusal('allowed.com%2e.evil.com'), 'HOST_PERCENT');
    for (const s of ['a_b.com', '*.example.com', 'allowed.com@evil.com', 'a/b.com', 'a\\b.com', 'a,b.com']) {
      assert.equal(refusal(s), 'HOST_INVALID_CHAR', s);
    }
  });

  it('refuses over-long labels and names, and labels with edge hyphens', () => {
    assert.equal(value(`${'a'.repeat(63)}.com`), `name:${'a'.repeat(63)}.com`);
    assert.equal(refusal(`${'a'.repeat(64)}.com`), 'HOST_LABEL_TOO_LONG');
    const name253 = `${'a'.repeat(61)}.${'b'.repeat(61)}.${'c'.repeat(61)}.${'d'.repeat(61)}.abcde`;
    assert.equal(name253.length, 253);
    assert.equal(value(name253), `name:${name253}`);
    assert.equal(value(`${name253}.`), `name:${name253}`);
    assert.equal(refusal(`${name253}c`), 'HOST_TOO_LONG');
    assert.equal(refusal('-a.com'), 'HOST_HYPHEN');
    assert.equal(refusal('a-.com'), 'HOST_HYPHEN');
    assert.equal(value('a-b.com'), 'name:a-b.com');
  });
});
