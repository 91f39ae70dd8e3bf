import { execFile, spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parseListen } from '../../../../core/index.js';
import type { HostLayout } from './layout.js';

const run = promisify(execFile);

/** systemd when it is the init system (sd_booted's test), else Atelier's own supervisor. */
export function serviceKind(): 'systemd' | 'supervisor' {
  return existsSync('/run/systemd/system') ? 'systemd' : 'supervisor';
}

/** The command the service runs: the `current` release's server, with the Node.js shipped in it. */
export function serverCommand(layout: HostLayout): string[] {
  return [join(layout.current, 'node/bin/node'), join(layout.current, 'bin/atelier.mjs'), 'server', 'start'];
}

export function unitText(layout: HostLayout): string {
  return [
    '[Unit]',
    'Description=Atelier server',
    'Documentation=https://github.com/atelier/atelier/blob/main/docs/server.md',
    'After=network-online.target',
    'Wants=network-online.target',
    '',
    '[Service]',
    'Type=simple',
    `EnvironmentFile=${layout.envFile}`,
    `ExecStart=${serverCommand(layout).join(' ')}`,
    'Restart=on-failure',
    'RestartSec=2',
    // Workshops and agent sessions outlive the server (they are picked up at the next start):
    // stopping the service stops the server process only.
    'KillMode=process',
    'TimeoutStopSec=90',
    '',
    '[Install]',
    'WantedBy=multi-user.target',
    '',
  ].join('\n');
}

function supervisorPid(layout: HostLayout): number | undefined {
  if (!existsSync(layout.supervisorPid)) return undefined;
  const pid = Number(readFileSync(layout.supervisorPid, 'utf8').trim());
  if (!(pid > 0)) return undefined;
  try {
    // A reused pid is not ours: the process must be our supervisor script.
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('supervisor.js') ? pid : undefined;
  } catch {
    return undefined;
  }
}

export function serviceRunning(layout: HostLayout): boolean {
  if (serviceKind() === 'systemd') {
    // is-active answers by exit code only.
    return spawnSync('systemctl', ['is-active', '--quiet', 'atelier'], { stdio: 'ignore' }).status === 0;
  }
  return supervisorPid(layout) !== undefined;
}

/** Starts the service (writing the systemd unit first where systemd runs). */
export async function startService(layout: HostLayout): Promise<void> {
  if (serviceKind() === 'systemd') {
    writeFileSync(layout.unitFile, unitText(layout), { mode: 0o644 });
    await run('systemctl', ['daemon-reload']);
    await run('systemctl', ['enable', '--now', 'atelier']);
    return;
  }
  const node = existsSync(join(layout.current, 'node/bin/node')) ? join(layout.current, 'node/bin/node') : process.execPath;
  const script = join(layout.current, 'dist/cli/commands/server/host/supervisor.js');
  if (!existsSync(script)) throw new Error(`${script} is missing: the current release is damaged; unpack it again with scripts/get.sh`);
  rmSync(layout.supervisorPid, { force: true });
  const child = spawn(
    node,
    [
      script,
      '--pid-file',
      layout.supervisorPid,
      '--log-file',
      join(layout.logDir, 'server.log'),
      '--env-file',
      layout.envFile,
      '--',
      ...serverCommand(layout),
    ],
    { detached: true, stdio: 'ignore', cwd: '/' },
  );
  child.unref();
  const deadline = Date.now() + 15_000;
  while (supervisorPid(layout) === undefined) {
    if (child.exitCode !== null)
      throw new Error(`the supervisor exited at once (code ${child.exitCode}): see ${join(layout.logDir, 'server.log')}`);
    if (Date.now() > deadline) throw new Error(`the supervisor wrote no pid file in 15 s (${layout.supervisorPid})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Stops the service and waits until it is gone (workshops keep running). */
export async function stopService(layout: HostLayout): Promise<void> {
  if (serviceKind() === 'systemd') {
    if (existsSync(layout.unitFile)) await run('systemctl', ['disable', '--now', 'atelier']).catch(() => undefined);
    return;
  }
  const pid = supervisorPid(layout);
  if (pid === undefined) return;
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + 120_000;
  while (existsSync(`/proc/${pid}`)) {
    if (Date.now() > deadline) throw new Error(`the supervisor (pid ${pid}) did not stop within 120 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  rmSync(layout.supervisorPid, { force: true });
}

/** Sends SIGHUP to the supervisor (the server restarts on the `current` release), or restarts the unit. */
export async function restartService(layout: HostLayout): Promise<void> {
  if (serviceKind() === 'systemd') {
    await run('systemctl', ['restart', 'atelier']);
    return;
  }
  const pid = supervisorPid(layout);
  if (pid === undefined) throw new Error('the service is not running: run `atelier server install` to start it');
  process.kill(pid, 'SIGHUP');
}

export function localUrl(listen: string): string {
  const { host, port } = parseListen(listen);
  const h = host === '0.0.0.0' || host === '' ? '127.0.0.1' : host === '::' ? '[::1]' : host.includes(':') ? `[${host}]` : host;
  return `http://${h}:${port}`;
}

/** /healthz's answer, or undefined when nothing answers. */
export async function healthz(listen: string): Promise<{ status: string; version: string } | undefined> {
  try {
    const res = await fetch(`${localUrl(listen)}/healthz`, { signal: AbortSignal.timeout(5000) });
    return (await res.json()) as { status: string; version: string };
  } catch {
    return undefined;
  }
}

/** Waits until /healthz answers ok with `version`; fails with the end of the server log. */
export async function waitHealthy(listen: string, version: string, layout: HostLayout, timeoutMs = 240_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const h = await healthz(listen);
    if (h?.status === 'ok' && h.version === version) return;
    if (Date.now() > deadline) {
      const logFile = join(layout.logDir, 'server.log');
      const tail = existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-15).join('\n') : '(no log)';
      throw new Error(
        `the server did not become healthy on ${localUrl(listen)} within ${timeoutMs / 1000} s (last answer: ${JSON.stringify(h)}); end of ${logFile}:\n${tail}`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}
