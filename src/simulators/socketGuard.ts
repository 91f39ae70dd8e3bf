import { chmodSync, chownSync, lstatSync } from 'node:fs';
import { AtelierError } from '../core/index.js';
import type { RunAs } from './types.js';

/**
 * Guards for the unix sockets the server dials on a simulator's behalf (the workshop's relay,
 * the server's own admin connections).
 *
 * A simulator is as untrusted as the agent (a PostgreSQL superuser runs programs with COPY …
 * TO PROGRAM). Its socket directory is bound writable in its sandbox so that it can create its
 * sockets; left so, it could replace a socket with a symlink, and the server (root, in the host
 * mount namespace) would connect through it: to /var/run/docker.sock, the server's own
 * database, another workshop's simulator.
 *
 * Two layers:
 * - root mode: once the simulator answers, its socket directories are made root's, 0700
 *   (lockSocketDirs): the simulator keeps its listening sockets (accepting needs no access to
 *   the directory) but can no longer create, rename or remove anything there, and no other host
 *   user can traverse them (the server, root, dials them). They are given back to the
 *   simulator's uid only just before it (re)starts (prepareSocketDir, a catalog entry's own
 *   prepare/refresh), and locked again once it is ready. PostgreSQL only touches
 *   (utime) its socket lock file afterwards, ignoring failures, and never creates files there
 *   after start; at shutdown it cannot unlink its socket and lock file, which the next start
 *   removes (prepareSocketDir).
 * - before every connect: the path must be a socket itself, not a link nor anything else
 *   (assertSocket). Defence in depth in root mode; in rootless mode (the simulator runs as the
 *   server's own uid, so its directory cannot be taken from it) this is the only protection, and
 *   it leaves a race: a link swapped in between the check and the connect is followed. A
 *   rootless server runs as an ordinary user, so what such a link reaches is only what that user
 *   could reach anyway.
 */

/** Refuses `path` unless it is a unix socket itself (lstat: a symlink is refused, never followed). */
export function assertSocket(path: string): void {
  let st;
  try {
    st = lstatSync(path);
  } catch (err) {
    throw new AtelierError('UNAVAILABLE', `simulator socket ${path} is not there`, { path }, { cause: err });
  }
  if (!st.isSocket()) {
    throw new AtelierError('UNAVAILABLE', `simulator socket ${path} is not a socket: refusing to connect`, { path });
  }
}

/** True when `path` is a unix socket itself (not a link to one). */
export function isSocket(path: string): boolean {
  try {
    return lstatSync(path).isSocket();
  } catch {
    return false;
  }
}

/** Root mode: makes the simulator's socket directories root's, 0700, once it is ready (see above). */
export function lockSocketDirs(dirs: string[], runAs: RunAs | undefined): void {
  if (!runAs || process.getuid?.() !== 0) return;
  for (const dir of dirs) {
    const st = lstatSync(dir);
    if (!st.isDirectory()) throw new AtelierError('INTERNAL', `simulator socket directory ${dir} is not a directory`, { path: dir });
    chownSync(dir, 0, 0);
    chmodSync(dir, 0o700);
  }
}
