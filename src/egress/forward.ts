// The plain-HTTP forwarder: absolute-form requests (`GET http://host/path`), one at a time per
// client connection; a CONNECT read here is handed to tunnel.ts.
//
// Why a forwarder of our own rather than node:http on both sides: a proxied request through
// node's server and client is parsed twice, turned into objects, re-serialised twice and
// given an agent, which cost ~4× the CPU of squid per request (bench/egress.ts). Here the
// request head is parsed once, strictly and within maxHeaderBytes (http1.ts refuses every
// ambiguous framing a smuggling attack relies on), decided exactly as before (the one
// decide() path: canonical host, ports, addresses, ask hook, internal names, a recorded
// decision per request), rewritten to origin-form without hop-by-hop fields, and written to
// an upstream socket kept per client connection and (canonical host, port, dialed address),
// so that no upstream connection ever carries two clients' requests. Bodies are streamed by
// their framing both ways; only the response head and framing are parsed, so the next
// request on the client connection (pipelined or not) starts exactly where this answer
// ended, whatever host it names. Requests on one client connection are served one at a time.
import type net from 'node:net';
import { answerBody, rawAnswer, refusal } from './answers.js';
import { boundTarget, hostFor, parseAbsolute } from './authority.js';
import { canonicalizeHost, describeRaw } from './canonical.js';
import { type Listener, LazySignal, type ProxyContext } from './context.js';
import { badRequest, keepDecision, type Verdict } from './decide.js';
import { dialPlain, PLAIN_READ_BUFFER, type PlainReader } from './dial.js';
import { requestHeadBytes, responseHeadBytes } from './heads.js';
import { BodyFramer, HttpFramingError, parseRequestHead, parseResponseHead, type RequestHead, type ResponseHead } from './http1.js';
import {
  IDEMPOTENT,
  MAX_POOLED_PER_CLIENT,
  MAX_POOLED_PER_WORKSHOP,
  newExchange,
  newPlainConn,
  type PlainConn,
  type PlainExchange,
  type PlainUpstream,
  RESPONSE_HEAD_BYTES,
} from './plainConn.js';
import { serveConnect } from './tunnel.js';
import { describeTarget, type EgressDecision } from './types.js';

/**
 * A client connection whose requests all go to one host, decided once at its CONNECT: the
 * credential broker's (broker.ts), after it ended the client's TLS. Requests are origin-form;
 * each gets a field added (its own field of that name dropped) or is answered instead.
 */
export interface BoundRoute {
  host: string;
  port: number;
  /** Before each request leaves: the field to add, or the answer that ends the connection instead. */
  prepare(head: RequestHead): Promise<{ inject: InjectedField } | { refuse: string }>;
  /** A connection to the host at its checked address (TLS, verified), ready to write. */
  dial(): Promise<{ sock: net.Socket; address: string; reader: PlainReader }>;
}

/** A field set by the proxy: `line` (`Name: value`, checked) replaces every field the client sent named `name` (lower case). */
export interface InjectedField {
  name: string;
  line: string;
}

/** The pool key of a bound connection's one upstream. */
const BOUND_KEY = 'bound';

export class PlainForwarder {
  constructor(private readonly ctx: ProxyContext) {}

  /**
   * Serve a connection whose first byte was a letter: plain HTTP requests, or one CONNECT. With
   * `bound`: a connection (the broker's, TLS ended) whose every request goes to that route.
   */
  serve(l: Listener, s: net.Socket, bound?: BoundRoute): void {
    const p = newPlainConn(l, s);
    p.bound = bound;
    s.setNoDelay(true);
    this.ctx.setQuiet(s, () => !p.buf && !p.ex);
    s.on('data', (chunk: Buffer) => {
      if (p.done) return;
      p.buf = p.buf ? Buffer.concat([p.buf, chunk]) : chunk;
      this.pumpClient(p);
    });
    s.on('end', () => {
      p.ended = true;
      // A half-closed client still gets the answer to a request it completed; then the end.
      if (!p.ex) this.finishClient(p);
      else if (p.ex.reqBody && !p.ex.reqBody.done) this.abortExchange(p, 'the client closed before its request body was complete');
    });
    s.once('close', () => {
      p.done = true;
      if (p.ex?.up) p.ex.up.sock.destroy();
      this.drainPool(p);
      p.dnsAbort?.abort();
      if (p.dnsTimer) clearTimeout(p.dnsTimer);
    });
    s.setTimeout(this.ctx.limits.idleTimeoutMs, () => s.destroy());
    s.resume();
  }

