import { existsSync, lstatSync, readlinkSync } from 'node:fs';

/**
 * The sandbox root is built from this list, never from `/`: whatever is not named here
 * (the server's data dir, /root, /home, /var, /etc/shadow, /etc/ssl/private, package-manager
 * credentials such as /etc/npmrc or /etc/pip.conf, other workshops) does not exist inside.
 */
const READ_ONLY_DIRS = ['/usr', '/opt/java'];

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
  'profile.d',
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

/** bwrap arguments for the curated read-only part of the root. */
export function rootfsArgs(): string[] {
  const args: string[] = [];
  for (const dir of READ_ONLY_DIRS) if (existsSync(dir)) args.push('--ro-bind', dir, dir);
  for (const name of TOP_LEVEL_LINKS) {
    const path = `/${name}`;
    let st;
    try {
      st = lstatSync(path);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) args.push('--symlink', readlinkSync(path), path);
    else if (st.isDirectory()) args.push('--ro-bind', path, path);
  }
  for (const entry of ETC_ENTRIES) {
    const path = `/etc/${entry}`;
    if (existsSync(path)) args.push('--ro-bind', path, path);
  }
  return args;
}

/** Identity files written per workshop and bound read-only over /etc. */
export function identityFiles(opts: { uid: number; gid: number; hostname: string }): Record<string, string> {
  return {
    passwd: `root:x:0:0:root:/root:/usr/sbin/nologin\natelier:x:${opts.uid}:${opts.gid}:Atelier workshop:/home/atelier:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n`,
    group: `root:x:0:\natelier:x:${opts.gid}:\nnogroup:x:65534:\n`,
    hosts: `127.0.0.1\tlocalhost ${opts.hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n`,
    hostname: `${opts.hostname}\n`,
    'resolv.conf': '# no network in this workshop: egress goes through the Atelier proxy\n',
  };
}
