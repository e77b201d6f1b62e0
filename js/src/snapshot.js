import { wrapError } from './errors.js';
import { toBytes, toHash, toHex, toU32, toU64 } from './bytes.js';
import { init } from './wasm.js';

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
