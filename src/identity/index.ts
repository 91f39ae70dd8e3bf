export { AccountService, AddUserRequest, CreateTokenRequest, TENANT_NAME, USER_NAME, type TokenView, type UserView } from './accounts.js';
export { loadExternalIssuerConfig, membershipsFromGroups, type ExternalIssuerConfig } from './external.js';
export { MasterKey } from './masterKey.js';
export { EmbeddedIssuer, WEB_CALLBACK_PATH, WEB_CLIENT_ID } from './oidc/issuer.js';
export { generatePassword, hashPassword, passwordProblem, verifyPassword } from './passwords.js';
export {
  PLATFORM_TENANT_ID,
  checkRouteAccess,
  checkWorkshopAccess,
  isRouteAccess,
  type OwnedResource,
  type Principal,
  type RouteAccess,
  type WorkshopAction,
} from './policy.js';
export { Authenticator, type TokenAuthority } from './principal.js';
export { ROLES, atLeast, isRole, weaker, type Role } from './roles.js';
export { ALLOWED_ALGORITHMS, JwtVerifier, looksLikeJwt, type VerifiedToken } from './verify.js';
