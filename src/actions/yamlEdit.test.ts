import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parse } from 'yaml';
import type { AtelierError } from '../core/index.js';
import { setKey } from './yamlEdit.js';

// A file with everything a hand-written atelier.yaml may hold: comments (own-line and trailing),
// blank lines, anchors and aliases, flow and block collections, quoted scalars.
const FIXTURE = `# Project settings, written by hand.
name: "demo"   # trailing comment

defaults: &defaults {retries: 3, timeout: 30}   # an anchor in flow style

egress:
  # the list of hosts
  allow: [api.stripe.com, "*.example.com"]   # flow, kept in flow
  deny:
    - uploads.example.com   # block, kept in block

  askHoldSeconds: 30


service: *defaults
matrix: {a: [1, 2], b: 'x'}
simulators:
  - name: redis   # the cache
slots:
tail: |
  literal text
  kept as is
`;

interface Case {
  name: string;
  text: string;
  path: string[];
  value: unknown;
  expected?: string;
}

const CASES: Case[] = [
  {
    name: 'adds to a flow list, in flow style',
    text: FIXTURE,
    path: ['egress', 'allow'],
    value: ['api.stripe.com', '*.example.com', 'api.example.com:8443'],
  },
  { name: 'removes from a flow list', text: FIXTURE, path: ['egress', 'allow'], value: ['*.example.com'] },
  { name: 'replaces a block list, in block style', text: FIXTURE, path: ['egress', 'deny'], value: ['a.example.com', 'b.example.com'] },
  { name: 'empties a block list', text: FIXTURE, path: ['egress', 'deny'], value: [] },
  {
    name: 'replaces a block list of mappings',
    text: FIXTURE,
    path: ['simulators'],
    value: [
      { name: 'postgres', version: '16-alpine', env: { POSTGRES_DB: 'testdb' } },
      { name: 'wiremock', stubsDirectory: './tests/mocks' },
    ],
  },
  { name: 'fills an empty key', text: FIXTURE, path: ['slots'], value: ['shared-pg'] },
  { name: 'adds a missing nested key at the end of its mapping', text: FIXTURE, path: ['egress', 'extra'], value: ['x'] },
  { name: 'adds a missing top-level key at the end of the file', text: FIXTURE, path: ['newkey'], value: ['x'] },
  {
    name: 'writes into an empty file',
    text: '',
    path: ['egress', 'allow'],
    value: ['a.com'],
    expected: 'egress:\n  allow:\n    - a.com\n',
  },
  {
    name: 'writes after comments only',
    text: '# nothing yet\n',
    path: ['slots'],
    value: ['s1'],
    expected: '# nothing yet\nslots:\n  - s1\n',
  },
  {
    name: 'keeps CRLF line endings',
    text: 'egress:\r\n  deny:\r\n    - a.com\r\nx: 1\r\n',
    path: ['egress', 'deny'],
    value: ['b.com'],
    expected: 'egress:\r\n  deny:\r\n    - b.com\r\nx: 1\r\n',
  },
  {
    name: 'a file without a final newline',
    text: 'egress:\n  allow:\n  - a\n  - b',
    path: ['egress', 'allow'],
    value: ['a'],
    expected: 'egress:\n  allow:\n  - a',
  },
];

