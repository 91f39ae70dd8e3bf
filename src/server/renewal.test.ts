// The server's own renewal, by the local CA (the ACME path is tested against pebble in
// test/host.tls.test.ts): due, fresh, given files left alone, a broken source.json reported.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tlsFiles } from '../core/index.js';
import { issueLocalCertificate } from './certificates.js';
import { renewIfDue } from './renewal.js';

const quiet = { info: () => undefined, warn: () => undefined };

async function installed(kind: 'local' | 'files'): Promise<{ dir: string; files: ReturnType<typeof tlsFiles> } & Disposable> {
  const dir = mkdtempSync(join(tmpdir(), 'atelier-renewal-'));
  const files = tlsFiles(dir);
  const pair = await issueLocalCertificate(files, 'renew.test');
  writeFileSync(files.cert, pair.cert, { mode: 0o644 });
  writeFileSync(files.key, pair.key, { mode: 0o600 });
  writeFileSync(
    files.source,
    JSON.stringify(
      kind === 'local' ? { kind: 'local', domain: 'renew.test' } : { kind: 'files', cert: '/x', key: '/y', domain: 'renew.test' },
    ),
  );
  return { dir, files, [Symbol.dispose]: () => rmSync(dir, { recursive: true, force: true }) };
}

describe('TLS renewal by the server', () => {
  it('renews a local-CA certificate with fewer days left than the threshold: a new pair from the same root, modes kept', async () => {
    using t = await installed('local');
    const before = readFileSync(t.files.cert, 'utf8');
    const root = new X509Certificate(readFileSync(t.files.caCert));
    // The local CA's leaves last a year: a threshold of 400 days makes this one due.
    const r = await renewIfDue({ cert: t.files.cert, key: t.files.key, dataDir: t.dir, renewDays: 400, log: quiet });
    assert.equal(r.state, 'renewed');
    const after = readFileSync(t.files.cert, 'utf8');
    assert.notEqual(after, before);
    const leaf = new X509Certificate(after);
    assert.ok(leaf.checkHost('renew.test'));
    assert.ok(leaf.verify(root.publicKey), 'signed by the same local CA');
    assert.ok(leaf.checkPrivateKey((await import('node:crypto')).createPrivateKey(readFileSync(t.files.key))));
    assert.equal(statSync(t.files.key).mode & 0o777, 0o600);
    assert.equal(statSync(t.files.cert).mode & 0o777, 0o644);
  });

  it('leaves a certificate with enough days alone', async () => {
    using t = await installed('local');
    const before = readFileSync(t.files.cert, 'utf8');
    const r = await renewIfDue({ cert: t.files.cert, key: t.files.key, dataDir: t.dir, renewDays: 30, log: quiet });
    assert.equal(r.state, 'fresh');
    assert.ok(r.state === 'fresh' && r.daysLeft >= 363);
    assert.equal(readFileSync(t.files.cert, 'utf8'), before);
  });

  it('never touches files the operator gave, nor a certificate outside the install’s folder', async () => {
    using t = await installed('files');
    const r = await renewIfDue({ cert: t.files.cert, key: t.files.key, dataDir: t.dir, renewDays: 3650, log: quiet });
    assert.equal(r.state, 'not-ours');
    const elsewhere = await renewIfDue({ cert: join(t.dir, 'mine.pem'), key: t.files.key, dataDir: t.dir, renewDays: 3650, log: quiet });
    assert.equal(elsewhere.state, 'not-ours');
  });

  it('a source.json that does not parse is reported, nothing written', async () => {
    using t = await installed('local');
    writeFileSync(t.files.source, '{not json');
    const before = readFileSync(t.files.cert, 'utf8');
    const r = await renewIfDue({ cert: t.files.cert, key: t.files.key, dataDir: t.dir, renewDays: 400, log: quiet });
    assert.equal(r.state, 'failed');
    assert.match(r.state === 'failed' ? r.error : '', /source\.json/);
    assert.equal(readFileSync(t.files.cert, 'utf8'), before);
  });
});
