import { randomBytes } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { extname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AtelierError } from '../../core/index.js';
import { issueCsrfToken, CSRF_HEADER } from './actions.js';
import type { BrowserSessions } from '../browserSessions.js';
import { principalOf } from './common.js';

/** Where `npm run build --prefix web` writes the dashboard (the repository's web/dist). */
export const WEB_DIST = fileURLToPath(new URL('../../../web/dist/', import.meta.url));

/** The dashboard's pages: scripts and styles from this origin only, nothing inline, no framing. */
export const DASHBOARD_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; connect-src 'self'; " +
  "manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** Replaced in index.html by the nonce of that response's `style-src`. */
const STYLE_NONCE_PLACEHOLDER = '__ATELIER_STYLE_NONCE__';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
};

const ENCODINGS = [
  { name: 'br', suffix: 'br' },
  { name: 'gzip', suffix: 'gz' },
] as const;

/** The content codings an `Accept-Encoding` header takes (those with q=0 refused). */
function accepted(header: string | undefined): Set<string> {
  const out = new Set<string>();
  for (const part of (header ?? '').split(',')) {
    const [token, ...params] = part.trim().toLowerCase().split(';');
    const q = params.map((p) => /^\s*q=([0-9.]+)\s*$/.exec(p)?.[1]).find((v) => v !== undefined);
    if (token && (q === undefined || Number(q) > 0)) out.add(token);
  }
  return out;
}

/** The best precompressed copy of `file` that exists and is accepted (brotli first), if any. */
async function precompressed(file: string, codings: Set<string>): Promise<(typeof ENCODINGS)[number] | undefined> {
  for (const e of ENCODINGS) {
    if (!codings.has(e.name) && !codings.has('*')) continue;
    if (
      await stat(`${file}.${e.suffix}`).then(
        (s) => s.isFile(),
        () => false,
      )
    )
      return e;
  }
  return undefined;
}

/** Paths that belong to the API and the issuer: an unknown one there is a 404, never the app. */
const NOT_THE_APP = /^\/(v1|oidc|auth|api|mcp|healthz|metrics)(\/|$)/i;

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(reply: FastifyReply, status: number, title: string, text: string, link?: { href: string; text: string }): FastifyReply {
  return reply
    .status(status)
    .headers({
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'no-store',
      'content-security-policy': "default-src 'none'; frame-ancestors 'none'; base-uri 'none'",
      'x-content-type-options': 'nosniff',
    })
    .send(
      `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">` +
        `<title>${escapeHtml(title)} · Atelier</title></head><body><main><h1>${escapeHtml(title)}</h1><p>${escapeHtml(text)}</p>` +
        (link ? `<p><a href="${escapeHtml(link.href)}">${escapeHtml(link.text)}</a></p>` : '') +
        `</main></body></html>`,
    );
}

export interface WebRouteDeps {
  sessions: BrowserSessions;
  /** The CSRF key (shared with the cockpit's write guard: one token serves both). */
  csrfKey: string;
  /** Where the built app is (tests point elsewhere). */
  dist?: string;
}

