import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { emitter, runningLine, type Out, type StepEvent } from './engine.js';

// The progress renderer on its three outputs. The outputs are in-memory sinks that record what
// is written (and say whether they are a terminal, and how wide); the clock is the test's, so the
// throttle is checked without waiting.

function sink(isTTY: boolean, columns?: number): Out & { text: () => string } {
  const chunks: string[] = [];
  return {
    isTTY,
    columns,
    write: (chunk: string | Uint8Array) => {
      chunks.push(String(chunk));
      return true;
    },
    text: () => chunks.join(''),
  };
}

const applying: StepEvent = {
  event: 'step',
  step: 'unpack',
  index: 2,
  total: 6,
  state: 'applying',
  detail: 'beside 0.0.0, in /opt/atelier/releases/0.0.1',
};
const applied: StepEvent = { ...applying, state: 'applied', ms: 1200 };
const MB = 1024 * 1024;

describe('install progress: the renderer', () => {
  it('JSON: progress events are throttled to 5 a second per step; the last one (done = total) and step events always go out', () => {
    let t = 0;
    const stdout = sink(false);
    const emit = emitter('json', { stdout, out: sink(false), now: () => t });
    emit(applying);
    // One event every 50 ms for a second: 21 sent.
    for (let i = 0; i <= 20; i++) {
      t = i * 50;
      emit({ event: 'progress', step: 'unpack', done: i * MB, total: 25 * MB, unit: 'bytes' });
      // Another step's progress is throttled on its own.
      emit({ event: 'progress', step: 'backup', done: i, total: 100, unit: 'bytes' });
    }
    t = 1010;
    emit({ event: 'progress', step: 'unpack', done: 25 * MB, total: 25 * MB, unit: 'bytes' });
    emit(applied);
    const events = stdout
      .text()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { event: string; step: string; done?: number; total?: number; state?: string });
    const unpack = events.filter((e) => e.event === 'progress' && e.step === 'unpack');
    assert.deepEqual(
      unpack.map((e) => e.done! / MB),
      [0, 4, 8, 12, 16, 20, 25],
    );
    assert.ok(unpack.every((e) => e.total === 25 * MB));
    assert.equal(events.filter((e) => e.event === 'progress' && e.step === 'backup').length, 6);
    assert.deepEqual(
      events.filter((e) => e.event === 'step').map((e) => e.state),
      ['applying', 'applied'],
    );
  });

  it('on a terminal: a bar with its percent on the running line, never wider than the terminal, redrawn at most 5 times a second', () => {
    for (const columns of [30, 60, 80, 200]) {
      let t = 0;
      const out = sink(true, columns);
      const emit = emitter('text', { out, now: () => t });
      emit(applying);
      t = 1000;
      emit({ event: 'progress', step: 'unpack', done: 10 * MB, total: 40 * MB, unit: 'bytes' });
      // Ten more at the same instant: none redraws.
      for (let i = 0; i < 10; i++) emit({ event: 'progress', step: 'unpack', done: (11 + i) * MB, total: 40 * MB, unit: 'bytes' });
      t = 1300;
      emit({ event: 'progress', step: 'unpack', done: 30 * MB, total: 40 * MB, unit: 'bytes' });
      emit(applied);
      const lines = out
        .text()
        .split('\r\u001b[K')
        .filter((l) => l !== '');
      // The first draw (no progress yet), one for 10 MB, one for 30 MB, then the mark.
      assert.equal(lines.length, 4, `${columns} columns: ${JSON.stringify(lines)}`);
      const [first, at25, at75, done] = lines as [string, string, string, string];
      for (const l of [first, at25, at75]) assert.ok(l.length <= columns - 1, `${columns}: "${l}" is ${l.length} wide`);
      assert.match(at25, /\b25% 10\.0 MB\/40\.0 MB \(1 s\)$/);
      assert.match(at75, /\b75% 30\.0 MB\/40\.0 MB \(1 s\)$/);
      if (columns >= 60) assert.match(at75, / █+░+ 75%/, `a bar at ${columns} columns`);
      else assert.doesNotMatch(at75, /[█░]/, `no room for a bar at ${columns} columns`);
      if (columns === 200) assert.match(at75, /\[2\/6\] unpack: beside 0\.0\.0, in \/opt\/atelier\/releases\/0\.0\.1 /);
      assert.match(done, /^✓ \[2\/6\] unpack: applied \(1\.2 s\)/);
    }
  });

  it('the running line: a bar of 5 to 30 cells, the head cut with an ellipsis, an unknown total shown as an amount', () => {
    const p = { event: 'progress' as const, step: 'unpack', done: 5 * MB, total: 10 * MB, unit: 'bytes' as const };
    const wide = runningLine(applying, 0, 3, 200, p);
    assert.equal((/█+░+/.exec(wide)?.[0] ?? '').length, 30);
    const narrow = runningLine(applying, 0, 3, 60, p);
    assert.ok(narrow.length <= 59, narrow);
    assert.match(narrow, /…/);
    assert.equal((/█+░+/.exec(narrow)?.[0] ?? '').length, 60 - 1 - ' 50% 5.0 MB/10.0 MB (3 s)'.length - 25);
    const unknown = runningLine(applying, 0, 3, 80, { ...p, total: undefined });
    assert.match(unknown, / 5\.0 MB \(3 s\)$/);
    assert.doesNotMatch(unknown, /%|█/);
  });

  it('off a terminal: progress writes nothing, the step lines say the rest', () => {
    const out = sink(false);
    const emit = emitter('text', { out, now: () => 0 });
    emit(applying);
    for (let i = 0; i < 100; i++) emit({ event: 'progress', step: 'unpack', done: i, total: 100, unit: 'bytes' });
    emit(applied);
    assert.equal(out.text(), '[2/6] unpack: applied (1.2 s) — beside 0.0.0, in /opt/atelier/releases/0.0.1\n');
  });
});
