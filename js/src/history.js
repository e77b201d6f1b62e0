import { fail } from './errors.js';
import { concat, fromHex, hashHex, toHash, toU32, toU64 } from './bytes.js';
import { withWasm } from './wasm.js';

/** `history_leaf(tid, version, root)` (SPEC.md §8) as 32 bytes. */
export async function historyLeaf(tid, version, root) {
  const t = toU32(tid);
  const v = toU64(version);
  const r = fromHex(hashHex(root, 'root'));
  return withWasm((w) => w.historyLeaf(t, v, r));
}

/** `MTH` (SPEC.md §8) over a list of history leaf hashes (bytes or hex), as 32 bytes. */
export async function historyRoot(leaves) {
  if (!Array.isArray(leaves)) fail('malformed', 'leaves must be an array of hashes');
  const b = concat(leaves.map((l, i) => toHash(l, `leaf ${i}`)));
  return withWasm((w) => w.historyRoot(b));
}
