import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { boundTarget, hostFor, parseAbsolute, splitAuthority, validPort } from './authority.js';

describe('splitAuthority', () => {
  it('splits names, IPv4 and bracketed IPv6, with or without a port', () => {
    assert.deepEqual(splitAuthority('example.com:8443'), { host: 'example.com', port: 8443 });
    assert.deepEqual(splitAuthority('example.com'), { host: 'example.com', port: undefined });
    assert.deepEqual(splitAuthority('example.com:'), { host: 'example.com', port: undefined });
    assert.deepEqual(splitAuthority('10.1.2.3:80'), { host: '10.1.2.3', port: 80 });
    assert.deepEqual(splitAuthority('[2001:db8::1]:443'), { host: '[2001:db8::1]', port: 443 });
    assert.deepEqual(splitAuthority('[::1]'), { host: '[::1]', port: undefined });
  });

  it('refuses unbracketed IPv6 and junk after a bracket, and marks a malformed port NaN', () => {
    assert.equal(splitAuthority('2001:db8::1'), null);
    assert.equal(splitAuthority('[::1'), null);
    assert.equal(splitAuthority('[::1]x'), null);
    assert.ok(Number.isNaN(splitAuthority('example.com:80a')!.port));
    assert.ok(Number.isNaN(splitAuthority('example.com:123456')!.port));
    assert.ok(Number.isNaN(splitAuthority('example.com:-1')!.port));
  });
});

describe('parseAbsolute', () => {
  it('takes an absolute http:// URL apart, defaulting the port to 80 and the path to /', () => {
    assert.deepEqual(parseAbsolute('http://example.com/a?b'), { authority: 'example.com', host: 'example.com', port: 80, path: '/a?b' });
    assert.deepEqual(parseAbsolute('HTTP://Example.com:8080'), {
      authority: 'Example.com:8080',
      host: 'Example.com',
      port: 8080,
      path: '/',
    });
    assert.deepEqual(parseAbsolute('http://example.com?q=1'), { authority: 'example.com', host: 'example.com', port: 80, path: '/?q=1' });
    assert.deepEqual(parseAbsolute('http://[::1]:81/x'), { authority: '[::1]:81', host: '[::1]', port: 81, path: '/x' });
  });

  it('refuses user info, other schemes, origin-form and a fragment where the path should be', () => {
    assert.equal(parseAbsolute('http://allowed.com@evil.com/'), null);
    assert.equal(parseAbsolute('https://example.com/'), null);
    assert.equal(parseAbsolute('/path'), null);
    assert.equal(parseAbsolute('http://example.com#frag'), null);
    assert.equal(parseAbsolute('http://2001:db8::1/'), null);
  });
});

describe('validPort, boundTarget, hostFor', () => {
  it('accepts ports 1–65535 only', () => {
    for (const p of [1, 80, 65535]) assert.equal(validPort(p), true, String(p));
    for (const p of [0, 65536, -1, 1.5, NaN]) assert.equal(validPort(p), false, String(p));
  });

  it('keeps short printable targets as written and bounds and escapes anything else', () => {
    assert.equal(boundTarget('example.com:443'), 'example.com:443');
    const odd = boundTarget('a\r\nHost: evil');
    assert.doesNotMatch(odd, /[\r\n]/);
    assert.ok(boundTarget('x'.repeat(5000)).length < 400);
  });

  it('brackets IPv6 hosts only', () => {
    assert.equal(hostFor('2001:db8::1'), '[2001:db8::1]');
    assert.equal(hostFor('example.com'), 'example.com');
    assert.equal(hostFor('10.1.2.3'), '10.1.2.3');
  });
});
