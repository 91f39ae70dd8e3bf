import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier audit …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  program
    .command('audit')
    .description('the approvals audit')
    .command('verify')
    .description('recompute the hash chain of the approvals audit: says whether any row was changed, removed or reordered')
    .action(async () => {
      const c = cli.ctx();
      const { verifyAudit, verificationText } = await import('./verify.js');
      const v = await verifyAudit(c);
      await cli.render(c.output, v, () => verificationText(v));
      if (!v.ok) cli.setExitCode(1);
    });
}
