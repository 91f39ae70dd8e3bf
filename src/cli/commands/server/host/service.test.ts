import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { hostLayout } from './layout.js';
import { unitText } from './service.js';

const run = promisify(execFile);

describe('the systemd unit', () => {
  it('passes `systemd-analyze verify` (systemd is installed on the test machines: a missing tool fails here)', async (t) => {
    const prefix = mkdtempSync('/tmp/atelier-unit-');
    t.after(() => rmSync(prefix, { recursive: true, force: true }));
    const layout = hostLayout(prefix);
    // What ExecStart names must exist and be executable for verify to pass.
    mkdirSync(join(layout.releases, '1.0.0/node/bin'), { recursive: true });
    mkdirSync(join(layout.releases, '1.0.0/bin'), { recursive: true });
    symlinkSync(process.execPath, join(layout.releases, '1.0.0/node/bin/node'));
    writeFileSync(join(layout.releases, '1.0.0/bin/atelier.mjs'), '');
    symlinkSync('releases/1.0.0', layout.current);
    mkdirSync(layout.configDir, { recursive: true });
    writeFileSync(layout.envFile, 'ATELIER_LISTEN=127.0.0.1:7878\n');
    const unit = join(prefix, 'atelier.service');
    const text = unitText(layout);
    writeFileSync(unit, text);
    assert.match(text, /^KillMode=process$/m, 'stopping the service leaves the workshops running');
    assert.match(text, new RegExp(`^EnvironmentFile=${layout.envFile}$`, 'm'));
    const r = await run('systemd-analyze', ['verify', unit]).catch((err: Error & { stdout?: string; stderr?: string }) => ({
      stdout: err.stdout ?? '',
      stderr: `${err.message}\n${err.stderr ?? ''}`,
    }));
    // verify prints nothing for a clean unit (warnings about this machine not running systemd aside).
    const problems = r.stderr.split('\n').filter((l) => l.includes('atelier.service'));
    assert.deepEqual(problems, [], r.stderr);
  });
});
