import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier mcp …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const mcp = program.command('mcp').description('MCP: workshops as tools for desktop agents (Claude, Cursor, VS Code, Windsurf)');
  mcp
    .command('serve')
    .description('MCP server for an MCP client: stdio (the client starts it) or --http; talks to the server of --context')
    .option('--workshop <id>', 'every tool acts on this workshop only (its id or its name)')
    .option('--read-only', 'expose only list, read and diff')
    .option(
      '--http <[host:]port>',
      'serve Streamable HTTP (with its SSE stream) at http://HOST:PORT/mcp instead of stdio; loopback by default, a bearer token required',
    )
    .action(async (flags: { workshop?: string; readOnly?: boolean; http?: string }) => {
      if (flags.http !== undefined) {
        const { mcpServeHttp } = await import('./http.js');
        await mcpServeHttp(cli.ctx(), { ...flags, http: flags.http }, cli.version);
        process.exit(0);
      }
      const { mcpServe } = await import('./serve.js');
      await mcpServe(cli.ctx(), flags, cli.version);
      // The client is gone: nothing else to wait for (idle HTTP keep-alive sockets).
      process.exit(0);
    });

  mcp
    .command('install-config')
    .description("add this context's MCP server (atelier mcp serve --context NAME) to an MCP client's own configuration")
    .addOption(
      new cli.Option('--client <name>', 'the client (default: every one installed here)').choices([
        'claude-desktop',
        'claude-code',
        'cursor',
        'vscode',
        'windsurf',
      ]),
    )
    .option('--remove', "remove this context's server instead")
    .option('--dry-run', 'print the change as a diff, write nothing')
    .action(async (flags: { client?: string; remove?: boolean; dryRun?: boolean }) => {
      const c = cli.ctx();
      const { installConfig, describeInstall } = await import('./installConfig.js');
      const results = await installConfig(c, flags);
      await cli.render(c.output, results, () => describeInstall(results));
    });
}
