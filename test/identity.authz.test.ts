import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, TestServer, makeRepo } from './helpers/server.js';
import { approvalLink } from '../src/approvals/deepLink.js';
import { MasterKey } from '../src/identity/index.js';

/** Whether web/dist holds a built dashboard (scripts/install.sh builds it). */
const DASHBOARD_BUILT = existsSync(join(REPO_ROOT, 'web', 'dist', 'index.html'));

/**
 * The authorization matrix: every route of the API × every kind of caller → the status it must
 * get. The route list comes from the running server (/v1/admin/routes), so a route added
 * without a row here fails the first test.
 */
const SUBJECTS = ['anonymous', 'otherAgent', 'viewer', 'member', 'owner', 'maintainer', 'admin', 'otherTenant'] as const;
type Subject = (typeof SUBJECTS)[number];
type Expect = Record<Subject, number>;

interface Fixture {
  server: TestServer;
  tokens: Record<Exclude<Subject, 'anonymous'>, string>;
  /** A workshop of `owner` in the default tenant. */
  ws: string;
  /** An admin token another test may revoke. */
  spareTokenId: string;
  repo: string;
  /** An agent token of `ws` (made on first use). */
  agent?: string;
  /** A registered project of the default tenant, with one plan and one applied execution. */
  project: string;
  planId: string;
  executionId: string;
}

interface Call {
  method: string;
  path: string;
  body?: unknown;
  raw?: Buffer;
  contentType?: string;
  accept?: string;
  /** `manual`: the redirect itself is the answer (its status is checked). */
  redirect?: 'manual';
}

interface Row {
  expect: Expect;
  call(f: Fixture, who: Subject): Call | Promise<Call>;
  /** Puts things back after a call that succeeded (resume a stopped workshop). */
  restore?(f: Fixture): Promise<void>;
}

/** Same status for everyone (public routes). */
const all = (status: number): Expect => Object.fromEntries(SUBJECTS.map((s) => [s, status])) as Expect;
const e = (
  anonymous: number,
  otherAgent: number,
  viewer: number,
  member: number,
  owner: number,
  maintainer: number,
  admin: number,
  otherTenant: number,
): Expect => ({
  anonymous,
  otherAgent,
  viewer,
  member,
  owner,
  maintainer,
  admin,
  otherTenant,
});

const form = (path: string, body: string): Call => ({ method: 'POST', path, body, contentType: 'application/x-www-form-urlencoded' });
const interactionPost = (step: string): Call => form(`/oidc/interaction/unknown/${step}`, 'csrf=forged');

/** A fresh directory to register as a project (removed after the suite). */
const projectDirs: string[] = [];
function projectDir(): string {
  const d = mkdtempSync('/tmp/atelier-project-');
  projectDirs.push(d);
  return d;
}
/** A public key for the SSH-key rows (any valid OpenSSH public key line). */
const MATRIX_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKNsqBZH2Uuj+GsJdj6gVeP1lgpeHr/KBnOvt4/M2thL matrix';

let seq = 0;
const unique = (p: string): string => `${p}${++seq}`;

/** A redis simulator in the fixture's workshop, made once by the admin. */
let matrixSim: Promise<string> | undefined;
function matrixSimulator(f: Fixture): Promise<string> {
  matrixSim ??= as(f, 'admin', { method: 'POST', path: `/v1/workshops/${f.ws}/simulators`, body: { type: 'redis', name: 'matrix' } }).then(
    (r) => {
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return 'matrix';
    },
  );
  return matrixSim;
}

/** A command started once by the owner through the async exec API. */
let matrixEx: Promise<string> | undefined;
function matrixExec(f: Fixture): Promise<string> {
  matrixEx ??= as(f, 'owner', { method: 'POST', path: `/v1/workshops/${f.ws}/execs`, body: { command: ['echo', 'hi'] } }).then((r) => {
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return (r.body as { id: string }).id;
  });
  return matrixEx;
}

