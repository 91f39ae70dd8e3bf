import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier secrets …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const secrets = program.command('secrets').description("the tenant's secrets, granted to a workshop only by an approved SECRET_REQUEST");
  secrets
    .command('set <name>')
    .description('set (or replace) a secret; the value is read from stdin, never from an argument (maintainers)')
    .action(async (name: string) => {
      const c = cli.ctx();
      const { readValue, setSecret } = await import('./manage.js');
      const s = await setSecret(c, name, await readValue());
      await cli.render(c.output, s, () => `secret ${s.name} set`);
    });
  secrets
    .command('list')
    .alias('ls')
    .description('names of the secrets, who set them and when (never values)')
    .action(async () => {
      const c = cli.ctx();
      const { listSecrets, secretTable } = await import('./manage.js');
      const items = await listSecrets(c);
      await cli.render(c.output, items, () => secretTable(items));
    });
  secrets
    .command('revoke <request-id>')
    .description(
      "end an approved SECRET_REQUEST's grant now: a revealed value leaves the workshop, a used one stops being added (the workshop's owner or maintainers)",
    )
    .action(async (id: string) => {
      const c = cli.ctx();
      const { revokeGrant } = await import('./manage.js');
      await revokeGrant(c, id);
      await cli.render(c.output, { revoked: id }, () => `grant of request ${id} ended`);
    });
  const policy = secrets
    .command('policy')
    .description("the tenant's credential policy: bindings every new workshop gets, hosts no binding may name");
  policy
    .command('show')
    .description('show the policy (members)')
    .action(async () => {
      const c = cli.ctx();
      const { showPolicy, policyText } = await import('./manage.js');
      const p = await showPolicy(c);
      await cli.render(c.output, p, () => policyText(p));
    });
  policy
    .command('set <file>')
    .description(
      "replace the policy from a YAML or JSON file (`-`: stdin) with `credentials:` (as atelier.yaml's egress.credentials) and `forbid:` (hosts); applies to workshops created from now on (maintainers)",
    )
    .action(async (file: string) => {
      const c = cli.ctx();
      const { setPolicy, policyText } = await import('./manage.js');
      const p = await setPolicy(c, file);
      await cli.render(c.output, p, () => policyText(p));
    });
  secrets
    .command('delete <name>')
    .alias('rm')
    .description('delete a secret; workshops holding a grant of it lose it at once (maintainers)')
    .action(async (name: string) => {
      const c = cli.ctx();
      const { deleteSecret } = await import('./manage.js');
      await deleteSecret(c, name);
      await cli.render(c.output, { deleted: name }, () => `secret ${name} deleted`);
    });
}
