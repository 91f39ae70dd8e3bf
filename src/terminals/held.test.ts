import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HeldSession, holderSocket, sessionsDir } from './held.js';
import type { PtyReader } from './pty.js';

// The holder (session-holder.py) run on the host, without a sandbox: what it does with the PTY,
// its frames and its end. tsx runs this file from src/, where the holder script lives too.

const dir = sessionsDir(mkdtempSync(join(tmpdir(), 'atelier-held-')));
after(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function start(argv: string[], scrollbackBytes = 256 << 10): Promise<HeldSession> {
  return HeldSession.start({
    dir,
    workshop: 'ws-test',
    name: `s${++n}`,
    command: argv,
    argv,
    env: { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' },
    cols: 80,
    rows: 24,
    scrollbackBytes,
  });
}

/** Everything the session wrote (its recent output, then what comes), and a way to wait for a part of it. */
function watch(s: HeldSession): { text(): string; waitFor(re: RegExp): Promise<void> } {
  let out = s.recentOutput().toString('utf8');
  const reader: PtyReader = { write: (c) => ((out += c.toString('utf8')), true) };
  s.attach(reader);
  return {
    text: () => out,
    async waitFor(re) {
      const deadline = Date.now() + 15_000;
      while (!re.test(out)) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${re} in ${JSON.stringify(out.slice(-300))}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}

function exited(s: HeldSession): Promise<{ exitCode: number; signal: string | null }> {
  return new Promise((resolve) => s.onExit(resolve));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function until(what: string, fn: () => boolean): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('session holder', () => {
  it('sends all output before the exit, and names a signal python has no name for', async () => {
    const s = await start(['/bin/sh', '-c', 'i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done; echo last; kill -40 $$']);
    const w = watch(s);
    assert.deepEqual(await exited(s), { exitCode: 168, signal: 'SIG40' });
    assert.match(w.text(), /line 1999\r\nlast\r\n/);
  });

  it('a signal and a hang-up are heard behind a paste the program does not read; the holder then goes', async () => {
    const s = await start([
      '/usr/bin/setsid',
      '--ctty',
      '--wait',
      '/bin/sh',
      '-c',
      'trap "echo got-int" INT; echo ready; while :; do sleep 0.05; done',
    ]);
    const w = watch(s);
    await w.waitFor(/ready/);
    // 3 MB of input nobody reads: the write waits (the program has not read it), the session does not.
    let pasted = false;
    void s.write(Buffer.alloc(3 << 20, 0x61)).then(() => (pasted = true));
    s.signal('SIGINT');
    await w.waitFor(/got-int/);
    assert.equal(pasted, false, 'the paste is still waiting for the program');
    const path = holderSocket(dir, 'ws-test', `s${n}`);
    s.close();
    const e = await exited(s);
    assert.notEqual(e.exitCode, 0, JSON.stringify(e));
    await until('the holder removes its socket and goes', () => !existsSync(path));
    assert.equal(pasted, true, 'the waiting paste is released when the session ends');
  });

  it('a second connection (a restarted server) gets the meta, the whole recent output and the exit before it is handed the session', async () => {
    const s = await start(['/bin/sh', '-c', 'head -c 600000 /dev/zero | tr "\\0" x; echo; echo done; exit 3'], 200_000);
    await exited(s);
    const path = holderSocket(dir, 'ws-test', `s${n}`);
    s.disconnect();
    const again = await HeldSession.connect(path, 200_000);
    assert.deepEqual(again.exited, { exitCode: 3, signal: null });
    assert.equal(again.pid, s.pid);
    const recent = again.recentOutput().toString();
    assert.ok(recent.length >= 190_000 && recent.length <= 200_000, `recent output ${recent.length} bytes`);
    assert.match(recent, /x+\r\ndone\r\n$/);
    again.close();
    await until("the ended session's holder goes when told to", () => !existsSync(path));
  });

  it('a holder whose socket is removed (its data dir gone) ends, and its program with it', async () => {
    const s = await start(['/bin/sh', '-c', 'echo up; exec sleep 600']);
    const w = watch(s);
    await w.waitFor(/up/);
    rmSync(holderSocket(dir, 'ws-test', `s${n}`));
    const e = await exited(s);
    assert.equal(e.exitCode, 255, 'the connection closed without an exit: the holder is gone');
    await until('the program is gone', () => !alive(s.pid));
  });
});
