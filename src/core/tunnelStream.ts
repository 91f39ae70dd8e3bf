import { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import { AtelierError, isErrorCode } from './errors.js';

/**
 * The byte-tunnel stream: what `GET /v1/workshops/:id/tunnel?port=N` speaks after an HTTP/1.1
 * `Upgrade: atelier-tunnel` (the WebSocket form of the same route stays for browsers).
 *
 * After the `101 Switching Protocols` each side sends frames: a 5-byte header (type, then the
 * payload length as a big-endian uint32) and the payload. No masking and no copy: a chunk read
 * from one socket is written to the other as it is, behind its header, in one writev. The
 * framing exists only to say what TCP alone cannot: the other side's end of data (`EOF`, a
 * half-close) apart from a tunnel cut by a server restart, and why a connection failed (`ERROR`,
 * `{code, message}`).
 */
export const TUNNEL_PROTOCOL = 'atelier-tunnel';
/** The 101 response header saying whether the workshop was resumed for this tunnel. */
export const TUNNEL_RESUMED_HEADER = 'atelier-resumed';

const DATA = 0;
const EOF = 1;
const ERROR = 2;
const HEADER = 5;
/** Larger writes are split: a receiver never has to trust a length beyond this. */
const MAX_DATA = 1 << 20;
const MAX_ERROR = 16 << 10;
/** Bytes a tunnel queues (either way) before it pauses its source. */
const HIGH_WATER = 1 << 20;

function header(type: number, length: number): Buffer {
  const h = Buffer.allocUnsafe(HEADER);
  h[0] = type;
  h.writeUInt32BE(length, 1);
  return h;
}

/**
 * One end of a byte tunnel, as a Duplex over the upgraded socket: what is written goes out as
 * DATA frames (ended by EOF), what comes in as DATA is read. Backpressure is the socket's: a
 * reader that stops reading pauses the socket, hence the peer (nothing grows without bound).
 * Emits 'error' with an AtelierError when the peer reports one (ERROR frame) or when the socket
 * closes before the peer's EOF ("the tunnel was cut").
 */
export class TunnelStream extends Duplex {
  private head: Buffer = Buffer.alloc(0);
  private type = -1;
  private left = 0;
  private errorText: Buffer[] = [];
  private peerEof = false;
  private eofSent = false;
  private failed = false;
  private closing = false;

  constructor(
    readonly socket: Socket,
    first: Buffer = Buffer.alloc(0),
    private readonly cutMessage = 'the tunnel was cut (server restarted or network down)',
  ) {
    super({ allowHalfOpen: true, readableHighWaterMark: HIGH_WATER, writableHighWaterMark: HIGH_WATER });
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.parse(chunk));
    socket.on('end', () => {
      if (!this.peerEof) this.cut();
    });
    socket.on('error', () => undefined);
    // After the peer's EOF a close loses nothing: what was read is still handed out, in order.
    socket.on('close', () => {
      if (!this.peerEof) this.cut();
    });
    socket.on('drain', () => this.emit('socketDrain'));
    if (first.length > 0) this.parse(first);
  }

  /** Sends an ERROR frame (a reason the peer shows), then ends the tunnel. */
  fail(code: string, message: string): void {
    // This side is the one that failed: the close that follows is no news to it.
    this.closing = true;
    if (this.socket.destroyed || this.socket.writableEnded) return;
    const body = Buffer.from(JSON.stringify({ code, message }).slice(0, MAX_ERROR));
    this.socket.cork();
    this.socket.write(header(ERROR, body.length));
    this.socket.write(body);
    this.socket.uncork();
    this.socket.end();
  }

  /** Closes the tunnel on purpose (the local side went away): no 'error' for the cut that follows. */
  close(): void {
    this.closing = true;
    this.destroy();
  }

  private cut(): void {
    if (this.failed) return;
    if (this.closing) {
      this.destroy();
      return;
    }
    this.failed = true;
    this.destroy(new AtelierError('UNAVAILABLE', this.cutMessage));
  }

  private protocolError(what: string): void {
    this.failed = true;
    this.socket.destroy();
    this.destroy(new AtelierError('INTERNAL', `the tunnel's peer broke the protocol: ${what}`));
  }

  private parse(chunk: Buffer): void {
    let off = 0;
    while (off < chunk.length && !this.failed) {
      if (this.type < 0) {
        const need = HEADER - this.head.length;
        const part = chunk.subarray(off, off + need);
        off += part.length;
        this.head = this.head.length === 0 && part.length === HEADER ? part : Buffer.concat([this.head, part]);
        if (this.head.length < HEADER) return;
        this.type = this.head[0]!;
        this.left = this.head.readUInt32BE(1);
        this.head = Buffer.alloc(0);
        if (this.type === EOF) {
          if (this.left !== 0) return this.protocolError('an EOF frame with a payload');
          this.type = -1;
          this.peerEof = true;
          this.push(null);
          if (this.eofSent) this.socket.end();
          continue;
        }
        if (this.type === DATA ? this.left > MAX_DATA : this.type === ERROR ? this.left > MAX_ERROR : true)
          return this.protocolError(`frame type ${this.type}, length ${this.left}`);
        if (this.left === 0) {
          if (this.type === ERROR) this.peerError();
          this.type = -1;
        }
        continue;
      }
      const part = chunk.subarray(off, off + this.left);
      off += part.length;
      this.left -= part.length;
      if (this.type === DATA) {
        if (!this.push(part)) this.socket.pause();
      } else this.errorText.push(part);
      if (this.left === 0) {
        if (this.type === ERROR) this.peerError();
        this.type = -1;
      }
    }
  }

  private peerError(): void {
    let err: AtelierError;
    try {
      const e = JSON.parse(Buffer.concat(this.errorText).toString('utf8')) as { code?: unknown; message?: unknown };
      const code = typeof e.code === 'string' && isErrorCode(e.code) ? e.code : 'UNAVAILABLE';
      err = new AtelierError(code, typeof e.message === 'string' ? e.message : 'the tunnel failed');
    } catch {
      err = new AtelierError('UNAVAILABLE', 'the tunnel failed (unreadable reason)');
    }
    this.failed = true;
    this.destroy(err);
  }

  override _read(): void {
    if (!this.failed && this.socket.isPaused()) this.socket.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    this.send(chunk, done);
  }

  override _writev(chunks: { chunk: Buffer }[], done: (err?: Error | null) => void): void {
    this.send(
      chunks.map((c) => c.chunk),
      done,
    );
  }

  private send(chunks: Buffer | Buffer[], done: (err?: Error | null) => void): void {
    if (this.socket.destroyed || this.socket.writableEnded) return done();
    let ok = true;
    // Header and payload leave in one writev (corked), the payload never copied.
    this.socket.cork();
    for (const chunk of Array.isArray(chunks) ? chunks : [chunks])
      for (let off = 0; off < chunk.length; off += MAX_DATA) {
        const part = off === 0 && chunk.length <= MAX_DATA ? chunk : chunk.subarray(off, off + MAX_DATA);
        this.socket.write(header(DATA, part.length));
        ok = this.socket.write(part);
      }
    this.socket.uncork();
    if (ok) done();
    else this.once('socketDrain', () => done());
  }

  override _final(done: (err?: Error | null) => void): void {
    if (!this.socket.destroyed && !this.socket.writableEnded) {
      this.socket.write(header(EOF, 0));
      this.eofSent = true;
      // Both ways are done: the connection ends (the peer does the same; either end is fine).
      if (this.peerEof) this.socket.end();
    }
    done();
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    if (!this.socket.destroyed && !(this.peerEof && this.eofSent)) this.socket.destroy();
    done(err);
  }
}
