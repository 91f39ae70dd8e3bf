import { createHash, randomBytes } from 'node:crypto';

// Crockford-style alphabet without look-alike characters, lowercase for typing ease.
const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

function randomId(length: number): string {
  const bytes = randomBytes(length);
  let out = '';
  for (const b of bytes) out += ALPHABET[b % 32];
  return out;
}

/** A new workshop id such as `ws-3f8k2m9q`. */
export function newWorkshopId(): string {
  return `ws-${randomId(8)}`;
}

/** A new request id for logs and error bodies. */
export function newRequestId(): string {
  return `req-${randomId(12)}`;
}

/** A new secret API token; only its hash is stored. */
export function newApiToken(): string {
  return `atl_${randomBytes(24).toString('base64url')}`;
}

/** SHA-256 of a token, hex: what the database keeps. */
export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** True for ids the server could have issued; anything else is a 404 without a query. */
export function isWorkshopId(value: string): boolean {
  return /^ws-[0-9a-z]{8}$/.test(value);
}

/** A new opaque id with a prefix, such as `u-3f8k2m9q` (users) or `tok-…` (API tokens). */
export function newId(prefix: string): string {
  return `${prefix}-${randomId(10)}`;
}