  /** Consume what the client sent: a request head when idle, body bytes while a request is out. */
  private pumpClient(p: PlainConn): void {
    if (p.done) return;
    const cur = p.ex;
    if (cur) {
      if (cur.up && cur.reqBody && !cur.reqBody.done) this.sendBody(p, cur);
      // Bytes of a pipelined request wait (bounded: reading stops) until this answer is out.
      if (p.ex && p.buf && (!cur.reqBody || cur.reqBody.done || !cur.up)) p.s.pause();
      return;
    }
    if (!p.buf) return;
    let head: RequestHead | undefined;
    try {
      head = parseRequestHead(p.buf, this.ctx.limits.maxHeaderBytes, p.scanned);
    } catch (err) {
      if (!(err instanceof HttpFramingError)) throw err;
      this.clientFault(p, err.status, err.message);
      return;
    }
    if (!head) {
      p.scanned = p.buf.length;
      return;
    }
    this.ctx.clearHeaderDeadline(p.s);
    p.scanned = 0;
    const rest = p.buf.length > head.end ? p.buf.subarray(head.end) : undefined;
    p.buf = rest;
    if (p.bound) this.beginBound(p, head, p.bound);
    else if (head.method === 'CONNECT') this.handOverConnect(p, head.target, rest ?? Buffer.alloc(0));
    else this.beginRequest(p, head);
  }

  /** The socket becomes a tunnel (or is answered and closed): this path lets go of it. */
  private handOverConnect(p: PlainConn, authority: string, rest: Buffer): void {
    const s = p.s;
    const l = p.l;
    p.done = true;
    s.removeAllListeners('data');
    s.removeAllListeners('end');
    s.setTimeout(0);
    s.pause();
    serveConnect(this.ctx, l, authority, s, rest).catch((err: unknown) => {
      this.ctx.onError(l.workshopId, err);
      s.destroy();
    });
  }

  /** A request head (not CONNECT): refused as it stands, or an exchange that is decided, then started. */
  private beginRequest(p: PlainConn, head: RequestHead): void {
    const l = p.l;
    const target = boundTarget(head.target);
    const parsed = parseAbsolute(head.target);
    if (head.upgrade !== undefined || head.connection.has('upgrade') || head.http2Settings) {
      // Upgrade (WebSocket, h2c) on plain HTTP would turn a checked request into an unchecked
      // byte stream: refused. Clients reach wss:// and ws:// through CONNECT instead.
      const canonical = parsed ? canonicalizeHost(parsed.host) : null;
      const d: EgressDecision = {
        at: new Date(),
        protocol: 'http',
        target,
        host: canonical && canonical.kind !== 'refused' ? canonical.value : '',
        port: parsed?.port ?? 0,
        allowed: false,
        outcome: 'denied',
        reason: 'UPGRADE_REFUSED',
        message: `protocol upgrade to ${describeRaw(head.upgrade ?? '', 40)} over plain HTTP is not allowed: use CONNECT (wss://, https://)`,
      };
      this.ctx.record(l, d);
      this.closeWith(p, rawAnswer(403, d.reason, answerBody(d)));
      return;
    }
    if (!parsed) {
      const why = /^https:/i.test(head.target)
        ? 'https:// URLs go through CONNECT, not as a plain request'
        : head.target.startsWith('/')
          ? 'this is a proxy: send the absolute URL (http://host/path) or use CONNECT'
          : 'the target is not an absolute http:// URL without user info';
      const d = badRequest('http', target, why);
      this.ctx.record(l, d);
      this.closeWith(p, rawAnswer(400, d.reason, answerBody(d)));
      return;
    }
    if (head.expect !== undefined && head.expect !== '100-continue') {
      this.clientFault(p, 417, `Expect: ${describeRaw(head.expect, 40)} is not supported (only 100-continue)`);
      return;
    }
    const ex = newExchange(head, parsed, target, p.ended, this.ctx.limits.maxHeaderBytes);
    p.ex = ex;
    // Nothing more is read until the request is decided and has an upstream to go to.
    p.s.pause();
    this.decideExchange(p, ex, parsed);
  }