/** The dashboard: its sign-in endpoints, and the built single-page app at `/`. */
export function webRoutes(app: FastifyInstance, deps: WebRouteDeps): void {
  const PUBLIC = { config: { access: 'public' as const } };
  const dist = resolve(deps.dist ?? WEB_DIST);

  app.get<{ Querystring: { return?: string } }>('/auth/web/login', PUBLIC, async (request, reply) => {
    let begun: { location: string; cookie: string };
    try {
      begun = await deps.sessions.beginLogin(request.query.return);
    } catch (err) {
      // The server still starting, or an external issuer unreachable or misconfigured: a page that says so.
      if (!(err instanceof AtelierError)) throw err;
      return page(reply, 503, 'Dashboard sign-in unavailable', err.message, { href: '/', text: 'Back to the dashboard' });
    }
    return reply.header('set-cookie', begun.cookie).header('cache-control', 'no-store').redirect(begun.location, 303);
  });

  app.get<{ Querystring: Record<string, string | undefined> }>('/auth/web/callback', PUBLIC, async (request, reply) => {
    try {
      const { cookie, returnTo } = await deps.sessions.completeLogin(request.query, request.headers.cookie, request.ip);
      return reply
        .header('set-cookie', [cookie, ...deps.sessions.clearedCookies().slice(1)])
        .header('cache-control', 'no-store')
        .redirect(returnTo, 303);
    } catch (err) {
      if (!(err instanceof AtelierError)) throw err;
      return page(reply, err.code === 'UNAUTHENTICATED' ? 401 : 400, 'Sign-in failed', err.message, {
        href: '/',
        text: 'Back to the dashboard',
      });
    }
  });

  // What the app asks first: who is signed in (with the CSRF token its writes send back), or how to sign in.
  app.get('/auth/web/session', PUBLIC, async (request, reply) => {
    void reply.header('cache-control', 'no-store');
    let p;
    try {
      p = await deps.sessions.authenticate(request.headers.cookie, undefined);
    } catch (err) {
      if (!(err instanceof AtelierError) || (err.code !== 'UNAUTHENTICATED' && err.code !== 'TOKEN_REVOKED')) throw err;
      void reply.header('set-cookie', deps.sessions.clearedCookies());
    }
    if (!p) return { signedIn: false, signIn: { available: true, url: '/auth/web/login' } };
    const tenants = await deps.sessions.tenantsOf(p.userId);
    return {
      signedIn: true,
      user: { id: p.userId, name: p.userName },
      tenant: p.tenantName,
      role: p.role,
      tenants,
      csrf: { header: CSRF_HEADER, token: issueCsrfToken(deps.csrfKey, p.userId).token },
    };
  });

  // Cookie-authenticated writes: the onRequest hook has checked the CSRF header already.
  app.post<{ Body: { tenant?: unknown } }>('/auth/web/tenant', { config: { access: 'authenticated' } }, async (request) => {
    const tenant = request.body?.tenant;
    if (typeof tenant !== 'string' || tenant === '')
      throw new AtelierError('INVALID_ARGUMENT', 'send {"tenant": "<name>"}: one of the tenants listed by GET /auth/web/session', {
        field: 'tenant',
      });
    if (principalOf(request).via !== 'oidc' || request.headers.authorization !== undefined)
      throw new AtelierError('INVALID_ARGUMENT', 'the tenant switch is for dashboard sessions: the CLI sends x-atelier-tenant instead');
    const p = await deps.sessions.switchTenant(request.headers.cookie, tenant);
    return { tenant: p.tenantName, role: p.role };
  });

  app.post('/auth/web/logout', { config: { access: 'authenticated' } }, async (request, reply) => {
    if (request.headers.authorization !== undefined)
      throw new AtelierError('INVALID_ARGUMENT', 'sign-out here is for dashboard sessions: the CLI signs out with `atelier auth logout`');
    await deps.sessions.logout(request.headers.cookie);
    return reply.header('set-cookie', deps.sessions.clearedCookies()).send({ signedOut: true });
  });

  // The app itself: a built file if it exists, else index.html (the app routes in the browser).
  const serveApp = async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
    const url = request.url;
    let path: string;
    try {
      path = decodeURIComponent(url.split('?')[0] ?? '/');
    } catch {
      throw new AtelierError('INVALID_ARGUMENT', 'this URL is not valid percent-encoding', { field: 'path' });
    }
    if (NOT_THE_APP.test(path)) throw new AtelierError('NOT_FOUND', `no route GET ${path}: see docs/api.md`);
    const index = join(dist, 'index.html');
    const exists = await stat(index).then(
      (s) => s.isFile(),
      () => false,
    );
    if (!exists)
      return page(
        reply,
        503,
        'The dashboard is not built',
        `This server has no built dashboard at ${dist}. Build it with \`npm ci --prefix web && npm run build --prefix web\` (scripts/install.sh does), then reload this page. The API (/v1) works without it.`,
      );
    const candidate = resolve(dist, `.${path}`);
    let file = index;
    if (candidate.startsWith(dist + sep) && path !== '/') {
      const s = await stat(candidate).catch(() => undefined);
      if (s?.isFile()) file = candidate;
      else if (path.startsWith('/assets/'))
        throw new AtelierError('NOT_FOUND', `no file ${path} in this build of the dashboard: reload the page`);
    }
    // A precompressed copy (web/vite.config.ts writes NAME.br and NAME.gz) when the browser takes one.
    const encoding = file === index ? undefined : await precompressed(file, accepted(request.headers['accept-encoding']));
    let body: Buffer | string = await readFile(encoding ? `${file}.${encoding.suffix}` : file);
    let csp = DASHBOARD_CSP;
    if (file === index) {
      // A fresh nonce per load for the <style> elements the terminal (xterm.js) makes; see web/src/styleNonce.ts.
      const nonce = randomBytes(18).toString('base64');
      body = body.toString('utf8').replace(STYLE_NONCE_PLACEHOLDER, nonce);
      csp = DASHBOARD_CSP.replace("style-src 'self'", `style-src 'self' 'nonce-${nonce}'`);
    }
    const immutable = file !== index && file.startsWith(join(dist, 'assets') + sep);
    return reply
      .headers({
        'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
        ...(encoding ? { 'content-encoding': encoding.name } : {}),
        vary: 'accept-encoding',
        'cache-control': immutable ? 'public, max-age=31536000, immutable' : 'no-cache',
        'content-security-policy': csp,
        'x-content-type-options': 'nosniff',
        'x-frame-options': 'DENY',
        'referrer-policy': 'no-referrer',
        'cross-origin-opener-policy': 'same-origin',
      })
      .send(body);
  };
  app.get('/', PUBLIC, async (request, reply) => serveApp(request, reply));
  app.get('/*', PUBLIC, async (request, reply) => serveApp(request, reply));
}
