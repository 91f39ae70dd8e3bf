// Dialing what a decision allowed, and nothing else: a checked address (the lookup can only
// answer that address) or the server's own target for an internal name, within connectTimeoutMs.
import net from 'node:net';
import type { Listener, ProxyContext } from './context.js';
import { describeTarget, type InternalTarget } from './types.js';

/** Connect to an internal target (a unix socket or a loopback port the server chose). */
export function connectTarget(t: InternalTarget, onread?: net.OnReadOpts): net.Socket {
  const common = { allowHalfOpen: true, ...(onread ? { onread } : {}) };
  return 'path' in t ? net.connect({ ...common, path: t.path }) : net.connect({ ...common, host: t.host, port: t.port });
}

/** Destroys `up` with an ETIMEDOUT error when it has not connected within `ms`; clear the timer on connect. */
function connectDeadline(up: net.Socket, what: string, ms: number): NodeJS.Timeout {
  return setTimeout(() => {
    const e: NodeJS.ErrnoException = new Error(`connect to ${what} timed out`);
    e.code = 'ETIMEDOUT';
    up.destroy(e);
  }, ms);
}

/** A `lookup` that can only ever answer the address that was checked. */
export function pinnedLookup(address: string): net.LookupFunction {
  const family = net.isIPv6(address) ? 6 : 4;
  return ((_host: string, opts: { all?: boolean }, cb: (...args: unknown[]) => void) => {
    if (opts?.all) cb(null, [{ address, family }]);
    else cb(null, address, family);
  }) as unknown as net.LookupFunction;
}

/** Where an upstream's reads go once it serves an exchange. */
export interface PlainReader {
  on: ((chunk: Buffer) => void) | undefined;
}

/**
 * The read buffer of every plain-HTTP upstream (net's `onread`): reads are handled at once, one
 * at a time, so one buffer serves them all; what must outlive a read (a response head still
 * incomplete, a chunk written to a client that could not take it at once) is copied.
 */
export const PLAIN_READ_BUFFER = Buffer.allocUnsafeSlow(64 * 1024);

/**
 * Try the checked addresses in turn (or the internal target alone): the first attempt that
 * connects wins; when none does, the last failure is thrown.
 */
export async function dialFirst<T>(
  addresses: readonly string[],
  internal: InternalTarget | undefined,
  attempt: (address: string) => Promise<T>,
): Promise<T> {
  let last: unknown = new Error('no address');
  for (const address of internal ? [describeTarget(internal)] : addresses) {
    try {
      return await attempt(address);
    } catch (err) {
      last = err;
    }
  }
  throw last;
}

/** `up` once connected, counted as the workshop's meanwhile; destroyed when it fails or takes longer than connectTimeoutMs. */
export function connected(ctx: ProxyContext, l: Listener, up: net.Socket, what: string): Promise<net.Socket> {
  return new Promise<net.Socket>((resolve, reject) => {
    ctx.track(l, up);
    const t = connectDeadline(up, what, ctx.limits.connectTimeoutMs);
    const fail = (err: Error): void => {
      clearTimeout(t);
      up.destroy();
      reject(err);
    };
    up.once('connect', () => {
      clearTimeout(t);
      up.off('error', fail);
      resolve(up);
    });
    up.once('error', fail);
  });
}

/** Connect to the first checked address that answers (or the internal target); a plain socket. */
export function dialPlain(
  ctx: ProxyContext,
  l: Listener,
  addresses: readonly string[],
  port: number,
  internal?: InternalTarget,
): Promise<{ sock: net.Socket; address: string; reader: PlainReader }> {
  return dialFirst(addresses, internal, async (address) => {
    // Reads land in one buffer shared by every plain upstream (see PLAIN_READ_BUFFER).
    const reader: PlainReader = { on: undefined };
    const onread: net.OnReadOpts = {
      buffer: PLAIN_READ_BUFFER,
      callback: (n: number) => {
        if (reader.on) reader.on(PLAIN_READ_BUFFER.subarray(0, n));
        // Nobody to give the bytes to yet: an upstream does not speak first.
        else up.destroy();
        return true;
      },
    };
    const up = internal
      ? connectTarget(internal, onread)
      : net.connect({ host: address, port, lookup: pinnedLookup(address), noDelay: true, onread });
    return { sock: await connected(ctx, l, up, `${address}:${port}`), address, reader };
  });
}
