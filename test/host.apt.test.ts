import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { cachedRelease, hostTarget, removeHostInstall, runGetSh, serveDir } from './helpers/release.js';

// scripts/get.sh's system-package path through the real dpkg-query and apt-get, from the Debian
// mirror this machine's apt is configured with. ATELIER_APT_PACKAGES (get.sh's documented override
// of its package list) names one package this machine has (socat) and one it lacks: sudo, what
// get.sh itself runs when it is not run as root (one small package with no dependencies to pull
// in, no service), or another small one when sudo is there (MISSING). The test installs it through get.sh and purges it again: the machine is left
// as it was (but for apt's package lists, which get.sh refreshes).

const installed = (p: string): boolean =>
  spawnSync('dpkg-query', ['-W', '-f=${Status}', p], { encoding: 'utf8' }).stdout.includes('install ok installed');
/**
 * The package the test installs and purges: the first of these this machine lacks (sudo, else
 * small tools that depend on libc6 only), so a machine that has sudo, or one where an interrupted
 * run left it installed, still runs the test.
 */
const MISSING = ['sudo', 'tree', 'pv', 'dos2unix'].find((p) => !installed(p)) ?? 'sudo';

describe('get.sh installs what the system lacks with apt (the real dpkg-query and apt-get)', () => {
  let site: Awaited<ReturnType<typeof serveDir>> | undefined;
  let target: Awaited<ReturnType<typeof hostTarget>> | undefined;
  let env: NodeJS.ProcessEnv = {};
  let ours = false;
  const policy = existsSync('/usr/sbin/policy-rc.d');

  before(async () => {
    assert.equal(
      installed(MISSING),
      false,
      `this test needs a machine without ${MISSING} (it installs it through get.sh, then purges it): \`apt-get purge ${MISSING}\` first`,
    );
    ours = true;
    site = await serveDir(cachedRelease('0.0.0-test'));
    target = await hostTarget('apt', site.url);
    // Unpack and check packages only: the install itself is host.install.test.ts's.
    env = { ...target.env, ATELIER_SKIP_INSTALL: '1', ATELIER_APT_PACKAGES: `socat ${MISSING}` };
    delete env.ATELIER_SKIP_APT;
  });

  after(async () => {
    try {
      if (ours && installed(MISSING))
        execFileSync('apt-get', ['-o', 'DPkg::Lock::Timeout=300', 'purge', '-y', '-qq', MISSING], {
          stdio: 'ignore',
          // sudo's own pre-removal script refuses while root has no password, unless told.
          env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive', SUDO_FORCE_REMOVE: 'yes' },
        });
    } finally {
      // Whatever the purge did, the prefix and the release site go (an open site keeps the run alive).
      if (target) await removeHostInstall({ prefix: target.prefix, home: target.home, env: target.env });
      await site?.[Symbol.asyncDispose]();
    }
  });

  it('installs the missing package with apt-get; a second run finds everything and runs no apt', async () => {
    const r = await runGetSh([], env);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, new RegExp(`^atelier: installing: ${MISSING}$`, 'm'), 'only the missing one');
    assert.match(r.stderr, new RegExp(`^atelier: installed: ${MISSING}$`, 'm'));
    assert.match(r.stderr, /system packages present/);
    assert.equal(installed(MISSING), true, 'dpkg says it is installed');
    assert.equal(existsSync(`/usr/bin/${MISSING}`), true, 'its program is there');
    assert.equal(existsSync('/usr/sbin/policy-rc.d'), policy, '/usr/sbin/policy-rc.d as it was (get.sh removes the one it adds)');

    const again = await runGetSh([], env);
    assert.equal(again.code, 0, again.stderr);
    assert.doesNotMatch(again.stderr, /installing:/);
    assert.match(again.stderr, /system packages present/);
  });

  it('a package apt cannot install stops the bootstrap, naming it', async () => {
    const r = await runGetSh([], { ...env, ATELIER_APT_PACKAGES: 'atelier-no-such-package' });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /Unable to locate package atelier-no-such-package/, 'apt-get’s own reason');
    assert.match(r.stderr, /apt-get could not install: atelier-no-such-package \(see above\); fix that and run this again/);
    assert.equal(existsSync('/usr/sbin/policy-rc.d'), policy);
  });

  it('refuses a name that is not a Debian package name, before running apt', async () => {
    const r = await runGetSh([], { ...env, ATELIER_APT_PACKAGES: 'socat $(touch /tmp/x)' });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /'\$\(touch' is not a Debian package name \(ATELIER_APT_PACKAGES\?\)/);
    assert.doesNotMatch(r.stderr, /installing:/);
  });
});