  /**
   * A request on a bound connection: already decided (at its CONNECT), so only checked for what
   * a bound host takes (origin-form, no upgrade), prepared (its field, or an answer), then sent.
   */
  private beginBound(p: PlainConn, head: RequestHead, b: BoundRoute): void {
    if (head.method === 'CONNECT' || head.upgrade !== undefined || head.connection.has('upgrade') || head.http2Settings) {
      // The injected field must go on every request: a CONNECT or a protocol switch would carry bytes past it.
      const what = head.method === 'CONNECT' ? 'a CONNECT' : `a protocol upgrade to ${describeRaw(head.upgrade ?? 'h2c', 40)}`;
      this.closeWith(
        p,
        rawAnswer(
          403,
          'UPGRADE_REFUSED',
          `atelier egress: ${what} is not allowed to ${hostFor(b.host)}:${b.port}, whose requests carry a bound credential`,
        ),
      );
      return;
    }
    if (!head.target.startsWith('/') && !(head.target === '*' && head.method === 'OPTIONS')) {
      this.clientFault(p, 400, 'a request inside a CONNECT tunnel names its path in origin-form (GET /path)');
      return;
    }
    if (head.expect !== undefined && head.expect !== '100-continue') {
      this.clientFault(p, 417, `Expect: ${describeRaw(head.expect, 40)} is not supported (only 100-continue)`);
      return;
    }
    const ex = newExchange(head, { path: head.target, port: b.port }, head.target, p.ended, this.ctx.limits.maxHeaderBytes);
    p.ex = ex;
    p.s.pause();
    b.prepare(head).then(
      (r) => {
        if (p.done || p.ex !== ex) return;
        if ('refuse' in r) {
          this.closeWith(p, r.refuse);
          return;
        }
        ex.inject = r.inject;
        if (ex.head.expect === '100-continue' && ex.head.minor === 1) p.s.write('HTTP/1.1 100 Continue\r\n\r\n');
        const pooled = p.pool.get(BOUND_KEY);
        if (pooled) {
          this.unpool(p, BOUND_KEY);
          ex.reused = true;
          this.attachUpstream(p, ex, pooled);
        } else this.dialUpstream(p, ex, BOUND_KEY);
      },
      (err: unknown) => {
        this.ctx.onError(p.l.workshopId, err);
        this.closeWith(p, rawAnswer(502, 'UPSTREAM_FAILED', `atelier egress: the request to ${hostFor(b.host)} could not be prepared`));
      },
    );
  }

  /** Decide an exchange (from the connection's kept decision when it still stands), then start it. */
  private decideExchange(p: PlainConn, ex: PlainExchange, parsed: { authority: string; host: string; port: number }): void {
    const l = p.l;
    const target = ex.target;
    const policyAt = l.policy;
    const gone = new LazySignal(p.s);
    const kept = p.decisions?.get(parsed.authority);
    const decided =
      kept && kept.policy === l.policy && kept.port === parsed.port
        ? this.ctx.decider.decideKept(l, p, kept, parsed.host, target, gone)
        : this.ctx.decider.decide(l, 'http', parsed.host, parsed.port, target, gone);
    decided.then(
      (v) => {
        gone.dispose();
        if (v.answers && v.decision.reason === 'ALLOW_LISTED' && l.policy && l.policy === policyAt)
          keepDecision(p, parsed.authority, l.policy, v);
        this.startExchange(p, ex, v);
      },
      (err: unknown) => {
        gone.dispose();
        this.ctx.onError(l.workshopId, err);
        this.closeWith(p, rawAnswer(502, 'UPSTREAM_FAILED', 'atelier egress: the request could not be decided'));
      },
    );
  }

