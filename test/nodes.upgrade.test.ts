import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, type TestServer } from './helpers/server.js';
import { startNodes, type Node, type Ws } from './helpers/nodes.js';

// A rolling upgrade (docs/replicas.md): two nodes on one PostgreSQL, a workshop on each, restarted
// one at a time on a second build that adds a migration (made here from this checkout's: a copy
// of bin/ and dist/ with one throwaway migration and another version, as test/host.upgrade.test.ts
// makes its second release). After each step every workshop answers an exec through every live
// node; the node still on the first build serves on the newer schema, and joins it again when
// restarted, saying it should be upgraded.

const NEXT = '0.1.1-rolling';
const PROBE = '900_rolling_upgrade_probe.sql';
/** The newest migration of the first build (this checkout's). */
const NEWEST = readdirSync(join(REPO_ROOT, 'dist/db/migrations'))
  .filter((f) => f.endsWith('.sql'))
  .sort()
  .at(-1)!;

/** The second build: this checkout's bin/ and dist/ with one more (harmless) migration, under version NEXT. */
function secondBuild(root: string): string {
  for (const part of ['bin', 'dist']) cpSync(join(REPO_ROOT, part), join(root, part), { recursive: true });
  symlinkSync(join(REPO_ROOT, 'node_modules'), join(root, 'node_modules'));
  const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
  writeFileSync(join(root, 'package.json'), JSON.stringify({ ...pkg, version: NEXT }));
  writeFileSync(join(root, 'dist/db/migrations', PROBE), 'CREATE TABLE rolling_upgrade_probe (id int PRIMARY KEY);\n');
  return join(root, 'bin', 'atelier');
}

describe('nodes: a rolling upgrade, one node at a time, keeps every workshop reachable', () => {
  const nodes = startNodes({ names: ['node-a', 'node-b'], env: { ATELIER_NODE_HEARTBEAT: '500ms', ATELIER_NODE_DEAD_AFTER: '3s' } });
  const root = mkdtempSync('/tmp/atelier-next-build-');
  let next: string;
  let a: TestServer;
  let b: TestServer;
  let workshops: Ws[];
  let first: string;

  before(async () => {
    next = secondBuild(root);
    [a, b] = nodes.servers as [TestServer, TestServer];
    first = (await a.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items[0]!.version;
    workshops = [];
    for (const node of ['node-a', 'node-b']) {
      const w = (await a.createWorkshop({ repo: nodes.repo, name: `on-${node}`, node })) as unknown as Ws;
      assert.equal(w.status, 'Running', w.statusReason ?? '');
      workshops.push(w);
    }
  });

  after(() => rmSync(root, { recursive: true, force: true }));

  /** Every node lists the others ready at their address (read now), with the versions expected. */
  const listed = async (versions: Record<string, string>): Promise<void> => {
    const expected = Object.entries(versions).map(([name, version]) => [name, 'ready', version]);
    for (const s of [a, b]) {
      const items = (await s.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items;
      assert.deepEqual(
        items.map((n) => [n.name, n.state, n.version]),
        expected,
      );
      assert.equal(items.find((n) => n.name === 'node-a')!.address, a.url);
      assert.equal(items.find((n) => n.name === 'node-b')!.address, b.url);
    }
  };

  /** Each workshop runs a command through each node, owner or not. */
  const everyWorkshopThroughEveryNode = async (): Promise<void> => {
    for (const s of [a, b])
      for (const w of workshops) {
        const r = await s.exec(w.id, ['sh', '-c', 'echo "$(hostname) ok"']);
        assert.deepEqual(
          r,
          { exitCode: 0, signal: null, stdout: `${w.name} ok\n`, stderr: '', truncated: false },
          `${w.name} through ${s.url}`,
        );
      }
  };

  /** A restart of `s` on `bin`; the part of its log written by this start. */
  const restart = async (s: TestServer, bin: string | undefined): Promise<string> => {
    await s.stop();
    // Meanwhile its workshop refuses what must run there, with why; the other is untouched.
    const other = s === a ? b : a;
    const down = workshops.find((w) => w.node === (s === a ? 'node-a' : 'node-b'))!;
    const refused = await other.api<{ code: string }>('POST', `/v1/workshops/${down.id}/exec`, { command: ['true'] });
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.equal(refused.body.code, 'UNAVAILABLE');
    const up = workshops.find((w) => w !== down)!;
    assert.equal((await other.exec(up.id, ['echo', 'still'])).stdout, 'still\n');
    const from = s.log.length;
    s.bin = bin;
    await s.boot();
    return s.log.slice(from);
  };

  it('before: both nodes on the first build, every workshop reachable through each', async () => {
    await listed({ 'node-a': first, 'node-b': first });
    await everyWorkshopThroughEveryNode();
  });

  it('node a restarted on the second build migrates; node b, still on the first, serves on the newer schema', async () => {
    const log = await restart(a, next);
    assert.doesNotMatch(log, /older than the database/);
    const applied = await nodes.sql.query('SELECT 1 FROM schema_migrations WHERE version = $1', [PROBE]);
    assert.equal(applied.rowCount, 1);
    await listed({ 'node-a': NEXT, 'node-b': first });
    const schemas = (await b.api<{ items: Node[] }>('GET', '/v1/nodes')).body.items.map((n) => [n.name, n.schemaVersion]);
    assert.deepEqual(schemas, [
      ['node-a', PROBE],
      ['node-b', NEWEST],
    ]);
    await everyWorkshopThroughEveryNode();
  });

  it('node b restarted on the first build meanwhile joins again (the schema window), and says to upgrade it', async () => {
    const log = await restart(b, undefined);
    assert.match(
      log,
      new RegExp(
        `this node \\(Atelier ${first.replace(/\./g, '\\.')}\\) is older than the database it joins: a newer node applied ${PROBE}; it joins`,
      ),
    );
    await listed({ 'node-a': NEXT, 'node-b': first });
    await everyWorkshopThroughEveryNode();
  });

  it('node b restarted on the second build: both upgraded, every workshop reachable, nothing lost', async () => {
    const log = await restart(b, next);
    assert.doesNotMatch(log, /older than the database/);
    await listed({ 'node-a': NEXT, 'node-b': NEXT });
    await everyWorkshopThroughEveryNode();
    const cli = await b.cli(['workshops', 'list']);
    assert.equal(cli.code, 0, cli.stderr);
    for (const w of workshops) assert.match(cli.stdout, new RegExp(`${w.id}.*Running`));
  });
});
