import { LetusVerifyError, fail, wrapError } from './errors.js';
import { toBytes, toHash, toHex } from './bytes.js';
import { init } from './wasm.js';

const HEADER_LEN = 8 + 1 + 4 + 8 + 32;
const MAGIC = [0x4c, 0x45, 0x54, 0x55, 0x53, 0x45, 0x58, 0x50];

/**
 * Full verification of a state export stream (SPEC.md §9.2) over the wasm ExportVerifier: feed chunks of any
 * size, then `finish(trustedRoot)`. Memory stays bounded by one record plus the trie depth.
 * The header's tid, version and root are what the exporter claims (`header`), never trusted.
 */
export class FullVerifier {
  #inner = null;
  #error = null;
  #done = false;
  #head = new Uint8Array(0);
  #onProgress;
  /** Bytes fed so far. */
  bytes = 0;
  /** The claimed header `{tid, version, root}` once its 53 bytes arrived (untrusted), else null. */
  header = null;

  /** `onProgress({records, bytes})` is called after every chunk. */
  constructor({ onProgress } = {}) {
    this.#onProgress = onProgress;
  }

  /** Pairs verified so far. */
  get records() {
    return this.#inner ? Number(this.#inner.records) : 0;
  }

  async #ready() {
    if (this.#error) throw this.#error;
    if (this.#done) fail('finished', 'verifier already finished');
    if (!this.#inner) {
      const w = await init();
      if (!this.#inner) this.#inner = new w.ExportVerifier();
    }
    return this.#inner;
  }

  #failWith(e) {
    this.#error = wrapError(e);
    if (this.#inner) {
      this.#inner.free();
      this.#inner = null;
    }
    throw this.#error;
  }

  #sniffHeader(chunk) {
    if (this.header || this.#head.length >= HEADER_LEN) return;
    const need = HEADER_LEN - this.#head.length;
    const h = new Uint8Array(this.#head.length + Math.min(need, chunk.length));
    h.set(this.#head);
    h.set(chunk.subarray(0, Math.min(need, chunk.length)), this.#head.length);
    this.#head = h;
    if (h.length === HEADER_LEN && MAGIC.every((b, i) => h[i] === b) && h[8] === 1) {
      const dv = new DataView(h.buffer, h.byteOffset);
      this.header = { tid: dv.getUint32(9, true), version: dv.getBigUint64(13, true), root: toHex(h.subarray(21, 53)) };
    }
  }

  /** Feeds the next chunk (bytes or hex). Rejects with the first problem of the stream (SPEC.md §9.2). */
  async feed(chunk) {
    const c = toBytes(chunk, 'chunk');
    const inner = await this.#ready();
    try {
      inner.feed(c);
    } catch (e) {
      this.#failWith(e);
    }
    this.bytes += c.length;
    this.#sniffHeader(c);
    if (this.#onProgress) this.#onProgress({ records: this.records, bytes: this.bytes });
  }

  /**
   * Ends the stream and compares the recomputed root with `trustedRoot` (hex or bytes). Resolves to
   * `{records, bytes, header}`; rejects (`truncated`, `root_mismatch`, ...) otherwise.
   */
  async finish(trustedRoot) {
    const root = toHash(trustedRoot, 'trusted root');
    const inner = await this.#ready();
    let records;
    try {
      records = inner.finish(root);
    } catch (e) {
      this.#failWith(e);
    }
    this.#done = true;
    inner.free();
    this.#inner = null;
    return { records: Number(records), bytes: this.bytes, header: this.header };
  }

  /**
   * Verifies a whole stream: a Uint8Array, a web ReadableStream (e.g. `response.body`) or any (async) iterable of
   * chunks (e.g. a Node.js Readable). Resolves like `finish`.
   */
  static async verify(stream, trustedRoot, options) {
    const v = new FullVerifier(options);
    if (stream instanceof Uint8Array || typeof stream === 'string' || stream instanceof ArrayBuffer || ArrayBuffer.isView(stream)) {
      await v.feed(stream);
    } else if (stream && typeof stream.getReader === 'function') {
      const reader = stream.getReader();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          await v.feed(value);
        }
      } catch (e) {
        // A failed check ends the download too, rather than leaving the connection open.
        await reader.cancel(e).catch(() => {});
        throw e;
      } finally {
        reader.releaseLock();
      }
    } else if (stream && (stream[Symbol.asyncIterator] || stream[Symbol.iterator])) {
      for await (const chunk of stream) await v.feed(chunk);
    } else {
      throw new LetusVerifyError('malformed', 'expected bytes, a ReadableStream or an iterable of chunks');
    }
    return v.finish(trustedRoot);
  }
}
