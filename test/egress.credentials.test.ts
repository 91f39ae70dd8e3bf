import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { filesHolding, insideSearch } from './helpers/leaks.js';
import { TestServer, makeRepo } from './helpers/server.js';
import { makeOriginCertificates } from './helpers/tls.js';

// Brokered credentials (atelier.yaml `egress.credentials`): a local HTTPS origin, with a CA of
// this test's own, stands in for a provider's API under two names; the clients inside the
// workshop are the real curl and python's requests, through the workshop's egress proxy.
const SECRET = `ghp_${randomBytes(18).toString('hex')}`;
const sha = (s: string): string => createHash('sha256').update(s).digest('hex');

/** git's smart HTTP through `git http-backend` (CGI), for requests that carry `expected` as their Authorization. */
function gitBackend(req: http.IncomingMessage, res: http.ServerResponse, root: string, expected: string): void {
  if (req.headers.authorization === undefined || sha(req.headers.authorization) !== sha(expected)) {
    res.writeHead(401, { 'www-authenticate': 'Bearer' });
    res.end();
    return;
  }
  const url = new URL(req.url!, 'https://origin');
  const cgi = spawn('git', ['http-backend'], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      GIT_PROJECT_ROOT: root,
      GIT_HTTP_EXPORT_ALL: '1',
      REMOTE_USER: 'token-holder',
      REQUEST_METHOD: req.method ?? 'GET',
      PATH_INFO: decodeURIComponent(url.pathname.slice('/git'.length)),
      QUERY_STRING: url.search.slice(1),
      CONTENT_TYPE: req.headers['content-type'] ?? '',
      ...(req.headers['content-length'] ? { CONTENT_LENGTH: req.headers['content-length'] } : {}),
      ...(req.headers['git-protocol'] ? { GIT_PROTOCOL: String(req.headers['git-protocol']) } : {}),
    },
  });
  req.pipe(cgi.stdin);
  let head = Buffer.alloc(0);
  let started = false;
  cgi.stdout.on('data', (c: Buffer) => {
    if (started) return void res.write(c);
    head = Buffer.concat([head, c]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) return;
    started = true;
    const headers: Record<string, string> = {};
    let status = 200;
    for (const l of head.subarray(0, end).toString('latin1').split('\r\n')) {
      const [k, ...v] = l.split(':');
      if (k!.toLowerCase() === 'status') status = Number(v.join(':').trim().split(' ')[0]);
      else headers[k!] = v.join(':').trim();
    }
    res.writeHead(status, headers);
    res.write(head.subarray(end + 4));
  });
  cgi.stdout.on('end', () => res.end());
  cgi.on('error', () => res.destroy());
}

