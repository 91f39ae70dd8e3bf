import { AtelierError } from '../../../core/index.js';
import type { Target } from '../../client.js';
import { armTunnel, type ArmedTunnel } from './tunnel.js';

/** Spares kept per forward at most (the server allows a few more per token and workshop). */
const MAX_SPARES = 8;
/** After a failed arm, the next waits this long (then twice as long, up to the last). */
const RETRY_MS = [1000, 2000, 5000, 10_000, 30_000];
/** Spares taken are replaced this long after (several taken at once are replaced together). */
const REFILL_DELAY_MS = 20;

/**
 * The armed spare tunnels of one forward: authorised and upgraded ahead of time, nothing dialled
 * inside the workshop until a local connection takes one (`take`) and sends its go byte. One is
 * kept; a local connection that finds none doubles how many are kept (bursts: a browser opens
 * several at once), and each spare that expires unused lowers it again. Spares the server cuts
 * (token revoked, workshop stopped or deleted, server restarted) are dropped and re-armed, with
 * backoff while arming fails. A server that cannot arm for this credential (an OIDC login, port
 * 22) is not asked again: every connection opens its own tunnel, as without spares.
 */
export class Spares {
  private readonly ready = new Set<ArmedTunnel>();
  private readonly timers = new Map<ArmedTunnel, NodeJS.Timeout>();
  private readonly drops = new Map<ArmedTunnel, () => void>();
  private want = 1;
  private arming = 0;
  private failures = 0;
  private retryAt = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private refill: NodeJS.Timeout | undefined;
  /** Connections waiting for the next spare armed (FIFO). */
  private readonly waiters: ((t: ArmedTunnel | undefined) => void)[] = [];
  private disabled = false;
  private closed = false;

  constructor(
    private readonly target: Target,
    private readonly workshop: string,
    private readonly port: number,
  ) {}

  /** Armed spares held now (the tests count them). */
  get held(): number {
    return this.ready.size;
  }

  /** A usable spare, now its own (the caller sends the go), or undefined: open a tunnel instead. */
  take(): ArmedTunnel | undefined {
    const now = Date.now();
    let found: ArmedTunnel | undefined;
    for (const t of this.ready) {
      this.release(t);
      if (t.usableUntil > now && !t.socket.destroyed) {
        found = t;
        break;
      }
      t.socket.destroy();
    }
    if (!found) {
      this.want = Math.min(MAX_SPARES, this.want * 2);
      return undefined;
    }
    // Re-armed a little later: the server answers this connection's go first.
    this.refill ??= setTimeout(() => {
      this.refill = undefined;
      this.fill();
    }, REFILL_DELAY_MS).unref();
    return found;
  }

  /**
   * After a `take` that found none: the next spare armed (one is armed now if none is on its way),
   * usually sooner than a tunnel opened from scratch (the server dials nothing for it and has the
   * lookups cached). Undefined when spares are off or arming fails: open a tunnel instead.
   */
  next(): Promise<ArmedTunnel | undefined> | undefined {
    // Spares off, or arming fails just now (its retry waits): not worth waiting for.
    if (this.disabled || this.closed || this.retryAt > Date.now()) return undefined;
    const p = new Promise<ArmedTunnel | undefined>((resolve) => this.waiters.push(resolve));
    this.fill();
    return p;
  }

  /** Arms spares up to the number wanted, in the background. */
  fill(): void {
    if (this.disabled || this.closed) return;
    const wait = this.retryAt - Date.now();
    if (wait > 0) {
      this.retryTimer ??= setTimeout(() => {
        this.retryTimer = undefined;
        this.fill();
      }, wait).unref();
      return;
    }
    while (this.ready.size + this.arming < this.want + this.waiters.length) {
      this.arming++;
      armTunnel(this.target, this.workshop, this.port).then(
        (t) => {
          this.arming--;
          this.failures = 0;
          const waiter = this.waiters.shift();
          if (waiter) waiter(t);
          else if (this.closed) t.socket.destroy();
          else this.hold(t);
        },
        (err: unknown) => {
          this.arming--;
          // Not for this credential or port (UNSUPPORTED), or a server from before armed tunnels
          // (it refuses the mode as INVALID_ARGUMENT): not asked again.
          if (err instanceof AtelierError && (err.code === 'UNSUPPORTED' || err.code === 'INVALID_ARGUMENT')) {
            this.disabled = true;
            for (const w of this.waiters.splice(0)) w(undefined);
            return;
          }
          this.waiters.shift()?.(undefined);
          this.retryAt = Date.now() + RETRY_MS[Math.min(this.failures, RETRY_MS.length - 1)]!;
          this.failures++;
          this.fill();
        },
      );
    }
  }

  /** Keeps a spare until taken, expired or closed by the server. */
  private hold(t: ArmedTunnel): void {
    const drop = (): void => {
      if (!this.ready.has(t)) return;
      this.release(t);
      t.socket.destroy();
      this.fill();
    };
    // The server sends nothing on an armed tunnel before the go: reading only notices its end.
    t.socket.on('data', drop);
    t.socket.on('end', drop);
    t.socket.on('error', drop);
    t.socket.on('close', drop);
    t.socket.resume();
    this.drops.set(t, drop);
    this.ready.add(t);
    const timer = setTimeout(
      () => {
        if (!this.ready.has(t)) return;
        // Unused for its whole life: one fewer is kept.
        this.want = Math.max(1, this.want - 1);
        drop();
      },
      Math.max(0, t.usableUntil - Date.now()),
    );
    timer.unref();
    this.timers.set(t, timer);
  }

  /** Takes a spare out of the pool, its socket paused and without this pool's listeners. */
  private release(t: ArmedTunnel): void {
    this.ready.delete(t);
    clearTimeout(this.timers.get(t));
    this.timers.delete(t);
    t.socket.pause();
    const drop = this.drops.get(t);
    this.drops.delete(t);
    if (drop) for (const event of ['data', 'end', 'error', 'close']) t.socket.off(event, drop);
    t.socket.on('error', () => undefined);
  }

  close(): void {
    this.closed = true;
    for (const w of this.waiters.splice(0)) w(undefined);
    clearTimeout(this.retryTimer);
    clearTimeout(this.refill);
    for (const t of [...this.ready]) {
      this.release(t);
      t.socket.destroy();
    }
  }
}
