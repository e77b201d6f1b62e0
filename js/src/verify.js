import { fail } from './errors.js';
import { toBytes, toHash, toHex, toU32, toU64 } from './bytes.js';
import { proofBytes } from './proof.js';
import { withWasm } from './wasm.js';

function commitmentOf(c) {
  if (c === null || typeof c !== 'object') fail('malformed', 'the commitment must be an object {tid, version, root}');
  return {
    tid: c.tid === undefined ? undefined : toU32(c.tid, 'tid'),
    version: c.version === undefined ? undefined : toU64(c.version, 'version'),
    root: toHash(c.root, 'root'),
  };
}

function valueOf(v, what) {
  return v === null || v === undefined ? null : toBytes(v, what);
}

/**
 * Verifies a one-key state proof (SPEC.md §5) against a trusted root. `value` null means "claimed absent".
 * Keys and values are bytes or hex strings; the proof is bytes, hex or the §5.5 JSON form.
 * Resolves to `{tid, version, root, key, value, present}`; rejects with a LetusVerifyError.
 */
export async function verifyProof(commitment, key, value, proof) {
  const c = commitmentOf(commitment);
  const p = proofBytes(proof);
  const k = toBytes(key, 'key');
  const v = valueOf(value, 'value');
  const present = await withWasm((w) => w.verifyProof(c.root, k, v === null ? undefined : v, p));
  return { tid: c.tid, version: c.version, root: toHex(c.root), key: k, value: v, present };
}

/**
 * Verifies a multi-proof for `claims` (`[{key, value | null}]`) against a trusted root.
 * Resolves to `{tid, version, root, claims: [{key, value}]}` with bytes; rejects with a LetusVerifyError.
 */
export async function verifyMultiProof(commitment, claims, proof) {
  const c = commitmentOf(commitment);
  const p = proofBytes(proof);
  if (!Array.isArray(claims)) fail('malformed', 'claims must be an array of {key, value}');
  const norm = claims.map((cl, i) => {
    if (cl === null || typeof cl !== 'object') fail('malformed', `claim ${i} must be {key, value}`);
    return { key: toBytes(cl.key, `claim ${i} key`), value: valueOf(cl.value, `claim ${i} value`) };
  });
  await withWasm((w) =>
    w.verifyMultiProof(
      c.root,
      norm.map((x) => x.key),
      norm.map((x) => (x.value === null ? undefined : x.value)),
      p,
    ),
  );
  return { tid: c.tid, version: c.version, root: toHex(c.root), claims: norm };
}

/** `path(key)` (SPEC.md §2) as 32 bytes. */
export function keyPath(key) {
  return withWasm((w) => w.keyPath(toBytes(key, 'key')));
}

/** `value_hash(value)` (SPEC.md §2) as 32 bytes. */
export function valueHash(value) {
  return withWasm((w) => w.valueHash(toBytes(value, 'value')));
}
