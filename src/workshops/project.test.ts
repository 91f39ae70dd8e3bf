import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AtelierError } from '../core/index.js';
import { readProjectSettings } from './project.js';

function withProject(yaml: string, fn: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'atelier-project-'));
  try {
    writeFileSync(join(dir, 'atelier.yaml'), yaml);
    fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function refusal(yaml: string): AtelierError {
  let caught: unknown;
  withProject(yaml, (dir) => {
    try {
      readProjectSettings(dir);
    } catch (err) {
      caught = err;
    }
  });
  assert.ok(caught instanceof AtelierError, `expected a refusal of ${JSON.stringify(yaml)}, got ${String(caught)}`);
  return caught;
}

describe('atelier.yaml', () => {
  it('takes `- postgres` as short for `- name: postgres`, beside the long form', () => {
    withProject('simulators:\n  - postgres\n  - type: redis\n    name: cache\n', (dir) => {
      assert.deepEqual(readProjectSettings(dir).simulators, [{ name: 'postgres' }, { type: 'redis', name: 'cache' }]);
    });
  });

  it('takes numbers where YAML reads them (`version: 7`, `POSTGRES_DB: 5432`) as the text written', () => {
    withProject(
      'simulators:\n  - name: redis\n    version: 7\n  - name: postgres\n    env: { POSTGRES_DB: 5432, POSTGRES_USER: true }\n',
      (dir) => {
        assert.deepEqual(readProjectSettings(dir).simulators, [
          { name: 'redis', version: '7' },
          { name: 'postgres', env: { POSTGRES_DB: '5432', POSTGRES_USER: 'true' } },
        ]);
      },
    );
  });

  it('refuses an env name, an option or a field the simulator does not take, naming the key and what it takes', () => {
    const env = refusal('simulators:\n  - redis\n  - name: postgres\n    env: { PGPORT: 5432 }\n');
    assert.equal(
      env.message,
      'atelier.yaml: simulators.1.env.PGPORT: postgres simulator postgres: unknown env PGPORT (known: POSTGRES_DB, POSTGRES_USER, POSTGRES_PASSWORD)',
    );
    assert.equal((env.details as { field?: string }).field, 'simulators.1.env.PGPORT');
    assert.match(refusal('simulators:\n  - name: redis\n    env: { X: 1 }\n').message, /unknown env X \(a redis simulator takes no env\)/);
    assert.match(
      refusal('simulators:\n  - name: postgres\n    options: { superuser: yes }\n').message,
      /simulators\.0\.options\.superuser: .*true or false/,
    );
    assert.match(
      refusal('simulators:\n  - name: redis\n    services: [s3]\n').message,
      /simulators\.0\.services: services applies to localstack/,
    );
    assert.match(
      refusal('simulators:\n  - mongodb\n').message,
      /^atelier\.yaml: simulators\.0: unknown simulator type "mongodb": this server runs /,
    );
  });

  it('names the file, the whole path of the wrong key and what is wrong, once', () => {
    const sims = refusal('simulators:\n  - 42\n');
    assert.equal(sims.code, 'INVALID_ARGUMENT');
    assert.match(sims.message, /^atelier\.yaml: simulators\.0: Invalid input: expected object/);
    assert.equal(sims.message.split('simulators.0').length, 2, `the key is named once: ${sims.message}`);
    assert.deepEqual(sims.details, { field: 'simulators.0' });

    const version = refusal('simulators:\n  - name: postgres\n    version: [15]\n');
    assert.match(version.message, /^atelier\.yaml: simulators\.0\.version: Invalid input/);

    const hold = refusal('egress:\n  askHoldSeconds: -1\n');
    assert.match(hold.message, /^atelier\.yaml: egress\.askHoldSeconds: /);
    assert.deepEqual(hold.details, { field: 'egress.askHoldSeconds' });

    const block = refusal('egress: registry.npmjs.org\n');
    assert.match(block.message, /^atelier\.yaml: egress: Invalid input: expected object/);

    const approvals = refusal('approvals:\n  commands: [""]\n');
    assert.match(approvals.message, /^atelier\.yaml: approvals\.commands\.0: /);
  });

  it('refuses a top-level key it does not know, naming it and the closest known key', () => {
    const typo = refusal('simulatorz:\n  - postgres\n');
    assert.equal(typo.code, 'INVALID_ARGUMENT');
    assert.equal(
      typo.message,
      'atelier.yaml: unknown key "simulatorz" (did you mean simulators?): rename or remove it (the keys Atelier reads are agent, approvals, egress, simulators, slots)',
    );
    assert.equal((typo.details as { field?: string }).field, 'simulatorz');
    assert.match(refusal('Egress:\n  allow: []\n').message, /unknown key "Egress" \(did you mean egress\?\)/);
    assert.match(refusal('aprovals: {}\n').message, /unknown key "aprovals" \(did you mean approvals\?\)/);
    // Nothing close: no guess, the list of known keys only.
    const far = refusal('egress: {}\ndatabase: postgres\n');
    assert.match(far.message, /^atelier\.yaml: unknown key "database": rename or remove it \(the keys Atelier reads are /);
    // Every key Atelier reads is taken.
    withProject('agent: claude\napprovals: {}\negress: {}\nsimulators: []\nslots: []\n', (dir) => {
      assert.equal(readProjectSettings(dir).path, 'atelier.yaml');
    });
  });
});
