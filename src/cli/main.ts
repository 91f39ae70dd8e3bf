import { readFileSync } from 'node:fs';

const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** Exit codes: the command's own for `exec`; 1 for an error; 2 for a usage error. */
async function main(argv: string[]): Promise<number> {
  if (argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V')) {
    process.stdout.write(`${VERSION}\n`);
    return 0;
  }
  // Everything heavier than package.json loads only past this point: `--version` stays instant.
  const { Command, Option, CommanderError } = await import('commander');
  const { loadConfig } = await import('../core/index.js');
  const config = loadConfig();
  const { createCommandContext } = await import('./context.js');
  const { render } = await import('./output.js');
  let exitCode = 0;

  const program = new Command('atelier')
    .description('Run AI coding agents in contained workshops, with a human in the loop.')
    .version(VERSION)
    .addOption(new Option('--context <name>', 'server context to use (default: ATELIER_CONTEXT, then the current context)'))
    .addOption(new Option('-o, --output <format>', 'output format').choices(['table', 'json', 'yaml']).default('table'))
    .showHelpAfterError()
    .exitOverride();

  const ctx = () => {
    const o = program.opts<{ context?: string; output: 'table' | 'json' | 'yaml' }>();
    return createCommandContext(config, o.output, o.context);
  };

  const server = program.command('server').description('run the Atelier server on this machine');
  server
    .command('start')
    .description('run the server in the foreground (embedded PostgreSQL unless --database-url)')
    .option(
      '--data-dir <dir>',
      'data directory (default: ATELIER_DATA_DIR, then $XDG_DATA_HOME/atelier, or /var/lib/atelier as root without XDG_DATA_HOME)',
    )
    .option('--listen <host:port>', 'address to listen on (default 127.0.0.1:7878)')
    .option('--database-url <url>', 'external PostgreSQL (default: embedded)')
    .option(
      '--allow-repo-root <dir...>',
      'directories local repositories may be cloned from (default: your home and the current directory)',
    )
    .action(async (flags) => {
      const { serverStart } = await import('./commands/server/start.js');
      // Exit as soon as the shutdown is done, whatever handle a library may still hold.
      process.exit(await serverStart(config, flags as object, VERSION));
    });

  const ws = program.command('workshops').alias('ws').description('create, list, suspend, resume and delete workshops');
  ws.command('create')
    .description('clone a repository into a new sandbox and start it')
    .requiredOption('--repo <path|url>', 'local path, file://, https://, ssh:// or git@host:path')
    .option('--name <name>', 'unique name (default: from the repository)')
    .option('--devcontainer <path>', 'devcontainer.json inside the repository (default: .devcontainer/devcontainer.json)')
    .option('--budget <usd>', 'LLM budget in USD, exported as ATELIER_MAX_BUDGET_USD')
    .option('--cpus <n>', 'CPU limit (cores)')
    .option('--memory <size>', 'memory limit, for example 2g')
    .option('--pids <n>', 'process limit')
    .action(async (flags) => {
      const c = ctx();
      const { createWorkshop } = await import('./commands/workshops/create.js');
      const { workshopDetail } = await import('./commands/workshops/render.js');
      const w = await createWorkshop(c, flags as { repo: string });
      await render(c.output, w, () => workshopDetail(w));
      if (w.status === 'Failed') {
        process.stderr.write(
          `error: workshop ${w.id} failed: ${w.statusReason ?? 'unknown reason'}; remove it with \`atelier workshops delete ${w.id}\`\n`,
        );
        exitCode = 1;
      }
    });
  ws.command('list')
    .alias('ls')
    .description('list workshops')
    .action(async () => {
      const c = ctx();
      const { listWorkshops } = await import('./commands/workshops/lifecycle.js');
      const { workshopTable } = await import('./commands/workshops/render.js');
      const items = await listWorkshops(c);
      await render(c.output, items, () => workshopTable(items));
    });
  for (const [verb, fn, help] of [
    ['status', 'workshopStatus', 'show one workshop'],
    ['stop', 'stopWorkshop', 'suspend a workshop (its processes are frozen, nothing is lost)'],
    ['resume', 'resumeWorkshop', 'resume a suspended workshop exactly as it was'],
  ] as const) {
    ws.command(`${verb} <id>`)
      .description(help)
      .action(async (id: string) => {
        const c = ctx();
        const mod = await import('./commands/workshops/lifecycle.js');
        const { workshopDetail } = await import('./commands/workshops/render.js');
        const w = await mod[fn](c, id);
        await render(c.output, w, () => workshopDetail(w));
      });
  }
  ws.command('delete <id>')
    .alias('rm')
    .description('delete a workshop and everything it owned')
    .action(async (id: string) => {
      const c = ctx();
      const { deleteWorkshop } = await import('./commands/workshops/lifecycle.js');
      const r = await deleteWorkshop(c, id);
      await render(c.output, r, () => `deleted ${r.id}`);
    });

  program
    .command('exec <id> [command...]')
    .description('run a command in a workshop: atelier exec ID -- CMD [ARGS...]; exits with its exit code')
    .option('--cwd <dir>', 'working directory (relative to /workspace)')
    .option('-e, --env <KEY=VALUE...>', 'environment variables', [])
    .option('-i, --interactive', "send this terminal's standard input (read to the end) to the command")
    .option('--timeout <seconds>', 'kill the command after this many seconds (exit code 124)')
    .action(async (id: string, command: string[], flags) => {
      const { execCommand } = await import('./commands/exec/run.js');
      exitCode = await execCommand(ctx(), id, command, flags as { env: string[] });
    });

  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) {
      return err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help' ? 0 : 2;
    }
    throw err;
  }
  return exitCode;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    const code = (err as { code?: unknown }).code;
    if (err instanceof Error && err.name === 'AtelierError') {
      process.stderr.write(`error: ${err.message} (${String(code)})\n`);
    } else {
      process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    }
    process.exitCode = 1;
  },
);
