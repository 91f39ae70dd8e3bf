// A strict, bounded HTTP/1.1 head parser and body framer for the proxy's plain-HTTP path.
// Only what a forwarder needs: the request (or response) head, parsed whole and checked, and
// the body's framing, so that exactly one message's bytes are passed on and the next message
// on the same connection starts where this one ended. Everything ambiguous is refused (the
// request-smuggling defences): Content-Length together with Transfer-Encoding, a repeated or
// malformed Content-Length, any transfer coding but a single `chunked`, obs-fold, bare LF or
// CR, control characters, over-long chunk sizes.

/** Lower-case token chars of RFC 9110 §5.6.2. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A field value: visible ASCII, space, tab and obs-text; never CR, LF, NUL or other controls. */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const REQUEST_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP\/1\.([01])$/;
const STATUS_LINE = /^HTTP\/1\.([01]) ([1-9][0-9]{2})(?: ([\t\x20-\x7e\x80-\xff]*))?$/;
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

/** What every message head shares: its fields (raw names, in order) and its framing. */
export interface MessageHead {
  /** 0 or 1 (HTTP/1.0, HTTP/1.1). */
  minor: number;
  /** Flat [name, value, name, value, …], names as sent, values trimmed. */
  fields: string[];
  /** Lower-cased tokens of every Connection field. */
  connection: Set<string>;
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
  /** The Expect field, lower-cased, when present. */
  expect: string | undefined;
}

export interface ResponseHead extends MessageHead {
  status: number;
  reasonPhrase: string;
  /** Transfer-Encoding is present but not exactly `chunked`: the body runs to the close. */
  otherCoding: boolean;
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

function parseFields(lines: string[], bad: 400 | 502): Omit<MessageHead, 'minor' | 'end'> & { values: Map<string, string[]> } {
  if (lines.length - 1 > MAX_FIELDS) throw new HttpFramingError(bad === 400 ? 431 : 502, `more than ${MAX_FIELDS} header fields`);
  const fields: string[] = [];
  const values = new Map<string, string[]>();
  const connection = new Set<string>();
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(':');
    if (line.length > 0 && (line.charCodeAt(0) === 0x20 || line.charCodeAt(0) === 0x09))
      throw new HttpFramingError(bad, 'a folded header line (obs-fold) is not accepted');
    if (colon <= 0) throw new HttpFramingError(bad, `a header line without a name: ${JSON.stringify(line.slice(0, 40))}`);
    const name = line.slice(0, colon);
    if (!TOKEN.test(name)) throw new HttpFramingError(bad, `an invalid header name: ${JSON.stringify(name.slice(0, 40))}`);
    const value = line.slice(colon + 1).trim();
    if (!FIELD_VALUE.test(value)) throw new HttpFramingError(bad, `the header ${name} has control characters (CR, LF, NUL…) in its value`);
    fields.push(name, value);
    const lower = name.toLowerCase();
    const list = values.get(lower);
    if (list) list.push(value);
    else values.set(lower, [value]);
    if (lower === 'connection') for (const t of value.split(',')) if (t.trim()) connection.add(t.trim().toLowerCase());
  }
  const cl = values.get('content-length');
  const te = values.get('transfer-encoding');
  let contentLength: number | undefined;
  let chunked = false;
  if (cl) {
    if (cl.length > 1) throw new HttpFramingError(bad, 'more than one Content-Length');
    if (!/^[0-9]{1,15}$/.test(cl[0]!))
      throw new HttpFramingError(bad, `Content-Length is not a number: ${JSON.stringify(cl[0]!.slice(0, 20))}`);
    contentLength = Number(cl[0]);
  }
  if (te) {
    const codings = te
      .join(',')
      .split(',')
      .map((t) => t.trim().toLowerCase());
    chunked = codings.length === 1 && codings[0] === 'chunked';
  }
  return { fields, values, connection, contentLength, chunked };
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
  const lines = buf.toString('latin1', from, end - 4).split('\r\n');
  const m = REQUEST_LINE.exec(lines[0]!);
  if (!m) throw new HttpFramingError(400, 'the request line is not `METHOD target HTTP/1.1` (ASCII, single spaces)');
  const f = parseFields(lines, 400);
  const te = f.values.get('transfer-encoding');
  if (te && f.contentLength !== undefined) throw new HttpFramingError(400, 'both Content-Length and Transfer-Encoding');
  if (te && m[3] === '0') throw new HttpFramingError(400, 'Transfer-Encoding in an HTTP/1.0 request');
  if (te && !f.chunked)
    throw new HttpFramingError(501, `only Transfer-Encoding: chunked is accepted, not ${JSON.stringify(te.join(', ').slice(0, 40))}`);
  const upgrade = f.values.get('upgrade');
  const expect = f.values.get('expect');
  return {
    method: m[1]!,
    target: m[2]!,
    minor: Number(m[3]),
    fields: f.fields,
    connection: f.connection,
    contentLength: f.contentLength,
    chunked: f.chunked,
    upgrade: upgrade ? upgrade.join(', ') : undefined,
    expect: expect ? expect.join(',').toLowerCase() : undefined,
    end,
  };
}

/** The response head at the start of `buf`; undefined while incomplete; HttpFramingError(502) when unusable. */
export function parseResponseHead(buf: Buffer, maxBytes: number, scanFrom = 0): ResponseHead | undefined {
  const end = headEnd(buf, 0, maxBytes, 502, scanFrom);
  if (end < 0) return undefined;
  if (!crlfOnly(buf, 0, end)) throw new HttpFramingError(502, 'the origin answered with a bare LF or CR in its head');
  const lines = buf.toString('latin1', 0, end - 4).split('\r\n');
  const m = STATUS_LINE.exec(lines[0]!);
  if (!m) throw new HttpFramingError(502, 'the origin did not answer with an HTTP/1.x status line');
  const f = parseFields(lines, 502);
  const te = f.values.get('transfer-encoding');
  return {
    status: Number(m[2]),
    reasonPhrase: m[3] ?? '',
    minor: Number(m[1]),
    fields: f.fields,
    connection: f.connection,
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
