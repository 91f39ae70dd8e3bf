import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as oc from 'openid-client';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { AtelierError } from '../src/core/index.js';
import { browserUrl } from '../src/cli/commands/auth/login.js';
import { errorHandler } from '../src/server/errors.js';
import { authRoutes, type IssuerInfo } from '../src/server/routes/auth.js';
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

/** A server's sign-in settings and the CLI's OAuth client for them. */
interface Harness {
  cfg: AuthConfig;
  client: oc.Configuration;
}

async function connect(server: TestServer): Promise<Harness> {
  const cfg = (await (await fetch(`${server.url}/v1/auth/config`)).json()) as AuthConfig;
  const client = new oc.Configuration(
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
  return { cfg, client };
}

/** Starts a device authorization as the CLI does; polling runs meanwhile (fast, for the test). */
async function startDeviceOn(on: Harness): Promise<{ da: oc.DeviceAuthorizationResponse; tokens: Promise<oc.TokenEndpointResponse> }> {
  const da = await oc.initiateDeviceAuthorization(on.client, { scope: on.cfg.scope });
  const tokens = oc.pollDeviceAuthorizationGrant(on.client, { ...da, interval: 0.2 });
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

function countBy<T>(items: T[], key: (item: T) => string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const i of items) out[key(i)] = (out[key(i)] ?? 0) + 1;
  return out;
}

describe('embedded OIDC issuer', () => {
  let server: TestServer;
  let cfg: AuthConfig;
  let client: oc.Configuration;
  let adminPassword: string;

  before(async () => {
    server = await TestServer.start();
    ({ cfg, client } = await connect(server));
  });

  after(async () => {
    await server?.dispose();
  });

  function startDevice(): ReturnType<typeof startDeviceOn> {
    return startDeviceOn({ cfg, client });
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

  /** A raw form POST (duplicates and NUL bytes as given): status and JSON body. */
  async function post(url: string, body: string): Promise<{ status: number; body: Record<string, unknown> }> {
    const r = await fetch(url, { method: 'POST', headers: { ...FORM, accept: 'application/json' }, body });
    const text = await r.text();
    return { status: r.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
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

  it('the first-login password form signs nobody in once the password was changed elsewhere', async () => {
    const created = await server.api<{ temporaryPassword: string }>('POST', '/v1/users', { name: 'frank', role: 'member' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const temporary = created.body.temporaryPassword;
    // Someone else holding the temporary password stops at the password form...
    const other = new Browser();
    const first = await startDevice();
    const stale = await signIn(other, await openAndConfirm(other, first.da), 'frank', temporary);
    assert.match(textOf(stale.html), /Choose a new password/);
    // ...while frank signs in and chooses his own.
    const frank = new Browser();
    const second = await startDevice();
    let page = await signIn(frank, await openAndConfirm(frank, second.da), 'frank', temporary);
    const chosen = 'a password only he knows';
    page = await frank.submit(page, { form: 'change-password', fields: { password: chosen, confirm: chosen } });
    page = await frank.submit(page, { form: 'consent', button: 'Allow' });
    assert.match(textOf(page.html), /signed in as frank/);
    assert.ok((await second.tokens).access_token);

    // The stale form, empty or with a new password in it: the sign-in form again, no sign-in.
    const theirs = 'their own password here';
    for (const fields of [{}, { password: theirs, confirm: theirs }] as Record<string, string>[]) {
      page = await other.submit(stale, { form: 'change-password', fields });
      assert.equal(page.status, 400, textOf(page.html));
      assert.match(textOf(page.html), /Sign in to Atelier/);
      assert.equal(errorOf(page), 'This password was already changed: sign in with the new one.');
    }
    // frank's password stands: theirs was not set.
    page = await signIn(other, page, 'frank', theirs);
    assert.equal(errorOf(page), 'Wrong user name or password.');
    page = await signIn(other, page, 'frank', chosen);
    assert.match(textOf(page.html), /Allow access\?/);
  });

  it('of two first-login password forms submitted at once, one signs in and the other is refused', async () => {
    const created = await server.api<{ temporaryPassword: string }>('POST', '/v1/users', { name: 'grace', role: 'member' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const forms = await Promise.all(
      ['one', 'two'].map(async () => {
        const browser = new Browser();
        const { da } = await startDevice();
        const page = await signIn(browser, await openAndConfirm(browser, da), 'grace', created.body.temporaryPassword);
        assert.match(textOf(page.html), /Choose a new password/);
        return { browser, page };
      }),
    );
    const pages = await Promise.all(
      forms.map(({ browser, page }, i) => {
        const password = `concurrent choice number ${i}`;
        return browser.submit(page, { form: 'change-password', fields: { password, confirm: password } });
      }),
    );
    const outcomes = pages.map((p) => (/Allow access\?/.test(textOf(p.html)) ? 'signed in' : errorOf(p))).sort();
    assert.deepEqual(outcomes, ['This password was already changed: sign in with the new one.', 'signed in']);
  });

  it('NUL bytes are wrong input (4xx), never a server error: sign-in form, relay, token and revocation endpoints', async () => {
    const nul = '\u0000';
    const browser = new Browser();
    const { da } = await startDevice();
    const page = await openAndConfirm(browser, da);
    for (const fields of [
      { username: `ad${nul}min`, password: adminPassword },
      { username: nul, password: 'whatever-password' },
      { username: 'admin', password: `${adminPassword}${nul}` },
    ]) {
      const p = await browser.submit(page, { form: 'login', fields });
      assert.equal(p.status, 401, textOf(p.html));
      assert.equal(errorOf(p), 'Wrong user name or password.');
    }

    const id = `client_id=${cfg.clientId}`;
    for (const url of [cfg.tokenEndpoint, `${cfg.issuer}/token`]) {
      for (const body of [
        `${id}&grant_type=refresh_token&refresh_token=%00`,
        `${id}&grant_type=refresh_token&refresh_token=abc%00def`,
        `${id}&grant_type=${encodeURIComponent(DEVICE_GRANT)}&device_code=%00`,
      ]) {
        const r = await post(url, body);
        assert.equal(r.status, 400, `${url} ${body}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error, 'invalid_grant', `${url} ${body}`);
      }
    }
    // RFC 7009 §2.2: an invalid token is answered 200, as a revoked one.
    for (const url of [cfg.revocationEndpoint, `${cfg.issuer}/token/revocation`]) {
      for (const body of [`${id}&token=%00`, `${id}&token=%00&token_type_hint=refresh_token`]) {
        const r = await post(url, body);
        assert.equal(r.status, 200, `${url} ${body}: ${JSON.stringify(r.body)}`);
      }
    }

    const device = await browser.get(da.verification_uri!);
    const typed = await browser.submit(device, { form: 'user-code', fields: { user_code: `BCDF${nul}GHJK` } });
    assert.equal(typed.status, 400);
    assert.match(errorOf(typed), /is not valid/);

    assert.doesNotMatch(server.log, /OIDC provider error|invalid byte sequence|identity provider error/);
  });

  it('the relay refuses a parameter sent twice (RFC 6749 §3.1) instead of forwarding the second one unchecked', async () => {
    const id = `client_id=${cfg.clientId}`;
    for (const [url, body] of [
      [cfg.tokenEndpoint, `${id}&grant_type=refresh_token&grant_type=password&refresh_token=x`],
      [cfg.tokenEndpoint, `${id}&client_id=someone-else&grant_type=refresh_token&refresh_token=x`],
      [cfg.tokenEndpoint, `${id}&grant_type=refresh_token&refresh_token=x&refresh_token=y`],
      [cfg.tokenEndpoint, `${id}&grant_type=refresh_token&refresh_token=x&username=a&username=b`],
      [cfg.deviceAuthorizationEndpoint, `${id}&scope=openid&scope=${encodeURIComponent('openid offline_access')}`],
      [cfg.revocationEndpoint, `${id}&token=a&token=b`],
    ] as const) {
      const r = await post(url, body);
      assert.equal(r.status, 400, `${url} ${body}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error, 'invalid_request', body);
      assert.match(String(r.body.error_description), /included more than once/, body);
    }
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

// Limits on a server of their own: they lock the test's address out for a while.
describe('embedded OIDC issuer: attempts are counted before they are judged', () => {
  let server: TestServer;
  let on: Harness;

  before(async () => {
    server = await TestServer.start();
    on = await connect(server);
  });

  after(async () => {
    await server?.dispose();
  });

  it('parallel wrong passwords: 5 per name are judged, the rest refused, for a known and an unknown name alike', async () => {
    const created = await server.api<{ temporaryPassword: string }>('POST', '/v1/users', { name: 'ivy', role: 'member' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const browser = new Browser();
    const { da } = await startDeviceOn(on);
    const page = await openAndConfirm(browser, da);
    for (const username of ['ivy', 'nobody-at-all']) {
      const pages = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          browser.submit(page, { form: 'login', fields: { username, password: `wrong-password-${i}` } }),
        ),
      );
      assert.deepEqual(
        countBy(pages, (p) => String(p.status)),
        { 401: 5, 429: 7 },
        username,
      );
      for (const p of pages) {
        if (p.status === 401) assert.equal(errorOf(p), 'Wrong user name or password.');
        else assert.match(errorOf(p), /^Too many attempts: try again in \d+ s\.$/);
      }
    }
    // Now even the right password is refused for ivy.
    const right = await browser.submit(page, { form: 'login', fields: { username: 'ivy', password: created.body.temporaryPassword } });
    assert.equal(right.status, 429);
  });

  it('parallel wrong user codes: 10 per address are judged, the rest refused', async () => {
    const { da } = await startDeviceOn(on);
    // One browser each: every post carries a valid form (its own session and xsrf token).
    const browsers = Array.from({ length: 15 }, () => new Browser());
    const forms = await Promise.all(browsers.map((b) => b.get(da.verification_uri!)));
    const pages = await Promise.all(browsers.map((b, i) => b.submit(forms[i]!, { form: 'user-code', fields: { user_code: 'BCDF-GHJK' } })));
    const outcome = (p: Page): string =>
      p.status === 400 && /is not valid/.test(errorOf(p))
        ? 'wrong code'
        : p.status === 429 && /Too many wrong codes from your address: try again in \d+ s\./.test(textOf(p.html))
          ? 'refused'
          : `${p.status} ${textOf(p.html)}`;
    assert.deepEqual(countBy(pages, outcome), { 'wrong code': 10, refused: 5 });
    // The right code too, from this address, for now.
    const right = await browsers[0]!.get(da.verification_uri_complete!);
    assert.equal((await browsers[0]!.submit(right)).status, 429);
  });
});

describe('relay to an external issuer', () => {
  let idp: Server;
  let idpUrl: string;
  const received: string[] = [];

  before(async () => {
    idp = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        received.push(`${req.url} ${body}`);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      });
    });
    await new Promise<void>((resolve) => idp.listen(0, '127.0.0.1', resolve));
    idpUrl = `http://127.0.0.1:${(idp.address() as AddressInfo).port}`;
  });

  after(() => {
    idp?.close();
  });

  /** The relay for an issuer at `issuer` whose discovery names endpoints on `endpointsAt`. */
  async function relayFor(issuer: string, endpointsAt: string): Promise<ReturnType<typeof Fastify>> {
    const app = Fastify();
    app.setErrorHandler(errorHandler);
    const info: IssuerInfo = {
      kind: 'external',
      issuer,
      clientId: 'atelier',
      clientSecret: 'the-client-secret',
      publicUrl: () => 'http://atelier.test',
      endpoints: () => ({
        device_authorization_endpoint: `${endpointsAt}/device`,
        token_endpoint: `${endpointsAt}/token`,
        revocation_endpoint: `${endpointsAt}/revoke`,
      }),
    };
    authRoutes(app, info);
    await app.ready();
    return app;
  }

  it('sends the client secret to endpoints on the issuer origin only', async () => {
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    const same = await relayFor(`${idpUrl}/realms/acme`, `${idpUrl}/realms/acme/protocol`);
    const ok = await same.inject({ method: 'POST', url: '/v1/auth/device/code', headers: form, payload: 'scope=openid' });
    assert.equal(ok.statusCode, 200, ok.body);
    assert.equal(received.length, 1);
    assert.match(received[0]!, /^\/realms\/acme\/protocol\/device .*client_secret=the-client-secret/);
    await same.close();

    // Discovery (tampered, or misconfigured) names another origin: nothing is sent there.
    received.length = 0;
    const elsewhere = await relayFor('http://localhost:1/realms/acme', `${idpUrl}/steal`);
    for (const [url, payload] of [
      ['/v1/auth/device/code', 'scope=openid'],
      ['/v1/auth/device/token', 'grant_type=refresh_token&refresh_token=x'],
      ['/v1/auth/revoke', 'token=x'],
    ] as const) {
      const r = await elsewhere.inject({ method: 'POST', url, headers: form, payload });
      assert.equal(r.statusCode, 503, r.body);
      const body = r.json() as { code: string; message: string };
      assert.equal(body.code, 'UNAVAILABLE');
      assert.match(body.message, /the identity provider http:\/\/localhost:1\/realms\/acme names .* outside its own origin/);
    }
    assert.deepEqual(received, []);
    await elsewhere.close();
  });
});

describe('auth login: the page opened in a browser', () => {
  it('is http(s) only, normalized; anything else is refused with a clear error', () => {
    assert.equal(browserUrl({ verification_uri: 'https://sso.example.com/device' }), 'https://sso.example.com/device');
    assert.equal(
      browserUrl({ verification_uri: 'https://sso.example.com/device', verification_uri_complete: ' http://h.example/d?user_code=AB' }),
      'http://h.example/d?user_code=AB',
    );
    for (const bad of ['file:///etc/passwd', 'javascript:alert(1)', 'ms-settings:x', '--help', 'smb://host/share', 'not a url']) {
      assert.throws(
        () => browserUrl({ verification_uri: 'https://sso.example.com/device', verification_uri_complete: bad }),
        (err: unknown) => err instanceof AtelierError && /is not an http\(s\) address: not opening it in a browser/.test(err.message),
        bad,
      );
    }
    assert.throws(() => browserUrl({ verification_uri: 'file:///tmp/x' }), AtelierError);
  });
});
