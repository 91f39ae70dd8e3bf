// Address classification: which IP addresses a workshop may reach. Everything that is not
// plain public unicast is forbidden unless the admin allows a range that contains it.
import { type Cidr, cidrContains, formatIp, formatIPv4, parseCidr } from './ip.js';

export type AddressClass =
  | 'public'
  | 'loopback'
  | 'private'
  | 'link-local'
  | 'metadata'
  | 'cgnat'
  | 'unique-local'
  | 'multicast'
  | 'unspecified'
  | 'broadcast'
  | 'reserved';

export interface AddressVerdict {
  allowed: boolean;
  /** The address as dialed (an IPv4-mapped IPv6 address is dialed as its IPv4). */
  address: string;
  class: AddressClass;
  /** For IPv6 forms that carry an IPv4 address (mapped, NAT64, 6to4, Teredo…), that address. */
  embedded?: string;
  /** The admin range that allowed a non-public address. */
  allowedBy?: string;
}

function range(text: string, cls: AddressClass): [Cidr, AddressClass] {
  const c = parseCidr(text);
  if (c === null) throw new Error(`bad built-in range ${text}`);
  return [c, cls];
}

// Order matters: the first match wins (the metadata addresses sit inside link-local and
// unique-local ranges).
const V4_RANGES: Array<[Cidr, AddressClass]> = [
  range('169.254.169.254/32', 'metadata'), // AWS, GCP, Azure, OpenStack instance metadata
  range('0.0.0.0/32', 'unspecified'),
  range('0.0.0.0/8', 'reserved'), // "this network"
  range('10.0.0.0/8', 'private'),
  range('100.64.0.0/10', 'cgnat'),
  range('127.0.0.0/8', 'loopback'),
  range('169.254.0.0/16', 'link-local'),
  range('172.16.0.0/12', 'private'),
  range('192.0.0.0/24', 'reserved'), // IETF protocol assignments (incl. 192.0.0.192 Oracle metadata)
  range('192.0.2.0/24', 'reserved'), // TEST-NET-1
  range('192.88.99.0/24', 'reserved'), // 6to4 relay anycast
  range('192.168.0.0/16', 'private'),
  range('198.18.0.0/15', 'reserved'), // benchmarking
  range('198.51.100.0/24', 'reserved'), // TEST-NET-2
  range('203.0.113.0/24', 'reserved'), // TEST-NET-3
  range('224.0.0.0/4', 'multicast'),
  range('255.255.255.255/32', 'broadcast'),
  range('240.0.0.0/4', 'reserved'),
];

const V6_RANGES: Array<[Cidr, AddressClass]> = [
  range('fd00:ec2::254/128', 'metadata'), // AWS IMDS over IPv6
  range('::/128', 'unspecified'),
  range('::1/128', 'loopback'),
  range('64:ff9b:1::/48', 'reserved'), // local-use NAT64 (RFC 8215): prefix length unknown, refuse
  range('100::/64', 'reserved'), // discard-only
  range('2001:db8::/32', 'reserved'), // documentation
  range('2001:10::/28', 'reserved'), // ORCHID
  range('2001:20::/28', 'reserved'), // ORCHIDv2
  range('fc00::/7', 'unique-local'),
  range('fe80::/10', 'link-local'),
  range('fec0::/10', 'reserved'), // deprecated site-local
  range('ff00::/8', 'multicast'),
  range('::/8', 'reserved'), // the rest of ::/8 (the embedded forms below are handled first)
];

const V4_MAPPED = parseCidr('::ffff:0:0/96')!;
const V4_TRANSLATED = parseCidr('::ffff:0:0:0/96')!; // SIIT (RFC 2765)
const V4_COMPATIBLE = parseCidr('::/96')!;
const NAT64 = parseCidr('64:ff9b::/96')!;
const SIX_TO_FOUR = parseCidr('2002::/16')!;
const TEREDO = parseCidr('2001::/32')!;

