// Hand-written declarations of letus-verify, type-checked with test-types/example.ts by scripts/test.sh.

/** Bytes: a Uint8Array (Node Buffer included), an ArrayBuffer, or a hex string (no 0x). */
export type BytesLike = Uint8Array | ArrayBuffer | ArrayBufferView | string;
/** A u64: bigint, a non-negative safe integer, or a decimal string. */
export type U64Like = bigint | number | string;

/** A SPEC.md §10 error code, or a client code (`answer_mismatch`, `finished`). */
export type ErrorCode =
  | 'truncated' | 'unsupported_format' | 'wrong_type' | 'unknown_tag' | 'trailing_data' | 'malformed'
  | 'too_large' | 'bad_magic' | 'count_mismatch' | 'non_canonical' | 'too_many_keys' | 'duplicate_key'
  | 'proof_exhausted' | 'unused_records' | 'expected_present' | 'expected_absent' | 'other_leaf_mismatch'
  | 'depth_exceeded' | 'root_mismatch' | 'out_of_order' | 'history_size_mismatch'
  | 'history_index_out_of_range' | 'history_proof_length' | 'history_root_mismatch'
  | 'wrong_snapshot' | 'outside_chunk' | 'chunk_mismatch'
  | 'answer_mismatch' | 'finished' | 'fork' | 'rollback' | 'checkpoint_conflict' | 'timeout'
  | 'aborted' | 'unsupported' | 'worker_error' | 'network';

export class LetusVerifyError extends Error {
  constructor(code: string, message?: string, options?: { cause?: unknown });
  readonly name: 'LetusVerifyError';
  readonly code: ErrorCode | string;
}

/** An error answer of the node: HTTP status and the node's error code (letus-node/API.md). */
export class LetusNodeError extends Error {
  readonly name: 'LetusNodeError';
  readonly status: number;
  readonly code: string;
}

/** Loads the WebAssembly module (once). Called by every function; `source` overrides where it comes from. */
export function init(source?: URL | string | Response | BufferSource | WebAssembly.Module): Promise<unknown>;

// ------------------------------------------------------------------ state proofs (SPEC.md §5)

export interface ProofRecordJson {
  t: 'empty' | 'leaf' | 'other_leaf' | 'branch';
  mask?: number;
  hashes?: string[];
  path?: string;
  value_hash?: string;
}
/** The SPEC.md §5.5 JSON form. */
export interface ProofJson {
  format: 1;
  records: ProofRecordJson[];
}
export type ProofLike = BytesLike | ProofJson;

export interface Commitment {
  tid?: number;
  version?: U64Like;
  root: BytesLike;
}

export interface VerifiedProof {
  tid: number | undefined;
  version: bigint | undefined;
  root: string;
  key: Uint8Array;
  value: Uint8Array | null;
  present: boolean;
}

export interface Claim {
  key: BytesLike;
  /** null or undefined: claimed absent. */
  value?: BytesLike | null;
}

export function verifyProof(commitment: Commitment, key: BytesLike, value: BytesLike | null, proof: ProofLike): Promise<VerifiedProof>;
export function verifyMultiProof(
  commitment: Commitment,
  claims: Claim[],
  proof: ProofLike,
): Promise<{ tid: number | undefined; version: bigint | undefined; root: string; claims: { key: Uint8Array; value: Uint8Array | null }[] }>;

export const MAX_PROOF_BYTES: number;
/** JSON form to binary form, with the §5.5 error codes. */
export function proofFromJson(json: ProofJson): Uint8Array;
/** Binary form to JSON form (lowercase hex), with the §5.4 error codes. */
export function proofToJson(proof: BytesLike): ProofJson;

export function keyPath(key: BytesLike): Promise<Uint8Array>;
export function valueHash(value: BytesLike): Promise<Uint8Array>;

// ------------------------------------------------------------------ digests and history (SPEC.md §7, §8)

