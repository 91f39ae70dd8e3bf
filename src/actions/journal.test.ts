import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { AtelierError } from '../core/index.js';
import { appendJournal, readJournal, type JournalEntry } from './journal.js';
import { JOURNAL_FILE } from './projectFiles.js';

function entry(event: JournalEntry['event'], executionId: string | null): JournalEntry {
  return {
    at: new Date().toISOString(),
    event,
    executionId,
    planId: 'plan-0000000000',
    actionId: 'slots.assign',
    class: 'A',
    project: 'p',
    fingerprint: 'sha256:x',
    actor: 'tester',
    parameters: { slot: 's' },
    ...(event === 'apply_started'
      ? { inverse: { kind: 'restore-file' as const, path: 'atelier.yaml', snapshot: null, beforeSha256: null, afterSha256: 'y' } }
      : {}),
  };
}

function project(): string {
  return mkdtempSync(join(tmpdir(), 'atelier-journal-'));
}

describe('actions journal (ADR-008 D4)', () => {
  it('is append-only JSONL under .atelier/runtime/actions, git-ignored, mode 0600', () => {
    const dir = project();
    try {
      appendJournal(dir, entry('apply_started', 'exec-aaaaaaaaaa'));
      appendJournal(dir, entry('applied', 'exec-aaaaaaaaaa'));
      const lines = readFileSync(join(dir, JOURNAL_FILE), 'utf8').trim().split('\n');
      assert.equal(lines.length, 2);
      assert.equal(readFileSync(join(dir, '.atelier/runtime/.gitignore'), 'utf8').split('\n').includes('*'), true);
      const j = readJournal(dir);
      assert.equal(j.executions[0]?.status, 'applied');
      assert.equal(j.tornLastLine, false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('tolerates a torn last line and reports it', () => {
    const dir = project();
    try {
      appendJournal(dir, entry('apply_started', 'exec-bbbbbbbbbb'));
      appendJournal(dir, entry('applied', 'exec-bbbbbbbbbb'));
      appendFileSync(join(dir, JOURNAL_FILE), '{"at":"2026-01-01T00:00:00Z","event":"apply_sta');
      const j = readJournal(dir);
      assert.equal(j.tornLastLine, true);
      assert.deepEqual(j.unreadableLines, []);
      assert.equal(j.executions.length, 1);
      assert.equal(j.executions[0]?.status, 'applied');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a process killed between apply_started and the outcome is reported as interrupted, with its inverse offered', async () => {
    const dir = project();
    try {
      // A real process writes apply_started through the journal module, then dies by SIGKILL.
      const journalModule = fileURLToPath(new URL('./journal.ts', import.meta.url));
      const script = `
        const { appendJournal } = await import(${JSON.stringify(journalModule)});
        appendJournal(${JSON.stringify(dir)}, ${JSON.stringify(entry('apply_started', 'exec-cccccccccc'))});
        process.kill(process.pid, 'SIGKILL');
      `;
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: 'inherit' });
      const signal = await new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, s) => resolve(s)));
      assert.equal(signal, 'SIGKILL');
      const ex = readJournal(dir).executions.find((e) => e.executionId === 'exec-cccccccccc');
      assert.equal(ex?.status, 'interrupted');
      assert.equal(ex?.rollbackOffered, true);
      assert.equal(ex?.inverse?.kind, 'restore-file');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses with JOURNAL_UNWRITABLE when the journal cannot be written (a directory, a link in the way)', () => {
    for (const breakIt of [
      (dir: string) => mkdirSync(join(dir, JOURNAL_FILE), { recursive: true }),
      (dir: string) => {
        mkdirSync(join(dir, '.atelier/runtime/actions'), { recursive: true });
        symlinkSync('/tmp/elsewhere.jsonl', join(dir, JOURNAL_FILE));
      },
      (dir: string) => {
        mkdirSync(join(dir, '.atelier/runtime'), { recursive: true });
        symlinkSync('/tmp', join(dir, '.atelier/runtime/actions'));
      },
    ]) {
      const dir = project();
      try {
        breakIt(dir);
        assert.throws(
          () => appendJournal(dir, entry('apply_started', 'exec-dddddddddd')),
          (err: AtelierError) => err.code === 'JOURNAL_UNWRITABLE' && /nothing was changed/.test(err.message),
        );
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  });
});
