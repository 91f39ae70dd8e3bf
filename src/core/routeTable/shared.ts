// What several areas of the route table share.
import { z } from 'zod';

export const ok = <T extends z.ZodRawShape>(shape: T): z.ZodObject<T> => z.object(shape);
export const resume = z.boolean().optional().describe('resume a suspended workshop first (default true)');
export const CONCERNS_ME = z
  .enum(['me'])
  .optional()
  .describe('only what concerns the caller: the workshops they own, or every workshop of the tenant for a maintainer or admin');
