import { createHmac, timingSafeEqual } from 'node:crypto';
import { AtelierError } from '../../core/index.js';
import { asDatabaseError, type Pool } from '../../db/index.js';
import type { ApprovalService } from '../service.js';
import type { ApprovalEvent, ApprovalRequest } from '../types.js';

export interface SlackConfig {
  webhookUrl?: string;
  botToken?: string;
  channel?: string;
  signingSecret?: string;
  apiUrl: string;
}

/** Slack signs interaction requests with v0 = HMAC-SHA256(secret, `v0:<timestamp>:<raw body>`). */
const WINDOW_SECONDS = 300;

function unauthenticated(why: string): AtelierError {
  return new AtelierError('UNAUTHENTICATED', `Slack request refused: ${why}`);
}

/**
 * Checks a Slack request's signature over its raw body before anything is parsed: both headers
 * present, a timestamp within 300 s either way, `v0=` and 64 hex digits, a constant-time compare.
 * Throws UNAUTHENTICATED (also when no signing secret is configured: nothing can be verified).
 */
export function verifySlackSignature(
  secret: string | undefined,
  headers: Record<string, string | string[] | undefined>,
  rawBody: Buffer,
  nowSeconds: number,
): string {
  const ts = headers['x-slack-request-timestamp'];
  const sig = headers['x-slack-signature'];
  if (typeof ts !== 'string' || typeof sig !== 'string') throw unauthenticated('missing X-Slack-Signature or X-Slack-Request-Timestamp');
  if (!secret) throw unauthenticated('Slack is not configured on this server (ATELIER_SLACK_SIGNING_SECRET)');
  if (!/^\d{1,12}$/.test(ts)) throw unauthenticated('bad timestamp');
  if (Math.abs(nowSeconds - Number(ts)) > WINDOW_SECONDS) throw unauthenticated('timestamp more than 300 s away from now');
  if (!/^v0=[0-9a-f]{64}$/.test(sig)) throw unauthenticated('unknown signature version or format');
  const mac = createHmac('sha256', secret);
  mac.update(`v0:${ts}:`);
  mac.update(rawBody);
  const expected = Buffer.from(mac.digest('hex'), 'utf8');
  const given = Buffer.from(sig.slice(3), 'utf8');
  if (expected.length !== given.length || !timingSafeEqual(expected, given)) throw unauthenticated('bad signature');
  return sig;
}

interface SlackAction {
  action_id?: unknown;
  value?: unknown;
}
interface SlackPayload {
  type?: unknown;
  user?: { id?: unknown };
  actions?: SlackAction[];
  response_url?: unknown;
}

function what(a: ApprovalRequest): string {
  const p = a.payload;
  switch (a.category) {
    case 'ALLOWLIST_EXPANSION':
      return `reach \`${String(p.entry ?? p.host)}\``;
    case 'SECRET_REQUEST':
      return p.mode === 'use'
        ? `use the secret \`${String(p.name)}\` at \`${String(p.host)}\` (lower risk: the proxy adds \`${String(p.header)}\`; the value never enters the workshop)`
        : `reveal the secret \`${String(p.name)}\` inside the workshop (*riskier*: the agent can copy the value anywhere its allowlist reaches)`;
    case 'SHELL_COMMAND':
      return `run \`${(Array.isArray(p.command) ? p.command.join(' ') : '').slice(0, 500)}\``;
    case 'PR_GATEWAY':
      return `publish the branch \`${String(p.branch)}\``;
  }
}

