/**
 * 9. Secrets (SECRET_REQUEST): decision → effect applied (the secret mounted and written in the
 * workshop), beside the same for ALLOWLIST_EXPANSION (an effect that only updates the policy),
 * measured the same way in the same run; then the cost granted secrets add to an exec: `true`
 * in a workshop holding one grant beside `true` in one holding none (interleaved).
 */
import { alternate, heading, line, ratioLine, sleep, statLine, summarize, type BenchServer } from './lib.js';

const GRANTS = 30;
const EXECS = 150;

export async function secrets(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`9. secrets: decision → secret in the workshop (${GRANTS} runs), and exec with / without a granted secret (${EXECS} runs)`);
  const withSecret = await server.createWorkshop();
  const without = await server.createWorkshop();
  const result: Record<string, unknown> = {};
  try {
    const token = (await server.request<{ token: string }>('POST', '/v1/tokens', { workshopId: withSecret.id, expiresInSeconds: 3600 }))
      .token;
    await server.request('PUT', '/v1/secrets/BENCH_SECRET', { value: 'bench-value' });
    let n = 0;
    const file = async (category: string, payload: Record<string, unknown>): Promise<string> => {
      const r = await fetch(`${server.url}/v1/workshops/${withSecret.id}/approvals`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ category, payload: { ...payload, justification: 'bench' } }),
      });
      const body = (await r.json()) as { id: string };
      if (r.status !== 201) throw new Error(`file: ${r.status} ${JSON.stringify(body)}`);
      return body.id;
    };
    /** Decision sent → effect recorded (polled every 2 ms). */
    const decideAndApply = async (id: string): Promise<number> => {
      const t0 = performance.now();
      await server.request('POST', `/v1/approvals/${id}/decision`, { decision: 'APPROVE', reason: 'bench' });
      for (;;) {
        const a = await server.request<{ effect: { appliedAt: string | null; error: string | null } }>('GET', `/v1/approvals/${id}`);
        if (a.effect.error) throw new Error(`effect failed: ${a.effect.error}`);
        if (a.effect.appliedAt) return performance.now() - t0;
        await sleep(2);
      }
    };
    const [grant, allow] = await alternate(
      GRANTS,
      3,
      async () => decideAndApply(await file('SECRET_REQUEST', { name: 'BENCH_SECRET' })),
      async () => decideAndApply(await file('ALLOWLIST_EXPANSION', { host: `h${++n}.bench.example` })),
    );
    const gs = summarize(grant);
    const as = summarize(allow);
    statLine('atelier', 'SECRET_REQUEST decision → file written on the tmpfs', gs, ['p50', 'p99']);
    statLine('peer', 'ALLOWLIST_EXPANSION decision → policy updated', as, ['p50', 'p99']);
    ratioLine('secret grant / allowlist effect (p50)', gs.p50, as.p50);
    result.grant = gs;
    result.allowlist = as;
    const check = await server.exec(withSecret.id, ['sh', '-c', 'cat /run/atelier/secrets/BENCH_SECRET; printenv BENCH_SECRET']);
    if (check.stdout !== 'bench-valuebench-value\n') throw new Error(`the secret is not in the workshop: ${JSON.stringify(check)}`);

    const [e1, e0] = await alternate(
      EXECS,
      10,
      async () => void (await server.exec(withSecret.id, ['true'])),
      async () => void (await server.exec(without.id, ['true'])),
    );
    const s1 = summarize(e1);
    const s0 = summarize(e0);
    statLine('atelier', 'exec `true`, workshop holding a granted secret', s1, ['p50', 'p99']);
    statLine('peer', 'exec `true`, workshop holding none', s0, ['p50', 'p99']);
    ratioLine('with secret / without (p50)', s1.p50, s0.p50);
    result.execWithSecret = s1;
    result.execWithout = s0;
    line('(the grant includes mounting the tmpfs once, then one file write per grant)');
  } finally {
    await server.request('DELETE', '/v1/secrets/BENCH_SECRET').catch(() => undefined);
    await server.deleteWorkshop(withSecret.id);
    await server.deleteWorkshop(without.id);
  }
  return result;
}
