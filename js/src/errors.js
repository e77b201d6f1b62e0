/**
 * Errors of letus-verify. `LetusVerifyError.code` is a stable SPEC.md §10 error code (or one of the few client
 * codes documented in README.md); `LetusNodeError` is an error answer of the node itself (HTTP status + code).
 */
export class LetusVerifyError extends Error {
  constructor(code, message, options) {
    super(message || code, options);
    this.name = 'LetusVerifyError';
    this.code = code;
  }
}

export class LetusNodeError extends Error {
  constructor(status, code, message) {
    super(`node answered ${status} ${code}: ${message}`);
    this.name = 'LetusNodeError';
    this.status = status;
    this.code = code;
  }
}

export function fail(code, message) {
  throw new LetusVerifyError(code, message);
}

/** Turns an Error thrown by the wasm module (an Error with a `code` property) into a LetusVerifyError. */
export function wrapError(e) {
  if (e instanceof LetusVerifyError) return e;
  if (e && typeof e.code === 'string') return new LetusVerifyError(e.code, e.message, { cause: e });
  return e;
}
