import { readFileSync } from 'node:fs';
import type { Cli } from './cli.js';

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

  const cli: Cli = {
    config,
    version: VERSION,
    ctx,
    render,
    Option,
    setExitCode: (code) => {
      exitCode = code;
    },
  };
  const nouns = await Promise.all([
    import('./commands/server/index.js'),
    import('./commands/workshops/index.js'),
    import('./commands/simulators/index.js'),
    import('./commands/exec/index.js'),
  ]);
  for (const noun of nouns) noun.register(program, cli);
  const { registerTerminalCommands } = await import('./commands/ssh/register.js');
  registerTerminalCommands(program, ctx, (code) => (exitCode = code));
  const more = await Promise.all([
    import('./commands/auth/index.js'),
    import('./commands/context/index.js'),
    import('./commands/users/index.js'),
    import('./commands/tokens/index.js'),
    import('./commands/approvals/index.js'),
    import('./commands/secrets/index.js'),
    import('./commands/audit/index.js'),
    import('./commands/projects/index.js'),
    import('./commands/actions/index.js'),
    import('./commands/mcp/index.js'),
  ]);
  for (const noun of more) noun.register(program, cli);

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

// A reader that went away (`atelier workshops list -o json | head`) ends the command quietly, as
// other command-line tools do, instead of with an EPIPE stack trace.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
    process.exit(0);
  });
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
