import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/**
 * Where a host install puts things. Every path hangs off `prefix` (empty on a real machine; a
 * temporary folder in tests), so the same code installs into / and into a test's sandbox.
 */
export interface HostLayout {
  prefix: string;
  /** /opt/atelier: releases/VERSION side by side, and `current` linking to one. */
  home: string;
  releases: string;
  current: string;
  /** /usr/local/bin/atelier → home/current/bin/atelier */
  binLink: string;
  /** /etc/atelier: atelier.env (the service's configuration) and master.key. */
  configDir: string;
  envFile: string;
  masterKey: string;
  /** The install journal: one JSON line per step applied, undone or found done. */
  journal: string;
  /** /var/lib/atelier unless --data-dir. */
  dataDir: string;
  logDir: string;
  /** The supervisor's pid file (no systemd). */
  runDir: string;
  supervisorPid: string;
  /** The systemd unit (when PID 1 is systemd). */
  unitFile: string;
}

export function hostLayout(prefix: string | undefined, dataDir?: string): HostLayout {
  const p = prefix === undefined || prefix === '' || prefix === '/' ? '' : resolve(prefix);
  const home = `${p}/opt/atelier`;
  const configDir = `${p}/etc/atelier`;
  const runDir = `${p}/run/atelier`;
  return {
    prefix: p,
    home,
    releases: `${home}/releases`,
    current: `${home}/current`,
    binLink: `${p}/usr/local/bin/atelier`,
    configDir,
    envFile: `${configDir}/atelier.env`,
    masterKey: `${configDir}/master.key`,
    journal: `${home}/install-journal.jsonl`,
    dataDir: dataDir !== undefined ? resolve(dataDir) : `${p}/var/lib/atelier`,
    logDir: `${p}/var/log/atelier`,
    runDir,
    supervisorPid: `${runDir}/supervisor.pid`,
    unitFile: `${p}/etc/systemd/system/atelier.service`,
  };
}

/** The release this program runs from: the folder holding RELEASE.json above the running script. */
export function runningRelease(): { root: string; version: string } | undefined {
  let dir = dirname(resolve(process.argv[1] ?? '.'));
  for (let i = 0; i < 6; i++) {
    const info = join(dir, 'RELEASE.json');
    if (existsSync(info)) {
      const version = (JSON.parse(readFileSync(info, 'utf8')) as { version?: unknown }).version;
      if (typeof version === 'string') return { root: dir, version };
    }
    dir = dirname(dir);
  }
  return undefined;
}

/** KEY=VALUE lines (no shell quoting: values are written by `writeEnvFile`, one per line). */
export function parseEnvFile(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(line.trim());
    if (m) env[m[1]!] = m[2]!;
  }
  return env;
}

export function formatEnvFile(env: Record<string, string>): string {
  const lines = ['# Atelier server configuration, written by `atelier server install` (read by its service).'];
  for (const [k, v] of Object.entries(env)) {
    if (/[\n\r]/.test(v)) throw new Error(`${k}: a value cannot hold a line break`);
    lines.push(`${k}=${v}`);
  }
  return lines.join('\n') + '\n';
}
