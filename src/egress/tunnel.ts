// Tunnels: CONNECT (answered here) and the byte relay behind both CONNECT and SOCKS5 once a
// target is decided and dialed. A tunnel's bytes are opaque: only the target was checked.
import net from 'node:net';
import { spliceRelay } from '../relay/index.js';
import { rawAnswer, refusal } from './answers.js';
import { boundTarget, splitAuthority } from './authority.js';
import { type ProxyContext, type Listener, LazySignal } from './context.js';
import { badRequest, type Verdict } from './decide.js';
import { connected, connectTarget, dialFirst, pinnedLookup } from './dial.js';
import type { EgressDecision, InternalTarget } from './types.js';

/** A CONNECT request whose head was read: decided, answered, and (when allowed) relayed. `head`: what the client sent after it. */
export async function serveConnect(ctx: ProxyContext, l: Listener, authority: string, s: net.Socket, head: Buffer): Promise<void> {
  const target = boundTarget(authority);
  const a = splitAuthority(authority);
  let v: Verdict;
  if (!a || a.port === undefined) {
    v = { decision: badRequest('connect', target, 'CONNECT needs host:port'), dial: [] };
    ctx.record(l, v.decision);
  } else {
    const gone = new LazySignal(s);
    try {
      v = await ctx.decider.decide(l, 'connect', a.host, a.port, target, gone);
    } finally {
      gone.dispose();
    }
  }
  // A host the workshop's policy binds a credential to: served by the broker, never a tunnel.
  const binding = v.decision.allowed && !v.internal ? ctx.broker?.bindingFor(l.workshopId, v.decision.host, v.decision.port) : undefined;
  if (binding && v.dial.length > 0) {
    await ctx.broker!.intercept(ctx, l, s, binding, v.dial, head);
    return;
  }
  await openTunnel(ctx, l, s, v, v.decision.port, head, {
    // Anything the client sent after the CONNECT is never read: the answer, then close.
    refused: refusal,
    unreachable: (err) => rawAnswer(502, 'UPSTREAM_FAILED', `atelier egress: ${target} could not be reached: ${err.code ?? err.message}`),
    established: 'HTTP/1.1 200 Connection Established\r\n\r\n',
  });
}

/** What a protocol answers at each step of opening a tunnel. */
export interface TunnelReplies {
  /** The decision refused the target: the last thing the client is sent. */
  refused(d: EgressDecision): string | Buffer;
  /** No checked address could be reached. */
  unreachable(err: NodeJS.ErrnoException): string | Buffer;
  /** Connected: the tunnel is open. */
  established: string | Buffer;
}

/**
 * After a decision, for CONNECT and SOCKS5 alike: a refusal is answered and the client closed; an
 * allowed target is dialed (only its checked addresses) and joined to the client, with the bytes
 * the client sent early passed on first.
 */
export async function openTunnel(
  ctx: ProxyContext,
  l: Listener,
  s: net.Socket,
  v: Verdict,
  port: number,
  early: Buffer,
  replies: TunnelReplies,
): Promise<void> {
  if (s.destroyed) return;
  if (!v.decision.allowed) {
    s.end(replies.refused(v.decision));
    s.destroySoon();
    return;
  }
  let up: Upstream;
  try {
    up = await dialTunnel(ctx, l, v.dial, port, v.internal);
  } catch (err) {
    s.end(replies.unreachable(err as NodeJS.ErrnoException));
    s.destroySoon();
    return;
  }
  if (s.destroyed) {
    up.socket.destroy();
    return;
  }
  s.write(replies.established);
  if (early.length > 0) up.socket.write(early);
  splice(ctx, l, s, up);
}

/** Connect to the first checked address that answers; never anything else. */
function dialTunnel(
  ctx: ProxyContext,
  l: Listener,
  addresses: readonly string[],
  port: number,
  internal?: InternalTarget,
): Promise<Upstream> {
  return dialFirst(addresses, internal, async (address) => {
    const reader = new RelayReader();
    const onread = { buffer: reader.buffer, callback: reader.callback };
    const up = internal
      ? connectTarget(internal, onread)
      : net.connect({ host: address, port, allowHalfOpen: true, lookup: pinnedLookup(address), onread });
    // Nothing is read before splice() has somewhere to put it.
    up.pause();
    return { socket: await connected(ctx, l, up, `${address}:${port}`), reader };
  });
}

