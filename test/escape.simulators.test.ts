import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import {
  existsSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TestServer, makeRepo } from './helpers/server.js';

// The escape battery of the simulators, run as an agent would: from inside a real workshop, with
// nothing but the token every exec gets (ATELIER_TOKEN) and the simulators' own clients. Every
// catalog type at its most privileged setting (a postgres superuser asked for by the agent
// itself), each attempt followed by the check that it stayed in the simulator's sandbox: no file
// on the host, no host process in view, no forbidden address reached (the server's API port and a
// loopback listener of this test, which count what reaches them), no other workshop touched.

interface Sim {
  name: string;
  type: string;
  status: string;
  statusReason: string | null;
  env: Record<string, string>;
}

/** Host paths an attempt aims at: none may exist afterwards. */
const marker = (what: string): string => `/tmp/atelier-escape-${what}-${randomBytes(4).toString('hex')}`;

describe('simulator escape battery (as the agent, from inside a workshop)', () => {
  let server: TestServer;
  let ws: string;
  let other: string;
  let listener: Server;
  let hits = 0;
  let listenerPort = 0;
  let apiPort = 0;
  const markers: string[] = [];

  before(async () => {
    listener = createServer((s) => {
      hits++;
      s.destroy();
    });
    await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
    listenerPort = (listener.address() as { port: number }).port;
    server = await TestServer.start();
    apiPort = Number(new URL(server.url).port);
    const repo = makeRepo({
      'README.md': '# escape\n',
      'mocks/mappings/hello.json': JSON.stringify({ request: { url: '/hello' }, response: { body: 'hi' } }),
    });
    const a = await server.createWorkshop({
      repo,
      name: 'attacker',
      simulators: [{ type: 'redis' }, { type: 'localstack' }, { type: 'wiremock', stubsDirectory: 'mocks' }],
    });
    assert.equal(a.status, 'Running', a.statusReason ?? '');
    ws = a.id;
    const b = await server.createWorkshop({ repo: makeRepo(), name: 'victim', simulators: [{ type: 'postgres', name: 'victimdb' }] });
    assert.equal(b.status, 'Running', b.statusReason ?? '');
    other = b.id;
  });

  after(async () => {
    await server?.dispose();
    listener?.close();
  });

  async function sh(script: string, id = ws): Promise<{ exitCode: number; stdout: string; stderr: string }> {
    return server.exec(id, ['bash', '-c', script]);
  }

  /** SQL as the workshop's postgres superuser, from inside, with psql; rows as text. */
  async function sql(query: string): Promise<{ ok: boolean; out: string }> {
    const r = await sh(`psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -Atc ${JSON.stringify(query).replace(/\$/g, '\\$')}`);
    return { ok: r.exitCode === 0, out: (r.stdout + r.stderr).trim() };
  }

  /** Nothing reached the test's listener nor exists at any of the host paths aimed at. */
  function stayedInside(): void {
    assert.equal(hits, 0, 'a simulator reached a loopback listener of the host');
    for (const m of markers) assert.equal(existsSync(m), false, `${m} was written on the host`);
  }

  it('the agent gets a postgres superuser with its own token', async () => {
    const r = await sh(
      'curl -sS -o /dev/stderr -w "%{http_code}" -X POST -H "authorization: Bearer $ATELIER_TOKEN" -H "content-type: application/json" ' +
        `-d '{"type":"postgres","options":{"superuser":true}}' "$ATELIER_URL/v1/workshops/$ATELIER_WORKSHOP_ID/simulators"`,
    );
    assert.equal(r.stdout.trim(), '201', r.stderr);
    const su = await sql('SELECT rolsuper FROM pg_roles WHERE rolname = current_user');
    assert.deepEqual(su, { ok: true, out: 't' });
  });

  it('postgres superuser: COPY … PROGRAM runs in the sandbox (its own uid, its processes only, loopback only, no host file)', async () => {
    const host = marker('pg-program');
    markers.push(host);
    // A shell on the server's side: who it is, what it sees, where it can write and connect.
    await sql('CREATE TABLE loot (line text)');
    const probe = [
      'echo uid=$(id -u)',
      'echo procs=$(ls -d /proc/[0-9]* | wc -l)',
      'for c in /proc/[0-9]*/comm; do echo comm=$(cat $c); done',
      'echo ifaces=$(ls /sys/class/net 2>/dev/null | tr "\\n" " ")$(cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d " " | tr "\\n" ",")',
      `echo pwned > ${host} && echo wrote=${host}`,
      `(echo x > /dev/tcp/127.0.0.1/${listenerPort}) 2>/dev/null && echo reached=listener || echo refused=listener`,
      `(echo x > /dev/tcp/127.0.0.1/${apiPort}) 2>/dev/null && echo reached=api || echo refused=api`,
      '(echo x > /dev/tcp/10.0.2.2/80) 2>/dev/null && echo reached=outside || echo refused=outside',
      'test -e /etc/shadow && echo shadow=visible || echo shadow=absent',
      'cat /proc/1/cmdline | tr "\\0" " " | cut -c1-40 | sed "s/^/init=/"',
    ].join('; ');
    const copy = await sql(`COPY loot FROM PROGRAM 'bash -c ''${probe.replace(/'/g, "''''")}'''`);
    assert.ok(copy.ok, copy.out);
    const lines = (await sql('SELECT line FROM loot')).out.split('\n');
    const values = (key: string): string[] => lines.filter((l) => l.startsWith(`${key}=`)).map((l) => l.slice(key.length + 1));
    assert.notEqual(values('uid')[0], '0', 'the program runs as an unprivileged uid');
    // Its processes only: the sandbox's init, postgres and its workers, this shell and its commands.
    const comms = values('comm');
    for (const c of comms) assert.match(c, /^(bwrap|postgres|bash|sh|cat|ls|wc|tr|cut|sed|id|test)$/, `a host process is visible: ${c}`);
    assert.ok(Number(values('procs')[0]) < 30, `processes seen: ${values('procs')[0]}`);
    assert.doesNotMatch(comms.join(' '), /node|python3|sleep|socat|java|redis/);
    assert.equal(values('ifaces')[0], 'lo,', 'loopback only');
    // The file went to the sandbox's private /tmp, not the host's.
    assert.deepEqual(values('wrote'), [host]);
    assert.deepEqual(values('refused'), ['listener', 'api', 'outside']);
    assert.deepEqual(values('shadow'), ['absent']);
    assert.match(values('init')[0] ?? '', /^(\/usr\/bin\/)?bwrap --args 3 --/);
    assert.doesNotMatch(lines.join('\n'), new RegExp(server.dataDir), 'the host data dir is named inside');
    stayedInside();
  });

  it('postgres superuser: COPY … TO a host path, reading host files, ALTER SYSTEM + reload, untrusted languages', async () => {
    const copied = marker('pg-copy');
    const archived = marker('pg-archive');
    const language = marker('pg-language');
    markers.push(copied, archived, language);
    assert.ok((await sql(`COPY (SELECT 'pwned') TO '${copied}'`)).ok);
    // Written in its sandbox's /tmp: readable back there, absent on the host.
    assert.deepEqual(await sql(`SELECT pg_read_file('${copied}')`), { ok: true, out: 'pwned' });
    const shadow = await sql("SELECT pg_read_file('/etc/shadow')");
    assert.equal(shadow.ok, false);
    assert.match(shadow.out, /No such file or directory/);
    const data = await sql(`SELECT pg_ls_dir('${server.dataDir}')`);
    assert.equal(data.ok, false, 'the server data dir is visible inside');

    assert.ok((await sql(`ALTER SYSTEM SET archive_command = 'echo pwned > ${archived}'`)).ok);
    assert.ok((await sql('ALTER SYSTEM SET archive_mode = on')).ok);
    assert.deepEqual(await sql('SELECT pg_reload_conf()'), { ok: true, out: 't' });
    await sql('SELECT pg_switch_wal()');
    // An untrusted language, where this host has one; refused where it has none.
    const available = (await sql("SELECT string_agg(name, ',') FROM pg_available_extensions WHERE name IN ('plperlu', 'plpython3u')")).out;
    if (available.includes('plpython3u')) {
      assert.ok((await sql('CREATE EXTENSION plpython3u')).ok);
      assert.ok(
        (await sql(`DO $$ open('${language}', 'w').write('pwned') $$ LANGUAGE plpython3u`)).ok,
        'the untrusted language ran (in the sandbox)',
      );
    } else if (available.includes('plperlu')) {
      assert.ok((await sql('CREATE EXTENSION plperlu')).ok);
      assert.ok((await sql(`DO $$ open(my $f, '>', '${language}'); print $f 'pwned'; $$ LANGUAGE plperlu`)).ok);
    } else {
      const refused = await sql('CREATE EXTENSION plperlu');
      assert.equal(refused.ok, false);
      assert.match(refused.out, /is not available|could not open extension control file/);
    }
    // The settings went to its own data directory, in the workshop's tree on the host.
    const auto = join(server.dataDir, 'workshops', ws, 'simulators', 'postgres', 'data', 'postgresql.auto.conf');
    assert.match(readFileSync(auto, 'utf8'), new RegExp(`archive_command = 'echo pwned > ${archived}'`));
    stayedInside();
  });

  it('redis: CONFIG SET dir/dbfilename, MODULE LOAD, DEBUG and Lua stay refused; SAVE writes only its own data', async () => {
    const target = marker('redis');
    markers.push(target);
    const cli = async (...args: string[]): Promise<string> =>
      (await server.exec(ws, ['redis-cli', '-h', 'redis.atelier.internal', ...args])).stdout.trim();
    assert.match(await cli('CONFIG', 'SET', 'dir', '/tmp'), /protected config/);
    assert.match(await cli('CONFIG', 'SET', 'dbfilename', target.slice('/tmp/'.length)), /protected config/);
    assert.match(await cli('MODULE', 'LOAD', '/usr/lib/x86_64-linux-gnu/libc.so.6'), /MODULE command not allowed/);
    assert.match(await cli('DEBUG', 'SLEEP', '0'), /DEBUG command not allowed/);
    assert.match(await cli('EVAL', "return os.execute('touch " + target + "')", '0'), /os|nil|Script attempted to access/i);
    assert.match(await cli('EVAL', "return io.open('" + target + "', 'w')", '0'), /io|nil|Script attempted to access/i);
    assert.equal(await cli('SET', 'k', 'v'), 'OK');
    assert.equal(await cli('SAVE'), 'OK');
    const data = join(server.dataDir, 'workshops', ws, 'simulators', 'redis', 'data');
    assert.deepEqual(readdirSync(data), ['dump.rdb'], 'SAVE wrote in its own data directory');
    stayedInside();
  });

  it('S3, SQS, DynamoDB: path traversal in keys, bucket, queue and table names stays in its directory', async () => {
    const target = marker('s3');
    markers.push(target);
    const name = target.slice('/tmp/'.length);
    const aws =
      'curl -sS -o /dev/null -w "%{http_code}\\n" --path-as-is -H "authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0" ';
    const r = await sh(
      [
        `${aws} -X PUT http://aws.atelier.internal:4566/escape`,
        `${aws} -X PUT --data pwned http://aws.atelier.internal:4566/escape/../../../../../../../../tmp/${name}`,
        `${aws} -X PUT --data pwned "http://aws.atelier.internal:4566/escape/..%2f..%2f..%2f..%2f..%2f..%2f..%2ftmp%2f${name}"`,
        `${aws} -X PUT "http://aws.atelier.internal:4566/..%2f..%2f..%2f..%2ftmp%2f${name}"`,
        `${aws} -X PUT -H "x-amz-copy-source: /escape/../../../../../../etc/passwd" http://aws.atelier.internal:4566/escape/copied`,
        `curl -sS -o /dev/null -w "%{http_code}\\n" -H "x-amz-target: AmazonSQS.CreateQueue" -H "content-type: application/x-amz-json-1.0" -d '{"QueueName":"../../../tmp/${name}"}' http://aws.atelier.internal:4566/`,
        `curl -sS -o /dev/null -w "%{http_code}\\n" -H "x-amz-target: DynamoDB_20120810.CreateTable" -H "content-type: application/x-amz-json-1.0" -d '{"TableName":"../../tmp/${name}","KeySchema":[{"AttributeName":"id","KeyType":"HASH"}],"AttributeDefinitions":[{"AttributeName":"id","AttributeType":"S"}],"BillingMode":"PAY_PER_REQUEST"}' http://aws.atelier.internal:4566/`,
      ].join('; '),
    );
    assert.equal(r.exitCode, 0, r.stderr);
    const codes = r.stdout.trim().split('\n').map(Number);
    assert.equal(codes.length, 7);
    for (const c of codes) assert.ok(c > 0 && c < 500, `an answer, not a failure: ${codes.join(' ')}`);
    // Whatever it stored is under its own S3 directory, in the workshop's tree.
    const s3 = join(server.dataDir, 'workshops', ws, 'simulators', 'aws', 's3');
    assert.ok(existsSync(s3));
    stayedInside();
  });

  it('wiremock: proxying, webhooks and files outside its root reach nothing of the host', async () => {
    const target = marker('wiremock');
    markers.push(target);
    const admin = (path: string, body: object): string =>
      `curl -sS -o /dev/null -w "%{http_code}\\n" -X POST -d '${JSON.stringify(body)}' http://mock.atelier.internal:8080/__admin${path}`;
    const r = await sh(
      [
        admin('/mappings', { request: { url: '/p1' }, response: { proxyBaseUrl: `http://127.0.0.1:${listenerPort}` } }),
        admin('/mappings', { request: { url: '/p2' }, response: { proxyBaseUrl: `http://127.0.0.1:${apiPort}` } }),
        admin('/mappings', { request: { url: '/f1' }, response: { bodyFileName: '../../../../../../../../etc/passwd' } }),
        admin('/mappings', {
          request: { url: '/t1' },
          response: { body: "{{systemValue type='ENVIRONMENT' key='PATH'}}", transformers: ['response-template'] },
        }),
        admin('/mappings', {
          request: { url: '/h1' },
          response: { status: 200 },
          serveEventListeners: [{ name: 'webhook', parameters: { method: 'POST', url: `http://127.0.0.1:${listenerPort}/` } }],
        }),
        admin('/mappings/save', {}),
        'for p in p1 p2 f1 t1 h1; do curl -sS http://mock.atelier.internal:8080/$p; echo; done',
      ].join('; '),
    );
    assert.equal(r.exitCode, 0, r.stderr);
    assert.doesNotMatch(r.stdout, /root:x:0:0/, 'a host file was served');
    assert.doesNotMatch(r.stdout, /\/usr\/sbin:/, 'the environment was read by a template');
    await new Promise((res) => setTimeout(res, 500));
    // Saved mappings land in its own stubs copy, in the workshop's tree.
    const saved = join(server.dataDir, 'workshops', ws, 'simulators', 'mock', 'root', 'mappings');
    assert.ok(readdirSync(saved).length > 0);
    stayedInside();
  });

  it("no other workshop's simulator is reachable: not by name, not through the proxy, not by its host path", async () => {
    const sims = (await server.api<{ items: Sim[] }>('GET', `/v1/workshops/${other}/simulators`)).body.items;
    assert.equal(sims[0]?.status, 'Running', sims[0]?.statusReason ?? '');
    const sock = join(server.dataDir, 'workshops', other, 'simulators', '.sock', 'victimdb', '.s.PGSQL.5432');
    assert.ok(existsSync(sock));
    const r = await sh(
      [
        'getent hosts victimdb.atelier.internal && echo resolved || echo unresolved',
        'curl -sS -o /dev/null -w "%{http_code}\\n" --noproxy "" -x "$HTTPS_PROXY" --proxytunnel http://victimdb.atelier.internal:5432/ 2>&1 | tail -1',
        `test -e ${sock} && echo visible || echo invisible`,
      ].join('; '),
    );
    assert.match(r.stdout, /^unresolved$/m);
    assert.doesNotMatch(r.stdout, /^200$/m);
    assert.match(r.stdout, /^invisible$/m);
    // From inside the attacker's postgres sandbox too.
    await sql('CREATE TABLE probe2 (line text)');
    assert.ok((await sql(`COPY probe2 FROM PROGRAM 'test -e ${sock} && echo visible || echo invisible'`)).ok);
    assert.equal((await sql('SELECT line FROM probe2')).out, 'invisible');
    // The socket's directory is closed to every other host user.
    const mode = (await import('node:fs')).statSync(join(sock, '..')).mode & 0o777;
    assert.equal(mode, 0o700);
    stayedInside();
  });
  it('postgres superuser: its socket swapped for a link to a host socket is never dialled by the server', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'atelier-escape-sock-'));
    const path = join(dir, 'target.sock');
    let unixHits = 0;
    const target = createServer((s) => {
      unixHits++;
      s.destroy();
    });
    await new Promise<void>((r) => target.listen(path, r));
    const sockDir = join(server.dataDir, 'workshops', ws, 'simulators', '.sock', 'postgres');
    const sock = join(sockDir, '.s.PGSQL.5432');
    try {
      // From inside: the directory is no longer the simulator's once it is ready.
      await sql('CREATE TABLE swap (line text)');
      const swap = `(rm -f /sim/sock/.s.PGSQL.5432 && ln -s ${path} /sim/sock/.s.PGSQL.5432 && echo swapped) 2>&1 || echo refused`;
      assert.ok((await sql(`COPY swap FROM PROGRAM '${swap}'`)).ok);
      assert.match((await sql("SELECT string_agg(line, ' ') FROM swap")).out, /refused/);
      assert.equal(statSync(sockDir).uid, 0, 'the socket directory is root-owned once the simulator is ready');
      assert.ok(lstatSync(sock).isSocket());
      assert.deepEqual(await sql('SELECT 1'), { ok: true, out: '1' });
      // The same link put there behind its back (as a rootless simulator could): refused, not followed.
      renameSync(sock, `${sock}.aside`);
      symlinkSync(path, sock);
      const r = await sql('SELECT 1');
      assert.equal(r.ok, false, 'the workshop connected through the link');
      rmSync(sock);
      renameSync(`${sock}.aside`, sock);
      assert.deepEqual(await sql('SELECT 1'), { ok: true, out: '1' });
      assert.equal(unixHits, 0, "the server connected to the test's unix socket through the link");
    } finally {
      if (existsSync(`${sock}.aside`)) {
        rmSync(sock, { force: true });
        renameSync(`${sock}.aside`, sock);
      }
      target.close();
      rmSync(dir, { recursive: true, force: true });
    }
    stayedInside();
  });

  it('wiremock stubs: a link to a host file or a FIFO, even swapped in during a reset, is never read', async () => {
    const secretDir = mkdtempSync(join(tmpdir(), 'atelier-escape-secret-'));
    const secret = join(secretDir, 'secret.txt');
    const content = `host-secret-${randomBytes(8).toString('hex')}`;
    writeFileSync(secret, content, { mode: 0o600 });
    const reset = (): Promise<{ status: number }> => server.api('POST', `/v1/workshops/${ws}/simulators/mock/reset`);
    const get = async (): Promise<string> => (await sh('curl -sS --max-time 5 http://mock.atelier.internal:8080/leak; echo')).stdout;
    try {
      const mapping = JSON.stringify({ request: { url: '/leak' }, response: { bodyFileName: 'leak.txt' } });
      const cwd = '/workspace';
      const w = await sh(
        `cd ${cwd} && mkdir -p mocks/__files && echo '${mapping}' > mocks/mappings/leak.json && echo safe > mocks/__files/leak.txt`,
      );
      assert.equal(w.exitCode, 0, w.stderr);
      // Plainly a link, then plainly a FIFO: refused, the server answering all along.
      assert.equal((await sh(`cd ${cwd} && ln -sf ${secret} mocks/__files/leak.txt`)).exitCode, 0);
      assert.notEqual((await reset()).status, 200);
      assert.doesNotMatch(await get(), new RegExp(content));
      assert.equal((await sh(`cd ${cwd} && rm -f mocks/__files/leak.txt && mkfifo mocks/__files/leak.txt`)).exitCode, 0);
      const started = Date.now();
      assert.notEqual((await reset()).status, 200);
      assert.ok(Date.now() - started < 10_000, 'the reset blocked on a FIFO');
      assert.equal((await fetch(`${server.url}/healthz`, { signal: AbortSignal.timeout(5000) })).status, 200);
      // Swapped back and forth while resets run: whatever a reset took, it is never the host file.
      const loop =
        `cd ${cwd}/mocks/__files && end=$((SECONDS+8)); while [ $SECONDS -lt $end ]; do ` +
        `echo safe > a.tmp && mv -f a.tmp leak.txt; ln -sf ${secret} l.tmp && mv -Tf l.tmp leak.txt; rm -f f.tmp; mkfifo f.tmp && mv -Tf f.tmp leak.txt; done; rm -f leak.txt; echo safe > leak.txt`;
      const racing = sh(loop);
      for (let i = 0; i < 12; i++) {
        await reset();
        assert.doesNotMatch(await get(), new RegExp(content), 'the host file was served');
        assert.equal((await fetch(`${server.url}/healthz`, { signal: AbortSignal.timeout(5000) })).status, 200);
      }
      await racing;
      assert.equal((await reset()).status, 200);
      assert.match(await get(), /safe/);
      const copy = join(server.dataDir, 'workshops', ws, 'simulators', 'mock', 'root', '__files', 'leak.txt');
      assert.ok(lstatSync(copy).isFile());
      assert.doesNotMatch(readFileSync(copy, 'utf8'), new RegExp(content));
    } finally {
      rmSync(secretDir, { recursive: true, force: true });
    }
    stayedInside();
  });
});
