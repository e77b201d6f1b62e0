// A module Web Worker that verifies a node's snapshot of one trie at one version (SPEC.md §12) off the page's
// thread: it fetches the manifest and every chunk, verifies each against the trusted root as it arrives, and posts
// its progress. Started by `verifySnapshotInWorker` (snapshot.js); not meant to be imported.
import { SnapshotVerifier, MAX_CHUNK_BYTES } from './snapshot.js';
import { errorOf, readCapped } from './http.js';

/** How long one request may take, body included (a stalled node fails the verification with `timeout`). */
const REQUEST_MS = 60_000;
/** The most bytes of an error answer read. */
const MAX_ERROR_BYTES = 64 * 1024;

/** The body of `url` as bytes, at most `max` of them, within REQUEST_MS; a node's error answer becomes its code. */
async function fetchBytes(url, max) {
  const signal = AbortSignal.timeout(REQUEST_MS);
  try {
    const res = await fetch(url, { signal });
    if (!res.ok) {
      const text = new TextDecoder().decode(await readCapped(res, MAX_ERROR_BYTES, signal).catch(() => new Uint8Array()));
      const { code, message } = errorOf(text);
      throw Object.assign(new Error(message.slice(0, 500)), { code, status: res.status });
    }
    return await readCapped(res, max, signal);
  } catch (e) {
    if (signal.aborted) throw Object.assign(new Error(`${url}: no whole answer within ${REQUEST_MS} ms`), { code: 'timeout' });
    throw e;
  }
}

self.onmessage = async (ev) => {
  const { node, tid, version, trustedRoot, maxPairs } = ev.data || {};
  let sv;
  try {
    const base = `${node}/v1/tries/${tid}`;
    const q = maxPairs === undefined ? '' : `&max_pairs=${maxPairs}`;
    const manifest = await fetchBytes(`${base}/snapshot?version=${version}${q}`, MAX_CHUNK_BYTES);
    sv = await SnapshotVerifier.fromManifest(manifest, { tid, version: BigInt(version), trustedRoot });
    const entries = sv.entries;
    let pairs = 0;
    let bytes = manifest.length;
    self.postMessage({ type: 'progress', entries, done: 0, pairs, bytes });
    // Up to AHEAD chunks are fetched while one is verified (so at most AHEAD + 1 are held, each at most
    // MAX_CHUNK_BYTES); they are verified, and reported, in order.
    const AHEAD = 3;
    const fetchChunk = (i) => {
      const e = sv.entry(i);
      const p = fetchBytes(`${base}/snapshot/chunks/${i}?version=${version}&depth=${e.depth}&prefix=${e.prefix}`, MAX_CHUNK_BYTES);
      p.catch(() => {}); // its error is reported when its turn comes
      return p;
    };
    const pending = [];
    for (let i = 0; i < Math.min(AHEAD, entries); i++) pending.push(fetchChunk(i));
    for (let i = 0; i < entries; i++) {
      if (i + AHEAD < entries) pending.push(fetchChunk(i + AHEAD));
      const chunk = await pending.shift();
      bytes += chunk.length;
      pairs += sv.verifyChunk(i, chunk).length;
      self.postMessage({ type: 'progress', entries, done: i + 1, pairs, bytes });
    }
    // `inWorker`: where this ran (the page's thread was not the one verifying).
    const inWorker = typeof WorkerGlobalScope === 'function' && self instanceof WorkerGlobalScope;
    self.postMessage({ type: 'done', entries, pairs, total: String(sv.pairs), bytes, inWorker });
  } catch (e) {
    // Only a string code is a letus code (a DOMException's `code` is a number); a failed fetch is `network`.
    const code = e && typeof e.code === 'string' ? e.code : e instanceof TypeError ? 'network' : 'worker_error';
    self.postMessage({ type: 'error', code, status: e && e.status, message: String((e && e.message) || e) });
  } finally {
    if (sv) sv.free();
  }
};
