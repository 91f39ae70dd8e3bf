import type { Pool } from '../../db/index.js';
import { approvalLink, VIEW_LINK_SECONDS, type LinkAction } from '../deepLink.js';
import type { ApprovalService } from '../service.js';
import type { ApprovalCategory, ApprovalEvent, ApprovalRequest } from '../types.js';

export interface TeamsConfig {
  /** A Teams Workflows "post to a channel when a webhook request is received" URL (ATELIER_TEAMS_WEBHOOK_URL). */
  webhookUrl?: string;
}

/** How the cards' buttons reach the dashboard: the key links are signed with, and the server's public origin once known. */
export interface TeamsLinks {
  key: string;
  origin(): string | undefined;
}

/** The Adaptive Card version the cards declare: the highest Teams renders. */
export const TEAMS_CARD_VERSION = '1.5';

const LABEL: Record<ApprovalCategory, string> = {
  ALLOWLIST_EXPANSION: 'Network access',
  SECRET_REQUEST: 'Secret',
  SHELL_COMMAND: 'Command',
  PR_GATEWAY: 'Push / pull request',
};

// How much of each agent-written field a card carries (Teams refuses a message above ~28 KB).
const MAX = { what: 600, justification: 1000, diffStat: 1500, reason: 600, short: 200 } as const;

/**
 * Agent text as plain text: control and bidirectional-override characters shown as their code
 * point (as the dashboard shows them), cut at `max` characters.
 */
function visible(value: unknown, max: number): string {
  const s = String(value ?? '').replace(
    // eslint-disable-next-line no-control-regex
    /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g,
    (c) => `⟨U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}⟩`,
  );
  return s.length > max ? `${s.slice(0, max)}… (${s.length - max} more characters in Atelier)` : s;
}

/**
 * Text for a TextBlock or a FactSet value, which render a subset of markdown: on one line (no list
 * or heading can start), each character markdown gives a meaning to escaped with a backslash.
 */
