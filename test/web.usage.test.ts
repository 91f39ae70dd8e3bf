import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cpuShare, cpuTime } from '../web/src/usage.js';

// How the workshop page turns two readings of a workshop's CPU time into a share of its limit.
const at = (ms: number): string => new Date(Date.parse('2026-12-03T12:00:00Z') + ms).toISOString();

describe('dashboard usage figures', () => {
  it('a share of the cpus limit from the growth of CPU time between two readings, on their own clock', () => {
    // 1 s of CPU time over 2 s: half of one CPU, a quarter of two.
    assert.equal(cpuShare({ at: at(0), cpuUsec: 5_000_000 }, { at: at(2000), cpuUsec: 6_000_000 }, 1), 0.5);
    assert.equal(cpuShare({ at: at(0), cpuUsec: 5_000_000 }, { at: at(2000), cpuUsec: 6_000_000 }, 2), 0.25);
    // Two busy CPUs of a 2-CPU workshop: all of it.
    assert.equal(cpuShare({ at: at(0), cpuUsec: 0 }, { at: at(1500), cpuUsec: 3_000_000 }, 2), 1);
    // Idle: 0, not nothing.
    assert.equal(cpuShare({ at: at(0), cpuUsec: 7 }, { at: at(2000), cpuUsec: 7 }, 1), 0);
  });

  it('nothing to say without two readings, without a figure, or when the counter went back (started again)', () => {
    assert.equal(cpuShare(undefined, { at: at(0), cpuUsec: 1 }, 1), undefined);
    assert.equal(cpuShare({ at: at(0), cpuUsec: null }, { at: at(2000), cpuUsec: 1 }, 1), undefined);
    assert.equal(cpuShare({ at: at(0), cpuUsec: 1 }, { at: at(2000), cpuUsec: null }, 1), undefined);
    assert.equal(cpuShare({ at: at(0), cpuUsec: 9_000_000 }, { at: at(2000), cpuUsec: 10 }, 1), undefined);
    // The same reading twice (no time between them).
    assert.equal(cpuShare({ at: at(0), cpuUsec: 1 }, { at: at(0), cpuUsec: 1 }, 1), undefined);
  });

  it('CPU time for people', () => {
    assert.equal(cpuTime(420_000), '0.42 s');
    assert.equal(cpuTime(12_345_678), '12.3 s');
    assert.equal(cpuTime(245_000_000), '4 min 05 s');
    assert.equal(cpuTime(7_620_000_000), '2 h 07 min');
  });
});
