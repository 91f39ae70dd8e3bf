import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { WorkshopEvents } from './events.js';

describe('workshop lifecycle events', () => {
  const quiet = (): { warnings: object[]; warn(obj: object): void } => {
    const warnings: object[] = [];
    return { warnings, warn: (obj) => void warnings.push(obj) };
  };

  it('awaits each listener in subscription order before emit resolves, and only for its type', async () => {
    const events = new WorkshopEvents(quiet());
    const seen: string[] = [];
    events.on('deleting', async ({ id }) => {
      await new Promise((r) => setTimeout(r, 20));
      seen.push(`first ${id}`);
    });
    events.on('deleting', ({ id }) => void seen.push(`second ${id}`));
    events.on('deleted', ({ id }) => void seen.push(`deleted ${id}`));
    await events.emit({ type: 'deleting', id: 'ws-1' });
    assert.deepEqual(seen, ['first ws-1', 'second ws-1']);
  });

  it('a failing listener is logged and neither fails the emit nor stops the others', async () => {
    const log = quiet();
    const events = new WorkshopEvents(log);
    const seen: string[] = [];
    events.on('stopped', () => {
      throw new Error('boom');
    });
    events.on('stopped', async () => Promise.reject(new Error('rejected')));
    events.on('stopped', ({ id }) => void seen.push(id));
    await events.emit({ type: 'stopped', id: 'ws-2' });
    assert.deepEqual(seen, ['ws-2']);
    assert.equal(log.warnings.length, 2);
    assert.match(JSON.stringify(log.warnings[0]), /boom.*ws-2.*stopped/);
  });

  it('an unsubscribed listener hears nothing more', async () => {
    const events = new WorkshopEvents(quiet());
    let n = 0;
    const off = events.on('deleted', () => void n++);
    await events.emit({ type: 'deleted', id: 'ws-3' });
    off();
    await events.emit({ type: 'deleted', id: 'ws-3' });
    assert.equal(n, 1);
  });
});
