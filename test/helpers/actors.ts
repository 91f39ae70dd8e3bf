import type { ApiResult, CliResult, TestServer } from './server.js';

/** Several people (and agents) calling one test server, each by a name that stands for their token. */
export interface Actors {
  /** Name → token: `tokens.owner = …` once the user exists. */
  readonly tokens: Record<string, string>;
  /** The API as `who`. */
  as<T = unknown>(who: string, method: string, path: string, body?: unknown): Promise<ApiResult<T>>;
  /** The real CLI as `who` (its token in ATELIER_TOKEN), `input` on stdin. */
  cliAs(who: string, args: string[], input?: string): Promise<CliResult>;
  /** A running workshop made by `owner` from `repo`, and `tokens.agent` set to its own agent token; its id. */
  workshopWithAgent(repo: string, name: string): Promise<string>;
  /**
   * Users made by `admin` (`tokens.admin` set), each with `role`: their temporary passwords by
   * name, and `tokens[name]` set for those `withToken` accepts (all by default).
   */
  users(list: ReadonlyArray<readonly [string, string]>, withToken?: (name: string) => boolean): Promise<Record<string, string>>;
}

/**
 * The actors of a test. `server` is read at each call (tests assign it in `before`, and may
 * restart it); `record` sees every answer's text (a test that checks a secret never leaks).
 */
export function actors(server: () => TestServer, opts: { record?: (text: string) => void } = {}): Actors {
  const tokens: Record<string, string> = {};
  const self: Actors = {
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
    async workshopWithAgent(repo: string, name: string): Promise<string> {
      const w = await self.as<{ id: string; status: string; statusReason: string }>('owner', 'POST', '/v1/workshops', { repo, name });
      if (w.status !== 201 || w.body.status !== 'Running') throw new Error(`workshop ${name} not running: ${JSON.stringify(w.body)}`);
      const t = await self.as<{ token: string }>('owner', 'POST', '/v1/tokens', { workshopId: w.body.id, expiresInSeconds: 3600 });
      if (t.status !== 201) throw new Error(`no agent token for ${w.body.id}: ${JSON.stringify(t.body)}`);
      tokens.agent = t.body.token;
      return w.body.id;
    },
    async users(list, withToken = () => true) {
      const passwords: Record<string, string> = {};
      for (const [name, role] of list) {
        const u = await self.as<{ temporaryPassword: string }>('admin', 'POST', '/v1/users', { name, role });
        if (u.status !== 201) throw new Error(`user ${name} not made: ${JSON.stringify(u.body)}`);
        passwords[name] = u.body.temporaryPassword;
        if (!withToken(name)) continue;
        const t = await self.as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: name, expiresInSeconds: 3600 });
        if (t.status !== 201) throw new Error(`no token for ${name}: ${JSON.stringify(t.body)}`);
        tokens[name] = t.body.token;
      }
      return passwords;
    },
  };
  return self;
}