/**
 * Join a client and an upstream. A FIN from one side is passed on (half-close) while the
 * other direction keeps flowing; an error or reset on either side ends both; no traffic
 * either way for idleTimeoutMs ends both. Either direction stops reading while the other
 * side's write buffer is full (backpressure).
 *
 * Once a tunnel is decided and dialled its bytes are opaque, so plain sockets are handed to
 * the zero-copy relay (src/relay/splice.ts): same rules, enforced by splice-relay.py, with the
 * bytes never copied through this process (CONNECT upload ran at ~0.5× of a direct connection
 * relayed here). The tunnel still counts against the workshop's connections until it ends,
 * and closing the workshop's listener cuts it (its tag).
 */
function splice(ctx: ProxyContext, l: Listener, a: net.Socket, up: Upstream): void {
  const relay = spliceRelay();
  if (relay.usable(a, up.socket)) {
    l.clients++;
    void relay.relay(a, up.socket, { tag: `egress:${l.workshopId}`, idleMs: ctx.limits.idleTimeoutMs }).finally(() => l.clients--);
    return;
  }
  const b = up.socket;
  const kill = tieSockets(a, b);
  a.setTimeout(ctx.limits.idleTimeoutMs, kill);
  b.setTimeout(ctx.limits.idleTimeoutMs, kill);
  // client → upstream: node's own read buffers (an accepted socket cannot be given reused
  // buffers through a public API; the upstream side, which we connect, can: see dialTunnel()).
  a.on('data', (chunk: Buffer) => {
    if (!b.write(chunk)) a.pause();
  });
  b.on('drain', () => a.resume());
  a.once('end', () => b.end());
  // upstream → client: reused buffers (RelayReader, set up in dialTunnel()).
  up.reader.attach(b, a);
  a.on('drain', () => b.resume());
  b.once('end', () => a.end());
  b.resume();
  a.resume();
}

/**
 * Ties the lifetimes of the two sockets of a relay: an error on either ends both; a side that
 * closes after a clean FIN has already passed it on (its 'end' ended the other side, which then
 * closes by itself once flushed), any other close ends the other side now. Returns the kill.
 */
function tieSockets(a: net.Socket, b: net.Socket): () => void {
  const kill = (): void => {
    a.destroy();
    b.destroy();
  };
  a.on('error', kill);
  b.on('error', kill);
  a.once('close', (hadError) => {
    if (hadError || !a.readableEnded) b.destroy();
  });
  b.once('close', (hadError) => {
    if (hadError || !b.readableEnded) a.destroy();
  });
  return kill;
}

/** A connected upstream of a tunnel and the reader that owns its read buffer. */
interface Upstream {
  socket: net.Socket;
  reader: RelayReader;
}

/** Bytes read at once on either side of a tunnel. */
const RELAY_BUFFER_BYTES = 128 * 1024;
/** Read buffers a tunnel direction keeps for reuse once the writes holding them complete. */
const RELAY_SPARE_BUFFERS = 2;

interface RelaySlot {
  buf: Buffer;
  release: () => void;
}

/**
 * Reads a socket into reused buffers (net's `onread`) and writes each chunk to the other side
 * of the tunnel: a fresh 64 KiB buffer per read is what made tunnels spend their time in GC.
 * A chunk the kernel took at once leaves its buffer free for the next read; a chunk that had
 * to be queued keeps its buffer until that write completes, and the next read gets a spare.
 * When the other side's write buffer is full, reading stops until it drains.
 */
class RelayReader {
  private to: net.Socket | undefined;
  private from: net.Socket | undefined;
  private slot: RelaySlot | undefined;
  private readonly spare: RelaySlot[] = [];

  attach(from: net.Socket, to: net.Socket): void {
    this.from = from;
    this.to = to;
  }

  private newSlot(): RelaySlot {
    const slot: RelaySlot = {
      buf: Buffer.allocUnsafeSlow(RELAY_BUFFER_BYTES),
      release: () => {
        if (this.spare.length < RELAY_SPARE_BUFFERS) this.spare.push(slot);
      },
    };
    return slot;
  }

  readonly buffer = (): Buffer => (this.slot ??= this.spare.pop() ?? this.newSlot()).buf;

  readonly callback = (n: number, buf: Uint8Array): boolean => {
    const to = this.to;
    const slot = this.slot;
    if (!to || !slot || to.destroyed || to.writableEnded || buf !== slot.buf) {
      // Only after the tunnel is gone (reading starts in splice()): nowhere to put the bytes.
      this.from?.destroy();
      return false;
    }
    const ok = to.write(Buffer.from(slot.buf.buffer, slot.buf.byteOffset, n), slot.release);
    // Queued rather than written: the queue holds this buffer until its write completes.
    if (to.writableLength > 0) this.slot = undefined;
    return ok;
  };
}
