// LetusClient against a fake node (a fake fetch) built from the test vectors: honest answers verify, tampered
// answers are rejected with the right code.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { DigestMonitor, LetusClient, LetusNodeError, LetusVerifyError, historyLeaf, historyRoot, parseJson, toHex } from '../src/index.js';
import { errorOf } from '../src/http.js';

const vec = (f) => parseJson(readFileSync(new URL(`../../letus-verify/vectors/${f}`, import.meta.url), 'utf8'));
const proofs = vec('proofs.json').cases;
const byName = (n) => proofs.find((c) => c.name === n);
const inc = byName('inclusion of account-00007');
const exc = byName('exclusion ending on an empty slot');
const multi = byName('multi-proof of six keys, present and absent');
const ROOT = inc.root;
const OTHER_ROOT = vec('roots.json').cases[1].root;
const KEY = inc.claims[0].key;
const VALUE = inc.claims[0].value;
const HR = 'ab'.repeat(32);
const digest = (version, root = ROOT, history_len = version, history_root = HR) => ({ tid: 0, version, root, history_len, history_root });

function flipHex(hex, at) {
  const i = at < 0 ? hex.length + at : at;
  const c = hex[i] === '0' ? '1' : '0';
  return hex.slice(0, i) + c + hex.slice(i + 1);
}

/** A fake fetch: `routes` maps a path (without the base URL) to [status, body] or a function of (init). */
function fakeFetch(routes) {
  const calls = [];
  const f = async (url, init) => {
    const path = url.replace('http://node.test', '');
    calls.push({ path, init });
    let r = routes[path];
    if (typeof r === 'function') r = r(init);
    if (!r) r = [404, { error: { code: 'not_found', message: `no route ${path}` } }];
    const [status, body] = r;
    return new Response(typeof body === 'string' ? body : JSON.stringify(body), { status });
  };
  f.calls = calls;
  return f;
}

function valueAnswer(over = {}) {
  return { tid: 0, version: 5, key: KEY, value: VALUE, proof: inc.proof_json, proof_hex: inc.proof, digest: digest(5), ...over };
}

