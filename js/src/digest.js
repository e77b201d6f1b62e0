import { fail } from './errors.js';
import { fromHex, hashHex, toBytes, toHex, toU32, toU64 } from './bytes.js';
import { consistencyProofBytes, inclusionProofBytes } from './proof.js';
import { withWasm } from './wasm.js';


/**
 * A digest in this package's form: `{tid: number, version: bigint, root: hex, history_len: bigint,
 * history_root: hex}` (lowercase hex). `digestFromJson` accepts the node's JSON form (versions as numbers,
 * bigints or decimal strings; hashes as hex or bytes) and rejects `history_len == 0` with `malformed`.
 */
export function digestFromJson(d) {
  if (d === null || typeof d !== 'object') fail('malformed', 'a digest must be an object');
  const out = {
    tid: toU32(d.tid, 'tid'),
    version: toU64(d.version, 'version'),
    root: hashHex(d.root, 'root'),
    history_len: toU64(d.history_len, 'history_len'),
    history_root: hashHex(d.history_root, 'history_root'),
  };
  if (out.history_len === 0n) fail('malformed', 'digest history_len is 0');
  return out;
}

/** The JSON form (versions as numbers when they are safe integers, else decimal strings). */
export function digestToJson(d) {
  const x = digestFromJson(d);
  const num = (v) => (v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString());
  return { tid: x.tid, version: num(x.version), root: x.root, history_len: num(x.history_len), history_root: x.history_root };
}

/** Decodes the 86-byte binary form (SPEC.md §7), given as bytes or hex. */
export async function decodeDigest(bytes) {
  const b = toBytes(bytes, 'digest');
  return withWasm((w) => {
    const d = w.decodeDigest(b);
    return { tid: d.tid, version: d.version, root: toHex(d.root), history_len: d.history_len, history_root: toHex(d.history_root) };
  });
}

/** Encodes a digest in the 86-byte binary form. */
export async function encodeDigest(digest) {
  const d = digestFromJson(digest);
  return withWasm((w) => w.encodeDigest(d.tid, d.version, fromHex(d.root), d.history_len, fromHex(d.history_root)));
}

export function digestsEqual(a, b) {
  return a.tid === b.tid && a.version === b.version && a.root === b.root && a.history_len === b.history_len && a.history_root === b.history_root;
}

function conflicts(k, d) {
  return k.tid === d.tid && (k.version === d.version || k.history_len === d.history_len) && !digestsEqual(k, d);
}

/**
 * Checks that `entry` (`{version, root}`, optionally `tid`; default the trusted digest's tid) is in the history
 * of `trusted` (a digest, or `{tid, history_len, history_root}`), with a §8.2 inclusion proof given as bytes,
 * hex or JSON `{index, tree_size, hashes}`. Resolves to the entry's index.
 */
export async function verifyInclusion(trusted, entry, proof) {
  const tid = toU32(entry.tid === undefined ? trusted.tid : entry.tid, 'tid');
  const treeSize = toU64(trusted.history_len, 'history_len');
  const historyRoot = fromHex(hashHex(trusted.history_root, 'history_root'));
  const version = toU64(entry.version, 'version');
  const root = fromHex(hashHex(entry.root, 'root'));
  const p = inclusionProofBytes(proof);
  return withWasm((w) => w.verifyHistoryInclusion(historyRoot, treeSize, tid, version, root, p));
}

/**
 * Checks that the history of `older` is a prefix of the history of `newer` (SPEC.md §8.3); each is a digest or
 * `{history_len, history_root}`. The proof is bytes, hex or JSON `{old_size, new_size, hashes}`.
 */
export async function verifyConsistency(older, newer, proof) {
  if (older.tid !== undefined && newer.tid !== undefined && toU32(older.tid) !== toU32(newer.tid)) {
    fail('malformed', 'the two digests are of different tries');
  }
  const oldSize = toU64(older.history_len, 'history_len');
  const newSize = toU64(newer.history_len, 'history_len');
  const oldRoot = fromHex(hashHex(older.history_root, 'history_root'));
  const newRoot = fromHex(hashHex(newer.history_root, 'history_root'));
  const p = consistencyProofBytes(proof);
  await withWasm((w) => w.verifyHistoryConsistency(oldSize, oldRoot, newSize, newRoot, p));
}

