import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as oc from 'openid-client';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { TestServer } from './helpers/server.js';
import { Browser, textOf, type Page } from './helpers/browser.js';

// The embedded OIDC issuer through the real server: the CLI's OAuth client (openid-client) on
// the relay endpoints, and a browser (cookie jar, forms, no script) on the server's own pages.

interface AuthConfig {
  kind: string;
  issuer: string;
  clientId: string;
  scope: string;
  deviceAuthorizationEndpoint: string;
  tokenEndpoint: string;
  revocationEndpoint: string;
}

const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';

describe('embedded OIDC issuer', () => {
  let server: TestServer;
  let cfg: AuthConfig;
  let client: oc.Configuration;
  let adminPassword: string;

  before(async () => {
    server = await TestServer.start();
    cfg = (await (await fetch(`${server.url}/v1/auth/config`)).json()) as AuthConfig;
    client = new oc.Configuration(
      {
        issuer: cfg.issuer,
        device_authorization_endpoint: cfg.deviceAuthorizationEndpoint,
        token_endpoint: cfg.tokenEndpoint,
        revocation_endpoint: cfg.revocationEndpoint,
      },
      cfg.clientId,
      undefined,
      oc.None(),
    );
    oc.allowInsecureRequests(client);
  });

  after(async () => {
    await server?.dispose();
  });

  /** Starts a device authorization as the CLI does; polling runs meanwhile (fast, for the test). */
  async function startDevice(): Promise<{ da: oc.DeviceAuthorizationResponse; tokens: Promise<oc.TokenEndpointResponse> }> {
    const da = await oc.initiateDeviceAuthorization(client, { scope: cfg.scope });
    const tokens = oc.pollDeviceAuthorizationGrant(client, { ...da, interval: 0.2 });
    tokens.catch(() => undefined); // observed by the test that awaits it
    return { da, tokens };
  }

  /** Opens verification_uri_complete and confirms the code: the sign-in page (or the next step) comes back. */
  async function openAndConfirm(browser: Browser, da: oc.DeviceAuthorizationResponse): Promise<Page> {
    let page = await browser.get(da.verification_uri_complete!);
    page = await browser.submit(page); // the auto-submitting form (no script here)
    assert.match(textOf(page.html), /Is this your device\?/);
    assert.ok(textOf(page.html).includes(da.user_code), 'the confirmation page shows the code to compare');
    return browser.submit(page, { button: 'Continue' });
  }

  async function signIn(browser: Browser, page: Page, username: string, password: string): Promise<Page> {
    assert.match(textOf(page.html), /Sign in to Atelier/, textOf(page.html));
    return browser.submit(page, { form: 'login', fields: { username, password } });
  }

  function errorOf(page: Page): string {
    return textOf(/<p class="error"[^>]*>([\s\S]*?)<\/p>/.exec(page.html)?.[1] ?? '');
  }

  async function whoami(accessToken: string): Promise<{ status: number; body: { user?: { name: string }; via?: string; code?: string } }> {
    const r = await fetch(`${server.url}/v1/auth/whoami`, { headers: { authorization: `Bearer ${accessToken}` } });
    return { status: r.status, body: (await r.json()) as { user?: { name: string }; via?: string } };
  }

  async function relayToken(params: Record<string, string>): Promise<{ status: number; body: Record<string, unknown> }> {
    const r = await fetch(cfg.tokenEndpoint, {
      method: 'POST',
      headers: FORM,
      body: new URLSearchParams({ client_id: cfg.clientId, ...params }),
    });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  }

  /** A local user created by the admin API, signed in once (password changed): its tokens. */
  async function newUserTokens(name: string): Promise<{ tokens: oc.TokenEndpointResponse; password: string }> {
    const created = await server.api<{ temporaryPassword: string }>('POST', '/v1/users', { name, role: 'member' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const browser = new Browser();
    const { da, tokens } = await startDevice();
    let page = await signIn(browser, await openAndConfirm(browser, da), name, created.body.temporaryPassword);
    const password = `chosen password for ${name.length} letters`;
    page = await browser.submit(page, { form: 'change-password', fields: { password, confirm: password } });
    page = await browser.submit(page, { form: 'consent', button: 'Allow' });
    assert.match(textOf(page.html), new RegExp(`signed in as ${name}`));
    return { tokens: await tokens, password };
  }

  it('publishes where the CLI signs in, all through the server', () => {
    assert.equal(cfg.kind, 'embedded');
    assert.equal(cfg.issuer, `${server.url}/oidc`);
    assert.equal(cfg.clientId, 'atelier-cli');
    assert.equal(cfg.scope, 'openid profile offline_access');
    assert.equal(cfg.tokenEndpoint, `${server.url}/v1/auth/device/token`);
  });

  it('device flow: first sign-in changes the temporary password, asks consent, and the CLI gets JWT access and refresh tokens', async () => {
    assert.ok(server.password, 'the first start wrote the admin password');
    const browser = new Browser();
    const { da, tokens } = await startDevice();
    assert.match(da.user_code, /^[A-Z]{4}-[A-Z]{4}$/);
    let page = await signIn(browser, await openAndConfirm(browser, da), 'admin', server.password);
    assert.match(textOf(page.html), /Choose a new password/);

    // Refused: too short, then two different entries, then the temporary one again; each says why.
    page = await browser.submit(page, { form: 'change-password', fields: { password: 'short', confirm: 'short' } });
    assert.match(errorOf(page), /at least 12 characters/);
    page = await browser.submit(page, {
      form: 'change-password',
      fields: { password: 'correct horse battery', confirm: 'correct horse batterY' },
    });
    assert.match(errorOf(page), /the two passwords differ/);
    page = await browser.submit(page, { form: 'change-password', fields: { password: server.password, confirm: server.password } });
    assert.match(errorOf(page), /not the one you were given/);

    adminPassword = 'correct horse battery staple';
    page = await browser.submit(page, { form: 'change-password', fields: { password: adminPassword, confirm: adminPassword } });
    assert.match(textOf(page.html), /Allow access\?/);
    assert.match(textOf(page.html), /Atelier CLI wants to act as admin/);
    assert.match(textOf(page.html), /stay signed in/, 'the consent page lists the scopes');
    page = await browser.submit(page, { form: 'consent', button: 'Allow' });
    assert.match(textOf(page.html), /You are signed in as admin/);

    const t = await tokens;
    assert.ok(t.refresh_token, 'a refresh token is issued');
    assert.ok(t.id_token);
    const claims = decodeJwt(t.access_token);
    assert.equal(decodeProtectedHeader(t.access_token).alg, 'RS256');
    assert.equal(claims.iss, cfg.issuer);
    assert.equal(claims.aud, 'atelier');
    assert.equal(claims.sub, 'u-admin');
    assert.ok(claims.exp! - claims.iat! <= 600);
    const me = await whoami(t.access_token);
    assert.equal(me.status, 200, JSON.stringify(me.body));
    assert.equal(me.body.user?.name, 'admin');
    assert.equal(me.body.via, 'oidc');

    // The temporary password no longer works; the chosen one does (a new browser: no session).
    const other = new Browser();
    const second = await startDevice();
    let p2 = await signIn(other, await openAndConfirm(other, second.da), 'admin', server.password);
    assert.equal(errorOf(p2), 'Wrong user name or password.');
    p2 = await other.submit(p2, { form: 'login', fields: { username: 'admin', password: adminPassword } });
    assert.match(textOf(p2.html), /Allow access\?/);
    p2 = await other.submit(p2, { form: 'consent', button: 'Allow' });
    assert.ok((await second.tokens).access_token);

    // Refresh rotates: the new refresh token works, the used one no longer does.
    const refreshed = await oc.refreshTokenGrant(client, t.refresh_token);
    assert.notEqual(refreshed.refresh_token, t.refresh_token);
    assert.equal((await whoami(refreshed.access_token)).status, 200);
    const reused = await relayToken({ grant_type: 'refresh_token', refresh_token: t.refresh_token });
    assert.equal(reused.status, 400);
    assert.equal(reused.body.error, 'invalid_grant');

    // Logout: the CLI revokes its refresh token through the relay; it cannot be used any more.
    await oc.tokenRevocation(client, refreshed.refresh_token!, { token_type_hint: 'refresh_token' });
    const revoked = await relayToken({ grant_type: 'refresh_token', refresh_token: refreshed.refresh_token! });
    assert.equal(revoked.body.error, 'invalid_grant');
  });

  it('the relay passes RFC 8628 answers through and refuses what is not OAuth', async () => {
    const da = await oc.initiateDeviceAuthorization(client, { scope: cfg.scope });
    const pending = await relayToken({ grant_type: DEVICE_GRANT, device_code: da.device_code });
    assert.equal(pending.status, 400);
    assert.equal(pending.body.error, 'authorization_pending');

    const unknown = await relayToken({ grant_type: DEVICE_GRANT, device_code: 'not-a-device-code' });
    assert.equal(unknown.body.error, 'invalid_grant');

    const password = await relayToken({ grant_type: 'password', username: 'admin', password: 'x' });
    assert.equal(password.status, 400);
    assert.equal(password.body.error, 'unsupported_grant_type');

    const otherClient = await fetch(cfg.deviceAuthorizationEndpoint, {
      method: 'POST',
      headers: FORM,
      body: new URLSearchParams({ client_id: 'someone-else', scope: 'openid' }),
    });
    assert.equal(otherClient.status, 401);
    assert.equal(((await otherClient.json()) as { error: string }).error, 'invalid_client');

    const json = await fetch(cfg.tokenEndpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"grant_type":"refresh_token"}',
    });
    assert.equal(json.status, 400);
    assert.equal(((await json.json()) as { error: string }).error, 'invalid_request');

    const empty = await fetch(cfg.tokenEndpoint, { method: 'POST' });
    assert.equal(empty.status, 400);
  });

  it('a wrong user code gives a clear page where the right one can be typed', async () => {
    const browser = new Browser();
    const { da, tokens } = await startDevice();
    let page = await browser.get(da.verification_uri!);
    assert.match(textOf(page.html), /Type the code your terminal shows/);
    page = await browser.submit(page, { form: 'user-code', fields: { user_code: 'BCDF-GHJK' } });
    assert.equal(page.status, 400);
    assert.match(errorOf(page), /The code BCDF-GHJK is not valid: check the code in your terminal and type it again/);
    // Retyped on the same page, lower case and without the dash: accepted.
    page = await browser.submit(page, { form: 'user-code', fields: { user_code: da.user_code.toLowerCase().replace('-', '') } });
    assert.match(textOf(page.html), /Is this your device\?/);
    page = await browser.submit(page, { button: 'Continue' });
    page = await signIn(browser, page, 'admin', adminPassword);
    page = await browser.submit(page, { form: 'consent', button: 'Allow' });
    assert.match(textOf(page.html), /signed in as admin/);
    assert.ok((await tokens).access_token);

    // The same code again, now used: said so.
    page = await browser.get(da.verification_uri!);
    page = await browser.submit(page, { form: 'user-code', fields: { user_code: da.user_code } });
    assert.match(errorOf(page), /already used/);
  });

  it('Deny on the consent page, or Cancel on the device page, tells the CLI access_denied', async () => {
    const browser = new Browser();
    const denied = await startDevice();
    let page = await signIn(browser, await openAndConfirm(browser, denied.da), 'admin', adminPassword);
    page = await browser.submit(page, { form: 'consent', button: 'Deny' });
    assert.match(textOf(page.html), /Sign-in cancelled/);
    await assert.rejects(denied.tokens, (err: oc.ResponseBodyError) => err.error === 'access_denied');

    const cancelled = await startDevice();
    page = await browser.get(cancelled.da.verification_uri_complete!);
    page = await browser.submit(page);
    page = await browser.submit(page, { button: 'Cancel' });
    assert.match(textOf(page.html), /Sign-in cancelled/);
    await assert.rejects(cancelled.tokens, (err: oc.ResponseBodyError) => err.error === 'access_denied');
  });

  it('wrong passwords are limited per user name, with one message for unknown users and wrong passwords', async () => {
    const created = await server.api<{ temporaryPassword: string }>('POST', '/v1/users', { name: 'bob', role: 'member' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const browser = new Browser();
    const { da } = await startDevice();
    let page = await openAndConfirm(browser, da);

    const unknown = await browser.submit(page, { form: 'login', fields: { username: 'nobody-here', password: 'whatever-password' } });
    page = await browser.submit(page, { form: 'login', fields: { username: 'bob', password: 'wrong-password-1' } });
    assert.equal(errorOf(page), 'Wrong user name or password.');
    assert.equal(errorOf(unknown), errorOf(page), 'an unknown user and a wrong password read the same');
    assert.equal(unknown.status, page.status);
    for (let i = 2; i <= 5; i++) {
      page = await browser.submit(page, { form: 'login', fields: { username: 'bob', password: `wrong-password-${i}` } });
      assert.equal(errorOf(page), 'Wrong user name or password.');
    }
    // Sixth try, even with the right password: refused for a while, and says for how long.
    page = await browser.submit(page, { form: 'login', fields: { username: 'bob', password: created.body.temporaryPassword } });
    assert.equal(page.status, 429);
    assert.match(errorOf(page), /^Too many attempts: try again in \d+ s\.$/);
    const seconds = Number(/in (\d+) s/.exec(errorOf(page))![1]);
    assert.ok(seconds > 800 && seconds <= 900, `${seconds}`);
    // Another name from the same browser is not locked out by bob's failures.
    page = await browser.submit(page, { form: 'login', fields: { username: 'admin', password: adminPassword } });
    assert.match(textOf(page.html), /Allow access\?/);
  });

  it('a form without its CSRF token, or an interaction of another browser, is refused with a page that says what to do', async () => {
    const browser = new Browser();
    const { da } = await startDevice();
    const page = await openAndConfirm(browser, da);
    const action = /action="([^"]+\/login)"/.exec(page.html)![1]!;
    const forged = await browser.request('POST', new URL(action, page.url).href, { username: 'admin', password: adminPassword });
    assert.equal(forged.status, 403);
    assert.match(textOf(forged.html), /run `atelier auth login` again/);

    const stranger = new Browser();
    const elsewhere = await stranger.get(page.url);
    assert.equal(elsewhere.status, 400);
    assert.match(textOf(elsewhere.html), /expired or was started in another browser/);
  });

  it('a disabled user can neither sign in nor refresh', async () => {
    const { tokens, password } = await newUserTokens('carol');
    assert.equal((await whoami(tokens.access_token)).status, 200);
    const disabled = await server.api('POST', '/v1/users/carol/disable');
    assert.equal(disabled.status, 200, JSON.stringify(disabled.body));

    const refresh = await relayToken({ grant_type: 'refresh_token', refresh_token: tokens.refresh_token! });
    assert.equal(refresh.status, 400);
    assert.equal(refresh.body.error, 'invalid_grant');

    const browser = new Browser();
    const { da } = await startDevice();
    const page = await signIn(browser, await openAndConfirm(browser, da), 'carol', password);
    assert.match(errorOf(page), /This account is disabled: ask an administrator/);
  });

  it('key rotation: tokens signed before stay valid, refresh keeps working, new tokens use the new key', async () => {
    const { tokens } = await newUserTokens('dave');
    const oldKid = decodeProtectedHeader(tokens.access_token).kid;

    const asMember = await fetch(`${server.url}/v1/admin/signing-keys/rotate`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tokens.access_token}` },
    });
    assert.equal(asMember.status, 403, 'only admins rotate keys');

    const rotated = await server.api<{ kid: string }>('POST', '/v1/admin/signing-keys/rotate');
    assert.equal(rotated.status, 200, JSON.stringify(rotated.body));
    assert.notEqual(rotated.body.kid, oldKid);

    const jwks = (await (await fetch(`${cfg.issuer}/jwks`)).json()) as { keys: { kid: string; d?: string }[] };
    const kids = jwks.keys.map((k) => k.kid);
    assert.ok(kids.includes(oldKid!) && kids.includes(rotated.body.kid), `${kids.join(',')}`);
    assert.ok(
      jwks.keys.every((k) => k.d === undefined),
      'no private key material is published',
    );

    assert.equal((await whoami(tokens.access_token)).status, 200, 'a token signed with the retired key still verifies');
    const refreshed = await oc.refreshTokenGrant(client, tokens.refresh_token!);
    assert.equal(decodeProtectedHeader(refreshed.access_token).kid, rotated.body.kid);
    assert.equal((await whoami(refreshed.access_token)).status, 200);
  });

  it('a server restart logs nobody out: refresh tokens, keys and the issuer survive', async () => {
    const { tokens } = await newUserTokens('erin');
    const port = new URL(server.url).port;
    await server.stop();
    // Same address after the restart, as a real deployment has.
    server.extraArgs.push('--listen', `127.0.0.1:${port}`);
    await server.boot();
    assert.equal(server.url, `http://127.0.0.1:${port}`);

    assert.equal((await whoami(tokens.access_token)).status, 200, 'an access token from before the restart still verifies');
    const refreshed = await oc.refreshTokenGrant(client, tokens.refresh_token!);
    const me = await whoami(refreshed.access_token);
    assert.equal(me.status, 200);
    assert.equal(me.body.user?.name, 'erin');
  });
});
