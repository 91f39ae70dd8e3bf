import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AtelierError } from '../../core/index.js';
import { queryOf } from './query.js';

function problems(fn: () => void): { message: string; field: unknown; fields: unknown } {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof AtelierError);
    assert.equal(err.code, 'INVALID_ARGUMENT');
    return { message: err.message, field: err.details?.field, fields: err.details?.fields };
  }
  assert.fail('expected an INVALID_ARGUMENT');
}

describe('query-string parser', () => {
  it('reads typed values and defaults when absent', () => {
    const q = queryOf({ limit: '20', wait: '1.5', follow: '1', status: 'PENDING', path: 'a/b' });
    assert.equal(q.int('limit', { min: 1, max: 1000 }), 20);
    assert.equal(q.number('wait', { min: 0, max: 60 }), 1.5);
    assert.equal(q.boolean('follow'), true);
    assert.equal(q.oneOf('status', ['PENDING', 'APPROVED'] as const), 'PENDING');
    assert.equal(q.requiredString('path'), 'a/b');
    assert.equal(q.int('after', { min: 0, max: 10 }), undefined);
    assert.equal(q.boolean('resume'), undefined);
    q.done();
  });

  it('names every bad field in one error', () => {
    const e = problems(() => {
      const q = queryOf({ limit: '0', follow: 'yes', status: ['PENDING', 'APPROVED'], wait: '-1' });
      q.int('limit', { min: 1, max: 1000 });
      q.boolean('follow');
      q.oneOf('status', ['PENDING', 'APPROVED'] as const);
      q.number('wait', { min: 0, max: 60 });
      q.requiredString('path');
      q.done();
    });
    assert.equal(e.field, 'limit');
    assert.deepEqual(e.fields, ['limit', 'follow', 'status', 'wait', 'path']);
    assert.match(e.message, /query parameter limit must be an integer from 1 to 1000/);
    assert.match(e.message, /query parameter path is required/);
  });

  it('refuses a value outside the list, a fraction for an integer, and a huge number', () => {
    for (const [query, read] of [
      [{ status: 'MAYBE' }, (q: ReturnType<typeof queryOf>) => q.oneOf('status', ['PENDING', 'APPROVED'] as const)],
      [{ after: '1.5' }, (q: ReturnType<typeof queryOf>) => q.int('after', { min: 0, max: Number.MAX_SAFE_INTEGER })],
      [{ after: '99999999999999999' }, (q: ReturnType<typeof queryOf>) => q.int('after', { min: 0, max: Number.MAX_SAFE_INTEGER })],
      [{ wait: '1.2345' }, (q: ReturnType<typeof queryOf>) => q.number('wait', { min: 0, max: 60 })],
      [{ workshop: '' }, (q: ReturnType<typeof queryOf>) => q.string('workshop')],
    ] as const) {
      const e = problems(() => {
        const q = queryOf(query);
        read(q);
        q.done();
      });
      assert.equal(e.field, Object.keys(query)[0]);
    }
  });
});
