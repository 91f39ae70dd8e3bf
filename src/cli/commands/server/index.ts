import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier server …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
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
    .option(
      '--node-name <name>',
      "this node's name in the installation (default: the host name and 4 characters of the data dir's node id)",
    )
    .option('--advertise-url <url>', 'where the other nodes reach this node (default: http://<listen address>)')
    .action(async (flags) => {
      const { serverStart } = await import('./start.js');
      // Exit as soon as the shutdown is done, whatever handle a library may still hold.
      process.exit(await serverStart(cli.config, flags as object, cli.version));
    });

  server
    .command('doctor')
    .description('check this machine for a server: each check ok, warn or fail with its fix; --probe runs a workshop through the server')
    .option('--data-dir <dir>', 'data directory to check (default: as `server start`)')
    .option('--listen <host:port>', 'address the server is to listen on (default 127.0.0.1:7878)')
    .option('--domain <name>', 'public domain name: checks its DNS and that ports 80 and 443 are free')
    .option('--database-url <url>', 'external PostgreSQL (then no local PostgreSQL binaries are needed)')
    .option(
      '--probe',
      'also create, exec in, port-forward to, suspend, resume and delete a workshop through the current context, timing each step',
    )
    .option('--repo <path>', 'repository for the probe (default: a one-commit repository made in your home directory)')
    .action(async (flags) => {
      const c = cli.ctx();
      const { serverDoctor, doctorText } = await import('./doctor.js');
      const r = await serverDoctor(c, cli.config, flags as object);
      await cli.render(c.output, r, () => doctorText(r));
      cli.setExitCode(r.ok ? 0 : 1);
    });

  server
    .command('status')
    .description("the server: this data dir's service, version, uptime, database, certificate, disk, workshops, simulators, last errors")
    .option('--data-dir <dir>', 'data directory of the local service (default: as `server start`)')
    .option('--prefix <dir>', 'root of the host install whose certificate files to show (default /)')
    .action(async (flags) => {
      const c = cli.ctx();
      const { serverStatus, statusText } = await import('./status.js');
      const r = await serverStatus(c, cli.config, flags as object);
      await cli.render(c.output, r, () => statusText(r));
      cli.setExitCode(r.server ? 0 : 1);
    });

  server
    .command('rotate-keys')
    .description("rotate the embedded issuer's signing key (admin of the default tenant); nobody is logged out")
    .action(async () => {
      const c = cli.ctx();
      const { rotateKeys } = await import('../tokens/manage.js');
      const r = await rotateKeys(c);
      await cli.render(c.output, r, () => `new signing key ${r.kid}; tokens signed with the previous one stay valid until they expire`);
    });

  server
    .command('install')
    .description('install this release as a service: typed, journaled steps; a re-run changes nothing (root; docs/server.md)')
    .option('--prefix <dir>', 'root of the installed layout (default /: /opt/atelier, /etc/atelier, /var/lib/atelier)')
    .option('--data-dir <dir>', 'data directory (default /var/lib/atelier, or what the installed configuration says)')
    .option('--listen <host:port>', 'address the server listens on (default 127.0.0.1:7878)')
    .option('--database-url <url>', 'external PostgreSQL (default: an embedded cluster in the data dir)')
    .option('--public-url <url>', 'URL browsers and CLIs use to reach this server')
    .option('--domain <name>', 'serve HTTPS for this name (a certificate from --tls-cert/--tls-key, ACME with --email, else a local CA)')
    .option('--email <address>', 'ACME account: a certificate for --domain from the ACME CA when reachable (else a local CA)')
    .option('--acme-directory <url>', 'the ACME CA directory (default Let’s Encrypt)')
    .option('--tls-cert <file>', 'TLS certificate (PEM, chain after it); copied to /etc/atelier/tls')
    .option('--tls-key <file>', 'its private key (PEM, unencrypted); copied 0600')
    .option('--tls-listen <host:port>', 'where HTTPS is served (default 0.0.0.0:443)')
    .option(
      '--no-tls',
      'plain HTTP only: an installed TLS is removed (configuration, certificate and key; the local CA is kept) and the server restarted',
    )
    .option('--plan', 'show every step and what it would do; change nothing')
    .option('--yes', 'do not ask before applying (asked only on a terminal)')
    .option(
      '--kubernetes',
      "install the release's Helm chart on the kubeconfig's cluster with `helm upgrade --install` (no root; --plan prints the manifests)",
    )
    .option('--kubeconfig <file>', 'with --kubernetes: the kubeconfig (default KUBECONFIG, then ~/.kube/config)')
    .option('--kube-context <name>', "with --kubernetes: the kubeconfig's context (default its current context)")
    .option('--namespace <name>', 'with --kubernetes: the release namespace, made beforehand with the Secrets (default atelier)')
    .option('--release-name <name>', 'with --kubernetes: the Helm release (default atelier)')
    .option('--values <file>', 'with --kubernetes: chart values (YAML; repeatable)', (v: string, all: string[] = []) => [...all, v])
    .option('--set <key=value>', 'with --kubernetes: one chart value, as helm --set (repeatable)', (v: string, all: string[] = []) => [
      ...all,
      v,
    ])
    .action(async (flags, cmd: Command) => {
      const { serverInstall } = await import('./install.js');
      cli.setExitCode(await serverInstall(flags as object, (cmd.optsWithGlobals() as { output: string }).output, cli.config.pgBinDir));
    });

  server
    .command('uninstall')
    .description('remove the service, configuration and releases; keeps data and the master key unless --purge (root)')
    .option('--prefix <dir>', 'root of the installed layout (default /)')
    .option('--purge', 'also delete every workshop, the data dir, the master key and the logs (asks, or --yes)')
    .option('--yes', 'confirm --purge without asking')
    .action(async (flags, cmd: Command) => {
      const { serverUninstall } = await import('./uninstall.js');
      cli.setExitCode(await serverUninstall(flags as object, (cmd.optsWithGlobals() as { output: string }).output));
    });

  server
    .command('upgrade')
    .description(
      'move the installed service to another release: verify, unpack beside, back up the database, stop, start, health-check; rolls back by itself on failure (root)',
    )
    .option('--prefix <dir>', 'root of the installed layout (default /)')
    .option('--release <file|url>', 'the new release: a tarball (its .sha256 beside it), or the folder/URL holding LATEST')
    .option('--rollback', 'return to the release before the last upgrade')
    .action(async (flags, cmd: Command) => {
      const { serverUpgrade } = await import('./upgrade.js');
      cli.setExitCode(await serverUpgrade(flags as object, (cmd.optsWithGlobals() as { output: string }).output, cli.config.pgBinDir));
    });
}
