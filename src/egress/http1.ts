// A strict, bounded HTTP/1.1 head parser and body framer for the proxy's plain-HTTP path.
// Only what a forwarder needs: the request (or response) head, parsed whole and checked, and
// the body's framing, so that exactly one message's bytes are passed on and the next message
// on the same connection starts where this one ended. Everything ambiguous is refused (the
// request-smuggling defences): Content-Length together with Transfer-Encoding, a repeated or
// malformed Content-Length, any transfer coding but a single `chunked`, obs-fold, bare LF or
// CR, control characters, over-long chunk sizes.

/** Token chars of RFC 9110 §5.6.2 (header names, methods): 1, others 0. */
const TOKEN = new Uint8Array(256);
for (const ch of "!#$%&'*+-.^_`|~") TOKEN[ch.charCodeAt(0)] = 1;
for (let i = 0x30; i <= 0x39; i++) TOKEN[i] = 1;
for (let i = 0x41; i <= 0x5a; i++) TOKEN[i] = 1;
for (let i = 0x61; i <= 0x7a; i++) TOKEN[i] = 1;
/** Field value bytes: tab, visible ASCII, space and obs-text; never CR, LF, NUL or other controls. */
const VALUE = new Uint8Array(256);
VALUE[0x09] = 1;
for (let i = 0x20; i <= 0xff; i++) if (i !== 0x7f) VALUE[i] = 1;
const MAX_FIELDS = 256;

/** A refusal of a message that cannot be forwarded safely; `status` is what a client gets. */
export class HttpFramingError extends Error {
  constructor(
    readonly status: 400 | 413 | 417 | 431 | 501 | 502,
    message: string,
  ) {
    super(message);
  }
}

/**
 * What a field is to a forwarder, decided once while parsing from its name (case-insensitive):
 * an ordinary field is passed on as it was sent; the others are the framing, the routing and
 * the hop-by-hop fields (RFC 9110 §7.6.1, plus the proxy's own), never passed on as they are.
 */
export const FieldKind = {
  Other: 0,
  Host: 1,
  ContentLength: 2,
  TransferEncoding: 3,
  Connection: 4,
  Upgrade: 5,
  Expect: 6,
  Http2Settings: 7,
  /** keep-alive, proxy-connection, proxy-authenticate, proxy-authorization, te, trailer. */
  HopByHop: 8,
} as const;
export type FieldKind = (typeof FieldKind)[keyof typeof FieldKind];

/** Known names by length; anything else is FieldKind.Other. */
const KNOWN: ReadonlyMap<number, ReadonlyArray<readonly [string, FieldKind]>> = (() => {
  const m = new Map<number, Array<[string, FieldKind]>>();
  const names: Array<[string, FieldKind]> = [
    ['host', FieldKind.Host],
    ['content-length', FieldKind.ContentLength],
    ['transfer-encoding', FieldKind.TransferEncoding],
    ['connection', FieldKind.Connection],
    ['upgrade', FieldKind.Upgrade],
    ['expect', FieldKind.Expect],
    ['http2-settings', FieldKind.Http2Settings],
    ['keep-alive', FieldKind.HopByHop],
    ['proxy-connection', FieldKind.HopByHop],
    ['proxy-authenticate', FieldKind.HopByHop],
    ['proxy-authorization', FieldKind.HopByHop],
    ['te', FieldKind.HopByHop],
    ['trailer', FieldKind.HopByHop],
  ];
  for (const [n, k] of names) {
    const list = m.get(n.length) ?? [];
    list.push([n, k]);
    m.set(n.length, list);
  }
  return m;
})();

/** Lower-case ASCII of a byte (token bytes only reach here). */
function lower(b: number): number {
  return b >= 0x41 && b <= 0x5a ? b | 0x20 : b;
}

function kindOf(buf: Buffer, from: number, to: number): FieldKind {
  const list = KNOWN.get(to - from);
  if (!list) return FieldKind.Other;
  outer: for (const [name, kind] of list) {
    for (let i = 0; i < name.length; i++) if (lower(buf[from + i]!) !== name.charCodeAt(i)) continue outer;
    return kind;
  }
  return FieldKind.Other;
}

