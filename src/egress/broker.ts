// The credential broker: for a host a workshop's policy binds a secret to (atelier.yaml
// `egress.credentials`), a CONNECT is not a tunnel: the proxy terminates TLS with a leaf of the
// workshop's own authority (certificates.ts), reads each HTTP/1.1 request, sets the bound header
// from the secret store, and sends the request on over a new TLS connection to the decided
// address, verified against the host's trust store. The workshop never holds the value: not in
// its files, its environment, its memory or any answer. Every other host stays an end-to-end
// tunnel (tunnel.ts), untouched.
import http from 'node:http';
import https from 'node:https';
import { isIP, type Socket } from 'node:net';
import tls from 'node:tls';
import type { Authorities } from './certificates.js';
import type { Listener, ProxyContext } from './context.js';
import { TOKEN } from './bindings.js';
import { pinnedLookup, type PlainReader } from './dial.js';
import { type BoundRoute, PlainForwarder } from './forward.js';

/** One binding: requests to `host:port` leave with `header: prefix + secret + suffix`. */
export interface CredentialBinding {
  host: string;
  port: number;
  header: string;
  secret: string;
  prefix: string;
  suffix: string;
  /** A binding of an approved SECRET_REQUEST in use mode: its request, and when it ends (epoch ms). */
  grant?: { requestId: string; until: number };
}

export interface BrokerOptions {
  authorities: Authorities;
  /** The current value of a secret for a workshop; undefined when it no longer exists. */
  secretValue(workshopId: string, name: string): Promise<string | undefined>;
  /** PEM certificates upstreams are verified against (the host's trust store, plus any added). */
  upstreamCa: string[];
  /** The LLM gateway (gateway.ts): bindings every workshop has, and a look at each request to them. */
  hook?: BrokerHook | undefined;
}

/** What the broker asks of its hook (the LLM gateway) for each request to one of its bindings. */
export interface BrokerHook {
  /** A binding every workshop has for `host:port`; it wins over the workshop's own. */
  bindingFor(host: string, port: number): CredentialBinding | undefined;
  /** Before the request leaves (undefined: not one of the hook's bindings, sent as it is). */
  request(workshopId: string, binding: CredentialBinding, req: http.IncomingMessage): Promise<HookedRequest | undefined>;
}

export interface HookedRequest {
  /** Answered here, never sent on. */
  refuse?: { status: number; headers: Record<string, string>; body: string };
  /** Fields set on the request that leaves. */
  headers?: Record<string, string>;
  /** The request's body, read and possibly rewritten by the hook: sent in place of the client's. */
  body?: Buffer;
  /**
   * The upstream's answer: a copy of each chunk of its body as it passes, then `end` (also when
   * cut; may be called twice). The client's answer ends once `end` has settled.
   */
  answered(status: number, headers: http.IncomingHttpHeaders): { data(chunk: Buffer): void; end(): Promise<void> };
  /** No answer came (the upstream could not be reached, or the client left first). */
  unanswered(): void;
}

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the proxy's own: never passed on. */
const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

interface Intercepted {
  workshopId: string;
  binding: CredentialBinding;
  address: string;
  agent: https.Agent;
}