  /** A malformed request: recorded, answered with `status`, and the connection closed (its framing is lost). */
  private clientFault(p: PlainConn, status: number, message: string): void {
    this.ctx.clearHeaderDeadline(p.s);
    this.ctx.record(p.l, badRequest('http', '', `malformed request: ${message}`));
    this.closeWith(p, rawAnswer(status, 'BAD_REQUEST', `atelier egress: malformed request: ${message}`));
  }

  /** Answer and close; nothing the client sends afterwards is read. */
  private closeWith(p: PlainConn, answer: string): void {
    p.done = true;
    const ex = p.ex;
    p.ex = undefined;
    if (ex?.up) ex.up.sock.destroy();
    const s = p.s;
    s.removeAllListeners('data');
    if (s.destroyed) return;
    if (s.writable) s.end(answer);
    s.destroySoon();
    // The client may never read the answer: it goes at the idle deadline like anyone else.
    s.resume();
  }

  private startExchange(p: PlainConn, ex: PlainExchange, v: Verdict): void {
    if (p.done || p.ex !== ex) return;
    const d = v.decision;
    if (!d.allowed) {
      // The request's body (if any) is never read: the answer, then close.
      this.closeWith(p, refusal(d));
      return;
    }
    ex.verdict = v;
    if (ex.head.expect === '100-continue' && ex.head.minor === 1) p.s.write('HTTP/1.1 100 Continue\r\n\r\n');
    const key = v.internal ? `internal|${describeTarget(v.internal)}` : `${d.host}|${ex.port}`;
    const pooled = p.pool.get(key);
    if (pooled) {
      this.unpool(p, key);
      // Reused only while its address is still one the decision just checked.
      if (v.internal || v.dial.includes(pooled.address)) {
        ex.reused = true;
        this.attachUpstream(p, ex, pooled);
        return;
      }
      pooled.sock.destroy();
    }
    this.dialUpstream(p, ex, key);
  }

  private dialUpstream(p: PlainConn, ex: PlainExchange, key: string): void {
    const v = ex.verdict;
    const b = p.bound;
    (b ? b.dial() : dialPlain(this.ctx, p.l, v!.dial, ex.port, v!.internal)).then(
      ({ sock, address, reader }) => {
        if (p.done || p.ex !== ex) {
          sock.destroy();
          return;
        }
        this.attachUpstream(p, ex, { sock, key, address, reader, ex: undefined });
      },
      (err: NodeJS.ErrnoException) => {
        if (p.done || p.ex !== ex) return;
        const where = b ? '' : ` (${v!.internal ? describeTarget(v!.internal) : v!.dial.join(', ')})`;
        this.closeWith(
          p,
          rawAnswer(
            502,
            'UPSTREAM_FAILED',
            `atelier egress: ${hostFor(b ? b.host : v!.decision.host)}:${ex.port}${where} could not be reached: ${err.code ?? err.message}`,
          ),
        );
      },
    );
  }

