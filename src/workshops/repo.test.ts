import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { resolveRepoSource } from './repo.js';

describe('repository sources', () => {
  const root = mkdtempSync('/tmp/atelier-roots-');
  execFileSync('git', ['init', '-q', root]);
  after(() => rmSync(root, { recursive: true, force: true }));

  it('accepts remote URLs the server can clone', () => {
    for (const url of ['https://github.com/org/repo.git', 'ssh://git@host/org/repo', 'git@github.com:org/repo.git']) {
      assert.equal(resolveRepoSource(url, [root]).kind, 'remote', url);
    }
    assert.equal(
      resolveRepoSource('https://user:secret@host/org/repo', [root]).display,
      'https://host/org/repo',
      'credentials never shown',
    );
  });

  it('accepts local repositories inside the allowed roots only', () => {
    assert.equal(resolveRepoSource(root, [root]).kind, 'local');
    assert.equal(resolveRepoSource(`file://${root}`, [root]).kind, 'local');
    assert.throws(() => resolveRepoSource(root, ['/usr']), /outside the directories/);
    assert.throws(() => resolveRepoSource(`${root}/../${root.split('/').pop()}/..`, [root]), /outside the directories/);
  });

  it('refuses other schemes and option-like values', () => {
    for (const bad of ['http://host/x', 'git://host/x', 'ftp://host/x', 'ext::sh -c evil', '-uevil', 'rel/path', 'a\nb']) {
      assert.throws(() => resolveRepoSource(bad, [root]), /scheme|relative|control character|starts with/, bad);
    }
  });
});
