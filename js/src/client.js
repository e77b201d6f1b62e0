import { LetusNodeError, LetusVerifyError, wrapError } from './errors.js';
import { bytesEqual, fromHex, hashHex, toBytes, toHex, toU32, toU64 } from './bytes.js';
import { parseJson } from './json.js';
import { proofFromJson } from './proof.js';
import { verifyMultiProof, verifyProof } from './verify.js';
import { digestFromJson, verifyConsistency, verifyInclusion } from './digest.js';
import { errorOf, readCapped } from './http.js';

/** SPEC.md §6: the largest encoded state proof. */
const MAX_PROOF_BYTES = 4 * 1024 * 1024;

function mismatch(what) {
  throw new LetusVerifyError('answer_mismatch', `the node's answer does not match the request: ${what}`);
}

function check(cond, what) {
  if (!cond) mismatch(what);
}

/** Runs a parse step of an answer; a TypeError (missing field) becomes `malformed`. */
function parsing(f) {
  try {
    return f();
  } catch (e) {
    if (e instanceof TypeError) throw new LetusVerifyError('malformed', `malformed answer: ${e.message}`, { cause: e });
    throw wrapError(e);
  }
}

function optValue(v, what) {
  return v === null || v === undefined ? null : fromHex(v, what);
}

/** The most bytes of one answer a client reads by default (a 4 MiB proof as hex and as JSON fits well within). */
export const DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024;
/** How long a client waits for one answer by default, in milliseconds. */
export const DEFAULT_TIMEOUT_MS = 60_000;
/** The longest timer JS runs (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** The most bytes of an error answer read, and the most characters of it kept in the error's message. */
const MAX_ERROR_BYTES = 64 * 1024;
const MAX_ERROR_MESSAGE = 500;
/** The most history entries one answer holds (letus-node/API.md). */
const MAX_HISTORY_ENTRIES = 1000;
/**
 * The longest key named in a URL; longer ones go in a request body (the node reads keys up to 32,758 bytes in a
 * URL, letus-node/API.md; this leaves room for the rest of it and for proxies).
 */
const MAX_URL_KEY_BYTES = 8192;

/** A POST of `body`, JSON text (versions written as integers, which JSON.stringify cannot do for a bigint). */
function postJson(body) {
  return { method: 'POST', headers: { 'content-type': 'application/json' }, body };
}

/**
 * A client of a letus node (letus-node/API.md) that returns only what it verified. Every answer's proof is checked
 * against a trusted root when one is given (else against the answer's own digest: `trusted: false`), and every
 * digest the node returns is passed to `options.monitor` (a DigestMonitor) under the node's URL, an alarm
 * (fork, rollback, checkpoint conflict) being thrown as a LetusVerifyError with the report's code.
 */
export class LetusClient {
  #base;
  #fetch;
  #monitor;
  #source;
  #maxBytes;
  #timeoutMs;

