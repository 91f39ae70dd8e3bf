import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mayOperate, type Approval } from '../web/src/api.js';
import { EMPTY, applyEvent, countdown, effectOf, fromList, page, splitDiff, summary } from '../web/src/pending.js';

// The dashboard's logic that is not drawing: what the banner counts, the countdown, diff paging,
// what a decision's effect reads as.
const NOW = Date.parse('2026-12-02T12:00:00Z');

function approval(id: string, expiresInS: number, status: Approval['status'] = 'PENDING'): Approval {
  return {
    id,
    workshopId: 'ws-1',
    category: 'ALLOWLIST_EXPANSION',
    requestedBy: 'agent/ws-1',
    payload: { host: 'x.test', justification: 'why' },
    status,
    decidedBy: null,
    decisionReason: null,
    createdAt: new Date(NOW).toISOString(),
    expiresAt: new Date(NOW + expiresInS * 1000).toISOString(),
    decidedAt: null,
    effect: { appliedAt: null, error: null },
  };
}

describe('banner state', () => {
  it('counts what waits, soonest expiry first; a request past its expiry no longer counts', () => {
    let s = fromList(EMPTY, [approval('a', 300), approval('b', 60), approval('c', -1)], new Set());
    const sum = summary(s, NOW);
    assert.equal(sum.count, 2);
    assert.equal(sum.soonest, NOW + 60_000);
    assert.deepEqual(
      sum.items.map((a) => a.id),
      ['b', 'a'],
    );
    s = applyEvent(s, { type: 'created', approval: approval('d', 10) });
    assert.equal(summary(s, NOW).count, 3);
    assert.equal(summary(s, NOW).soonest, NOW + 10_000);
  });

  it('a decision or an expiry from the stream removes the request and keeps how it ended', () => {
    let s = fromList(EMPTY, [approval('a', 300), approval('b', 60)], new Set());
    s = applyEvent(s, { type: 'decided', approval: { ...approval('a', 300, 'APPROVED'), decidedBy: 'lead' } });
    s = applyEvent(s, { type: 'expired', approval: approval('b', 0, 'EXPIRED') });
    assert.equal(summary(s, NOW).count, 0);
    assert.equal(s.ended.get('a')?.decidedBy, 'lead');
    assert.equal(s.ended.get('b')?.status, 'EXPIRED');
  });

  it('a list fetched while a decision streamed in does not bring the decided request back', () => {
    const s = fromList(EMPTY, [approval('a', 300), approval('b', 300)], new Set(['a']));
    assert.deepEqual([...s.pending.keys()], ['b']);
  });

  it('the ready frame and events without a request change nothing', () => {
    const s = fromList(EMPTY, [approval('a', 300)], new Set());
    assert.equal(applyEvent(s, { type: 'ready' }), s);
  });
});

describe('countdown', () => {
  it('reads as hours, minutes or seconds, and says when it is over', () => {
    assert.equal(countdown(3_723_000), '1 h 02 min');
    assert.equal(countdown(245_000), '4 min 05 s');
    assert.equal(countdown(9_400), '9 s');
    assert.equal(countdown(0), 'expired');
    assert.equal(countdown(-5), 'expired');
  });
});

describe('diff paging', () => {
  const diff = [
    'diff --git a/one.txt b/one.txt',
    '--- a/one.txt',
    '+++ b/one.txt',
    '@@ -1 +1 @@',
    '-a',
    '+b',
    'diff --git a/dir/two.txt b/dir/two.txt',
    ...Array.from({ length: 1000 }, (_, i) => `+line ${i}`),
  ].join('\n');

  it('splits a unified diff per file', () => {
    const files = splitDiff(diff);
    assert.deepEqual(
      files.map((f) => f.name),
      ['one.txt', 'dir/two.txt'],
    );
    assert.equal(files[0]!.lines.length, 5);
    assert.equal(files[1]!.lines.length, 1000);
  });

  it('a diff without file headers is one block', () => {
    assert.deepEqual(splitDiff('+x\n-y'), [{ name: '(diff)', lines: ['+x', '-y'] }]);
  });

  it('pages a large file: what is shown and how much is left', () => {
    const lines = splitDiff(diff)[1]!.lines;
    assert.deepEqual({ n: page(lines, 400, 1).shown.length, more: page(lines, 400, 1).more }, { n: 400, more: 600 });
    assert.equal(page(lines, 400, 3).shown.length, 1000);
    assert.equal(page(lines, 400, 3).more, 0);
  });
});

describe("a decision's effect", () => {
  const at = new Date(NOW + 1000).toISOString();
  const decided = (category: Approval['category'], payload: Record<string, unknown>, effect: Approval['effect']): Approval => ({
    ...approval('e', 300, 'APPROVED'),
    category,
    payload: { ...payload, justification: 'why' },
    effect,
  });

  it('names what was done, per category, once the server recorded it', () => {
    const applied = { appliedAt: at, error: null };
    const cases: [Approval, RegExp][] = [
      [decided('ALLOWLIST_EXPANSION', { host: 'x.test', entry: 'x.test:443' }, applied), /^domain added: x\.test:443 is in/],
      [decided('PR_GATEWAY', { branch: 'feature/x', remote: 'origin' }, applied), /^branch pushed: feature\/x to origin/],
      [
        decided('SECRET_REQUEST', { name: 'TOKEN', ttlSeconds: 900, mode: 'use', host: 'api.test' }, applied),
        /^grant made: TOKEN for 15 min 00 s, sent by the egress proxy to api\.test/,
      ],
      [
        decided('SECRET_REQUEST', { name: 'TOKEN', mode: 'reveal' }, applied),
        /^grant made: TOKEN for the default duration, revealed in the workshop/,
      ],
      [decided('SHELL_COMMAND', { command: ['make'] }, applied), /^command ran/],
    ];
    for (const [a, re] of cases) {
      const e = effectOf(a);
      assert.equal(e.state, 'applied', a.category);
      assert.match(e.text, re);
    }
  });

  it("shows the effect's error, waits while it is not known, and says nothing was applied to a rejection", () => {
    const failed = effectOf(decided('PR_GATEWAY', { branch: 'b' }, { appliedAt: at, error: 'push refused: non-fast-forward' }));
    assert.deepEqual(failed, { state: 'failed', text: 'failed: push refused: non-fast-forward' });
    assert.equal(effectOf(decided('ALLOWLIST_EXPANSION', { host: 'x.test' }, { appliedAt: null, error: null })).state, 'waiting');
    assert.match(effectOf(decided('SHELL_COMMAND', { command: ['make'] }, { appliedAt: null, error: null })).text, /waiting for the agent/);
    assert.deepEqual(effectOf(approval('r', 300, 'REJECTED')), { state: 'none', text: 'nothing was applied (rejected)' });
    assert.equal(effectOf(approval('p', 300)).state, 'none');
  });
});

describe('who may operate a workshop (its simulators and their credentials)', () => {
  it('its owner, and any maintainer or admin of its tenant; never a viewer, nor another member', () => {
    const owned = { ownerId: 'u-1' };
    assert.equal(mayOperate('member', 'u-1', owned), true);
    assert.equal(mayOperate('member', 'u-2', owned), false);
    assert.equal(mayOperate('viewer', 'u-1', owned), false, 'a viewer who once owned it');
    assert.equal(mayOperate('maintainer', 'u-2', owned), true);
    assert.equal(mayOperate('admin', 'u-2', { ownerId: null }), true);
    assert.equal(mayOperate('member', 'u-2', { ownerId: null }), false);
  });
});