  /** Give an upstream to an exchange: listeners (once per socket), the request head, the body so far. */
  private attachUpstream(p: PlainConn, ex: PlainExchange, u: PlainUpstream): void {
    ex.up = u;
    u.ex = ex;
    const sock = u.sock;
    if (!u.listening) {
      u.listening = true;
      // `chunk` is PLAIN_READ_BUFFER: whatever outlives this call is copied (writeOut, rbuf).
      u.reader.on = (chunk: Buffer) => {
        const cur = u.ex;
        if (!cur) {
          // An idle upstream does not speak first: it is not reused.
          sock.destroy();
          return;
        }
        this.onUpstreamData(p, cur, chunk);
      };
      sock.on('end', () => this.onUpstreamGone(p, u, undefined));
      sock.on('close', () => {
        if (p.pool.get(u.key) === u) this.unpool(p, u.key);
        this.onUpstreamGone(p, u, new Error('closed'));
      });
      sock.on('drain', () => {
        if (u.ex && !p.done) p.s.resume();
      });
      sock.setTimeout(this.ctx.limits.idleTimeoutMs, () => sock.destroy());
      // Flowing, so that the end of the stream is seen ('end'); the bytes go to reader.on.
      sock.resume();
    }
    const head = ex.head;
    // RFC 9112 §3.2.2: a proxy replaces Host with the authority of the absolute URL, so a
    // request checked for one name cannot be routed by the origin to another (domain fronting).
    // A bound connection's Host is its binding's host, whatever the client wrote.
    const host = p.bound ? p.bound.host : ex.verdict!.decision.host;
    const authority = ex.port === (p.bound ? 443 : 80) ? hostFor(host) : `${hostFor(host)}:${ex.port}`;
    const bytes = requestHeadBytes(head, ex.path, authority, ex.inject);
    if (ex.reqBody && !ex.reqBody.done) {
      sock.cork();
      sock.write(bytes);
      this.sendBody(p, ex);
      sock.uncork();
    } else sock.write(bytes);
    if (!ex.reqBody || ex.reqBody.done) this.requestSent(p, ex);
  }

  /** Pass the client's buffered body bytes on, by the request's framing. */
  private sendBody(p: PlainConn, ex: PlainExchange): void {
    const framer = ex.reqBody!;
    const buf = p.buf;
    if (!ex.up) return;
    if (!buf) {
      // The rest of the body is still to come.
      p.s.resume();
      return;
    }
    const out: Buffer[] = [];
    let used: number;
    try {
      used = framer.push(buf, 0, out);
    } catch (err) {
      if (!(err instanceof HttpFramingError)) throw err;
      if (ex.headSent) p.s.destroy();
      else this.clientFault(p, err.status, err.message);
      return;
    }
    p.buf = used < buf.length ? buf.subarray(used) : undefined;
    let ok = true;
    for (const b of out) ok = ex.up.sock.write(b) && ok;
    if (framer.done) this.requestSent(p, ex);
    else if (ok) p.s.resume();
    else p.s.pause();
  }

  /** The whole request is upstream: what the client sends next is the next request, read after this answer. */
  private requestSent(p: PlainConn, ex: PlainExchange): void {
    if (p.ex !== ex) return;
    if (p.buf) p.s.pause();
    else p.s.resume();
  }

  private onUpstreamData(p: PlainConn, ex: PlainExchange, chunk: Buffer): void {
    if (p.done || p.ex !== ex) return;
    // One write to the client per read from the origin (head and body together): what is to be
    // written is collected in `out` and written at the end, or before anything else happens.
    const out: Buffer[] = [];
    try {
      this.relayAnswer(p, ex, chunk, out);
    } finally {
      this.writeOut(p, ex, out);
    }
  }

  /** Write what an origin read produced for the client, as one buffer (never a view of PLAIN_READ_BUFFER). */
  private writeOut(p: PlainConn, ex: PlainExchange, out: Buffer[]): void {
    if (out.length === 0) return;
    const s = p.s;
    if (!s.writable) {
      // Answered and ending, or gone: nothing more goes to this client.
      out.length = 0;
      return;
    }
    let ok: boolean;
    if (out.length === 1) {
      const b = out[0]!;
      ok = s.write(b.buffer === PLAIN_READ_BUFFER.buffer ? Buffer.from(b) : b);
    }
    // One read's worth (at most the read buffer, a head, chunk framing): one copy, one write.
    else ok = s.write(Buffer.concat(out));
    out.length = 0;
    // The client reads slower than the origin sends: the origin waits.
    if (!ok && ex.up && ex.res && !ex.res.done && p.ex === ex) {
      const up = ex.up.sock;
      up.pause();
      s.once('drain', () => up.resume());
    }
  }

