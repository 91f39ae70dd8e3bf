import type { FastifyInstance } from 'fastify';
import { SetUserEmailRequest } from '../../core/index.js';
import { AddUserRequest, CreateTokenRequest, type AccountService } from '../../identity/index.js';
import type { WorkshopService } from '../../workshops/index.js';
import { parse, principalOf } from './common.js';

/** Who am I, users of the tenant (admins), and API tokens (everyone, for themselves). */
export function identityRoutes(app: FastifyInstance, accounts: AccountService, workshops: WorkshopService): void {
  app.get('/v1/auth/whoami', { config: { access: 'authenticated' } }, async (request) => accounts.whoami(principalOf(request)));

  const ADMIN = { config: { access: { role: 'admin' as const } } };
  app.get('/v1/users', ADMIN, async (request) => ({ items: await accounts.listUsers(principalOf(request)) }));
  app.post('/v1/users', ADMIN, async (request, reply) =>
    reply.status(201).send(await accounts.addUser(principalOf(request), parse(AddUserRequest, request.body))),
  );
  // Disabling acts on the account everywhere: server admins (the default tenant's) only.
  const SERVER_ADMIN = { config: { access: { role: 'admin' as const, platform: true } } };
  app.post<{ Params: { user: string } }>('/v1/users/:user/disable', SERVER_ADMIN, async (request) =>
    accounts.disableUser(principalOf(request), request.params.user),
  );
  // An e-mail address decides who a Slack user acts as: server admins only, like disabling.
  app.put<{ Params: { user: string } }>('/v1/users/:user/email', SERVER_ADMIN, async (request) =>
    accounts.setUserEmail(principalOf(request), request.params.user, parse(SetUserEmailRequest, request.body)),
  );

  // Any person may hold tokens for themselves, never with more rights than they have; an agent
  // token cannot mint tokens.
  const PERSON = { config: { access: { role: 'viewer' as const } } };
  app.post('/v1/tokens', PERSON, async (request, reply) => {
    const p = principalOf(request);
    const body = parse(CreateTokenRequest, request.body);
    if (body.workshopId !== undefined) {
      // `--workshop` takes a name as well as an id (the token is bound to the id).
      body.workshopId = await workshops.resolveRef(body.workshopId, p);
      await workshops.authorize(body.workshopId, p, 'operate');
    }
    return reply.status(201).send(await accounts.createToken(p, body));
  });
  app.get('/v1/tokens', PERSON, async (request) => ({ items: await accounts.listTokens(principalOf(request)) }));
  app.delete<{ Params: { id: string } }>('/v1/tokens/:id', PERSON, async (request) =>
    accounts.revokeToken(principalOf(request), request.params.id),
  );
}
