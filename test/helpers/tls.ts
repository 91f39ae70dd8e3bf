import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Where makeOriginCertificates put an origin's files. */
export interface OriginCertificates {
  /** The CA's certificate (what a client of the origin trusts). */
  ca: string;
  key: string;
  cert: string;
}

/**
 * A CA of the test's own and a certificate it signs for `names` (the first is the subject), made
 * with openssl in `dir` (ECDSA P-256, two days): what a local HTTPS origin standing in for a
 * provider serves. Files: ca.pem, ca.key, origin.key, origin.pem.
 */
export function makeOriginCertificates(dir: string, names: string[], caName = 'test origin CA'): OriginCertificates {
  const openssl = (args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  openssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', `/CN=${caName}`]);
  writeFileSync(join(dir, 'ext.cnf'), `subjectAltName=${names.map((n) => `DNS:${n}`).join(',')}\n`);
  openssl(['req', ...ec, '-keyout', 'origin.key', '-out', 'origin.csr', '-subj', `/CN=${names[0]}`]);
  openssl([
    'x509',
    '-req',
    '-in',
    'origin.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'origin.pem',
    '-days',
    '2',
    '-extfile',
    'ext.cnf',
  ]);
  return { ca: join(dir, 'ca.pem'), key: join(dir, 'origin.key'), cert: join(dir, 'origin.pem') };
}

/** A self-signed certificate for `name` (ECDSA P-256, `days`), made with openssl in `dir`: `<name>.crt`, `<name>.key`. */
export function makeSelfSigned(dir: string, name: string, days = 2): { cert: string; key: string } {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      ...ec,
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      String(days),
      '-subj',
      `/CN=${name}`,
      '-addext',
      `subjectAltName=DNS:${name}`,
    ],
    {
      stdio: 'ignore',
    },
  );
  return { cert, key };
}