  private relayAnswer(p: PlainConn, ex: PlainExchange, chunk: Buffer, out: Buffer[]): void {
    ex.bytesIn += chunk.length;
    let buf = chunk;
    let from = 0;
    while (from < buf.length || (ex.res && ex.res.done)) {
      if (!ex.res) {
        // The head is parsed where it is; only an incomplete one is kept, as a copy (concat), since
        // the read buffer is reused.
        const hb = ex.rbuf ? (ex.rbuf = Buffer.concat([ex.rbuf, buf.subarray(from)])) : from ? buf.subarray(from) : buf;
        let rh: ResponseHead | undefined;
        try {
          rh = parseResponseHead(hb, RESPONSE_HEAD_BYTES, ex.rscanned);
        } catch (err) {
          if (!(err instanceof HttpFramingError)) throw err;
          this.writeOut(p, ex, out);
          this.upstreamFailed(p, ex, err.message);
          return;
        }
        if (!rh) {
          ex.rbuf ??= Buffer.from(hb);
          ex.rscanned = ex.rbuf.length;
          return;
        }
        buf = hb;
        from = rh.end;
        ex.rbuf = undefined;
        ex.rscanned = 0;
        if (!this.responseHead(p, ex, rh, out)) return;
        continue;
      }
      if (ex.res.done) {
        // Bytes after the end of the answer: the origin does not frame its answers as it says.
        const extra = from < buf.length;
        this.writeOut(p, ex, out);
        this.exchangeDone(p, ex, !extra && ex.keepUp === true);
        return;
      }
      let used: number;
      try {
        used = ex.res.push(buf, from, out);
      } catch (err) {
        if (!(err instanceof HttpFramingError)) throw err;
        this.writeOut(p, ex, out);
        this.upstreamFailed(p, ex, err.message);
        return;
      }
      from += used;
      if (!ex.res.done) return;
    }
  }

  /** A response head from upstream: relayed (1xx, then the final one) with its framing decided. False when the exchange ended. */
  private responseHead(p: PlainConn, ex: PlainExchange, rh: ResponseHead, out: Buffer[]): boolean {
    const clientMinor = ex.head.minor;
    if (rh.status < 200) {
      if (rh.status === 101) {
        this.writeOut(p, ex, out);
        this.upstreamFailed(p, ex, 'the origin switched protocols without being asked to');
        return false;
      }
      // 100 was answered by the proxy itself; other interim answers (103) go to HTTP/1.1 clients.
      if (rh.status !== 100 && clientMinor === 1) out.push(responseHeadBytes(rh, '', false));
      return true;
    }
    const noBody = ex.head.method === 'HEAD' || rh.status === 204 || rh.status === 304;
    let framing: string;
    if (rh.otherCoding && !noBody) {
      // A transfer coding (gzip…) the client was never offered cannot be passed on as it is.
      this.writeOut(p, ex, out);
      this.upstreamFailed(p, ex, 'the origin answered with a transfer coding other than chunked');
      return false;
    }
    if (noBody) {
      ex.res = new BodyFramer('length', 0, true, 502, 0);
      framing = '';
    } else if (rh.chunked) {
      ex.res = new BodyFramer('chunked', 0, clientMinor === 1, 502, RESPONSE_HEAD_BYTES);
      if (clientMinor === 1) framing = 'Transfer-Encoding: chunked\r\n';
      else {
        framing = '';
        ex.close = true;
      }
    } else if (rh.contentLength !== undefined && !rh.otherCoding) {
      ex.res = new BodyFramer('length', rh.contentLength, true, 502, 0);
      framing = '';
    } else {
      // Delimited by the origin's close: so is the answer to the client.
      ex.res = new BodyFramer('close', 0, true, 502, 0);
      framing = '';
      ex.close = true;
    }
    ex.keepUp = rh.minor === 1 && !rh.connection.has('close') && ex.res.kind !== 'close';
    // A request whose body is not all upstream yet cannot be followed by another on this connection.
    if (ex.reqBody && !ex.reqBody.done) ex.close = true;
    ex.headSent = true;
    out.push(responseHeadBytes(rh, framing, ex.close));
    return true;
  }

