import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

/**
 * Local account passwords: scrypt (N=2^15, r=8, p=1, 32-byte key), stored as
 * `scrypt$N$r$p$salt$hash` (base64url). Verification always costs one scrypt, also for unknown
 * users (`verifyPassword(undefined, …)`), so timing does not reveal which names exist.
 */
const N = 1 << 15;
const R = 8;
const P = 1;
const KEYLEN = 32;
const MAXMEM = 64 * 1024 * 1024;

function derive(password: string, salt: Buffer, opts: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password.normalize('NFC'), salt, KEYLEN, { ...opts, maxmem: MAXMEM }, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, { N, r: R, p: P });
  return `scrypt$${N}$${R}$${P}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

const DUMMY = `scrypt$${N}$${R}$${P}$${Buffer.alloc(16).toString('base64url')}$${Buffer.alloc(KEYLEN).toString('base64url')}`;

export async function verifyPassword(stored: string | null | undefined, password: string): Promise<boolean> {
  const parts = (stored ?? DUMMY).split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [, n, r, p, salt, hash] = parts as [string, string, string, string, string, string];
  const expected = Buffer.from(hash, 'base64url');
  const key = await derive(password, Buffer.from(salt, 'base64url'), { N: Number(n), r: Number(r), p: Number(p) });
  return stored != null && expected.length === key.length && timingSafeEqual(expected, key);
}

/** A password to hand out once (first admin, `atelier users add`): 20 characters, ~119 bits. */
export function generatePassword(): string {
  const alphabet = 'abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789';
  const bytes = randomBytes(20);
  let out = '';
  for (const b of bytes) out += alphabet[b % alphabet.length];
  return out;
}

/** Rules for a password a user chooses (first-login change). Returns what is wrong, or null. */
export function passwordProblem(password: string, name: string): string | null {
  if (password.length < 12) return 'use at least 12 characters';
  if (password.length > 1024) return 'use at most 1024 characters';
  if (password.toLowerCase().includes(name.toLowerCase())) return 'do not include your user name';
  return null;
}
