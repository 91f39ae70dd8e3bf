import type { LoggerOptions } from 'pino';
import type { ServerStatus } from '../core/index.js';

type Entry = ServerStatus['recentErrors'][number];

const LEVELS: Record<number, Entry['level']> = { 40: 'warn', 50: 'error', 60: 'fatal' };

/**
 * The server's last warnings and errors, kept in memory as pino logs them (for `atelier server
 * status`, which may run where the server's output is not). `hooks` goes into pino's options.
 */
export function createRecentErrors(keep = 20): { hooks: NonNullable<LoggerOptions['hooks']>; list(): Entry[] } {
  const entries: Entry[] = [];
  return {
    hooks: {
      logMethod(args, method, level) {
        const name = LEVELS[level];
        if (name) {
          // pino's calls: (msg), (obj, msg, ...), (err, msg): the message and what the object says of the error.
          const [first, second] = args as unknown[];
          const msg = typeof first === 'string' ? first : typeof second === 'string' ? second : '';
          const obj = typeof first === 'object' && first !== null ? (first as { err?: unknown; msg?: unknown }) : undefined;
          const err =
            obj instanceof Error
              ? obj.message
              : obj?.err instanceof Error
                ? obj.err.message
                : typeof obj?.err === 'string'
                  ? obj.err
                  : undefined;
          const message = [msg || (typeof obj?.msg === 'string' ? obj.msg : ''), err].filter(Boolean).join(': ');
          entries.push({ time: new Date().toISOString(), level: name, message: message.slice(0, 2000) || '(no message)' });
          if (entries.length > keep) entries.shift();
        }
        method.apply(this, args as Parameters<typeof method>);
      },
    },
    list: () => [...entries],
  };
}
