// Let's Encrypt's pebble (a real ACME server for tests) and its pebble-challtestsrv (here only its
// DNS server: every name resolves to 127.0.0.1, so pebble's http-01 validation reaches the server
// under test on loopback). Built from the Go module proxy at a pinned version into
// .cache/pebble-VERSION (git-ignored), once per pin: `go install` with nice, by the first test
// that needs it (no other set-up step: a machine with Go has everything).
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from './server.js';
import { freePort } from '../terminals.helpers.js';

export const PEBBLE_VERSION = 'v2.10.3';
const MODULE = 'github.com/letsencrypt/pebble/v2';

/** The folder holding pebble and pebble-challtestsrv, built when missing (a few minutes the first time). */
export function pebbleBin(): string {
  const dir = join(REPO_ROOT, `.cache/pebble-${PEBBLE_VERSION}`);
  if (existsSync(join(dir, 'pebble')) && existsSync(join(dir, 'pebble-challtestsrv'))) return dir;
  mkdirSync(dir, { recursive: true });
  for (const cmd of ['pebble', 'pebble-challtestsrv'])
    execFileSync('nice', ['-n', '10', 'go', 'install', `${MODULE}/cmd/${cmd}@${PEBBLE_VERSION}`], {
      env: { ...process.env, GOBIN: dir, GOFLAGS: '-buildvcs=false' },
      cwd: '/tmp',
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  return dir;
}

/** The module's own files (its test certificates), in the Go module cache `go install` filled. */
function moduleDir(): string {
  const cache = execFileSync('go', ['env', 'GOMODCACHE'], { encoding: 'utf8' }).trim();
  return join(cache, `${MODULE}@${PEBBLE_VERSION}`);
}

export interface Pebble extends AsyncDisposable {
  /** The ACME directory URL (https, served with pebble's test certificate). */
  directory: string;
  /** The CA that signed pebble's own HTTPS certificate (NODE_EXTRA_CA_CERTS for the client). */
  apiCa: string;
  /** The root pebble issues under (fetched from its management API). */
  root(): string;
  log(): string;
}

/** Starts challtestsrv's DNS (every name → 127.0.0.1) and pebble validating http-01 on `httpPort`. */
export async function startPebble(httpPort: number): Promise<Pebble> {
  const bin = pebbleBin();
  const dir = mkdtempSync('/tmp/atelier-pebble-');
  const [dns, api, mgmt] = [await freePort(), await freePort(), await freePort()];
  const certs = join(moduleDir(), 'test/certs');
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({
      pebble: {
        listenAddress: `127.0.0.1:${api}`,
        managementListenAddress: `127.0.0.1:${mgmt}`,
        certificate: join(certs, 'localhost/cert.pem'),
        privateKey: join(certs, 'localhost/key.pem'),
        httpPort,
        tlsPort: await freePort(),
        ocspResponderURL: '',
        externalAccountBindingRequired: false,
      },
    }),
  );
  let out = '';
  const procs: ChildProcess[] = [];
  const run = (cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): void => {
    const p = spawn(join(bin, cmd), args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    p.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    p.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    procs.push(p);
  };
  const stop = async (): Promise<void> => {
    for (const p of procs)
      if (p.exitCode === null && p.signalCode === null) {
        p.kill('SIGTERM');
        await new Promise((r) => p.once('exit', r));
      }
    rmSync(dir, { recursive: true, force: true });
  };
  run('pebble-challtestsrv', [
    '-dnsserver',
    `127.0.0.1:${dns}`,
    '-defaultIPv4',
    '127.0.0.1',
    '-defaultIPv6',
    '',
    '-http01',
    '',
    '-https01',
    '',
    '-doh',
    '',
    '-tlsalpn01',
    '',
    '-management',
    `127.0.0.1:${await freePort()}`,
  ]);
  // No sleeping before validation and no nonce rejections: the flow, not its retries, is under test.
  run('pebble', ['-config', join(dir, 'config.json'), '-dnsserver', `127.0.0.1:${dns}`], {
    PEBBLE_VA_NOSLEEP: '1',
    PEBBLE_WFE_NONCEREJECT: '0',
  });
  const apiCa = join(certs, 'pebble.minica.pem');
  const deadline = Date.now() + 30_000;
  while (!out.includes('ACME directory available at') || !out.includes('Starting challenge servers')) {
    if (Date.now() > deadline || procs.some((p) => p.exitCode !== null)) {
      await stop();
      throw new Error(`pebble did not start:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    directory: `https://localhost:${api}/dir`,
    apiCa,
    root: () => execFileSync('curl', ['-fsS', '--cacert', apiCa, `https://localhost:${mgmt}/roots/0`], { encoding: 'utf8' }),
    log: () => out,
    [Symbol.asyncDispose]: stop,
  };
}
