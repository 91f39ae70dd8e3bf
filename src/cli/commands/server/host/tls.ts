// The install's TLS step: a certificate for the domain from given files, from an ACME CA
// (http-01, answered by the installed server from DATA_DIR/acme-challenge), or from a local CA
// made here whose root the output says how to trust. The server re-reads the files when they
// change (src/server/tls.ts), so the step neither restarts it nor waits for more than a reload.
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { parseListen, tlsFiles } from '../../../../core/index.js';
import type { HostLayout } from './layout.js';
import type { HostStep, StepContext } from './steps.js';

export const LETS_ENCRYPT = 'https://acme-v02.api.letsencrypt.org/directory';
const DAY_MS = 86_400_000;
/** A certificate with fewer days left than this is renewed by the next install (ACME, local CA). */
export const RENEW_DAYS = 30;

export type TlsSource =
  { kind: 'files'; cert: string; key: string } | { kind: 'acme'; email: string; directory: string } | { kind: 'local' };

export interface TlsSettings {
  /** The name the certificate must cover (required for ACME and the local CA). */
  domain: string | undefined;
  /** Where the server serves HTTPS (ATELIER_TLS_LISTEN). */
  listen: string;
  source: TlsSource;
  /** Why the local CA was chosen although --email was given (the ACME CA was unreachable). */
  fallback?: string;
}

/** The files under /etc/atelier/tls. */
export function tlsPaths(layout: HostLayout): ReturnType<typeof tlsFiles> & { dir: string } {
  const dir = join(layout.configDir, 'tls');
  return { dir, ...tlsFiles(dir) };
}

export interface CertificateInfo {
  subject: string;
  names: string[];
  issuer: string;
  notAfter: string;
  daysLeft: number;
  fingerprint: string;
}

/** A distinguished name on one line (an ACME leaf's subject may be empty: Node gives undefined). */
const dn = (name: string | undefined): string => (name ?? '').replace(/\n/g, ', ');

/** What a PEM certificate (its first one: the leaf of a chain) says. */
export function describeCertificate(pem: string | Buffer): CertificateInfo {
  const c = new X509Certificate(pem);
  const notAfter = new Date(c.validTo);
  return {
    subject: dn(c.subject),
    names: (c.subjectAltName ?? '').split(', ').filter(Boolean),
    issuer: dn(c.issuer),
    notAfter: notAfter.toISOString(),
    daysLeft: Math.floor((notAfter.getTime() - Date.now()) / DAY_MS),
    fingerprint: c.fingerprint256,
  };
}

/**
 * Checks a certificate and key as the server would serve them: they parse, the key is the
 * certificate's, the certificate covers `domain` and is valid now. Throws saying what to fix.
 */
export function checkPair(
  certPem: string,
  keyPem: string,
  domain: string | undefined,
  names = { cert: 'the certificate', key: 'the key' },
): CertificateInfo {
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(certPem);
  } catch (err) {
    throw new Error(
      `${names.cert} is not a PEM certificate (${(err as Error).message}): give the certificate file (-----BEGIN CERTIFICATE-----, the chain after it)`,
    );
  }
  let key: ReturnType<typeof createPrivateKey>;
  try {
    key = createPrivateKey(keyPem);
  } catch (err) {
    throw new Error(
      `${names.key} is not an unencrypted PEM private key (${(err as Error).message}): give the key file without a passphrase (\`openssl pkey -in KEY -out key.pem\`)`,
    );
  }
  if (!cert.checkPrivateKey(key))
    throw new Error(
      `${names.key} is not the key of ${names.cert} (subject ${dn(cert.subject) || '(empty)'}): give the key the certificate was made for; \`openssl x509 -noout -pubkey -in CERT\` and \`openssl pkey -pubout -in KEY\` print the same public key for a matching pair`,
    );
  if (domain !== undefined) {
    const covered = isIP(domain) ? cert.checkIP(domain) : cert.checkHost(domain);
    if (covered === undefined)
      throw new Error(
        `${names.cert} does not cover ${domain} (it names ${cert.subjectAltName ?? (dn(cert.subject) || 'no name')}): give a certificate for ${domain}, or the --domain it was made for`,
      );
  }
  const now = Date.now();
  if (new Date(cert.validTo).getTime() <= now)
    throw new Error(`${names.cert} expired on ${new Date(cert.validTo).toISOString()}: renew it and give the new files`);
  if (new Date(cert.validFrom).getTime() > now)
    throw new Error(`${names.cert} is not valid before ${new Date(cert.validFrom).toISOString()}: check this machine's clock`);
  return describeCertificate(certPem);
}

