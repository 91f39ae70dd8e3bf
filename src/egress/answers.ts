// The answers the proxy writes itself (refusals, faults): one status per reason, a plain-text
// body that says what to do next, and the reason in X-Atelier-Egress-Reason.
import type { EgressDecision, EgressReason } from './types.js';

/** The HTTP status a refused (or internal) decision is answered with. */
export const STATUS: Record<EgressReason, number> = {
  ALLOW_LISTED: 200,
  ASK_ALLOWED: 200,
  DENY_LISTED: 403,
  NOT_ALLOWLISTED: 403,
  PORT_NOT_ALLOWED: 403,
  ASK_DENIED: 403,
  ASK_PENDING: 403,
  ASK_TIMEOUT: 403,
  HOST_INVALID: 403,
  ADDRESS_FORBIDDEN: 403,
  UPGRADE_REFUSED: 403,
  NO_POLICY: 403,
  BAD_REQUEST: 400,
  UNSUPPORTED: 405,
  DNS_NOT_FOUND: 502,
  DNS_FAILED: 502,
  DNS_TIMEOUT: 504,
  INTERNAL_SERVICE: 200,
  INTERNAL_UNKNOWN: 502,
};

const PHRASE: Record<number, string> = {
  400: 'Bad Request',
  403: 'Forbidden',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
  502: 'Bad Gateway',
  504: 'Gateway Timeout',
};

/** A complete HTTP/1.1 answer of the proxy, ending the connection. */
export function rawAnswer(status: number, reason: string, body: string, extra: Record<string, string> = {}): string {
  const text = `${body}\n`;
  const lines = [
    `HTTP/1.1 ${status} ${PHRASE[status] ?? 'Error'}`,
    'Content-Type: text/plain; charset=utf-8',
    `Content-Length: ${Buffer.byteLength(text)}`,
    'Connection: close',
    `X-Atelier-Egress-Reason: ${reason}`,
    ...Object.entries(extra).map(([k, v]) => `${k}: ${v}`),
  ];
  return `${lines.join('\r\n')}\r\n\r\n${text}`;
}

/** The body of a refusal: what was refused, why, and what to do next. */
export function answerBody(d: EgressDecision): string {
  return `atelier egress: ${d.protocol === 'connect' ? 'CONNECT' : d.protocol === 'http' ? 'request' : 'SOCKS5 CONNECT'} to ${d.target} refused (${d.reason}): ${d.message}`;
}

/** The answer to a refused request or CONNECT: its status, reason and body, and the approval to wait for when one was filed. */
export function refusal(d: EgressDecision): string {
  const extra: Record<string, string> = {};
  if (d.approvalId !== undefined) extra['X-Atelier-Approval'] = d.approvalId;
  return rawAnswer(STATUS[d.reason], d.reason, answerBody(d), extra);
}
