/**
 * The server's supervisor where PID 1 is not systemd: a small detached Node process, run as a
 * script (`node supervisor.js --pid-file F --log-file F --env-file F -- COMMAND...`), that keeps
 * COMMAND (`atelier server start` of the `current` release) running:
 *
 * - writes its pid to --pid-file (removed when it stops) and appends the server's output to --log-file;
 * - reads --env-file (KEY=VALUE) before every start, so a changed configuration applies at the next one;
 * - restarts the server when it exits without being asked to, after 1 s, doubling up to 30 s while
 *   it keeps failing within a minute of starting;
 * - SIGTERM/SIGINT: stops the server (SIGTERM, SIGKILL after 90 s) and exits;
 * - SIGHUP: restarts the server at once (`atelier server upgrade` uses it after switching `current`).
 *
 * It imports nothing but Node's own modules: it runs from dist/ as compiled, not from the CLI's bundle.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

function envFrom(file: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(line.trim());
    if (m) env[m[1]!] = m[2]!;
  }
  return env;
}

function main(): void {
  const { values, positionals } = parseArgs({
    options: { 'pid-file': { type: 'string' }, 'log-file': { type: 'string' }, 'env-file': { type: 'string' } },
    allowPositionals: true,
  });
  const pidFile = values['pid-file'];
  const logFile = values['log-file'];
  const envFile = values['env-file'];
  if (!pidFile || !logFile || !envFile || positionals.length === 0) {
    process.stderr.write('usage: supervisor.js --pid-file F --log-file F --env-file F -- COMMAND [ARG...]\n');
    process.exit(2);
  }
  const log = (line: string): void => appendFileSync(logFile, `${new Date().toISOString()} supervisor: ${line}\n`);
  writeFileSync(pidFile, `${process.pid}\n`);

  let child: ChildProcess | undefined;
  let stopping = false;
  let restartNow = false;
  let delay = 1000;
  let timer: NodeJS.Timeout | undefined;

  const start = (): void => {
    timer = undefined;
    let fileEnv: Record<string, string>;
    try {
      fileEnv = envFrom(envFile);
    } catch (err) {
      log(`cannot read ${envFile} (${(err as Error).message}); trying again in ${delay / 1000} s`);
      schedule();
      return;
    }
    const out = openSync(logFile, 'a');
    const startedAt = Date.now();
    const c = spawn(positionals[0]!, positionals.slice(1), {
      env: { PATH: DEFAULT_PATH, HOME: process.env.HOME ?? '/root', LANG: 'C.UTF-8', ...fileEnv },
      stdio: ['ignore', out, out],
      // Not /: the server allows cloning local repositories from its working directory.
      cwd: process.env.HOME ?? '/root',
    });
    child = c;
    log(`started the server (pid ${c.pid})`);
    c.on('error', (err) => log(`could not start ${positionals[0]}: ${err.message}`));
    c.on('exit', (code, signal) => {
      child = undefined;
      if (stopping) {
        log(`server stopped (${signal ?? code})`);
        rmSync(pidFile, { force: true });
        process.exit(0);
      }
      if (restartNow) {
        restartNow = false;
        delay = 1000;
        log('restarting the server as asked (SIGHUP)');
        start();
        return;
      }
      // A server that ran for a minute was healthy: start again from the short delay.
      if (Date.now() - startedAt > 60_000) delay = 1000;
      log(`server exited (${signal ?? `code ${code}`}); restarting in ${delay / 1000} s`);
      schedule();
    });
  };
  const schedule = (): void => {
    timer = setTimeout(start, delay);
    delay = Math.min(delay * 2, 30_000);
  };

  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: stopping the server`);
    if (timer) clearTimeout(timer);
    if (!child) {
      rmSync(pidFile, { force: true });
      process.exit(0);
    }
    child.kill('SIGTERM');
    setTimeout(() => child?.kill('SIGKILL'), 90_000).unref();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', () => {
    if (stopping) return;
    if (child) {
      restartNow = true;
      child.kill('SIGTERM');
    } else {
      if (timer) clearTimeout(timer);
      delay = 1000;
      start();
    }
  });
  start();
}

main();
