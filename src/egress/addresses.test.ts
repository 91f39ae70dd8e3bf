import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AddressRanges, checkAddress } from './addresses.js';
import { parseIp } from './ip.js';

function check(ip: string, ranges: string[] = []) {
  const b = parseIp(ip);
  assert.ok(b, ip);
  return checkAddress(b, new AddressRanges(ranges));
}

describe('checkAddress', () => {
  it('classifies the forbidden IPv4 ranges', () => {
    const cases: Array<[string, string]> = [
      ['127.0.0.1', 'loopback'],
      ['127.255.255.254', 'loopback'],
      ['10.1.2.3', 'private'],
      ['172.16.0.1', 'private'],
      ['172.31.255.255', 'private'],
      ['192.168.0.1', 'private'],
      ['169.254.1.1', 'link-local'],
      ['169.254.169.254', 'metadata'],
      ['100.64.0.1', 'cgnat'],
      ['100.127.255.255', 'cgnat'],
      ['224.0.0.1', 'multicast'],
      ['0.0.0.0', 'unspecified'],
      ['0.1.2.3', 'reserved'],
      ['255.255.255.255', 'broadcast'],
      ['240.0.0.1', 'reserved'],
      ['192.0.2.1', 'reserved'],
      ['198.18.0.1', 'reserved'],
    ];
    for (const [ip, cls] of cases) {
      const v = check(ip);
      assert.equal(v.class, cls, ip);
      assert.equal(v.allowed, false, ip);
    }
    for (const ip of ['8.8.8.8', '172.32.0.1', '100.128.0.1', '1.1.1.1', '11.0.0.1']) assert.equal(check(ip).allowed, true, ip);
  });

  it('classifies IPv6 ranges and the embedded IPv4 of mapped, NAT64, 6to4, Teredo and compatible forms', () => {
    const cases: Array<[string, string, string | undefined]> = [
      ['::1', 'loopback', undefined],
      ['::', 'unspecified', undefined],
      ['fe80::1', 'link-local', undefined],
      ['fc00::1', 'unique-local', undefined],
      ['fd12:3456::1', 'unique-local', undefined],
      ['fd00:ec2::254', 'metadata', undefined],
      ['ff02::1', 'multicast', undefined],
      ['64:ff9b::a9fe:a9fe', 'metadata', '169.254.169.254'],
      ['64:ff9b::10.0.0.1', 'private', '10.0.0.1'],
      ['2002:7f00:1::', 'loopback', '127.0.0.1'],
      ['2002:c0a8:101::1', 'private', '192.168.1.1'],
      ['2001:0:4136:e378:8000:63bf:80ff:fffe', 'loopback', '127.0.0.1'], // Teredo client = ~80ff:fffe
      ['::127.0.0.1', 'loopback', '127.0.0.1'],
      ['::ffff:0:10.0.0.1', 'private', '10.0.0.1'],
      ['2001:db8::1', 'reserved', undefined],
    ];
    for (const [ip, cls, embedded] of cases) {
      const v = check(ip);
      assert.equal(v.class, cls, ip);
      assert.equal(v.embedded, embedded, ip);
      assert.equal(v.allowed, false, ip);
    }
    assert.equal(check('2606:4700::1111').allowed, true);
    assert.equal(check('64:ff9b::808:808').allowed, true); // NAT64 of a public address
  });

  it('dials an IPv4-mapped address as its IPv4 and checks it as such', () => {
    const v = check('::ffff:127.0.0.1');
    assert.deepEqual([v.address, v.class, v.allowed], ['127.0.0.1', 'loopback', false]);
    assert.equal(check('::ffff:127.0.0.2', ['127.0.0.2/32']).allowed, true);
  });

  it('lets admin ranges override, but unlocks metadata only by naming it', () => {
    const v = check('127.0.0.5', ['127.0.0.0/8']);
    assert.deepEqual([v.allowed, v.class, v.allowedBy], [true, 'loopback', '127.0.0.0/8']);
    assert.equal(check('10.20.0.1', ['10.20.0.0/16']).allowed, true);
    assert.equal(check('10.21.0.1', ['10.20.0.0/16']).allowed, false);
    assert.equal(check('169.254.169.254', ['169.254.0.0/16']).allowed, false);
    assert.equal(check('169.254.169.254', ['169.254.169.254']).allowed, true);
    // Embedding forms are not unlocked by the IPv4 range they carry.
    assert.equal(check('64:ff9b::7f00:1', ['127.0.0.0/8']).allowed, false);
    assert.throws(() => new AddressRanges(['10.0.0.0/33']), /allowRanges/);
    assert.throws(() => new AddressRanges(['example.com']), /allowRanges/);
  });
});