describe('credentials injected at the egress proxy', () => {
  let dir: string;
  let origin: https.Server;
  let port: number;
  let server: TestServer;
  let ws: string;
  const seen: { authorization: string | undefined; host: string | undefined }[] = [];
  const repos: string[] = [];

  const exec = async (cmd: string): Promise<{ exitCode: number; stdout: string; stderr: string }> => server.exec(ws, ['bash', '-c', cmd]);

  before(async () => {
    dir = mkdtempSync('/tmp/atelier-broker-');
    // The stand-in provider's CA and its certificate for both names.
    makeOriginCertificates(dir, ['api.stand-in.test', 'plain.stand-in.test'], 'stand-in provider CA');
    // A repository the origin serves over HTTPS with git's own http-backend, to holders of the token only.
    execFileSync('git', ['init', '-q', '--bare', '-b', 'main', join(dir, 'git', 'served.git')]);
    execFileSync('git', ['-C', join(dir, 'git', 'served.git'), 'config', 'http.receivepack', 'true']);
    const seed = makeRepo({ 'hello.txt': 'served over https\n' });
    repos.push(seed);
    execFileSync('git', ['-C', seed, 'push', '-q', join(dir, 'git', 'served.git'), 'main']);
    origin = https.createServer({ key: readFileSync(join(dir, 'origin.key')), cert: readFileSync(join(dir, 'origin.pem')) }, (req, res) => {
      const authorization = req.headers.authorization;
      seen.push({ authorization, host: req.headers.host });
      if (req.url?.startsWith('/git/')) return gitBackend(req, res, join(dir, 'git'), `Bearer ${SECRET}`);
      // Never echoes the value: says whose it was.
      const whose = authorization === undefined ? 'none' : sha(authorization) === sha(`Bearer ${SECRET}`) ? 'broker' : 'other';
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ whose, host: req.headers.host, path: req.url }));
    });
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
    port = (origin.address() as AddressInfo).port;
    writeFileSync(join(dir, 'hosts'), '127.0.0.1 api.stand-in.test plain.stand-in.test\n');
    server = await TestServer.start({
      env: {
        ATELIER_EGRESS_HOSTS: join(dir, 'hosts'),
        ATELIER_EGRESS_ALLOW_RANGES: '127.0.0.1/32',
        ATELIER_EGRESS_UPSTREAM_CA: join(dir, 'ca.pem'),
      },
    });
    const set = await server.api('PUT', '/v1/secrets/GITHUB_TOKEN', { value: SECRET });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    const repo = makeRepo({
      'atelier.yaml': [
        'egress:',
        `  allow: ["api.stand-in.test:${port}", "plain.stand-in.test:${port}"]`,
        '  askHoldSeconds: 0',
        '  credentials:',
        `    - host: "api.stand-in.test:${port}"`,
        '      header: Authorization',
        '      value: "Bearer ${secret:GITHUB_TOKEN}"',
        '',
      ].join('\n'),
    });
    repos.push(repo);
    const w = await server.createWorkshop({ repo, name: 'broker' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    ws = w.id;
    // The stand-in's CA, for the check that unbound hosts are end to end.
    const put = await exec(`cat > /tmp/origin-ca.pem <<'PEM'\n${readFileSync(join(dir, 'ca.pem'), 'utf8')}PEM`);
    assert.equal(put.exitCode, 0, put.stderr);
  });

  after(async () => {
    await server?.dispose();
    await new Promise<void>((r) => (origin ? origin.close(() => r()) : r()));
    rmSync(dir, { recursive: true, force: true });
    for (const r of repos) rmSync(r, { recursive: true, force: true });
  });

  it('curl gets the bound header set by the proxy, in place of its own', async () => {
    const r = await exec(`curl -sS --fail https://api.stand-in.test:${port}/check -H 'Authorization: Bearer agent-own-value'`);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), { whose: 'broker', host: `api.stand-in.test:${port}`, path: '/check' });
    assert.ok(!seen.some((s) => s.authorization?.includes('agent-own-value')), 'the agent’s own value never left');
    // Several requests on one kept-alive connection each get it.
    const many = await exec(
      `curl -sS --fail https://api.stand-in.test:${port}/a https://api.stand-in.test:${port}/b https://api.stand-in.test:${port}/c`,
    );
    assert.equal(many.exitCode, 0, many.stderr);
    assert.equal(many.stdout.match(/"whose":"broker"/g)?.length, 3, many.stdout);
  });

  it("python's requests, with its defaults, is served the same way", async () => {
    const r = await exec(`/usr/bin/python3 -c "import requests; print(requests.get('https://api.stand-in.test:${port}/py').text)"`);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal((JSON.parse(r.stdout) as { whose: string }).whose, 'broker');
  });

  it('git clones and pushes over HTTPS with the bound token, which it never holds', async () => {
    const url = `https://api.stand-in.test:${port}/git/served.git`;
    const r = await exec(
      `set -e; cd /tmp; git clone -q ${url} served; cat served/hello.txt; cd served; ` +
        `git -c user.email=a@b -c user.name=agent commit -q --allow-empty -m 'from the workshop'; git push -q origin main; ` +
        `git config --get-regexp 'http|credential' || true`,
    );
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /served over https/);
    assert.ok(!r.stdout.includes('ghp_'));
    const log = execFileSync('git', ['-C', join(dir, 'git', 'served.git'), 'log', '--format=%s', '-1', 'main'], { encoding: 'utf8' });
    assert.equal(log.trim(), 'from the workshop');
  });

  it('an unbound host stays an end-to-end tunnel: the origin’s own certificate, no header added', async () => {
    const own = await exec(`curl -sS --fail --cacert /tmp/origin-ca.pem https://plain.stand-in.test:${port}/plain`);
    assert.equal(own.exitCode, 0, own.stderr);
    assert.equal((JSON.parse(own.stdout) as { whose: string }).whose, 'none');
    // The bound host is not the origin's certificate: with only the origin's CA, curl refuses it.
    const bound = await exec(`curl -sS --fail --cacert /tmp/origin-ca.pem https://api.stand-in.test:${port}/x`);
    assert.notEqual(bound.exitCode, 0);
  });

  it('the value is nowhere inside the workshop, nor in the server’s log, the egress log or the workshop’s record', async () => {
    // Looks for what every such value starts with, without writing it (the pattern is gh[p]_).
    const inside = await exec(insideSearch('gh[p]_'));
    assert.match(inside.stdout, /^files:\nprocs:0\n$/, inside.stdout + inside.stderr);
    // The system store trusts the broker too, for tools that read it and no variable.
    const system = await exec(`env -u SSL_CERT_FILE -u CURL_CA_BUNDLE curl -sS --fail https://api.stand-in.test:${port}/system`);
    assert.equal(system.exitCode, 0, system.stderr);
    assert.equal((JSON.parse(system.stdout) as { whose: string }).whose, 'broker');
    const files = await exec('cat /run/atelier/egress-ca.pem; ls -la /run/atelier; env');
    assert.ok(!files.stdout.includes(SECRET));
    assert.match(files.stdout, /NODE_EXTRA_CA_CERTS=\/run\/atelier\/egress-ca.pem/);
    assert.match(files.stdout, /REQUESTS_CA_BUNDLE=\/run\/atelier\/ca-certificates.crt/);
    const log = await server.api<unknown>('GET', `/v1/workshops/${ws}/egress`);
    assert.ok(!JSON.stringify(log.body).includes(SECRET));
    const record = await server.api<unknown>('GET', `/v1/workshops/${ws}`);
    assert.ok(!JSON.stringify(record.body).includes(SECRET));
    // Every file the server wrote under its data dir, logs included, in clear.
    assert.deepEqual(filesHolding(server.dataDir, [SECRET]), []);
  });

  it('deleting the secret stops the injection at once: the request is refused, never sent with the agent’s value', async () => {
    const before = seen.length;
    const del = await server.api('DELETE', '/v1/secrets/GITHUB_TOKEN');
    assert.equal(del.status, 204);
    const r = await exec(
      `curl -sS -w '\\n%{http_code}' https://api.stand-in.test:${port}/after -H 'Authorization: Bearer agent-own-value'`,
    );
    assert.match(r.stdout, /CREDENTIAL_GONE/);
    assert.match(r.stdout, /403$/);
    assert.equal(seen.length, before, 'nothing reached the origin');
    const again = await server.api('PUT', '/v1/secrets/GITHUB_TOKEN', { value: SECRET });
    assert.equal(again.status, 200);
  });

  it('bindings are checked when the workshop is created, naming the entry', async () => {
    const cases: [string[], RegExp][] = [
      [
        [`- host: "evil.stand-in.test:${port}"`, '  header: Authorization', '  value: "Bearer ${secret:GITHUB_TOKEN}"'],
        /egress\.credentials\.0\.host: .*not allowed by the workshop's egress policy/,
      ],
      [
        [`- host: "api.stand-in.test:${port}"`, '  header: Authorization', '  value: "Bearer ${secret:NOPE}"'],
        /secret NOPE does not exist/,
      ],
      [
        [`- host: "api.stand-in.test:${port}"`, '  header: Host', '  value: "${secret:GITHUB_TOKEN}"'],
        /egress\.credentials\.0\.header: Host frames the request/,
      ],
      [[`- host: "*.stand-in.test"`, '  header: Authorization', '  value: "${secret:GITHUB_TOKEN}"'], /not one host/],
      [
        [`- host: "api.stand-in.test:${port}"`, '  header: X-Key', '  value: "${secret:GITHUB_TOKEN}:${secret:GITHUB_TOKEN}"'],
        /exactly one secret/,
      ],
    ];
    for (const [entry, expected] of cases) {
      const repo = makeRepo({
        'atelier.yaml': ['egress:', `  allow: ["api.stand-in.test:${port}"]`, '  credentials:', ...entry.map((l) => `    ${l}`), ''].join(
          '\n',
        ),
      });
      repos.push(repo);
      const r = await server.api<{ status?: string; statusReason?: string; message?: string }>('POST', '/v1/workshops', { repo });
      const said = r.body.message ?? r.body.statusReason ?? '';
      assert.match(said, expected, JSON.stringify(r.body));
      assert.ok(r.status >= 400 || r.body.status === 'Failed', JSON.stringify(r.body));
    }
  });
});
