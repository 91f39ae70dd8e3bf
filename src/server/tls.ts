// HTTPS beside the plain listener: the same app served with the certificate files named by
// ATELIER_TLS_CERT / ATELIER_TLS_KEY, re-read when they change (a renewal replaces them), the
// ACME http-01 answers `atelier server install` leaves in DATA_DIR/acme-challenge, and a
// redirect to HTTPS for plain requests from other machines (see docs/server.md, TLS).
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { createSecureContext } from 'node:tls';
import type { FastifyInstance } from 'fastify';
import { parseListen } from '../core/index.js';

/** How often the certificate files are looked at (a renewed certificate is served within this). */
const RELOAD_MS = 2000;
const TOKEN = /^[A-Za-z0-9_-]{1,128}$/;

type Log = { info: (o: object, m: string) => void; warn: (o: object, m: string) => void };

/** GET /.well-known/acme-challenge/:token: the key authorization the installer wrote for the CA to fetch. */
export function acmeChallengeRoutes(app: FastifyInstance, dir: string): void {
  app.get<{ Params: { token: string } }>(
    '/.well-known/acme-challenge/:token',
    { config: { access: 'public' as const } },
    async (request, reply) => {
      const { token } = request.params;
      const file = join(dir, token);
      if (!TOKEN.test(token) || !existsSync(file))
        return reply
          .code(404)
          .send({ code: 'NOT_FOUND', message: 'no such ACME challenge (they exist only while a certificate is asked for)' });
      return reply.type('text/plain').send(readFileSync(file, 'utf8').trim());
    },
  );
}

function loopback(address: string | undefined): boolean {
  if (!address) return false;
  const a = address.startsWith('::ffff:') ? address.slice(7) : address;
  return a === '::1' || (isIP(a) === 4 && a.startsWith('127.'));
}

/**
 * Plain HTTP from another machine is sent to HTTPS (308, same path): the plain listener stays for
 * this machine (the local CLI, the service's health check) and for ACME challenges.
 */
export function redirectToHttps(app: FastifyInstance, httpsPort: () => number | undefined): void {
  app.addHook('onRequest', async (request, reply) => {
    const socket = request.raw.socket as { encrypted?: boolean; remoteAddress?: string };
    const port = httpsPort();
    if (port === undefined || socket.encrypted || loopback(socket.remoteAddress)) return;
    if (request.url.startsWith('/.well-known/acme-challenge/')) return;
    const host = (request.headers.host ?? '').replace(/:\d+$/, '');
    if (!/^[A-Za-z0-9.-]+$|^\[[0-9a-fA-F:.]+\]$/.test(host))
      return reply
        .code(400)
        .send({ code: 'INVALID_ARGUMENT', message: 'this server answers plain HTTP with a redirect to HTTPS: send a Host header' });
    return reply.redirect(`https://${host}${port === 443 ? '' : `:${port}`}${request.url}`, 308);
  });
}

export interface HttpsListener {
  /** The port HTTPS is served on, once the certificate was loaded. */
  port(): number | undefined;
  close(): Promise<void>;
}

/**
 * Serves `app` over HTTPS on `tls.listen` as soon as the certificate and key can be read, and
 * swaps in new files when they change (checked every 2 s), keeping the last good pair otherwise.
 */
export function serveHttps(app: FastifyInstance, tls: { cert: string; key: string; listen: string }, log: Log): HttpsListener {
  const { host, port } = parseListen(tls.listen);
  let server: Server | undefined;
  let bound: number | undefined;
  let seen = '';
  let warned = '';
  const check = async (): Promise<void> => {
    let pair: { cert: Buffer; key: Buffer };
    let stamp: string;
    try {
      stamp = [tls.cert, tls.key].map((f) => `${statSync(f).mtimeMs}:${statSync(f).size}`).join(' ');
      if (stamp === seen) return;
      pair = { cert: readFileSync(tls.cert), key: readFileSync(tls.key) };
      createSecureContext(pair); // throws on a key that does not match, or an unreadable PEM
    } catch (err) {
      const why = (err as Error).message;
      // Absent files are normal while `atelier server install` is making them.
      if (why !== warned && (err as NodeJS.ErrnoException).code === 'ENOENT' && !server)
        log.info({ err: why, cert: tls.cert }, 'HTTPS waits for the certificate files');
      else if (why !== warned)
        log.warn(
          { err: why, cert: tls.cert },
          server ? 'new TLS files unusable: keeping the certificate served' : 'HTTPS waits for usable certificate files',
        );
      warned = why;
      return;
    }
    seen = stamp;
    warned = '';
    const fingerprint = createHash('sha256').update(pair.cert).digest('hex').slice(0, 16);
    if (server) {
      server.setSecureContext(pair);
      log.info({ cert: tls.cert, fingerprint }, 'TLS certificate reloaded');
      return;
    }
    const s = createServer(pair, (req, res) => app.routing(req, res));
    // WebSockets (terminals, port-forward) reach the app's own upgrade handling.
    s.on('upgrade', (req, socket, head) => app.server.emit('upgrade', req, socket, head));
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(port, host, () => resolve());
    }).catch((err: Error) => {
      log.warn({ err: err.message, listen: tls.listen }, 'HTTPS could not listen');
      seen = '';
      throw err;
    });
    server = s;
    const addr = s.address();
    bound = typeof addr === 'object' && addr ? addr.port : port;
    log.info({ listen: `${host}:${bound}`, cert: tls.cert, fingerprint }, 'serving HTTPS');
  };
  let running = check().catch(() => undefined);
  const timer = setInterval(() => {
    running = running.then(() => check()).catch(() => undefined);
  }, RELOAD_MS);
  timer.unref();
  return {
    port: () => bound,
    async close() {
      clearInterval(timer);
      await running;
      const s = server;
      if (!s) return;
      s.closeAllConnections();
      await new Promise<void>((r) => s.close(() => r()));
    },
  };
}
