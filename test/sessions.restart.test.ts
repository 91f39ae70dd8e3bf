import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { CliProcess, TestServer, makeRepo } from './helpers/server.js';

/** The holders of this server's sessions alive now (their command line names their socket). */
function holders(dataDir: string): number[] {
  let out = '';
  try {
    out = execFileSync('pgrep', ['-f', `session-holder\\.py ${join(dataDir, 'sessions')}/`], { encoding: 'utf8' });
  } catch {
    return [];
  }
  return out.split('\n').filter(Boolean).map(Number);
}

async function until<T>(what: string, fn: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface Listed {
  items: { name: string; running: boolean; exitCode: number | null }[];
}

describe('agent sessions outlive the server', () => {
  let server: TestServer;
  let ws: string;
  before(async () => {
    server = await TestServer.start();
    ws = (await server.createWorkshop({ repo: makeRepo() })).id;
  });
  after(async () => {
    await server.dispose();
  });

  it('a kill -9 and a clean stop of the server leave the agent running; the next server finds it with its recent output', async () => {
    const script = 'echo "agent up as $$"; while read line; do echo "agent got $line"; done';
    const started = await server.cli(['run', ws, '--session', 'bot', '-d', '--', 'sh', '-c', script]);
    assert.equal(started.code, 0, started.stderr);
    const first = new CliProcess(['attach', ws, '--session', 'bot'], server.env());
    const pid = (await first.waitFor(/agent up as (\d+)/))[1];
    first.proc.stdin!.write('before\n');
    await first.waitFor(/agent got before/);
    first.proc.kill('SIGKILL');
    await first.exited;

    for (const signal of ['SIGKILL', 'SIGTERM'] as const) {
      await server.stop(signal);
      assert.ok(holders(server.dataDir).length > 0, `the session's holder outlived the server (${signal})`);
      await server.boot();
      const listed = await server.api<Listed>('GET', `/v1/workshops/${ws}/sessions`);
      assert.deepEqual(
        listed.body.items.filter((s) => s.name === 'bot').map((s) => [s.running, s.exitCode]),
        [[true, null]],
        `${signal}: ${JSON.stringify(listed.body)}`,
      );
      // The same agent (same pid), its recent output first, then a live conversation.
      const again = new CliProcess(['attach', ws, '--session', 'bot'], server.env());
      await again.waitFor(new RegExp(`agent up as ${pid}[\\s\\S]*agent got before`));
      again.proc.stdin!.write(`after ${signal}\n`);
      await again.waitFor(new RegExp(`agent got after ${signal}`));
      again.proc.kill('SIGKILL');
      await again.exited;
    }
  });

  it('a session that ends while the server is away is found ended, with its exit code', async () => {
    const started = await server.cli([
      'run',
      ws,
      '--session',
      'brief',
      '-d',
      '--',
      'sh',
      '-c',
      'echo "brief start"; sleep 1; echo "brief end"; exit 7',
    ]);
    assert.equal(started.code, 0, started.stderr);
    await server.stop('SIGKILL');
    await new Promise((r) => setTimeout(r, 2000));
    await server.boot();
    const listed = await server.api<Listed>('GET', `/v1/workshops/${ws}/sessions`);
    const brief = listed.body.items.find((s) => s.name === 'brief');
    assert.deepEqual(brief && [brief.running, brief.exitCode], [false, 7], JSON.stringify(listed.body));
    // Attaching to it shows what it wrote, then its exit code.
    const a = new CliProcess(['attach', ws, '--session', 'brief'], server.env());
    assert.equal(await a.exited, 7, a.stderr);
    assert.match(a.stdout + a.stderr, /brief start[\s\S]*brief end/);
  });

  it('two starts of one name at once start one session', async () => {
    const before = holders(server.dataDir).length;
    const body = { name: 'twin', command: ['sh', '-c', 'echo twin up; exec sleep 600'] };
    const both = await Promise.all([0, 1].map(() => server.api<{ created?: boolean }>('POST', `/v1/workshops/${ws}/sessions`, body)));
    assert.deepEqual(both.map((r) => r.status).sort(), [200, 201], JSON.stringify(both.map((r) => r.body)));
    // One holder in the end: a holder's child shows the holder's command line for a moment, between
    // its fork and its exec of the program, so the count is read until it settles.
    await until('one holder', () => (holders(server.dataDir).length === before + 1 ? true : undefined));
    const a = new CliProcess(['attach', ws, '--session', 'twin'], server.env());
    await a.waitFor(/twin up/);
    a.proc.kill('SIGKILL');
    await a.exited;
    const del = await server.api('DELETE', `/v1/workshops/${ws}/sessions/twin`);
    assert.equal(del.status, 200, JSON.stringify(del.body));
    await until("the twin session's holder exits", () => (holders(server.dataDir).length === before ? true : undefined));
  });

  it('stopping a session and deleting its workshop end their holders; nobody else can reach a holder', async () => {
    const dir = join(server.dataDir, 'sessions');
    const mode = execFileSync('stat', ['-c', '%a %U', dir], { encoding: 'utf8' }).trim();
    assert.equal(mode.split(' ')[0], '700', `the sessions directory is the server's only: ${mode}`);
    const before = holders(server.dataDir).length;
    const stopped = await server.cli(['run', ws, '--session', 'gone', '-d', '--', 'sleep', '600']);
    assert.equal(stopped.code, 0, stopped.stderr);
    // Read until it settles (a holder's child shows the holder's command line until its exec).
    await until('one more holder', () => (holders(server.dataDir).length === before + 1 ? true : undefined));
    const del = await server.api('DELETE', `/v1/workshops/${ws}/sessions/gone`);
    assert.equal(del.status, 200, JSON.stringify(del.body));
    await until("the stopped session's holder exits", () => (holders(server.dataDir).length === before ? true : undefined));

    const doomed = (await server.createWorkshop({ repo: makeRepo() })).id;
    const r = await server.cli(['run', doomed, '--session', 'a', '-d', '--', 'sleep', '600']);
    assert.equal(r.code, 0, r.stderr);
    const sockets = readdirSync(dir).length;
    const deleted = await server.api('DELETE', `/v1/workshops/${doomed}`);
    assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
    await until("the deleted workshop's holder exits", () => (holders(server.dataDir).length === before ? true : undefined));
    assert.equal(readdirSync(dir).length, sockets - 1, 'its socket is removed');
  });
});