describe('byte-preserving key edits of atelier.yaml', () => {
  for (const c of CASES) {
    it(c.name, () => {
      const { text, splice } = setKey(c.text, c.path, c.value, 'atelier.yaml');
      // Everything outside the edited value is byte-identical: the same prefix and the same suffix.
      assert.equal(text.slice(0, splice.start), c.text.slice(0, splice.start));
      assert.equal(text.slice(splice.start + splice.insert.length), c.text.slice(splice.end));
      // The edit is confined to the key's own lines.
      const before = c.text.slice(splice.start, splice.end);
      for (const untouched of ['# Project settings', '# trailing comment', '&defaults', '*defaults', "{a: [1, 2], b: 'x'}", 'literal text'])
        if (c.text.includes(untouched) && !before.includes(untouched)) assert.ok(text.includes(untouched), untouched);
      // The new file reads as the old one with only that key changed.
      const old = (parse(c.text) ?? {}) as Record<string, unknown>;
      const now = parse(text) as Record<string, unknown>;
      let cur: Record<string, unknown> = old;
      for (const k of c.path.slice(0, -1)) cur = (cur[k] ??= {}) as Record<string, unknown>;
      cur[c.path[c.path.length - 1]!] = c.value;
      assert.deepEqual(now, old);
      if (c.expected !== undefined) assert.equal(text, c.expected);
    });
  }

  it('keeps flow style, anchors, blank lines and comments of the fixture exactly', () => {
    const { text } = setKey(FIXTURE, ['egress', 'allow'], ['api.stripe.com'], 'atelier.yaml');
    assert.equal(text, FIXTURE.replace('[api.stripe.com, "*.example.com"]', '[api.stripe.com]'));
    const { text: t2 } = setKey(FIXTURE, ['egress', 'deny'], ['a.example.com'], 'atelier.yaml');
    assert.equal(t2, FIXTURE.replace('    - uploads.example.com   # block, kept in block\n', '    - a.example.com\n'));
  });

  it('keeps the lines and comments of the list items that stay', () => {
    const text = [
      'egress:',
      '  allow:',
      '    - api.github.com   # the agent pushes here',
      '    # registry mirrors below',
      '    - registry.npmjs.org',
      '    - pypi.org # python',
      'x: 1',
      '',
    ].join('\n');
    const added = setKey(text, ['egress', 'allow'], ['api.github.com', 'registry.npmjs.org', 'pypi.org', 'crates.io'], 'atelier.yaml');
    assert.equal(added.text, text.replace('    - pypi.org # python\n', '    - pypi.org # python\n    - crates.io\n'));
    const removed = setKey(text, ['egress', 'allow'], ['api.github.com', 'pypi.org'], 'atelier.yaml');
    assert.equal(removed.text, text.replace('    # registry mirrors below\n    - registry.npmjs.org\n', ''));
    const between = setKey(text, ['egress', 'allow'], ['api.github.com', 'example.com', 'pypi.org'], 'atelier.yaml');
    assert.equal(between.text, text.replace('    # registry mirrors below\n    - registry.npmjs.org\n', '    - example.com\n'));
    // The blank line and the comment after the list stay after it (the cockpit's own file).
    const spaced = 'egress:\n  allow:\n    - api.stripe.com   # payments\n\n# kept as it is\nslots: []\n';
    assert.equal(
      setKey(spaced, ['egress', 'allow'], ['api.stripe.com', 'api.example.com'], 'atelier.yaml').text,
      spaced.replace('# payments\n', '# payments\n    - api.example.com\n'),
    );
    // A list with a mapping in it is rewritten whole, as before.
    const mixed = 'allow:\n  - a.com # kept?\n  - {host: b.com}\n';
    assert.equal(setKey(mixed, ['allow'], ['a.com'], 'atelier.yaml').text, 'allow:\n  - a.com\n');
  });

  it('refuses to edit through an alias or an anchored value, and invalid YAML', () => {
    const refused = (text: string, path: string[], re: RegExp): void => {
      assert.throws(
        () => setKey(text, path, ['x'], 'atelier.yaml'),
        (err: AtelierError) => err.code === 'PRECONDITION_FAILED' && re.test(err.message),
      );
    };
    refused('base: &b [a]\nslots: *b\n', ['slots'], /alias/);
    refused('slots: &b [a]\nother: *b\n', ['slots'], /anchor/);
    refused('egress: [unclosed\n', ['egress', 'allow'], /not valid YAML/);
    refused('a: 1\na: 2\n', ['slots'], /not valid YAML/);
    refused('- a\n- b\n', ['slots'], /mapping/);
  });
});
