import type { ApiResult, CliResult, TestServer } from './server.js';

/** Several people (and agents) calling one test server, each by a name that stands for their token. */
export interface Actors {
  /** Name → token: `tokens.owner = …` once the user exists. */
  readonly tokens: Record<string, string>;
  /** The API as `who`. */
  as<T = unknown>(who: string, method: string, path: string, body?: unknown): Promise<ApiResult<T>>;
  /** The real CLI as `who` (its token in ATELIER_TOKEN), `input` on stdin. */
  cliAs(who: string, args: string[], input?: string): Promise<CliResult>;
}

/**
 * The actors of a test. `server` is read at each call (tests assign it in `before`, and may
 * restart it); `record` sees every answer's text (a test that checks a secret never leaks).
 */
export function actors(server: () => TestServer, opts: { record?: (text: string) => void } = {}): Actors {
  const tokens: Record<string, string> = {};
  return {
    tokens,
    async as<T = unknown>(who: string, method: string, path: string, body?: unknown): Promise<ApiResult<T>> {
      const token = tokens[who];
      if (token === undefined) throw new Error(`no token for ${who}: set tokens.${who} first`);
      const r = await server().api<T>(method, path, body, { authorization: `Bearer ${token}` });
      opts.record?.(JSON.stringify(r.body));
      return r;
    },
    async cliAs(who: string, args: string[], input?: string): Promise<CliResult> {
      const token = tokens[who];
      if (token === undefined) throw new Error(`no token for ${who}: set tokens.${who} first`);
      const r = await server().cli(args, { env: { ATELIER_TOKEN: token }, ...(input !== undefined ? { input } : {}) });
      opts.record?.(r.stdout);
      opts.record?.(r.stderr);
      return r;
    },
  };
}
