import type { CreatePhaseEvent } from '../../../core/index.js';
import { printable } from '../../output.js';

function label(e: CreatePhaseEvent): string {
  return printable(e.step === undefined ? e.phase : `${e.phase} ${e.step}`);
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

/** Writes what the phase printer prints (stderr, so that stdout keeps the workshop alone). */
export interface PhaseOutput {
  write(text: string): unknown;
  isTTY?: boolean;
}

/**
 * Shows `workshops create`'s phases as they happen. On a terminal: a line per finished phase
 * (`✓ clone  0.8 s`) under a live line naming what runs now and for how long; elsewhere (a log,
 * a pipe) plain lines as each phase starts and ends (`clone: started`, `clone: done in 0.8 s`).
 */
export function createPhasePrinter(out: PhaseOutput): { onPhase(e: CreatePhaseEvent): void; close(): void } {
  const running = new Map<string, number>();
  if (!out.isTTY) {
    return {
      onPhase(e) {
        out.write(
          e.state === 'started'
            ? `${label(e)}: started\n`
            : `${label(e)}: ${e.state === 'done' ? 'done' : 'FAILED'} in ${seconds(e.ms ?? 0)}\n`,
        );
      },
      close() {},
    };
  }
  let shown = false;
  const status = (): void => {
    const now = performance.now();
    const parts = [...running].map(([name, t0]) => `${name} ${seconds(now - t0)}`);
    out.write(`\r\x1b[K${parts.length > 0 ? `… ${parts.join(', ')}` : ''}`);
    shown = parts.length > 0;
  };
  const timer = setInterval(status, 200);
  timer.unref();
  return {
    onPhase(e) {
      const name = label(e);
      if (e.state === 'started') running.set(name, performance.now());
      else {
        running.delete(name);
        out.write(`\r\x1b[K${e.state === 'done' ? '✓' : '✗'} ${name.padEnd(24)} ${seconds(e.ms ?? 0)}\n`);
      }
      status();
    },
    close() {
      clearInterval(timer);
      if (shown) out.write('\r\x1b[K');
    },
  };
}
