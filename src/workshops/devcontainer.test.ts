import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readDevcontainer } from './devcontainer.js';

/** Every workspace made here, removed when the file's tests end. */
const made: string[] = [];
after(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

function workspace(files: Record<string, string>): string {
  const dir = mkdtempSync('/tmp/atelier-dc-');
  made.push(dir);
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), content);
  }
  return dir;
}

describe('devcontainer.json', () => {
  it('takes env, lifecycle commands and ports; warns about the rest', () => {
    const ws = workspace({
      '.devcontainer/devcontainer.json': `{
        // a comment
        "build": { "dockerfile": "Dockerfile" },
        "features": {},
        "containerEnv": { "A": "1" },
        "remoteEnv": { "B": "\${containerEnv:A}-2", "C": "\${localEnv:HOME}" },
        "onCreateCommand": "make setup",
        "postCreateCommand": { "deps": ["npm", "ci"], "db": "make db" },
        "forwardPorts": [3000, "web:8080"],
      }`,
    });
    const d = readDevcontainer(ws, undefined);
    assert.deepEqual(d.env, { A: '1', B: '1-2', C: '' });
    assert.deepEqual(d.createCommands, [
      { key: 'onCreateCommand', command: ['/bin/sh', '-c', 'make setup'] },
      { key: 'postCreateCommand.deps', command: ['npm', 'ci'] },
      { key: 'postCreateCommand.db', command: ['/bin/sh', '-c', 'make db'] },
    ]);
    assert.deepEqual(d.forwardPorts, [3000, 8080]);
    assert.ok(d.warnings.some((w) => w.includes('"build"')));
    assert.ok(d.warnings.some((w) => w.includes('"features"')));
    assert.ok(
      d.warnings.some((w) => w.includes('localEnv')),
      'the server environment never leaks in',
    );
  });

  it('is optional, but an explicit path must exist and stay inside the repository', () => {
    const ws = workspace({ 'README.md': 'x' });
    assert.equal(readDevcontainer(ws, undefined).path, null);
    assert.throws(() => readDevcontainer(ws, 'nope.json'), /does not exist/);
    assert.throws(() => readDevcontainer(ws, '../../etc/passwd'), /inside the repository/);
    symlinkSync('/etc/passwd', join(ws, 'link.json'));
    assert.throws(() => readDevcontainer(ws, 'link.json'), /outside the repository/);
  });

  it('rejects malformed files without echoing their content', () => {
    const ws = workspace({ 'bad.json': '{ "secret": "hunter2", ' });
    assert.throws(
      () => readDevcontainer(ws, 'bad.json'),
      (err: Error) => /not valid JSON/.test(err.message) && !err.message.includes('hunter2'),
    );
    const ws2 = workspace({ 'd.json': '{ "forwardPorts": [70000] }' });
    assert.throws(() => readDevcontainer(ws2, 'd.json'), /not a port/);
    const ws3 = workspace({ 'd.json': '{ "containerEnv": { "BAD-NAME": "x" } }' });
    assert.throws(() => readDevcontainer(ws3, 'd.json'), /valid variable name/);
  });
});
