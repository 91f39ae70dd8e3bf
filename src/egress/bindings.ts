// Credential bindings as a project writes them (atelier.yaml `egress.credentials`), checked
// into what the broker uses (broker.ts). Every refusal names the entry and what to write instead.
import { splitAuthority } from './authority.js';
import type { CredentialBinding } from './broker.js';
import { canonicalizeHost } from './canonical.js';

/** One entry as written: `{ host: api.github.com, header: Authorization, value: "Bearer ${secret:GITHUB_TOKEN}" }`. */
export interface CredentialEntry {
  host: string;
  header: string;
  value: string;
}

/** An HTTP field name (RFC 9110 token). */
export const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Fields the broker sets itself or that frame the message: never bound. */
const RESERVED = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'upgrade',
]);
const SECRET_REF = /\$\{secret:([^}]*)\}/g;
const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

/** Checks one entry; throws an Error whose message starts with `where` (e.g. `egress.credentials.0`). */
export function parseBinding(entry: CredentialEntry, where: string): CredentialBinding {
  const a = splitAuthority(entry.host);
  if (!a || entry.host.includes('*'))
    throw new Error(
      `${where}.host: "${entry.host.slice(0, 100)}" is not one host (write a host name, optionally with :port; no wildcards)`,
    );
  const h = canonicalizeHost(a.host);
  if (h.kind === 'refused') throw new Error(`${where}.host: ${h.message}`);
  const port = a.port ?? 443;
  if (!TOKEN.test(entry.header) || entry.header.length > 100)
    throw new Error(`${where}.header: "${entry.header.slice(0, 100)}" is not an HTTP header name (letters, digits and !#$%&'*+-.^_\`|~)`);
  if (RESERVED.has(entry.header.toLowerCase()))
    throw new Error(`${where}.header: ${entry.header} frames the request and cannot carry a credential: bind another header`);
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  if (/[\u0000-\u001f\u007f]/.test(entry.value))
    throw new Error(`${where}.value: a header value cannot hold control characters (line breaks included)`);
  const refs = [...entry.value.matchAll(SECRET_REF)];
  if (refs.length !== 1)
    throw new Error(
      `${where}.value: name exactly one secret as \${secret:NAME} (found ${refs.length}); for example "Bearer \${secret:GITHUB_TOKEN}"`,
    );
  const ref = refs[0]!;
  const secret = ref[1]!;
  if (!SECRET_NAME.test(secret))
    throw new Error(`${where}.value: "${secret.slice(0, 80)}" is not a secret name (letters, digits and _, not starting with a digit)`);
  return {
    host: h.value,
    port,
    header: entry.header,
    secret,
    prefix: entry.value.slice(0, ref.index),
    suffix: entry.value.slice(ref.index + ref[0].length),
  };
}