/** Connection options a forwarder knows (its own hop-by-hop names and `close`): the others name fields to drop. */
const CONNECTION_KNOWN = new Set(['close', 'keep-alive', 'upgrade', 'te', 'trailer', 'http2-settings', 'proxy-connection']);

/** What every message head shares: its fields (where they are in `raw`) and its framing. */
export interface MessageHead {
  /** 0 or 1 (HTTP/1.0, HTTP/1.1). */
  minor: number;
  /** The buffer the head was parsed from (its fields are read from it, never copied). */
  raw: Buffer;
  /**
   * Per field, five numbers: where its line starts (its name), where the name ends, where the
   * value starts and ends (trimmed), and its FieldKind.
   */
  spans: number[];
  /** Lower-cased tokens of every Connection field. */
  connection: ReadonlySet<string>;
  /** A Connection token names a field that is not one of the known hop-by-hop ones (it is dropped too). */
  connectionNamesFields: boolean;
  /** The one Content-Length, when there is one and no Transfer-Encoding. */
  contentLength: number | undefined;
  chunked: boolean;
  /** Where the head ended (the first body byte) in the buffer it was parsed from. */
  end: number;
}

export interface RequestHead extends MessageHead {
  method: string;
  target: string;
  /** An Upgrade field is present (WebSocket, h2c). */
  upgrade: string | undefined;
  /** An HTTP2-Settings field is present (h2c). */
  http2Settings: boolean;
  /** The Expect field, lower-cased, when present. */
  expect: string | undefined;
}

export interface ResponseHead extends MessageHead {
  status: number;
  /** The reason phrase's bytes in `raw` (possibly empty). */
  reasonStart: number;
  reasonEnd: number;
  /** Transfer-Encoding is present but not exactly `chunked`: the body runs to the close. */
  otherCoding: boolean;
}

/** The reason phrase of a response head, as text. */
export function reasonPhrase(h: ResponseHead): string {
  return h.raw.toString('latin1', h.reasonStart, h.reasonEnd);
}

/** Every field as [name, value, name, value, …] (names as sent, values trimmed). */
export function fieldList(h: MessageHead): string[] {
  const out: string[] = [];
  for (let i = 0; i < h.spans.length; i += 5)
    out.push(h.raw.toString('latin1', h.spans[i], h.spans[i + 1]), h.raw.toString('latin1', h.spans[i + 2], h.spans[i + 3]));
  return out;
}

/**
 * Whether field number `i` (an index into spans) goes on to the next hop: not hop-by-hop, not
 * named by Connection, not one the forwarder writes itself (Host, the framing).
 */
export function forwarded(h: MessageHead, i: number): boolean {
  if (h.spans[i + 4] !== FieldKind.Other) return false;
  if (!h.connectionNamesFields) return true;
  return !h.connection.has(h.raw.toString('latin1', h.spans[i], h.spans[i + 1]).toLowerCase());
}

const EMPTY_SET: ReadonlySet<string> = new Set();
const KEEP_ALIVE = { name: 'keep-alive', set: new Set(['keep-alive']) };
const CLOSE = { name: 'close', set: new Set(['close']) };

/** buf[at…] is `name` (lower-case ASCII), case-insensitively. */
function sameLower(buf: Buffer, at: number, name: string): boolean {
  for (let i = 0; i < name.length; i++) if (lower(buf[at + i]!) !== name.charCodeAt(i)) return false;
  return true;
}

/**
 * Where the head of the message at `from` ends (the index after its empty line), or -1 while
 * it is incomplete. Throws when it is (or already cannot fit in) more than `max` bytes, or
 * `scanFrom` lets a caller resume a search over a growing buffer.
 */
function headEnd(buf: Buffer, from: number, max: number, tooBig: 431 | 502, scanFrom = 0): number {
  const at = buf.indexOf('\r\n\r\n', Math.max(from, scanFrom - 3), 'latin1');
  if (at < 0) {
    if (buf.length - from > max) throw new HttpFramingError(tooBig, `the message head is larger than ${max} bytes`);
    return -1;
  }
  if (at + 4 - from > max) throw new HttpFramingError(tooBig, `the message head is larger than ${max} bytes`);
  return at + 4;
}

