import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeFileAtomic } from './files.js';

describe('writeFileAtomic', () => {
  it('writes the exact mode whatever the umask, durable or not, and leaves no temporary file', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'atomic-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const old = process.umask(0o077);
    try {
      writeFileAtomic(join(dir, 'a'), 'one', 0o644);
      writeFileAtomic(join(dir, 'b'), 'two', 0o640, { durable: true });
    } finally {
      process.umask(old);
    }
    assert.equal(statSync(join(dir, 'a')).mode & 0o777, 0o644);
    assert.equal(statSync(join(dir, 'b')).mode & 0o777, 0o640);
    writeFileAtomic(join(dir, 'a'), 'three', 0o600, { durable: true });
    assert.equal(readFileSync(join(dir, 'a'), 'utf8'), 'three');
    assert.equal(statSync(join(dir, 'a')).mode & 0o777, 0o600);
    assert.deepEqual(readdirSync(dir).sort(), ['a', 'b']);
  });

  it('a failed rename keeps the old content and removes its temporary file', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'atomic-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(join(dir, 'target'));
    writeFileSync(join(dir, 'target', 'keep'), 'x');
    assert.throws(() => writeFileAtomic(join(dir, 'target'), 'new', 0o644), /EISDIR|ENOTEMPTY|EEXIST/);
    assert.deepEqual(readdirSync(dir), ['target']);
    assert.equal(readFileSync(join(dir, 'target', 'keep'), 'utf8'), 'x');
  });

  it('replaces a link at the path by a file, and never writes through it', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'atomic-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'outside'), 'untouched');
    symlinkSync(join(dir, 'outside'), join(dir, 'link'));
    writeFileAtomic(join(dir, 'link'), 'mine', 0o600);
    assert.equal(readFileSync(join(dir, 'outside'), 'utf8'), 'untouched');
    assert.equal(readFileSync(join(dir, 'link'), 'utf8'), 'mine');
  });
});
