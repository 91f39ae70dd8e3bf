import type { FastifyInstance } from 'fastify';
import { CredentialPolicy, SetSecretRequest } from '../../core/index.js';
import type { RouteAccess } from '../../identity/index.js';
import type { CredentialPolicies, SecretStore } from '../../workshops/index.js';
import { parse, principalOf } from './common.js';

// Names (who set them, when) for members and the workshops' agent tokens (an agent must know
// what it may ask for); viewers see none. Setting and deleting: maintainers and admins. No route
// ever answers a value: a secret leaves the server only into a workshop, by an approved grant.
const LIST: RouteAccess = { role: 'member', agent: true };
const WRITE: RouteAccess = { role: 'maintainer' };
const REVOKE: RouteAccess = { role: 'member' };

type NameParams = { Params: { name: string } };

export function secretRoutes(app: FastifyInstance, secrets: SecretStore, policies?: CredentialPolicies): void {
  app.get('/v1/secrets', { config: { access: LIST } }, async (request) => ({ items: await secrets.list(principalOf(request)) }));

  app.put<NameParams>('/v1/secrets/:name', { config: { access: WRITE } }, async (request) => {
    const body = parse(SetSecretRequest, request.body);
    return secrets.set(principalOf(request), request.params.name, body.value);
  });

  // Ends a grant at once (an approved SECRET_REQUEST's, by its id): the workshop's owner or a maintainer.
  app.delete<{ Params: { id: string } }>('/v1/secrets/grants/:id', { config: { access: REVOKE } }, async (request, reply) => {
    await secrets.revoke(principalOf(request), request.params.id);
    return reply.status(204).send();
  });

  // The tenant's credential policy: members read it (it says what their workshops get), maintainers set it.
  if (policies) {
    app.get('/v1/credential-policy', { config: { access: { role: 'member' } } }, async (request) => policies.get(principalOf(request)));
    app.put('/v1/credential-policy', { config: { access: WRITE } }, async (request) =>
      policies.set(principalOf(request), parse(CredentialPolicy, request.body)),
    );
  }

  app.delete<NameParams>('/v1/secrets/:name', { config: { access: WRITE } }, async (request, reply) => {
    await secrets.delete(principalOf(request), request.params.name);
    return reply.status(204).send();
  });
}
