// The route table's projects and typed actions routes (routes.ts puts the areas together).
import { z } from 'zod';
import {
  ActionExecutionSchema,
  ActionJournal,
  ActionPlanSchema,
  AddProjectRequest,
  ApplyPlanRequest,
  CatalogItemSchema,
  ExecutionSummarySchema,
  itemsOf,
  PlanActionRequest,
  ProjectView,
  RollbackRequest,
} from '../api.js';
import { ok } from './shared.js';
import type { RouteDef } from '../routes.js';

export const actionsRoutes = {
  addProject: {
    method: 'POST',
    path: '/v1/projects',
    summary: "register a project directory of the server's machine (maintainers)",
    tag: 'actions',
    auth: 'bearer',
    body: AddProjectRequest,
    status: 201,
    response: ok({ project: ProjectView, created: z.boolean() }),
  },
  listProjects: {
    method: 'GET',
    path: '/v1/projects',
    summary: 'registered projects',
    tag: 'actions',
    auth: 'bearer',
    response: itemsOf(ProjectView),
  },
  removeProject: {
    method: 'DELETE',
    path: '/v1/projects/:project',
    summary: 'forget a project (its files stay as they are)',
    tag: 'actions',
    auth: 'bearer',
    response: ok({ project: ProjectView, removed: z.literal(true) }),
  },
  listActions: {
    method: 'GET',
    path: '/api/workspace/actions',
    summary: "a project's catalog of typed actions, preconditions evaluated now",
    tag: 'actions',
    auth: 'bearer',
    query: z.object({ project: z.string().min(1).describe('project name or id') }),
    response: ok({
      project: z.string(),
      items: z.array(CatalogItemSchema),
      // The write guard as a browser meets it: `copy-command` (the default) answers a page's apply
      // or rollback with the CLI command, so the cockpit shows that command instead of a button.
      writes: z.enum(['apply', 'copy-command']),
    }),
  },
  actionJournal: {
    method: 'GET',
    path: '/api/workspace/actions/journal',
    summary: "a project's actions journal",
    tag: 'actions',
    auth: 'bearer',
    query: z.object({ project: z.string().min(1).describe('project name or id') }),
    response: ActionJournal,
  },
  getPlan: {
    method: 'GET',
    path: '/api/workspace/actions/plans/:planId',
    summary: 'one plan',
    tag: 'actions',
    auth: 'bearer',
    response: ActionPlanSchema,
  },
  getExecution: {
    method: 'GET',
    path: '/api/workspace/actions/executions/:executionId',
    summary: 'one execution, as the journal records it',
    tag: 'actions',
    auth: 'bearer',
    response: ExecutionSummarySchema.extend({ project: z.string() }),
  },
  planAction: {
    method: 'POST',
    path: '/api/workspace/actions/:id/plan',
    summary: 'plan an action: everything apply would do, changing nothing (maintainers)',
    tag: 'actions',
    auth: 'bearer',
    body: PlanActionRequest,
    status: 201,
    response: ActionPlanSchema,
  },
  applyPlan: {
    method: 'POST',
    path: '/api/workspace/actions/:id/apply',
    summary: 'apply exactly that plan, verify it, journal it (maintainers)',
    tag: 'actions',
    auth: 'bearer',
    body: ApplyPlanRequest,
    response: ActionExecutionSchema,
  },
  rollbackExecution: {
    method: 'POST',
    path: '/api/workspace/actions/:id/rollback',
    summary: 'apply the inverse recorded for an execution, and verify it (maintainers)',
    tag: 'actions',
    auth: 'bearer',
    body: RollbackRequest,
    response: ActionExecutionSchema,
  },
} as const satisfies Record<string, RouteDef>;
