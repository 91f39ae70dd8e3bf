// The target a client names, taken apart before any decision: `host[:port]`, its port, and a
// bounded form of it for the journal.
import { describeRaw } from './canonical.js';

/** Split `host[:port]` (IPv6 bracketed). Port: undefined when absent, NaN when malformed. */
export function splitAuthority(authority: string): { host: string; port: number | undefined } | null {
  let host: string;
  let rest: string;
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']');
    if (close < 0) return null;
    host = authority.slice(0, close + 1);
    rest = authority.slice(close + 1);
  } else {
    const colon = authority.lastIndexOf(':');
    if (colon >= 0 && authority.indexOf(':') !== colon) return null; // unbracketed IPv6
    host = colon < 0 ? authority : authority.slice(0, colon);
    rest = colon < 0 ? '' : authority.slice(colon);
  }
  if (rest === '' || rest === ':') return { host, port: undefined };
  if (!rest.startsWith(':')) return null;
  const p = rest.slice(1);
  return { host, port: /^[0-9]{1,5}$/.test(p) ? Number(p) : NaN };
}

/** A TCP port a client may name: 1–65535. */
export function validPort(p: number): boolean {
  return Number.isInteger(p) && p >= 1 && p <= 65535;
}

/** The target as the journal keeps it: as written when short and printable, else bounded and escaped. */
export function boundTarget(t: string): string {
  return /^[\x21-\x7e]{1,300}$/.test(t) ? t : describeRaw(t, 300);
}

/** A canonical host as it goes into `host:port` (IPv6 bracketed). */
export function hostFor(value: string): string {
  return value.includes(':') ? `[${value}]` : value;
}

/** `http://host[:port]/path` → parts; null when the target is not absolute-form http. */
export function parseAbsolute(url: string): { authority: string; host: string; port: number; path: string } | null {
  const m = /^http:\/\/([^/?#]*)(.*)$/i.exec(url);
  if (!m) return null;
  const authority = m[1]!;
  // userinfo (`http://allowed.com@evil.com/`) is where URL parsers disagree: refused.
  if (authority.includes('@')) return null;
  const a = splitAuthority(authority);
  if (!a) return null;
  const port = a.port ?? 80;
  let path = m[2]!;
  if (path === '') path = '/';
  else if (path.startsWith('?')) path = `/${path}`;
  else if (!path.startsWith('/')) return null;
  return { authority, host: a.host, port, path };
}