/** What the fields of a head say, beyond their spans. */
interface Fields {
  spans: number[];
  connection: ReadonlySet<string>;
  connectionNamesFields: boolean;
  contentLength: number | undefined;
  /** Index (into spans) of each Transfer-Encoding field. */
  te: number[] | undefined;
  chunked: boolean;
  upgrade: number[] | undefined;
  expect: number[] | undefined;
  http2Settings: boolean;
}

/** The error for a field line whose name is missing or not a token (the line starts at `start`). */
function badFieldName(buf: Buffer, start: number, bad: 400 | 502): HttpFramingError {
  const eol = buf.indexOf(0x0d, start);
  const colon = buf.indexOf(0x3a, start);
  if (colon < 0 || colon > eol || colon === start)
    return new HttpFramingError(
      bad,
      `a header line without a name: ${JSON.stringify(buf.toString('latin1', start, Math.min(eol, start + 40)))}`,
    );
  return new HttpFramingError(bad, `an invalid header name: ${JSON.stringify(buf.toString('latin1', start, Math.min(colon, start + 40)))}`);
}

/** A Content-Length value (bytes `from`..`to`): 1*15 DIGIT, no sign, no list, no spaces inside. */
function contentLength(buf: Buffer, from: number, to: number, bad: 400 | 502): number {
  let v = 0;
  let ok = to - from >= 1 && to - from <= 15;
  for (let j = from; ok && j < to; j++) {
    const b = buf[j]!;
    if (b < 0x30 || b > 0x39) ok = false;
    else v = v * 10 + (b - 0x30);
  }
  if (!ok)
    throw new HttpFramingError(
      bad,
      `Content-Length is not a number: ${JSON.stringify(buf.toString('latin1', from, Math.min(to, from + 20)))}`,
    );
  return v;
}

/**
 * The field lines of a head, from `at` (the first field line) to `end` (after the empty line),
 * checked byte by byte: token names, no obs-fold, no controls in values, at most MAX_FIELDS.
 * The caller has checked that every CR and LF in the head is part of a CRLF.
 */
function parseFields(buf: Buffer, at: number, end: number, bad: 400 | 502): Fields {
  const spans: number[] = [];
  // A shared set (KEEP_ALIVE, CLOSE) is never added to: it is copied first.
  let connection: Set<string> | undefined;
  let namesFields = false;
  let clAt = -1;
  let clCount = 0;
  let te: number[] | undefined;
  let upgrade: number[] | undefined;
  let expect: number[] | undefined;
  let h2 = false;
  const last = end - 2; // the empty line's CR
  let i = at;
  let n = 0;
  while (i < last) {
    if (++n > MAX_FIELDS) throw new HttpFramingError(bad === 400 ? 431 : 502, `more than ${MAX_FIELDS} header fields`);
    const start = i;
    const first = buf[i]!;
    if (first === 0x20 || first === 0x09) throw new HttpFramingError(bad, 'a folded header line (obs-fold) is not accepted');
    while (TOKEN[buf[i]!] === 1) i++;
    if (buf[i] !== 0x3a || i === start) throw badFieldName(buf, start, bad);
    const nameEnd = i;
    i++;
    while (buf[i] === 0x20 || buf[i] === 0x09) i++;
    const valueStart = i;
    while (VALUE[buf[i]!] === 1) i++;
    if (buf[i] !== 0x0d) {
      const name = buf.toString('latin1', start, nameEnd);
      throw new HttpFramingError(bad, `the header ${name} has control characters (CR, LF, NUL…) in its value`);
    }
    let valueEnd = i;
    while (valueEnd > valueStart && (buf[valueEnd - 1] === 0x20 || buf[valueEnd - 1] === 0x09)) valueEnd--;
    i += 2; // CRLF
    const kind = kindOf(buf, start, nameEnd);
    const at5 = spans.length;
    spans.push(start, nameEnd, valueStart, valueEnd, kind);
    switch (kind) {
      case FieldKind.ContentLength:
        if (clCount++ === 0) clAt = at5;
        break;
      case FieldKind.TransferEncoding:
        (te ??= []).push(at5);
        break;
      case FieldKind.Connection: {
        // The usual one, `Connection: keep-alive` (or close) alone: a shared set, nothing split.
        if (connection === undefined) {
          const known = valueEnd - valueStart === 10 ? KEEP_ALIVE : valueEnd - valueStart === 5 ? CLOSE : undefined;
          if (known && sameLower(buf, valueStart, known.name)) {
            connection = known.set;
            break;
          }
        } else if (connection === KEEP_ALIVE.set || connection === CLOSE.set) connection = new Set(connection);
        connection ??= new Set();
        for (const t of buf.toString('latin1', valueStart, valueEnd).split(',')) {
          const tok = t.trim().toLowerCase();
          if (!tok) continue;
          connection.add(tok);
          if (!CONNECTION_KNOWN.has(tok)) namesFields = true;
        }
        break;
      }
      case FieldKind.Upgrade:
        (upgrade ??= []).push(at5);
        break;
      case FieldKind.Expect:
        (expect ??= []).push(at5);
        break;
      case FieldKind.Http2Settings:
        h2 = true;
        break;
      case FieldKind.Other:
      case FieldKind.Host:
      case FieldKind.HopByHop:
        break;
    }
  }
  if (clCount > 1) throw new HttpFramingError(bad, 'more than one Content-Length');
  const cl = clCount === 1 ? contentLength(buf, spans[clAt + 2]!, spans[clAt + 3]!, bad) : undefined;
  let chunked = false;
  if (te && te.length === 1) {
    const s = te[0]!;
    chunked = spans[s + 3]! - spans[s + 2]! === 7 && buf.toString('latin1', spans[s + 2], spans[s + 3]).toLowerCase() === 'chunked';
  }
  return {
    spans,
    connection: connection ?? EMPTY_SET,
    connectionNamesFields: namesFields,
    contentLength: cl,
    te,
    chunked,
    upgrade,
    expect,
    http2Settings: h2,
  };
}

