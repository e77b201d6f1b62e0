import { fail } from './errors.js';
import { fromHex, toBytes, toHex, toU64, concat } from './bytes.js';

const HASH_RE = /^[0-9a-fA-F]{64}$/;
/** SPEC.md §6 max_proof_bytes. */
export const MAX_PROOF_BYTES = 4194304;

function popcount(m) {
  let n = 0;
  for (; m; m >>= 1) n += m & 1;
  return n;
}

function jsonHash(s, what) {
  if (typeof s !== 'string' || !HASH_RE.test(s)) fail('malformed', `${what} is missing or not 64 hex digits`);
  return fromHex(s);
}

function isEmptyHash(h) {
  return h.every((b) => b === 0);
}

function isObject(x) {
  return x !== null && typeof x === 'object' && !Array.isArray(x);
}

/**
 * Converts the SPEC.md §5.5 JSON form of a state proof to its binary form. Checks, in order: `format`
 * (`unsupported_format`), then each record: `t` (`unknown_tag`), fields (`malformed`), and for a branch its
 * mask, the hex of each hash, the hash count (`malformed`) and EMPTY hashes (`non_canonical`).
 */
export function proofFromJson(j) {
  if (!isObject(j)) fail('malformed', 'a JSON proof must be an object');
  if (typeof j.format !== 'number' || !Number.isInteger(j.format)) fail('malformed', 'format is missing or not an integer');
  if (j.format !== 1) fail('unsupported_format', `proof format ${j.format} is not 1`);
  if (!Array.isArray(j.records)) fail('malformed', 'records is missing or not an array');
  const parts = [Uint8Array.of(0x01, 0x01)];
  j.records.forEach((r, n) => {
    if (!isObject(r) || typeof r.t !== 'string') fail('malformed', `record ${n} has no string field t`);
    switch (r.t) {
      case 'empty':
        parts.push(Uint8Array.of(0x00));
        break;
      case 'leaf':
        parts.push(Uint8Array.of(0x01));
        break;
      case 'other_leaf':
        parts.push(Uint8Array.of(0x02), jsonHash(r.path, `record ${n} path`), jsonHash(r.value_hash, `record ${n} value_hash`));
        break;
      case 'branch': {
        const m = r.mask;
        if (typeof m !== 'number' || !Number.isInteger(m) || m < 0 || m > 255) fail('malformed', `record ${n} mask is not an integer in 0..=255`);
        if (!Array.isArray(r.hashes)) fail('malformed', `record ${n} hashes is missing or not an array`);
        const hashes = r.hashes.map((h, k) => jsonHash(h, `record ${n} hash ${k}`));
        if (hashes.length !== popcount(m)) fail('malformed', `record ${n} has ${hashes.length} hashes for mask ${m}`);
        if (hashes.some(isEmptyHash)) fail('non_canonical', `record ${n} writes an EMPTY hash`);
        parts.push(Uint8Array.of(0x03, m), ...hashes);
        break;
      }
      default:
        fail('unknown_tag', `record ${n} has unknown type ${JSON.stringify(r.t)}`);
    }
  });
  return concat(parts);
}

/** Decodes the binary form (SPEC.md §5.4) into the JSON form (lowercase hex), with the §5.4 error codes. */
export function proofToJson(proof) {
  const b = toBytes(proof, 'proof');
  if (b.length > MAX_PROOF_BYTES) fail('too_large', 'proof above max_proof_bytes');
  if (b.length < 1) fail('truncated', 'no format byte');
  if (b[0] !== 0x01) fail('unsupported_format', `format ${b[0]} is not 1`);
  if (b.length < 2) fail('truncated', 'no type byte');
  if (b[1] !== 0x01) fail('wrong_type', `type ${b[1]} is not a state proof`);
  const records = [];
  let i = 2;
  const need = (n) => {
    if (b.length - i < n) fail('truncated', 'proof ends inside a record');
  };
  while (i < b.length) {
    const tag = b[i++];
    if (tag === 0x00) records.push({ t: 'empty' });
    else if (tag === 0x01) records.push({ t: 'leaf' });
    else if (tag === 0x02) {
      need(64);
      records.push({ t: 'other_leaf', path: toHex(b.subarray(i, i + 32)), value_hash: toHex(b.subarray(i + 32, i + 64)) });
      i += 64;
    } else if (tag === 0x03) {
      need(1);
      const mask = b[i++];
      const k = popcount(mask);
      need(32 * k);
      const hashes = [];
      for (let h = 0; h < k; h++) {
        const x = b.subarray(i, i + 32);
        hashes.push(x);
        i += 32;
      }
      if (hashes.some(isEmptyHash)) fail('non_canonical', 'a branch writes an EMPTY hash');
      records.push({ t: 'branch', mask, hashes: hashes.map(toHex) });
    } else fail('unknown_tag', `unknown record tag ${tag}`);
  }
  return { format: 1, records };
}

/** A proof given as bytes, hex or the JSON form, as bytes. */
export function proofBytes(proof) {
  if (isJsonForm(proof)) return proofFromJson(proof);
  return toBytes(proof, 'proof');
}

// ------------------------------------------------------------------ history proofs (SPEC.md §8.2, §8.3)

function u64le(v) {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, v, true);
  return out;
}

function historyJsonToBytes(j, type, a, b) {
  if (!isObject(j)) fail('malformed', 'a JSON history proof must be an object');
  const x = toU64(j[a], a);
  const y = toU64(j[b], b);
  if (!Array.isArray(j.hashes)) fail('malformed', 'hashes is missing or not an array');
  if (j.hashes.length > 128) fail('too_large', 'a history proof has at most 128 hashes');
  const hashes = j.hashes.map((h, k) => jsonHash(h, `hash ${k}`));
  return concat([Uint8Array.of(0x01, type), u64le(x), u64le(y), Uint8Array.of(hashes.length), ...hashes]);
}

function isJsonForm(p) {
  return isObject(p) && !(p instanceof ArrayBuffer) && !ArrayBuffer.isView(p);
}

/** A history inclusion proof given as bytes, hex or JSON `{index, tree_size, hashes}`, as bytes. */
export function inclusionProofBytes(proof) {
  if (isJsonForm(proof)) return historyJsonToBytes(proof, 0x03, 'index', 'tree_size');
  return toBytes(proof, 'inclusion proof');
}

/** A history consistency proof given as bytes, hex or JSON `{old_size, new_size, hashes}`, as bytes. */
export function consistencyProofBytes(proof) {
  if (isJsonForm(proof)) return historyJsonToBytes(proof, 0x04, 'old_size', 'new_size');
  return toBytes(proof, 'consistency proof');
}
