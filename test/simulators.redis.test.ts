// The redis simulator against real peers: `redis-cli` over its unix socket, run as an
// unprivileged uid when the tests run as root.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import type { AtelierError } from '../src/core/index.js';
import {
  isAlive,
  removeSimulator,
  resetSimulator,
  simulatorLogs,
  startSimulator,
  stopSimulator,
  type SimulatorHandle,
} from '../src/simulators/index.js';
import { median, tcpListeners } from './helpers/proc.js';
import { assertSandboxed, RUN_AS, simulatorFixture } from './helpers/simulators.js';
import { simulatorSandboxArgv } from '../src/sandbox/index.js';

const run = promisify(execFile);

async function cli(h: SimulatorHandle, ...args: string[]): Promise<string> {
  return (await run('redis-cli', ['-s', h.socket, ...args])).stdout.trim();
}

describe('redis simulator', () => {
  const sim = simulatorFixture('redis');
  const { spec, start, handles } = sim;

  it('answers redis-cli on its unix socket only, as the unprivileged uid, with the host-reaching commands disabled', async () => {
    const h = await start(spec('redis', { version: '7' }));
    assert.deepEqual(h.endpoint, { host: 'redis.atelier.internal', port: 6379 });
    assert.equal(h.env.REDIS_URL, 'redis://redis.atelier.internal:6379');
    assert.equal(h.socketName, 'redis/redis.sock');
    assert.equal(await cli(h, 'PING'), 'PONG');
    assert.equal(await cli(h, 'SET', 'greeting', 'bonjour'), 'OK');
    assert.equal(await cli(h, 'GET', 'greeting'), 'bonjour');

    assert.match(await cli(h, 'INFO', 'server'), /tcp_port:0/);
    const program = assertSandboxed(h);
    assert.deepEqual(tcpListeners([program]), []);
    if (RUN_AS) assert.equal(Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${program}/status`, 'utf8'))![1]), RUN_AS.uid);
    // Its socket and its directory are its owner's only (the server's relay dials it).
    assert.equal(statSync(h.socket).mode & 0o777, 0o700);
    assert.equal(statSync(dirname(h.socket)).mode & 0o777, 0o700);
    // Disabled as well (whatever they did would stay in the sandbox): no writing files where the workshop chooses, no loading code.
    assert.match(await cli(h, 'CONFIG', 'SET', 'dir', '/tmp'), /protected config/);
    assert.match(await cli(h, 'MODULE', 'LOAD', '/tmp/x.so'), /MODULE command not allowed/);
    assert.match(await cli(h, 'CONFIG', 'GET', 'save'), /^save\s*$/);
    assert.equal(await cli(h, 'CONFIG', 'GET', 'appendonly'), 'appendonly\nno');
  });

  it('reset empties it in place; a dead one is started again', async (t) => {
    const h = await start(spec('cache'));
    await cli(h, 'SET', 'k', 'v');
    await cli(h, 'FUNCTION', 'LOAD', "#!lua name=lib\nredis.register_function('f', function() return 1 end)");
    const same = await resetSimulator(h, { sandbox: simulatorSandboxArgv });
    assert.equal(same.pid, h.pid, 'emptied in place, not restarted');
    assert.equal(await cli(h, 'EXISTS', 'k'), '0');
    assert.equal(await cli(h, 'DBSIZE'), '0');
    assert.equal(await cli(h, 'FUNCTION', 'LIST'), '');

    process.kill(h.pid, 'SIGKILL');
    for (let i = 0; i < 200 && isAlive(h); i++) await new Promise((r) => setTimeout(r, 5));
    assert.equal(isAlive(h), false);
    const r0 = performance.now();
    const again = await resetSimulator(h, { sandbox: simulatorSandboxArgv });
    t.diagnostic(`reset of a dead redis (restart): ${(performance.now() - r0).toFixed(0)} ms`);
    handles.push(again);
    assert.notEqual(again.pid, h.pid);
    assert.equal(await cli(again, 'PING'), 'PONG');
  });

  it('runs two instances without sharing data, refuses a name in use, and stop leaves nothing (start times logged)', async (t) => {
    const times: number[] = [];
    for (let i = 0; i < 10; i++) {
      const s0 = performance.now();
      const h = await start(spec(`t${i}`));
      times.push(performance.now() - s0);
      await removeSimulator(h);
      assert.equal(existsSync(h.dir), false);
    }
    t.diagnostic(`redis start to PONG, 10 starts: p50 ${median(times).toFixed(0)} ms, max ${Math.max(...times).toFixed(0)} ms`);

    const a = await start(spec('a'));
    const b = await start(spec('b'));
    await cli(a, 'SET', 'only', 'a');
    assert.equal(await cli(b, 'EXISTS', 'only'), '0');
    await assert.rejects(start(spec('a')), (err: AtelierError) => err.code === 'ALREADY_EXISTS');
    assert.equal(await cli(a, 'GET', 'only'), 'a');

    await stopSimulator(a);
    assert.equal(isAlive(a), false);
    assert.equal(existsSync(`/proc/${a.pid}`) && !/^State:\s+Z/m.test(readFileSync(`/proc/${a.pid}/status`, 'utf8')), false);
    assert.equal(existsSync(a.socket), false);
    assert.match(await simulatorLogs(a), /ready to accept connections[\s\S]*bye bye/);
    assert.equal(await cli(b, 'PING'), 'PONG');
  });

  it('refuses versions it does not have and settings it does not know', async () => {
    await assert.rejects(startSimulator(spec('old', { version: '6.2' })), (err: AtelierError) => {
      assert.equal(err.code, 'UNSUPPORTED');
      assert.match(err.message, /Redis 6\.2 is not installed on this server; installed: 7\.\d+\.\d+/);
      return true;
    });
    await assert.rejects(
      startSimulator(spec('pw', { env: { REDIS_PASSWORD: 'x' } })),
      /unknown env REDIS_PASSWORD \(a redis simulator takes no env\)/,
    );
    assert.equal(existsSync(join(sim.base, 'services', 'old')), false);
  });
});
