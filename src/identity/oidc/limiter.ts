/**
 * Failed attempts per key (a user name, an address) in a sliding window. After `max` failures
 * within `windowMs`, the key is refused until the oldest failure leaves the window. In memory:
 * a restart forgets, which only ever lets someone try again sooner.
 *
 * An attempt that takes time to judge (a scrypt) must be counted with `take` *before* it is
 * judged, then `forgive`n if it succeeds: checking first and counting after lets any number of
 * parallel attempts pass the check while the first ones are still being judged.
 */
export class FailureLimiter {
  private readonly failures = new Map<string, number[]>();

  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  private recent(key: string): number[] {
    const since = this.now() - this.windowMs;
    const list = (this.failures.get(key) ?? []).filter((t) => t > since);
    if (list.length === 0) this.failures.delete(key);
    else this.failures.set(key, list);
    return list;
  }

  /** Seconds until `key` may try again, or 0 when it may now. */
  retryAfterSeconds(key: string): number {
    const list = this.recent(key);
    if (list.length < this.max) return 0;
    return Math.max(1, Math.ceil((list[list.length - this.max]! + this.windowMs - this.now()) / 1000));
  }

  fail(key: string): void {
    this.record(key, this.now());
  }

  private record(key: string, at: number): void {
    const list = this.recent(key);
    list.push(at);
    this.failures.set(key, list.slice(-this.max));
    if (this.failures.size > 10_000) this.sweep();
  }

  /**
   * Counts an attempt as failed before it is judged. `wait` > 0: refused for that many seconds,
   * nothing counted. Otherwise counted; `forgive` un-counts it when it turns out right.
   */
  take(key: string): { wait: number; forgive: () => void } {
    const wait = this.retryAfterSeconds(key);
    if (wait > 0) return { wait, forgive: () => undefined };
    const at = this.now();
    this.record(key, at);
    return {
      wait: 0,
      forgive: () => {
        const list = this.failures.get(key);
        const i = list ? list.indexOf(at) : -1;
        if (i < 0) return; // already out of the window, or cleared
        list!.splice(i, 1);
        if (list!.length === 0) this.failures.delete(key);
      },
    };
  }

  clear(key: string): void {
    this.failures.delete(key);
  }

  private sweep(): void {
    for (const key of [...this.failures.keys()]) this.recent(key);
  }
}
