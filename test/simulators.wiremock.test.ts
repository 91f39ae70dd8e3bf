// The wiremock simulator: the real WireMock jar on the system Java, against curl and fetch as
// peers, stubs loaded from a workspace-like directory. Run as an unprivileged uid when the
// tests run as root.
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import type { AtelierError } from '../src/core/index.js';
import {
  isAlive,
  removeSimulator,
  resetSimulator,
  simulatorLogs,
  startSimulator,
  type SimulatorHandle,
  type SimulatorSpec,
} from '../src/simulators/index.js';
import { tcpListeners, withChildren } from './helpers/proc.js';
import { assertSandboxed, processesMounting, RUN_AS, simulatorFixture } from './helpers/simulators.js';
import { simulatorSandboxArgv } from '../src/sandbox/index.js';

const run = promisify(execFile);

/** curl as a workshop would call it (Host: mock.atelier.internal:8080), to where the relay dials. */
async function curl(h: SimulatorHandle, path: string, ...args: string[]): Promise<{ status: number; body: string }> {
  const { stdout } = await run('curl', [
    '-sS',
    '-w',
    '\n%{http_code}',
    '-H',
    `Host: ${h.endpoint.host}:${h.endpoint.port}`,
    ...args,
    '--unix-socket',
    h.socket,
    `http://${h.endpoint.host}:${h.endpoint.port}${path}`,
  ]);
  const cut = stdout.lastIndexOf('\n');
  return { body: stdout.slice(0, cut), status: Number(stdout.slice(cut + 1)) };
}

/** The admin API over the simulator's socket, as the server's relay reaches it. */
function admin(h: SimulatorHandle, path: string, init: { method?: string; body?: string } = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        socketPath: h.socket,
        method: init.method ?? 'GET',
        path: `/__admin${path}`,
        headers: { host: `${h.endpoint.host}:${h.endpoint.port}` },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(init.body);
  });
}

async function adminJson<T>(h: SimulatorHandle, path: string): Promise<T> {
  const res = await admin(h, path);
  assert.equal(res.status, 200, `${path} answered ${res.status}`);
  return JSON.parse(res.body) as T;
}

async function waitFor(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail(`never happened: ${what}`);
}

