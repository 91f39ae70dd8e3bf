import { existsSync } from 'node:fs';
import { z } from 'zod';
import { AtelierError } from '../../core/index.js';
import type { ActionSpec, Precondition } from '../types.js';

type Installer = 'apt' | 'dnf' | 'apk' | 'pacman' | 'zypper' | 'brew';

/** Where each package manager lives; the first one present is this machine's. Only looked for, never run. */
const INSTALLERS: { name: Installer; paths: string[] }[] = [
  { name: 'apt', paths: ['/usr/bin/apt-get'] },
  { name: 'dnf', paths: ['/usr/bin/dnf'] },
  { name: 'apk', paths: ['/sbin/apk', '/usr/bin/apk'] },
  { name: 'pacman', paths: ['/usr/bin/pacman'] },
  { name: 'zypper', paths: ['/usr/bin/zypper'] },
  { name: 'brew', paths: ['/opt/homebrew/bin/brew', '/usr/local/bin/brew', '/home/linuxbrew/.linuxbrew/bin/brew'] },
];

/** Optional system components and their package per installer (absent: not packaged there). */
export const COMPONENTS: Record<string, { description: string; packages: Partial<Record<Installer, string>> }> = {
  gvisor: {
    description: "gVisor's runsc, a stronger sandbox runtime",
    packages: { apt: 'runsc' },
  },
  java: {
    description: 'Java 17, for the WireMock simulator',
    packages: {
      apt: 'openjdk-17-jre-headless',
      dnf: 'java-17-openjdk-headless',
      apk: 'openjdk17-jre-headless',
      pacman: 'jre17-openjdk-headless',
      zypper: 'java-17-openjdk-headless',
      brew: 'openjdk@17',
    },
  },
  chromium: {
    description: "Chromium, for the dashboard's browser tests",
    packages: { apt: 'chromium', dnf: 'chromium', apk: 'chromium', pacman: 'chromium', zypper: 'chromium', brew: 'chromium' },
  },
  'redis-server': {
    description: 'redis-server, for the redis simulator',
    packages: { apt: 'redis-server', dnf: 'redis', apk: 'redis', pacman: 'redis', zypper: 'redis', brew: 'redis' },
  },
  postgresql: {
    description: 'PostgreSQL server binaries, for the postgres simulator and the embedded database',
    packages: {
      apt: 'postgresql',
      dnf: 'postgresql-server',
      apk: 'postgresql',
      pacman: 'postgresql',
      zypper: 'postgresql-server',
      brew: 'postgresql@15',
    },
  },
};

const Params = z.strictObject({
  component: z.enum(Object.keys(COMPONENTS) as [string, ...string[]]),
});

function installer(): { name: Installer; path: string } | undefined {
  for (const i of INSTALLERS) for (const p of i.paths) if (existsSync(p)) return { name: i.name, path: p };
  return undefined;
}

function argvFor(name: Installer, pkg: string, isRoot: boolean): string[] {
  const sudo = isRoot || name === 'brew' ? [] : ['sudo'];
  switch (name) {
    case 'apt':
      return [...sudo, 'apt-get', 'install', '-y', '--no-install-recommends', pkg];
    case 'dnf':
      return [...sudo, 'dnf', 'install', '-y', pkg];
    case 'apk':
      return [...sudo, 'apk', 'add', pkg];
    case 'pacman':
      return [...sudo, 'pacman', '-S', '--needed', pkg];
    case 'zypper':
      return [...sudo, 'zypper', 'install', '-y', pkg];
    case 'brew':
      return ['brew', 'install', pkg];
  }
}

/** A shell-safe rendering of an argv for copying. */
function shellLine(argv: string[]): string {
  return argv.map((a) => (/^[A-Za-z0-9@%+=:,./_-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/**
 * `extras.install-command` (class C): the exact command that installs an optional component on
 * this machine, to copy. Nothing is executed, now or later: there is no apply, and the network
 * download is the user's own gesture.
 */
export const extrasInstallCommand: ActionSpec<z.infer<typeof Params>> = {
  id: 'extras.install-command',
  class: 'C',
  title: 'print the command that installs an optional system component (never run)',
  parameters: Params,
  parameterHelp: [{ name: 'component', type: Object.keys(COMPONENTS).join('|'), required: true, description: 'the component to install' }],
  effectKinds: ['command'],
  inverseDescription: 'none: nothing is executed, so there is nothing to undo (uninstall with the same package manager)',

  preconditions(_env, params): Precondition[] {
    const i = installer();
    const list: Precondition[] = [
      {
        name: 'package manager known',
        ok: i !== undefined,
        reason: i ? `${i.name} (${i.path})` : `none of ${INSTALLERS.map((x) => x.name).join(', ')} was found on this machine`,
      },
    ];
    if (params && i) {
      const pkg = COMPONENTS[params.component]?.packages[i.name];
      list.push({
        name: 'packaged for it',
        ok: pkg !== undefined,
        reason: pkg ? `${i.name} package ${pkg}` : `${params.component} has no ${i.name} package: see its project's install guide`,
      });
    }
    return list;
  },

  inputs() {
    return {};
  },

  plan(env, params) {
    const failed = this.preconditions(env, params).filter((p) => !p.ok);
    if (failed.length > 0 || !installer())
      throw new AtelierError(
        'PRECONDITION_FAILED',
        `no install command for ${params.component}: ${failed.map((p) => p.reason).join('; ')}`,
        { preconditions: failed },
      );
    const i = installer()!;
    const argv = argvFor(i.name, COMPONENTS[params.component]!.packages[i.name]!, env.isRoot);
    const copy = shellLine(argv);
    return {
      effects: [{ kind: 'command', argv, copy, network: true, runsHere: false }],
      inputs: {},
      inverse: { kind: 'none', reason: 'nothing is executed' },
      data: {},
      summary: `run yourself: ${copy}`,
    };
  },
};
