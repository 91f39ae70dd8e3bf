import type { FastifyInstance } from 'fastify';
import { SetBudgetRequest } from '../../../core/index.js';
import type { WorkshopService } from '../../../workshops/index.js';
import { parse, principalOf } from '../common.js';
import type { RouteAccess } from '../../../identity/index.js';
import { MEMBER, type IdParams } from './access.js';

/** People of the tenant, not agents (a workshop's agent sees its own spend in its workshop). */
const PEOPLE: RouteAccess = { role: 'viewer' };

/** The LLM gateway's side of workshops: a workshop's budget, and the tenant's spend by user. */
export function spendRoutes(app: FastifyInstance, service: WorkshopService): void {
  // Never an agent token: a workshop's agent cannot raise its own budget.
  app.put<IdParams>('/v1/workshops/:id/budget', { config: { access: MEMBER } }, async (request) => {
    const body = parse(SetBudgetRequest, request.body);
    return service.setBudget(request.params.id, principalOf(request), body.budgetUsd);
  });
  app.get('/v1/spend', { config: { access: PEOPLE } }, async (request) => service.spendReport(principalOf(request)));
}
