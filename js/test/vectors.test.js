// Runs every case of every file in letus-verify/vectors through the package (SPEC.md §11).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import {
  DigestMonitor,
  FullVerifier,
  SnapshotVerifier,
  LetusVerifyError,
  decodeDigest,
  digestFromJson,
  encodeDigest,
  fromHex,
  historyLeaf,
  historyRoot,
  keyPath,
  parseJson,
  proofFromJson,
  proofToJson,
  toHex,
  valueHash,
  verifyConsistency,
  verifyInclusion,
  verifyMultiProof,
  verifyProof,
} from '../src/index.js';

const VDIR = new URL('../../letus-verify/vectors/', import.meta.url);
const files = readdirSync(VDIR).filter((f) => f.endsWith('.json')).sort();

/** Resolves to null on success, or the LetusVerifyError code. */
async function outcome(f) {
  try {
    await f();
    return null;
  } catch (e) {
    assert.ok(e instanceof LetusVerifyError, `expected a LetusVerifyError, got ${e && e.stack}`);
    assert.equal(typeof e.code, 'string');
    return e.code;
  }
}

function expectCase(c, code, label = '') {
  if (c.error !== undefined) assert.equal(code, c.error, `${label}expected error ${c.error}`);
  else {
    assert.equal(c.valid, true, 'case has neither valid:true nor error');
    assert.equal(code, null, `${label}expected valid`);
  }
}

function u64le(v) {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt(v), true);
  return b;
}
function u32le(v) {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, v, true);
  return b;
}
function cat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let i = 0;
  for (const p of parts) {
    out.set(p, i);
    i += p.length;
  }
  return out;
}
/** A SPEC.md §9.2 export of `pairs` in the given order. */
function exportStream(pairs) {
  const parts = [new TextEncoder().encode('LETUSEXP'), Uint8Array.of(1), u32le(0), u64le(0), new Uint8Array(32)];
  for (const [k, v] of pairs) parts.push(Uint8Array.of(1), u32le(k.length), u32le(v.length), k, v);
  parts.push(Uint8Array.of(0xff), u64le(pairs.length));
  return cat(parts);
}
function chunks(b, n) {
  const out = [];
  for (let i = 0; i < b.length; i += n) out.push(b.subarray(i, i + n));
  return out;
}
const claimsOf = (c) => c.claims.map((x) => ({ key: x.key, value: x.value ?? null }));

