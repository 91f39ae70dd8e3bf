import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import type { AtelierError } from '../core/index.js';
import { simulatorSandboxArgv } from '../sandbox/index.js';
import { startSimulator } from './index.js';
import type { SimulatorSpec } from './types.js';

const RUN_AS = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : undefined;
const base: SimulatorSpec = {
  type: 'redis',
  name: 'cache',
  dir: '/nonexistent/atelier/dir',
  socketDir: '/nonexistent/atelier/sock',
  cacheDir: '/nonexistent/atelier/cache',
  runAs: RUN_AS,
  sandbox: simulatorSandboxArgv,
};

/** Bad input is refused with the field at fault, before anything is created. */
async function refused(spec: Partial<SimulatorSpec> & Record<string, unknown>, field: string, message: RegExp): Promise<void> {
  await assert.rejects(startSimulator({ ...base, ...spec } as SimulatorSpec), (err: AtelierError) => {
    assert.equal(err.code, 'INVALID_ARGUMENT');
    assert.equal(err.details?.field, field);
    assert.match(err.message, message);
    return true;
  });
  assert.equal(existsSync('/nonexistent'), false);
}

describe('simulator spec validation', () => {
  it('refuses an unknown type, naming the known ones', () =>
    refused({ type: 'mysql' as 'redis' }, 'type', /unknown simulator type "mysql": known types are postgres, redis/));

  it('refuses names that are not DNS labels', async () => {
    for (const name of ['', 'Postgres', '1db', 'db_1', 'db.', '-x', 'x-', 'a'.repeat(33), '../x']) {
      await refused({ name }, 'name', /must be a DNS label/);
    }
  });

  it('refuses relative directories', () => refused({ socketDir: 'sock' }, 'socketDir', /absolute path/));

  it('refuses to run as root', () => refused({ runAs: { uid: 0, gid: 0 } }, 'runAs', /unprivileged user/));

  it('refuses a version that is not a version number', () =>
    refused({ type: 'postgres', version: '16 or later' }, 'version', /not a version number/));

  it('refuses unknown options', () =>
    refused(
      { type: 'postgres', options: { locale: 'fr_FR' } },
      'options.locale',
      /unknown option locale \(known: database, user, password, superuser\)/,
    ));

  it('refuses a socket path longer than a unix socket allows', () =>
    refused({ socketDir: `/${'s'.repeat(100)}` }, 'socketDir', /longer than the 107 bytes/));
});
