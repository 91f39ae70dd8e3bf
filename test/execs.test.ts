import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { TestServer, makeRepo } from './helpers/server.js';

interface ExecView {
  id: string;
  status: string;
  exitCode: number | null;
  chunks: { stream: string; offset: number; data: string }[];
  nextOffset: number;
  truncated: boolean;
}

const text = (v: ExecView, stream?: string): string =>
  v.chunks
    .filter((c) => !stream || c.stream === stream)
    .map((c) => Buffer.from(c.data, 'base64').toString('utf8'))
    .join('');

describe('async exec API: output kept in PostgreSQL', () => {
  let server: TestServer;
  let repo: string;
  let ws: string;

  before(async () => {
    server = await TestServer.start();
    repo = makeRepo();
    ws = (await server.createWorkshop({ repo, name: 'execs' })).id;
  });
  after(async () => {
    await server?.dispose();
    rmSync(repo, { recursive: true, force: true });
  });

  it('answers at once with the output when the command ends within waitSeconds', async () => {
    const r = await server.api<ExecView>('POST', `/v1/workshops/${ws}/execs`, {
      command: ['sh', '-c', 'echo out; echo err >&2; exit 3'],
      waitSeconds: 10,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.status, 'Exited');
    assert.equal(r.body.exitCode, 3);
    assert.equal(text(r.body, 'stdout'), 'out\n');
    assert.equal(text(r.body, 'stderr'), 'err\n');
    assert.equal(r.body.nextOffset, 8);
    assert.equal(r.body.truncated, false);
  });

  it('a command that outlives the request is read later by offset, with its output so far', async () => {
    const r = await server.api<ExecView>('POST', `/v1/workshops/${ws}/execs`, {
      command: ['sh', '-c', 'echo first; sleep 1.5; echo second'],
      waitSeconds: 0.8,
    });
    assert.equal(r.status, 201);
    assert.equal(r.body.status, 'Running');
    assert.equal(r.body.exitCode, null);
    assert.equal(text(r.body), 'first\n');
    const later = await server.api<ExecView>('GET', `/v1/execs/${r.body.id}?after=${r.body.nextOffset}&wait=10`);
    assert.equal(later.status, 200);
    assert.equal(later.body.status, 'Exited');
    assert.equal(later.body.exitCode, 0);
    assert.equal(text(later.body), 'second\n');
    assert.equal(later.body.chunks[0]!.offset, 6);
    // From an offset in the middle of a chunk: the rest of it.
    const mid = await server.api<ExecView>('GET', `/v1/execs/${r.body.id}?after=2`);
    assert.equal(text(mid.body), 'rst\nsecond\n');
  });

  it('keeps at most 1 MiB per command and says the rest was dropped', async () => {
    const r = await server.api<ExecView>('POST', `/v1/workshops/${ws}/execs`, {
      command: ['sh', '-c', 'head -c 3000000 /dev/zero | tr "\\0" a; echo done >&2'],
      waitSeconds: 30,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body).slice(0, 300));
    assert.equal(r.body.status, 'Exited');
    assert.equal(r.body.exitCode, 0, 'the command runs to its end');
    assert.equal(r.body.truncated, true);
    assert.equal(r.body.nextOffset, 1 << 20);
    assert.equal(text(r.body).length, 1 << 20);
  });

  it('refuses bad input with the field named, and unknown execs with 404', async () => {
    const bad = await server.api<{ code: string; details: { field: string } }>('POST', `/v1/workshops/${ws}/execs`, {
      command: [],
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.details.field, 'command');
    const wait = await server.api<{ code: string }>('POST', `/v1/workshops/${ws}/execs`, { command: ['true'], waitSeconds: 3600 });
    assert.equal(wait.status, 400);
    const extra = await server.api<{ code: string }>('POST', `/v1/workshops/${ws}/execs`, { command: ['true'], shell: true });
    assert.equal(extra.status, 400);
    const unknown = await server.api<{ code: string }>('GET', '/v1/execs/ex-nothing');
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.code, 'NOT_FOUND');
    const after = await server.api<{ code: string }>('GET', '/v1/execs/ex-nothing?after=-1');
    assert.equal(after.status, 400);
    const noWs = await server.api<{ code: string }>('POST', '/v1/workshops/ws-nothing/execs', { command: ['true'] });
    assert.equal(noWs.status, 404);
    assert.equal(noWs.body.code, 'WORKSHOP_NOT_FOUND');
  });

  it('a suspended workshop refuses the command and says to resume', async () => {
    assert.equal((await server.api('POST', `/v1/workshops/${ws}/stop`)).status, 200);
    try {
      const r = await server.api<{ code: string; message: string }>('POST', `/v1/workshops/${ws}/execs`, { command: ['true'] });
      assert.equal(r.status, 409);
      assert.equal(r.body.code, 'WORKSHOP_SUSPENDED');
      assert.match(r.body.message, /atelier workshops resume/);
    } finally {
      assert.equal((await server.api('POST', `/v1/workshops/${ws}/resume`)).status, 200);
    }
  });

  it('a command that outlives the server is reported Lost, its output kept; deleting the workshop deletes its execs', async () => {
    const r = await server.api<ExecView>('POST', `/v1/workshops/${ws}/execs`, {
      command: ['sh', '-c', 'echo kept; sleep 30'],
      waitSeconds: 0.5,
    });
    assert.equal(r.body.status, 'Running');
    await server.stop('SIGKILL');
    await server.boot();
    const lost = await server.api<ExecView>('GET', `/v1/execs/${r.body.id}`);
    assert.equal(lost.status, 200);
    assert.equal(lost.body.status, 'Lost');
    assert.equal(text(lost.body), 'kept\n');
    assert.equal((await server.api('DELETE', `/v1/workshops/${ws}`)).status, 200);
    assert.equal((await server.api('GET', `/v1/execs/${r.body.id}`)).status, 404);
  });
});
