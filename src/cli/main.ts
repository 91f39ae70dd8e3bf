import { readFileSync } from 'node:fs';

/** Read when first needed (`--version` unbundled, `server start`): not at every command's start. */
let version: string | undefined;
const cliVersion = (): string =>
  (version ??= (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version);

/** Exit codes: the command's own for `exec`; 1 for an error; 2 for a usage error. */
async function main(argv: string[]): Promise<number> {
  if (argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V')) {
    process.stdout.write(`${cliVersion()}\n`);
    return 0;
  }
  // Everything heavier than package.json loads only past this point: `--version` stays instant.
  const { CommanderError } = await import('commander');
  const { loadConfig } = await import('../core/index.js');
  const { createProgram, VERSION_FLAGS } = await import('./program.js');
  const { program, exitCode } = await createProgram(loadConfig(), cliVersion, argv);

  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.code === 'commander.unknownOption' && VERSION_FLAGS.some((f) => err.message.includes(`'${f}'`)))
        process.stderr.write('`atelier --version` prints the version: give it alone, with no command\n');
      return err.code === 'commander.helpDisplayed' || err.code === 'commander.help' ? 0 : 2;
    }
    throw err;
  }
  return exitCode();
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
