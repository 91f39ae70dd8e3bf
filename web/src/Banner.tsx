import { countdown } from './pending.ts';

/** Sticky at the top while requests wait: how many, and the soonest expiry. */
export function Banner({
  count,
  soonest,
  now,
  onReview,
}: {
  count: number;
  soonest: number | undefined;
  now: number;
  onReview: () => void;
}) {
  if (count === 0) return null;
  return (
    <div className="banner" role="status" data-testid="approvals-banner">
      <span data-testid="banner-count">{count === 1 ? '1 request waits for a decision' : `${count} requests wait for a decision`}</span>
      {soonest !== undefined && <span className="soonest">soonest expires in {countdown(soonest - now)}</span>}
      <button type="button" onClick={onReview}>
        Review
      </button>
    </div>
  );
}
