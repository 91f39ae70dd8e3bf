import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { privilegedEnv, sandboxArgv, type ExecSpec } from './launcher.js';

// The workshop's variables (its agent token, granted secrets) reach the sandbox in the
// environment of the privileged chain, never on a command line: every host user can read any
// process's /proc/PID/cmdline. After the privilege drop they become exactly the program's
// environment, whatever their values hold.
describe('environment handover to a sandbox', () => {
  const handle = { pid: 1, startTime: '0', uid: 600001, cgroups: null };
  const secret = 'atl_s3cr3t "$(id)" `uname` \\ \n; rm -rf / #';
  const spec: ExecSpec = {
    command: ['/usr/bin/env'],
    cwd: '/workspace',
    env: { PATH: '/usr/bin:/bin', ATELIER_TOKEN: secret, EMPTY: '', 'odd-name': 'visible' },
  };

  it('puts no value on the command line, and only prefixed names in the privileged environment', () => {
    const argv = sandboxArgv(handle, spec);
    assert.ok(!argv.some((a) => a.includes('s3cr3t')), `a value is on the command line: ${JSON.stringify(argv)}`);
    const env = privilegedEnv(spec);
    assert.deepEqual(Object.keys(env).sort(), ['LANG', 'PATH', '__ATELIER_ENV_ATELIER_TOKEN', '__ATELIER_ENV_EMPTY', '__ATELIER_ENV_PATH']);
    assert.equal(env.__ATELIER_ENV_ATELIER_TOKEN, secret);
  });

  it('gives the program exactly the workshop environment, values intact', () => {
    const argv = sandboxArgv(handle, spec);
    // The part that runs after the privilege drop, run here as it is (the last shell: the first
    // is the wrapper that sets the OOM score and joins the cgroups, before nsenter).
    const tail = argv.slice(argv.lastIndexOf('/bin/sh'));
    const r = spawnSync(tail[0]!, tail.slice(1), { env: privilegedEnv(spec), cwd: '/' });
    assert.equal(r.status, 0, r.stderr.toString());
    const out = r.stdout.toString();
    assert.ok(out.includes(`ATELIER_TOKEN=${secret}\n`), out);
    assert.match(out, /^EMPTY=$/m);
    assert.match(out, /^odd-name=visible$/m);
    assert.doesNotMatch(out, /__ATELIER_ENV_|^LANG=/m);
    assert.match(out, /^PATH=\/usr\/bin:\/bin$/m);
  });
});
