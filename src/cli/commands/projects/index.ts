import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier projects …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const projects = program.command('projects').description('projects whose infrastructure typed actions change: add, list, remove');
  projects
    .command('add <path>')
    .description("register a project directory of the server's machine (atelier.yaml is created with commented defaults if absent)")
    .option('--name <name>', 'name to refer to it by (default: the directory name)')
    .action(async (path: string, flags: { name?: string }) => {
      const c = cli.ctx();
      const { addProject, projectTable } = await import('./manage.js');
      const r = await addProject(c, path, flags);
      await cli.render(
        c.output,
        r,
        () => `${projectTable([r.project])}${r.created ? '\ncreated atelier.yaml with commented defaults' : ''}`,
      );
    });
  projects
    .command('list')
    .alias('ls')
    .description('list registered projects')
    .action(async () => {
      const c = cli.ctx();
      const { listProjects, projectTable } = await import('./manage.js');
      const items = await listProjects(c);
      await cli.render(c.output, items, () => projectTable(items));
    });
  projects
    .command('remove <project>')
    .alias('rm')
    .description('forget a project (its files, atelier.yaml and journal stay as they are)')
    .action(async (ref: string) => {
      const c = cli.ctx();
      const { removeProject } = await import('./manage.js');
      const r = await removeProject(c, ref);
      await cli.render(c.output, r, () => `removed project ${r.project.name} (its files are untouched)`);
    });
}