const runners = {
  async roots(c) {
    const pairs = c.pairs.map((p) => [fromHex(p.key), fromHex(p.value)]);
    const paths = [];
    for (const [n, [k, v]] of pairs.entries()) {
      paths.push(toHex(await keyPath(k)));
      assert.equal(paths[n], c.paths[n].toLowerCase(), `path of pair ${n}`);
      assert.equal(toHex(await valueHash(v)), c.value_hashes[n].toLowerCase(), `value_hash of pair ${n}`);
    }
    const order = pairs.map((p, i) => i).sort((a, b) => (paths[a] < paths[b] ? -1 : paths[a] > paths[b] ? 1 : 0));
    const sorted = order.map((i) => pairs[i]);
    // the root through the streaming full verifier (SPEC.md §9.1), whole and in 5-byte chunks
    const stream = exportStream(sorted);
    const r = await FullVerifier.verify(stream, c.root);
    assert.equal(r.records, pairs.length);
    assert.equal((await FullVerifier.verify(chunks(stream, 5), c.root)).records, pairs.length);
    // and any other root is rejected
    const wrong = fromHex(c.root);
    wrong[0] ^= 1;
    assert.equal(await outcome(() => FullVerifier.verify(stream, wrong)), 'root_mismatch');
    if (sorted.length >= 2) {
      const swapped = [sorted[1], sorted[0], ...sorted.slice(2)];
      assert.equal(await outcome(() => FullVerifier.verify(exportStream(swapped), c.root)), 'out_of_order');
      const dup = [sorted[0], sorted[0], ...sorted.slice(1)];
      assert.equal(await outcome(() => FullVerifier.verify(exportStream(dup), c.root)), 'duplicate_key');
    }
  },

  async proofs(c) {
    const commitment = { tid: 0, version: 1, root: c.root };
    const claims = claimsOf(c);
    // binary form, hex and bytes
    expectCase(c, await outcome(() => verifyMultiProof(commitment, claims, c.proof)), 'binary hex: ');
    expectCase(c, await outcome(() => verifyMultiProof(commitment, claims, fromHex(c.proof))), 'binary bytes: ');
    if (claims.length === 1) {
      let res;
      expectCase(c, await outcome(async () => (res = await verifyProof(commitment, claims[0].key, claims[0].value, c.proof))), 'verifyProof: ');
      if (res) assert.equal(res.present, claims[0].value !== null);
    }
    if (c.proof_json === undefined || c.proof_json === null) return;
    // the JSON form
    if (c.json_error !== undefined) {
      assert.equal(await outcome(() => verifyMultiProof(commitment, claims, c.proof_json)), c.json_error, 'json');
      assert.equal(await outcome(async () => proofFromJson(c.proof_json)), c.json_error, 'proofFromJson');
      return;
    }
    if (c.valid) {
      assert.deepEqual(proofFromJson(c.proof_json), fromHex(c.proof), 'JSON converts to the binary proof');
      if (c.json_reencodes !== false) assert.deepEqual(proofToJson(c.proof), c.proof_json, 'binary decodes to the JSON proof');
      else assert.deepEqual(proofFromJson(proofToJson(c.proof)), fromHex(c.proof));
    }
    expectCase(c, await outcome(() => verifyMultiProof(commitment, claims, c.proof_json)), 'json: ');
  },

  async history(c) {
    if (c.type === 'roots') {
      const leaves = [];
      for (const [n, e] of c.entries.entries()) {
        leaves.push(await historyLeaf(e.tid, e.version, e.root));
        assert.equal(toHex(await historyRoot(leaves)), c.roots[n].toLowerCase(), `MTH after ${n + 1} entries`);
      }
      return;
    }
    if (c.type === 'inclusion') {
      const trusted = { tid: c.entry.tid, history_len: c.tree_size, history_root: c.history_root };
      let index;
      expectCase(c, await outcome(async () => (index = await verifyInclusion(trusted, c.entry, c.proof))));
      if (c.valid) {
        // the same proof in its JSON form
        const b = fromHex(c.proof);
        const dv = new DataView(b.buffer);
        const hashes = chunks(b.subarray(19), 32).map(toHex);
        const json = { index: dv.getBigUint64(2, true), tree_size: dv.getBigUint64(10, true), hashes };
        assert.equal(index, json.index);
        assert.equal(await verifyInclusion(trusted, c.entry, json), index);
      }
      return;
    }
    if (c.type === 'consistency') {
      const older = { history_len: c.old_size, history_root: c.old_root };
      const newer = { history_len: c.new_size, history_root: c.new_root };
      expectCase(c, await outcome(() => verifyConsistency(older, newer, c.proof)));
      if (c.valid) {
        const b = fromHex(c.proof);
        const dv = new DataView(b.buffer);
        const json = { old_size: dv.getBigUint64(2, true), new_size: dv.getBigUint64(10, true), hashes: chunks(b.subarray(19), 32).map(toHex) };
        await verifyConsistency(older, newer, json);
      }
      return;
    }
    assert.fail(`unknown history case type ${c.type}`);
  },

  async digests(c) {
    if (c.type === 'encoding') {
      const want = digestFromJson(c.digest);
      const got = await decodeDigest(c.binary);
      assert.deepEqual(got, want);
      assert.equal(typeof got.version, 'bigint');
      assert.equal(typeof got.history_len, 'bigint');
      assert.equal(toHex(await encodeDigest(got)), c.binary.toLowerCase());
      assert.equal(toHex(await encodeDigest(c.digest)), c.binary.toLowerCase());
      return;
    }
    if (c.type === 'decode') {
      assert.equal(await outcome(() => decodeDigest(c.binary)), c.error);
      return;
    }
    if (c.type === 'json_decode') {
      assert.equal(await outcome(async () => digestFromJson(c.digest)), c.error);
      return;
    }
    if (c.type === 'checker') {
      const m = new DigestMonitor();
      for (const [n, step] of c.steps.entries()) {
        const r = step.source === null || step.source === undefined ? m.addCheckpoint(step.digest) : m.observe(step.source, step.digest);
        assert.equal(r.code, step.report, `step ${n}`);
        assert.equal(r.alarm, !['new', 'agreement'].includes(step.report));
      }
      return;
    }
    assert.fail(`unknown digest case type ${c.type}`);
  },

  async snapshots(c) {
    let sv;
    const opts = { tid: c.tid, version: BigInt(c.version), trustedRoot: c.trusted_root };
    if (c.type === 'manifest') {
      const code = await outcome(async () => {
        sv = await SnapshotVerifier.fromManifest(c.manifest, opts);
      });
      expectCase(c, code);
      if (c.valid) {
        assert.equal(sv.pairs, BigInt(c.pairs));
        let sum = 0n;
        for (let i = 0; i < sv.entries; i++) sum += sv.entry(i).count;
        assert.equal(sum, BigInt(c.pairs));
        assert.equal(sv.entry(sv.entries), undefined);
        sv.free();
      }
      return;
    }
    if (c.type === 'chunk') {
      sv = await SnapshotVerifier.fromManifest(c.manifest, opts);
      let pairs;
      const code = await outcome(async () => {
        pairs = sv.verifyChunk(c.index, c.chunk);
      });
      sv.free();
      expectCase(c, code);
      if (c.valid) assert.equal(pairs.length, c.records);
      return;
    }
    assert.fail(`unknown snapshot case type ${c.type}`);
  },

  async exports(c) {
    const stream = fromHex(c.stream);
    for (const size of [stream.length || 1, 7, 1]) {
      let res;
      let progress = 0;
      const code = await outcome(async () => {
        res = await FullVerifier.verify(chunks(stream, size), c.trusted_root, { onProgress: () => progress++ });
      });
      expectCase(c, code, `chunks of ${size}: `);
      if (c.valid) {
        assert.equal(res.records, c.records);
        assert.equal(res.bytes, stream.length);
        assert.equal(typeof res.header.tid, 'number'); // the claimed (untrusted) header
        assert.equal(progress, chunks(stream, size).length);
      }
    }
  },
};

for (const f of files) {
  const doc = parseJson(readFileSync(new URL(f, VDIR), 'utf8'));
  describe(`vectors/${f}`, () => {
    it('is a letus-verify/1 vector file of a known kind', () => {
      assert.equal(doc.spec, 'letus-verify/1');
      assert.ok(runners[doc.kind], `kind ${doc.kind}`);
      assert.ok(doc.cases.length > 0);
    });
    for (const c of doc.cases) {
      it(`${c.type ? c.type + ': ' : ''}${c.name}`, () => runners[doc.kind](c));
    }
  });
}
