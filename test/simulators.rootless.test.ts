import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { type TestServer, NOBODY, makeNobodyRepo, startRootlessServer } from './helpers/server.js';
import { processesMounting } from './helpers/simulators.js';

// Simulators of a rootless server (started by `nobody`): every catalog type in a sandbox of its
// own made with a user namespace (no root anywhere), reached from inside the workshop by its
// real clients, and contained as with a root server: its own namespaces, no capability, an
// empty bounding set, no_new_privs, loopback only, no host process in view, no host file written.

function status(pid: number, field: string): string | undefined {
  try {
    return new RegExp(`^${field}:\\s+(.*)$`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]?.trim();
  } catch {
    return undefined;
  }
}

describe('simulators of a rootless server', () => {
  let server: TestServer;
  let base: string;
  let ws: string;
  const marker = `/tmp/atelier-rootless-escape-${process.pid}`;

  before(async () => {
    ({ server, base } = await startRootlessServer('/tmp/atelier-rootless-sim-'));
    const repo = makeNobodyRepo({
      'README.md': '# rootless simulators\n',
      'mocks/mappings/hello.json': JSON.stringify({ request: { url: '/hello' }, response: { body: 'bonjour' } }),
    });
    const w = await server.createWorkshop({
      repo,
      simulators: [
        { type: 'postgres', options: { superuser: true } },
        { type: 'redis' },
        { type: 'localstack', services: ['s3'] },
        { type: 'wiremock', stubsDirectory: 'mocks' },
      ],
    });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    ws = w.id;
  });

  after(async () => {
    await server?.dispose();
    rmSync(base, { recursive: true, force: true });
    rmSync(marker, { force: true });
  });

  it('starts every type, each reached from inside by its real client', async () => {
    const sims = (
      await server.api<{ items: Array<{ name: string; status: string; statusReason: string | null }> }>(
        'GET',
        `/v1/workshops/${ws}/simulators`,
      )
    ).body.items;
    assert.deepEqual(
      sims.map((s) => [s.name, s.status, s.statusReason]),
      [
        ['postgres', 'Running', null],
        ['redis', 'Running', null],
        ['aws', 'Running', null],
        ['mock', 'Running', null],
      ],
    );
    const r = await server.exec(ws, [
      'sh',
      '-c',
      [
        'psql "$DATABASE_URL" -Atc "select 40 + 2"',
        'redis-cli -h redis.atelier.internal PING',
        'curl -sS http://mock.atelier.internal:8080/hello; echo',
        'curl -sS -o /dev/null -w "%{http_code}\\n" http://aws.atelier.internal:4566/',
      ].join(' && '),
    ]);
    assert.equal(r.stdout, '42\nPONG\nbonjour\n200\n', r.stderr);
  });

  it('runs them in user namespaces of their own, without capabilities, as the server user', () => {
    const dir = join(server.dataDir, 'workshops', ws, 'simulators');
    for (const name of ['postgres', 'redis', 'aws', 'mock']) {
      const pids = processesMounting(join(dir, name));
      assert.ok(pids.length > 0, `no process of ${name}`);
      for (const pid of pids) {
        for (const ns of ['user', 'net', 'pid', 'mnt', 'ipc', 'uts'])
          assert.notEqual(
            readlinkSync(`/proc/${pid}/ns/${ns}`),
            readlinkSync(`/proc/self/ns/${ns}`),
            `${name} shares the host's ${ns} namespace`,
          );
        assert.equal(status(pid, 'Uid')?.split(/\s+/)[0], String(NOBODY));
        assert.equal(status(pid, 'CapEff'), '0000000000000000');
        assert.equal(status(pid, 'CapBnd'), '0000000000000000');
        assert.equal(status(pid, 'NoNewPrivs'), '1');
      }
    }
  });

  it("a superuser's programs stay in its sandbox: its processes only, loopback only, no host file", async () => {
    const sql = (q: string): Promise<{ exitCode: number; stdout: string; stderr: string }> =>
      server.exec(ws, ['sh', '-c', `psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -Atc "${q}"`]);
    assert.equal((await sql('CREATE TABLE seen (line text)')).exitCode, 0);
    const copy = await sql(
      `COPY seen FROM PROGRAM 'ls -d /proc/[0-9]* | wc -l; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d \\" \\"; echo x > ${marker} && echo wrote'`,
    );
    assert.equal(copy.exitCode, 0, copy.stderr);
    const lines = (await sql('SELECT line FROM seen')).stdout.trim().split('\n');
    assert.ok(Number(lines[0]) < 30, `processes seen: ${lines[0]}`);
    assert.equal(lines[1], 'lo');
    assert.equal(lines[2], 'wrote');
    assert.equal(existsSync(marker), false, 'a host file was written');
  });
});
