import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as pty from 'node-pty';
import { cachedRelease, hostTarget, livePid, removeHostInstall, runGetSh, runProcess, serveDir } from './helpers/release.js';
import { makeSelfSigned } from './helpers/tls.js';
import { startPebble, type Pebble } from './helpers/pebble.js';
import { freePort } from './terminals.helpers.js';

// TLS in the host install, as a user runs it: a release tarball installed under a temporary
// prefix (see host.install.test.ts), then certificates from given files, from a local CA (the ACME
// CA unreachable), and from Let's Encrypt's pebble (a real ACME server, built from the Go module
// proxy) whose http-01 validation reaches the installed server on loopback through
// pebble-challtestsrv's DNS. Every check goes through real HTTPS (curl with the root to trust).

const VERSION = '0.0.0-test';
const mode = (p: string): number => statSync(p).mode & 0o777;

describe('host install: TLS (files, local CA, ACME by pebble) and its progress', () => {
  let site: Awaited<ReturnType<typeof serveDir>>;
  let prefix: string;
  let home: string;
  let listen: string;
  let tlsPort: number;
  let env: NodeJS.ProcessEnv;
  let pebble: Pebble;
  let work: string;
  const dataDir = (): string => join(prefix, 'var/lib/atelier');
  const tlsDir = (): string => join(prefix, 'etc/atelier/tls');
  const atelier = (): string => join(prefix, 'usr/local/bin/atelier');
  const cli = (args: string[], extra: NodeJS.ProcessEnv = {}) => runProcess(atelier(), args, { ...env, ...extra });
  const tlsFlags = (): string[] => ['--tls-listen', `127.0.0.1:${tlsPort}`];
  /** GET /healthz over HTTPS as `name`, trusting `ca` only (curl: a real client). */
  const httpsHealthz = (name: string, ca: string): { status: string; version: string } =>
    JSON.parse(
      execFileSync('curl', ['-fsS', '--cacert', ca, '--resolve', `${name}:${tlsPort}:127.0.0.1`, `https://${name}:${tlsPort}/healthz`], {
        encoding: 'utf8',
      }),
    ) as { status: string; version: string };
  const selfSigned = (name: string): { cert: string; key: string } => makeSelfSigned(work, name, 90);
  const journalOf = (step: string): string[] =>
    readFileSync(join(prefix, 'opt/atelier/install-journal.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { step: string; outcome: string })
      .filter((e) => e.step === step)
      .map((e) => e.outcome);

  before(async () => {
    const release = cachedRelease(VERSION);
    site = await serveDir(release);
    ({ prefix, home, listen, env } = await hostTarget('tls', site.url));
    tlsPort = await freePort();
    work = mkdtempSync('/tmp/atelier-tls-files-');
    pebble = await startPebble(Number(listen.split(':')[1]));
  });

  after(async () => {
    await removeHostInstall({ prefix, home, env });
    await pebble?.[Symbol.asyncDispose]();
    rmSync(work, { recursive: true, force: true });
    await site[Symbol.asyncDispose]();
  });

  it('refuses a key that is not the certificate’s, saying how to check a pair, and changes nothing', async () => {
    const a = selfSigned('files.test');
    const b = selfSigned('other.test');
    const r = await runGetSh(
      ['--listen', listen, ...tlsFlags(), '--domain', 'files.test', '--tls-cert', a.cert, '--tls-key', b.key, '--yes'],
      env,
    );
    assert.notEqual(r.code, 0, r.stderr);
    assert.match(r.stderr, /nothing was changed/);
    assert.match(r.stderr, new RegExp(`--tls-key ${b.key} is not the key of --tls-cert ${a.cert}`));
    assert.match(r.stderr, /openssl x509 -noout -pubkey -in CERT/);
    assert.equal(existsSync(join(prefix, 'etc/atelier')), false, 'no step ran');
  });

  it('refuses a certificate that does not cover --domain', async () => {
    const a = selfSigned('files.test');
    const r = await runGetSh(
      ['--listen', listen, ...tlsFlags(), '--domain', 'other.test', '--tls-cert', a.cert, '--tls-key', a.key, '--yes'],
      env,
    );
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /does not cover other\.test \(it names DNS:files\.test\)/);
  });

  it('installs with given files: copied 0644/0600, served over HTTPS, shown by status', async () => {
    const a = selfSigned('files.test');
    const r = await runGetSh(
      ['--listen', listen, ...tlsFlags(), '--domain', 'files.test', '--tls-cert', a.cert, '--tls-key', a.key, '--yes'],
      env,
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /\[7\/8\] tls: applied .*DNS:files\.test until/);
    assert.match(r.stderr, new RegExp(`HTTPS: https://files\\.test:${tlsPort} \\(served on 127\\.0\\.0\\.1:${tlsPort}`));
    assert.equal(mode(join(tlsDir(), 'key.pem')), 0o600);
    assert.equal(mode(join(tlsDir(), 'cert.pem')), 0o644);
    assert.equal(httpsHealthz('files.test', a.cert).version, VERSION);
    assert.deepEqual(journalOf('tls'), ['applying', 'applied']);

    const token = /^token: (atl_\S+)/m.exec(readFileSync(join(dataDir(), 'credentials.txt'), 'utf8'))![1]!;
    const s = await cli(['server', 'status', '--prefix', prefix, '--output', 'json'], {
      ATELIER_URL: `http://${listen}`,
      ATELIER_TOKEN: token,
    });
    assert.equal(s.code, 0, s.stderr);
    const cert = (JSON.parse(s.stdout) as { certificates: { role: string; path: string; names: string[]; daysLeft: number }[] })
      .certificates[0]!;
    assert.equal(cert.role, 'served');
    assert.equal(cert.path, join(tlsDir(), 'cert.pem'));
    assert.deepEqual(cert.names, ['DNS:files.test']);
    assert.ok(cert.daysLeft >= 89 && cert.daysLeft <= 90, String(cert.daysLeft));
    const text = await cli(['server', 'status', '--prefix', prefix], { ATELIER_URL: `http://${listen}`, ATELIER_TOKEN: token });
    assert.match(
      text.stdout,
      /^certificate file: +\S+cert\.pem: DNS:files\.test by CN=files\.test, expires \d{4}-\d\d-\d\dT\S+ \((89|90) days\)$/m,
    );
  });

  it('falls back to a local CA when the ACME CA is unreachable, and says how to trust its root', async () => {
    const r = await cli([
      'server',
      'install',
      '--prefix',
      prefix,
      '--domain',
      'local.test',
      '--email',
      'admin@local.test',
      '--acme-directory',
      'http://127.0.0.1:1/directory',
      '--yes',
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /tls: applied/);
    assert.match(
      r.stderr,
      /The certificate is from a local CA \(the ACME CA is not used: http:\/\/127\.0\.0\.1:1\/directory is unreachable/,
    );
    const ca = /curl --cacert (\S+) /.exec(r.stderr)?.[1];
    assert.equal(ca, join(tlsDir(), 'local-ca.pem'));
    assert.equal(mode(join(tlsDir(), 'local-ca-key.pem')), 0o600);
    // The server re-read the new files: the local CA's root is all curl trusts.
    assert.equal(httpsHealthz('local.test', ca).status, 'ok');
  });

  it('gets a certificate from an ACME CA (pebble, real http-01 on loopback), with JSON progress', async () => {
    const r = await cli(
      [
        'server',
        'install',
        '--prefix',
        prefix,
        '--domain',
        'acme.test',
        '--email',
        'admin@acme.test',
        '--acme-directory',
        pebble.directory,
        '--yes',
        '--output',
        'json',
      ],
      { NODE_EXTRA_CA_CERTS: pebble.apiCa },
    );
    assert.equal(r.code, 0, `${r.stderr}\n${r.stdout}\npebble:\n${pebble.log()}`);
    const events = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { event: string; step?: string; state?: string; detail?: string; message?: string });
    assert.deepEqual(
      events.filter((e) => e.step === 'tls').map((e) => e.state),
      ['applying', 'applied'],
    );
    assert.ok(events.some((e) => e.event === 'log' && /answering the http-01 challenge for acme\.test/.test(e.message ?? '')));
    assert.match(events.find((e) => e.step === 'tls' && e.state === 'applied')!.detail!, /DNS:acme\.test until .*Pebble Intermediate CA/);
    // pebble fetched the key authorization from the installed server itself.
    assert.match(pebble.log(), /validat/i);
    const root = join(work, 'pebble-root.pem');
    writeFileSync(root, pebble.root());
    assert.equal(httpsHealthz('acme.test', root).version, VERSION);
    assert.equal(mode(join(tlsDir(), 'acme-account-key.pem')), 0o600);
  });

  it('a re-run changes nothing (plain lines off a terminal)', async () => {
    const r = await cli(['server', 'install', '--prefix', prefix], { NODE_EXTRA_CA_CERTS: pebble.apiCa });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /^\[7\/8\] tls: no change — DNS:acme\.test, until .* from the ACME CA/m);
    assert.match(r.stderr, /^no change: /m);
    assert.equal(r.stderr.includes('\u001b['), false, 'no terminal codes in a log');
  });

  it('the server renews an ACME certificate near its end by itself, and serves the new one without a restart of its own', async () => {
    const envFile = join(prefix, 'etc/atelier/atelier.env');
    const before = readFileSync(envFile, 'utf8');
    const certBefore = readFileSync(join(tlsDir(), 'cert.pem'), 'utf8');
    const supervisor = livePid(join(prefix, 'run/atelier/supervisor.pid'));
    assert.ok(supervisor, 'the supervisor runs');
    const restart = async (): Promise<void> => {
      const old = readFileSync(join(prefix, 'var/log/atelier/server.log'), 'utf8').length;
      process.kill(supervisor, 'SIGHUP');
      // Healthy again: the restarted server's "server ready" line.
      for (let i = 0; i < 600; i++) {
        if (readFileSync(join(prefix, 'var/log/atelier/server.log'), 'utf8').slice(old).includes('server ready')) return;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.fail('the server did not come back within 60 s');
    };
    try {
      // Every certificate pebble issues lasts 5 years: a threshold above that makes this one due.
      // The server reaches pebble's API over HTTPS with pebble's own CA, as with a private ACME CA.
      writeFileSync(envFile, `${before}ATELIER_TLS_RENEW_DAYS=3650\nNODE_EXTRA_CA_CERTS=${pebble.apiCa}\n`);
      await restart();
      let renewed = certBefore;
      for (let i = 0; i < 600 && renewed === certBefore; i++) {
        await new Promise((r) => setTimeout(r, 100));
        renewed = readFileSync(join(tlsDir(), 'cert.pem'), 'utf8');
      }
      assert.notEqual(
        renewed,
        certBefore,
        `no renewal within 60 s:\n${readFileSync(join(prefix, 'var/log/atelier/server.log'), 'utf8').slice(-3000)}`,
      );
      assert.equal(mode(join(tlsDir(), 'key.pem')), 0o600);
      assert.equal(mode(join(tlsDir(), 'cert.pem')), 0o644);
      assert.match(readFileSync(join(prefix, 'var/log/atelier/server.log'), 'utf8'), /TLS certificate renewed/);
      // Served within the reload interval, to a client that trusts pebble's root only.
      const root = join(work, 'pebble-root.pem');
      const served = (): string =>
        execFileSync(
          'sh',
          [
            '-c',
            `openssl s_client -connect 127.0.0.1:${tlsPort} -servername acme.test -CAfile ${root} </dev/null 2>/dev/null | openssl x509 -outform PEM`,
          ],
          { encoding: 'utf8' },
        );
      const first = renewed.slice(0, renewed.indexOf('-----END CERTIFICATE-----') + 25).trim();
      let now = '';
      for (let i = 0; i < 100 && now !== first; i++) {
        now = served().trim();
        if (now !== first) await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(now, first, 'the renewed certificate is the one served');
      assert.equal(httpsHealthz('acme.test', root).version, VERSION);
    } finally {
      // Back as the install wrote it, and the server started on it (so the next install sees no change).
      writeFileSync(envFile, before);
      await restart();
    }
  });

  it('--no-tls undoes the TLS step (with a new --listen): the server restarted on plain HTTP, a change once, then none', async () => {
    const envFile = join(prefix, 'etc/atelier/atelier.env');
    const httpsAnswers = (): boolean => {
      try {
        execFileSync('curl', ['-ksS', '--max-time', '5', `https://127.0.0.1:${tlsPort}/healthz`], { stdio: 'ignore' });
        return true;
      } catch {
        return false;
      }
    };
    assert.equal(httpsAnswers(), true, 'HTTPS is served before');
    const refused = await cli(['server', 'install', '--prefix', prefix, '--no-tls', '--domain', 'acme.test']);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /--no-tls serves plain HTTP only, and --domain asks for HTTPS: give one or the other/);

    const plan = await cli(['server', 'install', '--prefix', prefix, '--no-tls', '--plan']);
    assert.equal(plan.code, 0, plan.stderr);
    assert.match(plan.stderr, /^\[7\/8\] tls: planned — TLS removed \(--no-tls: plain HTTP only\)$/m);
    assert.match(plan.stderr, new RegExp(`remove \\S+cert\\.pem, \\S+key\\.pem, \\S+source\\.json, \\S+acme-account-key\\.pem`));
    assert.match(plan.stderr, /keep the local CA \S+local-ca\.pem/);
    assert.match(plan.stderr, new RegExp(`no more HTTPS on 127\\.0\\.0\\.1:${tlsPort}`));
    assert.equal(httpsAnswers(), true, 'the plan changed nothing');

    // Another listen address at the same time: every setting but the data dir converges on a re-run.
    const moved = `127.0.0.1:${await freePort()}`;
    const r = await cli(['server', 'install', '--prefix', prefix, '--no-tls', '--listen', moved, '--yes']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stderr,
      /^\[3\/8\] configuration: applied .*\n\s+write \S+atelier\.env \(0640\): ATELIER_LISTEN, ATELIER_PUBLIC_URL, ATELIER_TLS_CERT, ATELIER_TLS_KEY, ATELIER_TLS_LISTEN$/m,
    );
    assert.match(r.stderr, /^\[6\/8\] service: applied/m);
    assert.match(
      r.stderr,
      /^\[7\/8\] tls: applied \(\d+\.\d s\) — removed \S+cert\.pem, its key and the ACME account key \(the local CA \S+local-ca\.pem is kept/m,
    );
    assert.match(r.stderr, new RegExp(`is installed and running at http://${moved.replace(/\./g, '\\.')}`));
    assert.doesNotMatch(r.stderr, /HTTPS:/);
    const conf = readFileSync(envFile, 'utf8');
    assert.match(conf, new RegExp(`^ATELIER_LISTEN=${moved}$`, 'm'));
    assert.doesNotMatch(conf, /ATELIER_TLS_|ATELIER_PUBLIC_URL/, 'no TLS, and no https:// public URL derived from it');
    for (const f of ['cert.pem', 'key.pem', 'source.json', 'acme-account-key.pem']) assert.equal(existsSync(join(tlsDir(), f)), false, f);
    assert.equal(existsSync(join(tlsDir(), 'local-ca.pem')), true, 'the local CA is kept');
    assert.equal(httpsAnswers(), false, 'nothing serves HTTPS any more');
    const plain = (await (await fetch(`http://${moved}/healthz`)).json()) as { version: string };
    assert.equal(plain.version, VERSION);
    await assert.rejects(fetch(`http://${listen}/healthz`), 'the old address is closed');
    assert.match(readFileSync(join(dataDir(), 'credentials.txt'), 'utf8'), new RegExp(`^url: http://${moved}$`, 'm'));
    assert.deepEqual(journalOf('tls').slice(-2), ['applying', 'applied']);
    listen = moved;

    const again = await cli(['server', 'install', '--prefix', prefix, '--no-tls']);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /^\[7\/8\] tls: no change — no TLS installed \(plain HTTP only\)$/m);
    assert.match(again.stderr, /^no change: /m);
    // Without the flag: plain HTTP stays (TLS is not brought back), and nothing changes.
    const plainAgain = await cli(['server', 'install', '--prefix', prefix]);
    assert.equal(plainAgain.code, 0, plainAgain.stderr);
    assert.match(plainAgain.stderr, /^\[7\/7\] credentials: no change/m);
    assert.match(plainAgain.stderr, /^no change: /m);
  });

  it('refuses to move the data dir on a re-run, saying what to do, and changes nothing', async () => {
    const r = await cli(['server', 'install', '--prefix', prefix, '--data-dir', join(prefix, 'elsewhere'), '--yes']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /nothing was changed/);
    assert.match(r.stderr, new RegExp(`the installed server keeps its data in ${dataDir()}: install does not move it\\. Drop --data-dir`));
    assert.equal(existsSync(join(prefix, 'elsewhere')), false);
  });

  it('on a terminal: a live step list (a spinner on the running step, then its mark)', async () => {
    const a = selfSigned('files.test');
    const p = pty.spawn(
      atelier(),
      ['server', 'install', '--prefix', prefix, ...tlsFlags(), '--domain', 'files.test', '--tls-cert', a.cert, '--tls-key', a.key, '--yes'],
      {
        env: env as Record<string, string>,
        cols: 200,
        rows: 50,
      },
    );
    let out = '';
    p.onData((d) => (out += d));
    const code = await new Promise<number>((resolve) => p.onExit((e) => resolve(e.exitCode)));
    assert.equal(code, 0, out);
    assert.match(out, /· \[1\/8\] release: no change/);
    assert.match(out, /[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] \[7\/8\] tls: TLS certificate/, 'a spinner while the step runs');
    assert.ok(out.includes('\r\u001b[K✓ [7/8] tls: applied'), `the spinner line replaced by the mark:\n${out}`);
    assert.equal(httpsHealthz('files.test', a.cert).status, 'ok');
  });

  it('uninstall removes the certificate and key it installed, keeping the local CA', async () => {
    const r = await cli(['server', 'uninstall', '--prefix', prefix]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /tls: undone — removed .*cert\.pem, its key and the ACME account key \(the local CA .* is kept/);
    for (const f of ['cert.pem', 'key.pem', 'source.json', 'acme-account-key.pem']) assert.equal(existsSync(join(tlsDir(), f)), false, f);
    assert.equal(existsSync(join(tlsDir(), 'local-ca.pem')), true);
    assert.match(r.stderr, /Kept: .*local-ca\.pem/);
  });
});
