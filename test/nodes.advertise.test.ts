import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { BIN, TestServer } from './helpers/server.js';

// `--advertise-url` as the Helm chart gives it (`http://$(POD_IP):7878`): on an IPv6 cluster the
// pod's address arrives without brackets, and the node must still be reachable by the others.
describe('server start --advertise-url with an IPv6 pod address', () => {
  let server: TestServer | undefined;
  after(async () => {
    await server?.dispose();
  });

  it('takes an unbracketed IPv6 address before its port, and advertises it bracketed', async () => {
    server = await TestServer.start({ args: ['--advertise-url', 'http://fd00::5:7878'] });
    const r = await server.api<{ items: { address: string }[] }>('GET', '/v1/nodes');
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(
      r.body.items.map((n) => n.address),
      ['http://[fd00::5]:7878'],
    );
  });

  it('refuses an address that is not one, saying how to write an IPv6 one, before starting anything', () => {
    const dir = mkdtempSync('/tmp/atelier-advertise-');
    try {
      for (const bad of ['http://fd00::5', 'http://zz::1:7878']) {
        const r = spawnSync(
          process.execPath,
          [BIN, 'server', 'start', '--data-dir', dir, '--listen', '127.0.0.1:0', '--advertise-url', bad],
          {
            encoding: 'utf8',
            env: { PATH: process.env.PATH, HOME: process.env.HOME, ATELIER_CONFIG_DIR: `${dir}/config` },
            timeout: 60_000,
          },
        );
        assert.notEqual(r.status, 0);
        assert.match(r.stderr, /--advertise-url must be a URL such as .* \(an IPv6 address in brackets: http:\/\/\[fd00::5\]:7878\)/);
        assert.ok(r.stderr.includes(bad), r.stderr);
        // Refused before the data dir is made (no embedded PostgreSQL started for nothing).
        assert.ok(!existsSync(`${dir}/data`), 'nothing made');
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
