import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier approvals …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const approvals = program.command('approvals').description('requests that wait for a human: list, show, approve, reject, watch, request');
  approvals
    .command('list')
    .alias('ls')
    .description('approval requests of your tenant, newest first (pending ones unless --status or --all)')
    .option('--status <status>', 'PENDING, APPROVED, REJECTED or EXPIRED')
    .option('--workshop <id>', 'only this workshop')
    .option('--category <category>', 'ALLOWLIST_EXPANSION, SECRET_REQUEST, PR_GATEWAY or SHELL_COMMAND')
    .option('--all', 'every status')
    .action(async (flags: { status?: string; workshop?: string; category?: string; all?: boolean }) => {
      const c = cli.ctx();
      const { listApprovals, approvalTable } = await import('./manage.js');
      const items = await listApprovals(c, flags);
      await cli.render(c.output, items, () => approvalTable(items));
    });
  approvals
    .command('show <id>')
    .description('one request: what, who asks, why, and its decision')
    .action(async (id: string) => {
      const c = cli.ctx();
      const { showApproval, approvalDetail } = await import('./manage.js');
      const a = await showApproval(c, id);
      await cli.render(c.output, a, () => approvalDetail(a));
    });
  const decide = async (id: string, decision: 'APPROVE' | 'REJECT', flags: { reason?: string }): Promise<void> => {
    const c = cli.ctx();
    const { decideApproval, approvalDetail } = await import('./manage.js');
    const a = await decideApproval(c, id, decision, flags.reason);
    await cli.render(c.output, a, () => approvalDetail(a));
  };
  approvals
    .command('approve <id>')
    .description('approve a request (the workshop owner or a maintainer; never the one who asked)')
    .option('--reason <text>', 'why (kept in the audit)')
    .action((id: string, flags: { reason?: string }) => decide(id, 'APPROVE', flags));
  approvals
    .command('reject <id>')
    .description('reject a request')
    .option('--reason <text>', 'why (required, kept in the audit)')
    .action((id: string, flags: { reason?: string }) => decide(id, 'REJECT', flags));
  program
    .command('approve <id>')
    .description('alias of `atelier approvals approve`')
    .option('--reason <text>', 'why (kept in the audit)')
    .action((id: string, flags: { reason?: string }) => decide(id, 'APPROVE', flags));
  approvals
    .command('watch')
    .description('print approval requests and decisions as they happen (Ctrl-C to stop)')
    .action(async () => {
      const c = cli.ctx();
      const { watchApprovals } = await import('./watch.js');
      const { eventLine } = await import('./manage.js');
      await watchApprovals(c, (e) => {
        process.stdout.write(c.output === 'table' ? `${eventLine(e.type, e.approval)}\n` : `${JSON.stringify(e)}\n`);
      });
    });
  approvals
    .command('request')
    .description('file a request for a workshop (what an agent runs, with ATELIER_URL and ATELIER_TOKEN)')
    .requiredOption('--category <category>', 'ALLOWLIST_EXPANSION, SECRET_REQUEST, PR_GATEWAY or SHELL_COMMAND')
    .requiredOption(
      '--payload <json>',
      'what is asked, with a justification, e.g. \'{"host":"api.stripe.com","justification":"…"}\'; SECRET_REQUEST: \'{"name":"STRIPE_KEY","host":"api.stripe.com","justification":"…"}\' (use: the value stays outside the workshop; without host it is revealed inside, riskier)',
    )
    .option('--workshop <id>', "the workshop (default: the agent token's own)")
    .option('--wait', 'wait for the decision; exit 1 unless approved')
    .option('--timeout <seconds>', 'with --wait: give up after this long (the request stays pending)')
    .action(async (flags: { category: string; payload: string; workshop?: string; wait?: boolean; timeout?: string }) => {
      const c = cli.ctx();
      const { requestApproval, requireApproved, approvalDetail } = await import('./manage.js');
      const a = await requestApproval(c, flags, async () => (await (await c.api()).call('whoami')).workshopId);
      await cli.render(c.output, a, () => approvalDetail(a));
      if (flags.wait) requireApproved(a);
    });
}
