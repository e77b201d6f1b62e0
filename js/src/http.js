// Reading an HTTP answer with a bound on its bytes and a deadline, for the client and the snapshot worker.
import { LetusVerifyError } from './errors.js';
import { concat } from './bytes.js';

/**
 * The body of `res` as bytes, read as a stream and refused with `too_large` past `max` bytes (the rest is not
 * read: the stream is cancelled). When `signal` aborts, the read is cancelled too (a fetch that does not tie its
 * body to the signal still stops) and this rejects; the caller tells a deadline from other failures by
 * `signal.aborted`.
 */
export async function readCapped(res, max, signal) {
  const declared = Number(res.headers && res.headers.get ? res.headers.get('content-length') : NaN);
  if (declared > max) {
    if (res.body && res.body.cancel) await res.body.cancel().catch(() => {});
    throw new LetusVerifyError('too_large', `an answer of ${declared} bytes; at most ${max} are read`);
  }
  if (!res.body || typeof res.body.getReader !== 'function') {
    if (res.body && typeof res.body[Symbol.asyncIterator] === 'function') {
      // A Node stream (node-fetch, cross-fetch): counted chunk by chunk like a web stream.
      const parts = [];
      let n = 0;
      const body = res.body;
      const onAbort = () => body.destroy && body.destroy();
      if (signal) signal.addEventListener('abort', onAbort);
      try {
        for await (const chunk of body) {
          if (signal && signal.aborted) throw new Error('aborted');
          const c = chunk instanceof Uint8Array ? chunk : new TextEncoder().encode(String(chunk));
          n += c.length;
          if (n > max) {
            onAbort();
            throw new LetusVerifyError('too_large', `an answer above ${max} bytes`);
          }
          parts.push(c);
        }
        if (signal && signal.aborted) throw new Error('aborted');
      } finally {
        if (signal) signal.removeEventListener('abort', onAbort);
      }
      return concat(parts);
    }
    // No stream at all: read whole (raced against the signal, so a stalled body still ends), then measured.
    const aborted = signal
      ? new Promise((_, reject) => {
          if (signal.aborted) reject(new Error('aborted'));
          signal.addEventListener('abort', () => reject(new Error('aborted')));
        })
      : undefined;
    if (aborted) aborted.catch(() => {});
    const whole = res.arrayBuffer();
    const b = new Uint8Array(await (aborted ? Promise.race([whole, aborted]) : whole));
    if (b.length > max) throw new LetusVerifyError('too_large', `an answer above ${max} bytes`);
    return b;
  }
  const reader = res.body.getReader();
  const onAbort = () => reader.cancel().catch(() => {});
  if (signal) signal.addEventListener('abort', onAbort);
  try {
    const parts = [];
    let n = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (signal && signal.aborted) throw new Error('aborted');
      if (done) break;
      n += value.length;
      if (n > max) {
        await reader.cancel().catch(() => {});
        throw new LetusVerifyError('too_large', `an answer above ${max} bytes`);
      }
      parts.push(value);
    }
    return concat(parts);
  } finally {
    if (signal) signal.removeEventListener('abort', onAbort);
  }
}

/**
 * What a node's error answer says: `{code, message}` from its JSON body `{"error": {"code", "message"}}`, or
 * `http_error` and the text itself when the body is not that (a proxy's plain-text error).
 */
export function errorOf(text) {
  try {
    const body = JSON.parse(text);
    if (body && body.error && typeof body.error.code === 'string') {
      return { code: body.error.code, message: String(body.error.message) };
    }
  } catch {
    // a plain-text error
  }
  return { code: 'http_error', message: text };
}