const CHECKPOINT = null;

/**
 * The digest checker of SPEC.md §7.1: compares digests from named sources and trusted checkpoints and reports
 * `new`, `agreement`, `fork`, `checkpoint_conflict` or `rollback` for each observation.
 */
export class DigestMonitor {
  #known = []; // [{digest, origin, seq}] in arrival order; origin is a source name or null (checkpoint)
  #newest = new Map(); // source -> Map(tid -> digest)
  // The same entries by (tid, version) and by (tid, history_len): a digest can only conflict with, or equal,
  // digests of its trie at its version or with its history length, so an observation looks at those alone.
  #byVersion = new Map();
  #byLen = new Map();

  /**
   * Records a digest reported by `source` (a string). With `{past: true}` the digest is one of the source's past
   * versions (a history entry's), not a claim about its newest state: it is checked for forks and checkpoint
   * conflicts like any other, but it cannot be a rollback and does not become the source's newest.
   */
  observe(source, digest, { past = false } = {}) {
    if (typeof source !== 'string') throw new TypeError('source must be a string; use addCheckpoint for trusted digests');
    return this.#observe(source, digestFromJson(digest), past);
  }

  /** Adds a trusted checkpoint. */
  addCheckpoint(digest) {
    return this.#observe(CHECKPOINT, digestFromJson(digest));
  }

  /** The newest digest `source` reported for `tid`, or undefined. */
  newest(source, tid) {
    const m = this.#newest.get(source);
    return m ? m.get(toU32(tid)) : undefined;
  }

  /** Everything observed so far: `[{digest, source}]` (source null for checkpoints). */
  get known() {
    return this.#known.map(({ digest, origin }) => ({ digest, source: origin }));
  }

  /**
   * Verifies a history consistency proof between two digests of one trie (SPEC.md §8.3): `older`'s history is a
   * prefix of `newer`'s. Rejects with a LetusVerifyError (`history_*` codes) when it is not shown.
   */
  async checkConsistency(older, newer, proof) {
    const a = digestFromJson(older);
    const b = digestFromJson(newer);
    await verifyConsistency(a, b, proof);
    return true;
  }

  #observe(origin, d, past = false) {
    const sameVersion = this.#byVersion.get(`${d.tid}:${d.version}`) || [];
    const sameLen = this.#byLen.get(`${d.tid}:${d.history_len}`) || [];
    const near = [...new Set([...sameVersion, ...sameLen])].sort((a, b) => a.seq - b.seq);
    const C = near.filter((k) => conflicts(k.digest, d));
    let report;
    const cp = C.find((k) => k.origin === CHECKPOINT);
    if (C.length > 0 && (origin === CHECKPOINT || cp)) {
      const k = cp || C[0];
      // the side that is not the checkpoint is wrong
      report = { code: 'checkpoint_conflict', wrong: origin === CHECKPOINT ? k.digest : d, conflictsWith: { digest: k.digest, source: k.origin } };
    } else if (C.length > 0) {
      report = { code: 'fork', conflictsWith: { digest: C[0].digest, source: C[0].origin } };
    } else {
      const p = origin === CHECKPOINT || past ? undefined : this.newest(origin, d.tid);
      if (p && (d.version < p.version || d.history_len < p.history_len)) {
        report = { code: 'rollback', previous: p };
      } else if (sameVersion.some((k) => digestsEqual(k.digest, d))) {
        report = { code: 'agreement' };
      } else {
        report = { code: 'new' };
      }
    }
    if (!sameVersion.some((k) => k.origin === origin && digestsEqual(k.digest, d))) {
      const entry = { digest: d, origin, seq: this.#known.length };
      this.#known.push(entry);
      for (const [map, key] of [[this.#byVersion, `${d.tid}:${d.version}`], [this.#byLen, `${d.tid}:${d.history_len}`]]) {
        const list = map.get(key);
        if (list) list.push(entry);
        else map.set(key, [entry]);
      }
    }
    if (origin !== CHECKPOINT && !past) {
      let m = this.#newest.get(origin);
      if (!m) this.#newest.set(origin, (m = new Map()));
      const p = m.get(d.tid);
      if (!p || d.version >= p.version) m.set(d.tid, d);
    }
    return { ...report, alarm: report.code !== 'new' && report.code !== 'agreement', source: origin, digest: d };
  }
}
