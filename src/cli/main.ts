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
      '--public-url <url>',
      'URL browsers and CLIs use to reach this server (default: ATELIER_PUBLIC_URL, then http://<listen address>)',
    )
    .option(
      '--identity-config <file>',
      'YAML file naming an external OIDC issuer and its group mapping (default: ATELIER_IDENTITY_CONFIG, else the embedded issuer)',
    )
    .option(
      '--allow-repo-root <dir...>',
      'directories local repositories may be cloned from (default: your home and the current directory)',
    )
    .action(async (flags) => {
      const { serverStart } = await import('./commands/server/start.js');
      // Exit as soon as the shutdown is done, whatever handle a library may still hold.
      process.exit(await serverStart(config, flags as object, VERSION));
    });

  server
    .command('rotate-keys')
    .description("rotate the embedded issuer's signing key (admin of the default tenant); nobody is logged out")
    .action(async () => {
      const c = ctx();
      const { rotateKeys } = await import('./commands/tokens/manage.js');
      const r = await rotateKeys(c);
      await render(c.output, r, () => `new signing key ${r.kid}; tokens signed with the previous one stay valid until they expire`);
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
    .option(
      '--simulator <type[:arg]>',
      'start a simulator with it (repeatable): postgres, postgres:15, redis, wiremock:./tests/mocks',
      (v: string, acc: string[]) => [...acc, v],
      [] as string[],
    )
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
  ws.command('publish <id>')
    .description('ask to publish the workspace as a branch: once approved, the server commits it and pushes (never the agent)')
    .requiredOption('--branch <name>', 'the branch to push, e.g. feature/login')
    .option('--remote <url|path>', 'where to push (default: the repository the workshop was cloned from)')
    .option('--title <text>', 'the commit message')
    .option('--justification <text>', 'why (shown to the decider)')
    .action(async (id: string, flags: { branch: string; remote?: string; title?: string; justification?: string }) => {
      const c = ctx();
      const { publishWorkshop } = await import('./commands/workshops/publish.js');
      const { approvalDetail } = await import('./commands/approvals/manage.js');
      const a = await publishWorkshop(c, id, flags);
      await render(c.output, a, () => approvalDetail(a));
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
  const sims = program
    .command('simulators')
    .alias('sims')
    .description("a workshop's throwaway services (postgres, redis…), reachable inside it at <name>.atelier.internal");
  sims
    .command('list <id>')
    .alias('ls')
    .description('each simulator: state, endpoint inside the workshop, memory')
    .action(async (id: string) => {
      const c = ctx();
      const { listSimulators, simulatorTable } = await import('./commands/simulators/manage.js');
      const items = await listSimulators(c, id);
      await render(c.output, items, () => simulatorTable(items));
    });
  sims
    .command('request <id> <type>')
    .description('start one more simulator in a running workshop (reachable at once, no restart)')
    .option('--name <name>', 'its name inside the workshop (default: the type, e.g. postgres.atelier.internal)')
    .option('--version <version>', 'major version wanted (refused clearly when not installed)')
    .option(
      '--env <KEY=VALUE>',
      'container-style setting (repeatable), e.g. POSTGRES_DB=orders',
      (v: string, a: string[]) => [...a, v],
      [] as string[],
    )
    .option(
      '--option <key=value>',
      'type-specific option (repeatable), e.g. database=orders_test',
      (v: string, a: string[]) => [...a, v],
      [] as string[],
    )
    .action(async (id: string, type: string, flags) => {
      const c = ctx();
      const { requestSimulator, simulatorDetail } = await import('./commands/simulators/manage.js');
      const s = await requestSimulator(c, id, type, flags as Record<string, never>);
      await render(c.output, s, () => simulatorDetail(s));
      if (s.status === 'Failed') exitCode = 1;
    });
  sims
    .command('logs <id> <name>')
    .description("the end of a simulator's own log")
    .option('--tail <bytes>', 'how much of the end to show (default 64 KiB)')
    .action(async (id: string, name: string, flags: { tail?: string }) => {
      const c = ctx();
      const { simulatorLogs } = await import('./commands/simulators/manage.js');
      process.stdout.write(await simulatorLogs(c, id, name, flags.tail));
    });
  sims
    .command('reset <id> <name>')
    .description('return a simulator to its initial state (fresh database, no keys)')
    .action(async (id: string, name: string) => {
      const c = ctx();
      const { resetSimulator, simulatorDetail } = await import('./commands/simulators/manage.js');
      const s = await resetSimulator(c, id, name);
      await render(c.output, s, () => simulatorDetail(s));
    });

  ws.command('egress <id>')
    .description("what the workshop's egress proxy allowed and denied (time, host, port, why)")
    .option('--follow', 'keep printing decisions as they are made (Ctrl-C to stop)')
    .option('--limit <n>', 'how many of the last decisions to show first (default 100)')
    .action(async (id: string, flags: { follow?: boolean; limit?: string }) => {
      const c = ctx();
      const { listEgress, followEgress, egressTable, egressLine } = await import('./commands/workshops/egress.js');
      if (!flags.follow) {
        const items = await listEgress(c, id, flags);
        await render(c.output, items, () => egressTable(items));
        return;
      }
      await followEgress(c, id, flags, (d) => {
        process.stdout.write(c.output === 'table' ? `${egressLine(d)}\n` : `${JSON.stringify(d)}\n`);
      });
    });
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

  const { registerTerminalCommands } = await import('./commands/ssh/register.js');
  registerTerminalCommands(program, ctx, (code) => (exitCode = code));

  const auth = program.command('auth').description('log in to the server of a context, show who you are, log out');
  auth
    .command('login')
    .description('log in with your browser (OAuth device flow); the session is stored for the context and refreshes by itself')
    .option('--no-browser', 'only print the URL and the code, do not open a browser')
    .action(async (flags: { browser: boolean }) => {
      const c = ctx();
      const { login } = await import('./commands/auth/login.js');
      const { keyValues } = await import('./output.js');
      const r = await login(c, {
        browser: flags.browser,
        say: (line) => process.stderr.write(`${line}\n`),
        // A browser can only open in a graphical session (this is a terminal-side fact, not configuration).
        canOpenBrowser: config.canOpenBrowser,
      });
      if (r === 'cancelled') {
        process.stderr.write('login cancelled: nothing was saved\n');
        // The poll may sleep for seconds before it notices; nothing is left to finish.
        process.exit(130);
      }
      await render(c.output, r, () =>
        keyValues([
          ['logged in as', r.user],
          ['tenant', r.tenant],
          ['role', r.role],
          ['context', r.context],
          ['expires', r.expiresAt ?? 'unknown (refreshed automatically)'],
        ]),
      );
    });
  auth
    .command('status')
    .description('show the user, tenant, role and token expiry of the current context')
    .action(async () => {
      const c = ctx();
      const { authStatus, statusText } = await import('./commands/auth/status.js');
      const s = await authStatus(c);
      await render(c.output, s, () => statusText(s));
    });
  auth
    .command('logout')
    .description('revoke the session at the issuer and remove it from this machine (also when the server is down)')
    .action(async () => {
      const c = ctx();
      const { logout } = await import('./commands/auth/logout.js');
      const r = await logout(c);
      await render(c.output, r, () => r.note);
    });

  const context = program.command('context').description('servers this CLI talks to: add, use, list, current, remove');
  context
    .command('add <name>')
    .description('add a server context (log in with `atelier auth login --context NAME`, or give an API token on stdin)')
    .requiredOption('--url <url>', "the server's URL, for example https://atelier.example.com")
    .option('--tenant <tenant>', 'tenant to act in (default: your first)')
    .option('--token-stdin', 'read an API token from standard input instead of logging in')
    .action(async (name: string, flags: { url: string; tenant?: string; tokenStdin?: boolean }) => {
      const c = ctx();
      const { addContext, contextTable } = await import('./commands/context/manage.js');
      let token: string | undefined;
      if (flags.tokenStdin) {
        const chunks: Buffer[] = [];
        for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
        token = Buffer.concat(chunks).toString('utf8').trim();
      }
      const r = await addContext(c, name, {
        url: flags.url,
        ...(flags.tenant ? { tenant: flags.tenant } : {}),
        ...(flags.tokenStdin ? { token } : {}),
      });
      await render(c.output, r, () =>
        r.auth === 'oidc' ? `${contextTable([r])}\nlog in with \`atelier auth login --context ${r.name}\`` : contextTable([r]),
      );
    });
  context
    .command('use <name>')
    .description('make a context the current one')
    .action(async (name: string) => {
      const c = ctx();
      const { useContext } = await import('./commands/context/manage.js');
      const r = await useContext(c, name);
      await render(c.output, r, () => `current context: ${r.current}`);
    });
  context
    .command('list')
    .alias('ls')
    .description('list contexts (* marks the one in use)')
    .action(async () => {
      const c = ctx();
      const { listContexts, contextTable } = await import('./commands/context/manage.js');
      const rows = await listContexts(c);
      await render(c.output, rows, () => contextTable(rows));
    });
  context
    .command('current')
    .description('show the context in use (--context, then ATELIER_CONTEXT, then the current context)')
    .action(async () => {
      const c = ctx();
      const { currentContext } = await import('./commands/context/manage.js');
      const r = await currentContext(c);
      await render(c.output, r, () => r.name);
    });
  context
    .command('remove <name>')
    .alias('rm')
    .description('forget a context and its stored credential (nothing is revoked on the server)')
    .action(async (name: string) => {
      const c = ctx();
      const { removeContext } = await import('./commands/context/manage.js');
      const r = await removeContext(c, name);
      await render(c.output, r, () => `removed context ${r.name}${r.credentialRemoved ? ' and its stored credential' : ''}`);
    });

  const users = program.command('users').description('local accounts of the embedded issuer (admin)');
  users
    .command('add <name>')
    .description('create a user; prints a temporary password, to be changed at the first login')
    .option('--role <role>', 'viewer, member, maintainer or admin (default member)')
    .option('--tenant <tenant>', 'tenant to add the user to (default: the current one)')
    .action(async (name: string, flags: { role?: string; tenant?: string }) => {
      const c = ctx();
      const { addUser, addedUserText } = await import('./commands/users/manage.js');
      const r = await addUser(c, name, flags);
      await render(c.output, r, () => addedUserText(r));
    });
  users
    .command('list')
    .alias('ls')
    .description('list users')
    .action(async () => {
      const c = ctx();
      const { listUsers, userTable } = await import('./commands/users/manage.js');
      const items = await listUsers(c);
      await render(c.output, items, () => userTable(items));
    });
  users
    .command('disable <name>')
    .description('disable a user: no more logins, and their sessions stop refreshing')
    .action(async (name: string) => {
      const c = ctx();
      const { disableUser, userText } = await import('./commands/users/manage.js');
      const u = await disableUser(c, name);
      await render(c.output, u, () => userText(u));
    });

  const tokens = program.command('tokens').description('API tokens for automation: create, list, revoke');
  tokens
    .command('create')
    .description('create an API token (shown once)')
    .option('--name <name>', 'a name to recognise it by')
    .option('--scope <role>', 'viewer, member, maintainer or admin; at most your own role (default: your role)')
    .option('--expires <duration>', 'lifetime such as 12h, 30d, 1y, or "never"')
    .option('--workshop <id>', 'an agent token that can act only for this workshop')
    .option('--user <name>', 'for another user of the tenant, such as a service account (admins only)')
    .option('--tenant <name>', 'for another tenant you belong to (default: the current one)')
    .action(async (flags: { name?: string; scope?: string; expires?: string; workshop?: string; user?: string; tenant?: string }) => {
      const c = ctx();
      const { createToken, createdTokenText } = await import('./commands/tokens/manage.js');
      const t = await createToken(c, flags);
      await render(c.output, t, () => createdTokenText(t));
    });
  tokens
    .command('list')
    .alias('ls')
    .description('list API tokens (never their secret)')
    .action(async () => {
      const c = ctx();
      const { listTokens, tokenTable } = await import('./commands/tokens/manage.js');
      const items = await listTokens(c);
      await render(c.output, items, () => tokenTable(items));
    });
  tokens
    .command('revoke <id>')
    .description('revoke an API token: it stops working at once')
    .action(async (id: string) => {
      const c = ctx();
      const { revokeToken } = await import('./commands/tokens/manage.js');
      const r = await revokeToken(c, id);
      await render(c.output, r, () => `revoked ${r.id}`);
    });

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
      const c = ctx();
      const { listApprovals, approvalTable } = await import('./commands/approvals/manage.js');
      const items = await listApprovals(c, flags);
      await render(c.output, items, () => approvalTable(items));
    });
  approvals
    .command('show <id>')
    .description('one request: what, who asks, why, and its decision')
    .action(async (id: string) => {
      const c = ctx();
      const { showApproval, approvalDetail } = await import('./commands/approvals/manage.js');
      const a = await showApproval(c, id);
      await render(c.output, a, () => approvalDetail(a));
    });
  const decide = async (id: string, decision: 'APPROVE' | 'REJECT', flags: { reason?: string }): Promise<void> => {
    const c = ctx();
    const { decideApproval, approvalDetail } = await import('./commands/approvals/manage.js');
    const a = await decideApproval(c, id, decision, flags.reason);
    await render(c.output, a, () => approvalDetail(a));
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
      const c = ctx();
      const { watchApprovals } = await import('./commands/approvals/watch.js');
      const { eventLine } = await import('./commands/approvals/manage.js');
      await watchApprovals(c, (e) => {
        process.stdout.write(c.output === 'table' ? `${eventLine(e.type, e.approval)}\n` : `${JSON.stringify(e)}\n`);
      });
    });
  approvals
    .command('request')
    .description('file a request for a workshop (what an agent runs, with ATELIER_URL and ATELIER_TOKEN)')
    .requiredOption('--category <category>', 'ALLOWLIST_EXPANSION, SECRET_REQUEST, PR_GATEWAY or SHELL_COMMAND')
    .requiredOption('--payload <json>', 'what is asked, with a justification, e.g. \'{"host":"api.stripe.com","justification":"…"}\'')
    .option('--workshop <id>', "the workshop (default: the agent token's own)")
    .option('--wait', 'wait for the decision; exit 1 unless approved')
    .option('--timeout <seconds>', 'with --wait: give up after this long (the request stays pending)')
    .action(async (flags: { category: string; payload: string; workshop?: string; wait?: boolean; timeout?: string }) => {
      const c = ctx();
      const { requestApproval, requireApproved, approvalDetail } = await import('./commands/approvals/manage.js');
      const a = await requestApproval(c, flags, async () => (await (await c.api()).call('whoami')).workshopId);
      await render(c.output, a, () => approvalDetail(a));
      if (flags.wait) requireApproved(a);
    });

  const secrets = program.command('secrets').description("the tenant's secrets, granted to a workshop only by an approved SECRET_REQUEST");
  secrets
    .command('set <name>')
    .description('set (or replace) a secret; the value is read from stdin, never from an argument (maintainers)')
    .action(async (name: string) => {
      const c = ctx();
      const { readValue, setSecret } = await import('./commands/secrets/manage.js');
      const s = await setSecret(c, name, await readValue());
      await render(c.output, s, () => `secret ${s.name} set`);
    });
  secrets
    .command('list')
    .alias('ls')
    .description('names of the secrets, who set them and when (never values)')
    .action(async () => {
      const c = ctx();
      const { listSecrets, secretTable } = await import('./commands/secrets/manage.js');
      const items = await listSecrets(c);
      await render(c.output, items, () => secretTable(items));
    });
  secrets
    .command('delete <name>')
    .alias('rm')
    .description('delete a secret; workshops holding a grant of it lose it at once (maintainers)')
    .action(async (name: string) => {
      const c = ctx();
      const { deleteSecret } = await import('./commands/secrets/manage.js');
      await deleteSecret(c, name);
      await render(c.output, { deleted: name }, () => `secret ${name} deleted`);
    });

  program
    .command('audit')
    .description('the approvals audit')
    .command('verify')
    .description('recompute the hash chain of the approvals audit: says whether any row was changed, removed or reordered')
    .action(async () => {
      const c = ctx();
      const { verifyAudit, verificationText } = await import('./commands/audit/verify.js');
      const v = await verifyAudit(c);
      await render(c.output, v, () => verificationText(v));
      if (!v.ok) exitCode = 1;
    });

  const projects = program.command('projects').description('projects whose infrastructure typed actions change: add, list, remove');
  projects
    .command('add <path>')
    .description("register a project directory of the server's machine (atelier.yaml is created with commented defaults if absent)")
    .option('--name <name>', 'name to refer to it by (default: the directory name)')
    .action(async (path: string, flags: { name?: string }) => {
      const c = ctx();
      const { addProject, projectTable } = await import('./commands/projects/manage.js');
      const r = await addProject(c, path, flags);
      await render(c.output, r, () => `${projectTable([r.project])}${r.created ? '\ncreated atelier.yaml with commented defaults' : ''}`);
    });
  projects
    .command('list')
    .alias('ls')
    .description('list registered projects')
    .action(async () => {
      const c = ctx();
      const { listProjects, projectTable } = await import('./commands/projects/manage.js');
      const items = await listProjects(c);
      await render(c.output, items, () => projectTable(items));
    });
  projects
    .command('remove <project>')
    .alias('rm')
    .description('forget a project (its files, atelier.yaml and journal stay as they are)')
    .action(async (ref: string) => {
      const c = ctx();
      const { removeProject } = await import('./commands/projects/manage.js');
      const r = await removeProject(c, ref);
      await render(c.output, r, () => `removed project ${r.project.name} (its files are untouched)`);
    });

  const actions = program.command('actions').description('typed infrastructure actions on a project: list, plan, apply, rollback, journal');
  actions
    .command('list')
    .description('the catalog: id, class, parameters and preconditions evaluated now')
    .requiredOption('--project <project>', 'project name or id')
    .action(async (flags: { project: string }) => {
      const c = ctx();
      const { listActions } = await import('./commands/actions/run.js');
      const { catalogTable } = await import('./commands/actions/render.js');
      const items = await listActions(c, flags.project);
      await render(c.output, items, () => catalogTable(items));
    });
  actions
    .command('plan <action>')
    .description('show the full ordered plan (diffs, commands, services) without changing anything')
    .requiredOption('--project <project>', 'project name or id')
    .option('--param <key=value...>', 'a parameter (repeatable); a value starting with [ or { is JSON', [])
    .action(async (action: string, flags: { project: string; param: string[] }) => {
      const c = ctx();
      const { planAction } = await import('./commands/actions/run.js');
      const { planText } = await import('./commands/actions/render.js');
      const p = await planAction(c, action, flags.project, flags.param);
      await render(c.output, p, () => planText(p));
    });
  actions
    .command('apply <plan-id>')
    .description('apply exactly that plan (after confirmation), verify it, and journal it')
    .option('-y, --yes', 'do not ask for confirmation')
    .action(async (planId: string, flags: { yes?: boolean }) => {
      const c = ctx();
      const { getPlan, applyPlan } = await import('./commands/actions/run.js');
      const { planText, executionText } = await import('./commands/actions/render.js');
      const plan = await getPlan(c, planId);
      if (!flags.yes) {
        const { AtelierError } = await import('../core/index.js');
        if (!process.stdin.isTTY)
          throw new AtelierError('INVALID_ARGUMENT', 'no terminal to confirm in: review the plan, then pass --yes', { field: 'yes' });
        process.stderr.write(`${planText(plan)}\n\n`);
        const { createInterface } = await import('node:readline/promises');
        const rl = createInterface({ input: process.stdin, output: process.stderr });
        const answer = await rl.question('Apply this plan? [y/N] ');
        rl.close();
        if (!/^y(es)?$/i.test(answer.trim())) {
          process.stderr.write('not applied\n');
          exitCode = 1;
          return;
        }
      }
      const x = await applyPlan(c, plan);
      await render(c.output, x, () => executionText(x));
      if (x.status !== 'applied') exitCode = 1;
    });
  actions
    .command('rollback <execution-id>')
    .description('apply the inverse recorded in the journal for that execution, and verify it')
    .action(async (executionId: string) => {
      const c = ctx();
      const { rollbackExecution } = await import('./commands/actions/run.js');
      const { executionText } = await import('./commands/actions/render.js');
      const x = await rollbackExecution(c, executionId);
      await render(c.output, x, () => executionText(x));
      if (x.status !== 'rolled_back') exitCode = 1;
    });
  actions
    .command('journal')
    .description("the project's actions journal: executions, their status, interrupted ones, what can be rolled back")
    .requiredOption('--project <project>', 'project name or id')
    .action(async (flags: { project: string }) => {
      const c = ctx();
      const { readActionJournal } = await import('./commands/actions/run.js');
      const { journalText } = await import('./commands/actions/render.js');
      const j = await readActionJournal(c, flags.project);
      await render(c.output, j, () => journalText(j));
    });

  const mcp = program.command('mcp').description('MCP: workshops as tools for desktop agents (Claude, Cursor, VS Code, Windsurf)');
  mcp
    .command('serve')
    .description('stdio MCP server for an MCP client to start; talks to the server of --context')
    .option('--workshop <id>', 'every tool acts on this workshop only')
    .option('--read-only', 'expose only list, read and diff')
    .action(async (flags: { workshop?: string; readOnly?: boolean }) => {
      const { mcpServe } = await import('./commands/mcp/serve.js');
      await mcpServe(ctx(), flags, VERSION);
      // The client is gone: nothing else to wait for (idle HTTP keep-alive sockets).
      process.exit(0);
    });

  mcp
    .command('install-config')
    .description("add this context's MCP server (atelier mcp serve --context NAME) to an MCP client's own configuration")
    .addOption(
      new Option('--client <name>', 'the client (default: every one installed here)').choices([
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
      const c = ctx();
      const { installConfig, describeInstall } = await import('./commands/mcp/installConfig.js');
      const results = await installConfig(c, flags);
      await render(c.output, results, () => describeInstall(results));
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
