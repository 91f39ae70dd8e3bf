import type { Socket } from 'node:net';
import type { WebSocket, RawData } from 'ws';
import { TerminalControl, type TerminalEvent } from '../core/index.js';
import type { PtyReader, Terminal } from './pty.js';

/** Above this many bytes queued towards a WebSocket client, the source is paused. */
const HIGH_WATER = 1 << 20;
const LOW_WATER = 256 << 10;

export function sendEvent(ws: WebSocket, event: TerminalEvent): void {
  if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(event));
}

/** Sends an error event and closes the WebSocket (1000: the error is in the event). */
export function failSocket(ws: WebSocket, code: string, message: string): void {
  sendEvent(ws, { type: 'error', code, message });
  ws.close(1000);
}

function asBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

function parseControl(data: RawData): TerminalControl | undefined {
  try {
    const r = TerminalControl.safeParse(JSON.parse(asBuffer(data).toString('utf8')));
    return r.success ? r.data : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Counts bytes handed to a WebSocket and not yet flushed to its socket; `onLow` runs when a
 * paused source may go on.
 */
class SendWindow {
  private pending = 0;
  private full = false;

  constructor(
    private readonly ws: WebSocket,
    private readonly onLow: () => void,
  ) {}

  /** False when the window is full: the caller pauses its source until onLow. */
  send(chunk: Buffer): boolean {
    if (this.ws.readyState !== this.ws.OPEN) return true;
    this.pending += chunk.length;
    this.ws.send(chunk, { binary: true }, () => {
      this.pending -= chunk.length;
      if (this.full && this.pending <= LOW_WATER) {
        this.full = false;
        this.onLow();
      }
    });
    if (this.pending > HIGH_WATER) this.full = true;
    return !this.full;
  }
}

/**
 * Connects a WebSocket client to a PTY session: output as binary frames (the session pauses for
 * a slow client), input from binary frames (the WebSocket pauses while the program has not read
 * a large paste), `resize` and `signal` control frames. Resolves when the client goes away.
 */
export function attachPty(ws: WebSocket, session: Terminal, opts: { replay: boolean }): Promise<void> {
  const window = new SendWindow(ws, () => session.drained(reader));
  const reader: PtyReader = { write: (chunk) => window.send(chunk) };
  if (opts.replay) {
    const recent = session.recentOutput();
    if (recent.length > 0) window.send(recent);
  }
  session.attach(reader);
  let inputChain = Promise.resolve();
  ws.on('message', (data, isBinary) => {
    if (isBinary) {
      const chunk = asBuffer(data);
      ws.pause();
      inputChain = inputChain.then(() => session.write(chunk)).then(() => ws.resume());
      return;
    }
    const msg = parseControl(data);
    if (!msg) return failSocket(ws, 'INVALID_ARGUMENT', 'a control message must be {type: resize|signal, …}');
    if (msg.type === 'resize') session.resize(msg.cols, msg.rows);
    else if (msg.type === 'signal') session.signal(msg.signal);
  });
  return new Promise((resolve) => {
    ws.once('close', () => {
      session.detach(reader);
      resolve();
    });
  });
}

/**
 * Relays bytes between a WebSocket client and a TCP connection inside a workshop, with
 * backpressure both ways: a client that does not read pauses the connection, a connection that
 * does not read pauses the WebSocket. Half-close travels as an `eof` control frame.
 */
export function bridgeSocket(ws: WebSocket, socket: Socket): void {
  const window = new SendWindow(ws, () => socket.resume());
  let localEof = false;
  let remoteEof = false;
  const finish = (): void => {
    if (localEof && remoteEof) ws.close(1000);
  };
  socket.on('data', (chunk: Buffer) => {
    if (!window.send(chunk)) socket.pause();
  });
  socket.on('end', () => {
    remoteEof = true;
    sendEvent(ws, { type: 'eof' });
    finish();
  });
  socket.on('error', () => undefined);
  socket.on('close', (hadError) => {
    if (ws.readyState !== ws.OPEN) return;
    if (hadError || !remoteEof) failSocket(ws, 'UNAVAILABLE', 'the connection inside the workshop was reset');
    else finish();
  });
  ws.on('message', (data, isBinary) => {
    if (isBinary) {
      if (!socket.write(asBuffer(data))) {
        ws.pause();
        socket.once('drain', () => ws.resume());
      }
      return;
    }
    const msg = parseControl(data);
    if (msg?.type === 'eof') {
      localEof = true;
      socket.end();
      finish();
    } else failSocket(ws, 'INVALID_ARGUMENT', 'a tunnel takes binary frames and {type: "eof"} only');
  });
  ws.on('close', () => socket.destroy());
}