function classifyV4(b: Uint8Array): AddressClass {
  for (const [c, cls] of V4_RANGES) if (cidrContains(c, b)) return cls;
  return 'public';
}

/** The IPv4 addresses an IPv6 address carries, if it is one of the embedding forms. */
function embeddedV4(b: Uint8Array): Uint8Array[] {
  if (cidrContains(V4_MAPPED, b) || cidrContains(V4_TRANSLATED, b) || cidrContains(NAT64, b)) return [b.slice(12, 16)];
  // IPv4-compatible (deprecated): ::a.b.c.d, but not :: and ::1 themselves.
  if (cidrContains(V4_COMPATIBLE, b) && !(b[12] === 0 && b[13] === 0 && b[14] === 0 && (b[15] ?? 0) <= 1)) return [b.slice(12, 16)];
  if (cidrContains(SIX_TO_FOUR, b)) return [b.slice(2, 6)];
  // Teredo: server IPv4 in bytes 4–7, client IPv4 bit-inverted in bytes 12–15. Both are
  // places the packet may end up; the worse of the two counts.
  if (cidrContains(TEREDO, b)) return [b.slice(4, 8), b.slice(12, 16).map((x) => ~x & 0xff)];
  return [];
}

const SEVERITY: Record<AddressClass, number> = {
  public: 0,
  reserved: 1,
  broadcast: 1,
  multicast: 1,
  unspecified: 2,
  cgnat: 2,
  'unique-local': 2,
  private: 3,
  'link-local': 3,
  loopback: 4,
  metadata: 5,
};

/** Classify an address (4 or 16 bytes) without any admin ranges. */
export function classifyAddress(b: Uint8Array): { class: AddressClass; embedded?: string } {
  if (b.length === 4) return { class: classifyV4(b) };
  const inner = embeddedV4(b);
  if (inner.length > 0) {
    let worst: { class: AddressClass; embedded: string } | null = null;
    for (const v4 of inner) {
      const cls = classifyV4(v4);
      if (worst === null || SEVERITY[cls] > SEVERITY[worst.class]) worst = { class: cls, embedded: formatIPv4(v4) };
    }
    return worst!;
  }
  for (const [c, cls] of V6_RANGES) if (cidrContains(c, b)) return { class: cls };
  return { class: 'public' };
}

/** A set of admin-allowed ranges (`allowRanges`), parsed once when a policy is loaded. */
export class AddressRanges {
  readonly ranges: readonly Cidr[];

  constructor(texts: readonly string[]) {
    const out: Cidr[] = [];
    for (const t of texts) {
      const c = parseCidr(t.trim());
      if (c === null) throw new Error(`allowRanges: ${JSON.stringify(t)} is not an address or CIDR range`);
      out.push(c);
    }
    this.ranges = out;
  }

  /** The range containing `b`; a metadata address is only unlocked by a range naming it alone. */
  match(b: Uint8Array, cls: AddressClass): Cidr | undefined {
    const single = b.length * 8;
    return this.ranges.find((c) => cidrContains(c, b) && (cls !== 'metadata' || c.prefix === single));
  }
}

/**
 * Decide whether an address may be dialed. Admin ranges apply to the address as dialed: an
 * IPv4-mapped IPv6 address is the IPv4 address on the wire, so it is checked (and dialed) as
 * that IPv4; the other embedding forms (NAT64, 6to4, Teredo) are only unlocked by an IPv6 range.
 */
export function checkAddress(b: Uint8Array, allow?: AddressRanges): AddressVerdict {
  const dialed = b.length === 16 && cidrContains(V4_MAPPED, b) ? b.slice(12, 16) : b;
  const { class: cls, embedded } = classifyAddress(dialed);
  const verdict: AddressVerdict = { allowed: cls === 'public', address: formatIp(dialed), class: cls };
  if (embedded !== undefined) verdict.embedded = embedded;
  if (!verdict.allowed && allow) {
    const by = allow.match(dialed, cls);
    if (by) {
      verdict.allowed = true;
      verdict.allowedBy = by.text;
    }
  }
  return verdict;
}
