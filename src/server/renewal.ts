// The server renews its own certificate when `atelier server install` made it (from an ACME CA
// or the local CA: `source.json` beside ATELIER_TLS_CERT says which, for which domain) and fewer
// than ATELIER_TLS_RENEW_DAYS days are left: looked at once the server listens (the ACME CA's
// http-01 check needs the plain listener up), then every 12 hours, and again an hour after a
// failed try. The new pair replaces the files the way the install writes them (key 0600, cert
// 0644, each renamed into place); serveHttps picks them up within 2 s. Certificates given as
// files (`--tls-cert`) are the operator's to renew: never touched, `server status` says when
// they near their end. Each node renews its own files (every node has its own certificate),
// so this is not one of the leader's jobs.
import { X509Certificate } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createSecureContext } from 'node:tls';
import { tlsFiles, writeFileAtomic } from '../core/index.js';
import { issueAcmeCertificate, issueLocalCertificate } from './certificates.js';

const DAY_MS = 86_400_000;
const CHECK_MS = 12 * 3600_000;
const RETRY_MS = 3600_000;

type Source = { kind: 'acme'; email: string; directory: string; domain: string } | { kind: 'local'; domain: string };

type Log = { info: (o: object, m: string) => void; warn: (o: object, m: string) => void };

export interface RenewalOptions {
  cert: string;
  key: string;
  dataDir: string;
  renewDays: number;
  log: Log;
}

/** What one look found or did. */
export type RenewalResult =
  | { state: 'not-ours'; why: string }
  | { state: 'fresh'; daysLeft: number }
  | { state: 'renewed'; notAfter: string }
  | { state: 'failed'; error: string };

function sourceOf(file: string): Source | undefined {
  if (!existsSync(file)) return undefined;
  const s = JSON.parse(readFileSync(file, 'utf8')) as { kind?: string; email?: string; directory?: string; domain?: string | null };
  if (!s.domain) return undefined;
  if (s.kind === 'acme' && s.email && s.directory) return { kind: 'acme', email: s.email, directory: s.directory, domain: s.domain };
  if (s.kind === 'local') return { kind: 'local', domain: s.domain };
  return undefined;
}

/** One look: renews when the certificate is the install's (ACME, local CA) and near its end. */
export async function renewIfDue(o: RenewalOptions): Promise<RenewalResult> {
  const files = tlsFiles(dirname(o.cert));
  if (o.cert !== files.cert || o.key !== files.key)
    return { state: 'not-ours', why: `${o.cert} is not a certificate \`atelier server install\` made` };
  let source: Source | undefined;
  try {
    source = sourceOf(files.source);
  } catch (err) {
    return { state: 'failed', error: `${files.source}: ${(err as Error).message}` };
  }
  if (!source) return { state: 'not-ours', why: 'given as files (--tls-cert): renewing them is the operator’s' };
  let notAfter: number;
  try {
    notAfter = Date.parse(new X509Certificate(readFileSync(o.cert)).validTo);
  } catch (err) {
    // Unreadable now (being replaced?): the next look decides.
    return { state: 'failed', error: `${o.cert}: ${(err as Error).message}` };
  }
  const daysLeft = Math.floor((notAfter - Date.now()) / DAY_MS);
  if (daysLeft >= o.renewDays) return { state: 'fresh', daysLeft };
  try {
    const say = (line: string): void => o.log.info({ domain: source.domain }, line);
    const pair =
      source.kind === 'acme'
        ? await issueAcmeCertificate(files, source, source.domain, join(o.dataDir, 'acme-challenge'), say)
        : await issueLocalCertificate(files, source.domain);
    const fresh = new X509Certificate(pair.cert);
    if (!fresh.checkHost(source.domain) && !fresh.checkIP(source.domain))
      throw new Error(`the new certificate does not cover ${source.domain}`);
    createSecureContext({ cert: pair.cert, key: pair.key }); // the key is the certificate's
    writeFileAtomic(files.key, pair.key, 0o600);
    writeFileAtomic(files.cert, pair.cert, 0o644);
    o.log.info(
      {
        domain: source.domain,
        from: source.kind === 'acme' ? source.directory : 'the local CA',
        notAfter: fresh.validTo,
        daysLeftBefore: daysLeft,
      },
      'TLS certificate renewed',
    );
    return { state: 'renewed', notAfter: fresh.validTo };
  } catch (err) {
    const error = (err as Error).message;
    o.log.warn(
      { domain: source.domain, daysLeft, err: error },
      `TLS certificate renewal failed (${daysLeft} days left): trying again in an hour; \`atelier server install --yes\` renews it too`,
    );
    return { state: 'failed', error };
  }
}

/** Looks now, then every 12 hours (an hour after a failure), until stopped; a renewal under way is left to finish. */
export function startRenewal(o: RenewalOptions): { stop(): void } {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const look = (): void => {
    void renewIfDue(o)
      .catch((err: Error): RenewalResult => {
        o.log.warn({ err: err.message }, 'TLS certificate renewal failed: trying again in an hour');
        return { state: 'failed', error: err.message };
      })
      .then((r) => {
        if (stopped) return;
        timer = setTimeout(look, r.state === 'failed' ? RETRY_MS : CHECK_MS);
        timer.unref();
      });
  };
  look();
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}
