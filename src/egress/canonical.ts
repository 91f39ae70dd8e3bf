// Host canonicalisation. A host is canonicalised exactly once, as it arrives, and that one
// value is what the policy matches, what the resolver is asked and what the decision
// records: there is no second parser downstream that could read the same bytes differently.
import { domainToASCII } from 'node:url';
import { formatIPv4, formatIPv6, parseInetAton, parseIPv6 } from './ip.js';

export type CanonicalHost =
  { kind: 'name'; value: string } | { kind: 'ipv4'; value: string; bytes: Uint8Array } | { kind: 'ipv6'; value: string; bytes: Uint8Array };

export type HostRefusalCode =
  | 'HOST_EMPTY'
  | 'HOST_CONTROL_CHAR'
  | 'HOST_PERCENT'
  | 'HOST_ZONE_ID'
  | 'HOST_INVALID_CHAR'
  | 'HOST_EMPTY_LABEL'
  | 'HOST_LABEL_TOO_LONG'
  | 'HOST_TOO_LONG'
  | 'HOST_HYPHEN'
  | 'HOST_IDNA_INVALID'
  | 'HOST_INVALID_IPV4'
  | 'HOST_INVALID_IPV6';

export interface HostRefusal {
  kind: 'refused';
  reason: HostRefusalCode;
  message: string;
}

const MAX_NAME = 253;
const MAX_LABEL = 63;

function refuse(reason: HostRefusalCode, message: string): HostRefusal {
  return { kind: 'refused', reason, message };
}

/** Printable, bounded rendering of untrusted host text for messages and logs. */
export function describeRaw(raw: string, max = 120): string {
  const s = JSON.stringify(raw.length > max ? `${raw.slice(0, max)}…` : raw);
  return s;
}

/**
 * Canonicalise a host as a client wrote it (in a CONNECT authority, an absolute URL or a
 * SOCKS5 domain): lowercase, at most one trailing dot removed, IDNA to punycode, every
 * inet_aton spelling of an IPv4 address to dotted-quad, IPv6 (bracketed or not) to RFC 5952.
 */
export function canonicalizeHost(raw: string): CanonicalHost | HostRefusal {
  if (raw.length === 0) return refuse('HOST_EMPTY', 'the host is empty');
  if (raw.length > 1024) return refuse('HOST_TOO_LONG', `the host (${raw.length} characters) is longer than 253 characters`);
  // C0 controls (NUL, CR, LF…), DEL and C1 controls never belong in a host; checked before
  // anything else so that no later step (IDNA mapping) can silently drop them.
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  if (/[\u0000-\u0020\u007f-\u009f]/.test(raw))
    return refuse('HOST_CONTROL_CHAR', `the host ${describeRaw(raw)} contains a control character`);

  if (raw.startsWith('[') || raw.includes(':')) return canonicalizeIPv6(raw);

  // `%` is refused outright: percent-decoding (`allowed.com%2e.evil.com`) would be a second
  // reading of the same bytes.
  if (raw.includes('%')) return refuse('HOST_PERCENT', `the host ${describeRaw(raw)} contains '%'`);
  // The ASCII part of a name must already be letters, digits, hyphens and dots: IDNA must
  // never be the step that turns `/`, `@`, `_` or `*` into something acceptable.
  const badAscii = raw.match(/[^A-Za-z0-9.\-\u00a0-\uffff]/);
  if (badAscii) return refuse('HOST_INVALID_CHAR', `the host ${describeRaw(raw)} contains ${JSON.stringify(badAscii[0])}`);

  let name = raw;
  if (/[^\u0020-\u007e]/.test(name)) {
    // IDNA (UTS #46, non-transitional, like browsers): maps fullwidth forms and ideographic
    // dots, lowercases, and encodes to punycode. An empty answer means invalid.
    const ascii = domainToASCII(name);
    if (ascii === '') return refuse('HOST_IDNA_INVALID', `the host ${describeRaw(raw)} is not a valid internationalised name`);
    name = ascii;
  }
  name = name.toLowerCase();
  // Exactly one trailing dot (the fully-qualified spelling) is the same name; two is an empty label.
  if (name.endsWith('.')) name = name.slice(0, -1);
  if (name.length === 0) return refuse('HOST_EMPTY_LABEL', `the host ${describeRaw(raw)} has an empty label`);
  if (/[^a-z0-9.-]/.test(name)) return refuse('HOST_INVALID_CHAR', `the host ${describeRaw(raw)} is not letters, digits, hyphens and dots`);

  const labels = name.split('.');
  // WHATWG URL rule: a host whose last label is a number is an IPv4 address (in any
  // inet_aton spelling) or nothing; it is never a name that a resolver would see.
  const last = labels[labels.length - 1]!;
  if (/^(0x[0-9a-f]*|[0-9]+)$/.test(last)) {
    const v4 = parseInetAton(name);
    if (v4 === null) return refuse('HOST_INVALID_IPV4', `the host ${describeRaw(raw)} is not a valid IPv4 address`);
    return { kind: 'ipv4', value: formatIPv4(v4), bytes: v4 };
  }
  if (name.length > MAX_NAME) return refuse('HOST_TOO_LONG', `the host ${describeRaw(raw)} is longer than ${MAX_NAME} characters`);
  for (const label of labels) {
    if (label.length === 0) return refuse('HOST_EMPTY_LABEL', `the host ${describeRaw(raw)} has an empty label`);
    if (label.length > MAX_LABEL) return refuse('HOST_LABEL_TOO_LONG', `a label of ${describeRaw(raw)} is longer than ${MAX_LABEL}`);
    if (label.startsWith('-') || label.endsWith('-'))
      return refuse('HOST_HYPHEN', `a label of ${describeRaw(raw)} starts or ends with '-'`);
    // An ASCII label that claims to be punycode must decode, else two spellings of one
    // name (or garbage that some resolver accepts) could slip past an exact-match rule.
    if (label.startsWith('xn--') && domainToASCII(label) !== label) {
      return refuse('HOST_IDNA_INVALID', `the label ${describeRaw(label)} is not valid punycode`);
    }
  }
  return { kind: 'name', value: name };
}

function canonicalizeIPv6(raw: string): CanonicalHost | HostRefusal {
  let inner = raw;
  if (raw.startsWith('[')) {
    if (!raw.endsWith(']')) return refuse('HOST_INVALID_IPV6', `the host ${describeRaw(raw)} has an unclosed '['`);
    inner = raw.slice(1, -1);
  }
  // Zone ids (`fe80::1%eth0`, `%25eth0` in URLs) name an interface of the proxy's host: a
  // workshop has no business choosing one, so they are refused rather than stripped.
  if (inner.includes('%')) return refuse('HOST_ZONE_ID', `the host ${describeRaw(raw)} carries an IPv6 zone id`);
  const bytes = parseIPv6(inner);
  if (bytes === null) return refuse('HOST_INVALID_IPV6', `the host ${describeRaw(raw)} is not a valid IPv6 address`);
  return { kind: 'ipv6', value: formatIPv6(bytes), bytes };
}

/** The host as it goes into an authority (`host:port`) or a Host header: IPv6 bracketed. */
export function hostForAuthority(h: CanonicalHost): string {
  return h.kind === 'ipv6' ? `[${h.value}]` : h.value;
}
