import { createHmac, timingSafeEqual } from 'node:crypto';
import { AtelierError } from '../core/index.js';

/**
 * What a link into the dashboard says its reader came for: the button of a Teams card they
 * followed (Approve, Reject) or the follow-up's "Open". It opens the request's modal, nothing more:
 * the decision is made there, signed in, with the reader's own rights.
 */
export const LINK_ACTIONS = ['approve', 'reject', 'view'] as const;
export type LinkAction = (typeof LINK_ACTIONS)[number];

/** A follow-up's link to a decided request stays usable this long. */
export const VIEW_LINK_SECONDS = 7 * 86400;

function mac(key: string, id: string, action: LinkAction, exp: number): string {
  // Versioned and separated, so a signature of one field set can never be read as another's.
  return createHmac('sha256', key).update(`approval-link:v1\n${id}\n${action}\n${exp}`).digest('base64url');
}

/**
 * The dashboard's address of a request, signed with a key derived from the server's master key
 * and expiring at `exp` (seconds): `/approvals/ID?action=…&exp=…&sig=…`.
 */
export function approvalLink(origin: string, key: string, id: string, action: LinkAction, exp: number): string {
  const q = new URLSearchParams({ action, exp: String(exp), sig: mac(key, id, action, exp) });
  return `${origin}/approvals/${encodeURIComponent(id)}?${q.toString()}`;
}

/**
 * Checks a link's signature (constant-time) then its expiry. Throws PERMISSION_DENIED saying what
 * to do instead (`details.link`: `forged` or `expired`); a malformed query is INVALID_ARGUMENT.
 */
export function checkApprovalLink(
  key: string,
  id: string,
  q: { action: string | undefined; exp: number | undefined; sig: string | undefined },
  nowSeconds: number,
): { action: LinkAction; expiresAt: string } {
  const action = LINK_ACTIONS.find((a) => a === q.action);
  if (!action || q.exp === undefined || !q.sig)
    throw new AtelierError(
      'INVALID_ARGUMENT',
      'an approval link carries action (approve, reject or view), exp and sig: open the link as it was sent',
      {
        field: !action ? 'action' : q.exp === undefined ? 'exp' : 'sig',
      },
    );
  const expected = Buffer.from(mac(key, id, action, q.exp));
  const given = Buffer.from(q.sig);
  if (expected.length !== given.length || !timingSafeEqual(expected, given))
    throw new AtelierError(
      'PERMISSION_DENIED',
      'this link was not made by this server, or it was changed: nothing was decided; open the request from the approvals list instead',
      { link: 'forged' },
    );
  if (q.exp < nowSeconds)
    throw new AtelierError(
      'PERMISSION_DENIED',
      `this link expired at ${new Date(q.exp * 1000).toISOString()}: nothing was decided; open the request from the approvals list or the history instead`,
      { link: 'expired' },
    );
  return { action, expiresAt: new Date(q.exp * 1000).toISOString() };
}
