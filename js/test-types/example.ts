// A small program written against the letus-verify package as a TypeScript user would write it: read a balance
// with its proof, watch digests for forks and rollbacks, check a history extension, verify a state export.
// `tsc -p test-types` type-checks it against src/index.d.ts (scripts/test.sh); the @ts-expect-error lines pin
// mistakes the declarations must reject.
import {
  DigestMonitor,
  FullVerifier,
  SnapshotVerifier,
  LetusClient,
  LetusNodeError,
  LetusVerifyError,
  fromHex,
  init,
  proofFromJson,
  proofToJson,
  toHex,
  verifyMultiProof,
  verifyProof,
  verifySnapshotInWorker,
  type Digest,
  type ErrorCode,
  type ProofJson,
  type Report,
} from 'letus-verify';

const textKey = (s: string): Uint8Array => new TextEncoder().encode(s);

export async function balance(node: string, account: number, trustedRoot?: string): Promise<bigint | null> {
  await init();
  const monitor = new DigestMonitor();
  const client = new LetusClient(node, { monitor, source: node });
  const key = textKey(`acct/${String(account).padStart(8, '0')}`);
  try {
    const r = await client.getVerified(0, key, trustedRoot === undefined ? {} : { trustedRoot });
    const version: bigint = r.version;
    const d: Digest = r.digest;
    if (!r.trusted) console.warn(`checked against the node's own digest at ${version} (root ${d.root})`);
    if (!r.present || r.value === null) return null;
    return new DataView(r.value.buffer, r.value.byteOffset, r.value.byteLength).getBigUint64(0, true);
  } catch (e) {
    if (e instanceof LetusNodeError) throw new Error(`node error ${e.status} ${e.code}`);
    if (e instanceof LetusVerifyError) {
      const code: ErrorCode | string = e.code;
      throw new Error(`the node's answer does not verify: ${code}`);
    }
    throw e;
  }
}

export async function many(node: string, keys: string[], version: bigint): Promise<Map<string, string | null>> {
  const client = new LetusClient(node);
  const r = await client.getVerifiedMany(0, keys.map(textKey), { version });
  const out = new Map<string, string | null>();
  for (const { key, value } of r.entries) out.set(new TextDecoder().decode(key), value === null ? null : toHex(value));
  return out;
}

export async function watch(nodes: string[]): Promise<Report[]> {
  const monitor = new DigestMonitor();
  const reports: Report[] = [];
  for (const url of nodes) {
    const client = new LetusClient(url);
    for (const d of await client.digests()) {
      const r = monitor.observe(url, d);
      if (r.alarm) reports.push(r);
    }
  }
  const first = nodes[0];
  if (first !== undefined) {
    const newest = monitor.newest(first, 0);
    if (newest) await new LetusClient(first).consistency(newest);
  }
  return reports;
}

export async function offline(root: string, proofHex: string, key: string, value: string | null, exportBytes: Uint8Array) {
  const commitment = { tid: 0, version: 7n, root };
  const read = await verifyProof(commitment, key, value, proofHex);
  const present: boolean = read.present;
  const json: ProofJson = proofToJson(proofHex);
  const again: Uint8Array = proofFromJson(json);
  const multi = await verifyMultiProof(commitment, [{ key, value }, { key: 'ff' }], again);
  const full = await FullVerifier.verify(exportBytes, fromHex(root), { onProgress: ({ records }) => void records });
  return { present, claims: multi.claims.length, records: full.records, header: full.header?.version };
}

// A snapshot: the manifest against a trusted root, then each chunk against its entry.
export async function snapshot(manifest: Uint8Array, chunks: Uint8Array[], root: string) {
  const sv = await SnapshotVerifier.fromManifest(manifest, { tid: 0, version: 12n, trustedRoot: root });
  let pairs = 0;
  for (let i = 0; i < sv.entries; i++) {
    const e = sv.entry(i);
    const count: bigint | undefined = e?.count;
    pairs += sv.verifyChunk(i, chunks[i] ?? new Uint8Array()).length;
    void count;
  }
  const total: bigint = sv.pairs;
  sv.free();
  // @ts-expect-error the trusted root is required
  await SnapshotVerifier.fromManifest(manifest, { tid: 0, version: 12n });
  return [pairs, total];
}

// Mistakes the declarations must reject.
export async function mistakes(client: LetusClient) {
  // @ts-expect-error a trie id is a number
  await client.getVerified('0', 'aa');
  // @ts-expect-error a key is bytes or hex, not a number
  await client.getVerified(0, 42);
  // @ts-expect-error the option is trustedRoot
  await client.getVerified(0, 'aa', { root: 'ab'.repeat(32) });
  const r = await client.getVerified(0, 'aa');
  // @ts-expect-error versions are bigint
  const v: number = r.version;
  // @ts-expect-error a proof's JSON form has format 1
  const bad: ProofJson = { format: 2, records: [] };
  // @ts-expect-error a claim needs a key
  await verifyMultiProof({ root: 'ab'.repeat(32) }, [{ value: 'aa' }], '00');
  return [v, bad];
}

/** Verifies a node's snapshot off the page's thread, showing progress. */
export async function snapshotInWorker(node: string, version: bigint, trustedRoot: string): Promise<number> {
  const controller = new AbortController();
  const r = await verifySnapshotInWorker(node, {
    tid: 0,
    version,
    trustedRoot,
    signal: controller.signal,
    onProgress: (p) => console.log(`${p.done}/${p.entries} chunks, ${p.pairs} pairs`),
  });
  // @ts-expect-error the version is required
  await verifySnapshotInWorker(node, { trustedRoot });
  return r.pairs;
}
