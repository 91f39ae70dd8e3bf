import { useRef } from 'react';
import { getUsage, type Workshop, type WorkshopDisk, type WorkshopUsage } from './api.ts';
import { visible } from './ApprovalsList.tsx';
import { usePoll } from './usePoll.ts';
import { cpuShare, cpuTime } from './usage.ts';

export function bytes(n: number): string {
  return n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${Math.round(n / 2 ** 20)} MiB`;
}

const usd = (n: number): string => `$${n.toFixed(2)}`;
const percent = (part: number, whole: number): string => `${Math.round((100 * part) / Math.max(1, whole))}%`;

/** How often the page reads the workshop's usage: also the interval its CPU rate is measured over. */
const USAGE_POLL_MS = 2000;

/** A figure against its ceiling: the text, and a <meter> named by its row's term (what a screen reader says). */
function Gauge({ labelId, value, max, text }: { labelId: string; value: number; max: number; text: string }) {
  return (
    <>
      <span>{text}</span>{' '}
      <meter aria-labelledby={labelId} min={0} max={max} low={max * 0.75} high={max * 0.9} optimum={0} value={Math.min(value, max)}>
        {text}
      </meter>
    </>
  );
}

/**
 * What the workshop uses beside its limits. Memory, CPU and processes come from
 * `GET /v1/workshops/:id/usage` (its cgroups, on the node that runs it), read every 2 s; the
 * disk (live from its node, or why it is not enforced) and the model spend come with the
 * workshop itself.
 *
 * CPU is shown as a share of its `cpus` limit over the last interval between two readings
 * (from the growth of its CPU time, on the server's clock), with the CPU time used in all: the
 * share against the limit is what says whether the workshop is held back by it, which a running
 * total of CPU-seconds does not.
 */
export function Usage({ workshop: w, onSignedOut }: { workshop: Workshop & { disk?: WorkshopDisk }; onSignedOut: () => void }) {
  const before = useRef<WorkshopUsage>(undefined);
  const { data: u, error } = usePoll(
    async () => {
      const now = await getUsage(w.id);
      const share = cpuShare(before.current, now, now.limits.cpus);
      before.current = now;
      return { ...now, share };
    },
    USAGE_POLL_MS,
    onSignedOut,
    `usage-${w.id}`,
  );
  const d = w.disk;
  const limits = u?.limits ?? w.limits;
  return (
    <section aria-labelledby="usage-title">
      <h2 id="usage-title">Usage</h2>
      {error && (
        <p role="alert" className="error">
          {visible(error)}
        </p>
      )}
      <dl className="facts usage" data-testid="workshop-usage">
        <dt id="usage-memory">Memory</dt>
        <dd data-testid="usage-memory">
          {u && u.memoryBytes !== null ? (
            <>
              <Gauge
                labelId="usage-memory"
                value={u.memoryBytes}
                max={limits.memoryBytes}
                text={`${bytes(u.memoryBytes)} of ${bytes(limits.memoryBytes)} (${percent(u.memoryBytes, limits.memoryBytes)})`}
              />
              {u.memoryPeakBytes !== null && <span className="muted"> · peak {bytes(u.memoryPeakBytes)}</span>}
            </>
          ) : (
            `at most ${bytes(limits.memoryBytes)}`
          )}
        </dd>
        <dt id="usage-cpu">CPU</dt>
        <dd data-testid="usage-cpu">
          {u && u.cpuUsec !== null ? (
            <>
              {u.share !== undefined ? (
                <Gauge labelId="usage-cpu" value={u.share} max={1} text={`${Math.round(u.share * 100)}% of ${limits.cpus} CPU`} />
              ) : (
                <span>measuring… (of {limits.cpus} CPU)</span>
              )}
              <span className="muted"> · {cpuTime(u.cpuUsec)} of CPU time in all</span>
            </>
          ) : (
            `at most ${limits.cpus} CPU`
          )}
        </dd>
        <dt id="usage-pids">Processes</dt>
        <dd data-testid="usage-pids">
          {u && u.pids !== null ? (
            <Gauge labelId="usage-pids" value={u.pids} max={limits.pids} text={`${u.pids} of ${limits.pids}`} />
          ) : (
            `at most ${limits.pids}`
          )}
        </dd>
        {u?.note && (
          <>
            <dt>Measured</dt>
            <dd className="muted" data-testid="usage-note">
              {visible(u.note)}
            </dd>
          </>
        )}
        <dt id="usage-disk">Disk</dt>
        <dd data-testid="usage-disk">
          {d?.enforced && d.quotaBytes !== null && d.usedBytes !== null ? (
            <Gauge
              labelId="usage-disk"
              value={d.usedBytes}
              max={d.quotaBytes}
              text={`${bytes(d.usedBytes)} of ${bytes(d.quotaBytes)} (${percent(d.usedBytes, d.quotaBytes)})`}
            />
          ) : d ? (
            visible(d.note ?? 'not enforced')
          ) : (
            'not reported'
          )}
        </dd>
        <dt id="usage-spend">Model spend</dt>
        <dd data-testid="usage-spend">
          {w.budgetUsd !== null && w.budgetUsd > 0 ? (
            <Gauge
              labelId="usage-spend"
              value={w.llm.spentUsd}
              max={w.budgetUsd}
              text={`${usd(w.llm.spentUsd)} of ${usd(w.budgetUsd)} budget`}
            />
          ) : (
            `${usd(w.llm.spentUsd)}${w.budgetUsd === null ? ' (no budget)' : ' (budget 0)'}`
          )}{' '}
          <span className="muted">
            ({w.llm.requests} model request{w.llm.requests === 1 ? '' : 's'})
          </span>
        </dd>
      </dl>
    </section>
  );
}
