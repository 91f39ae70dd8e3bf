import { useEffect, useRef, useState } from 'react';
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import '@xterm/xterm/css/xterm.css';
import type { TerminalEvent } from './api.ts';
import { visible } from './ApprovalsList.tsx';

/**
 * A terminal in the workshop: xterm.js attached to a session (`/sessions/:name/attach`, a PTY
 * that outlives its connection; the page's "Open a shell" starts one running `bash -l`): its
 * recent output first, bytes both ways as binary frames, `resize` as JSON text frames. A dropped
 * connection is attached again (0.5 s doubling to 10 s, and at once when the browser says it is
 * online), with the shell as it was; once the session has ended or the server refused, it is not.
 *
 * What the workshop prints is drawn by xterm as text; links in it (OSC 8) open nothing.
 */
export function WorkshopTerminal({ workshopId, session }: { workshopId: string; session: string }) {
  const box = useRef<HTMLDivElement>(null);
  const [state, setState] = useState<string>('connecting');

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

    /** The session has ended, or the server refused: nothing to attach to again. */
    let over = false;

    const connect = (): void => {
      if (retry) clearTimeout(retry);
      retry = undefined;
      const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
      const path = `/v1/workshops/${encodeURIComponent(workshopId)}/sessions/${encodeURIComponent(session)}/attach`;
      const ws = new WebSocket(`${scheme}://${location.host}${path}`);
      ws.binaryType = 'arraybuffer';
      socket = ws;
      ws.addEventListener('open', () => {
        ws.send(JSON.stringify({ type: 'resize', cols: term.cols, rows: term.rows }));
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
          // The session's recent output follows: drawn on a clean screen, so that attaching
          // again after a dropped connection does not show it twice.
          term.reset();
          delay = 500;
          setState(ev.resumed ? 'connected (the workshop was resumed)' : 'connected');
          term.focus();
        } else if (ev.type === 'exit') {
          over = true;
          setState(`ended (exit ${ev.exitCode}${ev.signal ? `, ${ev.signal}` : ''})`);
        } else if (ev.type === 'error') {
          over = true;
          setState(`refused: ${visible(ev.message)} (${ev.code})`);
        } else if (ev.type === 'approval') term.write(`\r\n[atelier] waiting for a decision: ${visible(ev.what)}\r\n`);
      });
      ws.addEventListener('close', () => {
        if (closed || over || socket !== ws) return;
        setState('disconnected: trying again…');
        retry = setTimeout(connect, delay);
        delay = Math.min(delay * 2, 10_000);
      });
    };
    // The browser is back online: try now rather than at the end of the wait.
    const online = (): void => {
      if (!closed && !over && retry) connect();
    };
    window.addEventListener('online', online);
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
      window.removeEventListener('online', online);
      observer.disconnect();
      input.dispose();
      resized.dispose();
      socket?.close();
      term.dispose();
    };
  }, [workshopId, session]);

  return (
    <div className="terminal-wrap">
      <div className="row">
        <span data-testid="terminal-state" className="muted">
          {`session ${visible(session)}: `}
          {state}
        </span>
      </div>
      <div ref={box} className="terminal" data-testid="terminal" />
    </div>
  );
}
