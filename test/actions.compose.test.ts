// Class B on the compose backend. There is no Docker engine on this machine: the server is given a
// FAKE `docker` executable first on its PATH (test/helpers/fakeDocker.ts), which answers like
// `docker compose` and records every argv. What is real: the server, its database, the CLI, the
// rendered stack file, the journal. What is checked: the exact argv the server runs, and that none
// of them can delete a volume.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createFakeDocker, type FakeDocker } from './helpers/fakeDocker.js';
import { TestServer } from './helpers/server.js';

const FORBIDDEN = ['-v', '--volumes', '-V', '--renew-anon-volumes', 'down', 'rm', '--rmi'];

describe('class B stacks (compose backend, driven against a FAKE docker executable)', () => {
  let s: TestServer;
  let fake: FakeDocker;
  let dir = '';
  let bin = '';
  let projectId = '';
  const rendered = (): string => join(dir, '.atelier/runtime/stacks/redis.yml');
  const composeProject = (): string => `atelier-${projectId}-redis`;
  const base = (): string[] => ['compose', '-f', rendered(), '-p', composeProject()];
  const json = async <T>(args: string[]): Promise<T> => {
    const r = await s.cli(['-o', 'json', ...args]);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout) as T;
  };
  type Plan = { planId: string; effects: { kind: string; argv?: string[]; network?: boolean; operation?: string }[] };
  const plan = (action: string, ...params: string[]): Promise<Plan> =>
    json(['actions', 'plan', action, '--project', 'composed', ...params.flatMap((p) => ['--param', p])]);
  const apply = (p: Plan): Promise<{ executionId: string; status: string; message: string }> =>
    json(['actions', 'apply', p.planId, '--yes']);
  /** The calls that change something (not the read-only version, ps and exec probes). */
  const writes = (): string[][] => fake.calls().filter((c) => !['version', 'ps', 'exec'].some((x) => c.includes(x)));

  before(async () => {
    bin = mkdtempSync('/tmp/atelier-fake-docker-');
    fake = createFakeDocker(bin);
    s = await TestServer.start({ env: { PATH: `${bin}:${process.env.PATH}`, ATELIER_STACKS_BACKEND: 'docker' } });
    dir = mkdtempSync('/tmp/atelier-compose-');
    writeFileSync(join(dir, 'atelier.yaml'), '# compose\nslots: []\n');
    projectId = (await json<{ project: { id: string } }>(['projects', 'add', dir, '--name', 'composed'])).project.id;
  });
  after(async () => {
    await s?.dispose();
    rmSync(dir, { recursive: true, force: true });
    rmSync(bin, { recursive: true, force: true });
  });

  it('the catalog says which engine answers', async () => {
    const items = await json<{ id: string; preconditions: { name: string; ok: boolean; reason: string }[] }[]>([
      'actions',
      'list',
      '--project',
      'composed',
    ]);
    const start = items.find((i) => i.id === 'stack.start')!;
    const engine = start.preconditions.find((p) => p.name === 'docker compose answers');
    assert.equal(engine?.ok, true);
    assert.match(engine!.reason, /compose backend: docker compose 2\.29\.7/);
  });

  it('start, autostart, stop and their rollbacks run exactly the planned compose argv; no volume is ever removed', async () => {
    const before = writes().length;
    const started = await plan('stack.start', 'stack=redis');
    const service = started.effects.find((e) => e.kind === 'service')!;
    assert.deepEqual(service.argv, ['docker', ...base(), 'up', '-d']);
    assert.equal(service.network, true, 'an up may pull the image: flagged');
    assert.equal(writes().length, before, 'a plan runs nothing but read-only probes');

    const up = await apply(started);
    assert.equal(up.status, 'applied', up.message);
    assert.deepEqual(writes().at(-1), [...base(), 'up', '-d']);
    const first = fake.containers()[composeProject()]!;
    assert.equal(first.state, 'running');
    assert.equal(first.restart, 'unless-stopped', 'the default of the kit template');
    assert.ok(
      fake.calls().some((c) => c.join(' ') === [...base(), 'exec', '-T', 'redis', 'redis-cli', 'ping'].join(' ')),
      'verified',
    );

    // "Restart with the machine" off: a class A edit of the rendered file, then a recreate.
    const priorBytes = readFileSync(rendered(), 'utf8');
    const off = await plan('stack.autostart', 'stack=redis', 'enabled=false');
    assert.deepEqual(off.effects.find((e) => e.kind === 'service')!.argv, ['docker', ...base(), 'up', '-d', '--force-recreate']);
    const offDone = await apply(off);
    assert.equal(offDone.status, 'applied', offDone.message);
    assert.match(readFileSync(rendered(), 'utf8'), /^ {4}restart: "no"$/m);
    const second = fake.containers()[composeProject()]!;
    assert.notEqual(second.id, first.id, 'recreated');
    assert.equal(second.restart, 'no');
    assert.equal(second.volume, first.volume, 'on the same named volume');

    const back = await json<{ status: string }>(['actions', 'rollback', offDone.executionId]);
    assert.equal(back.status, 'rolled_back');
    assert.equal(readFileSync(rendered(), 'utf8'), priorBytes, 'the exact prior bytes');
    assert.deepEqual(writes().at(-1), [...base(), 'up', '-d', '--force-recreate']);
    assert.equal(fake.containers()[composeProject()]!.restart, 'unless-stopped');

    const stop = await plan('stack.stop', 'stack=redis');
    assert.deepEqual(stop.effects[0]!.argv, ['docker', ...base(), 'stop']);
    assert.equal(stop.effects[0]!.network, false);
    const stopped = await apply(stop);
    assert.equal(stopped.status, 'applied', stopped.message);
    assert.equal(fake.containers()[composeProject()]!.state, 'exited');

    const again = await json<{ status: string }>(['actions', 'rollback', stopped.executionId]);
    assert.equal(again.status, 'rolled_back');
    assert.deepEqual(writes().at(-1), [...base(), 'up', '-d']);
    assert.equal(fake.containers()[composeProject()]!.state, 'running');

    const restart = await plan('stack.restart', 'stack=redis');
    assert.deepEqual(restart.effects[0]!.argv, ['docker', ...base(), 'restart']);
    assert.equal((await apply(restart)).status, 'applied');
    assert.deepEqual(writes().at(-1), [...base(), 'restart']);

    // Every argv the server ever gave the engine: none deletes data.
    for (const call of fake.calls()) for (const f of FORBIDDEN) assert.ok(!call.includes(f), `${call.join(' ')} contains ${f}`);
    assert.deepEqual(fake.volumes(), [first.volume], 'one volume, never removed');
    const journal = readFileSync(join(dir, '.atelier/runtime/actions/journal.jsonl'), 'utf8');
    assert.match(journal, /ran: docker compose -f \S+ -p atelier-prj-\w+-redis up -d/);
  });

  it('an engine failure fails the apply, says so and offers the inverse; nothing is undone silently', async () => {
    const stop = await plan('stack.stop', 'stack=redis');
    fake.failNext('stop');
    const r = await s.cli(['actions', 'apply', stop.planId, '--yes']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /docker compose .* stop` failed \(exit 1\): fake docker: stop failed as the test asked/);
    assert.match(r.stderr, /atelier actions rollback exec-/);
    assert.equal(fake.containers()[composeProject()]!.state, 'running');
    const ok = await apply(await plan('stack.stop', 'stack=redis'));
    assert.equal(ok.status, 'applied');
  });

  it('a rendered file edited beyond its restart policy is never handed to the engine', async () => {
    const text = readFileSync(rendered(), 'utf8');
    writeFileSync(rendered(), text.replace('    image: redis:7\n', '    image: redis:7\n    privileged: true\n'));
    const calls = writes().length;
    const r = await s.cli(['actions', 'plan', 'stack.start', '--project', 'composed', '--param', 'stack=redis']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /differs from deploy\/stacks\/redis\.tpl\.yml beyond its restart policy/);
    assert.equal(writes().length, calls);
    writeFileSync(rendered(), text);
    assert.equal((await apply(await plan('stack.start', 'stack=redis'))).status, 'applied');
  });
});