/** Whether an ACME directory answers (10 s): decides ACME or the local CA at install time. */
export async function acmeReachable(directory: string): Promise<string | undefined> {
  try {
    const res = await fetch(directory, { signal: AbortSignal.timeout(10_000) });
    const body = (await res.json()) as { newOrder?: unknown };
    return res.ok && typeof body.newOrder === 'string' ? undefined : `${directory} answered ${res.status} without an ACME directory`;
  } catch (err) {
    const cause = (err as { cause?: { message?: string } }).cause?.message;
    return `${directory} is unreachable (${cause ?? (err as Error).message})`;
  }
}

function writeFile(path: string, content: string | Buffer, mode: number): void {
  mkdirSync(join(path, '..'), { recursive: true, mode: 0o755 });
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, content, { mode });
  chmodSync(tmp, mode);
  renameSync(tmp, path);
}

const fileMode = (p: string): number | undefined => (existsSync(p) ? statSync(p).mode & 0o777 : undefined);

function sourceText(t: TlsSettings): string {
  return `${JSON.stringify({ ...t.source, domain: t.domain ?? null })}\n`;
}

/** The installed source (source.json), if any. */
export function installedTlsSource(layout: HostLayout): (TlsSource & { domain: string | null }) | undefined {
  const p = tlsPaths(layout).source;
  return existsSync(p) ? (JSON.parse(readFileSync(p, 'utf8')) as TlsSource & { domain: string | null }) : undefined;
}

/** What the source gives, in words. */
function sourceWords(t: TlsSettings): string {
  const s = t.source;
  if (s.kind === 'files') return `the given files (${s.cert}, ${s.key})`;
  if (s.kind === 'acme') return `the ACME CA ${s.directory} (http-01, account ${s.email})`;
  return `a local CA${t.fallback ? ` (${t.fallback})` : ''}`;
}

/** The certificate the HTTPS listener presents (undefined: nothing answers). */
async function presented(listen: string, servername: string | undefined): Promise<string | undefined> {
  const { host, port } = parseListen(listen);
  const h = host === '0.0.0.0' || host === '' ? '127.0.0.1' : host === '::' ? '::1' : host;
  return new Promise((resolve) => {
    const s = connect(
      { host: h, port, servername: servername && !isIP(servername) ? servername : undefined, rejectUnauthorized: false, timeout: 5000 },
      () => {
        const fp = s.getPeerCertificate().fingerprint256;
        s.destroy();
        resolve(fp);
      },
    );
    s.on('error', () => resolve(undefined));
    s.on('timeout', () => {
      s.destroy();
      resolve(undefined);
    });
  });
}

function installedState(ctx: StepContext): { ok: boolean; detail: string; info?: CertificateInfo } {
  const t = ctx.settings.tls!;
  const p = tlsPaths(ctx.layout);
  if (!existsSync(p.cert) || !existsSync(p.key)) return { ok: false, detail: `${p.cert} to write` };
  if (fileMode(p.key) !== 0o600 || fileMode(p.cert) !== 0o644) return { ok: false, detail: 'modes to fix' };
  if (!existsSync(p.source) || readFileSync(p.source, 'utf8') !== sourceText(t))
    return { ok: false, detail: `the certificate is to come from ${sourceWords(t)}` };
  let info: CertificateInfo;
  try {
    info = checkPair(readFileSync(p.cert, 'utf8'), readFileSync(p.key, 'utf8'), t.domain);
  } catch (err) {
    return { ok: false, detail: (err as Error).message };
  }
  if (t.source.kind === 'files') {
    const same = readFileSync(t.source.cert).equals(readFileSync(p.cert)) && readFileSync(t.source.key).equals(readFileSync(p.key));
    if (!same) return { ok: false, detail: `${t.source.cert} changed: to copy again`, info };
  } else if (info.daysLeft < RENEW_DAYS) return { ok: false, detail: `expires in ${info.daysLeft} days: to renew`, info };
  return {
    ok: true,
    detail: `${info.names.join(', ') || info.subject}, until ${info.notAfter.slice(0, 10)} (${info.daysLeft} days), from ${sourceWords(t)}`,
    info,
  };
}

