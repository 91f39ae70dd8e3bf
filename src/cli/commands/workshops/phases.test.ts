import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createPhasePrinter } from './phases.js';

// The printer's output for a terminal and for a pipe, written to a string (what stderr would get).
function capture(isTTY: boolean): { out: { write(t: string): boolean; isTTY: boolean }; text(): string } {
  let text = '';
  return {
    out: {
      isTTY,
      write: (t: string) => {
        text += t;
        return true;
      },
    },
    text: () => text,
  };
}

describe('the create phase printer', () => {
  it('on a terminal: a line per finished phase under a live line, which is cleared at the end', () => {
    const c = capture(true);
    const p = createPhasePrinter(c.out);
    p.onPhase({ phase: 'clone', state: 'started' });
    p.onPhase({ phase: 'sandbox', state: 'started' });
    const live = c.text().split('\r\x1b[K').pop()!;
    assert.match(live, /^… clone \d+\.\d s, sandbox \d+\.\d s$/, 'the live line names both, with their time so far');
    p.onPhase({ phase: 'sandbox', state: 'done', ms: 412 });
    p.onPhase({ phase: 'clone', state: 'done', ms: 1250 });
    p.onPhase({ phase: 'devcontainer', step: 'postCreateCommand', state: 'started' });
    p.onPhase({ phase: 'devcontainer', step: 'postCreateCommand', state: 'failed', ms: 3100 });
    p.close();
    const lines = c.text().split('\n');
    assert.match(lines[0]!, /✓ sandbox +0\.4 s$/);
    assert.match(lines[1]!, /✓ clone +1\.3 s$/);
    assert.match(lines[2]!, /✗ devcontainer postCreateCommand +3\.1 s$/);
    assert.ok(c.text().endsWith('\r\x1b[K'), 'the live line is gone once done');
  });

  it('elsewhere: plain lines, no escape sequence; a step the server names is shown without its control characters', () => {
    const c = capture(false);
    const p = createPhasePrinter(c.out);
    p.onPhase({ phase: 'simulators', step: 'postgres, \x1b[31mredis', state: 'started' });
    p.onPhase({ phase: 'simulators', step: 'postgres, \x1b[31mredis', state: 'done', ms: 2040 });
    p.close();
    assert.equal(c.text(), 'simulators postgres, \\u001b[31mredis: started\nsimulators postgres, \\u001b[31mredis: done in 2.0 s\n');
  });
});
