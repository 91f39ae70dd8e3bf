import { AtelierError, type Workshop } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';

/** `atelier workshops budget ID USD|none`: the LLM gateway enforces it from the next model request. */
export async function setWorkshopBudget(ctx: CommandContext, id: string, value: string): Promise<Workshop> {
  let budgetUsd: number | null;
  if (value === 'none') budgetUsd = null;
  else {
    budgetUsd = Number(value.replace(/^\$/, ''));
    if (value.trim() === '' || !Number.isFinite(budgetUsd) || budgetUsd < 0)
      throw new AtelierError('INVALID_ARGUMENT', `the budget is USD (for example 25 or 2.50) or \`none\`, got "${value.slice(0, 40)}"`, {
        field: 'budgetUsd',
      });
  }
  return (await ctx.api()).call('setWorkshopBudget', { params: { id }, body: { budgetUsd } });
}
