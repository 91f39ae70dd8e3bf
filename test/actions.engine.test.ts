// The actions engine against a real PostgreSQL and real project directories: plans, apply with
// its refusals (stale, expired, mismatched, journal unwritable), concurrent applies, failed
// verifications, and rollback to the exact prior bytes for every class A action.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import {
  CATALOG,
  createActionService,
  DEFAULT_PROJECT_FILE,
  createProjectRegistry,
  JOURNAL_FILE,
  readJournal,
  type ActionService,
  type Actor,
  type ProjectRegistry,
} from '../src/actions/index.js';
import type { AtelierError } from '../src/core/index.js';
import { createPool, migrate, type Pool } from '../src/db/index.js';
import { createEgressPolicy } from '../src/egress/index.js';
import { checkSimulatorVersion } from '../src/simulators/index.js';
import { ExternalPostgres } from './helpers/postgres.js';

const ACTOR: Actor = { userId: 'u-tester', userName: 'tester', tenantId: 'tn-default' };
const STRANGER: Actor = { userId: 'u-stranger', userName: 'stranger', tenantId: 'tn-other' };

// A hand-written settings file: every byte of it outside the edited key must survive.
const HAND_WRITTEN = `# Settings of the shop, by hand.
egress:
  allow: [api.stripe.com]   # payments
  deny:
    - uploads.example.com

anchors: &base {retries: 3}
uses: *base
simulators:
  - name: redis
slots: [shared-cache]
`;

async function rejects(p: Promise<unknown>, code: string, re?: RegExp): Promise<AtelierError> {
  let caught: AtelierError | undefined;
  await assert.rejects(p, (err: AtelierError) => {
    caught = err;
    assert.equal(err.code, code, err.message);
    if (re) assert.match(err.message, re);
    return true;
  });
  return caught!;
}

