import { appendFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { bar, formatBytes } from './progress.js';
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

/**
 * How far a running step is: `done` of `total` in `unit` (total absent: not known in advance).
 * Sent as often as the step measures; the emitter throttles what it shows.
 */
export interface ProgressEvent {
  event: 'progress';
  step: string;
  done: number;
  total?: number;
  unit: 'bytes' | 'items';
}

export type Emit = (e: StepEvent | ProgressEvent | { event: string; [k: string]: unknown }) => void;

/** At most this many progress events per second per step in JSON (and redraws on a terminal). */
export const PROGRESS_PER_SECOND = 5;

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

/** Where the emitter writes: a stream, or anything with its `write`, `isTTY` and `columns` (tests). */
export type Out = Pick<NodeJS.WriteStream, 'write'> & { isTTY?: boolean; columns?: number };

export interface EmitterOptions {
  /** Human output (default stderr): a live list on a terminal, plain lines otherwise. */
  out?: Out;
  /** JSON output (default stdout). */
  stdout?: Out;
  /** The clock progress is throttled by (tests give their own). */
  now?: () => number;
}

/**
 * Keeps a progress event when it is the step's first, its last (done = total), or at least
 * 1/PROGRESS_PER_SECOND s after the last one kept for that step.
 */
function throttle(now: () => number): (e: ProgressEvent) => boolean {
  const last = new Map<string, number>();
  return (e) => {
    const t = now();
    const prev = last.get(e.step);
    const final = e.total !== undefined && e.done >= e.total;
    if (prev !== undefined && !final && t - prev < 1000 / PROGRESS_PER_SECOND) return false;
    last.set(e.step, t);
    return true;
  };
}

/**
 * Progress for a program (`--output json`: one JSON object per line on stdout, progress throttled),
 * for a terminal (a live list: a spinner and, for a step that measures itself, a bar on the running
 * step, then its mark), or for a log (plain lines: a spinner's or a bar's redraws would be noise in a
 * file, so progress is not written there; the step's line says when it is done).
 */
export function emitter(output: string, opts: EmitterOptions = {}): Emit {
  const out = opts.out ?? process.stderr;
  const now = opts.now ?? Date.now;
  if (output === 'json') {
    const stdout = opts.stdout ?? process.stdout;
    const keep = throttle(now);
    return (e) => {
      if (e.event === 'progress' && !keep(e as ProgressEvent)) return;
      stdout.write(`${JSON.stringify(e)}\n`);
    };
  }
  if (out.isTTY) return liveEmitter(out, now);
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

/** The running step's line, never wider than `columns - 1` (a full-width line would wrap). */
export function runningLine(s: StepEvent, frame: number, seconds: number, columns: number, p?: ProgressEvent): string {
  const width = Math.max(20, columns - 1);
  const head = `${FRAMES[frame % FRAMES.length]} [${s.total > 0 ? `${s.index}/${s.total}` : s.index}] ${s.step}: ${s.detail}`;
  if (!p) return `${head} (${seconds.toFixed(0)} s)`.slice(0, width);
  const amount = (n: number): string => (p.unit === 'bytes' ? formatBytes(n) : String(n));
  const known = p.total !== undefined && p.total > 0;
  const tail = known
    ? ` ${Math.floor((Math.min(p.done, p.total!) / p.total!) * 100)}% ${amount(p.done)}/${amount(p.total!)} (${seconds.toFixed(0)} s)`
    : ` ${amount(p.done)} (${seconds.toFixed(0)} s)`;
  // The bar takes what is left once the head has 24 columns, between 5 and 30 cells; none when narrower.
  const cells = Math.min(30, width - tail.length - 25);
  const meter = known && cells >= 5 ? ` ${bar(p.done / p.total!, cells)}` : '';
  const room = width - tail.length - meter.length;
  const shown = head.length <= room ? head : `${head.slice(0, Math.max(0, room - 1))}…`;
  return `${shown}${meter}${tail}`.slice(0, width);
}

function liveEmitter(out: Out, now: () => number): Emit {
  let running: { s: StepEvent; t0: number; frame: number; timer: NodeJS.Timeout; progress?: ProgressEvent } | undefined;
  let drawnAt = 0;
  const draw = (): void => {
    if (!running) return;
    drawnAt = now();
    const line = runningLine(running.s, running.frame++, (now() - running.t0) / 1000, out.columns || 80, running.progress);
    out.write(`\r\x1b[K${line}`);
  };
  const clear = (): void => void (running && out.write('\r\x1b[K'));
  return (e) => {
    if (e.event === 'progress') {
      const p = e as ProgressEvent;
      if (running?.s.step !== p.step) return;
      running.progress = p;
      // Redrawn at most PROGRESS_PER_SECOND times a second by progress (the spinner's timer redraws too).
      if (now() - drawnAt >= 1000 / PROGRESS_PER_SECOND) draw();
      return;
    }
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
      running = { s, t0: now(), frame: 0, timer: setInterval(draw, 100) };
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
