// Byte-level IP parsing and formatting shared by canonicalisation, classification and
// policy loading. Addresses are Uint8Array of length 4 (IPv4) or 16 (IPv6).

/** Strict dotted-quad IPv4 (`a.b.c.d`, decimal, no leading zeros): the form resolvers answer with. */
export function parseIPv4Strict(s: string): Uint8Array | null {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const p = parts[i]!;
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) return null;
    const n = Number(p);
    if (n > 255) return null;
    out[i] = n;
  }
  return out;
}

/**
 * IPv4 in every form `inet_aton(3)` (and the WHATWG URL host parser) accepts: one to four
 * parts, each decimal, `0x` hex or `0`-prefixed octal; the last part fills the remaining
 * bytes (`127.1` = 127.0.0.1, `2130706433` = 127.0.0.1, `0x7f.1`, `0177.0.0.1`).
 * Returns null when the text is not such a number, or is out of range.
 */
export function parseInetAton(s: string): Uint8Array | null {
  const parts = s.split('.');
  if (parts.length < 1 || parts.length > 4) return null;
  const nums: number[] = [];
  for (const p of parts) {
    let n: number;
    if (/^0x[0-9a-f]*$/i.test(p)) n = p.length === 2 ? 0 : parseInt(p.slice(2), 16);
    else if (/^0[0-7]+$/.test(p)) n = parseInt(p.slice(1), 8);
    else if (/^(0|[1-9][0-9]*)$/.test(p)) n = Number(p);
    else return null;
    // Long digit strings overflow to imprecise floats: anything past 2^32 is out of range anyway.
    if (!Number.isSafeInteger(n) || p.length > 40) return null;
    nums.push(n);
  }
  const last = nums.pop()!;
  for (const n of nums) if (n > 255) return null;
  if (last >= 256 ** (4 - nums.length)) return null;
  const out = new Uint8Array(4);
  nums.forEach((n, i) => (out[i] = n));
  let rest = last;
  for (let i = 3; i >= nums.length; i--) {
    out[i] = rest & 0xff;
    rest = Math.floor(rest / 256);
  }
  return out;
}

/** IPv6 text (no brackets, no zone id) to 16 bytes; accepts `::` once and a dotted-quad tail. */
export function parseIPv6(s: string): Uint8Array | null {
  if (s.length === 0 || s.length > 45) return null;
  let head = s;
  let v4: Uint8Array | null = null;
  const lastColon = s.lastIndexOf(':');
  if (lastColon >= 0 && s.indexOf('.', lastColon) > lastColon) {
    v4 = parseIPv4Strict(s.slice(lastColon + 1));
    if (v4 === null) return null;
    // `::1.2.3.4` and `a::1.2.3.4` keep their `::`; `a:b:c:d:e:f:1.2.3.4` drops the separator.
    head = s[lastColon - 1] === ':' ? s.slice(0, lastColon + 1) : s.slice(0, lastColon);
  }
  const groupsWanted = v4 ? 6 : 8;
  const dbl = head.indexOf('::');
  if (dbl !== head.lastIndexOf('::')) return null;
  const parseGroups = (t: string): number[] | null => {
    if (t === '') return [];
    const out: number[] = [];
    for (const g of t.split(':')) {
      if (!/^[0-9a-f]{1,4}$/i.test(g)) return null;
      out.push(parseInt(g, 16));
    }
    return out;
  };
  let groups: number[];
  if (dbl >= 0) {
    const left = parseGroups(head.slice(0, dbl));
    const right = parseGroups(head.slice(dbl + 2));
    if (left === null || right === null) return null;
    const missing = groupsWanted - left.length - right.length;
    if (missing < 1) return null;
    groups = [...left, ...new Array<number>(missing).fill(0), ...right];
  } else {
    const all = parseGroups(head);
    if (all === null || all.length !== groupsWanted) return null;
    groups = all;
  }
  const out = new Uint8Array(16);
  groups.forEach((g, i) => {
    out[i * 2] = g >> 8;
    out[i * 2 + 1] = g & 0xff;
  });
  if (v4) out.set(v4, 12);
  return out;
}

/** Any IP text a resolver or an admin may write: strict dotted-quad IPv4 or IPv6. */
export function parseIp(s: string): Uint8Array | null {
  return s.includes(':') ? parseIPv6(s) : parseIPv4Strict(s);
}

export function formatIPv4(b: Uint8Array, offset = 0): string {
  return `${b[offset]}.${b[offset + 1]}.${b[offset + 2]}.${b[offset + 3]}`;
}

/** RFC 5952 text: lowercase, no leading zeros, the longest run (≥ 2) of zero groups as `::`. */
export function formatIPv6(b: Uint8Array): string {
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((b[i]! << 8) | b[i + 1]!);
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (gs: number[]) => gs.map((g) => g.toString(16)).join(':');
  if (bestLen < 2) return hex(groups);
  return `${hex(groups.slice(0, bestStart))}::${hex(groups.slice(bestStart + bestLen))}`;
}

export function formatIp(b: Uint8Array): string {
  return b.length === 4 ? formatIPv4(b) : formatIPv6(b);
}

/** A CIDR range such as `10.0.0.0/8` or `fd00::/8`; a bare address is a /32 or /128. */
export interface Cidr {
  bytes: Uint8Array;
  prefix: number;
  text: string;
}

export function parseCidr(s: string): Cidr | null {
  const slash = s.indexOf('/');
  const addr = parseIp(slash < 0 ? s : s.slice(0, slash));
  if (addr === null) return null;
  const max = addr.length * 8;
  let prefix = max;
  if (slash >= 0) {
    const p = s.slice(slash + 1);
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) return null;
    prefix = Number(p);
    if (prefix > max) return null;
  }
  // Store the network address so that `10.1.2.3/8` means 10.0.0.0/8 and prints that way.
  const net = new Uint8Array(addr);
  for (let bit = prefix; bit < max; bit++) net[bit >> 3]! &= ~(0x80 >> (bit & 7));
  return { bytes: net, prefix, text: `${formatIp(net)}/${prefix}` };
}

export function cidrContains(c: Cidr, ip: Uint8Array): boolean {
  if (c.bytes.length !== ip.length) return false;
  const full = c.prefix >> 3;
  for (let i = 0; i < full; i++) if (c.bytes[i] !== ip[i]) return false;
  const rem = c.prefix & 7;
  if (rem === 0) return true;
  const mask = (0xff << (8 - rem)) & 0xff;
  return (c.bytes[full]! & mask) === (ip[full]! & mask);
}
