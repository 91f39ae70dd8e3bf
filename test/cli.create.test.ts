// `atelier workshops create` through the real CLI and a real server: a simulator the workshop
// cannot have is refused the same way wherever it is asked for (issue 18, rough edge 4), and the
// creation's phases are shown as they happen (rough edge 16).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { makeRepo, TestServer } from './helpers/server.js';

interface WorkshopJson {
  id: string;
  name: string;
  status: string;
  statusReason: string | null;
}

describe('workshops create', () => {
  let server: TestServer;
  const repos: string[] = [];
  const repo = (files?: Record<string, string>): string => {
    const dir = makeRepo(files);
    repos.push(dir);
    return dir;
  };
  const ids = async (): Promise<string[]> => {
    const r = await server.cli(['workshops', 'list', '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    return (JSON.parse(r.stdout) as WorkshopJson[]).map((w) => w.id);
  };

  before(async () => {
    server = await TestServer.start();
  });
  after(async () => {
    await server?.dispose();
    for (const dir of repos) rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a wrong simulator env name in the request up front (400, nothing made), naming the names it reads', async () => {
    const before = await ids();
    const r = await server.api<{ code: string; message: string; details: { field: string } }>('POST', '/v1/workshops', {
      repo: repo(),
      simulators: [{ type: 'redis' }, { type: 'postgres', env: { PGPORT: '5433' } }],
    });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.code, 'INVALID_ARGUMENT');
    assert.equal(r.body.details.field, 'simulators.1.env.PGPORT');
    assert.match(r.body.message, /unknown env PGPORT \(known: POSTGRES_DB, POSTGRES_USER, POSTGRES_PASSWORD\)/);
    // An option of the wrong type and a field of another type are refused the same way.
    const option = await server.api<{ message: string }>('POST', '/v1/workshops', {
      repo: repo(),
      simulators: [{ type: 'postgres', options: { superuser: 'yes' } }],
    });
    assert.equal(option.status, 400);
    assert.match(option.body.message, /option superuser must be true or false/);
    assert.deepEqual(await ids(), before, 'no workshop was made');
  });

  it('`--simulator` with a version not installed: exit 1 with the reason, and no workshop', async () => {
    const before = await ids();
    const r = await server.cli(['workshops', 'create', '--repo', repo(), '--simulator', 'postgres:99']);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.match(r.stderr, /^error: simulators\.0\.version: PostgreSQL 99 is not installed on this server; installed: /m);
    assert.doesNotMatch(r.stderr, /started/, 'no phase began');
    assert.deepEqual(await ids(), before);
  });

  it('a wrong env name in atelier.yaml: the workshop is Failed with the key and the names it reads, and create exits 1', async () => {
    const dir = repo({ 'atelier.yaml': 'simulators:\n  - name: postgres\n    env: { POSTGRES_DB: app, PGPORT: 5433 }\n' });
    const r = await server.cli(['workshops', 'create', '--repo', dir, '--name', 'bad-env']);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const reason =
      /atelier\.yaml: simulators\.0\.env\.PGPORT: postgres simulator postgres: unknown env PGPORT \(known: POSTGRES_DB, POSTGRES_USER, POSTGRES_PASSWORD\)/;
    assert.match(r.stderr, reason);
    assert.match(r.stderr, /remove it with `atelier workshops delete ws-/);
    const list = await server.cli(['workshops', 'list', '-o', 'json']);
    const w = (JSON.parse(list.stdout) as WorkshopJson[]).find((x) => x.name === 'bad-env');
    assert.equal(w?.status, 'Failed');
    assert.match(w.statusReason ?? '', reason);
    // No simulator was started without the settings asked for.
    const sims = await server.api<{ items: unknown[] }>('GET', `/v1/workshops/${w.id}/simulators`);
    assert.deepEqual(sims.body.items, []);
  });

  it('shows the phases in order as plain lines when not on a terminal, and nothing extra with --output json', async () => {
    const dir = repo({
      'atelier.yaml': 'simulators:\n  - redis\n',
      '.devcontainer.json': '{ "onCreateCommand": "true", "postCreateCommand": "echo made > /tmp/made" }',
    });
    const r = await server.cli(['workshops', 'create', '--repo', dir, '--name', 'phases']);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const lines = r.stderr.split('\n').filter(Boolean);
    for (const line of lines)
      assert.match(line, /^[a-z][a-zA-Z ,-]*: (started|done in \d+\.\d s)$/, `a plain line: ${JSON.stringify(line)}`);
    const at = (line: string): number => {
      const i = lines.indexOf(line);
      assert.ok(i >= 0, `${line} in:\n${r.stderr}`);
      return i;
    };
    const done = (phase: string): number => lines.findIndex((l) => l.startsWith(`${phase}: done in `));
    // Clone and sandbox run side by side; each ends after it starts, and both before the simulators.
    assert.ok(at('clone: started') < done('clone') && at('sandbox: started') < done('sandbox'), r.stderr);
    assert.ok(Math.max(done('clone'), done('sandbox')) < at('simulators redis: started'), r.stderr);
    assert.ok(done('simulators redis') < at('devcontainer onCreateCommand: started'), r.stderr);
    assert.ok(done('devcontainer onCreateCommand') < at('devcontainer postCreateCommand: started'), r.stderr);
    assert.equal(done('devcontainer postCreateCommand'), lines.length - 1, r.stderr);
    assert.match(r.stdout, /^id:\s+ws-/m, 'the workshop itself on stdout');
    assert.doesNotMatch(r.stdout, /started|done in/);
    assert.ok(!r.stderr.includes('\u001b'), 'no terminal escapes in a pipe');

    const json = await server.cli(['workshops', 'create', '--repo', dir, '--name', 'phases-json', '-o', 'json']);
    assert.equal(json.code, 0, json.stderr);
    assert.equal(json.stderr, '');
    assert.equal((JSON.parse(json.stdout) as WorkshopJson).status, 'Running');
  });

  it('streams the phases to an API client that asks for NDJSON, then the workshop', async () => {
    const res = await fetch(`${server.url}/v1/workshops`, {
      method: 'POST',
      headers: { authorization: `Bearer ${server.token}`, accept: 'application/x-ndjson', 'content-type': 'application/json' },
      body: JSON.stringify({ repo: repo(), name: 'ndjson' }),
    });
    assert.equal(res.status, 201);
    assert.match(res.headers.get('content-type') ?? '', /application\/x-ndjson/);
    const frames = (await res.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const last = frames.pop() as { workshop?: WorkshopJson };
    assert.equal(last.workshop?.status, 'Running');
    assert.deepEqual(frames.map((f) => `${String(f.phase)} ${String(f.state)}`).sort(), [
      'clone done',
      'clone started',
      'sandbox done',
      'sandbox started',
    ]);
    for (const f of frames.filter((x) => x.state === 'done')) assert.equal(typeof f.ms, 'number');
    // Refused before anything exists: a plain 400, not a stream.
    const bad = await fetch(`${server.url}/v1/workshops`, {
      method: 'POST',
      headers: { authorization: `Bearer ${server.token}`, accept: 'application/x-ndjson', 'content-type': 'application/json' },
      body: JSON.stringify({ repo: repo(), simulators: [{ type: 'nosuch' }] }),
    });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { message: string }).message, /unknown simulator type "nosuch"/);
  });
});