/** The values of the fields at `list` (indexes into spans), joined with `sep`. */
function joined(buf: Buffer, spans: number[], list: number[], sep: string): string {
  let out = '';
  for (let k = 0; k < list.length; k++) out += (k ? sep : '') + buf.toString('latin1', spans[list[k]! + 2], spans[list[k]! + 3]);
  return out;
}

/** Bytes 0x21–0x7e (a request target). */
function visible(b: number): boolean {
  return b >= 0x21 && b <= 0x7e;
}

/**
 * The request head at the start of `buf`; undefined while it is incomplete. Throws
 * HttpFramingError for anything that is not a plain, unambiguous HTTP/1.x request head.
 */
export function parseRequestHead(buf: Buffer, maxBytes: number, scanFrom = 0): RequestHead | undefined {
  // RFC 9112 §2.2: empty lines before a request line are ignored (a few, bounded by the head size).
  let from = 0;
  while (from + 1 < buf.length && buf[from] === 0x0d && buf[from + 1] === 0x0a && from < 8) from += 2;
  const end = headEnd(buf, from, maxBytes, 431, scanFrom);
  if (end < 0) {
    // Only the bytes that arrived since the last look are scanned (a dribbled head stays linear).
    const since = Math.max(from, scanFrom - 1);
    if (buf.indexOf(0x0a, since) >= 0 && !crlfOnly(buf, since, buf.length))
      throw new HttpFramingError(400, 'a bare LF or CR in the request head');
    return undefined;
  }
  if (!crlfOnly(buf, from, end)) throw new HttpFramingError(400, 'a bare LF or CR in the request head');
  // request-line = method SP request-target SP HTTP-version CRLF (single spaces, ASCII)
  const badLine = (): HttpFramingError =>
    new HttpFramingError(400, 'the request line is not `METHOD target HTTP/1.1` (ASCII, single spaces)');
  let i = from;
  while (TOKEN[buf[i]!] === 1) i++;
  if (i === from || buf[i] !== 0x20) throw badLine();
  const methodEnd = i++;
  const targetStart = i;
  while (visible(buf[i]!)) i++;
  if (i === targetStart || buf[i] !== 0x20) throw badLine();
  const targetEnd = i++;
  // "HTTP/1." then 0 or 1, then CRLF
  if (
    buf[i] !== 0x48 ||
    buf[i + 1] !== 0x54 ||
    buf[i + 2] !== 0x54 ||
    buf[i + 3] !== 0x50 ||
    buf[i + 4] !== 0x2f ||
    buf[i + 5] !== 0x31 ||
    buf[i + 6] !== 0x2e ||
    (buf[i + 7] !== 0x30 && buf[i + 7] !== 0x31) ||
    buf[i + 8] !== 0x0d
  )
    throw badLine();
  const minor = buf[i + 7]! - 0x30;
  const f = parseFields(buf, i + 10, end, 400);
  const te = f.te;
  if (te && f.contentLength !== undefined) throw new HttpFramingError(400, 'both Content-Length and Transfer-Encoding');
  if (te && minor === 0) throw new HttpFramingError(400, 'Transfer-Encoding in an HTTP/1.0 request');
  if (te && !f.chunked)
    throw new HttpFramingError(
      501,
      `only Transfer-Encoding: chunked is accepted, not ${JSON.stringify(joined(buf, f.spans, te, ', ').slice(0, 40))}`,
    );
  return {
    method: buf.toString('latin1', from, methodEnd),
    target: buf.toString('latin1', targetStart, targetEnd),
    minor,
    raw: buf,
    spans: f.spans,
    connection: f.connection,
    connectionNamesFields: f.connectionNamesFields,
    contentLength: f.contentLength,
    chunked: f.chunked,
    upgrade: f.upgrade ? joined(buf, f.spans, f.upgrade, ', ') : undefined,
    http2Settings: f.http2Settings,
    expect: f.expect ? joined(buf, f.spans, f.expect, ',').toLowerCase() : undefined,
    end,
  };
}