/** The TLS step (only in the list when TLS is asked for or installed). */
export const tlsStep: HostStep = {
  name: 'tls',
  title: 'TLS certificate',
  async preconditions(ctx) {
    const t = ctx.settings.tls!;
    const out: { ok: boolean; reason: string }[] = [];
    try {
      parseListen(t.listen);
    } catch (err) {
      out.push({ ok: false, reason: `--tls-listen: ${(err as Error).message.replace('--listen', '--tls-listen')}` });
    }
    if (t.source.kind === 'files') {
      const { cert, key } = t.source;
      for (const [flag, f] of [
        ['--tls-cert', cert],
        ['--tls-key', key],
      ] as const)
        if (!existsSync(f)) out.push({ ok: false, reason: `${flag} ${f}: no such file` });
      if (existsSync(cert) && existsSync(key))
        try {
          checkPair(readFileSync(cert, 'utf8'), readFileSync(key, 'utf8'), t.domain, {
            cert: `--tls-cert ${cert}`,
            key: `--tls-key ${key}`,
          });
        } catch (err) {
          out.push({ ok: false, reason: (err as Error).message });
        }
    } else if (t.domain === undefined) {
      out.push({
        ok: false,
        reason: `${t.source.kind === 'acme' ? '--email' : 'a local CA'} needs --domain (the name the certificate is for)`,
      });
    }
    return out;
  },
  async check(ctx) {
    const s = installedState(ctx);
    return { done: s.ok, detail: s.detail };
  },
  plan(ctx) {
    const t = ctx.settings.tls!;
    const p = tlsPaths(ctx.layout);
    const how =
      t.source.kind === 'files'
        ? `copy ${t.source.cert} and ${t.source.key}`
        : t.source.kind === 'acme'
          ? `ask ${t.source.directory} for a certificate for ${t.domain} (http-01 on http://${t.domain}:80 or the CA's validation port, answered by the server)`
          : `make a certificate for ${t.domain} with the local CA ${existsSync(p.caCert) ? p.caCert : `(made now: ${p.caCert})`}${t.fallback ? `: ${t.fallback}` : ''}`;
    return [how, `write ${p.cert} (0644) and ${p.key} (0600)`, `the server serves HTTPS on ${t.listen} with it (re-read within 2 s)`];
  },
  async apply(ctx, record) {
    const t = ctx.settings.tls!;
    const p = tlsPaths(ctx.layout);
    const dirExisted = existsSync(p.dir);
    const before = new Map([p.cert, p.key, p.source].map((f) => [f, existsSync(f) ? readFileSync(f) : undefined]));
    const hadCa = existsSync(p.caCert);
    const hadAccount = existsSync(p.account);
    record(() => {
      for (const [f, content] of before)
        if (content === undefined) rmSync(f, { force: true });
        else writeFile(f, content, f === p.key ? 0o600 : 0o644);
      if (!hadCa) for (const f of [p.caCert, p.caKey]) rmSync(f, { force: true });
      if (!hadAccount) rmSync(p.account, { force: true });
      if (!dirExisted) rmSync(p.dir, { recursive: true, force: true });
    });
    mkdirSync(p.dir, { recursive: true, mode: 0o755 });
    let pair: { cert: string; key: string };
    if (t.source.kind === 'files') pair = { cert: readFileSync(t.source.cert, 'utf8'), key: readFileSync(t.source.key, 'utf8') };
    else {
      // The unbundled server folder holds the issuers (and their libraries): loaded only here.
      const { issueAcmeCertificate, issueLocalCertificate } = await import('../../../../server/index.js');
      pair =
        t.source.kind === 'acme'
          ? await issueAcmeCertificate(p, t.source, t.domain!, join(ctx.settings.dataDir, 'acme-challenge'), ctx.say)
          : await issueLocalCertificate(p, t.domain!);
    }
    const info = checkPair(pair.cert, pair.key, t.domain);
    writeFile(p.key, pair.key, 0o600);
    writeFile(p.cert, pair.cert, 0o644);
    writeFile(p.source, sourceText(t), 0o644);
    return { detail: `${info.names.join(', ')} until ${info.notAfter.slice(0, 10)}, issued by ${info.issuer}` };
  },
  async verify(ctx) {
    const s = installedState(ctx);
    if (!s.ok || !s.info) return { ok: false, detail: s.detail };
    const t = ctx.settings.tls!;
    // The server re-reads the files every 2 s; a server not running (plan, or stopped) cannot show it.
    const deadline = Date.now() + 20_000;
    let fp: string | undefined;
    for (;;) {
      fp = await presented(t.listen, t.domain);
      if (fp === s.info.fingerprint || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    return fp === s.info.fingerprint
      ? { ok: true, detail: `served on ${t.listen}` }
      : { ok: false, detail: `the server on ${t.listen} presents ${fp ?? 'nothing'} rather than the new certificate: see the server log` };
  },
};

/** The lines that say how to trust the local CA's root. */
export function trustAdvice(layout: HostLayout, t: TlsSettings | undefined, url: string): string[] {
  if (t?.source.kind !== 'local') return [];
  const ca = tlsPaths(layout).caCert;
  return [
    `The certificate is from a local CA${t.fallback ? ` (${t.fallback})` : ''}: browsers and the CLI trust it once its root is trusted.`,
    `  curl --cacert ${ca} ${url}/healthz                      # one command`,
    `  NODE_EXTRA_CA_CERTS=${ca} atelier …                        # the CLI`,
    `  cp ${ca} /usr/local/share/ca-certificates/atelier-local-ca.crt && update-ca-certificates   # this machine (Debian)`,
  ];
}

/**
 * What removing TLS removes (`install --no-tls`, `uninstall`): the served certificate and key, its
 * source and the ACME account key. The local CA stays: its root may be trusted by browsers and
 * machines, and a later local-CA install issues from it again rather than asking them to trust a
 * new one (`uninstall --purge` deletes it with /etc/atelier).
 */
export function tlsRemovable(layout: HostLayout): string[] {
  const p = tlsPaths(layout);
  return [p.cert, p.key, p.source, p.account];
}

/** Whether any file a TLS install writes is there. */
function tlsInstalled(layout: HostLayout): boolean {
  return tlsRemovable(layout).some((f) => existsSync(f));
}

/**
 * `install --no-tls`: the TLS step's inverse. The configuration step has written the
 * configuration without ATELIER_TLS_* and the service step restarted the server on it; this step
 * then removes the files and checks nothing answers HTTPS on the old listener any more.
 */
export const tlsRemovalStep: HostStep = {
  name: 'tls',
  title: 'TLS removed (--no-tls: plain HTTP only)',
  async preconditions() {
    return [];
  },
  async check(ctx) {
    const done = !tlsInstalled(ctx.layout);
    return {
      done,
      detail: done
        ? 'no TLS installed (plain HTTP only)'
        : `${tlsPaths(ctx.layout).cert} and its key to remove${ctx.settings.removeTls?.listen ? `, no more HTTPS on ${ctx.settings.removeTls.listen}` : ''}`,
    };
  },
  plan(ctx) {
    const p = tlsPaths(ctx.layout);
    const listen = ctx.settings.removeTls?.listen;
    return [
      `remove ${tlsRemovable(ctx.layout)
        .filter((f) => existsSync(f))
        .join(', ')} and ${join(ctx.settings.dataDir, 'acme-challenge')}`,
      ...(existsSync(p.caCert) ? [`keep the local CA ${p.caCert} (a root users may trust)`] : []),
      listen ? `no more HTTPS on ${listen} (the server was restarted without it)` : 'the server serves plain HTTP only',
    ];
  },
  async apply(ctx, record) {
    const p = tlsPaths(ctx.layout);
    const before = new Map(tlsRemovable(ctx.layout).map((f) => [f, existsSync(f) ? readFileSync(f) : undefined]));
    record(() => {
      for (const [f, content] of before) if (content !== undefined) writeFile(f, content, f === p.cert || f === p.source ? 0o644 : 0o600);
    });
    for (const f of before.keys()) rmSync(f, { force: true });
    rmSync(join(ctx.settings.dataDir, 'acme-challenge'), { recursive: true, force: true });
    return {
      detail: `removed ${p.cert}, its key and the ACME account key${existsSync(p.caCert) ? ` (the local CA ${p.caCert} is kept: a root users may trust)` : ''}`,
    };
  },
  async verify(ctx) {
    if (tlsInstalled(ctx.layout)) return { ok: false, detail: `${tlsPaths(ctx.layout).cert} or its key is still there` };
    const listen = ctx.settings.removeTls?.listen;
    const fp = listen ? await presented(listen, undefined) : undefined;
    return fp === undefined
      ? { ok: true, detail: listen ? `nothing serves HTTPS on ${listen}` : 'no TLS files' }
      : { ok: false, detail: `the server on ${listen} still presents a certificate (${fp}): see the server log` };
  },
};