/** A digest as this package returns it: versions as bigint, hashes as lowercase hex. */
export interface Digest {
  tid: number;
  version: bigint;
  root: string;
  history_len: bigint;
  history_root: string;
}
/** A digest as accepted: the node's JSON form or a Digest. */
export interface DigestLike {
  tid: number | U64Like;
  version: U64Like;
  root: BytesLike;
  history_len: U64Like;
  history_root: BytesLike;
}

export function digestFromJson(d: DigestLike): Digest;
export function digestToJson(d: DigestLike): { tid: number; version: number | string; root: string; history_len: number | string; history_root: string };
export function decodeDigest(binary: BytesLike): Promise<Digest>;
export function encodeDigest(d: DigestLike): Promise<Uint8Array>;

export interface InclusionProofJson { index: U64Like; tree_size: U64Like; hashes: string[] }
export interface ConsistencyProofJson { old_size: U64Like; new_size: U64Like; hashes: string[] }

/** Resolves to the entry's index in the trusted history. */
export function verifyInclusion(
  trusted: { tid?: number; history_len: U64Like; history_root: BytesLike },
  entry: { tid?: number; version: U64Like; root: BytesLike },
  proof: BytesLike | InclusionProofJson,
): Promise<bigint>;
export function verifyConsistency(
  older: { tid?: number; history_len: U64Like; history_root: BytesLike },
  newer: { tid?: number; history_len: U64Like; history_root: BytesLike },
  proof: BytesLike | ConsistencyProofJson,
): Promise<void>;

export function historyLeaf(tid: number, version: U64Like, root: BytesLike): Promise<Uint8Array>;
export function historyRoot(leaves: BytesLike[]): Promise<Uint8Array>;

export type ReportCode = 'new' | 'agreement' | 'fork' | 'checkpoint_conflict' | 'rollback';
export interface Report {
  code: ReportCode;
  /** fork, checkpoint_conflict or rollback */
  alarm: boolean;
  /** The observing source, null for a checkpoint. */
  source: string | null;
  digest: Digest;
  /** fork / checkpoint_conflict: the earlier digest it conflicts with. */
  conflictsWith?: { digest: Digest; source: string | null };
  /** checkpoint_conflict: the digest that is not the checkpoint's. */
  wrong?: Digest;
  /** rollback: the newest digest the source reported before. */
  previous?: Digest;
}

/** The digest checker of SPEC.md §7.1. */
export class DigestMonitor {
  /** `past`: a digest of one of the source's past versions (a history entry): no rollback, not its newest. */
  observe(source: string, digest: DigestLike, options?: { past?: boolean }): Report;
  addCheckpoint(digest: DigestLike): Report;
  newest(source: string, tid: number): Digest | undefined;
  readonly known: { digest: Digest; source: string | null }[];
  checkConsistency(older: DigestLike, newer: DigestLike, proof: BytesLike | ConsistencyProofJson): Promise<true>;
}

// ------------------------------------------------------------------ full verification (SPEC.md §9)

export interface ExportHeader { tid: number; version: bigint; root: string }
export interface FullResult { records: number; bytes: number; header: ExportHeader | null }

export class FullVerifier {
  constructor(options?: { onProgress?: (p: { records: number; bytes: number }) => void });
  readonly records: number;
  readonly bytes: number;
  /** What the exporter claims (untrusted), once the header arrived. */
  readonly header: ExportHeader | null;
  feed(chunk: BytesLike): Promise<void>;
  finish(trustedRoot: BytesLike): Promise<FullResult>;
  static verify(
    stream: BytesLike | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
    trustedRoot: BytesLike,
    options?: { onProgress?: (p: { records: number; bytes: number }) => void },
  ): Promise<FullResult>;
}

// ------------------------------------------------------------------ snapshots in chunks (SPEC.md §12)

export interface SnapshotEntry { depth: number; prefix: string; count: bigint; hash: string }

export class SnapshotVerifier {
  /** Verifies a manifest against a trusted root; rejects with `code` (`root_mismatch`, `wrong_snapshot`, ...). */
  static fromManifest(
    manifest: BytesLike,
    options: { tid: number; version: bigint | number | string; trustedRoot: BytesLike },
  ): Promise<SnapshotVerifier>;
  readonly entries: number;
  readonly pairs: bigint;
  entry(index: number): SnapshotEntry | undefined;
  /** Verifies one chunk as entry `index`; throws a LetusVerifyError (`root_mismatch`, `outside_chunk`, ...). */
  verifyChunk(index: number, chunk: BytesLike): { key: Uint8Array; value: Uint8Array }[];
  free(): void;
}

