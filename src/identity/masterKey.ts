import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import { chmodSync, closeSync, existsSync, linkSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';

/**
 * The server's master key: 32 random bytes in a 0600 file (DATA_DIR/master.key, or
 * ATELIER_MASTER_KEY_FILE so that replicas sharing one database share it too). It encrypts
 * what the database must not hold in clear (signing keys; secrets later) with AES-256-GCM.
 */
export class MasterKey {
  private constructor(private readonly key: Buffer) {}

  /** Reads the key file, creating it (exclusively, 0600) when absent. */
  static loadOrCreate(path: string): MasterKey {
    if (!existsSync(path)) {
      // Written whole to a temporary file, then linked into place (fails if the name exists):
      // two servers starting at once on a shared key file never see a half-written key.
      const tmp = `${path}.${process.pid}.tmp`;
      const fd = openSync(tmp, 'w', 0o600);
      try {
        writeSync(fd, `${randomBytes(32).toString('base64')}\n`);
      } finally {
        closeSync(fd);
      }
      try {
        linkSync(tmp, path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      } finally {
        unlinkSync(tmp);
      }
    }
    const mode = statSync(path).mode & 0o777;
    if (mode & 0o077) chmodSync(path, 0o600);
    const key = Buffer.from(readFileSync(path, 'utf8').trim(), 'base64');
    if (key.length !== 32) throw new Error(`${path} does not hold a 32-byte base64 key: restore it from your backup`);
    return new MasterKey(key);
  }

  /** base64url(iv | tag | ciphertext); `context` is bound as additional data (what the value is). */
  encrypt(plain: Buffer | string, context: string): string {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.key, iv);
    c.setAAD(Buffer.from(context));
    const ct = Buffer.concat([c.update(plain), c.final()]);
    return Buffer.concat([iv, c.getAuthTag(), ct]).toString('base64url');
  }

  decrypt(sealed: string, context: string): Buffer {
    const raw = Buffer.from(sealed, 'base64url');
    const d = createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, 12));
    d.setAAD(Buffer.from(context));
    d.setAuthTag(raw.subarray(12, 28));
    try {
      return Buffer.concat([d.update(raw.subarray(28)), d.final()]);
    } catch {
      throw new Error(
        `cannot decrypt ${context}: this server's master key file is not the one this database was set up with; ` +
          'servers sharing one database must share one key file (ATELIER_MASTER_KEY_FILE): copy it from the first server',
      );
    }
  }

  /** A key derived for one purpose (cookie signing), so the master key itself is never exposed. */
  derive(purpose: string): string {
    return createHmac('sha256', this.key).update(purpose).digest('base64url');
  }
}
