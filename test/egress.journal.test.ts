import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EgressJournal, type EgressDecision } from '../src/egress/index.js';
import { createPool, migrate, type Pool } from '../src/db/index.js';
import { ExternalPostgres } from './helpers/postgres.js';

// The decisions journal on a real PostgreSQL: a decision the database refuses (a malformed port
// from a hostile client, a NUL byte) must never block the others, nor be retried forever.
describe('egress decisions journal', () => {
  let db: ExternalPostgres;
  let pool: Pool;
  const warnings: string[] = [];
  const log = { warn: (_o: object, msg?: string) => void warnings.push(msg ?? '') };

  before(async () => {
    db = ExternalPostgres.start();
    pool = createPool(db.url, () => undefined);
    await migrate(pool);
    await pool.query(
      `INSERT INTO workshops (id, name, tenant_id, node_id, status, repo, uid, cpus, memory_bytes, pids)
       VALUES ('ws-journal1', 'j', 'tn-default', 'node-test', 'Running', '/tmp/r', 1, 1, 1, 1)`,
    );
  });
  after(async () => {
    await pool?.end();
    db?.stop();
  });

  const decision = (over: Partial<EgressDecision>): EgressDecision => ({
    at: new Date(),
    protocol: 'connect',
    target: 'x',
    host: 'example.com',
    port: 443,
    allowed: false,
    outcome: 'unknown',
    reason: 'NOT_ALLOWLISTED',
    message: 'not allowed',
    ...over,
  });

  it('keeps recording after a malformed port and a NUL byte, and writes what it can', async () => {
    const j = new EgressJournal(pool, log);
    j.record('ws-journal1', decision({ host: 'before.test' }));
    j.record('ws-journal1', decision({ host: 'bad-port.test', port: Number.NaN }));
    j.record('ws-journal1', decision({ host: 'nul\u0000.test' }));
    j.record('ws-journal1', decision({ host: 'after.test' }));
    j.record('ws-gone', decision({ host: 'deleted-workshop.test' }));
    const rows = await j.list('ws-journal1');
    const hosts = rows.map((r) => r.host);
    assert.deepEqual(hosts, ['before.test', 'bad-port.test', 'after.test']);
    assert.equal(rows[1]!.port, 0, 'a port the database cannot store is recorded as 0');
    assert.ok(
      warnings.some((w) => /refused by the database/.test(w)),
      warnings.join('; '),
    );
    // Nothing stays queued to be retried.
    j.record('ws-journal1', decision({ host: 'later.test' }));
    assert.deepEqual(
      (await j.list('ws-journal1', { afterId: rows.at(-1)!.id })).map((r) => r.host),
      ['later.test'],
    );
    await j.close();
  });

  it('writes a burst of decisions in the order they were made, across batches', async () => {
    const j = new EgressJournal(pool, log);
    const before = (await j.list('ws-journal1', { limit: 1 })).at(-1)?.id ?? 0;
    const n = 4500;
    for (let i = 0; i < n; i++)
      j.record('ws-journal1', decision({ host: `burst-${i}.test`, allowed: i % 2 === 0, entry: i % 3 === 0 ? 'burst' : undefined }));
    const rows = await j.list('ws-journal1', { afterId: before, limit: n + 10 });
    assert.equal(rows.length, n);
    assert.deepEqual(
      rows.map((r) => r.host),
      Array.from({ length: n }, (_, i) => `burst-${i}.test`),
    );
    assert.deepEqual(
      [rows[0]!.allowed, rows[1]!.allowed, rows[0]!.entry, rows[1]!.entry, rows[0]!.port],
      [true, false, 'burst', null, 443],
    );
    await j.close();
  });

  it('a read made while the timer is writing a batch waits for it (it sees its own requests)', async () => {
    const j = new EgressJournal(pool, log);
    const before = (await j.list('ws-journal1', { limit: 1 })).at(-1)?.id ?? 0;
    // Writes wait behind this lock (reads do not): the batch is still being written when the read asks.
    const locker = await pool.connect();
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE egress_decisions IN SHARE ROW EXCLUSIVE MODE');
    j.record('ws-journal1', decision({ host: 'in-flight.test' }));
    const timerFlush = j.flush();
    setTimeout(() => void locker.query('COMMIT').finally(() => locker.release()), 300);
    const rows = await j.list('ws-journal1', { afterId: before });
    assert.deepEqual(
      rows.map((r) => r.host),
      ['in-flight.test'],
    );
    await timerFlush;
    await j.close();
  });
});
