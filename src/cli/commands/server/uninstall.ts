import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { emitter, journal } from './host/engine.js';
import { hostLayout, parseEnvFile } from './host/layout.js';
import { localUrl, serviceKind, serviceRunning, stopService } from './host/service.js';
import { requireRoot } from './install.js';
import { tlsPaths, tlsRemovable } from './host/tls.js';

export interface ServerUninstallFlags {
  prefix?: string;
  purge?: boolean;
  yes?: boolean;
}

/** Deletes every workshop through the running server (so their sandboxes, mounts and users go too). */
async function deleteWorkshops(listen: string, credentials: string, say: (line: string) => void): Promise<void> {
  if (!existsSync(credentials)) return;
  const token = /^token: (atl_\S+)/m.exec(readFileSync(credentials, 'utf8'))?.[1];
  if (!token)
    throw new Error(
      `${credentials} holds no API token any more: delete the workshops yourself (\`atelier workshops delete ID\`), then purge again`,
    );
  const base = localUrl(listen);
  const headers = { authorization: `Bearer ${token}` };
  const res = await fetch(`${base}/v1/workshops`, { headers });
  if (!res.ok) throw new Error(`cannot list the workshops (${res.status}): delete them yourself, then purge again`);
  const { items } = (await res.json()) as { items: { id: string }[] };
  for (const w of items) {
    say(`deleting workshop ${w.id}`);
    const d = await fetch(`${base}/v1/workshops/${w.id}`, { method: 'DELETE', headers });
    if (!d.ok && d.status !== 404) throw new Error(`could not delete workshop ${w.id} (${d.status}): ${await d.text()}`);
  }
}

/**
 * `atelier server uninstall`: the inverse of each install step, last first. Data (the data dir,
 * the master key that seals it, credentials.txt, logs) is kept unless --purge (which asks, or --yes).
 */
export async function serverUninstall(flags: ServerUninstallFlags, output: string): Promise<number> {
  requireRoot('uninstall');
  const emit = emitter(output);
  const say = (message: string): void => emit({ event: 'log', message: `atelier: ${message}` });
  const base = hostLayout(flags.prefix);
  const env = existsSync(base.envFile) ? parseEnvFile(readFileSync(base.envFile, 'utf8')) : {};
  const layout = hostLayout(flags.prefix, env.ATELIER_DATA_DIR);
  if (flags.purge && !flags.yes) {
    const question = `--purge deletes every workshop and ${layout.dataDir} (the database), ${layout.configDir} (the master key) and ${layout.logDir}: delete them?`;
    if (!process.stdin.isTTY) throw new Error(`${question.replace(/: delete them\?$/, '')}: add --yes to confirm`);
    const rl = createInterface({ input: process.stdin, output: process.stderr });
    const answer = await rl.question(`${question} [y/N] `).finally(() => rl.close());
    if (!/^y(es)?$/i.test(answer.trim())) throw new Error('nothing was removed');
  }
  const removed: string[] = [];
  const kept: string[] = [];
  const step = (name: string, detail: string): void => {
    emit({ event: 'step', step: name, index: removed.length + 1, total: 0, state: 'undone', detail });
    if (!flags.purge && existsSync(layout.home)) journal(layout.journal, { step: name, outcome: 'uninstalled', detail });
    removed.push(name);
  };

  if (flags.purge && serviceRunning(layout))
    await deleteWorkshops(env.ATELIER_LISTEN ?? '127.0.0.1:7878', join(layout.dataDir, 'credentials.txt'), say);
  if (serviceRunning(layout) || existsSync(layout.unitFile)) {
    await stopService(layout);
    rmSync(layout.unitFile, { force: true });
    step('service', `${serviceKind()} stopped and removed${flags.purge ? '' : ' (workshops keep running)'}`);
  }
  if (existsSync(layout.envFile)) {
    rmSync(layout.envFile, { force: true });
    step('configuration', `removed ${layout.envFile}`);
  }
  const tls = tlsPaths(layout);
  if (existsSync(tls.cert) || existsSync(tls.source)) {
    for (const f of tlsRemovable(layout)) rmSync(f, { force: true });
    rmSync(join(layout.dataDir, 'acme-challenge'), { recursive: true, force: true });
    step(
      'tls',
      `removed ${tls.cert}, its key and the ACME account key${existsSync(tls.caCert) ? ` (the local CA ${tls.caCert} is kept: a root users trust)` : ''}`,
    );
  }
  if (existsSync(tls.caCert) && !flags.purge) kept.push(tls.caCert);
  rmSync(layout.runDir, { recursive: true, force: true });
  if (flags.purge) {
    for (const dir of [layout.dataDir, layout.configDir, layout.logDir]) rmSync(dir, { recursive: true, force: true });
    step('data', `purged ${layout.dataDir}, ${layout.configDir}, ${layout.logDir}`);
  } else {
    kept.push(layout.dataDir, layout.masterKey, layout.logDir);
  }
  // The releases last: this very program runs from one (everything it needs is loaded by now).
  if (existsSync(layout.binLink) || existsSync(layout.current)) {
    rmSync(layout.binLink, { force: true });
    rmSync(layout.current, { force: true });
    rmSync(join(layout.home, 'previous'), { force: true });
    rmSync(layout.releases, { recursive: true, force: true });
    step('release', `removed ${layout.releases}, ${layout.current} and ${layout.binLink}`);
  }
  if (flags.purge) rmSync(layout.home, { recursive: true, force: true });
  const message =
    removed.length === 0
      ? 'no change: Atelier is not installed here'
      : flags.purge
        ? 'Atelier is uninstalled and its data purged.'
        : `Atelier is uninstalled. Kept: ${kept.join(', ')}; \`atelier server install${env.ATELIER_DATA_DIR && env.ATELIER_DATA_DIR !== base.dataDir ? ` --data-dir ${layout.dataDir}` : ''}\` finds them again, \`uninstall --purge --yes\` deletes them.`;
  emit({ event: 'done', removed, kept, message });
  return 0;
}
