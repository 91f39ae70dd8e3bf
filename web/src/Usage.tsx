import type { Workshop, WorkshopDisk } from './api.ts';
import { visible } from './ApprovalsList.tsx';

export function bytes(n: number): string {
  return n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${Math.round(n / 2 ** 20)} MiB`;
}

const usd = (n: number): string => `$${n.toFixed(2)}`;

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
 * What the workshop uses beside its limits, as the server reports it with the workshop (read
 * again with the page's poll): its disk against its quota (live from the node that runs it) and
 * its model spend against its budget. Memory, CPU and processes are its limits: the API does not
 * report their use yet.
 */
export function Usage({ workshop: w }: { workshop: Workshop & { disk?: WorkshopDisk } }) {
  const d = w.disk;
  return (
    <section aria-labelledby="usage-title">
      <h2 id="usage-title">Usage</h2>
      <dl className="facts usage" data-testid="workshop-usage">
        <dt id="usage-memory">Memory</dt>
        <dd data-testid="usage-memory">at most {bytes(w.limits.memoryBytes)}</dd>
        <dt id="usage-cpu">CPU</dt>
        <dd>at most {w.limits.cpus} CPU</dd>
        <dt id="usage-pids">Processes</dt>
        <dd>at most {w.limits.pids}</dd>
        <dt id="usage-disk">Disk</dt>
        <dd data-testid="usage-disk">
          {d?.enforced && d.quotaBytes !== null && d.usedBytes !== null ? (
            <Gauge
              labelId="usage-disk"
              value={d.usedBytes}
              max={d.quotaBytes}
              text={`${bytes(d.usedBytes)} of ${bytes(d.quotaBytes)} (${Math.round((100 * d.usedBytes) / Math.max(1, d.quotaBytes))}%)`}
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
