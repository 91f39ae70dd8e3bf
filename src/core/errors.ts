/**
 * One error type for the whole product. Clients branch on `code`, never on `message`.
 * The table below is the only place that maps a code to an HTTP status.
 */
export const ERROR_STATUS = {
  INVALID_ARGUMENT: 400,
  UNAUTHENTICATED: 401,
  TOKEN_INVALID: 401,
  TOKEN_EXPIRED: 401,
  TOKEN_REVOKED: 401,
  TOKEN_SIGNATURE_INVALID: 401,
  TOKEN_AUDIENCE_INVALID: 401,
  TOKEN_ISSUER_INVALID: 401,
  TOKEN_ALGORITHM_REFUSED: 401,
  USER_DISABLED: 401,
  PERMISSION_DENIED: 403,
  NOT_FOUND: 404,
  PROJECT_NOT_FOUND: 404,
  ACTION_NOT_FOUND: 404,
  PLAN_NOT_FOUND: 404,
  EXECUTION_NOT_FOUND: 404,
  WORKSHOP_NOT_FOUND: 404,
  CONFLICT: 409,
  ALREADY_EXISTS: 409,
  WORKSHOP_SUSPENDED: 409,
  WORKSHOP_NOT_RUNNING: 409,
  PRECONDITION_FAILED: 409,
  PLAN_STALE: 409,
  PLAN_FINGERPRINT_MISMATCH: 409,
  PLAN_ALREADY_APPLIED: 409,
  ACTION_BUSY: 409,
  ROLLBACK_CONFLICT: 409,
  JOURNAL_UNWRITABLE: 409,
  WRITES_COPY_COMMAND: 403,
  PLAN_EXPIRED: 410,
  PORT_CLOSED: 409,
  PAYLOAD_TOO_LARGE: 413,
  UPGRADE_REQUIRED: 426,
  RATE_LIMITED: 429,
  REPO_REFUSED: 422,
  REPO_NOT_FOUND: 422,
  UNSUPPORTED: 422,
  INSUFFICIENT_STORAGE: 507,
  DATABASE_UNAVAILABLE: 503,
  UNAVAILABLE: 503,
  SANDBOX_FAILED: 500,
  INTERNAL: 500,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export interface ErrorBody {
  code: ErrorCode;
  message: string;
  details?: Record<string, unknown>;
  requestId?: string;
}

export class AtelierError extends Error {
  readonly code: ErrorCode;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'AtelierError';
    this.code = code;
    this.details = details;
  }

  get status(): number {
    return ERROR_STATUS[this.code];
  }

  toBody(requestId?: string): ErrorBody {
    const body: ErrorBody = { code: this.code, message: this.message };
    if (this.details !== undefined) body.details = this.details;
    if (requestId !== undefined) body.requestId = requestId;
    return body;
  }
}

/** True when `code` is one of ours (used when parsing error bodies from the wire). */
export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(ERROR_STATUS, code);
}
