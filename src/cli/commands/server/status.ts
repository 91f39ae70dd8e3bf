import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { connect } from 'node:tls';
import { AtelierError, formatSize, type Config, type ServerStatus } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';
import { keyValues, printable } from '../../output.js';
import { runningServerPid } from './doctorChecks.js';
import { hostLayout, parseEnvFile } from './host/layout.js';
import { RENEW_DAYS, describeCertificate, tlsPaths, type CertificateInfo } from './host/tls.js';

export interface StatusFlags {
  dataDir?: string;
  prefix?: string;
}

/** A certificate file the server is configured to serve (ATELIER_TLS_CERT) or the local CA it came from. */
export interface CertificateFile extends Partial<CertificateInfo> {
  role: 'served' | 'local CA';
  path: string;
  error?: string;
}

export interface TlsInfo {
  subject: string;
  issuer: string;
  validTo: string;
  daysLeft: number;
  /** The certificate chains to a CA this machine trusts, for this host name. */
  trusted: boolean;
  error?: string;
}

export interface StatusReport {
  /** The server of this data dir on this machine (its lock file names a live process). */
  service: { dataDir: string; running: boolean; pid: number | null };
  context: string;
  url: string;
  /** What the server says of itself; absent when it could not be asked. */
  server?: ServerStatus;
  tls?: TlsInfo;
  /** The certificate files of this machine's server (its environment, else the host install's atelier.env). */
  certificates: CertificateFile[];
  error?: string;
}

function certificateFiles(config: Config, prefix: string | undefined): CertificateFile[] {
  const layout = hostLayout(prefix);
  const env = existsSync(layout.envFile) ? parseEnvFile(readFileSync(layout.envFile, 'utf8')) : {};
  const served = config.tls?.cert ?? env.ATELIER_TLS_CERT;
  const files: CertificateFile[] = [];
  for (const [role, path] of [
    ['served', served],
    ['local CA', served && existsSync(tlsPaths(layout).caCert) ? tlsPaths(layout).caCert : undefined],
  ] as const) {
    if (path === undefined) continue;
    try {
      files.push({ role, path, ...describeCertificate(readFileSync(path)) });
    } catch (err) {
      files.push({ role, path, error: (err as Error).message });
    }
  }
  return files;
}

/** The certificate the server's URL presents (an https URL only). */
function certificate(url: URL): Promise<TlsInfo> {
  return new Promise((done) => {
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const socket = connect({ host, port: Number(url.port || 443), servername: host, rejectUnauthorized: false, timeout: 5000 }, () => {
      const cert = socket.getPeerCertificate();
      const validTo = new Date(cert.valid_to);
      done({
        subject: String(cert.subject?.CN ?? ''),
        issuer: String(cert.issuer?.CN ?? cert.issuer?.O ?? ''),
        validTo: validTo.toISOString(),
        daysLeft: Math.floor((validTo.getTime() - Date.now()) / 86_400_000),
        trusted: socket.authorized,
        ...(socket.authorizationError ? { error: String(socket.authorizationError) } : {}),
      });
      socket.end();
    });
    socket.once('timeout', () => socket.destroy(new Error('no TLS handshake within 5 s')));
    socket.once('error', (err) => done({ subject: '', issuer: '', validTo: '', daysLeft: 0, trusted: false, error: err.message }));
  });
}

/** `atelier server status`: the local service of the data dir, then what the context's server says of itself. */
export async function serverStatus(ctx: CommandContext, config: Config, flags: StatusFlags): Promise<StatusReport> {
  const dataDir = resolve(flags.dataDir ?? config.dataDir);
  const pid = runningServerPid(dataDir) ?? null;
  const target = await ctx.target();
  const report: StatusReport = {
    service: { dataDir, running: pid !== null, pid },
    context: target.context,
    url: target.url,
    certificates: certificateFiles(config, flags.prefix),
  };
  const url = new URL(target.url);
  const [server, tls] = await Promise.all([
    (await ctx.api()).call('serverStatus').catch((err: unknown) => {
      report.error = err instanceof Error ? err.message : String(err);
      if (err instanceof AtelierError && err.code === 'PERMISSION_DENIED') report.error += ' (server status is for server admins)';
      return undefined;
    }),
    url.protocol === 'https:' ? certificate(url) : Promise.resolve(undefined),
  ]);
  if (server) {
    report.server = server;
    // Without --data-dir, the data dir the answering server says it uses (when it runs on this machine).
    const theirs = flags.dataDir === undefined ? runningServerPid(server.dataDir) : undefined;
    if (theirs === server.pid) report.service = { dataDir: server.dataDir, running: true, pid: theirs };
  }
  if (tls) report.tls = tls;
  return report;
}

