import { existsSync, lstatSync, readdirSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { SECCOMP_EXEC } from './seccomp.js';

/**
 * The sandbox root is built from this list, never from `/`: whatever is not named here
 * (the server's data dir, /root, /home, /var, /etc/shadow, /etc/ssl/private, package-manager
 * credentials such as /etc/npmrc or /etc/pip.conf, other workshops) does not exist inside.
 */
const READ_ONLY_DIRS = ['/usr', '/opt/java'];

/**
 * Host directories under those that a workshop is not given: /usr/local holds what the host's
 * administrator installed by hand (the `atelier` link into a checkout, other tools, their
 * configuration), none of it part of the system a workshop is built from. Each is replaced by an
 * empty, read-only directory. Toolchains a workshop needs come from the distribution's packages
 * (/usr) or from the repository's devcontainer.
 */
export const HIDDEN_DIRS = ['/usr/local'];

// Entries of /etc that toolchains read and that hold no secret.
const ETC_ENTRIES = [
  'alternatives',
  'bash.bashrc',
  'ca-certificates',
  'ca-certificates.conf',
  'debian_version',
  'environment',
  'fonts',
  'gai.conf',
  'gitconfig',
  'host.conf',
  'inputrc',
  'java-17-openjdk',
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'localtime',
  'magic',
  'magic.mime',
  'mime.types',
  'nsswitch.conf',
  'os-release',
  'perl',
  'profile',
  'protocols',
  'python3',
  'python3.11',
  'services',
  'ssl/certs',
  'ssl/openssl.cnf',
  'terminfo',
  'timezone',
  'vim',
  'xdg',
];

// Top-level names that merged-/usr systems make symlinks (bin -> usr/bin) and others keep as dirs.
const TOP_LEVEL_LINKS = ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32'];

/** One step of building a sandbox root, in order; both launchers (bwrap, unshare) follow the same plan. */
export type MountStep =
  | { kind: 'ro' | 'rw'; src: string; dest: string }
  | { kind: 'link'; target: string; dest: string }
  | { kind: 'dir' | 'tmpfs' | 'empty' | 'proc' | 'dev'; dest: string };

/** The whole root of a workshop: curated read-only system, identity files, and its own writable dirs. */
export function mountPlan(own: { workspace: string; tmp: string; home: string; etc: string; run: string; loader: string }): MountStep[] {
  const plan: MountStep[] = [
    { kind: 'dir', dest: '/etc' },
    { kind: 'dir', dest: '/home' },
  ];
  for (const dir of READ_ONLY_DIRS) if (existsSync(dir)) plan.push({ kind: 'ro', src: dir, dest: dir });
  for (const dir of HIDDEN_DIRS) if (existsSync(dir)) plan.push({ kind: 'empty', dest: dir });
  for (const name of TOP_LEVEL_LINKS) {
    const path = `/${name}`;
    let st;
    try {
      st = lstatSync(path);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) plan.push({ kind: 'link', target: readlinkSync(path), dest: path });
    else if (st.isDirectory()) plan.push({ kind: 'ro', src: path, dest: path });
  }
  const parents = new Set<string>();
  for (const entry of ETC_ENTRIES) {
    const path = `/etc/${entry}`;
    // A parent bwrap would create for a nested entry (/etc/ssl for ssl/certs) is made 0755 first,
    // else it is 0700 root and the workshop user cannot reach the entry (OpenSSL's config, CAs).
    const parent = path.slice(0, path.lastIndexOf('/'));
    if (parent !== '/etc' && !parents.has(parent) && existsSync(path)) {
      parents.add(parent);
      plan.push({ kind: 'dir', dest: parent });
    }
    if (existsSync(path)) plan.push({ kind: 'ro', src: path, dest: path });
  }
  const bundle = join(own.etc, TRUST_BUNDLE);
  if (existsSync(HOST_TRUST_BUNDLE) && existsSync(bundle)) plan.push({ kind: 'ro', src: bundle, dest: HOST_TRUST_BUNDLE });
  // /etc/profile.d: the host's snippets, then Atelier's own, last (see LOGIN_PROFILE).
  plan.push({ kind: 'dir', dest: '/etc/profile.d' });
  const snippets = existsSync('/etc/profile.d') ? readdirSync('/etc/profile.d').sort() : [];
  for (const name of snippets)
    if (name !== LOGIN_PROFILE_NAME) plan.push({ kind: 'ro', src: `/etc/profile.d/${name}`, dest: `/etc/profile.d/${name}` });
  plan.push({ kind: 'ro', src: join(own.etc, LOGIN_PROFILE_NAME), dest: `/etc/profile.d/${LOGIN_PROFILE_NAME}` });
  for (const name of IDENTITY_FILES) {
    // /etc/hosts follows the workshop's internal names (simulators added live): it is a link into
    // /run/atelier, a directory the server rewrites by atomic rename (a bound file could not be).
    if (name === 'hosts') plan.push({ kind: 'link', target: '/run/atelier/hosts', dest: '/etc/hosts' });
    else plan.push({ kind: 'ro', src: join(own.etc, name), dest: `/etc/${name}` });
  }
  plan.push(
    { kind: 'proc', dest: '/proc' },
    { kind: 'dev', dest: '/dev' },
    { kind: 'rw', src: own.workspace, dest: '/workspace' },
    { kind: 'rw', src: own.tmp, dest: '/tmp' },
    { kind: 'rw', src: own.home, dest: '/home/atelier' },
    { kind: 'tmpfs', dest: '/run' },
    // Written by the server only: hosts, simulators.json (connection details of the workshop's services).
    { kind: 'ro', src: own.run, dest: '/run/atelier' },
    // The system-call filter's loader, run on every entry (seccomp.ts): a copy on the workshop's
    // own filesystem, so that mountinfo names no host path for it.
    { kind: 'ro', src: own.loader, dest: SECCOMP_EXEC },
    { kind: 'dir', dest: '/var' },
    { kind: 'link', target: '../tmp', dest: '/var/tmp' },
  );
  return plan;
}

export const IDENTITY_FILES = ['passwd', 'group', 'hosts', 'hostname', 'resolv.conf'] as const;

/** The system's CA bundle (Debian), where OpenSSL, curl, git and python look by default. */
export const HOST_TRUST_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';
/** The workshop's own copy of it in its etc directory (prepareLayout), bound over HOST_TRUST_BUNDLE. */
export const TRUST_BUNDLE = 'ca-certificates.crt';
/** The directory of a workshop's run directory (/run/atelier inside) whose `*.sh` its login shells source. */
export const LOGIN_PROFILE_SUBDIR = 'profile.d';
const LOGIN_PROFILE_DIR = `/run/atelier/${LOGIN_PROFILE_SUBDIR}`;

/** Atelier's snippet in /etc/profile.d (`zz-`: sourced after the host's, which may set PATH too). */
export const LOGIN_PROFILE_NAME = 'zz-atelier.sh';

/**
 * A login shell (`bash -l`, `atelier ssh`, a terminal, an agent session) resets PATH in Debian's
 * /etc/profile, and so loses what the server put first on the PATH of execs (the AWS CLI
 * wrapper). This snippet sources the server-written ones of LOGIN_PROFILE_DIR, read-only inside,
 * so that login shells get the same; it is the same for every workshop.
 */
export const LOGIN_PROFILE = `# Written by Atelier: what the server gives execs and login shells lose (docs/workshops.md).
for __atelier_snippet in ${LOGIN_PROFILE_DIR}/*.sh; do
  if [ -r "$__atelier_snippet" ]; then . "$__atelier_snippet"; fi
done
unset __atelier_snippet
`;

/** A workshop's /etc/hosts: itself, then its internal services (`127.x.y.z  postgres.atelier.internal`). */
export function hostsFile(hostname: string, entries: ReadonlyArray<{ address: string; name: string }> = []): string {
  let text = `127.0.0.1\tlocalhost ${hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n`;
  for (const e of entries) text += `${e.address}\t${e.name}\n`;
  return text;
}

/** Identity files written per workshop and bound read-only over /etc. */
export function identityFiles(opts: { uid: number; gid: number; hostname: string }): Record<(typeof IDENTITY_FILES)[number], string> {
  // Rootless workshops run as uid 0 of their own user namespace (no capabilities): that is the workshop user.
  const passwd =
    opts.uid === 0
      ? 'root:x:0:0:Atelier workshop:/home/atelier:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n'
      : `root:x:0:0:root:/root:/usr/sbin/nologin\natelier:x:${opts.uid}:${opts.gid}:Atelier workshop:/home/atelier:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n`;
  const group = opts.gid === 0 ? 'root:x:0:\nnogroup:x:65534:\n' : `root:x:0:\natelier:x:${opts.gid}:\nnogroup:x:65534:\n`;
  return {
    passwd,
    group,
    hosts: hostsFile(opts.hostname),
    hostname: `${opts.hostname}\n`,
    'resolv.conf': '# no network in this workshop: egress goes through the Atelier proxy\n',
  };
}
