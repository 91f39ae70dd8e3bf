import { appendFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type { HostStep, StepContext } from './steps.js';

/** One line of progress: printed as text, or as one JSON object per line with `--output json`. */
export interface StepEvent {
  event: 'step';
  step: string;
  index: number;
  total: number;
  state: 'unchanged' | 'planned' | 'applying' | 'applied' | 'failed' | 'undone';
  detail: string;
  effects?: string[];
  ms?: number;
}

export type Emit = (e: StepEvent | { event: string; [k: string]: unknown }) => void;

const MARK: Record<StepEvent['state'], string> = {
  unchanged: '·',
  planned: '○',
  applying: '…',
  applied: '✓',
  failed: '✗',
  undone: '↶',
};

function stepLine(s: StepEvent, mark: string): string {
  const time = s.ms !== undefined ? ` (${(s.ms / 1000).toFixed(1)} s)` : '';
  const head = `${mark}[${s.total > 0 ? `${s.index}/${s.total}` : s.index}] ${s.step}: ${s.state === 'unchanged' ? 'no change' : s.state}${time} — ${s.detail}`;
  return `${head}\n${(s.effects ?? []).map((x) => `      ${x}\n`).join('')}`;
}

/**
 * Progress for a program (`--output json`: one JSON object per line on stdout), for a terminal
 * (a live list: a spinner on the running step, then its mark), or for a log (plain lines, as a
 * spinner's redraws would be noise in a file).
 */
export function emitter(output: string, out: NodeJS.WriteStream = process.stderr): Emit {
  if (output === 'json') return (e) => process.stdout.write(`${JSON.stringify(e)}\n`);
  if (out.isTTY) return liveEmitter(out);
  return (e) => {
    if (e.event !== 'step') {
      const message = (e as { message?: unknown }).message;
      if (typeof message === 'string') out.write(`${message}\n`);
      return;
    }
    const s = e as StepEvent;
    if (s.state === 'applying') return;
    out.write(stepLine(s, ''));
  };
}

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

function liveEmitter(out: NodeJS.WriteStream): Emit {
  let running: { s: StepEvent; t0: number; frame: number; timer: NodeJS.Timeout } | undefined;
  const draw = (): void => {
    if (!running) return;
    const { s, t0 } = running;
    const line = `${FRAMES[running.frame++ % FRAMES.length]} [${s.index}/${s.total}] ${s.step}: ${s.detail} (${((Date.now() - t0) / 1000).toFixed(0)} s)`;
    out.write(`\r\x1b[K${line.slice(0, Math.max(20, (out.columns || 80) - 1))}`);
  };
  const clear = (): void => void (running && out.write('\r\x1b[K'));
  return (e) => {
    if (e.event !== 'step') {
      const message = (e as { message?: unknown }).message;
      if (typeof message !== 'string') return;
      clear();
      out.write(`${message}\n`);
      draw();
      return;
    }
    const s = e as StepEvent;
    if (running) {
      clearInterval(running.timer);
      clear();
      running = undefined;
    }
    if (s.state === 'applying') {
      running = { s, t0: Date.now(), frame: 0, timer: setInterval(draw, 100) };
      running.timer.unref();
      draw();
      return;
    }
    out.write(stepLine(s, `${MARK[s.state]} `));
  };
}

export class StepFailed extends Error {
  constructor(
    readonly step: string,
    message: string,
  ) {
    super(message);
  }
}

/** Appends one line to the install journal (created 0600 with its folder). */
export function journal(path: string, entry: Record<string, unknown>): void {
  if (!existsSync(dirname(path))) mkdirSync(dirname(path), { recursive: true });
  appendFileSync(path, `${JSON.stringify({ at: new Date().toISOString(), ...entry })}\n`, { mode: 0o600 });
}

/**
 * Runs the steps in order. Every precondition of every step is checked first: a false one stops
 * before anything changes. Then each step is checked (already done: "no change"), planned, or
 * applied and verified; a step that fails is undone (its inverse, recorded before its effects) and
 * the run stops there, naming it. Returns how many steps changed something.
 */
export async function runSteps(
  steps: HostStep[],
  ctx: StepContext,
  opts: { plan: boolean; emit: Emit; journalPath: string },
): Promise<{ changed: number }> {
  const total = steps.length;
  const blocked: string[] = [];
  for (const step of steps) for (const p of await step.preconditions(ctx)) if (!p.ok) blocked.push(`${step.name}: ${p.reason}`);
  if (blocked.length > 0) throw new StepFailed(blocked[0]!.split(':')[0]!, `nothing was changed:\n  ${blocked.join('\n  ')}`);

  let changed = 0;
  for (const [i, step] of steps.entries()) {
    const index = i + 1;
    const state = await step.check(ctx);
    if (state.done) {
      opts.emit({ event: 'step', step: step.name, index, total, state: 'unchanged', detail: state.detail });
      if (!opts.plan) journal(opts.journalPath, { step: step.name, outcome: 'unchanged', detail: state.detail });
      continue;
    }
    const effects = step.plan(ctx);
    if (opts.plan) {
      opts.emit({ event: 'step', step: step.name, index, total, state: 'planned', detail: step.title, effects });
      continue;
    }
    opts.emit({ event: 'step', step: step.name, index, total, state: 'applying', detail: step.title, effects });
    const t0 = Date.now();
    journal(opts.journalPath, { step: step.name, outcome: 'applying', effects });
    let undo: (() => Promise<void> | void) | undefined;
    let failure: string | undefined;
    try {
      // A step records its inverse before its effects (`record`), or returns it once done.
      const r = await step.apply(ctx, (fn) => (undo = fn));
      undo = r.undo ?? undo;
      const v = await step.verify(ctx);
      if (!v.ok) failure = `verification failed: ${v.detail}`;
      else {
        changed++;
        journal(opts.journalPath, { step: step.name, outcome: 'applied', detail: r.detail, verified: v.detail });
        opts.emit({ event: 'step', step: step.name, index, total, state: 'applied', detail: r.detail, effects, ms: Date.now() - t0 });
        continue;
      }
    } catch (err) {
      failure = (err as Error).message;
    }
    opts.emit({ event: 'step', step: step.name, index, total, state: 'failed', detail: failure, ms: Date.now() - t0 });
    journal(opts.journalPath, { step: step.name, outcome: 'failed', detail: failure });
    let undone = 'undone';
    try {
      await undo?.();
    } catch (err) {
      undone = `could not be undone (${(err as Error).message})`;
    }
    journal(opts.journalPath, { step: step.name, outcome: 'undone', detail: undone });
    opts.emit({ event: 'step', step: step.name, index, total, state: 'undone', detail: undone });
    throw new StepFailed(
      step.name,
      `step ${index}/${total} "${step.name}" failed: ${failure}\nThat step was ${undone}; the steps before it stay applied (run the install again once fixed, or \`atelier server uninstall\`).`,
    );
  }
  return { changed };
}
