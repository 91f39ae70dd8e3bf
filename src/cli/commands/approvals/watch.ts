import WebSocket from 'ws';
import { AtelierError, ROUTES } from '../../../core/index.js';
import type { ApprovalEvent } from '../../../approvals/index.js';
import { bearerOf } from '../../client.js';
import type { CommandContext } from '../../context.js';

/**
 * `atelier approvals watch`: the live stream of approval events (WebSocket), one per line, until
 * Ctrl-C. The server ends a stream when the token expires; the CLI then reconnects (refusing
 * clearly once the token is revoked).
 */
export async function watchApprovals(ctx: CommandContext, print: (e: ApprovalEvent) => void, opts: { once?: boolean } = {}): Promise<void> {
  for (;;) {
    const target = await ctx.target();
    const url = new URL(ROUTES.approvalStream.path, target.url);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const headers: Record<string, string> = { 'x-atelier-channel': 'cli' };
    const bearer = bearerOf(target.credential);
    if (bearer) headers.authorization = `Bearer ${bearer}`;
    if (target.tenant) headers['x-atelier-tenant'] = target.tenant;
    const ended = await new Promise<'closed' | 'error'>((resolve, reject) => {
      const ws = new WebSocket(url, { headers });
      ws.on('unexpected-response', (_req, res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => {
          let body: { code?: string; message?: string } = {};
          try {
            body = JSON.parse(text) as typeof body;
          } catch {
            // not JSON
          }
          reject(new AtelierError(res.statusCode === 401 ? 'UNAUTHENTICATED' : 'UNAVAILABLE', body.message ?? `HTTP ${res.statusCode}`));
        });
      });
      ws.on('message', (data) => {
        const e = JSON.parse(String(data)) as ApprovalEvent | { type: 'ready' };
        if (e.type === 'ready') {
          process.stderr.write('watching approval requests (Ctrl-C to stop)\n');
          return;
        }
        print(e);
        if (opts.once) ws.close();
      });
      ws.on('close', () => resolve('closed'));
      ws.on('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'ECONNREFUSED')
          reject(new AtelierError('UNAVAILABLE', `cannot reach the Atelier server at ${target.url}: is it running?`));
        else resolve('error');
      });
    });
    if (opts.once) return;
    if (ended === 'error') await new Promise((r) => setTimeout(r, 1000));
  }
}
