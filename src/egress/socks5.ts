// SOCKS5 (RFC 1928): no authentication, CONNECT only. The greeting and the request are read
// (bounded), the target goes through the same decision as HTTP's, and an allowed one becomes
// a tunnel (tunnel.ts).
import type net from 'node:net';
import { boundTarget } from './authority.js';
import { type ProxyContext, type Listener, LazySignal } from './context.js';
import { badRequest, type Verdict } from './decide.js';
import { openTunnel } from './tunnel.js';

/** Serve a connection whose first byte was 0x05. */
export function serveSocks(ctx: ProxyContext, l: Listener, s: net.Socket): void {
  let buf = Buffer.alloc(0);
  let stage: 'greeting' | 'request' = 'greeting';
  const fail = (code: number) => {
    s.end(reply(code));
    s.destroySoon();
  };
  const onData = (chunk: Buffer) => {
    buf = Buffer.concat([buf, chunk]);
    if (buf.length > 1024) {
      s.destroy();
      return;
    }
    if (stage === 'greeting') {
      if (buf.length < 2) return;
      const n = buf[1]!;
      if (buf.length < 2 + n) return;
      const methods = buf.subarray(2, 2 + n);
      buf = buf.subarray(2 + n);
      if (!methods.includes(0x00)) {
        s.end(Buffer.from([0x05, 0xff]));
        s.destroySoon();
        s.off('data', onData);
        return;
      }
      s.write(Buffer.from([0x05, 0x00]));
      stage = 'request';
    }
    if (buf.length < 5) return;
    if (buf[0] !== 0x05) {
      s.off('data', onData);
      s.destroy();
      return;
    }
    const cmd = buf[1]!;
    const atyp = buf[3]!;
    let host: string;
    let end: number;
    if (atyp === 0x01) {
      end = 4 + 4;
      if (buf.length < end + 2) return;
      host = `${buf[4]}.${buf[5]}.${buf[6]}.${buf[7]}`;
    } else if (atyp === 0x04) {
      end = 4 + 16;
      if (buf.length < end + 2) return;
      host = `[${Array.from({ length: 8 }, (_, i) => buf.readUInt16BE(4 + i * 2).toString(16)).join(':')}]`;
    } else if (atyp === 0x03) {
      const len = buf[4]!;
      end = 5 + len;
      if (buf.length < end + 2) return;
      // Domain bytes are UTF-8 (IDNA happens in canonicalisation); invalid UTF-8 becomes
      // U+FFFD, which canonicalisation refuses.
      host = buf.subarray(5, end).toString('utf8');
    } else {
      s.off('data', onData);
      fail(0x08);
      return;
    }
    const port = buf.readUInt16BE(end);
    const rest = buf.subarray(end + 2);
    s.off('data', onData);
    s.pause();
    ctx.clearHeaderDeadline(s);
    if (cmd !== 0x01) {
      const d = badRequest('socks5', `${host}:${port}`, `SOCKS5 command ${cmd} is not supported: only CONNECT`);
      d.reason = 'UNSUPPORTED';
      ctx.record(l, d);
      fail(0x07);
      return;
    }
    socksConnect(ctx, l, s, host, port, rest).catch((err: unknown) => {
      ctx.onError(l.workshopId, err);
      s.destroy();
    });
  };
  s.on('data', onData);
  s.resume();
}

async function socksConnect(ctx: ProxyContext, l: Listener, s: net.Socket, host: string, port: number, rest: Buffer): Promise<void> {
  const target = boundTarget(`${host}:${port}`);
  const gone = new LazySignal(s);
  let v: Verdict;
  try {
    v = await ctx.decider.decide(l, 'socks5', host, port, target, gone);
  } finally {
    gone.dispose();
  }
  await openTunnel(ctx, l, s, v, port, rest, {
    // 0x02 "not allowed by ruleset"; 0x04 "host unreachable" for names that do not resolve.
    refused: ({ reason: r }) =>
      reply(r === 'DNS_NOT_FOUND' || r === 'INTERNAL_UNKNOWN' || r === 'DNS_FAILED' || r === 'DNS_TIMEOUT' ? 0x04 : 0x02),
    unreachable: ({ code }) => reply(code === 'ECONNREFUSED' ? 0x05 : code === 'ETIMEDOUT' ? 0x06 : 0x01),
    established: reply(0x00),
  });
}

/** A SOCKS5 reply with its REP code (RFC 1928 §6), bound address 0.0.0.0:0. */
function reply(code: number): Buffer {
  return Buffer.from([0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0]);
}
