// The route table's sign-in routes (routes.ts puts the areas together).
import { z } from 'zod';
import { AuthConfig, Whoami } from '../api.js';
import type { RouteDef } from '../routes.js';

export const signInRoutes = {
  authConfig: {
    method: 'GET',
    path: '/v1/auth/config',
    summary: 'which issuer and client the CLI logs in with, and the relay endpoints',
    tag: 'identity',
    auth: 'public',
    response: AuthConfig,
  },
  deviceCode: {
    method: 'POST',
    path: '/v1/auth/device/code',
    summary: "device authorization (RFC 8628), relayed to the issuer; the issuer's answer unchanged",
    tag: 'identity',
    auth: 'public',
    consumes: 'application/x-www-form-urlencoded',
    response: z.looseObject({}),
  },
  deviceToken: {
    method: 'POST',
    path: '/v1/auth/device/token',
    summary: 'token endpoint (device_code and refresh_token grants), relayed to the issuer',
    tag: 'identity',
    auth: 'public',
    consumes: 'application/x-www-form-urlencoded',
    response: z.looseObject({}),
  },
  revokeSession: {
    method: 'POST',
    path: '/v1/auth/revoke',
    summary: 'token revocation (RFC 7009), relayed to the issuer',
    tag: 'identity',
    auth: 'public',
    consumes: 'application/x-www-form-urlencoded',
    response: z.looseObject({}),
  },
  whoami: {
    method: 'GET',
    path: '/v1/auth/whoami',
    summary: 'the caller: user, tenant, role, token',
    tag: 'identity',
    auth: 'bearer',
    response: Whoami,
  },
} as const satisfies Record<string, RouteDef>;
