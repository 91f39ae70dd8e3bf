import type { Config } from '../../../core/index.js';

export interface ServerStartFlags {
  dataDir?: string;
  listen?: string;
  databaseUrl?: string;
  allowRepoRoot?: string[];
  publicUrl?: string;
  identityConfig?: string;
  nodeName?: string;
  advertiseUrl?: string;
}

/** `atelier server start`: runs in the foreground until SIGTERM or SIGINT. */
export async function serverStart(config: Config, flags: ServerStartFlags, version: string): Promise<number> {
  const { startServer } = await import('../../../server/index.js');
  const say = (line: string): void => {
    process.stderr.write(`atelier: ${line}\n`);
  };
  const server = await startServer(
    {
      version,
      // This very program (node runs a script: argv[1] is it), so the Console runs the server's own release.
      cliEntry: process.argv[1]!,
      say,
      ...(flags.dataDir !== undefined ? { dataDir: flags.dataDir } : {}),
      ...(flags.listen !== undefined ? { listen: flags.listen } : {}),
      ...(flags.databaseUrl !== undefined ? { databaseUrl: flags.databaseUrl } : {}),
      ...(flags.publicUrl !== undefined ? { publicUrl: flags.publicUrl } : {}),
      ...(flags.identityConfig !== undefined ? { identityConfig: flags.identityConfig } : {}),
      ...(flags.nodeName !== undefined ? { nodeName: flags.nodeName } : {}),
      ...(flags.advertiseUrl !== undefined ? { advertiseUrl: flags.advertiseUrl } : {}),
      ...(flags.allowRepoRoot && flags.allowRepoRoot.length > 0 ? { allowRepoRoots: flags.allowRepoRoot } : {}),
    },
    config,
  );
  say(`server ready at ${server.url}`);
  say(`admin credentials: ${server.credentialsPath}`);
  say('create a workshop: atelier workshops create --repo PATH');
  return new Promise((resolve) => {
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) return;
      stopping = true;
      say(`${signal}: stopping (workshops keep running and are picked up at the next start)`);
      server.close().then(
        () => resolve(0),
        (err: Error) => {
          say(`shutdown: ${err.message}`);
          resolve(1);
        },
      );
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}
