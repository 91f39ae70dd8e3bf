import {
  createLocalJWKSet,
  createRemoteJWKSet,
  decodeProtectedHeader,
  errors,
  jwtVerify,
  type JSONWebKeySet,
  type JWTPayload,
  type JWTVerifyGetKey,
} from 'jose';
import { AtelierError } from '../core/index.js';

/** Algorithms a token may be signed with. `none` and HMAC (a shared secret) never are. */
export const ALLOWED_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];

export interface VerifierOptions {
  issuer: string;
  audience: string;
  /** The embedded issuer's published keys (read again when a token names an unknown key id)… */
  localJwks?: () => Promise<JSONWebKeySet>;
  /** …or an external issuer's `jwks_uri` (read from its discovery document when first needed). */
  jwksUri?: string | (() => Promise<string>);
  algorithms?: string[];
  clockToleranceSeconds?: number;
}

export interface VerifiedToken {
  claims: JWTPayload & Record<string, unknown>;
  expiresAt: string | null;
}

/** True when the bearer looks like a JWS (three base64url parts), so it is not an API token. */
export function looksLikeJwt(token: string): boolean {
  return /^[\w-]+\.[\w-]+\.[\w-]*$/.test(token);
}

/**
 * Verifies JWT access tokens with jose: signature against the issuer's keys, `iss`, `aud`, `exp`,
 * `nbf` and an allowed algorithm. Each way a token can be wrong has its own error code, so a
 * client can tell "log in again" (expired) from "this token is not for this server" (audience).
 */
export class JwtVerifier {
  private getKey: JWTVerifyGetKey;
  private lastReload = 0;
  private jwksUrl: string | undefined;
  private cached: JWTVerifyGetKey | undefined;
  private readonly algorithms: string[];

  constructor(private readonly opts: VerifierOptions) {
    this.algorithms = opts.algorithms ?? ALLOWED_ALGORITHMS;
    if (opts.jwksUri) {
      const uri = opts.jwksUri;
      let remote: JWTVerifyGetKey | undefined;
      this.getKey = async (header, token) => {
        if (!remote) {
          let url: string;
          try {
            url = typeof uri === 'string' ? uri : await uri();
          } catch (err) {
            throw new AtelierError('UNAVAILABLE', (err as Error).message);
          }
          this.jwksUrl = url;
          remote = createRemoteJWKSet(new URL(url), { timeoutDuration: 5000, cooldownDuration: 30_000 });
        }
        return remote(header, token);
      };
    } else if (opts.localJwks) {
      const load = async (): Promise<JWTVerifyGetKey> => (this.cached = createLocalJWKSet(await opts.localJwks!()));
      this.getKey = async (header, token) => {
        const current = this.cached ?? (await load());
        try {
          return await current(header, token);
        } catch (err) {
          // A key rotated in by another replica, or just now: read the keys again, at most every 2 s.
          if (err instanceof errors.JWKSNoMatchingKey && Date.now() - this.lastReload > 2000) {
            this.lastReload = Date.now();
            return (await load())(header, token);
          }
          throw err;
        }
      };
    } else throw new Error('JwtVerifier needs localJwks or jwksUri');
  }

  /** Forgets the keys read so far (after a rotation here): the next token reads them again. */
  reload(): void {
    this.lastReload = 0;
    this.cached = undefined;
  }

  async verify(token: string): Promise<VerifiedToken> {
    let alg: unknown;
    try {
      alg = decodeProtectedHeader(token).alg;
    } catch {
      throw new AtelierError('TOKEN_INVALID', 'the bearer token is malformed: log in again with `atelier auth login`');
    }
    if (typeof alg !== 'string' || !this.algorithms.includes(alg))
      throw new AtelierError(
        'TOKEN_ALGORITHM_REFUSED',
        `tokens signed with "${String(alg)}" are refused: allowed are ${this.algorithms.join(', ')}`,
      );
    try {
      const { payload } = await jwtVerify(token, this.getKey, {
        issuer: this.opts.issuer,
        audience: this.opts.audience,
        algorithms: this.algorithms,
        clockTolerance: this.opts.clockToleranceSeconds ?? 30,
        requiredClaims: ['sub', 'exp'],
      });
      return {
        claims: payload as VerifiedToken['claims'],
        expiresAt: typeof payload.exp === 'number' ? new Date(payload.exp * 1000).toISOString() : null,
      };
    } catch (err) {
      throw mapJoseError(err, this.opts, this.jwksUrl);
    }
  }
}

function mapJoseError(err: unknown, opts: VerifierOptions, jwksUrl: string | undefined): AtelierError {
  if (err instanceof AtelierError) return err;
  if (err instanceof errors.JWTExpired)
    return new AtelierError(
      'TOKEN_EXPIRED',
      'the access token has expired: the CLI refreshes it by itself; otherwise run `atelier auth login`',
    );
  if (err instanceof errors.JWTClaimValidationFailed) {
    if (err.claim === 'aud')
      return new AtelierError('TOKEN_AUDIENCE_INVALID', `this token is not meant for this server (audience must be "${opts.audience}")`);
    if (err.claim === 'iss')
      return new AtelierError('TOKEN_ISSUER_INVALID', `this token was not issued by this server's issuer (${opts.issuer})`);
    return new AtelierError('TOKEN_INVALID', `the token's "${err.claim}" claim is not valid: log in again`);
  }
  if (err instanceof errors.JOSEAlgNotAllowed)
    return new AtelierError('TOKEN_ALGORITHM_REFUSED', 'the token is signed with a refused algorithm');
  if (
    err instanceof errors.JWSSignatureVerificationFailed ||
    err instanceof errors.JWKSNoMatchingKey ||
    err instanceof errors.JWKSMultipleMatchingKeys
  )
    return new AtelierError('TOKEN_SIGNATURE_INVALID', "the token's signature does not match the issuer's keys: log in again");
  if (err instanceof errors.JWKSTimeout || !(err instanceof errors.JOSEError))
    return new AtelierError(
      'UNAVAILABLE',
      `cannot read the issuer's signing keys${jwksUrl ? ` at ${jwksUrl}` : ''}: ${(err as Error).message}`,
    );
  return new AtelierError('TOKEN_INVALID', `the token is not valid (${(err as Error).message}): log in again`);
}