/** The response head at the start of `buf`; undefined while incomplete; HttpFramingError(502) when unusable. */
export function parseResponseHead(buf: Buffer, maxBytes: number, scanFrom = 0): ResponseHead | undefined {
  const end = headEnd(buf, 0, maxBytes, 502, scanFrom);
  if (end < 0) return undefined;
  if (!crlfOnly(buf, 0, end)) throw new HttpFramingError(502, 'the origin answered with a bare LF or CR in its head');
  // status-line = "HTTP/1." 0|1 SP 3DIGIT [ SP reason-phrase ] CRLF
  const d = (k: number): number => buf[k]! - 0x30;
  const digit = (k: number): boolean => buf[k]! >= 0x30 && buf[k]! <= 0x39;
  if (
    buf[0] !== 0x48 ||
    buf[1] !== 0x54 ||
    buf[2] !== 0x54 ||
    buf[3] !== 0x50 ||
    buf[4] !== 0x2f ||
    buf[5] !== 0x31 ||
    buf[6] !== 0x2e ||
    (buf[7] !== 0x30 && buf[7] !== 0x31) ||
    buf[8] !== 0x20 ||
    !(buf[9]! >= 0x31 && buf[9]! <= 0x39) ||
    !digit(10) ||
    !digit(11)
  )
    throw new HttpFramingError(502, 'the origin did not answer with an HTTP/1.x status line');
  let i = 12;
  let reasonStart = 12;
  if (buf[12] === 0x20) {
    reasonStart = i = 13;
    while (VALUE[buf[i]!] === 1) i++;
  }
  if (buf[i] !== 0x0d) throw new HttpFramingError(502, 'the origin did not answer with an HTTP/1.x status line');
  const f = parseFields(buf, i + 2, end, 502);
  const te = f.te;
  return {
    status: d(9) * 100 + d(10) * 10 + d(11),
    reasonStart,
    reasonEnd: i,
    minor: d(7),
    raw: buf,
    spans: f.spans,
    connection: f.connection,
    connectionNamesFields: f.connectionNamesFields,
    // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length.
    contentLength: te ? undefined : f.contentLength,
    chunked: f.chunked,
    otherCoding: te !== undefined && !f.chunked,
    end,
  };
}

/** Every LF in buf[from, to) is preceded by CR and every CR followed by LF. */
function crlfOnly(buf: Buffer, from: number, to: number): boolean {
  let i = buf.indexOf(0x0a, from);
  while (i >= 0 && i < to) {
    if (i === 0 || buf[i - 1] !== 0x0d) return false;
    i = buf.indexOf(0x0a, i + 1);
  }
  i = buf.indexOf(0x0d, from);
  while (i >= 0 && i < to) {
    if (i + 1 < buf.length && buf[i + 1] !== 0x0a) return false;
    i = buf.indexOf(0x0d, i + 1);
  }
  return true;
}

