import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createFakeDocker } from '../../test/helpers/fakeDocker.js';
import { containersOf, selectStackBackend } from './stackBackends.js';

describe('stack backends', () => {
  it('selects the engine that answers `compose version` (a FAKE docker here: no engine on this machine), native by default', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'atelier-backend-'));
    const saved = process.env.PATH;
    t.after(() => {
      process.env.PATH = saved;
      rmSync(dir, { recursive: true, force: true });
    });
    const stacks = join(dir, 'stacks');
    // Without any engine on PATH (only the system directories, where neither docker nor podman is).
    process.env.PATH = '/usr/sbin:/usr/bin:/sbin:/bin';
    assert.equal(selectStackBackend('native', stacks).kind, 'native');
    assert.equal(selectStackBackend('auto', stacks).kind, 'native');
    assert.throws(
      () => selectStackBackend('compose', stacks),
      /ATELIER_STACKS_BACKEND=compose, but `docker compose version` and `podman compose version` failed/,
    );
    assert.throws(() => selectStackBackend('podman', stacks), /set ATELIER_STACKS_BACKEND=native/);
    const fake = createFakeDocker(join(dir, 'bin'));
    process.env.PATH = `${fake.dir}:/usr/sbin:/usr/bin:/sbin:/bin`;
    assert.equal(selectStackBackend('auto', stacks).kind, 'docker');
    assert.equal(selectStackBackend('compose', stacks).kind, 'docker');
    assert.equal(selectStackBackend('native', stacks).kind, 'native', 'native stays native when an engine exists');
    assert.throws(() => selectStackBackend('podman', stacks), /`podman compose version` failed/);
  });

  it('reads both forms of `compose ps --format json` (one array before Compose 2.21, one object per line after)', () => {
    const a = { Service: 'redis', State: 'running' };
    const b = { Service: 'other', State: 'exited' };
    assert.deepEqual(containersOf(JSON.stringify([a, b])), [a, b]);
    assert.deepEqual(containersOf(`${JSON.stringify(a)}\n${JSON.stringify(b)}\n`), [a, b]);
    assert.deepEqual(containersOf(JSON.stringify(a)), [a]);
    assert.deepEqual(containersOf(''), []);
    assert.deepEqual(containersOf('[]'), []);
  });
});
