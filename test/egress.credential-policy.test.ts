import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { TestServer, makeRepo } from './helpers/server.js';
import { makeOriginCertificates } from './helpers/tls.js';

// A tenant's credential policy (its maintainers' server-side bindings): a binding every new
// workshop of the tenant gets without a word in its atelier.yaml, and hosts no project binding
// nor SECRET_REQUEST may bind. A local HTTPS origin stands in for the provider; curl inside.
const SECRET = `tok_${randomBytes(18).toString('hex')}`;
const sha = (s: string): string => createHash('sha256').update(s).digest('hex');

describe("a tenant's credential policy", () => {
  let dir: string;
  let origin: https.Server;
  let port: number;
  let server: TestServer;
  const repos: string[] = [];
  const repo = (yaml: string[]): string => {
    const r = makeRepo({ 'atelier.yaml': [...yaml, ''].join('\n') });
    repos.push(r);
    return r;
  };

  before(async () => {
    dir = mkdtempSync('/tmp/atelier-credential-policy-');
    const certs = makeOriginCertificates(dir, ['api.stand-in.test', 'forbidden.stand-in.test'], 'stand-in provider CA');
    origin = https.createServer({ key: readFileSync(certs.key), cert: readFileSync(certs.cert) }, (req, res) => {
      const a = req.headers.authorization;
      const whose = a === undefined ? 'none' : sha(a) === sha(`Bearer ${SECRET}`) ? 'broker' : 'other';
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ whose }));
    });
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
    port = (origin.address() as AddressInfo).port;
    writeFileSync(join(dir, 'hosts'), '127.0.0.1 api.stand-in.test forbidden.stand-in.test\n');
    server = await TestServer.start({
      env: {
        ATELIER_EGRESS_HOSTS: join(dir, 'hosts'),
        ATELIER_EGRESS_ALLOW_RANGES: '127.0.0.1/32',
        ATELIER_EGRESS_UPSTREAM_CA: certs.ca,
        // The platform's list: what a tenant's policy may bind for every workshop.
        ATELIER_EGRESS_DEFAULTS: `api.stand-in.test:${port}`,
      },
    });
    const set = await server.api('PUT', '/v1/secrets/API_TOKEN', { value: SECRET });
    assert.equal(set.status, 200, JSON.stringify(set.body));
  });

  after(async () => {
    await server?.dispose();
    await new Promise<void>((r) => (origin ? origin.close(() => r()) : r()));
    if (dir) rmSync(dir, { recursive: true, force: true });
    for (const r of repos) rmSync(r, { recursive: true, force: true });
  });

  it('is refused when set with a bad entry, the place named, and nothing stored', async () => {
    const entry = (over: Record<string, string>) => ({
      host: `api.stand-in.test:${port}`,
      header: 'Authorization',
      value: 'Bearer ${secret:API_TOKEN}',
      ...over,
    });
    const cases: [unknown, string, RegExp][] = [
      [{ credentials: [entry({ host: `elsewhere.stand-in.test:${port}` })] }, 'credentials.0.host', /not allowed to every workshop/],
      [{ credentials: [entry({ value: 'Bearer ${secret:NOPE}' })] }, 'credentials.0.value', /secret NOPE does not exist/],
      [{ credentials: [entry({ header: 'Bad Header' })] }, 'credentials.0.header', /not an HTTP header name/],
      [{ credentials: [entry({ value: '${secret:API_TOKEN}${secret:API_TOKEN}' })] }, 'credentials.0.value', /exactly one secret/],
      [{ credentials: [entry({})], forbid: [`api.stand-in.test`] }, 'credentials.0.host', /forbid list/],
      [{ forbid: ['*.stand-in.test'] }, 'forbid.0', /not a host name/],
      [{ credentials: [entry({}), entry({})] }, 'credentials.1.host', /bound twice/],
    ];
    for (const [body, field, message] of cases) {
      const r = await server.api<{ code: string; message: string; details?: { field?: string } }>('PUT', '/v1/credential-policy', body);
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.equal(r.body.details?.field, field, JSON.stringify(r.body));
      assert.match(r.body.message, message);
    }
    const shown = await server.api<{ credentials: unknown[]; forbid: unknown[]; setBy: string | null }>('GET', '/v1/credential-policy');
    assert.deepEqual([shown.body.credentials, shown.body.forbid, shown.body.setBy], [[], [], null]);
  });

  it('binds its hosts in every new workshop of the tenant, and forbids binding the hosts it names', async () => {
    const policyFile = join(dir, 'policy.yaml');
    writeFileSync(
      policyFile,
      [
        'credentials:',
        `  - host: "api.stand-in.test:${port}"`,
        '    header: Authorization',
        '    value: "Bearer ${secret:API_TOKEN}"',
        'forbid: [forbidden.stand-in.test]',
        '',
      ].join('\n'),
    );
    const set = await server.cli(['secrets', 'policy', 'set', policyFile]);
    assert.equal(set.code, 0, set.stderr);
    assert.match(set.stdout, /api\.stand-in\.test/);
    const shown = await server.cli(['secrets', 'policy', 'show']);
    assert.match(shown.stdout, /no binding may name:\n {2}forbidden\.stand-in\.test/);

    // No credentials in its atelier.yaml: the tenant's binding is there all the same.
    const w = await server.createWorkshop({ repo: repo(['egress:', '  askHoldSeconds: 0']) });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    const r = await server.exec(w.id, ['curl', '-sS', '--fail', `https://api.stand-in.test:${port}/x`, '-H', 'Authorization: Bearer own']);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal((JSON.parse(r.stdout) as { whose: string }).whose, 'broker');
    const env = await server.exec(w.id, ['sh', '-c', 'env; cat /run/atelier/*.pem']);
    assert.ok(!env.stdout.includes(SECRET));

    // A project may neither bind a forbidden host nor rebind the policy's.
    for (const [host, expected] of [
      [
        `forbidden.stand-in.test:${port}`,
        /egress\.credentials\.0\.host: the tenant's credential policy forbids binding forbidden\.stand-in\.test/,
      ],
      [`api.stand-in.test:${port}`, /egress\.credentials\.0\.host: the tenant's credential policy binds api\.stand-in\.test/],
    ] as const) {
      const r2 = await server.api<{ status?: string; statusReason?: string; message?: string }>('POST', '/v1/workshops', {
        repo: repo([
          'egress:',
          `  allow: ["${host}"]`,
          '  credentials:',
          `    - host: "${host}"`,
          '      header: X-Key',
          '      value: "${secret:API_TOKEN}"',
        ]),
      });
      assert.match(r2.body.message ?? r2.body.statusReason ?? '', expected, JSON.stringify(r2.body));
      assert.ok(r2.status >= 400 || r2.body.status === 'Failed', JSON.stringify(r2.body));
    }
  });
});
