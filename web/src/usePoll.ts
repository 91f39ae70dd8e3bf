import { useEffect, useRef, useState } from 'react';
import { ApiError } from './api.ts';

/**
 * What `load` returns, read again every `everyMs` (live status without a stream), with the last
 * error's message; a 401 reports the lost session.
 */
export function usePoll<T>(
  load: () => Promise<T>,
  everyMs: number,
  onSignedOut: () => void,
  key: string,
): { data: T | undefined; error: string | undefined } {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<string>();
  const loader = useRef(load);
  loader.current = load;
  const signedOut = useRef(onSignedOut);
  signedOut.current = onSignedOut;
  useEffect(() => {
    let stop = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    setData(undefined);
    const tick = async (): Promise<void> => {
      try {
        const d = await loader.current();
        if (stop) return;
        setData(d);
        setError(undefined);
      } catch (err) {
        if (stop) return;
        if (err instanceof ApiError && err.status === 401) return signedOut.current();
        setError(err instanceof Error ? err.message : String(err));
      }
      if (!stop) timer = setTimeout(() => void tick(), everyMs);
    };
    void tick();
    return () => {
      stop = true;
      if (timer) clearTimeout(timer);
    };
  }, [key, everyMs]);
  return { data, error };
}