  /**
   * Options: `fetch` (default the global one), `monitor` (a DigestMonitor), `source` (the name digests are
   * reported under; default the URL), `maxAnswerBytes` (default 64 MiB: a longer answer is refused with
   * `too_large` without being read further), `timeoutMs` (default 60 s per answer: then `timeout`).
   */
  constructor(baseUrl, { fetch: f, monitor, source, maxAnswerBytes, timeoutMs } = {}) {
    this.#base = String(baseUrl).replace(/\/+$/, '');
    // Browsers require fetch to be called with the global object as `this`, so bind it.
    this.#fetch = f || (typeof globalThis.fetch === 'function' ? globalThis.fetch.bind(globalThis) : undefined);
    if (typeof this.#fetch !== 'function') throw new TypeError('no fetch function available');
    this.#monitor = monitor;
    this.#source = source || this.#base;
    this.#maxBytes = maxAnswerBytes === undefined ? DEFAULT_MAX_ANSWER_BYTES : Number(maxAnswerBytes);
    this.#timeoutMs = timeoutMs === undefined ? DEFAULT_TIMEOUT_MS : Number(timeoutMs);
    if (!(this.#maxBytes > 0) || !(this.#timeoutMs > 0)) throw new TypeError('maxAnswerBytes and timeoutMs must be positive');
    // Timers fire at once past 2^31 - 1 ms; Infinity means no deadline.
    if (this.#timeoutMs !== Infinity && !(this.#timeoutMs <= MAX_TIMER_MS)) {
      throw new TypeError(`timeoutMs must be at most ${MAX_TIMER_MS} (or Infinity for none)`);
    }
  }

  async #request(path, init) {
    const ctrl = new AbortController();
    const timer = this.#timeoutMs === Infinity ? undefined : setTimeout(() => ctrl.abort(), this.#timeoutMs);
    let res;
    let text;
    try {
      // Raced against the deadline too: a fetch that ignores the signal still ends here.
      const aborted = new Promise((_, reject) => ctrl.signal.addEventListener('abort', () => reject(new Error('aborted'))));
      aborted.catch(() => {});
      res = await Promise.race([this.#fetch(this.#base + path, { ...init, signal: ctrl.signal }), aborted]);
      // An error answer is read only as far as a message needs.
      const max = res.ok ? this.#maxBytes : MAX_ERROR_BYTES;
      text = new TextDecoder().decode(await readCapped(res, max, ctrl.signal).catch((e) => {
        if (!res.ok && e instanceof LetusVerifyError && e.code === 'too_large') return new Uint8Array(0);
        throw e;
      }));
    } catch (e) {
      if (ctrl.signal.aborted) {
        throw new LetusVerifyError('timeout', `no whole answer from ${this.#base} within ${this.#timeoutMs} ms`, { cause: e });
      }
      if (e instanceof LetusVerifyError) throw e;
      // fetch itself failed (refused connection, DNS, a body cut off): one code for all of them.
      throw new LetusVerifyError('network', `no answer from ${this.#base}: ${e && e.message}`, { cause: e });
    } finally {
      clearTimeout(timer);
    }
    if (!res.ok) {
      const { code, message } = errorOf(text);
      throw new LetusNodeError(res.status, code, message.length > MAX_ERROR_MESSAGE ? `${message.slice(0, MAX_ERROR_MESSAGE)}…` : message);
    }
    try {
      return parseJson(text, { strict: true });
    } catch (e) {
      throw new LetusVerifyError('malformed', 'the node answered with invalid JSON', { cause: e });
    }
  }

  #observe(digest, past = false) {
    if (!this.#monitor) return;
    const r = this.#monitor.observe(this.#source, digest, { past });
    if (r.alarm) throw new LetusVerifyError(r.code, `digest monitor reports ${r.code} for ${this.#source}`);
  }

  /** Checks that the binary proof and its JSON form (if sent) are the same proof; returns the bytes. */
  static #proofOf(answer) {
    if (typeof answer.proof_hex === 'string' && answer.proof_hex.length > 2 * MAX_PROOF_BYTES) {
      throw new LetusVerifyError('too_large', `proof_hex of ${answer.proof_hex.length} characters; a proof is at most ${MAX_PROOF_BYTES} bytes`);
    }
    const bin = parsing(() => fromHex(answer.proof_hex, 'proof_hex'));
    if (answer.proof !== undefined && answer.proof !== null) {
      const fromJson = proofFromJson(answer.proof);
      check(bytesEqual(fromJson, bin), 'proof and proof_hex differ');
    }
    return bin;
  }

  /**
   * `GET /v1/tries/{tid}/keys/{key}`: the value of `key` (bytes or hex) with its proof verified.
   * Options: `version` (default latest), `trustedRoot` (hex or bytes: the root you trust for that version). With
   * `trustedRoot` and no `version`, the value is proved against that root, but the `version` in the result is the
   * node's word: give `version` to have it asked for and checked too.
   * Resolves to `{tid, version, key, value, present, digest, trusted}`.
   */
  async getVerified(tid, key, { version, trustedRoot } = {}) {
    const t = toU32(tid);
    const k = toBytes(key, 'key');
    const v = version === undefined ? undefined : toU64(version);
    // A key too long for a URL goes in a body (`POST /v1/tries/{tid}/value`, the same answer).
    const a = k.length > MAX_URL_KEY_BYTES
      ? await this.#request(`/v1/tries/${t}/value`, postJson(`{"key":"${toHex(k)}"${v === undefined ? '' : `,"version":${v}`}}`))
      : await this.#request(`/v1/tries/${t}/keys/${toHex(k)}${v === undefined ? '' : `?version=${v}`}`);
    const { digest, value } = parsing(() => ({ digest: digestFromJson(a.digest), value: optValue(a.value, 'value') }));
    check(toU32(a.tid) === t && digest.tid === t, 'tid');
    check(typeof a.key === 'string' && a.key.toLowerCase() === toHex(k), 'key');
    check(toU64(a.version) === digest.version && (v === undefined || v === digest.version), 'version');
    const proof = LetusClient.#proofOf(a);
    const root = trustedRoot === undefined ? digest.root : hashHex(trustedRoot, 'trusted root');
    const r = await verifyProof({ tid: t, version: digest.version, root }, k, value, proof);
    // The answer's digest is what the result (and the monitor) report: with a trusted root, it must name it.
    check(digest.root === root, 'the digest names another root than the trusted one');
    this.#observe(digest);
    return { tid: t, version: digest.version, key: k, value, present: r.present, digest, trusted: trustedRoot !== undefined };
  }

  /**
   * `POST /v1/tries/{tid}/proofs`: the values of several keys with one verified multi-proof.
   * Resolves to `{tid, version, entries: [{key, value}], digest, trusted}` in request order.
   */
  async getVerifiedMany(tid, keys, { version, trustedRoot } = {}) {
    const t = toU32(tid);
    const ks = keys.map((k, i) => toBytes(k, `key ${i}`));
    const v = version === undefined ? undefined : toU64(version);
    const body = { keys: ks.map(toHex) };
    const bodyText = JSON.stringify(body).slice(0, -1) + (v === undefined ? '}' : `,"version":${v}}`);
    const a = await this.#request(`/v1/tries/${t}/proofs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: bodyText,
    });
    const { digest, values } = parsing(() => ({
      digest: digestFromJson(a.digest),
      values: a.values.map((x, i) => optValue(x, `values[${i}]`)),
    }));
    check(toU32(a.tid) === t && digest.tid === t, 'tid');
    check(toU64(a.version) === digest.version && (v === undefined || v === digest.version), 'version');
    check(Array.isArray(a.keys) && a.keys.length === ks.length && a.keys.every((x, i) => typeof x === 'string' && x.toLowerCase() === toHex(ks[i])), 'keys');
    check(values.length === ks.length, 'values');
    const proof = LetusClient.#proofOf(a);
    const root = trustedRoot === undefined ? digest.root : hashHex(trustedRoot, 'trusted root');
    const claims = ks.map((key, i) => ({ key, value: values[i] }));
    await verifyMultiProof({ tid: t, version: digest.version, root }, claims, proof);
    check(digest.root === root, 'the digest names another root than the trusted one');
    this.#observe(digest);
    return { tid: t, version: digest.version, entries: claims, digest, trusted: trustedRoot !== undefined };
  }

  /**
   * `GET /v1/tries/{tid}/keys/{key}/history?proofs=true`: the key's past values, newest first, each proved
   * against the digest at its version. With `trustedDigest` (a digest of this trie you trust), each entry at or
   * below its version is also proved to be in the trusted digest's history (`/v1/digest/inclusion`, SPEC.md §8.2,
   * at the position its digest's `history_len` names) and its digest's `history_root` to be a prefix of the trusted
   * one (`/v1/digest/consistency`, §8.3): those entries are `trusted: true`; entries newer than the trusted digest
   * are verified against their own digest only (`trusted: false`).
   * Options: `limit`, `before` (the `next` of an earlier page). Resolves to `[{version, value, digest, trusted}]`;
   * the array's `next` (a bigint) is set when older entries exist: pass it as `before` for them. A node answers
   * fewer than `limit` entries when their values pass its body limit. Each entry is proved, but a node can leave
   * entries out: a proof shows a value at a version, not that no other write came between two entries.
   */
  async history(tid, key, { limit, before, trustedDigest } = {}) {
    const t = toU32(tid);
    const k = toBytes(key, 'key');
    const lim = limit === undefined ? undefined : toU64(limit, 'limit');
    const bef = before === undefined ? undefined : toU64(before, 'before');
    // The empty key has no GET path (`/keys//history`), and a long one does not fit in a URL.
    const a = k.length === 0 || k.length > MAX_URL_KEY_BYTES
      ? await this.#request(`/v1/tries/${t}/history`, postJson(`{"key":"${toHex(k)}","proofs":true${lim === undefined ? '' : `,"limit":${lim}`}${bef === undefined ? '' : `,"before":${bef}`}}`))
      : await this.#request(`/v1/tries/${t}/keys/${toHex(k)}/history?proofs=true${lim === undefined ? '' : `&limit=${lim}`}${bef === undefined ? '' : `&before=${bef}`}`);
    const { tidOf, keyOf, entries, next } = parsing(() => ({
      tidOf: toU32(a.tid),
      keyOf: a.key,
      entries: [...a.entries],
      next: a.next === undefined || a.next === null ? undefined : toU64(a.next),
    }));
    check(tidOf === t, 'tid');
    check(typeof keyOf === 'string' && keyOf.toLowerCase() === toHex(k), 'key');
    const trusted = trustedDigest === undefined ? undefined : digestFromJson(trustedDigest);
    if (trusted) check(trusted.tid === t, 'trusted digest is of another trie');
    const out = [];
    let prev = bef;
    const most = lim === undefined ? MAX_HISTORY_ENTRIES : Math.min(Number(lim), MAX_HISTORY_ENTRIES);
    check(entries.length <= most, `${entries.length} history entries; at most ${most} were asked for`);
    for (const e of entries) {
      const { digest, value, version } = parsing(() => ({
        digest: digestFromJson(e.digest),
        value: optValue(e.value, 'value'),
        version: toU64(e.version),
      }));
      check(digest.tid === t && digest.version === version, 'history entry digest');
      check(prev === undefined || version < prev, 'history entries are not newest first, below `before`');
      prev = version;
      const proof = parsing(() => fromHex(e.proof_hex, 'proof_hex'));
      const r = await verifyProof({ tid: t, version, root: digest.root }, k, value, proof);
      check(value === null || r.present, 'value');
      const provable = trusted !== undefined && version <= trusted.version;
      if (provable) {
        const inc = await this.#request(`/v1/digest/inclusion?version=${version}&at=${trusted.version}&tid=${t}`);
        check(parsing(() => hashHex(inc.root, 'root')) === digest.root, 'inclusion root');
        const index = await verifyInclusion(trusted, { tid: t, version, root: digest.root }, parsing(() => fromHex(inc.proof_hex, 'proof_hex')));
        // The entry's digest names its own place in the history, and its history root is a prefix of the trusted.
        check(BigInt(index) === digest.history_len - 1n, 'the entry is not where its digest says in the history');
        if (digest.history_len !== trusted.history_len) {
          const c = await this.#request(`/v1/digest/consistency?from=${version}&to=${trusted.version}&tid=${t}`);
          await verifyConsistency(digest, trusted, parsing(() => fromHex(c.proof_hex, 'proof_hex')));
        } else {
          check(digest.history_root === trusted.history_root, 'history root');
        }
      }
      this.#observe(digest, true);
      out.push({ version, value, digest, trusted: provable });
    }
    // The cursor goes on from the last entry; without entries there is nothing to go on from.
    check(next === undefined || (out.length > 0 && next === prev), 'next');
    if (next !== undefined) out.next = next;
    return out;
  }

  /** `GET /v1/digest[/{version}]`: the node's digests (each passed to the monitor). Not verified by themselves. */
  async digests(version) {
    const q = version === undefined ? '' : `/${toU64(version)}`;
    const a = await this.#request(`/v1/digest${q}`);
    const ds = parsing(() => a.digests.map(digestFromJson));
    const v = version === undefined ? parsing(() => toU64(a.version)) : toU64(version);
    check(ds.every((d) => d.version === v), 'a digest of another version');
    check(new Set(ds.map((d) => d.tid)).size === ds.length, 'two digests of one trie');
    for (const d of ds) this.#observe(d);
    return ds;
  }

  /**
   * `GET /v1/digest/consistency`: proves that the history of `older` (a digest you trust) is a prefix of the
   * node's history at `toVersion` (default latest). Resolves to the newer digest, verified to extend `older`.
   */
  async consistency(older, toVersion) {
    const o = digestFromJson(older);
    const want = toVersion === undefined ? undefined : toU64(toVersion);
    const to = want === undefined ? '' : `&to=${want}`;
    const a = await this.#request(`/v1/digest/consistency?from=${o.version}${to}&tid=${o.tid}`);
    const { from, newer } = parsing(() => ({ from: digestFromJson(a.from), newer: digestFromJson(a.to) }));
    check(from.tid === o.tid && newer.tid === o.tid, 'tid');
    check(newer.version >= o.version, 'the newer digest is older than the trusted one');
    check(want === undefined || newer.version === want, 'the newer digest is not at the version asked for');
    // The history of `older` is a prefix of newer's history...
    await verifyConsistency(o, newer, parsing(() => fromHex(a.proof_hex, 'proof_hex')));
    // ... and newer's own version and root are the last entry of that history (SPEC.md §7), or its root could be
    // anything: proved by newer's inclusion proof of itself, at index history_len - 1.
    const inc = await this.#request(`/v1/digest/inclusion?version=${newer.version}&at=${newer.version}&tid=${o.tid}`);
    const index = await verifyInclusion(
      newer,
      { tid: o.tid, version: newer.version, root: newer.root },
      parsing(() => fromHex(inc.proof_hex, 'proof_hex')),
    );
    check(BigInt(index) === BigInt(newer.history_len) - 1n, 'the newer digest is not the last entry of its history');
    this.#observe(newer);
    return newer;
  }
}