/** A field value (latin1, tab, no other control): what may be written into a head. */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** The broker's own answer on a forwarded connection (the same body and field as answer()), ending it. */
function brokerAnswer(status: number, code: string, message: string): string {
  const body = JSON.stringify({ code, message });
  return (
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? 'Error'}\r\ncontent-type: application/json\r\n` +
    `content-length: ${Buffer.byteLength(body)}\r\nx-atelier-egress: ${code}\r\nconnection: close\r\n\r\n${body}`
  );
}

function answer(res: http.ServerResponse, status: number, code: string, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ code, message });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-atelier-egress': code });
  res.end(body);
}

export class CredentialBroker {
  private readonly bindings = new Map<string, Map<string, CredentialBinding>>();
  /** Bindings of approved SECRET_REQUESTs (use mode), apart from the project's, which win for the same host. */
  private readonly granted = new Map<string, Map<string, CredentialBinding>>();
  private readonly agents = new Map<string, https.Agent>();
  private readonly conns = new WeakMap<Socket, Intercepted>();
  private readonly http: http.Server;
  /** One forwarder per proxy that hands connections over (its context: limits, tracking, journal). */
  private readonly forwarders = new WeakMap<ProxyContext, PlainForwarder>();

  constructor(private readonly opts: BrokerOptions) {
    this.http = http.createServer({ keepAlive: true }, (req, res) => void this.forward(req, res));
    this.http.on('clientError', (_err, socket) => socket.destroy());
  }

  /** Replaces a workshop's bindings; the next CONNECT sees them (connections already intercepted keep theirs). */
  setBindings(workshopId: string, bindings: readonly CredentialBinding[]): void {
    if (bindings.length === 0) {
      this.bindings.delete(workshopId);
      return;
    }
    this.bindings.set(workshopId, new Map(bindings.map((b) => [`${b.host}:${b.port}`, b])));
  }

  /** Replaces a workshop's granted bindings (each with its `grant`); one that ended stops at once, kept-alive connections included. */
  setGrantedBindings(workshopId: string, bindings: readonly CredentialBinding[]): void {
    if (bindings.length === 0) this.granted.delete(workshopId);
    else this.granted.set(workshopId, new Map(bindings.map((b) => [`${b.host}:${b.port}`, b])));
  }

  /** The PEM certificate of the workshop's authority (made now if it has none): what its tools must trust. */
  async authorityPem(workshopId: string): Promise<string> {
    return (await this.opts.authorities.authority(workshopId)).certPem;
  }

  bindingFor(workshopId: string, host: string, port: number): CredentialBinding | undefined {
    const key = `${host.toLowerCase()}:${port}`;
    const granted = this.granted.get(workshopId)?.get(key);
    // The LLM gateway's binding wins over the project's and over grants: nothing routes around the meter.
    const gateway = this.opts.hook?.bindingFor(host.toLowerCase(), port);
    if (gateway) return gateway;
    return this.bindings.get(workshopId)?.get(key) ?? (granted && granted.grant!.until > Date.now() ? granted : undefined);
  }

  /** A granted binding still live: its grant the one in force for its host, not past its end. */
  private grantLive(workshopId: string, b: CredentialBinding): boolean {
    const now = this.granted.get(workshopId)?.get(`${b.host}:${b.port}`)?.grant;
    return now !== undefined && now.requestId === b.grant!.requestId && now.until > Date.now();
  }

  /** Forgets a workshop (deleted): its bindings, its upstream connections, its authority. */
  forget(workshopId: string): void {
    this.bindings.delete(workshopId);
    this.granted.delete(workshopId);
    this.agents.get(workshopId)?.destroy();
    this.agents.delete(workshopId);
    this.opts.authorities.remove(workshopId);
  }

  close(): void {
    for (const a of this.agents.values()) a.destroy();
    this.agents.clear();
    this.http.close();
  }

  private agentOf(workshopId: string): https.Agent {
    let a = this.agents.get(workshopId);
    if (!a) {
      a = new https.Agent({ keepAlive: true, maxSockets: 32, ca: this.opts.upstreamCa });
      this.agents.set(workshopId, a);
    }
    return a;
  }

  /**
   * A CONNECT to a bound host, already decided (allowed) with its checked addresses: answered,
   * then served here request by request. `early`: what the client sent after the CONNECT.
   */
  async intercept(
    ctx: ProxyContext,
    l: Listener,
    s: Socket,
    binding: CredentialBinding,
    addresses: readonly string[],
    early: Buffer,
  ): Promise<void> {
    let context: tls.SecureContext;
    try {
      const leaf = await this.opts.authorities.leaf(l.workshopId, binding.host);
      context = tls.createSecureContext({ cert: leaf.certPem, key: leaf.keyPem });
    } catch (err) {
      ctx.onError(l.workshopId, err);
      s.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
      return;
    }
    if (s.destroyed) return;
    s.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (early.length > 0) s.unshift(early);
    const t = new tls.TLSSocket(s, { isServer: true, secureContext: context, ALPNProtocols: ['http/1.1'] });
    t.on('error', () => s.destroy());
    l.clients++;
    t.once('close', () => l.clients--);
    if (this.opts.hook?.bindingFor(binding.host, binding.port) === binding) {
      // The gateway's bindings: node:http, whose request and answer objects its hook reads.
      t.setTimeout(ctx.limits.idleTimeoutMs, () => t.destroy());
      this.conns.set(t, { workshopId: l.workshopId, binding, address: addresses[0]!, agent: this.agentOf(l.workshopId) });
      this.http.emit('connection', t);
      return;
    }
    // Every other binding: the plain-HTTP forwarder's strict parser and framing, its head
    // rewritten with the credential (about twice the requests per second of node:http on both
    // sides: bench/broker.ts).
    let f = this.forwarders.get(ctx);
    if (!f) this.forwarders.set(ctx, (f = new PlainForwarder(ctx)));
    f.serve(l, t, this.route(ctx, l, binding, addresses[0]!));
  }

  /** What the forwarder needs of a bound connection: the credential per request, and TLS connections to the host. */
  private route(ctx: ProxyContext, l: Listener, b: CredentialBinding, address: string): BoundRoute {
    const name = b.header.toLowerCase();
    // The name is checked where bindings are read (bindings.ts); checked again once here, since
    // grants and the gateway make bindings too. The value changes with the secret: per request.
    const nameOk = TOKEN.test(b.header);
    return {
      host: b.host,
      port: b.port,
      prepare: async () => {
        const c = await this.credential(l.workshopId, b);
        if ('refuse' in c) return { refuse: brokerAnswer(c.refuse.status, c.refuse.code, c.refuse.message) };
        const line = `${b.header}: ${b.prefix}${c.value}${b.suffix}`;
        // Never a field that could end the head early or smuggle another one.
        if (!nameOk || !FIELD_VALUE.test(line.slice(b.header.length + 2)))
          return {
            refuse: brokerAnswer(
              502,
              'CREDENTIAL_INVALID',
              `atelier egress: the secret ${b.secret} bound to ${b.host} is not a valid ${b.header} value (control characters or non-Latin-1 text): nothing was sent; ask a maintainer to set it again`,
            ),
          };
        return { inject: { name, line } };
      },
      dial: () =>
        new Promise((resolve, reject) => {
          const sock = tls.connect({
            host: b.host,
            port: b.port,
            servername: isIP(b.host) ? undefined : b.host,
            lookup: pinnedLookup(address),
            ca: this.opts.upstreamCa,
            ALPNProtocols: ['http/1.1'],
          });
          ctx.track(l, sock);
          sock.setNoDelay(true);
          const reader: PlainReader = { on: undefined };
          const timer = setTimeout(
            () => sock.destroy(Object.assign(new Error('connect timed out'), { code: 'ETIMEDOUT' })),
            ctx.limits.connectTimeoutMs,
          );
          const fail = (err: Error): void => {
            clearTimeout(timer);
            sock.destroy();
            reject(err);
          };
          sock.once('error', fail);
          sock.once('secureConnect', () => {
            clearTimeout(timer);
            sock.off('error', fail);
            // An upstream does not speak first: bytes with no exchange to take them end it.
            sock.on('data', (chunk: Buffer) => (reader.on ? reader.on(chunk) : sock.destroy()));
            resolve({ sock, address, reader });
          });
        }),
    };
  }

  /** The value to send for a binding now, or why nothing may be sent. */
  private async credential(
    workshopId: string,
    b: CredentialBinding,
  ): Promise<{ value: string } | { refuse: { status: number; code: string; message: string } }> {
    // A grant that ended (expired, revoked, its secret deleted) stops here, on a kept-alive connection too.
    if (b.grant && !this.grantLive(workshopId, b))
      return {
        refuse: {
          status: 403,
          code: 'CREDENTIAL_GONE',
          message: `atelier egress: the grant of ${b.secret} for ${b.host} has ended: nothing was sent; ask again (a SECRET_REQUEST in use mode)`,
        },
      };
    let value: string | undefined;
    try {
      value = await this.opts.secretValue(workshopId, b.secret);
    } catch {
      return {
        refuse: {
          status: 503,
          code: 'BROKER_UNAVAILABLE',
          message: `atelier egress: the credential for ${b.host} could not be read (the database is unavailable); try again`,
        },
      };
    }
    // Never sent on without it (nor with the client's own value in its place).
    if (value === undefined)
      return {
        refuse: {
          status: 403,
          code: 'CREDENTIAL_GONE',
          message: `atelier egress: the secret ${b.secret} bound to ${b.host} no longer exists: ask a maintainer (\`atelier secrets set ${b.secret}\`)`,
        },
      };
    return { value };
  }

  private async forward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const c = this.conns.get(req.socket);
    if (!c) return void res.destroy();
    const b = c.binding;
    const cred = await this.credential(c.workshopId, b);
    if ('refuse' in cred) return answer(res, cred.refuse.status, cred.refuse.code, cred.refuse.message);
    const value = cred.value;
    let hooked: HookedRequest | undefined;
    try {
      hooked = await this.opts.hook?.request(c.workshopId, b, req);
    } catch {
      return answer(
        res,
        503,
        'BROKER_UNAVAILABLE',
        `atelier egress: the request to ${b.host} could not be metered (the database is unavailable); try again`,
      );
    }
    if (hooked?.refuse) {
      const r = hooked.refuse;
      res.writeHead(r.status, { ...r.headers, 'content-length': Buffer.byteLength(r.body) });
      return void res.end(r.body);
    }
    const headers: http.OutgoingHttpHeaders = {};
    const name = b.header.toLowerCase();
    for (const [k, v] of Object.entries(req.headers)) if (!HOP.has(k) && k !== name && k !== 'host' && v !== undefined) headers[k] = v;
    headers.host = b.port === 443 ? b.host : `${b.host}:${b.port}`;
    headers[name] = `${b.prefix}${value}${b.suffix}`;
    if (hooked?.headers) Object.assign(headers, hooked.headers);
    if (hooked?.body) headers['content-length'] = hooked.body.length;
    let settled = false;
    const up = https.request({
      agent: c.agent,
      host: b.host,
      port: b.port,
      servername: isIP(b.host) ? undefined : b.host,
      lookup: pinnedLookup(c.address),
      method: req.method,
      path: req.url,
      headers,
    });
    up.on('response', (r) => {
      const out: http.OutgoingHttpHeaders = {};
      for (const [k, v] of Object.entries(r.headers)) if (!HOP.has(k) && v !== undefined) out[k] = v;
      res.writeHead(r.statusCode ?? 502, r.statusMessage, out);
      if (hooked && !settled) {
        settled = true;
        const tap = hooked.answered(r.statusCode ?? 502, r.headers);
        r.on('data', (chunk: Buffer) => tap.data(chunk));
        // Recorded before the client sees the end: its next request is checked against this one's spend.
        r.once('end', () => void tap.end().finally(() => res.end()));
        r.once('close', () => void tap.end());
        r.pipe(res, { end: false });
      } else r.pipe(res);
      r.on('error', () => res.destroy());
    });
    up.on('error', (err: NodeJS.ErrnoException) => {
      if (hooked && !settled) {
        settled = true;
        hooked.unanswered();
      }
      // The message names the host and the cause, never a header.
      answer(res, 502, 'UPSTREAM_FAILED', `atelier egress: ${b.host} could not be reached: ${err.code ?? err.message}`);
    });
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
      if (hooked && !settled) {
        settled = true;
        hooked.unanswered();
      }
    });
    if (hooked?.body) up.end(hooked.body);
    else req.pipe(up);
  }
}
