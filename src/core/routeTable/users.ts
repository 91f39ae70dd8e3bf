// The route table's users and tokens routes (routes.ts puts the areas together).
import { z } from 'zod';
import { AddUserRequest, SetUserEmailRequest, CreateTokenRequest, itemsOf, TokenView, UserView } from '../api.js';
import { ok } from './shared.js';
import type { RouteDef } from '../routes.js';

export const usersRoutes = {
  listUsers: {
    method: 'GET',
    path: '/v1/users',
    summary: 'users of the tenant (admins)',
    tag: 'identity',
    auth: 'bearer',
    response: itemsOf(UserView),
  },
  addUser: {
    method: 'POST',
    path: '/v1/users',
    summary: 'add a local account; its one-time temporary password is answered once (admins)',
    tag: 'identity',
    auth: 'bearer',
    body: AddUserRequest,
    status: 201,
    response: ok({ user: UserView, temporaryPassword: z.string().nullable() }),
  },
  setUserEmail: {
    method: 'PUT',
    path: '/v1/users/:user/email',
    summary: "change an account's e-mail address, which Slack decisions are matched by (server admins)",
    tag: 'identity',
    auth: 'bearer',
    body: SetUserEmailRequest,
    response: UserView,
  },
  disableUser: {
    method: 'POST',
    path: '/v1/users/:user/disable',
    summary: 'disable an account everywhere (server admins)',
    tag: 'identity',
    auth: 'bearer',
    response: UserView,
  },
  createToken: {
    method: 'POST',
    path: '/v1/tokens',
    summary: 'create an API token; its secret is answered once',
    tag: 'identity',
    auth: 'bearer',
    body: CreateTokenRequest,
    status: 201,
    response: TokenView.extend({ token: z.string() }),
  },
  listTokens: {
    method: 'GET',
    path: '/v1/tokens',
    summary: 'API tokens (never their secret)',
    tag: 'identity',
    auth: 'bearer',
    response: itemsOf(TokenView),
  },
  revokeToken: {
    method: 'DELETE',
    path: '/v1/tokens/:id',
    summary: 'revoke an API token: it stops working at once',
    tag: 'identity',
    auth: 'bearer',
    response: ok({ id: z.string(), revoked: z.literal(true) }),
  },
} as const satisfies Record<string, RouteDef>;