function markdownSafe(value: unknown, max = MAX.short): string {
  return visible(value, max)
    .replace(/[\r\n]+/g, ' ')
    .replace(/[\\`*_~[\]()#>|!<{}]/g, (c) => `\\${c}`);
}

/**
 * Text no markdown touches: a RichTextBlock's TextRun ("Markdown is not supported" in the
 * schema), so what an agent wrote reads exactly as written, links and emphasis included.
 */
function verbatim(text: string, monospace = false): Record<string, unknown> {
  return { type: 'RichTextBlock', inlines: [{ type: 'TextRun', text, ...(monospace ? { fontType: 'monospace' } : {}) }] };
}

function label(text: string): Record<string, unknown> {
  return { type: 'TextBlock', text, weight: 'bolder', wrap: true, spacing: 'medium' };
}

/** What the request would do, in plain words; never a secret's value (requests hold only names). */
function what(a: ApprovalRequest): string {
  const p = a.payload;
  switch (a.category) {
    case 'ALLOWLIST_EXPANSION':
      return `reach ${visible(p.entry ?? p.host, MAX.short)}`;
    case 'SECRET_REQUEST':
      return p.mode === 'use'
        ? `use the secret ${visible(p.name, MAX.short)} at ${visible(p.host, MAX.short)} (lower risk: the egress proxy adds the ${visible(p.header, MAX.short)} header; the value never enters the workshop)`
        : `reveal the secret ${visible(p.name, MAX.short)} inside the workshop (riskier: the agent can copy the value anywhere its allowlist reaches)`;
    case 'SHELL_COMMAND':
      return `run ${visible(Array.isArray(p.command) ? p.command.map(String).join(' ') : '', MAX.what)}`;
    case 'PR_GATEWAY':
      return `publish the branch ${visible(p.branch, MAX.short)}`;
  }
}

function utc(iso: string): string {
  return `${iso.slice(0, 16).replace('T', ' ')} UTC`;
}

/** A Teams Workflows message: one Adaptive Card attachment. */
function message(card: Record<string, unknown>): Record<string, unknown> {
  return {
    type: 'message',
    attachments: [{ contentType: 'application/vnd.microsoft.card.adaptive', contentUrl: null, content: card }],
  };
}

function card(fallbackText: string, body: unknown[], actions: unknown[]): Record<string, unknown> {
  return {
    $schema: 'http://adaptivecards.io/schemas/adaptive-card.json',
    type: 'AdaptiveCard',
    version: TEAMS_CARD_VERSION,
    fallbackText,
    body,
    ...(actions.length > 0 ? { actions } : {}),
  };
}

function openUrl(title: string, url: string, style: 'positive' | 'destructive' | 'default', tooltip: string): Record<string, unknown> {
  return { type: 'Action.OpenUrl', title, url, style, tooltip };
}

/**
 * The card of a pending request: what, who asks, the agent's justification, the expiry, and
 * Approve / Reject buttons that open the request in the dashboard through signed links expiring
 * with the request (`link` undefined: the server's address is not known yet, no buttons).
 */
export function teamsRequestCard(a: ApprovalRequest, link?: (action: LinkAction, exp: number) => string): Record<string, unknown> {
  const title = `Approval requested: ${LABEL[a.category]}`;
  const body: unknown[] = [
    { type: 'TextBlock', text: title, style: 'heading', size: 'medium', weight: 'bolder', wrap: true },
    {
      type: 'FactSet',
      facts: [
        { title: 'Workshop', value: markdownSafe(a.workshopId) },
        { title: 'Asked by', value: markdownSafe(a.requestedBy) },
        { title: 'Category', value: a.category },
        { title: 'Expires', value: utc(a.expiresAt) },
      ],
    },
    label('Wants to'),
    verbatim(what(a)),
    label('The agent says'),
    verbatim(visible(a.payload.justification, MAX.justification)),
  ];
  if (a.category === 'PR_GATEWAY' && typeof a.payload.diffStat === 'string')
    body.push(label('Changes'), verbatim(visible(a.payload.diffStat, MAX.diffStat), true));
  body.push({
    type: 'TextBlock',
    text: link
      ? `Approve and Reject open the request in Atelier: you decide there, signed in, with your own rights. Or run: atelier approve ${a.id}`
      : `Decide it in Atelier, or run: atelier approve ${a.id}`,
    isSubtle: true,
    wrap: true,
    size: 'small',
  });
  const exp = Math.floor(Date.parse(a.expiresAt) / 1000);
  const actions = link
    ? [
        openUrl('Approve…', link('approve', exp), 'positive', 'Opens the request in Atelier to approve it (after sign-in)'),
        openUrl('Reject…', link('reject', exp), 'destructive', 'Opens the request in Atelier to reject it (after sign-in)'),
      ]
    : [];
  return message(card(`${title} in workshop ${a.workshopId}`, body, actions));
}

/** The follow-up once a request is decided or expired (a Workflows webhook cannot edit what it posted). */
export function teamsOutcomeCard(a: ApprovalRequest, link?: (action: LinkAction, exp: number) => string): Record<string, unknown> {
  const outcome =
    a.status === 'APPROVED' ? 'Approved' : a.status === 'REJECTED' ? 'Rejected' : a.status === 'EXPIRED' ? 'Expired' : 'Pending';
  const title = `${outcome}: ${LABEL[a.category]}`;
  const body: unknown[] = [
    {
      type: 'TextBlock',
      text: title,
      style: 'heading',
      size: 'medium',
      weight: 'bolder',
      wrap: true,
      color: a.status === 'APPROVED' ? 'good' : 'attention',
    },
    {
      type: 'FactSet',
      facts: [
        { title: 'Workshop', value: markdownSafe(a.workshopId) },
        { title: 'Asked by', value: markdownSafe(a.requestedBy) },
        {
          title: a.status === 'EXPIRED' ? 'Expired' : 'Decided by',
          value: a.status === 'EXPIRED' ? `${utc(a.expiresAt)}, nobody decided` : markdownSafe(a.decidedBy ?? 'unknown'),
        },
        ...(a.decidedAt ? [{ title: 'At', value: utc(a.decidedAt) }] : []),
        { title: 'Request', value: a.id },
      ],
    },
    label('Wanted to'),
    verbatim(what(a)),
  ];
  if (a.decisionReason) body.push(label('Reason'), verbatim(visible(a.decisionReason, MAX.reason)));
  const actions = link
    ? [
        openUrl(
          'Open in Atelier',
          link('view', Math.floor(Date.now() / 1000) + VIEW_LINK_SECONDS),
          'default',
          'The request and its audit trail',
        ),
      ]
    : [];
  return message(card(`${title} in workshop ${a.workshopId}`, body, actions));
}

/**
 * Posts an Adaptive Card per request to a Teams Workflows webhook, and a follow-up card once it
 * is decided or expires. The cards' buttons only open the dashboard: Teams never decides.
 */
export class TeamsNotifier {
  private readonly pending = new Set<Promise<void>>();
  /** Cards being posted by this replica: a follow-up waits for its card, so Teams shows them in order. */
  private readonly posting = new Map<string, Promise<void>>();

  constructor(
    private readonly pool: Pool,
    private readonly approvals: ApprovalService,
    private readonly cfg: TeamsConfig,
    private readonly links: TeamsLinks,
    private readonly log: { warn(obj: object, msg?: string): void },
  ) {}

  /** Listens to this replica's own events (so one replica posts each card). */
  start(): void {
    if (!this.cfg.webhookUrl) return;
    this.approvals.localEvents.on('event', ({ event }: { event: ApprovalEvent }) => {
      const p = this.onEvent(event).catch((err: unknown) =>
        // The webhook URL carries its own signature: it is never logged.
        this.log.warn({ err: err instanceof Error ? err.message : String(err), approval: event.approval.id }, 'teams: not delivered'),
      );
      this.pending.add(p);
      void p.finally(() => this.pending.delete(p));
    });
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.pending]);
  }

  private link(id: string): ((action: LinkAction, exp: number) => string) | undefined {
    const origin = this.links.origin();
    return origin === undefined ? undefined : (action, exp) => approvalLink(origin, this.links.key, id, action, exp);
  }

  private async post(body: unknown): Promise<void> {
    const res = await fetch(this.cfg.webhookUrl!, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
      redirect: 'error',
    });
    // Workflows answers 202 Accepted; any 2xx is taken.
    if (!res.ok) throw new Error(`the Teams webhook answered ${res.status}: ${(await res.text().catch(() => '')).slice(0, 200)}`);
  }

  private async onEvent(event: ApprovalEvent): Promise<void> {
    const a = event.approval;
    if (event.type === 'created') {
      const posted = (async () => {
        await this.post(teamsRequestCard(a, this.link(a.id)));
        await this.pool.query('INSERT INTO hitl_teams_cards (request_id) VALUES ($1) ON CONFLICT DO NOTHING', [a.id]);
      })();
      this.posting.set(a.id, posted);
      try {
        await posted;
      } finally {
        this.posting.delete(a.id);
      }
      return;
    }
    await this.posting.get(a.id)?.catch(() => undefined);
    // One follow-up per card posted, whichever replica decided or expired the request.
    const claimed = await this.pool.query(
      'UPDATE hitl_teams_cards SET followed_up_at = now() WHERE request_id = $1 AND followed_up_at IS NULL',
      [a.id],
    );
    if (claimed.rowCount === 0) return;
    await this.post(teamsOutcomeCard(a, this.link(a.id)));
  }
}