  /** The answer is complete: the upstream goes back to this connection's pool (or away), the next request is read. */
  private exchangeDone(p: PlainConn, ex: PlainExchange, reusable: boolean): void {
    const u = ex.up;
    p.ex = undefined;
    if (u) {
      u.ex = undefined;
      if (
        reusable &&
        ex.reqBody?.done !== false &&
        !p.pool.has(u.key) &&
        p.pool.size < MAX_POOLED_PER_CLIENT &&
        p.l.pooled < MAX_POOLED_PER_WORKSHOP
      ) {
        p.pool.set(u.key, u);
        p.l.pooled++;
      } else u.sock.destroy();
    }
    if (ex.close) {
      this.finishClient(p);
      return;
    }
    this.ctx.armHeaderDeadline(p.s);
    p.s.resume();
    if (p.buf) this.pumpClient(p);
    else if (p.ended) this.finishClient(p);
  }

  private unpool(p: PlainConn, key: string): void {
    if (p.pool.delete(key)) p.l.pooled--;
  }

  /** Every idle upstream of a client connection closed (the connection is done). */
  private drainPool(p: PlainConn): void {
    for (const u of p.pool.values()) u.sock.destroy();
    p.l.pooled -= p.pool.size;
    p.pool.clear();
  }

  /** No more requests on this connection: end it once what was written is flushed. */
  private finishClient(p: PlainConn): void {
    p.done = true;
    p.s.removeAllListeners('data');
    p.s.end();
    p.s.destroySoon();
    p.s.resume();
    this.drainPool(p);
  }

  /** The upstream ended or failed while it served this exchange. */
  private onUpstreamGone(p: PlainConn, u: PlainUpstream, err: Error | undefined): void {
    const ex = u.ex;
    if (!ex || p.ex !== ex || p.done) {
      if (!err) u.sock.destroy();
      return;
    }
    if (ex.res && ex.res.kind === 'close' && !err) {
      ex.res.done = true;
      this.exchangeDone(p, ex, false);
      return;
    }
    if (ex.res?.done) return;
    // The keep-alive race: an origin closed an idle connection just as a request without a body
    // was written to it. Nothing was answered, so the request is sent once more on a fresh one.
    // Only an idempotent request (RFC 9110 §9.2.2) is retried.
    if (ex.reused && !ex.retried && ex.bytesIn === 0 && !ex.reqBody && IDEMPOTENT.has(ex.head.method)) {
      ex.retried = true;
      ex.reused = false;
      u.ex = undefined;
      ex.up = undefined;
      u.sock.destroy();
      this.dialUpstream(p, ex, u.key);
      return;
    }
    this.upstreamFailed(
      p,
      ex,
      err ? 'the connection to the origin failed' : 'the origin closed the connection before its answer was complete',
    );
  }

  /** The origin failed mid-exchange: a 502 if nothing was answered yet, else the client is cut (a truncated answer must not look whole). */
  private upstreamFailed(p: PlainConn, ex: PlainExchange, why: string): void {
    if (ex.up) {
      ex.up.ex = undefined;
      ex.up.sock.destroy();
    }
    if (ex.headSent) {
      p.done = true;
      p.s.destroy();
      return;
    }
    const host = p.bound?.host ?? ex.verdict?.decision.host;
    this.closeWith(p, rawAnswer(502, 'UPSTREAM_FAILED', `atelier egress: ${host ? `${hostFor(host)}:${ex.port}` : ex.target}: ${why}`));
  }

  /** The client stopped in the middle of its request: the exchange cannot complete. */
  private abortExchange(p: PlainConn, _why: string): void {
    p.done = true;
    if (p.ex?.up) p.ex.up.sock.destroy();
    p.ex = undefined;
    p.s.destroy();
  }
}
