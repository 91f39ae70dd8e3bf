import { useEffect, useRef, useState } from 'react';
import { ApiError } from './api.ts';

/**
 * What `load` returns, read again every `everyMs` (live status without a stream), with the last
 * error's message; a 401 reports the lost session. `reload` reads it again at once (after an
 * action), keeping what is shown until the answer comes.
 */
export function usePoll<T>(
  load: () => Promise<T>,
  everyMs: number,
  onSignedOut: () => void,
  key: string,
): { data: T | undefined; error: string | undefined; reload: () => void } {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<string>();
  const loader = useRef(load);
  loader.current = load;
  const signedOut = useRef(onSignedOut);
  signedOut.current = onSignedOut;
  const now = useRef<() => void>(() => undefined);
  useEffect(() => {
    let stop = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    // One read at a time: a reload asked for during one is done right after it.
    let running = false;
    let again = false;
    setData(undefined);
    const tick = async (): Promise<void> => {
      running = true;
      try {
        const d = await loader.current();
        if (stop) return;
        setData(d);
        setError(undefined);
      } catch (err) {
        if (stop) return;
        if (err instanceof ApiError && err.status === 401) return signedOut.current();
        setError(err instanceof Error ? err.message : String(err));
      } finally {
        running = false;
      }
      if (stop) return;
      if (again) {
        again = false;
        void tick();
      } else timer = setTimeout(() => void tick(), everyMs);
    };
    now.current = () => {
      if (stop) return;
      if (running) {
        again = true;
        return;
      }
      if (timer) clearTimeout(timer);
      timer = undefined;
      void tick();
    };
    void tick();
    return () => {
      stop = true;
      if (timer) clearTimeout(timer);
    };
  }, [key, everyMs]);
  return { data, error, reload: () => now.current() };
}
