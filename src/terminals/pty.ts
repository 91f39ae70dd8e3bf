import { readFileSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import * as nodePty from 'node-pty';
import type { SandboxHandle } from '../sandbox/index.js';
import type { WorkshopDriver } from '../workshops/index.js';

/** What a terminal runs in: a running workshop's sandbox, its environment, and the driver that says how to enter it. */
export interface TerminalTarget {
  id: string;
  sandbox: SandboxHandle;
  env: Record<string, string>;
  driver: WorkshopDriver;
}

export interface PtyOptions {
  command?: string[] | undefined;
  cols: number;
  rows: number;
  term?: string | undefined;
  env?: Record<string, string> | undefined;
  /** Bytes of recent output kept for clients that attach later (agent sessions); 0 for none. */
  scrollbackBytes?: number;
}

export interface PtyExit {
  exitCode: number;
  signal: string | null;
}

/** Someone reading a terminal's output (a WebSocket, an SSH channel). */
export interface PtyReader {
  /** Returns false when the reader's buffer is full: the terminal is paused until `drained` is called. */
  write(chunk: Buffer): boolean;
}

/** What a client attaches to: a terminal's output, its input, its size and signals. */
export interface Terminal {
  /** The recent output, oldest first (what a reattaching client sees first). */
  recentOutput(): Buffer;
  attach(reader: PtyReader): void;
  detach(reader: PtyReader): void;
  /** A reader that returned false from write() can take more. */
  drained(reader: PtyReader): void;
  write(data: Buffer): Promise<void>;
  resize(cols: number, rows: number): void;
  signal(name: string): void;
}

/**
 * What every terminal does with its program's output and end: the output goes to every attached
 * reader, and its recent part (`scrollbackMax` bytes) is kept for readers that attach later; a
 * reader that cannot keep up pauses the output (`pauseOutput`: the program then blocks, as on a
 * terminal nobody reads) instead of growing memory; the end is told to whoever waits for it.
 */
export abstract class TerminalOutput {
  private readonly readers = new Set<PtyReader>();
  private readonly blocked = new Set<PtyReader>();
  private readonly scrollback: Buffer[] = [];
  private scrollbackSize = 0;
  private exitInfo: PtyExit | undefined;
  private readonly exitWaiters: ((e: PtyExit) => void)[] = [];

  constructor(private readonly scrollbackMax: number) {}

  /** Stop (and resume) reading the program's output. */
  protected abstract pauseOutput(): void;
  protected abstract resumeOutput(): void;

  /** Output kept for later readers only (what came before this process was attached). */
  protected keep(chunk: Buffer): void {
    if (this.scrollbackMax <= 0) return;
    this.scrollback.push(chunk);
    this.scrollbackSize += chunk.length;
    while (this.scrollbackSize > this.scrollbackMax && this.scrollback.length > 1) this.scrollbackSize -= this.scrollback.shift()!.length;
  }

  protected output(chunk: Buffer): void {
    this.keep(chunk);
    for (const r of this.readers) {
      if (r.write(chunk)) continue;
      if (this.blocked.size === 0) this.pauseOutput();
      this.blocked.add(r);
    }
  }

  /** The program has ended (the first report counts). */
  protected ended(e: PtyExit): void {
    if (this.exitInfo) return;
    this.exitInfo = e;
    for (const w of this.exitWaiters.splice(0)) w(e);
  }

  /** The recent output, oldest first (what a reattaching client sees first). */
  recentOutput(): Buffer {
    return Buffer.concat(this.scrollback);
  }

  /** A reader that returned false from write() can take more. */
  drained(reader: PtyReader): void {
    if (!this.blocked.delete(reader)) return;
    if (this.blocked.size === 0) this.resumeOutput();
  }

  attach(reader: PtyReader): void {
    this.readers.add(reader);
  }

  detach(reader: PtyReader): void {
    this.readers.delete(reader);
    this.drained(reader);
  }

  get attached(): number {
    return this.readers.size;
  }

  get exited(): PtyExit | undefined {
    return this.exitInfo;
  }

  onExit(fn: (e: PtyExit) => void): void {
    if (this.exitInfo) fn(this.exitInfo);
    else this.exitWaiters.push(fn);
  }
}

/** Above this many bytes waiting for the program to read them, the input side is paused. */
const INPUT_HIGH_WATER = 1 << 20;
const INPUT_POLL_MS = 10;

/**
 * A PTY whose program runs inside a workshop (node-pty: the server holds the master side). The
 * program's output goes to every attached reader; a reader that cannot keep up pauses the
 * program's output (the kernel's PTY buffer then blocks the program) instead of growing memory.
 */
export class PtySession extends TerminalOutput implements Terminal {
  private readonly term: nodePty.IPty;
  readonly startedAt = new Date();
  cols: number;
  rows: number;

  constructor(
    readonly target: TerminalTarget,
    readonly command: string[],
    opts: PtyOptions,
  ) {
    super(opts.scrollbackBytes ?? 0);
    const env = { ...target.env, TERM: opts.term ?? 'xterm-256color', ...opts.env };
    const spec = { command, cwd: '/workspace', env };
    const entry = target.driver.enter(target.sandbox, spec);
    const argv = entry.argv;
    this.cols = opts.cols;
    this.rows = opts.rows;
    // The chain before the workshop's program runs privileged: a fixed environment, never the workshop's.
    this.term = nodePty.spawn(argv[0]!, argv.slice(1), {
      name: opts.term ?? 'xterm-256color',
      cols: opts.cols,
      rows: opts.rows,
      cwd: '/',
      env: entry.env,
      encoding: null,
    });
    this.term.onData((data: string | Buffer) => this.output(typeof data === 'string' ? Buffer.from(data) : data));
    this.term.onExit(({ exitCode, signal }) => {
      const name = signal ? (Object.entries(osConstants.signals).find(([, n]) => n === signal)?.[0] ?? null) : null;
      // As in a shell: a program killed by signal n exits 128+n.
      this.ended({ exitCode: signal ? 128 + signal : exitCode, signal: name });
    });
  }

  get pid(): number {
    return this.term.pid;
  }

  protected override pauseOutput(): void {
    this.term.pause();
  }

  protected override resumeOutput(): void {
    this.term.resume();
  }

  /**
   * Input for the program. Returns a promise that resolves once the program has read enough of
   * what is pending (a huge paste is fed as the program reads it, never buffered without limit).
   */
  write(data: Buffer | string): Promise<void> {
    if (this.exited) return Promise.resolve();
    this.term.write(data as string);
    if (this.pendingInput() < INPUT_HIGH_WATER) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setInterval(() => {
        if (this.exited || this.pendingInput() < INPUT_HIGH_WATER / 4) {
          clearInterval(timer);
          resolve();
        }
      }, INPUT_POLL_MS);
    });
  }

  /**
   * Bytes node-pty still holds for the PTY. node-pty queues writes without a limit and has no
   * 'drain' event: its queue is read here so that input can be paused (a private field, checked
   * by the huge-paste test; 0 if a future node-pty renames it).
   */
  private pendingInput(): number {
    const queue = (this.term as unknown as { _writeStream?: { _writeQueue?: { buffer: Buffer; offset: number }[] } })._writeStream
      ?._writeQueue;
    if (!Array.isArray(queue)) return 0;
    let n = 0;
    for (const t of queue) n += t.buffer.length - t.offset;
    return n;
  }

  resize(cols: number, rows: number): void {
    if (this.exited) return;
    this.cols = cols;
    this.rows = rows;
    try {
      this.term.resize(cols, rows);
    } catch {
      // the terminal closed meanwhile
    }
  }

  /**
   * Sends `signal` to the terminal's foreground process group (what the line discipline does
   * for Ctrl-C): tpgid of the session leader's /proc stat, in the host's pid numbering.
   */
  signal(signal: string): void {
    if (this.exited) return;
    let group: number | undefined;
    try {
      const stat = readFileSync(`/proc/${this.term.pid}/stat`, 'utf8');
      const tpgid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[5]);
      if (tpgid > 0) group = tpgid;
    } catch {
      // gone
    }
    try {
      process.kill(-(group ?? this.term.pid), signal as NodeJS.Signals);
    } catch {
      // the group is gone
    }
  }

  /** Ends the program: hang-up first (as when a terminal closes), SIGKILL to its group if it lingers. */
  close(): void {
    if (this.exited) return;
    try {
      this.term.kill('SIGHUP');
    } catch {
      // gone
    }
    const pid = this.term.pid;
    setTimeout(() => {
      if (this.exited) return;
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // gone
      }
    }, 2000).unref();
  }
}