const TABLE: Record<string, Row> = {
  'GET /healthz': { expect: all(200), call: () => ({ method: 'GET', path: '/healthz' }) },
  // The bootstrap script (scripts/get.sh): public, as `curl -fsSL URL/install.sh | sh` fetches it.
  'GET /install.sh': { expect: all(200), call: () => ({ method: 'GET', path: '/install.sh' }) },
  // ACME http-01 answers (src/server/tls.ts): public, as the CA fetches them; none exists here, so 404 for all.
  'GET /.well-known/acme-challenge/:token': {
    expect: all(404),
    call: () => ({ method: 'GET', path: '/.well-known/acme-challenge/no-such-token' }),
  },
  'GET /metrics': { expect: all(200), call: () => ({ method: 'GET', path: '/metrics' }) },
  // The embedded issuer and the login relay are public by design: same answer whoever calls.
  'GET /oidc/*': { expect: all(200), call: () => ({ method: 'GET', path: '/oidc/.well-known/openid-configuration' }) },
  'POST /oidc/*': {
    expect: all(400),
    call: () => ({ method: 'POST', path: '/oidc/token', body: 'grant_type=nothing', contentType: 'application/x-www-form-urlencoded' }),
  },
  'OPTIONS /oidc/*': { expect: all(404), call: () => ({ method: 'OPTIONS', path: '/oidc/token' }) },
  'GET /oidc/interaction/:uid': { expect: all(400), call: () => ({ method: 'GET', path: '/oidc/interaction/unknown' }) },
  'POST /oidc/interaction/:uid/login': { expect: all(403), call: () => interactionPost('login') },
  'POST /oidc/interaction/:uid/password': { expect: all(403), call: () => interactionPost('password') },
  'POST /oidc/interaction/:uid/consent': { expect: all(403), call: () => interactionPost('consent') },
  'POST /oidc/interaction/:uid/abort': { expect: all(403), call: () => interactionPost('abort') },
  'GET /v1/openapi.json': { expect: all(200), call: () => ({ method: 'GET', path: '/v1/openapi.json' }) },
  // The dashboard (its app is built by scripts/install.sh; without it / says so with a 503).
  'GET /': { expect: all(DASHBOARD_BUILT ? 200 : 503), call: () => ({ method: 'GET', path: '/', accept: 'text/html' }) },
  'GET /*': { expect: all(DASHBOARD_BUILT ? 200 : 503), call: () => ({ method: 'GET', path: '/approvals', accept: 'text/html' }) },
  'GET /auth/web/login': { expect: all(303), call: () => ({ method: 'GET', path: '/auth/web/login', redirect: 'manual' }) },
  // Without the sign-in's cookie, whoever calls: refused.
  'GET /auth/web/callback': { expect: all(401), call: () => ({ method: 'GET', path: '/auth/web/callback?code=x&state=y' }) },
  // A bearer token is not a dashboard session: signed out, for everyone.
  'GET /auth/web/session': { expect: all(200), call: () => ({ method: 'GET', path: '/auth/web/session' }) },
  'POST /auth/web/tenant': {
    expect: e(401, 400, 400, 400, 400, 400, 400, 400),
    call: () => ({ method: 'POST', path: '/auth/web/tenant', body: { tenant: 'default' } }),
  },
  'POST /auth/web/logout': {
    expect: e(401, 400, 400, 400, 400, 400, 400, 400),
    call: () => ({ method: 'POST', path: '/auth/web/logout' }),
  },
  'GET /v1/auth/config': { expect: all(200), call: () => ({ method: 'GET', path: '/v1/auth/config' }) },
  'POST /v1/auth/device/code': { expect: all(200), call: () => form('/v1/auth/device/code', 'client_id=atelier-cli&scope=openid') },
  'POST /v1/auth/device/token': {
    expect: all(400),
    call: () =>
      form('/v1/auth/device/token', 'grant_type=urn:ietf:params:oauth:grant-type:device_code&device_code=unknown&client_id=atelier-cli'),
  },
  'POST /v1/auth/revoke': { expect: all(200), call: () => form('/v1/auth/revoke', 'token=unknown&client_id=atelier-cli') },
  // Server-wide: only the default tenant's admins, not another tenant's.
  'POST /v1/admin/signing-keys/rotate': {
    expect: e(401, 403, 403, 403, 403, 403, 200, 403),
    call: () => ({ method: 'POST', path: '/v1/admin/signing-keys/rotate' }),
  },
  // Server-wide (`atelier server status`): the default tenant's admins only.
  'GET /v1/admin/status': { expect: e(401, 403, 403, 403, 403, 403, 200, 403), call: () => ({ method: 'GET', path: '/v1/admin/status' }) },
  // The installation's nodes (docs/replicas.md): the default tenant's admins only. Drained by
  // name: an unknown one here (draining the only node would stop every create of this matrix).
  'GET /v1/nodes': { expect: e(401, 403, 403, 403, 403, 403, 200, 403), call: () => ({ method: 'GET', path: '/v1/nodes' }) },
  'POST /v1/nodes/:name/drain': {
    expect: e(401, 403, 403, 403, 403, 403, 404, 403),
    call: () => ({ method: 'POST', path: '/v1/nodes/no-such-node/drain' }),
  },
  'POST /v1/nodes/:name/undrain': {
    expect: e(401, 403, 403, 403, 403, 403, 404, 403),
    call: () => ({ method: 'POST', path: '/v1/nodes/no-such-node/undrain' }),
  },
  // Removed by name: an unknown one here (the matrix's only node is live, and refused as such).
  'DELETE /v1/nodes/:name': {
    expect: e(401, 403, 403, 403, 403, 403, 404, 403),
    call: () => ({ method: 'DELETE', path: '/v1/nodes/no-such-node' }),
  },
  'GET /v1/admin/routes': { expect: e(401, 403, 403, 403, 403, 403, 200, 200), call: () => ({ method: 'GET', path: '/v1/admin/routes' }) },
  'GET /v1/auth/whoami': { expect: e(401, 200, 200, 200, 200, 200, 200, 200), call: () => ({ method: 'GET', path: '/v1/auth/whoami' }) },
  'GET /v1/users': { expect: e(401, 403, 403, 403, 403, 403, 200, 200), call: () => ({ method: 'GET', path: '/v1/users' }) },
  'POST /v1/users': {
    expect: e(401, 403, 403, 403, 403, 403, 201, 201),
    call: () => ({ method: 'POST', path: '/v1/users', body: { name: unique('newcomer'), role: 'viewer' } }),
  },
  'POST /v1/users/:user/disable': {
    // Disabling acts on the account server-wide: only the default tenant's admins.
    expect: e(401, 403, 403, 403, 403, 403, 200, 403),
    call: () => ({ method: 'POST', path: '/v1/users/victim/disable' }),
  },
  'PUT /v1/users/:user/email': {
    // An address decides who a Slack user acts as: server-wide, like disabling.
    expect: e(401, 403, 403, 403, 403, 403, 200, 403),
    call: () => ({ method: 'PUT', path: '/v1/users/victim/email', body: { email: null } }),
  },
  'POST /v1/tokens': {
    expect: e(401, 403, 201, 201, 201, 201, 201, 201),
    call: () => ({ method: 'POST', path: '/v1/tokens', body: { name: 'matrix', expiresInSeconds: 3600 } }),
  },
  'GET /v1/tokens': { expect: e(401, 403, 200, 200, 200, 200, 200, 200), call: () => ({ method: 'GET', path: '/v1/tokens' }) },
  'DELETE /v1/tokens/:id': {
    // The admin's spare token: only an admin of its tenant may revoke it; for others it is not theirs.
    expect: e(401, 403, 404, 404, 404, 404, 200, 404),
    call: (f) => ({ method: 'DELETE', path: `/v1/tokens/${f.spareTokenId}` }),
  },
  'POST /v1/workshops': {
    expect: e(401, 403, 403, 201, 201, 201, 201, 201),
    call: (f) => ({ method: 'POST', path: '/v1/workshops', body: { repo: f.repo, name: unique('matrix-') } }),
  },
  'GET /v1/workshops': { expect: e(401, 200, 200, 200, 200, 200, 200, 200), call: () => ({ method: 'GET', path: '/v1/workshops' }) },
  'GET /v1/workshops/:id': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}` }),
  },
  'DELETE /v1/workshops/:id': {
    // An agent token is refused by the route itself (403); a member who is not the owner by the workshop rule.
    expect: e(401, 403, 403, 403, 200, 200, 200, 404),
    async call(f) {
      const w = await as(f, 'owner', { method: 'POST', path: '/v1/workshops', body: { repo: f.repo, name: unique('doomed-') } });
      assert.equal(w.status, 201, JSON.stringify(w.body));
      return { method: 'DELETE', path: `/v1/workshops/${(w.body as { id: string }).id}` };
    },
  },
  'POST /v1/workshops/:id/stop': {
    expect: e(401, 404, 403, 403, 200, 200, 200, 404),
    call: (f) => ({ method: 'POST', path: `/v1/workshops/${f.ws}/stop` }),
    async restore(f) {
      assert.equal((await as(f, 'admin', { method: 'POST', path: `/v1/workshops/${f.ws}/resume` })).status, 200);
    },
  },
  'PUT /v1/workshops/:id/budget': {
    // Like delete: the owner or a maintainer; never an agent token (a workshop's agent cannot raise its own budget).
    expect: e(401, 403, 403, 403, 200, 200, 200, 404),
    call: (f) => ({ method: 'PUT', path: `/v1/workshops/${f.ws}/budget`, body: { budgetUsd: 10 } }),
  },
  'GET /v1/spend': { expect: e(401, 403, 200, 200, 200, 200, 200, 200), call: () => ({ method: 'GET', path: '/v1/spend' }) },
  'POST /v1/workshops/:id/resume': {
    expect: e(401, 404, 403, 403, 200, 200, 200, 404),
    call: (f) => ({ method: 'POST', path: `/v1/workshops/${f.ws}/resume` }),
  },
  'POST /v1/workshops/:id/exec': {
    expect: e(401, 404, 403, 403, 200, 200, 200, 404),
    call: (f) => ({ method: 'POST', path: `/v1/workshops/${f.ws}/exec`, body: { command: ['true'] } }),
  },
  'POST /v1/workshops/:id/execs': {
    expect: e(401, 404, 403, 403, 201, 201, 201, 404),
    call: (f) => ({ method: 'POST', path: `/v1/workshops/${f.ws}/execs`, body: { command: ['true'] } }),
  },
  'GET /v1/execs/:execId': {
    // The output of a command is for those who may run one there (an agent of another workshop: not found).
    expect: e(401, 404, 403, 403, 200, 200, 200, 404),
    call: async (f) => ({ method: 'GET', path: `/v1/execs/${await matrixExec(f)}` }),
  },
  'GET /v1/workshops/:id/files': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/files?path=README.md` }),
  },
  'PUT /v1/workshops/:id/files': {
    expect: e(401, 404, 403, 403, 200, 200, 200, 404),
    call: (f) => ({ method: 'PUT', path: `/v1/workshops/${f.ws}/files?path=notes.txt`, raw: Buffer.from('hello\n') }),
  },
  'GET /v1/workshops/:id/usage': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/usage` }),
  },
  'GET /v1/workshops/:id/egress': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/egress` }),
  },
  'GET /v1/workshops/:id/simulators': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/simulators` }),
  },
  'POST /v1/workshops/:id/simulators': {
    expect: e(401, 404, 403, 403, 201, 201, 201, 404),
    call: (f) => ({ method: 'POST', path: `/v1/workshops/${f.ws}/simulators`, body: { type: 'redis', name: unique('kv-') } }),
  },
  'GET /v1/workshops/:id/simulators/:name/logs': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: async (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/simulators/${await matrixSimulator(f)}/logs` }),
  },
  'POST /v1/workshops/:id/simulators/:name/reset': {
    expect: e(401, 404, 403, 403, 200, 200, 200, 404),
    call: async (f) => ({ method: 'POST', path: `/v1/workshops/${f.ws}/simulators/${await matrixSimulator(f)}/reset` }),
  },
  // Stopping is idempotent, and the reset above starts it again: the rows may run in any order.
  'POST /v1/workshops/:id/simulators/:name/stop': {
    expect: e(401, 404, 403, 403, 200, 200, 200, 404),
    call: async (f) => ({ method: 'POST', path: `/v1/workshops/${f.ws}/simulators/${await matrixSimulator(f)}/stop` }),
  },
  // Terminals and tunnels: a plain GET to a WebSocket route is checked like the upgrade, then told to upgrade (426).
  'GET /v1/workshops/:id/pty': {
    expect: e(401, 404, 403, 403, 426, 426, 426, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/pty` }),
  },
  'GET /v1/workshops/:id/tunnel': {
    expect: e(401, 404, 403, 403, 426, 426, 426, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/tunnel?port=22` }),
  },
  // Why a raw tunnel ended (an unknown tunnel is answered too: `state: "unknown"`).
  'GET /v1/workshops/:id/tunnels/:tunnel': {
    expect: e(401, 404, 403, 403, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/tunnels/tun-matrix` }),
  },
  'GET /v1/workshops/:id/ssh': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/ssh` }),
  },
  // SSH keys belong to a person: an agent token cannot register one.
  'POST /v1/ssh/keys': {
    expect: e(401, 403, 201, 201, 201, 201, 201, 201),
    call: () => ({ method: 'POST', path: '/v1/ssh/keys', body: { publicKey: MATRIX_KEY } }),
  },
  'GET /v1/ssh/keys': { expect: e(401, 403, 200, 200, 200, 200, 200, 200), call: () => ({ method: 'GET', path: '/v1/ssh/keys' }) },
  'DELETE /v1/ssh/keys/:fingerprint': {
    // Each user deletes only their own keys: an unknown fingerprint is not found.
    expect: e(401, 403, 404, 404, 404, 404, 404, 404),
    call: () => ({ method: 'DELETE', path: `/v1/ssh/keys/${encodeURIComponent('SHA256:unknown')}` }),
  },
  'POST /v1/workshops/:id/sessions': {
    expect: e(401, 404, 403, 403, 201, 201, 201, 404),
    call: (f) => ({ method: 'POST', path: `/v1/workshops/${f.ws}/sessions`, body: { name: unique('matrix-'), command: ['sleep', '600'] } }),
  },
  'GET /v1/workshops/:id/sessions': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/sessions` }),
  },
  'DELETE /v1/workshops/:id/sessions/:name': {
    expect: e(401, 404, 403, 403, 200, 200, 200, 404),
    async call(f) {
      const name = unique('doomed-');
      const r = await as(f, 'admin', { method: 'POST', path: `/v1/workshops/${f.ws}/sessions`, body: { name, command: ['sleep', '600'] } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return { method: 'DELETE', path: `/v1/workshops/${f.ws}/sessions/${name}` };
    },
  },
  'GET /v1/workshops/:id/sessions/:name/attach': {
    expect: e(401, 404, 403, 403, 426, 426, 426, 404),
    async call(f) {
      const r = await as(f, 'admin', {
        method: 'POST',
        path: `/v1/workshops/${f.ws}/sessions`,
        body: { name: 'attachable', command: ['sleep', '600'] },
      });
      assert.ok(r.status === 201 || r.status === 200, JSON.stringify(r.body));
      return { method: 'GET', path: `/v1/workshops/${f.ws}/sessions/attachable/attach` };
    },
  },
  'GET /v1/workshops/:id/git/diff': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/v1/workshops/${f.ws}/git/diff` }),
  },
  // A workshop's MCP endpoint: its own agent token only (an agent of another workshop acts for that
  // workshop, its own); people use `atelier mcp serve`. Stateless: GET and DELETE are 405.
  'POST /mcp': {
    expect: e(401, 200, 403, 403, 403, 403, 403, 403),
    call: () => ({
      method: 'POST',
      path: '/mcp',
      accept: 'application/json, text/event-stream',
      body: {
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'matrix', version: '1' } },
      },
    }),
  },
  'GET /mcp': { expect: e(401, 405, 403, 403, 403, 403, 403, 403), call: () => ({ method: 'GET', path: '/mcp' }) },
  'DELETE /mcp': { expect: e(401, 405, 403, 403, 403, 403, 403, 403), call: () => ({ method: 'DELETE', path: '/mcp' }) },
  // Approvals: filing needs the right to operate the workshop; reading is for the tenant (and the
  // workshop's own agent); deciding is for its owner or a maintainer, never an agent, never the requester.
  'POST /v1/workshops/:id/approvals': {
    expect: e(401, 404, 403, 403, 201, 201, 201, 404),
    call: (f) => ({ method: 'POST', path: `/v1/workshops/${f.ws}/approvals`, body: approvalBody() }),
  },
  'GET /v1/approvals': { expect: e(401, 200, 200, 200, 200, 200, 200, 200), call: () => ({ method: 'GET', path: '/v1/approvals' }) },
  'GET /v1/approvals/:id': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: async (f) => ({ method: 'GET', path: `/v1/approvals/${await agentRequest(f)}` }),
  },
  'GET /v1/approvals/:id/wait': {
    expect: e(401, 404, 200, 200, 200, 200, 200, 404),
    call: async (f) => ({ method: 'GET', path: `/v1/approvals/${await agentRequest(f)}/wait?timeout=0` }),
  },
  // The audit trail names people and their addresses: people of the tenant, never an agent token.
  'GET /v1/approvals/:id/audit': {
    expect: e(401, 403, 200, 200, 200, 200, 200, 404),
    call: async (f) => ({ method: 'GET', path: `/v1/approvals/${await agentRequest(f)}/audit` }),
  },
  // A Teams card's signed link (made with the server's own key): people of the tenant, never an agent token.
  'GET /v1/approvals/:id/link': {
    expect: e(401, 403, 200, 200, 200, 200, 200, 404),
    call: async (f) => {
      const id = await agentRequest(f);
      const key = MasterKey.loadOrCreate(join(f.server.dataDir, 'master.key')).derive('approval-deep-link');
      const link = new URL(approvalLink('http://x', key, id, 'approve', Math.floor(Date.now() / 1000) + 600));
      return { method: 'GET', path: `/v1/approvals/${id}/link${link.search}` };
    },
  },
  'POST /v1/approvals/:id/decision': {
    expect: e(401, 403, 403, 403, 200, 200, 200, 404),
    call: async (f) => ({
      method: 'POST',
      path: `/v1/approvals/${await agentRequest(f)}/decision`,
      body: { decision: 'APPROVE', reason: 'matrix' },
    }),
  },
  'GET /v1/approvals/stream': {
    // A plain GET is told to upgrade; the WebSocket itself is tested in approvals.test.ts.
    expect: e(401, 400, 400, 400, 400, 400, 400, 400),
    call: () => ({ method: 'GET', path: '/v1/approvals/stream' }),
  },
  // Slack authenticates by signature, not by token: this server has no Slack secret, so every call is refused.
  'POST /v1/webhooks/slack/interactions': {
    expect: all(401),
    call: () => form('/v1/webhooks/slack/interactions', 'payload=%7B%7D'),
  },
  // Secrets: names for members and agent tokens (never values, on no route); set and delete for
  // maintainers and admins, each in their own tenant.
  'GET /v1/secrets': { expect: e(401, 200, 403, 200, 200, 200, 200, 200), call: () => ({ method: 'GET', path: '/v1/secrets' }) },
  'PUT /v1/secrets/:name': {
    expect: e(401, 403, 403, 403, 403, 200, 200, 200),
    call: () => ({ method: 'PUT', path: `/v1/secrets/${unique('MATRIX_')}`, body: { value: 'matrix' } }),
  },
  'DELETE /v1/secrets/:name': {
    expect: e(401, 403, 403, 403, 403, 204, 204, 204),
    call: async (f, who) => {
      // Set first in the caller's own tenant, so an allowed caller deletes something real.
      const name = unique('MATRIX_');
      const setter = who === 'otherTenant' ? 'otherTenant' : 'admin';
      const r = await as(f, setter, { method: 'PUT', path: `/v1/secrets/${name}`, body: { value: 'matrix' } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return { method: 'DELETE', path: `/v1/secrets/${name}` };
    },
  },
  // Ending a grant: members may call (the workshop's owner may end its grants), agents and viewers not;
  // a request id with no grant is 404 for those who may.
  'DELETE /v1/secrets/grants/:id': {
    expect: e(401, 403, 403, 404, 404, 404, 404, 404),
    call: () => ({ method: 'DELETE', path: '/v1/secrets/grants/00000000-0000-4000-8000-000000000000' }),
  },
  // The tenant's credential policy: members read it (what their workshops get), maintainers set it.
  'GET /v1/credential-policy': {
    expect: e(401, 403, 403, 200, 200, 200, 200, 200),
    call: () => ({ method: 'GET', path: '/v1/credential-policy' }),
  },
  'PUT /v1/credential-policy': {
    expect: e(401, 403, 403, 403, 403, 200, 200, 200),
    call: () => ({ method: 'PUT', path: '/v1/credential-policy', body: { credentials: [], forbid: [] } }),
  },
  'GET /v1/audit/verify': {
    expect: e(401, 403, 403, 403, 403, 403, 200, 403),
    call: () => ({ method: 'GET', path: '/v1/audit/verify' }),
  },
  // Projects and typed actions: reading is any member of the tenant; changing is a maintainer's.
  'POST /v1/projects': {
    expect: e(401, 403, 403, 403, 403, 201, 201, 201),
    call: () => ({ method: 'POST', path: '/v1/projects', body: { path: projectDir() } }),
  },
  'GET /v1/projects': { expect: e(401, 403, 200, 200, 200, 200, 200, 200), call: () => ({ method: 'GET', path: '/v1/projects' }) },
  'DELETE /v1/projects/:project': {
    expect: e(401, 403, 403, 403, 403, 200, 200, 404),
    async call(f) {
      const name = unique('doomed-project-');
      const r = await as(f, 'admin', { method: 'POST', path: '/v1/projects', body: { path: projectDir(), name } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return { method: 'DELETE', path: `/v1/projects/${name}` };
    },
  },
  'GET /api/workspace/actions': {
    expect: e(401, 403, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/api/workspace/actions?project=${f.project}` }),
  },
  'GET /api/workspace/actions/journal': {
    expect: e(401, 403, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/api/workspace/actions/journal?project=${f.project}` }),
  },
  'GET /api/workspace/actions/plans/:planId': {
    expect: e(401, 403, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/api/workspace/actions/plans/${f.planId}` }),
  },
  'GET /api/workspace/actions/executions/:executionId': {
    expect: e(401, 403, 200, 200, 200, 200, 200, 404),
    call: (f) => ({ method: 'GET', path: `/api/workspace/actions/executions/${f.executionId}` }),
  },
  'POST /api/workspace/actions/:id/plan': {
    expect: e(401, 403, 403, 403, 403, 201, 201, 404),
    call: (f) => ({
      method: 'POST',
      path: '/api/workspace/actions/slots.assign/plan',
      body: { project: f.project, parameters: { slot: unique('slot-') } },
    }),
  },
  'POST /api/workspace/actions/:id/apply': {
    expect: e(401, 403, 403, 403, 403, 200, 200, 404),
    async call(f) {
      const plan = await planSlot(f);
      return {
        method: 'POST',
        path: '/api/workspace/actions/slots.assign/apply',
        body: { plan_id: plan.planId, fingerprint: plan.fingerprint },
      };
    },
  },
  'POST /api/workspace/actions/:id/rollback': {
    expect: e(401, 403, 403, 403, 403, 200, 200, 404),
    async call(f) {
      const x = await applySlot(f);
      return { method: 'POST', path: '/api/workspace/actions/slots.assign/rollback', body: { execution_id: x.executionId } };
    },
  },
  // A browser page's CSRF token for the write guard: any human of the tenant (an agent token never acts as a page).
  'GET /api/workspace/csrf': {
    expect: e(401, 403, 200, 200, 200, 200, 200, 200),
    call: () => ({ method: 'GET', path: '/api/workspace/csrf' }),
  },
  // The Console: read-only commands, run with the caller's own credential; any human of the tenant, no agent.
  'GET /api/workspace/console': {
    expect: e(401, 403, 200, 200, 200, 200, 200, 200),
    call: () => ({ method: 'GET', path: '/api/workspace/console' }),
  },
  'POST /api/workspace/console': {
    expect: e(401, 403, 200, 200, 200, 200, 200, 200),
    call: () => ({ method: 'POST', path: '/api/workspace/console', body: { argv: ['projects', 'list'] } }),
  },
};

const approvalBody = () => ({ category: 'ALLOWLIST_EXPANSION', payload: { host: `${unique('h')}.example`, justification: 'matrix' } });

/** A fresh request on the owner's workshop, filed by its agent token (so nobody in the matrix is its requester). */
async function agentRequest(f: Fixture): Promise<string> {
  f.agent ??= (
    (await as(f, 'owner', { method: 'POST', path: '/v1/tokens', body: { workshopId: f.ws, expiresInSeconds: 3600 } })).body as {
      token: string;
    }
  ).token;
  const r = await fetch(`${f.server.url}/v1/workshops/${f.ws}/approvals`, {
    method: 'POST',
    headers: { authorization: `Bearer ${f.agent}`, 'content-type': 'application/json' },
    body: JSON.stringify(approvalBody()),
  });
  assert.equal(r.status, 201);
  return ((await r.json()) as { id: string }).id;
}

async function planSlot(f: Fixture): Promise<{ planId: string; fingerprint: string }> {
  const r = await as(f, 'admin', {
    method: 'POST',
    path: '/api/workspace/actions/slots.assign/plan',
    body: { project: f.project, parameters: { slot: unique('slot-') } },
  });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body as { planId: string; fingerprint: string };
}

async function applySlot(f: Fixture): Promise<{ executionId: string }> {
  const plan = await planSlot(f);
  const r = await as(f, 'admin', {
    method: 'POST',
    path: '/api/workspace/actions/slots.assign/apply',
    body: { plan_id: plan.planId, fingerprint: plan.fingerprint },
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body as { executionId: string };
}

async function as(f: Fixture, who: Subject, c: Call): Promise<{ status: number; body: unknown }> {
  const headers: Record<string, string> = { accept: c.accept ?? 'application/json' };
  if (who !== 'anonymous') headers.authorization = `Bearer ${f.tokens[who]}`;
  let body: string | Buffer | undefined;
  if (c.raw) {
    body = c.raw;
    headers['content-type'] = 'application/octet-stream';
  } else if (c.body !== undefined) {
    body = typeof c.body === 'string' ? c.body : JSON.stringify(c.body);
    headers['content-type'] = c.contentType ?? 'application/json';
  }
  const res = await fetch(`${f.server.url}${c.path}`, {
    method: c.method,
    headers,
    ...(body !== undefined ? { body } : {}),
    ...(c.redirect ? { redirect: c.redirect } : {}),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, body: parsed };
}

describe('authorization matrix', () => {
  let f: Fixture;

  before(async () => {
    const server = await TestServer.start();
    const repo = makeRepo({ 'README.md': '# matrix\n' });
    const admin = server.token;
    const post = async <T>(path: string, body: unknown, token = admin): Promise<T> => {
      const r = await server.api<T>('POST', path, body, { authorization: `Bearer ${token}` });
      assert.ok(r.status === 201 || r.status === 200, `${path}: ${r.status} ${JSON.stringify(r.body)}`);
      return r.body;
    };
    for (const [name, role] of [
      ['viewer', 'viewer'],
      ['member', 'member'],
      ['owner', 'member'],
      ['maintainer', 'maintainer'],
      ['victim', 'member'],
    ] as const)
      await post('/v1/users', { name, role });
    // A second tenant, `other`, whose admin is `stranger` (the first admin becomes its admin too).
    await post('/v1/users', { name: 'stranger', role: 'admin', tenant: 'other' });
    const tokenFor = async (body: object): Promise<string> =>
      (await post<{ token: string }>('/v1/tokens', { expiresInSeconds: 3600, ...body })).token;
    const tokens = {
      viewer: await tokenFor({ user: 'viewer' }),
      member: await tokenFor({ user: 'member' }),
      owner: await tokenFor({ user: 'owner' }),
      maintainer: await tokenFor({ user: 'maintainer' }),
      admin,
      otherTenant: await tokenFor({ user: 'stranger', tenant: 'other' }),
      otherAgent: '',
    };
    const ws = (await post<{ id: string }>('/v1/workshops', { repo, name: 'owned' }, tokens.owner)).id;
    const other = (await post<{ id: string }>('/v1/workshops', { repo, name: 'elsewhere' })).id;
    tokens.otherAgent = await tokenFor({ workshopId: other });
    const spareTokenId = (await post<{ id: string }>('/v1/tokens', { name: 'spare' })).id;
    await post('/v1/projects', { path: projectDir(), name: 'matrix-project' });
    f = { server, tokens, ws, spareTokenId, repo, project: 'matrix-project', planId: '', executionId: '' };
    f.planId = (await planSlot(f)).planId;
    f.executionId = (await applySlot(f)).executionId;
  });

  after(async () => {
    await f?.server.dispose();
    if (f) rmSync(f.repo, { recursive: true, force: true });
    for (const d of projectDirs) rmSync(d, { recursive: true, force: true });
  });

  it('has one row for every route the server serves', async () => {
    const r = await f.server.api<{ items: { method: string; url: string }[] }>('GET', '/v1/admin/routes');
    assert.equal(r.status, 200);
    const served = r.body.items.map((x) => `${x.method} ${x.url}`).sort();
    assert.deepEqual(served, Object.keys(TABLE).sort(), 'a route without a row in TABLE (or a row for a route that is gone)');
  });

  for (const [route, row] of Object.entries(TABLE)) {
    it(route, async () => {
      const got: Partial<Expect> = {};
      for (const who of SUBJECTS) {
        const c = await row.call(f, who);
        const r = await as(f, who, c);
        got[who] = r.status;
        if (r.status < 300 && row.restore) await row.restore(f);
        // Another tenant's resources are invisible, not forbidden: nothing reveals that they exist.
        if (r.status === 404 && c.path.startsWith('/v1/')) assert.match(JSON.stringify(r.body), /NOT_FOUND/);
      }
      assert.deepEqual(got, row.expect);
    });
  }

  it('an agent token lists only its own workshop and cannot mint tokens', async () => {
    const list = await as(f, 'otherAgent', { method: 'GET', path: '/v1/workshops' });
    const ids = (list.body as { items: { id: string; name: string }[] }).items.map((w) => w.name);
    assert.deepEqual(ids, ['elsewhere']);
    const who = await as(f, 'otherAgent', { method: 'GET', path: '/v1/auth/whoami' });
    assert.equal((who.body as { kind: string }).kind, 'agent');
  });

  it("another tenant's admin sees none of this tenant's workshops or users", async () => {
    const list = await as(f, 'otherTenant', { method: 'GET', path: '/v1/workshops' });
    const names = (list.body as { items: { name: string }[] }).items.map((w) => w.name);
    assert.ok(!names.includes('owned') && !names.includes('elsewhere'), names.join(','));
    const users = await as(f, 'otherTenant', { method: 'GET', path: '/v1/users' });
    const userNames = (users.body as { items: { name: string }[] }).items.map((u) => u.name);
    assert.ok(!userNames.includes('victim') && userNames.includes('stranger'), userNames.join(','));
  });

  it("another tenant's admin can neither pull an existing account into their tenant nor create tenants", async () => {
    const pull = await as(f, 'otherTenant', { method: 'POST', path: '/v1/users', body: { name: 'owner', role: 'member' } });
    assert.equal(pull.status, 409, JSON.stringify(pull.body));
    assert.match(JSON.stringify(pull.body), /taken on this server/);
    const tenant = await as(f, 'otherTenant', { method: 'POST', path: '/v1/users', body: { name: unique('squat'), tenant: 'squatted' } });
    assert.equal(tenant.status, 403, JSON.stringify(tenant.body));
    const cross = await as(f, 'otherTenant', { method: 'POST', path: '/v1/users', body: { name: unique('x'), tenant: 'default' } });
    assert.equal(cross.status, 403, JSON.stringify(cross.body));
  });

  it('an agent token scoped viewer can read its workshop but not operate it', async () => {
    const t = await as(f, 'admin', {
      method: 'POST',
      path: '/v1/tokens',
      body: { workshopId: f.ws, role: 'viewer', expiresInSeconds: 600 },
    });
    assert.equal(t.status, 201, JSON.stringify(t.body));
    const token = (t.body as { token: string; role: string }).token;
    assert.equal((t.body as { role: string }).role, 'viewer');
    const call = (method: string, path: string, body?: unknown) =>
      fetch(`${f.server.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json' },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
    assert.equal((await call('GET', `/v1/workshops/${f.ws}`)).status, 200);
    assert.equal((await call('POST', `/v1/workshops/${f.ws}/exec`, { command: ['true'] })).status, 403);
  });

  it('a token minted with a token never outlives it, stays in its tenant, and is revoked with it', async () => {
    // A tenant admin's API token stays in its tenant.
    const strangerMint = await as(f, 'otherTenant', { method: 'POST', path: '/v1/tokens', body: { tenant: 'default' } });
    assert.equal(strangerMint.status, 403);
    const parent = await as(f, 'admin', { method: 'POST', path: '/v1/tokens', body: { name: 'parent', expiresInSeconds: 120 } });
    const p = parent.body as { id: string; token: string; expiresAt: string };
    const mint = (body: object) =>
      fetch(`${f.server.url}/v1/tokens`, {
        method: 'POST',
        headers: { authorization: `Bearer ${p.token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const child = (await (await mint({ name: 'child', expiresInSeconds: null })).json()) as {
      id: string;
      token: string;
      expiresAt: string;
    };
    assert.ok(child.expiresAt && Date.parse(child.expiresAt) <= Date.parse(p.expiresAt), `${child.expiresAt} <= ${p.expiresAt}`);
    // (A server admin's token may mint for another tenant it administers: tested in the fixture.)
    assert.equal((await as(f, 'admin', { method: 'DELETE', path: `/v1/tokens/${p.id}` })).status, 200);
    const r = await fetch(`${f.server.url}/v1/auth/whoami`, { headers: { authorization: `Bearer ${child.token}` } });
    assert.equal(r.status, 401);
    assert.equal(((await r.json()) as { code: string }).code, 'TOKEN_REVOKED');
  });

  it('NUL bytes are bad input, never a 500', async () => {
    const cases: Call[] = [
      { method: 'POST', path: '/v1/tokens', body: { name: 'a\u0000b' } },
      { method: 'DELETE', path: '/v1/tokens/%00' },
      { method: 'POST', path: '/v1/users/%00/disable' },
      { method: 'PUT', path: '/v1/users/%00/email', body: { email: null } },
      { method: 'PUT', path: '/v1/users/admin/email', body: { email: 'a\u0000b@example.com' } },
      { method: 'GET', path: '/v1/workshops/%00' },
      { method: 'POST', path: '/v1/users', body: { name: 'n', tenant: 'a\u0000' } },
      { method: 'POST', path: '/v1/projects', body: { path: '/tmp/a\u0000b' } },
      { method: 'GET', path: '/api/workspace/actions?project=%00' },
      { method: 'POST', path: '/api/workspace/actions/slots.assign/plan', body: { project: f.project, parameters: { slot: 'a\u0000' } } },
      {
        method: 'POST',
        path: '/api/workspace/actions/simulators.compose/plan',
        body: { project: f.project, parameters: { simulators: [{ name: 'pg', env: { A: '\u0000' } }] } },
      },
      { method: 'POST', path: '/api/workspace/actions/slots.assign/apply', body: { plan_id: 'plan-\u0000', fingerprint: 'x' } },
    ];
    for (const c of cases) {
      const r = await as(f, 'admin', c);
      assert.ok(r.status >= 400 && r.status < 500, `${c.method} ${c.path}: ${r.status} ${JSON.stringify(r.body)}`);
    }
  });

  it('a token never carries more rights than its user, and a viewer cannot raise their own', async () => {
    const r = await as(f, 'viewer', { method: 'POST', path: '/v1/tokens', body: { role: 'admin' } });
    assert.equal(r.status, 403);
    assert.match(JSON.stringify(r.body), /more rights/);
  });
});