/** Escapes Slack mrkdwn control characters in text we did not write. */
function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** The Block Kit message for a request: what, who asks, why, the diff summary for PRs, and the buttons while pending. */
export function slackMessage(a: ApprovalRequest): { text: string; blocks: unknown[] } {
  const text = `Approval ${a.status === 'PENDING' ? 'requested' : a.status.toLowerCase()}: ${a.category} for ${a.workshopId}`;
  const blocks: unknown[] = [
    { type: 'header', text: { type: 'plain_text', text: `${a.category.replace(/_/g, ' ').toLowerCase()} — ${a.status}` } },
    {
      type: 'section',
      fields: [
        { type: 'mrkdwn', text: `*Workshop*\n${esc(a.workshopId)}` },
        { type: 'mrkdwn', text: `*Asked by*\n${esc(a.requestedBy)}` },
        { type: 'mrkdwn', text: `*Wants to*\n${esc(what(a))}` },
        { type: 'mrkdwn', text: `*Expires*\n${a.expiresAt}` },
      ],
    },
    { type: 'section', text: { type: 'mrkdwn', text: `*Justification*\n${esc(String(a.payload.justification ?? '')).slice(0, 2900)}` } },
  ];
  if (a.category === 'PR_GATEWAY' && typeof a.payload.diffStat === 'string')
    blocks.push({ type: 'section', text: { type: 'mrkdwn', text: `*Changes*\n\`\`\`${esc(a.payload.diffStat).slice(0, 2800)}\`\`\`` } });
  if (a.status === 'PENDING') {
    blocks.push({
      type: 'actions',
      block_id: `approval:${a.id}`,
      elements: [
        { type: 'button', action_id: 'approve', style: 'primary', text: { type: 'plain_text', text: 'Approve' }, value: a.id },
        { type: 'button', action_id: 'reject', style: 'danger', text: { type: 'plain_text', text: 'Reject' }, value: a.id },
      ],
    });
    blocks.push({ type: 'context', elements: [{ type: 'mrkdwn', text: `or \`atelier approve ${a.id}\`` }] });
  } else {
    const by = a.decidedBy ? ` by ${esc(a.decidedBy)}` : '';
    const reason = a.decisionReason ? `: ${esc(a.decisionReason)}` : '';
    blocks.push({ type: 'context', elements: [{ type: 'mrkdwn', text: `*${a.status}*${by}${reason} (request ${a.id})` }] });
  }
  return { text, blocks };
}

/**
 * Posts a message per request (incoming webhook, or bot token with chat.postMessage) and
 * updates it once decided or expired (chat.update; with a webhook only, a follow-up message).
 * Handles Slack's button clicks: signature first, then the same decision rules as the API.
 */
