// Certificates of the credential broker (broker.ts): one certificate authority per workshop, its
// key kept by the server only, and a leaf certificate per bound host, made when first needed.
// @peculiar/x509 builds them over Node's WebCrypto; it needs the Reflect metadata polyfill.
import 'reflect-metadata';
import { randomBytes, webcrypto } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';
import { writeFileAtomic } from '../core/index.js';

x509.cryptoProvider.set(webcrypto as never);

type CryptoKey = webcrypto.CryptoKey;

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
/** The longest delay setTimeout takes as given. */
const MAX_TIMER_MS = 2 ** 31 - 1;
const DAY_MS = 86_400_000;
/** How long a CA lives: longer than any workshop is expected to. */
const CA_DAYS = 3650;
/** Leaves are made again after this (the cache is per process: a restart makes new ones). */
const LEAF_DAYS = 30;

function pem(label: string, der: ArrayBuffer): string {
  const b64 = Buffer.from(der).toString('base64');
  return `-----BEGIN ${label}-----\n${b64.replace(/.{1,64}/g, '$&\n')}-----END ${label}-----\n`;
}

function serial(): string {
  // Positive, 16 random bytes (RFC 5280: at most 20 octets).
  const b = randomBytes(16);
  b[0]! &= 0x7f;
  return b.toString('hex');
}

/** A workshop's certificate authority: the certificate (given to the workshop) and its key (never). */
export interface WorkshopAuthority {
  certPem: string;
  keyPem: string;
  cert: x509.X509Certificate;
  key: CryptoKey;
}

/** A leaf certificate for one host, as tls.createSecureContext takes it (the chain includes the CA). */
export interface Leaf {
  certPem: string;
  keyPem: string;
  notAfter: Date;
}

async function createAuthority(workshopId: string): Promise<WorkshopAuthority> {
  const keys = await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify']);
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=Atelier egress CA for workshop ${workshopId}, O=Atelier`,
    notBefore: new Date(now - DAY_MS),
    notAfter: new Date(now + CA_DAYS * DAY_MS),
    signingAlgorithm: ALG,
    keys: keys as never,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey as never),
    ],
  });
  const keyPem = pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', keys.privateKey as CryptoKey));
  return { certPem: cert.toString('pem') + '\n', keyPem, cert, key: keys.privateKey as CryptoKey };
}

async function importAuthority(certPem: string, keyPem: string): Promise<WorkshopAuthority> {
  const der = Buffer.from(keyPem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
  const key = await webcrypto.subtle.importKey('pkcs8', der, ALG, false, ['sign']);
  return { certPem, keyPem, cert: new x509.X509Certificate(certPem), key: key as CryptoKey };
}

/**
 * The authorities of this server's workshops, under `dir` (0700, the server's only): made when
 * a workshop first needs one, read back after a restart, removed with the workshop.
 */
export class Authorities {
  private readonly loaded = new Map<string, Promise<WorkshopAuthority>>();
  private readonly leaves = new Map<string, Promise<Leaf>>();

  constructor(private readonly dir: string) {}

  private paths(workshopId: string): { cert: string; key: string } {
    return { cert: join(this.dir, `${workshopId}.crt`), key: join(this.dir, `${workshopId}.key`) };
  }

  /** The workshop's authority, made on first use. */
  authority(workshopId: string): Promise<WorkshopAuthority> {
    let p = this.loaded.get(workshopId);
    if (!p) {
      p = this.loadOrCreate(workshopId);
      this.loaded.set(workshopId, p);
      p.catch(() => this.loaded.delete(workshopId));
    }
    return p;
  }

  private async loadOrCreate(workshopId: string): Promise<WorkshopAuthority> {
    const { cert, key } = this.paths(workshopId);
    try {
      return await importAuthority(readFileSync(cert, 'utf8'), readFileSync(key, 'utf8'));
    } catch {
      // none yet (or unreadable): a new one
    }
    const a = await createAuthority(workshopId);
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    writeFileAtomic(key, a.keyPem, 0o600);
    writeFileAtomic(cert, a.certPem, 0o644);
    return a;
  }

  /** A leaf for `host` signed by the workshop's authority (cached until near its end). */
  leaf(workshopId: string, host: string): Promise<Leaf> {
    const k = `${workshopId} ${host}`;
    const cached = this.leaves.get(k);
    if (cached) return cached;
    const p = this.authority(workshopId).then((ca) => makeLeaf(ca, host));
    this.leaves.set(k, p);
    p.then(
      (leaf) => {
        // A timer longer than 2^31-1 ms fires at once (Node clamps it to 1 ms): a leaf of a month
        // would be made afresh at every CONNECT. Kept at most that long, then made again.
        const t = setTimeout(
          () => this.leaves.delete(k),
          Math.min(MAX_TIMER_MS, Math.max(0, leaf.notAfter.getTime() - Date.now() - DAY_MS)),
        );
        t.unref();
      },
      () => this.leaves.delete(k),
    );
    return p;
  }

  /** Forgets and removes a workshop's authority (the workshop was deleted). */
  remove(workshopId: string): void {
    this.loaded.delete(workshopId);
    for (const k of this.leaves.keys()) if (k.startsWith(`${workshopId} `)) this.leaves.delete(k);
    const { cert, key } = this.paths(workshopId);
    rmSync(key, { force: true });
    rmSync(cert, { force: true });
  }
}

async function makeLeaf(ca: WorkshopAuthority, host: string): Promise<Leaf> {
  const keys = await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify']);
  const now = Date.now();
  const notAfter = new Date(now + LEAF_DAYS * DAY_MS);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: `CN=${host}`,
    issuer: ca.cert.subject,
    notBefore: new Date(now - DAY_MS),
    notAfter,
    signingAlgorithm: ALG,
    publicKey: keys.publicKey as never,
    signingKey: ca.key as never,
    extensions: [
      new x509.SubjectAlternativeNameExtension([{ type: isIP(host) ? 'ip' : 'dns', value: host }]),
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
    ],
  });
  const keyPem = pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', keys.privateKey as CryptoKey));
  return { certPem: cert.toString('pem') + '\n' + ca.certPem, keyPem, notAfter };
}