function duration(seconds: number): string {
  const d = Math.floor(seconds / 86400);
  const h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  return d > 0 ? `${d}d ${h}h ${m}m` : h > 0 ? `${h}h ${m}m` : m > 0 ? `${m}m ${seconds % 60}s` : `${seconds}s`;
}

function byKey(counts: Record<string, number>): string {
  const parts = Object.entries(counts)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, n]) => `${n} ${k}`);
  return parts.length > 0 ? parts.join(', ') : 'none';
}

export function statusText(r: StatusReport): string {
  const pairs: [string, string][] = [
    [
      'service',
      r.service.running ? `running (pid ${r.service.pid}) for ${r.service.dataDir}` : `no server running for ${r.service.dataDir}`,
    ],
    ['context', `${r.context} (${r.url})`],
  ];
  for (const c of r.certificates)
    pairs.push([
      c.role === 'served' ? 'certificate file' : 'local CA',
      c.notAfter
        ? `${c.path}: ${c.names?.join(', ') || c.subject} by ${c.issuer}, expires ${c.notAfter} (${c.daysLeft} days)${c.role === 'served' && (c.daysLeft ?? 0) < RENEW_DAYS ? ': due for renewal (the server renews ACME and local-CA certificates by itself, as does `atelier server install`; given files are yours to replace)' : ''}`
        : `${c.path}: could not be read: ${c.error ?? ''}`,
    ]);
  const s = r.server;
  if (!s) {
    pairs.push(['server', `not answering: ${printable(r.error ?? 'unknown error')}`]);
    return keyValues(pairs);
  }
  pairs.push(
    ['version', s.version],
    ['uptime', `${duration(s.uptimeSeconds)} (since ${s.startedAt}, pid ${s.pid})`],
    ['listen', s.url + (s.publicUrl && s.publicUrl !== s.url ? ` (public: ${s.publicUrl})` : '')],
    [
      'database',
      `${s.database.kind}${s.database.version ? ` PostgreSQL ${s.database.version}` : ''}, ${
        s.database.ok
          ? `answering${s.database.sizeBytes !== null ? `, ${formatSize(s.database.sizeBytes)}` : ''}`
          : `NOT answering: ${s.database.error ?? ''}`
      }`,
    ],
  );
  if (r.tls)
    pairs.push([
      'certificate',
      r.tls.validTo
        ? `${r.tls.subject} by ${r.tls.issuer}, expires ${r.tls.validTo} (${r.tls.daysLeft} days)${r.tls.trusted ? '' : `, not trusted here: ${r.tls.error ?? ''}`}`
        : `could not be read: ${r.tls.error ?? ''}`,
    ]);
  else pairs.push(['certificate', 'none (plain HTTP)']);
  const pct = s.disk.totalBytes > 0 ? Math.round((s.disk.usedBytes / s.disk.totalBytes) * 100) : 0;
  pairs.push(
    [
      'disk',
      `${formatSize(s.disk.usedBytes)} used of ${formatSize(s.disk.totalBytes)} (${pct}%), ${formatSize(s.disk.freeBytes)} free under ${s.dataDir}`,
    ],
    ['workshops', byKey(s.workshops)],
    ['simulators', s.simulators.running > 0 ? `${s.simulators.running} running: ${byKey(s.simulators.byType)}` : 'none running'],
  );
  const lines = [keyValues(pairs)];
  if (s.recentErrors.length === 0) lines.push('last errors: none since the start');
  else {
    lines.push('last errors:');
    // The log's text can carry what a workshop sent: control characters (escape sequences) shown as \uXXXX.
    for (const e of s.recentErrors.slice(-10)) lines.push(`  ${e.time} ${e.level.padEnd(5)} ${printable(e.message)}`);
  }
  return lines.join('\n');
}
