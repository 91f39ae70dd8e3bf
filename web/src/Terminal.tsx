import { useEffect, useRef, useState } from 'react';
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import '@xterm/xterm/css/xterm.css';
import type { TerminalEvent } from './api.ts';
import { visible } from './ApprovalsList.tsx';

/**
 * A terminal in the workshop, xterm.js on the server's PTY WebSocket (the route `atelier ssh`
 * and `atelier run` use): bytes both ways as binary frames, `start` and `resize` as JSON text
 * frames. `session` attaches to an agent session instead (its recent output first); a session
 * survives the connection, so a lost connection is retried, while a shell ends with it and
 * is opened again by hand.
 *
 * What the workshop prints is drawn by xterm as text; links in it (OSC 8) open nothing.
 */
export function WorkshopTerminal({ workshopId, session }: { workshopId: string; session?: string }) {
  const box = useRef<HTMLDivElement>(null);
  const [state, setState] = useState<string>('connecting');
  const [generation, setGeneration] = useState(0);

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const term = new Terminal({
      convertEol: false,
      cursorBlink: true,
      fontFamily: 'ui-monospace, monospace',
      fontSize: 14,
      scrollback: 5000,
      linkHandler: { activate: () => undefined },
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(el);
    fit.fit();
    const encoder = new TextEncoder();
    let socket: WebSocket | undefined;
    let closed = false;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let delay = 500;

    const connect = (): void => {
      const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
      const base = `/v1/workshops/${encodeURIComponent(workshopId)}`;
      const path = session ? `${base}/sessions/${encodeURIComponent(session)}/attach` : `${base}/pty`;
      const ws = new WebSocket(`${scheme}://${location.host}${path}`);
      ws.binaryType = 'arraybuffer';
      socket = ws;
      ws.addEventListener('open', () => {
        if (!session) ws.send(JSON.stringify({ type: 'start', cols: term.cols, rows: term.rows, term: 'xterm-256color' }));
        else ws.send(JSON.stringify({ type: 'resize', cols: term.cols, rows: term.rows }));
      });
      ws.addEventListener('message', (e: MessageEvent<ArrayBuffer | string>) => {
        if (typeof e.data !== 'string') {
          term.write(new Uint8Array(e.data));
          return;
        }
        let ev: TerminalEvent;
        try {
          ev = JSON.parse(e.data) as TerminalEvent;
        } catch {
          return;
        }
        if (ev.type === 'started') {
          delay = 500;
          setState(ev.resumed ? 'connected (the workshop was resumed)' : 'connected');
          term.focus();
        } else if (ev.type === 'exit') setState(`ended (exit ${ev.exitCode}${ev.signal ? `, ${ev.signal}` : ''})`);
        else if (ev.type === 'error') setState(`refused: ${visible(ev.message)} (${ev.code})`);
        else if (ev.type === 'approval') term.write(`\r\n[atelier] waiting for a decision: ${visible(ev.what)}\r\n`);
      });
      ws.addEventListener('close', () => {
        if (closed) return;
        if (session) {
          setState('disconnected: trying again…');
          retry = setTimeout(connect, delay);
          delay = Math.min(delay * 2, 10_000);
        } else setState((s) => (s.startsWith('ended') || s.startsWith('refused') ? s : 'disconnected'));
      });
    };
    const input = term.onData((d) => {
      if (socket?.readyState === WebSocket.OPEN) socket.send(encoder.encode(d));
    });
    const resized = term.onResize(({ cols, rows }) => {
      if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: 'resize', cols, rows }));
    });
    const observer = new ResizeObserver(() => fit.fit());
    observer.observe(el);
    connect();
    return () => {
      closed = true;
      if (retry) clearTimeout(retry);
      observer.disconnect();
      input.dispose();
      resized.dispose();
      socket?.close();
      term.dispose();
    };
  }, [workshopId, session, generation]);

  return (
    <div className="terminal-wrap">
      <div className="row">
        <span data-testid="terminal-state" className="muted">
          {session ? `session ${visible(session)}: ` : 'shell: '}
          {state}
        </span>
        {!session && (state === 'disconnected' || state.startsWith('ended')) && (
          <button
            type="button"
            className="secondary"
            onClick={() => {
              setState('connecting');
              setGeneration((g) => g + 1);
            }}
          >
            Open a new shell
          </button>
        )}
      </div>
      <div ref={box} className="terminal" data-testid="terminal" />
    </div>
  );
}
