import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import childProcess from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CATALOG } from './catalog/index.js';
import { COMPONENTS } from './catalog/extras.js';
import { redact } from './redact.js';
import { createFakeDocker } from '../../test/helpers/fakeDocker.js';
import { composeBackend, nativeBackend, type StackBackend } from './stackBackends.js';
import { STACKS } from './stacks.js';
import type { ActionEnv, ActionSpec } from './types.js';

const specs = Object.values(CATALOG) as unknown as ActionSpec<Record<string, unknown>>[];

function envFor(dir: string, stacks?: StackBackend): ActionEnv {
  return {
    project: { id: 'prj-test000000', name: 'test', path: dir, tenantId: 'tn-default', createdAt: new Date().toISOString() },
    isRoot: false,
    stacks: stacks ?? nativeBackend(join(dir, 'stacks')),
    validateEgress: () => undefined,
    // Which versions a server can start is the engine's test (test/actions.engine.test.ts), on the real simulators.
    checkSimulatorVersion: () => undefined,
  };
}

describe('the actions catalog (ADR-008 D1, D2)', () => {
  it('holds the actions of the issue', () => {
    assert.deepEqual(Object.keys(CATALOG).sort(), [
      'egress.allow',
      'egress.remove',
      'extras.install-command',
      'simulators.compose',
      'slots.assign',
      'slots.remove',
      'stack.autostart',
      'stack.restart',
      'stack.start',
      'stack.stop',
    ]);
  });

  it('criterion 1: no entry lacks any of the five elements (preconditions, plan, effects, verification, inverse)', () => {
    for (const s of specs) {
      assert.equal(typeof s.preconditions, 'function', `${s.id}: preconditions`);
      assert.equal(typeof s.plan, 'function', `${s.id}: plan`);
      assert.equal(typeof s.inputs, 'function', `${s.id}: inputs`);
      assert.ok(s.effectKinds.length > 0, `${s.id}: effects`);
      assert.ok(s.inverseDescription.length > 10, `${s.id}: inverse`);
      assert.ok(s.parameters, `${s.id}: parameter schema`);
      assert.ok(['A', 'B', 'C'].includes(s.class), `${s.id}: class`);
      if (s.class === 'C') continue;
      // Everything that is applied is verified and has a recorded way back.
      assert.equal(typeof s.apply, 'function', `${s.id}: apply`);
      assert.equal(typeof s.verify, 'function', `${s.id}: verification`);
      assert.equal(typeof s.rollback, 'function', `${s.id}: inverse`);
    }
  });

  it('criterion 3: class C has no apply and no rollback, and its plan spawns no process', () => {
    const dir = mkdtempSync(join(tmpdir(), 'atelier-classc-'));
    const cp = childProcess as unknown as Record<string, unknown>;
    const names = ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork'] as const;
    const saved = Object.fromEntries(names.map((n) => [n, cp[n]]));
    const calls: string[] = [];
    try {
      for (const n of names)
        cp[n] = (...args: unknown[]) => {
          calls.push(`${n} ${JSON.stringify(args[0])}`);
          throw new Error(`${n} called`);
        };
      syncBuiltinESMExports();
      for (const s of specs.filter((x) => x.class === 'C')) {
        assert.equal(s.apply, undefined, `${s.id} must not be applicable`);
        assert.equal(s.rollback, undefined);
        for (const component of Object.keys(COMPONENTS)) {
          const env = envFor(dir);
          const ok = s.preconditions(env, { component }).every((p) => p.ok);
          if (!ok) continue;
          const plan = s.plan(env, { component });
          const effect = plan.effects[0]!;
          assert.equal(effect.kind, 'command');
          if (effect.kind === 'command') {
            assert.equal(effect.network, true);
            assert.equal(effect.runsHere, false);
            assert.match(effect.copy, new RegExp(`^sudo `));
          }
        }
      }
    } finally {
      for (const n of names) cp[n] = saved[n];
      syncBuiltinESMExports();
      rmSync(dir, { recursive: true, force: true });
    }
    assert.deepEqual(calls, []);
  });

  it('criterion 2: no class B command contains a volume-deleting flag, for every backend (compose with a FAKE docker), stack and operation', () => {
    const dir = mkdtempSync(join(tmpdir(), 'atelier-classb-'));
    const FORBIDDEN = ['-v', '--volumes', '-V', '--renew-anon-volumes', 'down', 'rm', '--rmi'];
    // No engine on this machine: a fake `docker` answers `compose version`, so compose plans are made too.
    const fake = createFakeDocker(join(dir, 'fake-bin'));
    const savedPath = process.env.PATH;
    process.env.PATH = `${fake.dir}:${savedPath}`;
    try {
      const argvs: string[][] = [];
      const backends = [nativeBackend(join(dir, 'stacks')), composeBackend('docker'), composeBackend('podman')];
      const planned: Record<string, number> = {};
      for (const backend of backends) {
        const env = envFor(dir, backend);
        for (const stack of STACKS) argvs.push(...backend.everyArgv(env.project, stack));
        // And every argv a class B plan shows (the stacks are stopped here: start and autostart plan).
        for (const s of specs.filter((x) => x.class === 'B'))
          for (const stack of STACKS)
            for (const params of [{ stack }, { stack, enabled: false }]) {
              const parsed = s.parameters.safeParse(params);
              if (!parsed.success) continue;
              if (!s.preconditions(env, parsed.data).every((p) => p.ok)) continue;
              for (const e of s.plan(env, parsed.data).effects)
                if (e.kind === 'service') {
                  argvs.push(e.argv);
                  planned[backend.kind] = (planned[backend.kind] ?? 0) + 1;
                }
            }
      }
      // Native plans need redis-server (installed here); docker ones the fake; podman has none, so only everyArgv.
      assert.ok((planned.native ?? 0) >= 1 && (planned.docker ?? 0) >= 1, JSON.stringify(planned));
      assert.ok(argvs.length >= 20, String(argvs.length));
      for (const argv of argvs) {
        for (const f of FORBIDDEN) assert.ok(!argv.includes(f), `${argv.join(' ')} contains ${f}`);
        // Nor a cluster of short flags holding v or V (`-dv`).
        for (const a of argv) assert.doesNotMatch(a, /^-[A-Za-z]*[vV][A-Za-z]*$/, argv.join(' '));
      }
      // The plans ran nothing but read-only probes.
      for (const call of fake.calls())
        assert.ok(
          ['version', 'ps'].some((x) => call.includes(x)),
          call.join(' '),
        );
    } finally {
      process.env.PATH = savedPath;
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('every input a plan depends on is read again by its action at apply (so a stale plan is always caught)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'atelier-inputs-'));
    try {
      const env = envFor(dir);
      const samples: Record<string, Record<string, unknown>> = {
        'simulators.compose': { simulators: [{ name: 'pg' }] },
        'egress.allow': { entry: 'a.example.com' },
        'slots.assign': { slot: 's1' },
        'stack.start': { stack: 'redis' },
        'stack.autostart': { stack: 'redis', enabled: false },
        'extras.install-command': { component: 'java' },
      };
      for (const [id, params] of Object.entries(samples)) {
        const s = CATALOG[id] as unknown as ActionSpec<Record<string, unknown>>;
        const parsed = s.parameters.parse(params) as Record<string, unknown>;
        const plan = s.plan(env, parsed);
        assert.deepEqual(Object.keys(s.inputs(env, parsed)).sort(), Object.keys(plan.inputs).sort(), id);
        assert.deepEqual(s.inputs(env, parsed), plan.inputs, `${id}: nothing changed, so the inputs read the same`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('class C resolves the installer of this machine', () => {
    const s = CATALOG['extras.install-command'] as unknown as ActionSpec<Record<string, unknown>>;
    const dir = mkdtempSync(join(tmpdir(), 'atelier-classc-'));
    try {
      const plan = s.plan({ ...envFor(dir), isRoot: true }, { component: 'java' });
      const e = plan.effects[0]!;
      // This machine is Debian: apt-get, and no sudo for root.
      assert.deepEqual(e.kind === 'command' ? e.argv : [], [
        'apt-get',
        'install',
        '-y',
        '--no-install-recommends',
        'openjdk-17-jre-headless',
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('parameters are checked against each schema; unknown ones are refused', () => {
    for (const [id, bad] of [
      ['egress.allow', { entry: 'a b' }],
      ['egress.allow', { entry: 'a.com', extra: 1 }],
      ['slots.assign', { slot: 'Not_A_Label' }],
      ['simulators.compose', { simulators: [{ name: 'pg', stubsDirectory: '../outside' }] }],
      ['simulators.compose', { simulators: [{ name: 'pg' }, { name: 'pg' }] }],
      ['simulators.compose', { simulators: [{ name: 'pg', image: 'evil' }] }],
      ['extras.install-command', { component: 'curl | sh' }],
    ] as const) {
      assert.equal(CATALOG[id]!.parameters.safeParse(bad).success, false, `${id} ${JSON.stringify(bad)}`);
    }
  });

  it('journals environment variables by name, never by value', () => {
    const r = redact({ simulators: [{ name: 'pg', env: { POSTGRES_PASSWORD: 'hunter2', POSTGRES_DB: 'db' } }] });
    assert.deepEqual(r, { simulators: [{ name: 'pg', env: { POSTGRES_PASSWORD: '(redacted)', POSTGRES_DB: '(redacted)' } }] });
    assert.ok(!JSON.stringify(r).includes('hunter2'));
  });
});