describe('typed actions engine', () => {
  let db: ExternalPostgres;
  let pool: Pool;
  let projects: ProjectRegistry;
  let service: ActionService;
  let clock = Date.now();
  let egressRulesBroken = false;
  const dirs: string[] = [];

  const newProject = async (content: string | null = HAND_WRITTEN): Promise<{ name: string; dir: string }> => {
    const dir = mkdtempSync('/tmp/atelier-actions-');
    dirs.push(dir);
    if (content !== null) writeFileSync(join(dir, 'atelier.yaml'), content);
    const { project } = await projects.add(ACTOR, dir);
    if (content === null) rmSync(join(dir, 'atelier.yaml'));
    return { name: project.name, dir };
  };
  const file = (dir: string): string => readFileSync(join(dir, 'atelier.yaml'), 'utf8');

  before(async () => {
    db = ExternalPostgres.start();
    pool = createPool(db.url, () => undefined);
    await migrate(pool);
    await pool.query("INSERT INTO tenants (id, name) VALUES ('tn-other', 'other')");
    await pool.query("INSERT INTO users (id, name) VALUES ('u-tester', 'tester'), ('u-stranger', 'stranger')");
    projects = createProjectRegistry({ pool, allowRoots: ['/tmp'] });
    service = createActionService({
      pool,
      projects,
      isRoot: process.getuid?.() === 0,
      stacksDir: '/nonexistent/atelier-stacks',
      planTtlSeconds: 60,
      now: () => new Date(clock),
      validateEgress: (allow, deny) => {
        if (egressRulesBroken) throw new Error('the platform refuses every list now');
        createEgressPolicy({ allow, deny });
      },
      checkSimulatorVersion,
    });
  });
  after(async () => {
    await pool?.end();
    db?.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('projects add creates atelier.yaml with commented defaults when absent, and refuses paths outside the allowed roots', async () => {
    const dir = mkdtempSync('/tmp/atelier-actions-');
    dirs.push(dir);
    const r = await projects.add(ACTOR, dir, 'fresh');
    assert.equal(r.created, true);
    assert.match(file(dir), /^# atelier.yaml/);
    assert.match(file(dir), /egress:\n {2}allow: \[\]/);
    await rejects(projects.add(ACTOR, '/etc'), 'REPO_REFUSED', /--allow-repo-root/);
    await rejects(projects.add(ACTOR, dir, 'again'), 'ALREADY_EXISTS');
    await rejects(projects.resolve(STRANGER, 'fresh'), 'PROJECT_NOT_FOUND');
  });

  it('simulators.compose plans only what this server can start, and the default atelier.yaml suggests only that', async () => {
    const { name, dir } = await newProject();
    const majors = readdirSync('/usr/lib/postgresql')
      .filter((v) => /^\d+$/.test(v))
      .sort((a, b) => Number(b) - Number(a));
    const compose = (simulators: unknown): Promise<unknown> => service.plan(ACTOR, name, 'simulators.compose', { simulators });
    await rejects(
      compose([{ name: 'postgres', version: '99-alpine' }]),
      'INVALID_ARGUMENT',
      new RegExp(
        `^simulators\\.0: PostgreSQL 99-alpine is not installed on this server; installed: ${majors.join(', ')}\\. Ask for version "${majors[0]}"`,
      ),
    );
    await rejects(
      compose([{ name: 'postgres' }, { name: 'redis', version: '99' }]),
      'INVALID_ARGUMENT',
      /^simulators\.1: Redis 99 is not installed/,
    );
    assert.equal(file(dir), HAND_WRITTEN);
    await compose([{ name: 'postgres', version: majors[0] }]);
    // The default file's suggestion, uncommented as a user would, is planned as it stands.
    const block = DEFAULT_PROJECT_FILE.split('\n# simulators:\n')[1]!.split('\n\n')[0]!;
    const suggested = parse(`simulators:\n${block.replace(/^# /gm, '')}`) as { simulators: unknown[] };
    assert.deepEqual(
      suggested.simulators.map((s) => (s as { name: string }).name),
      ['postgres'],
    );
    await compose(suggested.simulators);
  });

  it('plan shows the diff, fingerprint and expiry and writes nothing but the journal line', async () => {
    const { name, dir } = await newProject();
    const plan = await service.plan(ACTOR, name, 'egress.allow', { entry: 'api.example.com:8443' });
    assert.match(plan.fingerprint, /^sha256:[0-9a-f]{64}$/);
    assert.equal(Date.parse(plan.expiresAt) - Date.parse(plan.createdAt), 60_000);
    const effect = plan.effects[0]!;
    assert.equal(effect.kind, 'file');
    if (effect.kind === 'file') {
      assert.match(effect.diff, /^- {2}allow: \[api.stripe.com\] {3}# payments$/m);
      assert.match(effect.diff, /^\+ {2}allow: \[api.stripe.com, "?api.example.com:8443"?\] {3}# payments$/m);
    }
    assert.equal(file(dir), HAND_WRITTEN);
    assert.deepEqual(
      readJournal(dir).entries.map((e) => e.event),
      ['plan'],
    );
  });

  it('a false precondition blocks plan, with the reason', async () => {
    const { name } = await newProject();
    await rejects(service.plan(ACTOR, name, 'egress.allow', { entry: 'api.stripe.com' }), 'PRECONDITION_FAILED', /already in egress.allow/);
    await rejects(service.plan(ACTOR, name, 'slots.remove', { slot: 'nope' }), 'PRECONDITION_FAILED', /not attached/);
    await rejects(service.plan(ACTOR, name, 'egress.allow', { entry: '*.com' }), 'INVALID_ARGUMENT', /public suffix/);
    await rejects(service.plan(ACTOR, name, 'stack.nuke', {}), 'ACTION_NOT_FOUND');
    await rejects(service.plan(ACTOR, name, 'egress.allow', { entry: 'a.com', command: 'rm -rf /' }), 'INVALID_ARGUMENT');
  });

  it('criterion 4: apply refuses a stale plan (changed file, or a file that appeared), an expired plan and a mismatched fingerprint, each with its own code', async () => {
    // Changed since the plan.
    const a = await newProject();
    const p1 = await service.plan(ACTOR, a.name, 'slots.assign', { slot: 'one' });
    writeFileSync(join(a.dir, 'atelier.yaml'), `${HAND_WRITTEN}# edited meanwhile\n`);
    await rejects(service.apply(ACTOR, 'slots.assign', p1.planId, p1.fingerprint), 'PLAN_STALE', /changed since plan/);
    assert.equal(file(a.dir), `${HAND_WRITTEN}# edited meanwhile\n`);

    // Absent at plan time, present now.
    const b = await newProject(null);
    const p2 = await service.plan(ACTOR, b.name, 'slots.assign', { slot: 'one' });
    writeFileSync(join(b.dir, 'atelier.yaml'), 'slots: [theirs]\n');
    const stale = await rejects(service.apply(ACTOR, 'slots.assign', p2.planId, p2.fingerprint), 'PLAN_STALE');
    assert.equal(stale.details?.planned, 'absent');
    assert.equal(file(b.dir), 'slots: [theirs]\n');

    // Expired.
    const c = await newProject();
    const p3 = await service.plan(ACTOR, c.name, 'slots.assign', { slot: 'one' });
    clock += 61_000;
    try {
      await rejects(service.apply(ACTOR, 'slots.assign', p3.planId, p3.fingerprint), 'PLAN_EXPIRED', /plan again/);
    } finally {
      clock -= 61_000;
    }
    assert.equal(file(c.dir), HAND_WRITTEN);

    // Another fingerprint (or another action's route).
    const p4 = await service.plan(ACTOR, c.name, 'slots.assign', { slot: 'two' });
    await rejects(service.apply(ACTOR, 'slots.assign', p4.planId, `sha256:${'0'.repeat(64)}`), 'PLAN_FINGERPRINT_MISMATCH');
    await rejects(service.apply(ACTOR, 'slots.remove', p4.planId, p4.fingerprint), 'PLAN_FINGERPRINT_MISMATCH');
    await rejects(service.apply(ACTOR, 'slots.assign', 'plan-0000000000', p4.fingerprint), 'PLAN_NOT_FOUND');
    await rejects(service.apply(STRANGER, 'slots.assign', p4.planId, p4.fingerprint), 'PLAN_NOT_FOUND');
    assert.equal(file(c.dir), HAND_WRITTEN);
    // None of the refusals consumed the plan.
    const x = await service.apply(ACTOR, 'slots.assign', p4.planId, p4.fingerprint);
    assert.equal(x.status, 'applied');
  });

  it('criterion 5: apply is refused when the journal is not writable, and nothing changes', async () => {
    const { name, dir } = await newProject();
    const plan = await service.plan(ACTOR, name, 'egress.remove', { entry: 'api.stripe.com' });
    const journal = join(dir, JOURNAL_FILE);
    const before = readFileSync(journal, 'utf8');
    rmSync(journal);
    mkdirSync(journal);
    await rejects(service.apply(ACTOR, 'egress.remove', plan.planId, plan.fingerprint), 'JOURNAL_UNWRITABLE', /nothing was changed/);
    assert.equal(file(dir), HAND_WRITTEN);
    assert.deepEqual(readdirSync(join(dir, '.atelier/runtime/actions')).sort(), ['journal.jsonl']);
    // Once the journal is writable again, the very same plan applies.
    rmSync(journal, { recursive: true });
    writeFileSync(journal, before);
    const x = await service.apply(ACTOR, 'egress.remove', plan.planId, plan.fingerprint);
    assert.equal(x.status, 'applied');
  });

  it('criterion 6: rollback restores the exact prior bytes for every class A action', async () => {
    const params: Record<string, Record<string, unknown>> = {
      'simulators.compose': { simulators: [{ name: 'postgres', env: { POSTGRES_PASSWORD: 'hunter2' } }] },
      'egress.allow': { entry: 'api.example.com' },
      'egress.remove': { entry: 'api.stripe.com' },
      'slots.assign': { slot: 'shared-pg' },
      'slots.remove': { slot: 'shared-cache' },
    };
    const classA = Object.values(CATALOG).filter((s) => s.class === 'A');
    assert.deepEqual(classA.map((s) => s.id).sort(), Object.keys(params).sort());
    for (const s of classA) {
      for (const start of [HAND_WRITTEN, null]) {
        if (start === null && (s.id === 'egress.remove' || s.id === 'slots.remove')) continue;
        const { name, dir } = await newProject(start);
        const plan = await service.plan(ACTOR, name, s.id, params[s.id]);
        const x = await service.apply(ACTOR, s.id, plan.planId, plan.fingerprint);
        assert.equal(x.status, 'applied', `${s.id}: ${JSON.stringify(x.verification)}`);
        assert.notEqual(file(dir), start ?? '', 'the file changed');
        if (start !== null) {
          // Only the edited key changed: the comments, the anchor and its alias are still there.
          for (const kept of ['# Settings of the shop, by hand.', 'anchors: &base {retries: 3}', 'uses: *base'])
            assert.ok(file(dir).includes(kept), kept);
        }
        const back = await service.rollback(ACTOR, s.id, x.executionId);
        assert.equal(back.status, 'rolled_back', `${s.id}: ${JSON.stringify(back.verification)}`);
        if (start === null) assert.throws(() => file(dir), /ENOENT/);
        else assert.equal(file(dir), start, `${s.id}: prior bytes restored`);
        // No secret in the journal: env values by name only.
        assert.ok(!readFileSync(join(dir, JOURNAL_FILE), 'utf8').includes('hunter2'));
        const ex = readJournal(dir).executions.find((e) => e.executionId === x.executionId);
        assert.equal(ex?.status, 'rolled_back');
        await rejects(service.rollback(ACTOR, s.id, x.executionId), 'CONFLICT', /already rolled back/);
      }
    }
  });

  it('a redacted parameter stays redacted in the plan diff, its journal lines and every answer', async () => {
    // The file already holds a secret (old), the plan brings new ones: a long one, a short one,
    // one quoted by YAML and one of several lines.
    const start = `${HAND_WRITTEN.replace('simulators:\n  - name: redis\n', 'simulators:\n  - name: redis\n    env:\n      REDIS_PASSWORD: old-Secret-1\n')}`;
    const { name, dir } = await newProject(start);
    const secrets = ['old-Secret-1', 'hunter2-New', "it's: a #secret", 'first-line-key', 'second-line-key'];
    const env = {
      POSTGRES_PASSWORD: 'hunter2-New',
      POSTGRES_USER: 'pg',
      QUOTED: "it's: a #secret",
      PEM: 'first-line-key\nsecond-line-key',
    };
    const params = { simulators: [{ name: 'postgres', env }] };
    const seen: string[] = [];
    const plan = await service.plan(ACTOR, name, 'simulators.compose', params);
    seen.push(JSON.stringify(plan), JSON.stringify(await service.getPlan(ACTOR, plan.planId)));
    const effect = plan.effects[0]!;
    assert.equal(effect.kind, 'file');
    if (effect.kind === 'file') {
      assert.match(effect.diff, /^- {6}REDIS_PASSWORD: \(redacted\)$/m, effect.diff);
      assert.match(effect.diff, /^\+ {6}POSTGRES_PASSWORD: \(redacted\)$/m, effect.diff);
      assert.match(effect.diff, /^\+ {6}POSTGRES_USER: \(redacted\)$/m, effect.diff);
      assert.match(effect.diff, /^\+ {2}- name: postgres$/m, effect.diff);
    }
    const x = await service.apply(ACTOR, 'simulators.compose', plan.planId, plan.fingerprint);
    assert.equal(x.status, 'applied', JSON.stringify(x.verification));
    seen.push(JSON.stringify(x));
    // The file itself holds them (that is the point of the action).
    assert.ok(file(dir).includes('hunter2-New'));
    seen.push(JSON.stringify(await service.execution(ACTOR, x.executionId)), JSON.stringify(await service.journal(ACTOR, name)));
    const back = await service.rollback(ACTOR, 'simulators.compose', x.executionId);
    assert.equal(back.status, 'rolled_back');
    assert.equal(file(dir), start);
    seen.push(JSON.stringify(back), readFileSync(join(dir, JOURNAL_FILE), 'utf8'));
    const { rows } = await pool.query<{ planned: unknown }>('SELECT planned FROM action_plans WHERE id = $1', [plan.planId]);
    seen.push(JSON.stringify((rows[0]!.planned as { effects: unknown }).effects));
    for (const text of seen) for (const secret of secrets) assert.ok(!text.includes(secret), `${secret} shows in ${text.slice(0, 300)}`);
    assert.ok(!seen.some((t) => /POSTGRES_USER\\?"?: ?\\?"?pg\b/.test(t)), 'the short one is hidden after its name');
  });

  it('criterion 6: rollback is refused when the file was edited by someone else since the apply', async () => {
    const { name, dir } = await newProject();
    const plan = await service.plan(ACTOR, name, 'egress.allow', { entry: 'api.example.com' });
    const x = await service.apply(ACTOR, 'egress.allow', plan.planId, plan.fingerprint);
    const theirs = `${file(dir)}# someone else's line\n`;
    writeFileSync(join(dir, 'atelier.yaml'), theirs);
    await rejects(service.rollback(ACTOR, 'egress.allow', x.executionId), 'ROLLBACK_CONFLICT', /edited by someone else/);
    assert.equal(file(dir), theirs);
    const ex = readJournal(dir).executions.find((e) => e.executionId === x.executionId);
    assert.equal(ex?.status, 'rollback_failed');
    assert.equal(ex?.rollbackOffered, true);
  });

  it('two concurrent applies of the same plan: one wins, the other is refused, the file is written once', async () => {
    const { name, dir } = await newProject();
    const plan = await service.plan(ACTOR, name, 'slots.assign', { slot: 'race' });
    const results = await Promise.allSettled([
      service.apply(ACTOR, 'slots.assign', plan.planId, plan.fingerprint),
      service.apply(ACTOR, 'slots.assign', plan.planId, plan.fingerprint),
    ]);
    const won = results.filter((r) => r.status === 'fulfilled');
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    assert.equal(won.length, 1);
    assert.equal(lost.length, 1);
    assert.ok(['ACTION_BUSY', 'PLAN_ALREADY_APPLIED'].includes((lost[0]!.reason as AtelierError).code), String(lost[0]!.reason));
    assert.equal(readJournal(dir).entries.filter((e) => e.event === 'apply_started').length, 1);
    assert.match(file(dir), /slots: \[shared-cache, race\]/);
  });

  it('a failed verification is reported as failed, not undone, and its inverse stays offered', async () => {
    const { name, dir } = await newProject();
    const plan = await service.plan(ACTOR, name, 'egress.allow', { entry: 'api.example.com' });
    egressRulesBroken = true;
    let x;
    try {
      x = await service.apply(ACTOR, 'egress.allow', plan.planId, plan.fingerprint);
    } finally {
      egressRulesBroken = false;
    }
    assert.equal(x.status, 'failed');
    assert.equal(x.rollbackOffered, true);
    assert.match(x.message, /NOT undone/);
    assert.ok(file(dir).includes('api.example.com'), 'the change stays until the user rolls it back');
    const ex = readJournal(dir).executions.find((e) => e.executionId === x.executionId);
    assert.equal(ex?.status, 'failed');
    assert.equal(ex?.rollbackOffered, true);
    const back = await service.rollback(ACTOR, 'egress.allow', x.executionId);
    assert.equal(back.status, 'rolled_back');
    assert.equal(file(dir), HAND_WRITTEN);
  });

  it('class C plans a command to copy and is never applied', async () => {
    const { name, dir } = await newProject();
    const plan = await service.plan(ACTOR, name, 'extras.install-command', { component: 'redis-server' });
    const e = plan.effects[0]!;
    assert.equal(e.kind, 'command');
    assert.equal(plan.applyCommand, null);
    await rejects(service.apply(ACTOR, 'extras.install-command', plan.planId, plan.fingerprint), 'UNSUPPORTED', /never applied/);
    assert.equal(file(dir), HAND_WRITTEN);
    assert.deepEqual(
      readJournal(dir).entries.map((x) => x.event),
      ['plan'],
    );
  });
});
