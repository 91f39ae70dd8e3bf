// Certificates for the server's HTTPS, made by `atelier server install` (its TLS step): from a
// local CA made on this machine, or from an ACME CA by http-01 (the key authorization left in
// DATA_DIR/acme-challenge, which acmeChallengeRoutes serves). Here rather than in the CLI: the CLI
// is one bundle that loads this folder only when it runs (acme-client and @peculiar/x509 stay out of it).
import 'reflect-metadata';
import { createHash, randomBytes, webcrypto } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';
import acme from 'acme-client';
import { writeFileAtomic } from '../core/index.js';

x509.cryptoProvider.set(webcrypto as never);

const DAY_MS = 86_400_000;

/** Where the local CA and the ACME account key are kept (the TLS step's folder). */
export interface IssuerFiles {
  caCert: string;
  caKey: string;
  account: string;
}

function pem(label: string, der: ArrayBuffer): string {
  return `-----BEGIN ${label}-----\n${Buffer.from(der)
    .toString('base64')
    .replace(/.{1,64}/g, '$&\n')}-----END ${label}-----\n`;
}

function serial(): string {
  const b = randomBytes(16);
  b[0]! &= 0x7f;
  return b.toString('hex');
}

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** The local CA (made once, kept across installs so a root already trusted stays trusted). */
async function localAuthority(paths: IssuerFiles): Promise<{ cert: x509.X509Certificate; key: webcrypto.CryptoKey; made: boolean }> {
  if (existsSync(paths.caCert) && existsSync(paths.caKey)) {
    const der = Buffer.from(readFileSync(paths.caKey, 'utf8').replace(/-----[^-]+-----|\s/g, ''), 'base64');
    const key = await webcrypto.subtle.importKey('pkcs8', der, ALG, false, ['sign']);
    return { cert: new x509.X509Certificate(readFileSync(paths.caCert, 'utf8')), key, made: false };
  }
  const keys = await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify']);
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=Atelier local CA (${createHash('sha256').update(randomBytes(8)).digest('hex').slice(0, 8)}), O=Atelier`,
    notBefore: new Date(now - DAY_MS),
    notAfter: new Date(now + 3650 * DAY_MS),
    signingAlgorithm: ALG,
    keys: keys as never,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey as never),
    ],
  });
  writeFileAtomic(paths.caKey, pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)), 0o600);
  writeFileAtomic(paths.caCert, cert.toString('pem') + '\n', 0o644);
  return { cert, key: keys.privateKey, made: true };
}

/** A leaf for `domain` (one year) signed by the local CA: the certificate (with the root after it) and key. */
export async function issueLocalCertificate(paths: IssuerFiles, domain: string): Promise<{ cert: string; key: string; madeCa: boolean }> {
  const ca = await localAuthority(paths);
  const keys = await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify']);
  const now = Date.now();
  const leaf = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: `CN=${domain}`,
    issuer: ca.cert.subject,
    notBefore: new Date(now - DAY_MS),
    notAfter: new Date(now + 365 * DAY_MS),
    signingAlgorithm: ALG,
    publicKey: keys.publicKey as never,
    signingKey: ca.key as never,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth], false),
      new x509.SubjectAlternativeNameExtension([{ type: isIP(domain) ? 'ip' : 'dns', value: domain }], false),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert, false),
    ],
  });
  return {
    cert: leaf.toString('pem') + '\n' + ca.cert.toString('pem') + '\n',
    key: pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)),
    madeCa: ca.made,
  };
}

/**
 * A certificate from the ACME CA by http-01: the key authorization is written to
 * DATA_DIR/acme-challenge/TOKEN, which the running server serves on its plain listener.
 */
export async function issueAcmeCertificate(
  paths: IssuerFiles,
  source: { email: string; directory: string },
  domain: string,
  challengeDir: string,
  say: (line: string) => void,
): Promise<{ cert: string; key: string }> {
  if (!existsSync(paths.account)) writeFileAtomic(paths.account, (await acme.crypto.createPrivateKey()).toString(), 0o600);
  const client = new acme.Client({ directoryUrl: source.directory, accountKey: readFileSync(paths.account) });
  const [key, csr] = await acme.crypto.createCsr({ commonName: domain, altNames: [domain] });
  mkdirSync(challengeDir, { recursive: true, mode: 0o755 });
  const cert = await client.auto({
    csr,
    email: source.email,
    termsOfServiceAgreed: true,
    challengePriority: ['http-01'],
    // The CA checks; a check from here would go through this machine's own view of the name.
    skipChallengeVerification: true,
    challengeCreateFn: async (_authz, challenge, keyAuthorization) => {
      say(`ACME: answering the http-01 challenge for ${domain} (http://${domain}/.well-known/acme-challenge/${challenge.token})`);
      writeFileSync(join(challengeDir, challenge.token), keyAuthorization, { mode: 0o644 });
    },
    challengeRemoveFn: async (_authz, challenge) => {
      rmSync(join(challengeDir, challenge.token), { force: true });
    },
  });
  return { cert, key: key.toString() };
}
