import { spawn } from 'node:child_process';
import { AtelierError, readClientConfig, writeClientConfig } from '../../../core/index.js';
import { credentialFromTokens, oidcConfiguration, oidcError, openIdClient, sdkFor, type Target } from '../../client.js';
import type { CommandContext } from '../../context.js';
import { printable } from '../../output.js';

/** GET /v1/auth/config: how this server's users log in (the relay endpoints are the server's own). */
export interface AuthConfig {
  kind: 'embedded' | 'external';
  issuer: string;
  clientId: string;
  scope: string;
  deviceAuthorizationEndpoint: string;
  tokenEndpoint: string;
  revocationEndpoint?: string;
  /** The issuer's ID token algorithm when it is not RS256. */
  idTokenAlg?: string;
}

export interface LoginResult {
  context: string;
  user: string;
  tenant: string;
  role: string;
  expiresAt: string | null;
}

export interface LoginOptions {
  /** false with --no-browser. */
  browser: boolean;
  /** Lines for the human at the terminal (stderr): the URL and the code. */
  say: (line: string) => void;
  /** Whether a graphical session can open a browser (DISPLAY/WAYLAND_DISPLAY set, or macOS). */
  canOpenBrowser: boolean;
}

function openBrowser(url: string): void {
  const cmd = process.platform === 'darwin' ? 'open' : 'xdg-open';
  try {
    const child = spawn(cmd, [url], { detached: true, stdio: 'ignore' });
    child.on('error', () => undefined); // no opener installed: the printed URL is enough
    child.unref();
  } catch {
    // same
  }
}

/**
 * The page to open in a browser, from the device authorization answer (the issuer's, through the
 * server): http: or https: only. Any other scheme (file:, javascript:, a custom handler) would have
 * the opener run something on this machine; refused, with a clear error.
 */
export function browserUrl(da: { verification_uri: string; verification_uri_complete?: string | undefined }): string {
  const raw = da.verification_uri_complete ?? da.verification_uri;
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:'))
    throw new AtelierError(
      'UNSUPPORTED',
      `the sign-in page given by the server, ${printable(raw)}, is not an http(s) address: not opening it in a browser (log in with --no-browser only if you trust it)`,
    );
  // The parsed form: no leading space or dash, whatever the answer had, reaches the opener.
  return url.href;
}

/**
 * `atelier auth login`: the OAuth 2.0 device flow (RFC 8628) through the server's relay.
 * Resolves 'cancelled' on Ctrl-C; nothing is saved unless the server accepts the new token.
 */
export async function login(ctx: CommandContext, opts: LoginOptions): Promise<LoginResult | 'cancelled'> {
  const target = await ctx.target();
  if (target.context === '(ATELIER_URL)')
    throw new AtelierError(
      'INVALID_ARGUMENT',
      'ATELIER_URL is set: a login is stored for a context. Add one with `atelier context add NAME --url URL`, then `atelier auth login --context NAME`',
    );
  if (!target.store)
    throw new AtelierError(
      'INVALID_ARGUMENT',
      'ATELIER_TOKEN is set and would override the login: unset it, then run `atelier auth login`',
    );
  const ac = await sdkFor(target).call('authConfig');
  const oc = await openIdClient();
  const cfg = oidcConfiguration(oc, {
    issuer: ac.issuer,
    clientId: ac.clientId,
    deviceAuthorizationEndpoint: ac.deviceAuthorizationEndpoint,
    tokenEndpoint: ac.tokenEndpoint,
    ...(ac.revocationEndpoint ? { revocationEndpoint: ac.revocationEndpoint } : {}),
    ...(ac.idTokenAlg ? { idTokenAlg: ac.idTokenAlg } : {}),
  });

  const cancel = new AbortController();
  const onSigint = (): void => cancel.abort(new Error('cancelled'));
  process.once('SIGINT', onSigint);
  const cancelled = new Promise<'cancelled'>((resolve) =>
    cancel.signal.addEventListener('abort', () => resolve('cancelled'), { once: true }),
  );
  try {
    const started = await Promise.race([
      oc.initiateDeviceAuthorization(cfg, { scope: ac.scope }).catch(async (err: unknown) => {
        throw await oidcError(err, target, 'starting the login');
      }),
      cancelled,
    ]);
    if (started === 'cancelled') return 'cancelled';
    const da = started;
    opts.say(`To log in to ${target.url} (context ${target.context}), open this page in a browser:`);
    opts.say(`  ${printable(da.verification_uri)}`);
    opts.say(`and enter the code: ${printable(da.user_code)}`);
    if (da.verification_uri_complete) opts.say(`(or open ${printable(da.verification_uri_complete)} where the code is filled in)`);
    // Printed first, checked before opening: a page that is not http(s) is never opened.
    if (opts.browser && opts.canOpenBrowser) openBrowser(browserUrl(da));
    opts.say('Waiting for the approval in the browser (Ctrl-C to cancel)...');

    const expiry = AbortSignal.timeout(da.expires_in * 1000);
    const signal = AbortSignal.any([cancel.signal, expiry]);
    const polled = await Promise.race([
      oc.pollDeviceAuthorizationGrant(cfg, da, undefined, { signal }).catch(async (err: unknown) => {
        if (cancel.signal.aborted) return 'cancelled' as const;
        const e = err as { error?: string; code?: string };
        if (e.error === 'expired_token' || expiry.aborted || e.code === 'OAUTH_TIMEOUT')
          throw new AtelierError(
            'UNAUTHENTICATED',
            `the code ${da.user_code} expired before it was approved: run \`atelier auth login\` again`,
          );
        if (e.error === 'access_denied')
          throw new AtelierError('PERMISSION_DENIED', `the login was denied in the browser: run \`atelier auth login\` again to retry`);
        throw await oidcError(err, target, 'the login');
      }),
      cancelled,
    ]);
    if (polled === 'cancelled') return 'cancelled';

    const credential = credentialFromTokens(polled, {
      issuer: ac.issuer,
      clientId: ac.clientId,
      tokenEndpoint: ac.tokenEndpoint,
      ...(ac.revocationEndpoint ? { revocationEndpoint: ac.revocationEndpoint } : {}),
      ...(ac.idTokenAlg ? { idTokenAlg: ac.idTokenAlg } : {}),
    });
    // The server must accept the token before anything is saved.
    const probe: Target = { ...target, credential, store: undefined, auth: 'oidc' };
    const me = await sdkFor(probe).call('whoami');
    if (cancel.signal.aborted) return 'cancelled';
    target.store?.set(target.context, credential);
    const cc = await readClientConfig(ctx.config.configDir);
    const entry = cc.contexts.find((c) => c.name === target.context);
    if (entry && entry.auth !== 'oidc') {
      entry.auth = 'oidc';
      await writeClientConfig(ctx.config.configDir, cc);
    }
    return { context: target.context, user: me.user.name, tenant: me.tenant.name, role: me.role, expiresAt: credential.expiresAt };
  } finally {
    process.removeListener('SIGINT', onSigint);
  }
}