/** SPEC.md §6: the largest encoded snapshot chunk a verifier accepts (64 MiB). */
export const MAX_CHUNK_BYTES: number;

export interface SnapshotProgress {
  /** Chunks in the manifest. */
  entries: number;
  /** Chunks verified so far. */
  done: number;
  /** Pairs verified so far. */
  pairs: number;
  /** Bytes fetched so far (manifest and chunks). */
  bytes: number;
}

/**
 * Verifies the snapshot of trie `tid` at `version` served by the node at `node` in a module Web Worker (the page's
 * thread stays free): the manifest against `trustedRoot`, then every chunk. Browsers only. Rejects with a
 * LetusVerifyError (`root_mismatch`, `too_large`, `aborted`, `unsupported`, `worker_error`, ...) or a
 * LetusNodeError.
 */
export function verifySnapshotInWorker(
  node: string | URL,
  options: {
    tid?: number;
    version: U64Like;
    trustedRoot: BytesLike;
    maxPairs?: U64Like;
    onProgress?: (p: SnapshotProgress) => void;
    signal?: AbortSignal;
    workerUrl?: string | URL;
  },
): Promise<{ entries: number; pairs: number; total: string; bytes: number; inWorker: boolean }>;

// ------------------------------------------------------------------ node client (letus-node/API.md)

export interface ClientOptions {
  fetch?: typeof fetch;
  /** Every digest the node returns is observed under `source` (default: the base URL); alarms throw. */
  monitor?: DigestMonitor;
  source?: string;
  /** The most bytes of one answer read (default 64 MiB); a longer one is refused with `too_large`, unread. */
  maxAnswerBytes?: number;
  /** How long to wait for one whole answer, in milliseconds (default 60,000); then `timeout`. */
  timeoutMs?: number;
}

export class LetusClient {
  constructor(baseUrl: string, options?: ClientOptions);
  getVerified(
    tid: number,
    key: BytesLike,
    options?: { version?: U64Like; trustedRoot?: BytesLike },
  ): Promise<{ tid: number; version: bigint; key: Uint8Array; value: Uint8Array | null; present: boolean; digest: Digest; trusted: boolean }>;
  getVerifiedMany(
    tid: number,
    keys: BytesLike[],
    options?: { version?: U64Like; trustedRoot?: BytesLike },
  ): Promise<{ tid: number; version: bigint; entries: { key: Uint8Array; value: Uint8Array | null }[]; digest: Digest; trusted: boolean }>;
  /**
   * A key's past values, newest first, each proved at its version; with `trustedDigest`, the entries at or below
   * its version are also proved to be in its history (`trusted: true`). `next` is set when older entries exist:
   * pass it as `before`. A node can leave entries out (each entry is proved, the list is not).
   */
  history(
    tid: number,
    key: BytesLike,
    options?: { limit?: U64Like; before?: U64Like; trustedDigest?: DigestLike },
  ): Promise<{ version: bigint; value: Uint8Array | null; digest: Digest; trusted: boolean }[] & { next?: bigint }>;
  digests(version?: U64Like): Promise<Digest[]>;
  /**
   * Proves that `older`'s history is a prefix of the node's history at `toVersion` (default latest), and that the
   * newer digest's own version and root are the last entry of that history (an inclusion proof of itself).
   */
  consistency(older: DigestLike, toVersion?: U64Like): Promise<Digest>;
}

export function fromHex(hex: string, what?: string): Uint8Array;
export function toHex(bytes: Uint8Array): string;
/**
 * JSON.parse keeping integers of 16+ digits exact (as decimal strings). `strict`: numbers with a sign, fraction or
 * exponent are kept as their text too (so that toU64-style checks reject them), as LetusClient reads answers.
 */
export function parseJson(text: string, options?: { strict?: boolean }): any;
