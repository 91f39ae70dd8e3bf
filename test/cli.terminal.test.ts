import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { BIN, TestServer, makeRepo } from './helpers/server.js';

// The CLI as a person's terminal and shell pipelines see it.
describe('the CLI on a terminal and in a pipeline', () => {
  let server: TestServer;
  let ws: string;
  before(async () => {
    server = await TestServer.start();
    ws = (await server.createWorkshop({ repo: makeRepo() })).id;
  });
  after(async () => {
    await server?.dispose();
  });

  it('ends quietly with 0 when its reader goes away (`atelier … | head`), no EPIPE stack trace', async () => {
    const p = spawn(process.execPath, [BIN, 'workshops', 'list', '--output', 'json'], {
      env: server.env(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // The reading end is closed before the CLI has its answer: its write finds no reader.
    p.stdout.destroy();
    let stderr = '';
    p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((resolve) => p.on('close', (c) => resolve(c)));
    assert.equal(stderr, '');
    assert.equal(code, 0);
  });

  it('detaching from a named agent session says how to come back to that session (Ctrl-] on a terminal)', async (t) => {
    const started = await server.cli(['run', ws, '--session', 'bot', '--detach', '--', 'sh', '-c', 'echo bot-up; sleep 300']);
    assert.equal(started.code, 0, started.stderr);
    // script(1) gives the CLI a real terminal; what we write to its stdin is typed there.
    const cmd = `${process.execPath} ${BIN} attach ${ws} --session bot`;
    const p = spawn('script', ['-qfec', cmd, '/dev/null'], { env: server.env(), stdio: ['pipe', 'pipe', 'pipe'] });
    t.after(() => void p.kill('SIGKILL'));
    let out = '';
    const seen = (re: RegExp): Promise<void> =>
      new Promise((resolve, reject) => {
        const check = (): void => {
          if (re.test(out)) resolve();
        };
        p.stdout.on('data', (c: Buffer) => {
          out += c.toString();
          check();
        });
        p.on('close', () => (re.test(out) ? resolve() : reject(new Error(`ended without ${re}:\n${out}`))));
        check();
      });
    await seen(/attached to session bot/);
    p.stdin.write('\x1d');
    const code = await new Promise<number | null>((resolve) => p.on('close', (c) => resolve(c)));
    assert.equal(code, 0, out);
    assert.match(out, new RegExp(`detached: the session goes on; \`atelier attach ${ws} --session bot\` comes back to it`));
    const sessions = await server.api<{ items: { name: string; running: boolean }[] }>('GET', `/v1/workshops/${ws}/sessions`);
    assert.deepEqual(
      sessions.body.items.map((s) => [s.name, s.running]),
      [['bot', true]],
      'the session went on',
    );
  });
});
