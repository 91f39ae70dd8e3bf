// Heads rewritten by the plain-HTTP forwarder, each as one buffer: the request in origin-form
// for the origin, the answer for the client; hop-by-hop fields dropped, the framing the
// proxy itself chose written last.
import type { InjectedField } from './forward.js';
import { FieldKind, forwarded, type RequestHead, type ResponseHead } from './http1.js';

const CRLF_BYTES = 2;

/**
 * The request head for the origin, as one buffer: the request line in origin-form, the fields
 * that go on copied as the client sent them (parsed and checked already), then Host (the
 * checked authority) and the framing the proxy itself writes.
 */
export function requestHeadBytes(head: RequestHead, path: string, authority: string, inject?: InjectedField): Buffer {
  const raw = head.raw;
  const sp = head.spans;
  // Method (token), path (visible ASCII) and authority (canonical, ASCII): one byte per char;
  // the injected line is checked by its maker (token name, latin1 value without controls).
  const line = `${head.method} ${path} HTTP/1.1\r\n`;
  const tail =
    (inject ? `${inject.line}\r\n` : '') +
    `Host: ${authority}\r\n` +
    (head.chunked
      ? 'Transfer-Encoding: chunked\r\n'
      : head.contentLength !== undefined
        ? `Content-Length: ${head.contentLength}\r\n`
        : '') +
    '\r\n';
  let n = line.length + tail.length;
  const keep = (i: number): boolean => forwarded(head, i) && (!inject || !named(raw, sp[i]!, sp[i + 1]!, inject.name));
  for (let i = 0; i < sp.length; i += 5) if (keep(i)) n += sp[i + 3]! - sp[i]! + CRLF_BYTES;
  const out = Buffer.allocUnsafe(n);
  let o = out.write(line, 0, 'latin1');
  for (let i = 0; i < sp.length; i += 5) {
    if (!keep(i)) continue;
    o += raw.copy(out, o, sp[i], sp[i + 3]);
    out[o++] = 0x0d;
    out[o++] = 0x0a;
  }
  out.write(tail, o, 'latin1');
  return out;
}

/** Whether the field name in raw[from, to) is `name` (lower case), ignoring ASCII case. */
function named(raw: Buffer, from: number, to: number, name: string): boolean {
  if (to - from !== name.length) return false;
  for (let i = 0; i < name.length; i++) {
    const b = raw[from + i]!;
    if ((b >= 0x41 && b <= 0x5a ? b | 0x20 : b) !== name.charCodeAt(i)) return false;
  }
  return true;
}

/** Whether a response field goes on to the client: Host and Content-Length (unless chunked) besides the ordinary ones. */
function responseKeeps(rh: ResponseHead, i: number): boolean {
  const kind = rh.spans[i + 4];
  if (kind === FieldKind.ContentLength) return !rh.chunked && !rh.otherCoding;
  if (kind === FieldKind.Host) return !rh.connectionNamesFields || !rh.connection.has('host');
  return forwarded(rh, i);
}

/** A response head for the client, as one buffer: `HTTP/1.1`, the origin's status and reason, its fields but hop-by-hop ones, the framing. */
export function responseHeadBytes(rh: ResponseHead, framing: string, close: boolean): Buffer {
  const raw = rh.raw;
  const sp = rh.spans;
  const tail = `${framing}${close ? 'Connection: close\r\n' : ''}\r\n`;
  // "HTTP/1.1 " + the status code + SP + the reason as the origin sent it (RFC 9112 §4: the SP even without a reason).
  let n = 9 + 3 + 1 + (rh.reasonEnd - rh.reasonStart) + CRLF_BYTES + tail.length;
  for (let i = 0; i < sp.length; i += 5) if (responseKeeps(rh, i)) n += sp[i + 3]! - sp[i]! + CRLF_BYTES;
  const out = Buffer.allocUnsafe(n);
  let o = out.write('HTTP/1.1 ', 0, 'latin1');
  o += raw.copy(out, o, 9, 12);
  out[o++] = 0x20;
  o += raw.copy(out, o, rh.reasonStart, rh.reasonEnd);
  out[o++] = 0x0d;
  out[o++] = 0x0a;
  for (let i = 0; i < sp.length; i += 5) {
    if (!responseKeeps(rh, i)) continue;
    o += raw.copy(out, o, sp[i], sp[i + 3]);
    out[o++] = 0x0d;
    out[o++] = 0x0a;
  }
  out.write(tail, o, 'latin1');
  return out;
}