async function rejects(p, code, cls = LetusVerifyError) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e && e.stack}`);
    assert.equal(e.code, code);
    return true;
  });
}

const client = (routes, opts) => new LetusClient('http://node.test/', { fetch: fakeFetch(routes), ...opts });
const GET = `/v1/tries/0/keys/${KEY}?version=5`;

describe('LetusClient.getVerified', () => {
  it('returns an honest value, trusted when a trusted root is given', async () => {
    const fetch = fakeFetch({ [GET]: [200, valueAnswer()] });
    const c = new LetusClient('http://node.test', { fetch });
    const r = await c.getVerified(0, KEY, { version: 5, trustedRoot: ROOT });
    assert.equal(toHex(r.value), VALUE);
    assert.equal(r.present, true);
    assert.equal(r.version, 5n);
    assert.equal(r.trusted, true);
    assert.equal(fetch.calls[0].path, GET);
    const r2 = await c.getVerified(0, KEY, { version: 5n });
    assert.equal(r2.trusted, false);
  });
  it('reads versions above 2^53 exactly (JSON numbers a double cannot hold)', async () => {
    // 2^53 + 1 = 9007199254740993 would read as 9007199254740992 through JSON.parse.
    const V = 9007199254740993n;
    const path = `/v1/tries/0/keys/${KEY}?version=${V}`;
    const body = JSON.stringify(valueAnswer({ version: 5, digest: digest(5, ROOT, 7) }))
      .replace('"version":5', `"version":${V}`)
      .replace('"version":5', `"version":${V}`)
      .replace('"history_len":7', `"history_len":${V + 1n}`);
    assert.ok(body.includes(`"version":${V}`) && !body.includes('"version":5'));
    const monitor = new DigestMonitor();
    const c = new LetusClient('http://node.test', { fetch: fakeFetch({ [path]: [200, body] }), monitor });
    const r = await c.getVerified(0, KEY, { version: V, trustedRoot: ROOT });
    assert.equal(r.version, V);
    assert.equal(r.digest.version, V);
    assert.equal(r.digest.history_len, V + 1n);
    assert.equal(monitor.newest('http://node.test', 0).version, V);
    // Asked for 2^53 + 1, answered 2^53 (what a double would have made of it): refused.
    const lossy = body.replaceAll(`"version":${V}`, `"version":${V - 1n}`);
    await rejects(
      new LetusClient('http://node.test', { fetch: fakeFetch({ [path]: [200, lossy] }) }).getVerified(0, KEY, { version: V }),
      'answer_mismatch',
    );
  });
  it('verifies an exclusion (value null)', async () => {
    const key = exc.claims[0].key;
    const a = { tid: 0, version: 5, key, value: null, proof: exc.proof_json, proof_hex: exc.proof, digest: digest(5) };
    const r = await client({ [`/v1/tries/0/keys/${key}?version=5`]: [200, a] }).getVerified(0, key, { version: 5, trustedRoot: ROOT });
    assert.equal(r.value, null);
    assert.equal(r.present, false);
  });
  it('rejects a tampered value (root_mismatch)', async () => {
    await rejects(client({ [GET]: [200, valueAnswer({ value: flipHex(VALUE, -1) })] }).getVerified(0, KEY, { version: 5 }), 'root_mismatch');
  });
  it('rejects a present key reported absent (expected_absent)', async () => {
    await rejects(client({ [GET]: [200, valueAnswer({ value: null })] }).getVerified(0, KEY, { version: 5 }), 'expected_absent');
  });
  it('rejects a tampered proof, binary and JSON alike (root_mismatch)', async () => {
    const proof_hex = flipHex(inc.proof, 40);
    const proof = JSON.parse(JSON.stringify(inc.proof_json));
    proof.records[0].hashes[0] = proof_hex.slice(8, 72);
    assert.equal(proof.records[0].t, 'branch');
    await rejects(client({ [GET]: [200, valueAnswer({ proof, proof_hex })] }).getVerified(0, KEY, { version: 5 }), 'root_mismatch');
  });
  it('rejects a proof whose JSON and binary forms differ (answer_mismatch)', async () => {
    await rejects(client({ [GET]: [200, valueAnswer({ proof_hex: flipHex(inc.proof, 40) })] }).getVerified(0, KEY, { version: 5 }), 'answer_mismatch');
  });
  it('rejects a proof cut inside a hash (truncated)', async () => {
    await rejects(client({ [GET]: [200, valueAnswer({ proof: null, proof_hex: inc.proof.slice(0, 100) })] }).getVerified(0, KEY, { version: 5 }), 'truncated');
  });
  it('rejects a malformed JSON proof (malformed / unknown_tag)', async () => {
    const proof = JSON.parse(JSON.stringify(inc.proof_json));
    proof.records[0].hashes[0] = 'zz';
    await rejects(client({ [GET]: [200, valueAnswer({ proof })] }).getVerified(0, KEY, { version: 5 }), 'malformed');
    proof.records[0].t = 'twig';
    await rejects(client({ [GET]: [200, valueAnswer({ proof })] }).getVerified(0, KEY, { version: 5 }), 'unknown_tag');
  });
  it('rejects an answer that verifies against its own digest but not the trusted root (root_mismatch)', async () => {
    await rejects(client({ [GET]: [200, valueAnswer()] }).getVerified(0, KEY, { version: 5, trustedRoot: OTHER_ROOT }), 'root_mismatch');
  });
  it('rejects an answer whose proof verifies against the trusted root but whose digest names another (answer_mismatch)', async () => {
    await rejects(client({ [GET]: [200, valueAnswer({ digest: digest(5, OTHER_ROOT) })] }).getVerified(0, KEY, { version: 5, trustedRoot: ROOT }), 'answer_mismatch');
    const keys = multi.claims.map((c) => c.key);
    const values = multi.claims.map((c) => c.value ?? null);
    const many = { tid: 0, version: 5, keys, values, proof: multi.proof_json, proof_hex: multi.proof, digest: digest(5, OTHER_ROOT) };
    await rejects(client({ '/v1/tries/0/proofs': [200, many] }).getVerifiedMany(0, keys, { version: 5, trustedRoot: multi.root }), 'answer_mismatch');
  });
  it('refuses an answer longer than maxAnswerBytes (too_large) and one slower than timeoutMs (timeout)', async () => {
    await rejects(client({ [GET]: [200, valueAnswer()] }, { maxAnswerBytes: 100 }).getVerified(0, KEY, { version: 5 }), 'too_large');
    const never = (url, init) => new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason)));
    await rejects(new LetusClient('http://node.test', { fetch: never, timeoutMs: 50 }).getVerified(0, KEY, { version: 5 }), 'timeout');
    // A body that never ends is cut by the timeout too.
    const endless = async (url, init) => new Response(new ReadableStream({ pull: () => new Promise(() => {}) }, { highWaterMark: 0 }), { status: 200 });
    await rejects(new LetusClient('http://node.test', { fetch: endless, timeoutMs: 50 }).getVerified(0, KEY, { version: 5 }), 'timeout');
    await rejects(client({ [GET]: [200, valueAnswer({ proof: null, proof_hex: 'ab'.repeat(4 * 1024 * 1024 + 1) })] }).getVerified(0, KEY, { version: 5 }), 'too_large');
  });
  it('rejects answers for another key, version or trie (answer_mismatch)', async () => {
    const other = inc.claims[0].key.slice(0, -2) + '31';
    await rejects(client({ [GET]: [200, valueAnswer({ key: other })] }).getVerified(0, KEY, { version: 5 }), 'answer_mismatch');
    await rejects(client({ [GET]: [200, valueAnswer({ version: 6, digest: digest(6) })] }).getVerified(0, KEY, { version: 5 }), 'answer_mismatch');
    await rejects(client({ [GET]: [200, valueAnswer({ tid: 1, digest: { ...digest(5), tid: 1 } })] }).getVerified(0, KEY, { version: 5 }), 'answer_mismatch');
  });
  it('rejects integers written with a fraction, an exponent, a sign or leading zeros (malformed, SPEC.md §7)', async () => {
    const text = JSON.stringify(valueAnswer());
    for (const [from, to] of [['"history_len":5', '"history_len":5.0'], ['"history_len":5', '"history_len":5e0'], ['"tid":0,"version":5,"root"', '"tid":-0,"version":5,"root"'], ['"history_len":5', '"history_len":0000000000000005']]) {
      assert.ok(text.includes(from), from);
      await rejects(client({ [GET]: [200, text.replace(from, to)] }).getVerified(0, KEY, { version: 5 }), 'malformed');
    }
  });
  it('rejects a malformed digest (malformed)', async () => {
    await rejects(client({ [GET]: [200, valueAnswer({ digest: digest(5, ROOT, 0) })] }).getVerified(0, KEY, { version: 5 }), 'malformed');
    await rejects(client({ [GET]: [200, valueAnswer({ digest: undefined })] }).getVerified(0, KEY, { version: 5 }), 'malformed');
    await rejects(client({ [GET]: [200, 'not json'] }).getVerified(0, KEY, { version: 5 }), 'malformed');
  });
  it('surfaces node errors as LetusNodeError with the node code', async () => {
    const body = { error: { code: 'version_not_found', message: 'version 5 was never written' } };
    await rejects(client({ [GET]: [404, body] }).getVerified(0, KEY, { version: 5 }), 'version_not_found', LetusNodeError);
  });
  it('passes digests to a monitor and throws on an alarm (checkpoint_conflict, rollback)', async () => {
    const monitor = new DigestMonitor();
    monitor.addCheckpoint(digest(5, OTHER_ROOT));
    await rejects(client({ [GET]: [200, valueAnswer()] }, { monitor }).getVerified(0, KEY, { version: 5 }), 'checkpoint_conflict');
    const m2 = new DigestMonitor();
    const c = client({ [GET]: [200, valueAnswer()], [`/v1/tries/0/keys/${KEY}?version=4`]: [200, valueAnswer({ version: 4, digest: digest(4) })] }, { monitor: m2 });
    await c.getVerified(0, KEY, { version: 5 });
    await rejects(c.getVerified(0, KEY, { version: 4 }), 'rollback');
  });
});

describe('LetusClient.getVerifiedMany', () => {
  const keys = multi.claims.map((c) => c.key);
  const values = multi.claims.map((c) => c.value ?? null);
  const answer = (over = {}) => ({ tid: 0, version: 5, keys, values, proof: multi.proof_json, proof_hex: multi.proof, digest: digest(5), ...over });
  it('returns honest values in request order and posts the keys', async () => {
    const fetch = fakeFetch({ '/v1/tries/0/proofs': [200, answer()] });
    const r = await new LetusClient('http://node.test', { fetch }).getVerifiedMany(0, keys, { version: 5, trustedRoot: ROOT });
    assert.deepEqual(r.entries.map((e) => (e.value === null ? null : toHex(e.value))), values);
    assert.deepEqual(JSON.parse(fetch.calls[0].init.body), { keys, version: 5 });
    assert.equal(fetch.calls[0].init.method, 'POST');
  });
  it('rejects one tampered value (root_mismatch) and an absent key reported present (expected_present)', async () => {
    const bad = [...values];
    const i = bad.findIndex((v) => v !== null);
    bad[i] = flipHex(bad[i], -1);
    await rejects(client({ '/v1/tries/0/proofs': [200, answer({ values: bad })] }).getVerifiedMany(0, keys, { version: 5 }), 'root_mismatch');
    const j = values.findIndex((v) => v === null);
    const bad2 = [...values];
    bad2[j] = '00';
    await rejects(client({ '/v1/tries/0/proofs': [200, answer({ values: bad2 })] }).getVerifiedMany(0, keys, { version: 5 }), 'expected_present');
  });
  it('rejects keys in another order (answer_mismatch)', async () => {
    const swapped = [keys[1], keys[0], ...keys.slice(2)];
    await rejects(client({ '/v1/tries/0/proofs': [200, answer({ keys: swapped })] }).getVerifiedMany(0, keys, { version: 5 }), 'answer_mismatch');
  });
});

// A history of trie 0 at versions 1..6 whose entries at versions 2 and 5 have root ROOT.
const roots = [OTHER_ROOT, ROOT, OTHER_ROOT, OTHER_ROOT, ROOT, OTHER_ROOT];
async function historyFixture() {
  const leaves = [];
  for (const [i, r] of roots.entries()) leaves.push(await historyLeaf(0, i + 1, r));
  const mth = async (ls) => toHex(await historyRoot(ls));
  async function path(m, ls) {
    if (ls.length <= 1) return [];
    let k = 1;
    while (k * 2 < ls.length) k *= 2;
    return m < k ? [...(await path(m, ls.slice(0, k))), await mth(ls.slice(k))] : [...(await path(m - k, ls.slice(k))), await mth(ls.slice(0, k))];
  }
  const le = (v) => {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, BigInt(v), true);
    return toHex(b);
  };
  const inclusionHex = async (index, size) => {
    const hs = await path(index, leaves.slice(0, size));
    return '0103' + le(index) + le(size) + toHex(Uint8Array.of(hs.length)) + hs.join('');
  };
  // RFC 9162 §2.1.4.1 SUBPROOF: the proof that the first `m` leaves are a prefix of `ls`.
  async function subproof(m, ls, whole) {
    if (m === ls.length) return whole ? [] : [await mth(ls)];
    let k = 1;
    while (k * 2 < ls.length) k *= 2;
    return m <= k
      ? [...(await subproof(m, ls.slice(0, k), whole)), await mth(ls.slice(k))]
      : [...(await subproof(m - k, ls.slice(k), false)), await mth(ls.slice(0, k))];
  }
  const consistencyHex = async (old, size) => {
    const hs = await subproof(old, leaves.slice(0, size), true);
    return '0104' + le(old) + le(size) + toHex(Uint8Array.of(hs.length)) + hs.join('');
  };
  const trusted = digest(6, roots[5], 6, await mth(leaves));
  const digestAt = async (v) => digest(v, roots[v - 1], v, await mth(leaves.slice(0, v)));
  // The routes a trusted history of entries 5 and 2 asks for (at 6).
  const trustedRoutes = async () => ({
    '/v1/digest/inclusion?version=5&at=6&tid=0': [200, { tid: 0, version: 5, at: trusted, root: ROOT, proof: null, proof_hex: await inclusionHex(4, 6) }],
    '/v1/digest/inclusion?version=2&at=6&tid=0': [200, { tid: 0, version: 2, at: trusted, root: ROOT, proof: null, proof_hex: await inclusionHex(1, 6) }],
    '/v1/digest/consistency?from=5&to=6&tid=0': [200, { tid: 0, proof_hex: await consistencyHex(5, 6) }],
    '/v1/digest/consistency?from=2&to=6&tid=0': [200, { tid: 0, proof_hex: await consistencyHex(2, 6) }],
  });
  return { trusted, inclusionHex, consistencyHex, digestAt, trustedRoutes };
}

describe('LetusClient.history', () => {
  it('verifies each entry against its digest, and against a trusted digest with inclusion proofs', async () => {
    const { trusted, digestAt, trustedRoutes } = await historyFixture();
    const entry = async (v) => ({ version: v, value: VALUE, proof_hex: inc.proof, digest: await digestAt(v) });
    const routes = {
      [`/v1/tries/0/keys/${KEY}/history?proofs=true&limit=10`]: [200, { tid: 0, key: KEY, entries: [await entry(5), await entry(2)] }],
      ...(await trustedRoutes()),
    };
    const plain = await client(routes).history(0, KEY, { limit: 10 });
    assert.deepEqual(plain.map((e) => e.version), [5n, 2n]);
    assert.ok(plain.every((e) => !e.trusted));
    assert.equal(plain.next, undefined);
    const checked = await client(routes).history(0, KEY, { limit: 10, trustedDigest: trusted });
    assert.ok(checked.every((e) => e.trusted && toHex(e.value) === VALUE));
  });
  it('checks each trusted entry digest: its place in the history (answer_mismatch) and its history root', async () => {
    const { trusted, digestAt, trustedRoutes } = await historyFixture();
    const path = `/v1/tries/0/keys/${KEY}/history?proofs=true`;
    const with5 = async (d) => ({ [path]: [200, { tid: 0, key: KEY, entries: [{ version: 5, value: VALUE, proof_hex: inc.proof, digest: d }] }], ...(await trustedRoutes()) });
    const d5 = await digestAt(5);
    // The right root at the right place, but another history length, or another history root.
    await rejects(client(await with5({ ...d5, history_len: 4 })).history(0, KEY, { trustedDigest: trusted }), 'answer_mismatch');
    await rejects(client(await with5({ ...d5, history_root: HR })).history(0, KEY, { trustedDigest: trusted }), 'history_root_mismatch');
    assert.ok((await client(await with5(d5)).history(0, KEY, { trustedDigest: trusted }))[0].trusted);
  });
  it('leaves entries newer than the trusted digest untrusted instead of failing', async () => {
    const { digestAt, inclusionHex, consistencyHex } = await historyFixture();
    const path = `/v1/tries/0/keys/${KEY}/history?proofs=true`;
    const entry = async (v) => ({ version: v, value: VALUE, proof_hex: inc.proof, digest: await digestAt(v) });
    // Trusted at 4 (a digest of the first 4 entries): the entry at 5 is newer.
    const routes = {
      [path]: [200, { tid: 0, key: KEY, entries: [await entry(5), await entry(2)] }],
      '/v1/digest/inclusion?version=2&at=4&tid=0': [200, { tid: 0, root: ROOT, proof_hex: await inclusionHex(1, 4) }],
      '/v1/digest/consistency?from=2&to=4&tid=0': [200, { tid: 0, proof_hex: await consistencyHex(2, 4) }],
    };
    const r = await client(routes).history(0, KEY, { trustedDigest: await digestAt(4) });
    assert.deepEqual(r.map((e) => [e.version, e.trusted]), [[5n, false], [2n, true]]);
  });
  it('pages with next and before, and refuses a next that does not follow the last entry', async () => {
    const { digestAt } = await historyFixture();
    const entry = async (v) => ({ version: v, value: VALUE, proof_hex: inc.proof, digest: await digestAt(v) });
    const first = `/v1/tries/0/keys/${KEY}/history?proofs=true&limit=1`;
    const second = `/v1/tries/0/keys/${KEY}/history?proofs=true&limit=1&before=5`;
    const routes = {
      [first]: [200, { tid: 0, key: KEY, entries: [await entry(5)], next: 5 }],
      [second]: [200, { tid: 0, key: KEY, entries: [await entry(2)] }],
    };
    const p1 = await client(routes).history(0, KEY, { limit: 1 });
    assert.equal(p1.next, 5n);
    const p2 = await client(routes).history(0, KEY, { limit: 1, before: p1.next });
    assert.deepEqual(p2.map((e) => e.version), [2n]);
    assert.equal(p2.next, undefined);
    await rejects(client({ [first]: [200, { tid: 0, key: KEY, entries: [await entry(5)], next: 4 }] }).history(0, KEY, { limit: 1 }), 'answer_mismatch');
    await rejects(client({ [first]: [200, { tid: 0, key: KEY, entries: [], next: 4 }] }).history(0, KEY, { limit: 1 }), 'answer_mismatch');
    // An entry at or above `before` is not an answer to the question.
    await rejects(client({ [second]: [200, { tid: 0, key: KEY, entries: [await entry(5)] }] }).history(0, KEY, { limit: 1, before: 5 }), 'answer_mismatch');
  });
  it('reads the empty key with POST /history', async () => {
    const fetch = fakeFetch({ '/v1/tries/0/history': [200, { tid: 0, key: '', entries: [] }] });
    assert.deepEqual([...(await new LetusClient('http://node.test', { fetch }).history(0, ''))], []);
    assert.deepEqual(JSON.parse(fetch.calls[0].init.body), { key: '', proofs: true });
  });
  it('rejects an entry whose root is not in the trusted history (history_root_mismatch)', async () => {
    const { trusted, inclusionHex } = await historyFixture();
    // the node claims ROOT at version 3, where the trusted history has another root
    const fake = { version: 3, value: VALUE, proof_hex: inc.proof, digest: digest(3, ROOT, 3) };
    const routes = {
      [`/v1/tries/0/keys/${KEY}/history?proofs=true`]: [200, { tid: 0, key: KEY, entries: [fake] }],
      '/v1/digest/inclusion?version=3&at=6&tid=0': [200, { tid: 0, version: 3, at: trusted, root: ROOT, proof_hex: await inclusionHex(2, 6) }],
    };
    await client(routes).history(0, KEY); // self-consistent without a trusted digest
    await rejects(client(routes).history(0, KEY, { trustedDigest: trusted }), 'history_root_mismatch');
  });
  it('rejects a tampered value in an entry (root_mismatch) and entries out of order (answer_mismatch)', async () => {
    const { digestAt } = await historyFixture();
    const e5 = { version: 5, value: flipHex(VALUE, -1), proof_hex: inc.proof, digest: await digestAt(5) };
    const path = `/v1/tries/0/keys/${KEY}/history?proofs=true`;
    await rejects(client({ [path]: [200, { tid: 0, key: KEY, entries: [e5] }] }).history(0, KEY), 'root_mismatch');
    const ok = async (v) => ({ version: v, value: VALUE, proof_hex: inc.proof, digest: await digestAt(v) });
    await rejects(client({ [path]: [200, { tid: 0, key: KEY, entries: [await ok(2), await ok(5)] }] }).history(0, KEY), 'answer_mismatch');
  });
});

describe('LetusClient.consistency and digests', () => {
  const hist = vec('history.json').cases;
  const cons = hist.find((c) => c.type === 'consistency' && c.valid && c.old_size === 4 && c.new_size === 13);
  // The vectors' history: entry 12 of 13 is (version 31, root e12), entry 4 is (version 8, root e4).
  const e12 = hist.find((c) => c.name === 'inclusion of entry 12 in 13');
  const e4 = hist.find((c) => c.name === 'inclusion of entry 4 in 13');
  const older = digest(4, ROOT, cons.old_size, cons.old_root);
  const newer = digest(31, e12.entry.root, cons.new_size, cons.new_root);
  const route = '/v1/digest/consistency?from=4&tid=0';
  const self31 = '/v1/digest/inclusion?version=31&at=31&tid=0';
  const routes = (to, inc = e12.proof, path = self31) => ({
    [route]: [200, { tid: 0, from: older, to, proof_hex: cons.proof }],
    [path]: [200, { tid: 0, proof_hex: inc }],
  });
  it('accepts a newer digest that extends the trusted one and ends its own history', async () => {
    const fetch = fakeFetch(routes(newer));
    const r = await new LetusClient('http://node.test', { fetch }).consistency(older);
    assert.equal(r.history_root, cons.new_root);
    assert.deepEqual(fetch.calls.map((c) => c.path), [route, self31]);
    assert.equal((await client({ ...routes(newer), ['/v1/digest/consistency?from=4&to=31&tid=0']: [200, { tid: 0, from: older, to: newer, proof_hex: cons.proof }] }).consistency(older, 31)).version, 31n);
  });
  it('rejects a rewritten history (history_root_mismatch)', async () => {
    const forged = { ...newer, history_root: 'cd'.repeat(32) };
    await rejects(client(routes(forged)).consistency(older), 'history_root_mismatch');
    await rejects(client({ ...routes(newer), [route]: [200, { tid: 0, from: older, to: newer, proof_hex: flipHex(cons.proof, -1) }] }).consistency(older), 'history_root_mismatch');
  });
  it('rejects a newer digest whose own version and root are not the last entry of its history', async () => {
    // A made-up root on an honest history: its inclusion proof does not verify.
    await rejects(client(routes({ ...newer, root: OTHER_ROOT })).consistency(older), 'history_root_mismatch');
    // A real entry of the history, but not its last one (entry 4 of 13, at version 8).
    const stale = digest(8, e4.entry.root, 13, cons.new_root);
    await rejects(client(routes(stale, e4.proof, '/v1/digest/inclusion?version=8&at=8&tid=0')).consistency(older), 'answer_mismatch');
    // Not the version asked for; older than the trusted digest.
    await rejects(client({ ['/v1/digest/consistency?from=4&to=30&tid=0']: [200, { tid: 0, from: older, to: newer, proof_hex: cons.proof }] }).consistency(older, 30), 'answer_mismatch');
    await rejects(client(routes(digest(3, e12.entry.root, 13, cons.new_root))).consistency(older), 'answer_mismatch');
  });
  it('DigestMonitor.checkConsistency accepts and rejects the same', async () => {
    const m = new DigestMonitor();
    assert.equal(await m.checkConsistency(older, newer, cons.proof), true);
    await rejects(m.checkConsistency(older, { ...newer, history_len: 12 }, cons.proof), 'history_size_mismatch');
  });
  it('digests() feeds the monitor and throws on a fork', async () => {
    const monitor = new DigestMonitor();
    monitor.observe('http://other.node', digest(5, OTHER_ROOT));
    await rejects(client({ '/v1/digest/5': [200, { version: 5, digests: [digest(5)] }] }, { monitor }).digests(5), 'fork');
  });
});

describe('LetusClient with a monitor over history', () => {
  it('passes history entries as past digests: no rollback for older versions, forks still caught', async () => {
    const { digestAt } = await historyFixture();
    const entry = async (v) => ({ version: v, value: VALUE, proof_hex: inc.proof, digest: await digestAt(v) });
    const path = `/v1/tries/0/keys/${KEY}/history?proofs=true`;
    const monitor = new DigestMonitor();
    const c = client({ [path]: [200, { tid: 0, key: KEY, entries: [await entry(5), await entry(2)] }] }, { monitor });
    const r = await c.history(0, KEY);
    assert.deepEqual(r.map((e) => e.version), [5n, 2n]);
    assert.equal(monitor.known.length, 2);
    // A past digest that conflicts with a checkpoint is still an alarm.
    const m2 = new DigestMonitor();
    m2.addCheckpoint(digest(2, OTHER_ROOT, 2, (await digestAt(2)).history_root));
    await rejects(client({ [path]: [200, { tid: 0, key: KEY, entries: [await entry(5), await entry(2)] }] }, { monitor: m2 }).history(0, KEY), 'checkpoint_conflict');
  });
  it('stops waiting at timeoutMs even when fetch ignores the signal', async () => {
    const deaf = () => new Promise(() => {});
    await rejects(new LetusClient('http://node.test', { fetch: deaf, timeoutMs: 50 }).getVerified(0, KEY, { version: 5 }), 'timeout');
  });
});

describe('LetusClient with keys too long for a URL', () => {
  it('reads them with POST /value and POST /history, the key in the body', async () => {
    const big = 'ab'.repeat(40_000);
    const fetch = fakeFetch({
      '/v1/tries/0/value': [200, valueAnswer({ key: big })],
      '/v1/tries/0/history': [200, { tid: 0, key: big, entries: [] }],
    });
    const c = new LetusClient('http://node.test', { fetch });
    // The proof is for another key, so it fails; what matters here is how the key was sent.
    await assert.rejects(c.getVerified(0, big, { version: 5 }), (e) => e instanceof LetusVerifyError);
    assert.equal(fetch.calls[0].init.method, 'POST');
    assert.deepEqual(JSON.parse(fetch.calls[0].init.body), { key: big, version: 5 });
    assert.deepEqual(await c.history(0, big, { limit: 3 }), []);
    assert.deepEqual(JSON.parse(fetch.calls[1].init.body), { key: big, proofs: true, limit: 3 });
    // A short key stays in the URL.
    await client({ [GET]: [200, valueAnswer()] }).getVerified(0, KEY, { version: 5 });
  });
});

describe('errorOf (the error answers the client and the snapshot worker read)', () => {
  it('takes the code and message of a node error, and the text itself of anything else', async () => {
    assert.deepEqual(errorOf('{"error":{"code":"pruned","message":"version 3 is pruned"}}'), { code: 'pruned', message: 'version 3 is pruned' });
    assert.deepEqual(errorOf('Bad Gateway'), { code: 'http_error', message: 'Bad Gateway' });
    assert.deepEqual(errorOf('{"error":{"code":5}}'), { code: 'http_error', message: '{"error":{"code":5}}' });
    assert.deepEqual(errorOf('null'), { code: 'http_error', message: 'null' });
  });
});

describe('LetusClient transport limits', () => {
  it('refuses a timeoutMs a timer cannot hold, and takes Infinity for none', () => {
    assert.throws(() => new LetusClient('http://node.test', { fetch: async () => {}, timeoutMs: 2 ** 31 }), TypeError);
    new LetusClient('http://node.test', { fetch: async () => {}, timeoutMs: Infinity });
  });
  it('gives a failed fetch the code network', async () => {
    const down = async () => {
      throw new TypeError('fetch failed');
    };
    await rejects(new LetusClient('http://node.test', { fetch: down }).getVerified(0, KEY, { version: 5 }), 'network');
  });
  it('counts a Node-stream body (node-fetch) against maxAnswerBytes', async () => {
    const { Readable } = await import('node:stream');
    const { readCapped } = await import('../src/http.js');
    const res = (parts) => ({ headers: { get: () => null }, body: Readable.from(parts.map((p) => Buffer.from(p))) });
    assert.equal(new TextDecoder().decode(await readCapped(res(['ab', 'cd']), 4)), 'abcd');
    await rejects(readCapped(res(['ab', 'cd', 'e']), 4), 'too_large');
  });
  it('keeps 500 characters of a long error answer', async () => {
    const long = 'x'.repeat(10_000);
    await assert.rejects(client({ [GET]: [500, { error: { code: 'internal', message: long } }] }).getVerified(0, KEY, { version: 5 }), (e) => {
      assert.ok(e instanceof LetusNodeError && e.code === 'internal' && e.message.length < 700, e.message.length);
      return true;
    });
  });
});
