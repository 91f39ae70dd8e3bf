import { AtelierError } from '../../../core/index.js';
import { oidcConfiguration, oidcError, openIdClient } from '../../client.js';
import type { CommandContext } from '../../context.js';

export interface LogoutResult {
  context: string;
  /** Whether a credential was stored on this machine (it is gone now). */
  removed: boolean;
  /** Whether the issuer revoked the session; null when there was no session to revoke (API token). */
  revoked: boolean | null;
  note: string;
}

/**
 * `atelier auth logout`: revokes the refresh token at the issuer (through the server's relay),
 * then removes the credential from this machine, also when the server cannot be reached.
 */
export async function logout(ctx: CommandContext): Promise<LogoutResult> {
  const target = await ctx.target();
  if (!target.store)
    throw new AtelierError('INVALID_ARGUMENT', 'ATELIER_URL/ATELIER_TOKEN are set: there is no stored login to remove; unset them');
  const cred = target.credential;
  if (!cred) return { context: target.context, removed: false, revoked: null, note: `context ${target.context} was not logged in` };
  let revoked: boolean | null = null;
  let note = `logged out of context ${target.context}`;
  if (cred.kind === 'oidc' && cred.refreshToken && cred.revocationEndpoint) {
    try {
      const oc = await openIdClient();
      await oc.tokenRevocation(oidcConfiguration(oc, cred), cred.refreshToken, { token_type_hint: 'refresh_token' });
      revoked = true;
      note += '; the session was revoked at the issuer';
    } catch (err) {
      revoked = false;
      note += `; the session could NOT be revoked (${(await oidcError(err, target, 'revocation')).message}), it was removed from this machine only and ends when its refresh token expires`;
    }
  } else if (cred.kind === 'oidc') {
    revoked = false;
    note += '; the issuer offers no revocation: the session was removed from this machine only';
  } else {
    note +=
      '; the API token was removed from this machine but is still valid: revoke it with `atelier tokens revoke ID` if it is no longer needed';
  }
  const removed = target.store.delete(target.context);
  return { context: target.context, removed, revoked, note };
}
