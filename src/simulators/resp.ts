import { connect } from 'node:net';
import { assertSocket } from './socketGuard.js';

/** A reply of the Redis protocol (RESP2), as far as readiness and reset need it. */
export type RespReply = string | number | null | Error | RespReply[];

function encode(args: string[]): string {
  return `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
}

/** Parses one reply from `buf` at `at`; undefined when more bytes are needed. */
function parse(buf: Buffer, at: number): { value: RespReply; next: number } | undefined {
  const eol = buf.indexOf('\r\n', at);
  if (eol < 0) return undefined;
  const line = buf.toString('utf8', at + 1, eol);
  switch (String.fromCharCode(buf[at]!)) {
    case '+':
      return { value: line, next: eol + 2 };
    case '-':
      return { value: new Error(line), next: eol + 2 };
    case ':':
      return { value: Number(line), next: eol + 2 };
    case '$': {
      const n = Number(line);
      if (n < 0) return { value: null, next: eol + 2 };
      if (buf.length < eol + 2 + n + 2) return undefined;
      return { value: buf.toString('utf8', eol + 2, eol + 2 + n), next: eol + 2 + n + 2 };
    }
    case '*': {
      const n = Number(line);
      if (n < 0) return { value: null, next: eol + 2 };
      const items: RespReply[] = [];
      let next = eol + 2;
      for (let i = 0; i < n; i++) {
        const item = parse(buf, next);
        if (!item) return undefined;
        items.push(item.value);
        next = item.next;
      }
      return { value: items, next };
    }
    default:
      throw new Error(`unexpected reply from redis: ${JSON.stringify(buf.toString('utf8', at, eol))}`);
  }
}

/**
 * Sends one command to the Redis server at the unix socket `path` and returns its reply (a
 * server error comes back as an Error value, a connection failure rejects). A few lines of
 * RESP instead of a client library: readiness and reset need only PING and FLUSHALL.
 */
export function respCommand(path: string, args: string[], timeoutMs = 2000): Promise<RespReply> {
  try {
    assertSocket(path);
  } catch (err) {
    return Promise.reject(err as Error);
  }
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no reply from redis at ${path} within ${timeoutMs} ms`));
    }, timeoutMs);
    const done = (err: Error | undefined, value?: RespReply): void => {
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve(value ?? null);
    };
    socket.on('connect', () => socket.write(encode(args)));
    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      try {
        const reply = parse(buf, 0);
        if (reply) done(undefined, reply.value);
      } catch (err) {
        done(err as Error);
      }
    });
    socket.on('error', (err) => done(err));
    socket.on('end', () => done(new Error(`redis at ${path} closed the connection without a reply`)));
  });
}
