// letus-verify: verify what a letus node says, in Node.js and browsers (SPEC.md of letus-verify, format 1).
export { init } from './wasm.js';
export { LetusVerifyError, LetusNodeError } from './errors.js';
export { verifyProof, verifyMultiProof, keyPath, valueHash } from './verify.js';
export { proofFromJson, proofToJson, MAX_PROOF_BYTES } from './proof.js';
export {
  DigestMonitor,
  digestFromJson,
  digestToJson,
  decodeDigest,
  encodeDigest,
  verifyInclusion,
  verifyConsistency,
} from './digest.js';
export { historyLeaf, historyRoot } from './history.js';
export { FullVerifier } from './full.js';
export { SnapshotVerifier, verifySnapshotInWorker, MAX_CHUNK_BYTES } from './snapshot.js';
export { LetusClient } from './client.js';
export { fromHex, toHex } from './bytes.js';
export { parseJson } from './json.js';
