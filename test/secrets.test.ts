import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { actors } from './helpers/actors.js';
import { TestServer, makeRepo } from './helpers/server.js';

// SECRET_REQUEST end to end in a real workshop: a maintainer sets a secret with the real CLI
// (value on stdin), the workshop's agent asks for it, a person approves, and the value appears
// as a file on a tmpfs inside the workshop and in new execs, then goes when the grant ends
// (also when the server was down at that moment). The value is never in an API answer, and
// never in clear anywhere in the server's data directory (database files, WAL, logs).
interface Approval {
  id: string;
  status: string;
  payload: Record<string, unknown>;
  effect: { appliedAt: string | null; error: string | null };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('secrets and SECRET_REQUEST', () => {
  let server: TestServer;
  let repo: string;
  let ws: string;
  const VALUE = `sk_test_${randomBytes(12).toString('hex')}`;
  /** Every API and CLI answer of this test (not the workshop's own output), to check that the value never appears in one. */
  const answers: string[] = [];
  const { tokens, as, cliAs, workshopWithAgent } = actors(() => server, { record: (text) => answers.push(text) });
  const sh = async (script: string) => {
    // What the workshop itself prints (it reads its granted secret on purpose): not an API answer about secrets.
    return server.exec(ws, ['sh', '-c', script]);
  };
  const ask = (name: string, extra: Record<string, unknown> = {}, ttlSeconds?: number) =>
    as<Approval>('agent', 'POST', `/v1/workshops/${ws}/approvals`, {
      category: 'SECRET_REQUEST',
      payload: { name, justification: 'call the payment API in the integration tests', ...extra },
      ...(ttlSeconds !== undefined ? { ttlSeconds } : {}),
    });
  const applied = async (id: string): Promise<Approval> => {
    const until = Date.now() + 20_000;
    for (;;) {
      const a = (await as<Approval>('owner', 'GET', `/v1/approvals/${id}`)).body;
      if (a.effect.appliedAt || Date.now() > until) return a;
      await sleep(50);
    }
  };
  /** Polls the workshop until `script` prints `want` (a grant's end is swept every second). */
  const until = async (script: string, want: string, ms = 30_000): Promise<string> => {
    const end = Date.now() + ms;
    let out = '';
    while (Date.now() < end) {
      out = (await sh(script)).stdout.trim();
      if (out === want) return out;
      await sleep(200);
    }
    return out;
  };

  before(async () => {
    server = await TestServer.start();
    tokens.admin = server.token;
    for (const [name, role] of [
      ['owner', 'member'],
      ['lead', 'maintainer'],
      ['watcher', 'viewer'],
    ] as const) {
      assert.equal((await as('admin', 'POST', '/v1/users', { name, role })).status, 201);
      tokens[name] = (await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: name, expiresInSeconds: 3600 })).body.token;
    }
    assert.equal((await as('admin', 'POST', '/v1/users', { name: 'stranger', role: 'admin', tenant: 'other' })).status, 201);
    tokens.stranger = (await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: 'stranger', tenant: 'other' })).body.token;
    repo = makeRepo();
    ws = await workshopWithAgent(repo, 'secrets');
  });

  after(async () => {
    await server?.dispose();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('a maintainer sets a secret from stdin; lists show names only; rights are checked', async () => {
    const set = await cliAs('lead', ['secrets', 'set', 'STRIPE_KEY'], `${VALUE}\n`);
    assert.equal(set.code, 0, set.stderr);
    assert.match(set.stdout, /secret STRIPE_KEY set/);
    assert.equal((await cliAs('lead', ['secrets', 'set', 'OTHER_KEY'], 'other-value')).code, 0);

    const list = await cliAs('owner', ['secrets', 'list']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /STRIPE_KEY\s+lead\s+\d{4}-/);
    const json = JSON.parse((await cliAs('owner', ['secrets', 'list', '-o', 'json'])).stdout) as Record<string, unknown>[];
    assert.deepEqual(Object.keys(json[0]!).sort(), ['name', 'setAt', 'setBy']);
    // The agent may see what it can ask for; a viewer sees nothing; another tenant sees its own (none).
    assert.equal((await as('agent', 'GET', '/v1/secrets')).status, 200);
    assert.equal((await as('watcher', 'GET', '/v1/secrets')).status, 403);
    assert.deepEqual((await as<{ items: unknown[] }>('stranger', 'GET', '/v1/secrets')).body.items, []);
    // Only maintainers and admins set or delete.
    const member = await cliAs('owner', ['secrets', 'set', 'MINE'], 'x');
    assert.equal(member.code, 1);
    assert.match(member.stderr, /maintainer role/);
    assert.equal((await as('agent', 'PUT', '/v1/secrets/AGENT', { value: 'x' })).status, 403);
    assert.equal((await as('owner', 'DELETE', '/v1/secrets/STRIPE_KEY')).status, 403);
  });

  it('bad input gets clear errors and changes nothing', async () => {
    // Never from an argument (it would sit in the shell's history and in ps).
    const argv = await server.cli(['secrets', 'set', 'ARGV_KEY', 'argv-value'], { env: { ATELIER_TOKEN: tokens.lead } });
    assert.equal(argv.code, 2);
    assert.match(argv.stderr, /too many arguments[\s\S]*read from stdin, never from an argument/);
    const empty = await cliAs('lead', ['secrets', 'set', 'EMPTY'], '');
    assert.equal(empty.code, 1);
    assert.match(empty.stderr, /no value on stdin/);
    const bad = await as<{ code: string; message: string }>('lead', 'PUT', '/v1/secrets/9lives', { value: 'x' });
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /not a secret name/);
    const reserved = await as<{ code: string; message: string }>('lead', 'PUT', '/v1/secrets/LD_PRELOAD', { value: '/tmp/x.so' });
    assert.equal(reserved.status, 400);
    assert.match(reserved.body.message, /reserved/);
    const big = await as<{ code: string }>('lead', 'PUT', '/v1/secrets/BIG', { value: 'x'.repeat(70_000) });
    assert.equal(big.status, 413);
    const nul = await as<{ code: string }>('lead', 'PUT', '/v1/secrets/NUL', { value: 'a\0b' });
    assert.equal(nul.status, 400);
    const gone = await as<{ code: string }>('lead', 'DELETE', '/v1/secrets/NEVER_SET');
    assert.equal(gone.status, 404);
    const names = (await as<{ items: { name: string }[] }>('lead', 'GET', '/v1/secrets')).body.items.map((s) => s.name);
    assert.deepEqual(names, ['OTHER_KEY', 'STRIPE_KEY']);
    // Asking for a secret that is not set: refused at once, saying who can set it.
    const unknown = await ask('NOT_THERE');
    assert.equal(unknown.status, 404);
    assert.match(JSON.stringify(unknown.body), /atelier secrets set NOT_THERE/);
    const extra = await ask('STRIPE_KEY', { value: 'smuggled' });
    assert.equal(extra.status, 400);
  });

  it('approved: the value appears on a tmpfs, 0400 to the workshop user, and in new execs; it goes when the grant ends', async () => {
    const before = await sh('ls -A /run/atelier/secrets 2>/dev/null; printenv STRIPE_KEY; true');
    assert.equal(before.stdout, '');
    const r = await ask('STRIPE_KEY', { ttlSeconds: 12 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.deepEqual(Object.keys(r.body.payload).sort(), ['justification', 'mode', 'name', 'risk', 'ttlSeconds']);
    assert.equal(r.body.payload.mode, 'reveal');
    const ok = await cliAs('owner', ['approvals', 'approve', r.body.id, '--reason', 'test key only']);
    assert.equal(ok.code, 0, ok.stderr);
    const a = await applied(r.body.id);
    assert.ok(a.effect.appliedAt, 'effect applied');
    assert.equal(a.effect.error, null);

    const seen = await sh(
      'id -u; stat -c "%a %u" /run/atelier/secrets/STRIPE_KEY; stat -f -c %T /run/atelier/secrets; stat -c "%a %u" /run/atelier/secrets; cat /run/atelier/secrets/STRIPE_KEY; echo; printenv STRIPE_KEY',
    );
    const [uid, file, fs, dir, content, env] = seen.stdout.split('\n');
    assert.equal(file, `400 ${uid}`, seen.stdout + seen.stderr);
    assert.equal(fs, 'tmpfs');
    assert.equal(dir, `700 ${uid}`);
    assert.equal(content, VALUE);
    assert.equal(env, VALUE);
    // Not the granted OTHER_KEY, and never written to the host's disk (the host mount point stays empty).
    assert.equal((await sh('printenv OTHER_KEY; ls /run/atelier/secrets')).stdout, 'STRIPE_KEY\n');

    assert.equal(await until('ls -A /run/atelier/secrets; printenv STRIPE_KEY; true', ''), '');
  });

  it('rejected or expired: no file, no variable; a late approval is refused', async () => {
    const r = await ask('OTHER_KEY');
    assert.equal((await cliAs('lead', ['approvals', 'reject', r.body.id, '--reason', 'no'])).code, 0);
    const e = await ask('OTHER_KEY', {}, 1);
    await sleep(1500);
    const late = await as<{ code: string }>('owner', 'POST', `/v1/approvals/${e.body.id}/decision`, {
      decision: 'APPROVE',
      reason: 'late',
    });
    assert.equal(late.status, 409);
    assert.equal((await as<Approval>('owner', 'GET', `/v1/approvals/${e.body.id}`)).body.status, 'EXPIRED');
    await sleep(1500);
    assert.equal((await sh('ls -A /run/atelier/secrets; printenv OTHER_KEY; true')).stdout, '');
  });

  it('a suspended (frozen) then resumed workshop still holds its live grants', async () => {
    assert.equal((await cliAs('lead', ['secrets', 'set', 'THIRD_KEY'], 'third-value')).code, 0);
    const r = await ask('THIRD_KEY', { ttlSeconds: 3600 });
    await cliAs('owner', ['approve', r.body.id]);
    assert.equal((await applied(r.body.id)).effect.error, null);
    assert.equal((await sh('cat /run/atelier/secrets/THIRD_KEY')).stdout, 'third-value');
    assert.equal((await as('owner', 'POST', `/v1/workshops/${ws}/stop`)).status, 200);
    assert.equal((await as('owner', 'POST', `/v1/workshops/${ws}/resume`)).status, 200);
    assert.equal(
      await until('cat /run/atelier/secrets/THIRD_KEY; echo; printenv THIRD_KEY', 'third-value\nthird-value', 10_000),
      'third-value\nthird-value',
    );
    assert.equal((await cliAs('lead', ['secrets', 'delete', 'THIRD_KEY'])).code, 0);
    assert.equal((await sh('ls -A /run/atelier/secrets; true')).stdout, '');
  });

  it('deleting the secret ends its grants at once; a grant that ended while the server was down is removed at start', async () => {
    const r = await ask('OTHER_KEY', { ttlSeconds: 3600 });
    await cliAs('owner', ['approve', r.body.id]);
    assert.ok((await applied(r.body.id)).effect.appliedAt);
    assert.equal((await sh('cat /run/atelier/secrets/OTHER_KEY')).stdout, 'other-value');
    const del = await cliAs('lead', ['secrets', 'delete', 'OTHER_KEY']);
    assert.equal(del.code, 0, del.stderr);
    assert.equal((await sh('ls -A /run/atelier/secrets; printenv OTHER_KEY; true')).stdout, '');

    const s = await ask('STRIPE_KEY', { ttlSeconds: 10 });
    await cliAs('owner', ['approve', s.body.id]);
    assert.ok((await applied(s.body.id)).effect.appliedAt);
    assert.equal((await sh('ls /run/atelier/secrets')).stdout, 'STRIPE_KEY\n');
    await server.stop();
    // The workshop keeps running while the server is down; the grant ends meanwhile.
    await sleep(11_000);
    await server.boot();
    assert.equal(await until('ls -A /run/atelier/secrets; true', '', 10_000), '');
  });

  it('the value is in no API answer and nowhere in clear in the data directory', () => {
    assert.ok(answers.length > 20);
    for (const a of answers) assert.ok(!a.includes(VALUE), `an answer holds the value: ${a.slice(0, 200)}`);
    let found = '';
    try {
      found = execFileSync('grep', ['-r', '-l', '-a', '-D', 'skip', '-F', VALUE, server.dataDir], { encoding: 'utf8' });
    } catch (err) {
      assert.equal((err as { status: number }).status, 1, 'grep found nothing (status 1), not an error');
    }
    assert.equal(found, '', `the value is in clear in ${found}`);
    assert.ok(server.log.length > 0 && !server.log.includes(VALUE), 'the server log does not hold the value');
  });
});
