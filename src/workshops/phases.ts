import type { CreatePhase, CreatePhaseEvent } from '../core/index.js';

/** Times the steps of a workshop's creation and tells a listener as each starts and ends. */
export interface PhaseTimer {
  /** Announces `phase` as started; the returned function ends it (done, or failed). */
  start(phase: CreatePhase, step?: string): (ok: boolean) => void;
  /** Runs `fn` as `phase`: started, then done or failed as it settles. */
  time<T>(phase: CreatePhase, step: string | undefined, fn: () => Promise<T>): Promise<T>;
}

/**
 * A PhaseTimer for `listener` (none: it only runs the steps). A listener that throws (a client
 * gone mid-stream) is logged and never fails the creation.
 */
export function phaseTimer(
  listener: ((event: CreatePhaseEvent) => void) | undefined,
  log: { warn(obj: object, msg?: string): void },
): PhaseTimer {
  const tell = (event: CreatePhaseEvent): void => {
    if (!listener) return;
    try {
      listener(event);
    } catch (err) {
      log.warn({ err: String(err), phase: event.phase }, 'a create phase listener failed');
    }
  };
  const start = (phase: CreatePhase, step?: string): ((ok: boolean) => void) => {
    const t0 = performance.now();
    const named = step === undefined ? {} : { step };
    tell({ phase, ...named, state: 'started' });
    let ended = false;
    return (ok) => {
      if (ended) return;
      ended = true;
      tell({ phase, ...named, state: ok ? 'done' : 'failed', ms: Math.round(performance.now() - t0) });
    };
  };
  return {
    start,
    async time(phase, step, fn) {
      const end = start(phase, step);
      try {
        const value = await fn();
        end(true);
        return value;
      } catch (err) {
        end(false);
        throw err;
      }
    },
  };
}
