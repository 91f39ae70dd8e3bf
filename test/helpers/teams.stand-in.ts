import { readFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { REPO_ROOT } from './server.js';

// A stand-in for a Microsoft Teams Workflows webhook ("post to a channel when a webhook request is
// received"), which cannot run here: a local HTTP listener that takes what Teams would take and
// refuses what it would refuse. Each message must be Teams' envelope (one attachment of type
// application/vnd.microsoft.card.adaptive), at most 28 KB, and its card must validate against the
// official Adaptive Card JSON schema of the version the card declares (test/fixtures/adaptivecards,
// copied from microsoft/AdaptiveCards, MIT), checked by ajv. Accepted cards answer 202 Accepted, as
// Workflows does.

const require = createRequire(import.meta.url);
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;
const SCHEMAS = join(REPO_ROOT, 'test', 'fixtures', 'adaptivecards');
/** Teams refuses a message larger than this. */
const MAX_BYTES = 28 * 1024;

/** The official schema of an Adaptive Card version (`1.5` → 1.5.0/adaptive-card.json), compiled once. */
const validators = new Map<string, ValidateFunction>();
export function cardValidator(version: string): ValidateFunction | undefined {
  if (!/^\d+\.\d+$/.test(version)) return undefined;
  const file = join(SCHEMAS, `${version}.0`, 'adaptive-card.json');
  if (!existsSync(file)) return undefined;
  let v = validators.get(version);
  if (!v) {
    // The schema is draft-06 and carries keywords of its own (version, features): not strict.
    const ajv = new Ajv({ strict: false, allErrors: true });
    ajv.addMetaSchema(require('ajv/dist/refs/json-schema-draft-06.json') as object);
    addFormats(ajv);
    // Its identifier is spelled the draft-04 way (`id`), which ajv 8 refuses: read as `$id`.
    const { id, ...schema } = JSON.parse(readFileSync(file, 'utf8')) as { id?: string };
    v = ajv.compile({ ...schema, ...(id !== undefined ? { $id: id } : {}) });
    validators.set(version, v);
  }
  return v;
}

/** Why Teams would refuse this message, or undefined when the stand-in accepts it. */
export function teamsRefusal(raw: string): string | undefined {
  if (Buffer.byteLength(raw) > MAX_BYTES) return `message of ${Buffer.byteLength(raw)} bytes, more than ${MAX_BYTES}`;
  let m: { type?: unknown; attachments?: { contentType?: unknown; content?: { type?: unknown; version?: unknown } }[] };
  try {
    m = JSON.parse(raw) as typeof m;
  } catch {
    return 'not JSON';
  }
  if (m.type !== 'message' || !Array.isArray(m.attachments) || m.attachments.length !== 1) return 'not a message with one attachment';
  const a = m.attachments[0]!;
  if (a.contentType !== 'application/vnd.microsoft.card.adaptive') return `attachment of type ${String(a.contentType)}`;
  const card = a.content;
  const version = card?.version;
  if (!card || card.type !== 'AdaptiveCard' || typeof version !== 'string') return 'no AdaptiveCard with a version';
  const validate = cardValidator(version);
  if (!validate) return `no schema for Adaptive Card version ${version}`;
  if (!validate(card)) return `invalid for Adaptive Card ${version}: ${JSON.stringify(validate.errors?.slice(0, 5))}`;
  return undefined;
}

export interface TeamsStandIn {
  url: string;
  /** The cards accepted, in the order they came. */
  cards: Record<string, unknown>[];
  /** What was refused, and why. */
  refused: string[];
  close(): Promise<void>;
}

/** Starts the stand-in on a port of its own; `url` is the webhook to configure (ATELIER_TEAMS_WEBHOOK_URL). */
export async function startTeamsStandIn(): Promise<TeamsStandIn> {
  const cards: Record<string, unknown>[] = [];
  const refused: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const why =
        req.method !== 'POST' || req.url !== '/workflows/hook'
          ? `${req.method} ${req.url}`
          : !String(req.headers['content-type']).startsWith('application/json')
            ? `content-type ${req.headers['content-type']}`
            : teamsRefusal(raw);
      if (why) {
        refused.push(why);
        res
          .writeHead(400, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { code: 'InvalidRequestContent', message: why } }));
        return;
      }
      const m = JSON.parse(raw) as { attachments: { content: Record<string, unknown> }[] };
      cards.push(m.attachments[0]!.content);
      res.writeHead(202).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}/workflows/hook`,
    cards,
    refused,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
