import { randomBytes } from 'node:crypto';
import { closeSync, constants, fchmodSync, fchownSync, fsyncSync, openSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

export interface AtomicWriteOptions {
  /** fsync the file before the rename and its directory after: the new content survives a power cut. */
  durable?: boolean;
  /** The owner the file is given (a root server writing a user's file). */
  owner?: { uid: number; gid: number };
}

/**
 * Writes `path` whole or not at all, with exactly `mode`: a temporary file of its own in the same
 * directory (created exclusively, never through a link), renamed over it. A failure leaves the old
 * content and no temporary file.
 */
export function writeFileAtomic(path: string, content: string, mode: number, opts: AtomicWriteOptions = {}): void {
  const tmp = join(dirname(path), `.${basename(path)}.tmp-${randomBytes(6).toString('hex')}`);
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    writeFileSync(fd, content);
    // The umask may have narrowed the mode asked for.
    fchmodSync(fd, mode);
    if (opts.owner) fchownSync(fd, opts.owner.uid, opts.owner.gid);
    if (opts.durable) fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw err;
  }
  closeSync(fd);
  try {
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
  if (opts.durable) syncDir(dirname(path));
}

/** fsync a directory: a rename or unlink in it is on disk. */
export function syncDir(dir: string): void {
  const fd = openSync(dir, constants.O_RDONLY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * The files of the host install's TLS step, in its folder (`/etc/atelier/tls`): the served pair,
 * the local CA, the ACME account key, and `source.json` (where the pair came from, for which
 * domain). Written by `atelier server install`; the server renews from them (server/renewal.ts).
 */
export function tlsFiles(dir: string): {
  cert: string;
  key: string;
  caCert: string;
  caKey: string;
  account: string;
  source: string;
} {
  return {
    cert: join(dir, 'cert.pem'),
    key: join(dir, 'key.pem'),
    caCert: join(dir, 'local-ca.pem'),
    caKey: join(dir, 'local-ca-key.pem'),
    account: join(dir, 'acme-account-key.pem'),
    source: join(dir, 'source.json'),
  };
}
