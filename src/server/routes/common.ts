import type { FastifyRequest } from 'fastify';
import type { z } from 'zod';
import { AtelierError, describeZodError } from '../../core/index.js';
import type { Principal } from '../../identity/index.js';

/** A request body checked against its schema: a 400 naming the field, never a 500. */
export function parse<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const r = schema.safeParse(body ?? {});
  if (!r.success) {
    const { message, field } = describeZodError(r.error);
    throw new AtelierError('INVALID_ARGUMENT', message, { field });
  }
  return r.data;
}

/** The caller, set by the onRequest hook on every non-public route. */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new AtelierError('UNAUTHENTICATED', 'this route needs a bearer token');
  return request.principal;
}

/** What an approval is about, in a few words (never a secret's value: requests hold only names). */
export function approvalWhat(p: Record<string, unknown>): string {
  const v = p.entry ?? p.host ?? p.name ?? p.branch ?? (Array.isArray(p.command) ? p.command.join(' ') : '');
  return String(v).slice(0, 120);
}
