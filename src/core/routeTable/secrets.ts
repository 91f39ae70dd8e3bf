// The route table's secrets routes (routes.ts puts the areas together).
import { itemsOf, SecretInfo, SetSecretRequest, CredentialPolicy, CredentialPolicyView } from '../api.js';
import type { RouteDef } from '../routes.js';

export const secretsRoutes = {
  listSecrets: {
    method: 'GET',
    path: '/v1/secrets',
    summary: 'names of the secrets, who set them and when (never values)',
    tag: 'secrets',
    auth: 'bearer',
    response: itemsOf(SecretInfo),
  },
  setSecret: {
    method: 'PUT',
    path: '/v1/secrets/:name',
    summary: 'set or replace a secret (maintainers)',
    tag: 'secrets',
    auth: 'bearer',
    body: SetSecretRequest,
    response: SecretInfo,
  },
  deleteSecret: {
    method: 'DELETE',
    path: '/v1/secrets/:name',
    summary: 'delete a secret; grants of it end at once (maintainers)',
    tag: 'secrets',
    auth: 'bearer',
    status: 204,
  },
  revokeSecretGrant: {
    method: 'DELETE',
    path: '/v1/secrets/grants/:id',
    summary: "end an approved SECRET_REQUEST's grant at once, by the request's id (the workshop's owner or maintainers)",
    tag: 'secrets',
    auth: 'bearer',
    status: 204,
  },

  getCredentialPolicy: {
    method: 'GET',
    path: '/v1/credential-policy',
    summary: "the tenant's credential policy: bindings every new workshop gets, hosts no binding may name",
    tag: 'secrets',
    auth: 'bearer',
    response: CredentialPolicyView,
  },
  setCredentialPolicy: {
    method: 'PUT',
    path: '/v1/credential-policy',
    summary: "replace the tenant's credential policy; applies to workshops created from then on (maintainers)",
    tag: 'secrets',
    auth: 'bearer',
    body: CredentialPolicy,
    response: CredentialPolicyView,
  },
} as const satisfies Record<string, RouteDef>;
