import { closeSync, constants, existsSync, fsyncSync, openSync, readFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { AtelierError } from '../core/index.js';
import { ensureActionsDir, JOURNAL_FILE } from './projectFiles.js';
import type { ActionClass, Inverse, ObservedEffect, Verification } from './types.js';

export const JOURNAL_EVENTS = [
  'plan',
  'apply_started',
  'effects',
  'verification',
  'applied',
  'failed',
  'rollback_started',
  'rollback_applied',
  'rollback_failed',
] as const;
export type JournalEvent = (typeof JOURNAL_EVENTS)[number];

/** One line of `<project>/.atelier/runtime/actions/journal.jsonl`. No secret is ever written (env values are redacted). */
export interface JournalEntry {
  at: string;
  event: JournalEvent;
  executionId: string | null;
  planId: string;
  actionId: string;
  class: ActionClass;
  project: string;
  fingerprint: string;
  actor: string;
  parameters: Record<string, unknown>;
  effects?: ObservedEffect[];
  verification?: Verification;
  inverse?: Inverse;
  error?: string;
}

/**
 * Appends one line and fsyncs it before returning: an `apply_started` is on disk before any
 * effect. Any failure (a read-only disk, a link in the way, a directory where the file should be)
 * is JOURNAL_UNWRITABLE, and the caller then does nothing.
 */
export function appendJournal(root: string, entry: JournalEntry): void {
  let fd: number | undefined;
  try {
    ensureActionsDir(root);
    fd = openSync(join(root, JOURNAL_FILE), constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW, 0o600);
    writeSync(fd, `${JSON.stringify(entry)}\n`);
    fsyncSync(fd);
  } catch (err) {
    throw new AtelierError(
      'JOURNAL_UNWRITABLE',
      `the actions journal ${JOURNAL_FILE} of this project cannot be written (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): nothing was changed; make it writable and plan again`,
      { path: JOURNAL_FILE },
      { cause: err },
    );
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

export type ExecutionStatus = 'applied' | 'failed' | 'interrupted' | 'rolled_back' | 'rollback_failed' | 'rollback_interrupted';

/** An execution as the journal tells it. */
export interface ExecutionSummary {
  executionId: string;
  planId: string;
  actionId: string;
  class: ActionClass;
  status: ExecutionStatus;
  startedAt: string;
  endedAt: string | null;
  verification: Verification | null;
  inverse: Inverse | null;
  /** True when a rollback may be asked for (the inverse stays offered after a failure or an interruption). */
  rollbackOffered: boolean;
}

export interface JournalRead {
  entries: JournalEntry[];
  executions: ExecutionSummary[];
  /** The last line was cut (the process died while writing it); it is ignored. */
  tornLastLine: boolean;
  /** Lines that are not journal entries (1-based numbers). */
  unreadableLines: number[];
}

/** Reads the journal, tolerating a torn last line and reporting interrupted executions. */
export function readJournal(root: string): JournalRead {
  const path = join(root, JOURNAL_FILE);
  const out: JournalRead = { entries: [], executions: [], tornLastLine: false, unreadableLines: [] };
  if (!existsSync(path)) return out;
  const text = readFileSync(path, 'utf8');
  const lines = text.split('\n');
  const endsClean = text.endsWith('\n') || text === '';
  lines.forEach((line, i) => {
    if (line === '') return;
    const isLast = i === lines.length - 1;
    try {
      const entry = JSON.parse(line) as JournalEntry;
      if (typeof entry !== 'object' || entry === null || !(JOURNAL_EVENTS as readonly string[]).includes(entry.event))
        throw new Error('not an entry');
      out.entries.push(entry);
    } catch {
      if (isLast && !endsClean) out.tornLastLine = true;
      else out.unreadableLines.push(i + 1);
    }
  });
  out.executions = summarise(out.entries);
  return out;
}

function summarise(entries: JournalEntry[]): ExecutionSummary[] {
  const byId = new Map<string, ExecutionSummary>();
  for (const e of entries) {
    if (!e.executionId) continue;
    let s = byId.get(e.executionId);
    if (e.event === 'apply_started') {
      s = {
        executionId: e.executionId,
        planId: e.planId,
        actionId: e.actionId,
        class: e.class,
        status: 'interrupted',
        startedAt: e.at,
        endedAt: null,
        verification: null,
        inverse: e.inverse ?? null,
        rollbackOffered: true,
      };
      byId.set(e.executionId, s);
      continue;
    }
    if (!s) continue;
    switch (e.event) {
      case 'verification':
        s.verification = e.verification ?? null;
        break;
      case 'applied':
      case 'failed':
        s.status = e.event;
        s.endedAt = e.at;
        break;
      case 'rollback_started':
        s.status = 'rollback_interrupted';
        break;
      case 'rollback_applied':
        s.status = 'rolled_back';
        s.endedAt = e.at;
        break;
      case 'rollback_failed':
        s.status = 'rollback_failed';
        s.endedAt = e.at;
        break;
      case 'plan':
      case 'effects':
        break;
    }
  }
  for (const s of byId.values()) s.rollbackOffered = s.status !== 'rolled_back' && s.inverse !== null && s.inverse.kind !== 'none';
  return [...byId.values()];
}
