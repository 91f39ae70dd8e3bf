// Class B on the native backend: a project's redis stack as a real redis-server process
// supervised by a real `atelier server start`, driven by the real CLI, checked with redis-cli.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { TestServer } from './helpers/server.js';

const run = promisify(execFile);

describe('class B stacks (native backend)', () => {
  let s: TestServer;
  let dir = '';
  let projectId = '';
  const socket = (): string => join(s.dataDir, 'stacks', projectId, 'redis', 'redis.sock');
  const redis = async (...args: string[]): Promise<string> => (await run('redis-cli', ['-s', socket(), ...args])).stdout.trim();
  const state = (): { pid: number } =>
    JSON.parse(readFileSync(join(s.dataDir, 'stacks', projectId, 'redis', 'state.json'), 'utf8')) as { pid: number };
  const alive = (pid: number): boolean => {
    try {
      process.kill(pid, 0);
      return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
    } catch {
      return false;
    }
  };

  const json = async <T>(args: string[]): Promise<T> => {
    const r = await s.cli(['-o', 'json', ...args]);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout) as T;
  };
  const planApply = async (action: string, ...params: string[]): Promise<{ executionId: string; status: string }> => {
    const plan = await json<{ planId: string }>([
      'actions',
      'plan',
      action,
      '--project',
      'stacked',
      ...params.flatMap((p) => ['--param', p]),
    ]);
    return json(['actions', 'apply', plan.planId, '--yes']);
  };

  before(async () => {
    s = await TestServer.start();
    dir = mkdtempSync('/tmp/atelier-stacks-');
    writeFileSync(join(dir, 'atelier.yaml'), '# stacks\nslots: []\n');
    projectId = (await json<{ project: { id: string } }>(['projects', 'add', dir, '--name', 'stacked'])).project.id;
  });
  after(async () => {
    if (projectId && existsSync(join(s.dataDir, 'stacks', projectId, 'redis', 'state.json'))) {
      const pid = state().pid;
      if (alive(pid)) process.kill(pid, 'SIGKILL');
    }
    await s?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  it('start shows the rendered template and the exact argv, then runs it; stop keeps the data; rollback starts it again on the same data', async () => {
    const plan = await s.cli(['actions', 'plan', 'stack.start', '--project', 'stacked', '--param', 'stack=redis']);
    assert.equal(plan.code, 0, plan.stderr);
    assert.match(plan.stdout, /\+\s+restart: unless-stopped/);
    assert.match(plan.stdout, /start stack redis: redis-server --port 0 --unixsocket \S+redis.sock/);
    assert.equal(existsSync(socket()), false, 'plan starts nothing');

    const started = await planApply('stack.start', 'stack=redis');
    assert.equal(started.status, 'applied');
    assert.match(readFileSync(join(dir, '.atelier/runtime/stacks/redis.yml'), 'utf8'), /restart: unless-stopped/);
    assert.equal(await redis('SET', 'kept', 'yes'), 'OK');
    if (process.getuid?.() === 0) assert.equal(readFileSync(`/proc/${state().pid}/status`, 'utf8').match(/^Uid:\s+(\d+)/m)?.[1], '65534');

    const again = await s.cli(['actions', 'plan', 'stack.start', '--project', 'stacked', '--param', 'stack=redis']);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /redis is running/);

    const forget = await s.cli(['projects', 'remove', 'stacked']);
    assert.equal(forget.code, 1);
    assert.match(forget.stderr, /still runs redis: stop it first/);

    const stopped = await planApply('stack.stop', 'stack=redis');
    assert.equal(stopped.status, 'applied');
    await assert.rejects(redis('PING'));
    assert.ok(existsSync(join(s.dataDir, 'stacks', projectId, 'redis', 'data')), 'the volume stays');

    const back = await json<{ status: string }>(['actions', 'rollback', stopped.executionId]);
    assert.equal(back.status, 'rolled_back');
    assert.equal(await redis('GET', 'kept'), 'yes');
  });

  it('autostart: unless-stopped brings the stack back with the server; "no" does not', async () => {
    // Default (the template's): unless-stopped. A "reboot": the server and the stack die.
    const reboot = async (): Promise<void> => {
      await s.stop('SIGKILL');
      const pid = state().pid;
      if (alive(pid)) process.kill(pid, 'SIGKILL');
      while (alive(pid)) await new Promise((r) => setTimeout(r, 20));
      await s.boot();
    };
    await reboot();
    assert.equal(await redis('GET', 'kept'), 'yes', 'back with the server, on the same data');

    const off = await planApply('stack.autostart', 'stack=redis', 'enabled=false');
    assert.equal(off.status, 'applied');
    const rendered = readFileSync(join(dir, '.atelier/runtime/stacks/redis.yml'), 'utf8');
    assert.match(rendered, /^ {4}restart: "no"$/m);
    assert.match(rendered, /# Restart with the machine/, 'the comments of the rendered file stay');
    assert.equal(await redis('PING'), 'PONG', 'recreated and running');

    await reboot();
    await assert.rejects(redis('PING'), 'restart: "no" is not started again');

    // The rollback restores the file's exact bytes and the stack's state at apply time (running).
    const back = await json<{ status: string }>(['actions', 'rollback', off.executionId]);
    assert.equal(back.status, 'rolled_back');
    assert.match(readFileSync(join(dir, '.atelier/runtime/stacks/redis.yml'), 'utf8'), /^ {4}restart: unless-stopped$/m);
    assert.equal(await redis('GET', 'kept'), 'yes');
  });
});
