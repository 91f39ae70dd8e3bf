import { useEffect, useRef, useState } from 'react';
import { ApiError, listPending, type ApprovalEvent } from './api.ts';
import { applyEvent, EMPTY, fromList, type PendingState } from './pending.ts';

/**
 * The live PENDING set that concerns the user (the server filters both the stream and the list
 * with `concerns=me`: the workshops they own, or all of the tenant's for a maintainer or admin):
 * the stream (/v1/approvals/stream, authenticated by the session cookie) and, each time it
 * (re)connects, the list. Reconnects after a blip; reports a lost session.
 */
export function usePending(tenant: string, onSignedOut: () => void): { state: PendingState; live: boolean; error: string | undefined } {
  const [state, setState] = useState<PendingState>(EMPTY);
  const [live, setLive] = useState(false);
  const [error, setError] = useState<string>();
  const signedOut = useRef(onSignedOut);
  signedOut.current = onSignedOut;

  useEffect(() => {
    let closed = false;
    let socket: WebSocket | undefined;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let delay = 500;
    setState(EMPTY);

    const refresh = async (): Promise<void> => {
      const endedSince = new Set<string>();
      const onEnded = (e: MessageEvent<string>): void => {
        const ev = JSON.parse(e.data) as ApprovalEvent;
        if (ev.approval && ev.type !== 'created') endedSince.add(ev.approval.id);
      };
      socket?.addEventListener('message', onEnded);
      try {
        const { items } = await listPending();
        if (!closed) setState((s) => fromList(s, items, endedSince));
        setError(undefined);
      } catch (err) {
        if (err instanceof ApiError && err.status === 401) signedOut.current();
        else setError(err instanceof Error ? err.message : String(err));
      } finally {
        socket?.removeEventListener('message', onEnded);
      }
    };

    const connect = (): void => {
      const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
      const ws = new WebSocket(`${scheme}://${location.host}/v1/approvals/stream?concerns=me`);
      socket = ws;
      ws.addEventListener('message', (e: MessageEvent<string>) => {
        let ev: ApprovalEvent;
        try {
          ev = JSON.parse(e.data) as ApprovalEvent;
        } catch {
          return;
        }
        if (ev.type === 'ready') {
          delay = 500;
          setLive(true);
          void refresh();
          return;
        }
        setState((s) => applyEvent(s, ev));
      });
      ws.addEventListener('close', () => {
        setLive(false);
        if (closed) return;
        // Refused upgrade (signed out) or a blip: the session says which; try again meanwhile.
        retry = setTimeout(connect, delay);
        delay = Math.min(delay * 2, 10_000);
        void refresh();
      });
    };
    connect();
    return () => {
      closed = true;
      if (retry) clearTimeout(retry);
      socket?.close();
    };
  }, [tenant]);

  return { state, live, error };
}

/** The current time, ticking every second (countdowns). */
export function useNow(): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, []);
  return now;
}