export class SlackNotifier {
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly pool: Pool,
    private readonly approvals: ApprovalService,
    private readonly cfg: SlackConfig,
    private readonly log: { warn(obj: object, msg?: string): void },
  ) {}

  get sends(): boolean {
    return Boolean(this.cfg.webhookUrl || (this.cfg.botToken && this.cfg.channel));
  }

  /** Listens to this replica's own events (so one replica posts each message). */
  start(): void {
    if (!this.sends) return;
    this.approvals.localEvents.on('event', ({ event }: { event: ApprovalEvent }) => {
      const p = this.onEvent(event).catch((err: unknown) =>
        this.log.warn({ err: String(err), approval: event.approval.id }, 'slack: not delivered'),
      );
      this.pending.add(p);
      void p.finally(() => this.pending.delete(p));
    });
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.pending]);
  }

  private async api(method: string, body: Record<string, unknown>, timeoutMs = 10_000): Promise<Record<string, unknown>> {
    const res = await fetch(`${this.cfg.apiUrl}/${method}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${this.cfg.botToken}`, 'content-type': 'application/json; charset=utf-8' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const json = (await res.json().catch(() => ({}))) as Record<string, unknown>;
    if (json.ok !== true)
      throw new AtelierError('UNAVAILABLE', `Slack ${method} failed: ${String(json.error ?? res.status)}`, {
        slackError: json.error ?? null,
      });
    return json;
  }

  private async post(url: string, body: unknown): Promise<void> {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    if (!res.ok) throw new Error(`Slack webhook answered ${res.status}`);
  }

  private async onEvent(event: ApprovalEvent): Promise<void> {
    const a = event.approval;
    const message = slackMessage(a);
    if (event.type === 'created') {
      if (this.cfg.botToken && this.cfg.channel) {
        const r = await this.api('chat.postMessage', { channel: this.cfg.channel, ...message });
        await this.pool.query('INSERT INTO hitl_slack_messages (request_id, channel, ts) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [
          a.id,
          String(r.channel ?? this.cfg.channel),
          String(r.ts ?? ''),
        ]);
      } else if (this.cfg.webhookUrl) {
        await this.post(this.cfg.webhookUrl, message);
        await this.pool.query('INSERT INTO hitl_slack_messages (request_id) VALUES ($1) ON CONFLICT DO NOTHING', [a.id]);
      }
      return;
    }
    const [m] = (
      await this.pool.query<{ channel: string | null; ts: string | null }>(
        'SELECT channel, ts FROM hitl_slack_messages WHERE request_id = $1',
        [a.id],
      )
    ).rows;
    if (!m) return;
    if (this.cfg.botToken && m.channel && m.ts) await this.api('chat.update', { channel: m.channel, ts: m.ts, ...message });
    else if (this.cfg.webhookUrl) await this.post(this.cfg.webhookUrl, message);
  }

  /** The Slack user's Atelier account: the user whose e-mail is the one Slack has verified for them (users.info). */
  private async userFor(slackUserId: string): Promise<string | undefined> {
    if (!this.cfg.botToken) return undefined;
    let info: Record<string, unknown>;
    try {
      // Slack wants an answer within 3 s: the lookup gets 2.
      info = await this.api('users.info', { user: slackUserId }, 2000);
    } catch (err) {
      if (err instanceof AtelierError && err.details?.slackError === 'user_not_found') return undefined;
      throw err;
    }
    const user = info.user as { profile?: { email?: unknown }; is_email_confirmed?: unknown; deleted?: unknown } | undefined;
    const email = user?.profile?.email;
    if (typeof email !== 'string' || user?.is_email_confirmed !== true || user.deleted === true) return undefined;
    const r = await this.pool.query<{ id: string }>('SELECT id FROM users WHERE lower(email) = lower($1) AND disabled_at IS NULL', [email]);
    return r.rows.length === 1 ? r.rows[0]!.id : undefined;
  }

  /**
   * POST /v1/webhooks/slack/interactions: verified, replay-checked, then parsed. Answers at once
   * with what happened (Slack shows it to the clicker); the message itself is updated by the
   * decision's event.
   */
  async interaction(headers: Record<string, string | string[] | undefined>, raw: Buffer, ip: string | null): Promise<{ text: string }> {
    const signature = verifySlackSignature(this.cfg.signingSecret, headers, raw, Math.floor(Date.now() / 1000));
    try {
      await this.pool.query("DELETE FROM slack_seen_signatures WHERE seen_at < now() - interval '10 minutes'");
      const fresh = await this.pool.query('INSERT INTO slack_seen_signatures (signature) VALUES ($1) ON CONFLICT DO NOTHING', [signature]);
      if (fresh.rowCount === 0) throw unauthenticated('this request was already received (replay)');
    } catch (err) {
      throw asDatabaseError(err);
    }
    const form = new URLSearchParams(raw.toString('utf8'));
    let payload: SlackPayload;
    try {
      payload = JSON.parse(form.get('payload') ?? '') as SlackPayload;
    } catch {
      throw new AtelierError('INVALID_ARGUMENT', 'a Slack interaction carries a JSON payload form field');
    }
    const action = Array.isArray(payload.actions) ? payload.actions[0] : undefined;
    const id = action?.value;
    const kind = action?.action_id;
    const slackUser = payload.user?.id;
    if (
      payload.type !== 'block_actions' ||
      typeof id !== 'string' ||
      (kind !== 'approve' && kind !== 'reject') ||
      typeof slackUser !== 'string'
    )
      throw new AtelierError('INVALID_ARGUMENT', 'not an Atelier approval button (block_actions with approve or reject)');
    const userId = await this.userFor(slackUser);
    if (!userId)
      throw new AtelierError(
        'PERMISSION_DENIED',
        'your Slack account is not linked to an Atelier user: your confirmed Slack e-mail must be the e-mail of your Atelier account',
      );
    const a = await this.approvals.decideAsUser(
      id,
      { decision: kind === 'approve' ? 'APPROVE' : 'REJECT', reason: `${kind === 'approve' ? 'approved' : 'rejected'} in Slack` },
      userId,
      { channel: 'slack', ip },
    );
    return { text: `${a.status} by ${a.decidedBy ?? 'you'}` };
  }
}
