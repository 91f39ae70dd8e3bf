import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/**
 * TCP sockets in LISTEN state held by any of `pids` (matched by the socket inodes of their fds
 * against /proc/PID/net/tcp{,6}), as `pid P: tcp ADDRESS` lines; [] when none listens on TCP.
 */
export function tcpListeners(pids: number[]): string[] {
  const found: string[] = [];
  for (const p of pids) {
    const listening = new Map<string, string>();
    for (const file of ['tcp', 'tcp6']) {
      let text = '';
      try {
        text = readFileSync(`/proc/${p}/net/${file}`, 'utf8');
      } catch {
        continue; // exited meanwhile
      }
      for (const line of text.split('\n').slice(1)) {
        const f = line.trim().split(/\s+/);
        if (f[3] === '0A') listening.set(f[9]!, `${file} ${f[1]}`);
      }
    }
    let fds: string[] = [];
    try {
      fds = readdirSync(`/proc/${p}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target = '';
      try {
        target = readlinkSync(`/proc/${p}/fd/${fd}`);
      } catch {
        continue;
      }
      const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
      if (inode && listening.has(inode)) found.push(`pid ${p}: ${listening.get(inode)}`);
    }
  }
  return found;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}