const CRLF = Buffer.from('\r\n');
const LAST_CHUNK = Buffer.from('0\r\n\r\n');
/** A chunk-size line (with extensions) longer than this is refused. */
const MAX_CHUNK_LINE = 4096;

/**
 * Frames one message body as it streams: `push` takes bytes, appends what belongs to the body
 * to `out`, and returns how many bytes it took (the rest belong to the next message); `done`
 * says the body is complete. Chunked bodies are checked and written out again in a canonical
 * form (sizes in lower-case hex, no extensions, no trailers) or, for an HTTP/1.0 peer, as bare
 * data; Content-Length bodies are counted; `close` bodies run to the end of the stream.
 */
export class BodyFramer {
  done = false;
  private left: number;
  private state: 'size' | 'data' | 'data-crlf' | 'trailer' = 'size';
  private line = '';
  private trailerBytes = 0;

  constructor(
    readonly kind: 'length' | 'chunked' | 'close',
    length: number,
    private readonly reencode: boolean,
    private readonly bad: 400 | 502,
    private readonly maxTrailerBytes: number,
  ) {
    this.left = length;
    if (kind === 'length' && length === 0) this.done = true;
  }

  push(buf: Buffer, from: number, out: Buffer[]): number {
    if (this.done) return 0;
    if (this.kind === 'close') {
      if (from < buf.length) out.push(from === 0 ? buf : buf.subarray(from));
      return buf.length - from;
    }
    if (this.kind === 'length') {
      const n = Math.min(this.left, buf.length - from);
      if (n > 0) out.push(from === 0 && n === buf.length ? buf : buf.subarray(from, from + n));
      this.left -= n;
      if (this.left === 0) this.done = true;
      return n;
    }
    let i = from;
    while (i < buf.length && !this.done) {
      switch (this.state) {
        case 'data': {
          const n = Math.min(this.left, buf.length - i);
          out.push(buf.subarray(i, i + n));
          this.left -= n;
          i += n;
          if (this.left === 0) {
            this.state = 'data-crlf';
            this.line = '';
          }
          break;
        }
        case 'data-crlf': {
          this.line += String.fromCharCode(buf[i]!);
          i++;
          if (this.line.length === 2) {
            if (this.line !== '\r\n') throw new HttpFramingError(this.bad, 'a chunk is longer than its size says');
            if (this.reencode) out.push(CRLF);
            this.state = 'size';
            this.line = '';
          }
          break;
        }
        case 'size':
        case 'trailer': {
          const nl = buf.indexOf(0x0a, i);
          const stop = nl < 0 ? buf.length : nl + 1;
          this.line += buf.toString('latin1', i, stop);
          if (this.state === 'trailer') this.trailerBytes += stop - i;
          i = stop;
          if (this.line.length > MAX_CHUNK_LINE || this.trailerBytes > this.maxTrailerBytes)
            throw new HttpFramingError(this.bad, 'a chunk-size or trailer line is too long');
          if (nl < 0) break;
          if (!this.line.endsWith('\r\n') || this.line.indexOf('\r') !== this.line.length - 2)
            throw new HttpFramingError(this.bad, 'a bare LF or CR in the chunked framing');
          const text = this.line.slice(0, -2);
          this.line = '';
          if (this.state === 'trailer') {
            if (text === '') {
              this.done = true;
              if (this.reencode) out.push(LAST_CHUNK);
            } else if (!/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*$/.test(text))
              throw new HttpFramingError(this.bad, 'a malformed trailer field');
            break;
          }
          // chunk-size [ chunk-ext ]: hex digits only (no sign, no 0x, no spaces), at most 2^52.
          const m = /^([0-9A-Fa-f]+)(?:[ \t]*;[\t\x20-\x7e]*)?$/.exec(text);
          const digits = m ? m[1]!.replace(/^0+(?=.)/, '') : '';
          if (!m || digits.length > 13)
            throw new HttpFramingError(this.bad, `a malformed chunk size: ${JSON.stringify(text.slice(0, 20))}`);
          const size = parseInt(digits, 16);
          if (size === 0) this.state = 'trailer';
          else {
            this.left = size;
            this.state = 'data';
            if (this.reencode) out.push(Buffer.from(`${size.toString(16)}\r\n`, 'latin1'));
          }
          break;
        }
      }
    }
    return i - from;
  }
}