describe('wiremock simulator', () => {
  const sim = simulatorFixture('wiremock');
  const { start, handles } = sim;
  let stubs = '';
  /** The suite's stubs folder unless `extra` names another. */
  const spec = (name: string, extra: Partial<SimulatorSpec> = {}): SimulatorSpec => sim.spec(name, { stubsDirectory: stubs, ...extra });

  /** A workspace's stubs folder: `files` maps paths under it to their contents. */
  const stubDir = (name: string, files: Record<string, string>): string => {
    const dir = join(sim.base, 'workspace', name);
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(join(dir, path, '..'), { recursive: true });
      writeFileSync(join(dir, path), text);
    }
    return dir;
  };

  before(() => {
    stubs = stubDir('mocks', {
      'mappings/hello.json': JSON.stringify({
        request: { method: 'GET', url: '/hello' },
        response: { status: 200, body: 'bonjour', headers: { 'Content-Type': 'text/plain' } },
      }),
      'mappings/payments/many.json': JSON.stringify({
        mappings: [
          { request: { method: 'POST', urlPath: '/payments' }, response: { status: 201, bodyFileName: 'payment.json' } },
          { request: { method: 'GET', urlPathPattern: '/payments/[0-9]+' }, response: { status: 404 } },
        ],
      }),
      '__files/payment.json': '{"id":"pay_1","status":"accepted"}',
    });
  });

  it('serves the workspace stubs and the admin API on its socket only (Jetty on its sandbox loopback), as the unprivileged uid', async () => {
    const h = await start(spec('mock'));
    assert.deepEqual(h.endpoint, { host: 'mock.atelier.internal', port: 8080 });
    assert.equal(h.env.WIREMOCK_URL, 'http://mock.atelier.internal:8080');
    assert.match(h.version, /^3\.\d+\.\d+$/);
    assert.equal(h.tcp, undefined);
    assert.equal(h.socketName, 'mock/http.sock');
    assert.equal(statSync(h.socket).mode & 0o777, 0o600);
    assert.equal(statSync(dirname(h.socket)).mode & 0o777, 0o700);
    const program = assertSandboxed(h);
    const pids = withChildren(program);
    assert.ok(pids.length >= 2, 'the JVM and its socket bridge');
    // Jetty listens on the loopback of the sandbox's own network namespace, nowhere else.
    assert.deepEqual(
      [...new Set(tcpListeners(pids).map((l) => l.replace(/^pid \d+: /, '')))],
      [`tcp 0100007F:${(8080).toString(16).toUpperCase().padStart(4, '0')}`],
      'one listener, on 127.0.0.1 of its own namespace only',
    );
    if (RUN_AS) {
      for (const p of pids) assert.equal(Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${p}/status`, 'utf8'))![1]), RUN_AS.uid);
    }

    assert.deepEqual(await curl(h, '/hello'), { status: 200, body: 'bonjour' });
    assert.deepEqual(await curl(h, '/payments', '-X', 'POST', '-d', '{}'), { status: 201, body: '{"id":"pay_1","status":"accepted"}' });
    assert.equal((await curl(h, '/payments/12')).status, 404);
    assert.equal((await curl(h, '/nowhere')).status, 404);

    const mappings = await adminJson<{ meta: { total: number } }>(h, '/mappings');
    assert.equal(mappings.meta.total, 3);
    const unmatched = await adminJson<{ requests: Array<{ url: string }> }>(h, '/requests/unmatched');
    assert.deepEqual(
      unmatched.requests.map((r) => r.url),
      ['/nowhere'],
    );
    const created = await admin(h, '/mappings', {
      method: 'POST',
      body: JSON.stringify({ request: { url: '/added' }, response: { status: 202 } }),
    });
    assert.equal(created.status, 201);
    assert.equal((await curl(h, '/added')).status, 202);
  });

  it('reset reloads the stubs from the workspace and clears the request journal, in place; a dead one is started again; remove leaves nothing', async () => {
    const dir = stubDir('editable', {
      'mappings/greet.json': JSON.stringify({ request: { url: '/greet' }, response: { body: 'v1' } }),
    });
    const h = await start(spec('editable', { stubsDirectory: dir }));
    await admin(h, '/mappings', {
      method: 'POST',
      body: JSON.stringify({ request: { url: '/tmp' }, response: { status: 204 } }),
    });
    assert.equal((await curl(h, '/greet')).body, 'v1');
    // Edited in the workspace after the start: not seen until a reset.
    writeFileSync(join(dir, 'mappings', 'greet.json'), JSON.stringify({ request: { url: '/greet' }, response: { body: 'v2' } }));
    assert.equal((await curl(h, '/greet')).body, 'v1');

    const same = await resetSimulator(h, { sandbox: simulatorSandboxArgv });
    assert.equal(same.pid, h.pid, 'reset in place, not restarted');
    assert.equal((await curl(h, '/tmp')).status, 404, 'stubs added through the API are gone');
    const journal = await adminJson<{ requests: Array<{ request: { url: string } }> }>(h, '/requests');
    assert.deepEqual(
      journal.requests.map((r) => r.request.url),
      ['/tmp'],
      'the journal holds only what came after the reset',
    );
    assert.equal((await curl(h, '/greet')).body, 'v2');

    // A reset with a stub broken meanwhile is refused and keeps the stubs in use.
    writeFileSync(join(dir, 'mappings', 'greet.json'), '{"request": ');
    await assert.rejects(resetSimulator(h, { sandbox: simulatorSandboxArgv }), (err: AtelierError) => {
      assert.equal(err.code, 'INVALID_ARGUMENT');
      assert.match(err.message, /the mapping file mappings\/greet\.json is not valid JSON/);
      return true;
    });
    assert.equal((await curl(h, '/greet')).body, 'v2');

    await assert.rejects(start(spec('editable', { stubsDirectory: dir })), (err: AtelierError) => err.code === 'ALREADY_EXISTS');

    // Killed: a reset starts it again, with the stubs as they are now.
    writeFileSync(join(dir, 'mappings', 'greet.json'), JSON.stringify({ request: { url: '/greet' }, response: { body: 'v3' } }));
    process.kill(h.pid, 'SIGKILL');
    for (let i = 0; i < 400 && isAlive(h); i++) await new Promise((r) => setTimeout(r, 5));
    const again = await resetSimulator(h, { sandbox: simulatorSandboxArgv });
    handles.push(again);
    assert.notEqual(again.pid, h.pid);
    assert.equal((await curl(again, '/greet')).body, 'v3');

    await removeSimulator(again);
    assert.equal(isAlive(again), false);
    assert.equal(existsSync(again.dir), false);
    assert.equal(existsSync(join(again.socketDir, again.name)), false);
    assert.deepEqual(processesMounting(again.dir), []);
    await assert.rejects(admin(again, '/health'));
  });

  it('never opens a connection for a stub: proxying, webhooks and files outside its root are refused', async () => {
    const h = await start(spec('guarded', { stubsDirectory: undefined }));
    let hits = 0;
    const target = createServer((_req, res) => {
      hits++;
      res.end('reached');
    });
    await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
    const targetPort = (target.address() as { port: number }).port;
    try {
      const stub = async (url: string, response: object, extra: object = {}): Promise<void> => {
        const res = await admin(h, '/mappings', {
          method: 'POST',
          body: JSON.stringify({ request: { url }, response, ...extra }),
        });
        assert.equal(res.status, 201);
      };
      await stub('/proxy', { proxyBaseUrl: `http://127.0.0.1:${targetPort}` });
      await stub('/proxy-name', { proxyBaseUrl: `http://localhost:${targetPort}` });
      await stub('/proxy-v6', { proxyBaseUrl: `http://[::1]:${targetPort}` });
      await stub('/file', { bodyFileName: '../../../../../../../../etc/passwd' });
      await stub(
        '/hook',
        { status: 200 },
        { serveEventListeners: [{ name: 'webhook', parameters: { method: 'POST', url: `http://127.0.0.1:${targetPort}/` } }] },
      );
      for (const path of ['/proxy', '/proxy-name', '/proxy-v6']) {
        const res = await curl(h, path);
        assert.equal(res.status, 500, path);
        assert.match(res.body, /The target proxy address is denied/);
      }
      const file = await curl(h, '/file');
      assert.equal(file.status, 500);
      assert.doesNotMatch(file.body, /root:x:0:0/);
      assert.equal((await curl(h, '/hook')).status, 200);
      await waitFor('the webhook refusal in the log', async () => /target webhook address .* is denied/.test(await simulatorLogs(h)));
      assert.equal(hits, 0);
    } finally {
      target.close();
    }
  });

  it('refuses missing or malformed stubs naming the file, links, versions and settings it does not have', async () => {
    const refused = async (s: SimulatorSpec, pattern: RegExp, code = 'INVALID_ARGUMENT'): Promise<void> => {
      await assert.rejects(startSimulator(s), (err: AtelierError) => {
        assert.equal(err.code, code);
        assert.match(err.message, pattern);
        return true;
      });
    };
    await refused(spec('bad', { stubsDirectory: join(sim.base, 'workspace', 'absent') }), /the stubs directory .*absent does not exist/);
    await refused(spec('bad', { stubsDirectory: 'tests/mocks' }), /stubsDirectory tests\/mocks must be an absolute path/);
    await refused(
      spec('bad', { stubsDirectory: stubDir('flat', { 'hello.json': '{}' }) }),
      /has neither a mappings\/ nor a __files\/ folder: put the stub mappings \(JSON\) in .*flat\/mappings\//,
    );
    await refused(
      spec('bad', {
        stubsDirectory: stubDir('broken', {
          'mappings/ok.json': '{"request":{},"response":{}}',
          'mappings/deep/bad.json': '{"request": {',
        }),
      }),
      /the mapping file mappings\/deep\/bad\.json is not valid JSON/,
    );
    await refused(
      spec('bad', { stubsDirectory: stubDir('notstub', { 'mappings/list.json': '[1, 2]' }) }),
      /the mapping file mappings\/list\.json is not a WireMock stub mapping/,
    );
    const linked = stubDir('linked', { 'mappings/ok.json': '{"request":{},"response":{}}' });
    symlinkSync('/etc/passwd', join(linked, '__files'));
    await refused(spec('bad', { stubsDirectory: linked }), /__files in \S+ is a symbolic link: stubs are copied as regular files only/);
    await refused(
      spec('bad', { version: '2.35' }),
      /WireMock 2\.35 is not installed on this server; installed: 3\.\d+\.\d+/,
      'UNSUPPORTED',
    );
    await refused(
      spec('bad', { env: { WIREMOCK_OPTIONS: '--verbose' } }),
      /unknown env WIREMOCK_OPTIONS \(a wiremock simulator takes no env\)/,
    );
    await refused({ ...spec('bad'), type: 'postgres' }, /stubsDirectory applies to wiremock simulators only/);
    assert.equal(existsSync(join(sim.base, 'services', 'bad')), false);
  });
});
