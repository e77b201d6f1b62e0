import { LetusNodeError, LetusVerifyError, wrapError } from './errors.js';
import { toBytes, toHash, toHex, toU32, toU64 } from './bytes.js';
import { init } from './wasm.js';

/** SPEC.md §6: the largest encoded snapshot chunk a verifier accepts. */
export const MAX_CHUNK_BYTES = 64 * 1024 * 1024;

/**
 * A snapshot of one trie at one version (SPEC.md §12): the manifest, verified against a trusted root, then each
 * chunk verified against its entry as it arrives, in any order and from any source. Create it with
 * `await SnapshotVerifier.fromManifest(...)`; call `free()` when done (it holds wasm memory).
 */
export class SnapshotVerifier {
  #inner;

  constructor(inner) {
    this.#inner = inner;
  }

  /** Verifies `manifest` (bytes or hex) as trie `tid` at `version` whose root is `trustedRoot`; rejects with `code`. */
  static async fromManifest(manifest, { tid, version, trustedRoot }) {
    const bytes = toBytes(manifest, 'manifest');
    const t = toU32(tid);
    const v = toU64(version);
    const root = toHash(trustedRoot, 'trusted root');
    const w = await init();
    try {
      return new SnapshotVerifier(new w.SnapshotManifest(bytes, t, v, root));
    } catch (e) {
      throw wrapError(e);
    }
  }

  /** Number of chunks. */
  get entries() {
    return this.#inner.entries;
  }

  /** Number of pairs in the whole state (a bigint). */
  get pairs() {
    return this.#inner.pairs;
  }

  /** Entry `index`: `{depth, prefix (hex), count (bigint), hash (hex)}`, or undefined. */
  entry(index) {
    const e = this.#inner.entry(toU32(index, 'index'));
    if (!e) return undefined;
    return { depth: e[0], prefix: toHex(e[1]), count: e[2], hash: toHex(e[3]) };
  }

  /** Verifies `chunk` (bytes or hex) as the chunk of entry `index`; returns its `[{key, value}]`, or throws. */
  verifyChunk(index, chunk) {
    const i = toU32(index, 'index');
    const bytes = toBytes(chunk, 'chunk');
    if (bytes.length > MAX_CHUNK_BYTES) {
      throw new LetusVerifyError('too_large', `a chunk of ${bytes.length} bytes; at most ${MAX_CHUNK_BYTES}`);
    }
    try {
      return this.#inner.verifyChunk(i, bytes).map(([key, value]) => ({ key, value }));
    } catch (e) {
      throw wrapError(e);
    }
  }

  /** Releases the wasm memory. */
  free() {
    this.#inner.free();
  }
}

/**
 * Verifies the snapshot of trie `tid` at `version` that the node at `node` serves (`GET /v1/tries/{tid}/snapshot`
 * and its chunks) in a module Web Worker, so that the page stays responsive: the manifest against `trustedRoot`,
 * then every chunk as it arrives. `onProgress({entries, done, pairs, bytes})` is called on the page's thread after
 * the manifest and after each chunk. Resolves to `{entries, pairs, total, bytes, inWorker}` (`total`: the pairs the
 * manifest promises, a decimal string; `inWorker`: true when the worker's global scope did the verifying, not the
 * page's thread); rejects with a LetusVerifyError (`root_mismatch`, `too_large`, ...), a
 * LetusNodeError for an error answer of the node, or `aborted` when `signal` aborts (the worker is terminated).
 * Browsers only (needs `Worker` with `type: 'module'`); `workerUrl` overrides where the worker script is. An
 * exception thrown by `onProgress` ends the verification and rejects with it.
 */
export async function verifySnapshotInWorker(node, { tid = 0, version, trustedRoot, maxPairs, onProgress, signal, workerUrl } = {}) {
  if (typeof Worker !== 'function') {
    throw new LetusVerifyError('unsupported', 'Web Workers are not available here');
  }
  const base = typeof location === 'object' ? new URL(String(node), location.href) : new URL(String(node));
  const msg = {
    node: base.href.replace(/\/+$/, ''),
    tid: toU32(tid),
    version: String(toU64(version)),
    trustedRoot: toHex(toHash(trustedRoot, 'trusted root')),
    maxPairs: maxPairs === undefined ? undefined : String(toU64(maxPairs, 'maxPairs')),
  };
  if (signal && signal.aborted) throw new LetusVerifyError('aborted', 'aborted before it started');
  let w;
  try {
    // The literal form, so that bundlers (Vite, webpack) find the worker and emit it with its imports.
    w = workerUrl
      ? new Worker(workerUrl, { type: 'module' })
      : new Worker(new URL('./snapshot-worker.js', import.meta.url), { type: 'module' });
  } catch (e) {
    // A cross-origin script, a Content-Security-Policy without `worker-src` for it, ...
    throw new LetusVerifyError('worker_error', `the snapshot worker could not start: ${e && e.message}`, { cause: e });
  }
  return new Promise((resolve, reject) => {
    const end = () => {
      w.terminate();
      if (signal) signal.removeEventListener('abort', onAbort);
    };
    const onAbort = () => {
      end();
      reject(new LetusVerifyError('aborted', 'snapshot verification aborted'));
    };
    if (signal) signal.addEventListener('abort', onAbort);
    w.onmessage = (ev) => {
      const m = ev.data;
      if (m.type === 'progress') {
        if (!onProgress) return;
        try {
          onProgress({ entries: m.entries, done: m.done, pairs: m.pairs, bytes: m.bytes });
        } catch (e) {
          end();
          reject(e);
        }
      } else if (m.type === 'done') {
        end();
        resolve({ entries: m.entries, pairs: m.pairs, total: m.total, bytes: m.bytes, inWorker: m.inWorker });
      } else {
        end();
        reject(m.status ? new LetusNodeError(m.status, m.code, m.message) : new LetusVerifyError(m.code, m.message));
      }
    };
    w.onerror = (ev) => {
      end();
      reject(new LetusVerifyError('worker_error', (ev && ev.message) || 'the snapshot worker failed (is src/snapshot-worker.js served next to the module?)'));
    };
    w.postMessage(msg);
  });
}
