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

/** Fields of /proc/PID/stat after the command name: [state, ppid, pgrp, …]; undefined once gone. */
function statFields(pid: string): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** Live (not zombie) processes for which `keep(pid)` holds. */
function liveProcesses(keep: (pid: string, fields: string[]) => boolean): number[] {
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const f = statFields(e);
    if (f && f[0] !== 'Z' && keep(e, f)) out.push(Number(e));
  }
  return out;
}

/** `pid` and its live children (PostgreSQL's workers are children of the postmaster). */
export function withChildren(pid: number): number[] {
  return liveProcesses((e, f) => Number(e) === pid || f[1] === String(pid));
}

/** Every live process of the process group led by `pid` (a server run under bubblewrap is a child of it). */
export function processGroup(pid: number): number[] {
  return liveProcesses((_e, f) => f[2] === String(pid));
}

/** The real uid of a process, or undefined once it has exited. */
export function uidOf(pid: number): number | undefined {
  try {
    return Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
  } catch {
    return undefined;
  }
}

/** Processes (other than this one) whose command line mentions `text`, of `uid` only when given. */
export function processesMentioning(text: string, uid?: number): number[] {
  return liveProcesses((e) => {
    if (Number(e) === process.pid) return false;
    try {
      if (!readFileSync(`/proc/${e}/cmdline`, 'utf8').includes(text)) return false;
    } catch {
      return false;
    }
    return uid === undefined || uidOf(Number(e)) === uid;
  });
}
