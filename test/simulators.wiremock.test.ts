// The wiremock simulator: the real WireMock jar on the system Java, against curl and fetch as
// peers, stubs loaded from a workspace-like directory. Run as an unprivileged uid when the
// tests run as root.
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
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
import { processGroup, processesMentioning, tcpListeners } from './helpers/proc.js';
import { RUN_AS, simulatorFixture } from './helpers/simulators.js';

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
    `http://${h.tcp!.host}:${h.tcp!.port}${path}`,
  ]);
  const cut = stdout.lastIndexOf('\n');
  return { body: stdout.slice(0, cut), status: Number(stdout.slice(cut + 1)) };
}

function adminUrl(h: SimulatorHandle, path: string): string {
  return `http://${h.tcp!.host}:${h.tcp!.port}/__admin${path}`;
}

async function adminJson<T>(h: SimulatorHandle, path: string, init?: RequestInit): Promise<T> {
  const res = await fetch(adminUrl(h, path), init);
  assert.ok(res.ok, `${path} answered ${res.status}`);
  return (await res.json()) as T;
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

  it('serves the workspace stubs and the admin API on 127.0.0.1 only, as the unprivileged uid', async () => {
    const h = await start(spec('mock'));
    assert.deepEqual(h.endpoint, { host: 'mock.atelier.internal', port: 8080 });
    assert.equal(h.env.WIREMOCK_URL, 'http://mock.atelier.internal:8080');
    assert.match(h.version, /^3\.\d+\.\d+$/);
    assert.equal(h.tcp?.host, '127.0.0.1');
    // The record the relay reads, in the instance's socket directory.
    assert.deepEqual(JSON.parse(readFileSync(h.socket, 'utf8')), h.tcp);
    const pids = processGroup(h.pid);
    assert.ok(pids.length >= 2, 'bubblewrap and the JVM');
    const port = h.tcp!.port.toString(16).toUpperCase().padStart(4, '0');
    assert.deepEqual(
      tcpListeners(pids).map((l) => l.replace(/^pid \d+: /, '')),
      [`tcp 0100007F:${port}`],
      'one listener, on 127.0.0.1 only',
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
    const created = await fetch(adminUrl(h, '/mappings'), {
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
    await fetch(adminUrl(h, '/mappings'), {
      method: 'POST',
      body: JSON.stringify({ request: { url: '/tmp' }, response: { status: 204 } }),
    });
    assert.equal((await curl(h, '/greet')).body, 'v1');
    // Edited in the workspace after the start: not seen until a reset.
    writeFileSync(join(dir, 'mappings', 'greet.json'), JSON.stringify({ request: { url: '/greet' }, response: { body: 'v2' } }));
    assert.equal((await curl(h, '/greet')).body, 'v1');

    const same = await resetSimulator(h);
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
    await assert.rejects(resetSimulator(h), (err: AtelierError) => {
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
    const again = await resetSimulator(h);
    handles.push(again);
    assert.notEqual(again.pid, h.pid);
    assert.deepEqual(JSON.parse(readFileSync(again.socket, 'utf8')), again.tcp);
    assert.equal((await curl(again, '/greet')).body, 'v3');

    await removeSimulator(again);
    assert.equal(isAlive(again), false);
    assert.equal(existsSync(again.dir), false);
    assert.equal(existsSync(join(again.socketDir, again.name)), false);
    assert.deepEqual(processesMentioning(again.dir), []);
    await assert.rejects(fetch(adminUrl(again, '/health')));
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
        const res = await fetch(adminUrl(h, '/mappings'), {
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
