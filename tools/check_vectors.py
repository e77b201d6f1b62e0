#!/usr/bin/env python3
"""Independent checker of letus-verify/vectors/*.json against letus-verify/SPEC.md.

Written from SPEC.md alone (no Rust sources). Section numbers below refer to SPEC.md.
Usage: python3 tools/check_vectors.py [vectors_dir]
Prints one line per failing case and ends with "N passed, M failed"; exits 0 only if M == 0.
"""
import glob
import json
import os
import re
import sys

from blake3 import blake3

EMPTY = bytes(32)
MAX_PROOF_BYTES = 4_194_304          # §6 defaults
MAX_KEYS = 10_000
MAX_KEY_BYTES = 65_535
MAX_VALUE_BYTES = 16_777_216
MAX_HISTORY_HASHES = 128
MAX_SNAPSHOT_ITEMS = 262_144
MAX_CHUNK_BYTES = 67_108_864

class VerifyError(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code

def fail_if(condition, code):
    if condition:
        raise VerifyError(code)

# ---------------------------------------------------------------- §2 hashing

def H(tag, data):
    return blake3(bytes([tag]) + data).digest()

def path_of(key):
    return H(0x00, key)

def value_hash(value):
    return H(0x01, value)

def leaf_hash(path, vh):
    return H(0x02, path + vh)

def inner(left, right):
    if left == EMPTY and right == EMPTY:
        return EMPTY
    return H(0x03, left + right)

# ---------------------------------------------------------------- §3 trie

def nibble(p, i):
    return p[i // 2] >> 4 if i % 2 == 0 else p[i // 2] & 0x0F

def lcp(p, q):
    n = 0
    while n < 64 and nibble(p, n) == nibble(q, n):
        n += 1
    return n

def fold(children):
    level = list(children)
    while len(level) > 1:
        level = [inner(level[2 * i], level[2 * i + 1]) for i in range(len(level) // 2)]
    return level[0]

def node_hash(d, items):
    """§3.2/§3.3: hash of the node at depth d covering `items` [(path, leaf_hash)]."""
    if not items:
        return EMPTY
    if len(items) == 1:
        return items[0][1]
    children = [node_hash(d + 1, [it for it in items if nibble(it[0], d) == c]) for c in range(16)]
    return fold(children)

def recursive_root(pairs):
    items = [(path_of(k), leaf_hash(path_of(k), value_hash(v))) for k, v in pairs]
    fail_if(len({p for p, _ in items}) != len(items), "duplicate_key")
    return node_hash(0, items)

# ---------------------------------------------------------------- §9.1 streaming root

class StreamingRoot:
    """The streaming computation of §9.1, transcribed as written."""

    def __init__(self):
        self.stack = []        # [depth, children[16]]
        self.prev = None       # (path, leaf hash)
        self.prev_lcp = -1
        self.count = 0

    def update(self, key, value):
        p = path_of(key)
        h = leaf_hash(p, value_hash(value))
        if self.prev is not None:
            fail_if(p == self.prev[0], "duplicate_key")
            fail_if(p < self.prev[0], "out_of_order")
            l = lcp(self.prev[0], p)
            self._place(self.prev, max(self.prev_lcp, l) + 1)
            self._close_above(l, self.prev[0])
            self.prev_lcp = l
        self.prev = (p, h)
        self.count += 1

    def _place(self, leaf, depth):
        if not self.stack or self.stack[-1][0] < depth - 1:
            self.stack.append([depth - 1, [EMPTY] * 16])
        self.stack[-1][1][nibble(leaf[0], depth - 1)] = leaf[1]

    def _close_above(self, l, p):
        carry = None
        while self.stack and self.stack[-1][0] > l:
            bd, ch = self.stack.pop()
            if carry is not None:
                ch[nibble(p, bd)] = self._chain(carry, bd + 1, p)
            carry = (bd, fold(ch))
        if not self.stack or self.stack[-1][0] < l:
            self.stack.append([l, [EMPTY] * 16])
        if carry is not None:
            self.stack[-1][1][nibble(p, l)] = self._chain(carry, l + 1, p)

    @staticmethod
    def _chain(carry, to, p):
        cd, h = carry
        for k in range(cd - 1, to - 1, -1):
            ch = [EMPTY] * 16
            ch[nibble(p, k)] = h
            h = fold(ch)
        return h

    def finalize(self):
        if self.count == 0:
            return EMPTY
        if self.count == 1:
            return self.prev[1]
        self._place(self.prev, self.prev_lcp + 1)
        self._close_above(0, self.prev[0])
        assert len(self.stack) == 1 and self.stack[0][0] == 0
        return fold(self.stack.pop()[1])

def streaming_root(pairs):
    s = StreamingRoot()
    for k, v in pairs:
        s.update(k, v)
    return s.finalize()

# ---------------------------------------------------------------- §4 / §5.4 binary decoding

def check_header(b, typ):
    """§4 format and type bytes. Guessed order: empty -> truncated, format,
    missing type -> truncated, type."""
    fail_if(len(b) < 1, "truncated")
    fail_if(b[0] != 0x01, "unsupported_format")
    fail_if(len(b) < 2, "truncated")
    fail_if(b[1] != typ, "wrong_type")

def count_record(counts, tag):
    """§5.4 record counts: at most MAX_KEYS terminal and 64 * MAX_KEYS BRANCH records."""
    if tag in (0x00, 0x01, 0x02):
        counts[0] += 1
        fail_if(counts[0] > MAX_KEYS, "too_large")
    elif tag == 0x03:
        counts[1] += 1
        fail_if(counts[1] > 64 * MAX_KEYS, "too_large")

def decode_records(b):
    check_header(b, 0x01)
    i, records, counts = 2, [], [0, 0]
    while i < len(b):
        tag = b[i]
        i += 1
        count_record(counts, tag)
        if tag == 0x00:
            records.append(("empty",))
        elif tag == 0x01:
            records.append(("leaf",))
        elif tag == 0x02:
            fail_if(len(b) - i < 64, "truncated")
            records.append(("other_leaf", bytes(b[i:i + 32]), bytes(b[i + 32:i + 64])))
            i += 64
        elif tag == 0x03:
            fail_if(len(b) - i < 1, "truncated")
            mask = b[i]
            i += 1
            n = bin(mask).count("1")
            fail_if(len(b) - i < 32 * n, "truncated")
            hashes = [bytes(b[i + 32 * k:i + 32 * k + 32]) for k in range(n)]
            i += 32 * n
            fail_if(any(h == EMPTY for h in hashes), "non_canonical")
            records.append(("branch", mask, hashes))
        else:
            raise VerifyError("unknown_tag")
    return records

def encode_records(records):
    out = bytearray(b"\x01\x01")
    for r in records:
        if r[0] == "empty":
            out.append(0x00)
        elif r[0] == "leaf":
            out.append(0x01)
        elif r[0] == "other_leaf":
            out += b"\x02" + r[1] + r[2]
        else:
            out += bytes([0x03, r[1]]) + b"".join(r[2])
    return bytes(out)

# ---------------------------------------------------------------- §5.5 JSON form

HASH_RE = re.compile(r"[0-9a-fA-F]{64}")

def json_hash(s):
    fail_if(not isinstance(s, str) or not HASH_RE.fullmatch(s), "malformed")
    return bytes.fromhex(s)

def decode_json_proof(obj):
    # §5.5: format first (its JSON type, then its value), then the records in order; a field of the wrong JSON
    # type (bool is not an integer here), a record that is not an object or has no string t is malformed.
    fail_if(not isinstance(obj, dict), "malformed")
    fail_if(type(obj.get("format")) is not int, "malformed")
    fail_if(obj["format"] != 1, "unsupported_format")
    fail_if(not isinstance(obj.get("records"), list), "malformed")
    records = []
    for r in obj["records"]:
        fail_if(not isinstance(r, dict) or not isinstance(r.get("t"), str), "malformed")
        t = r["t"]
        if t == "empty":
            records.append(("empty",))
        elif t == "leaf":
            records.append(("leaf",))
        elif t == "other_leaf":
            p, vh = json_hash(r.get("path")), json_hash(r.get("value_hash"))
            records.append(("other_leaf", p, vh))
        elif t == "branch":
            mask, hs = r.get("mask"), r.get("hashes")
            fail_if(type(mask) is not int or not 0 <= mask <= 255, "malformed")
            fail_if(not isinstance(hs, list), "malformed")
            hashes = [json_hash(h) for h in hs]
            fail_if(len(hashes) != bin(mask).count("1"), "malformed")
            fail_if(any(h == EMPTY for h in hashes), "non_canonical")
            records.append(("branch", mask, hashes))
        else:
            raise VerifyError("unknown_tag")
    return records

# ---------------------------------------------------------------- §5.2 / §5.3 verification

def frontier(E, lo=0, hi=16):
    if not any(lo <= c < hi for c in E):
        return [(lo, hi)]
    if hi - lo == 1:
        return []
    mid = (lo + hi) // 2
    return frontier(E, lo, mid) + frontier(E, mid, hi)

def verify_binary(comm, claims, proof_bytes):
    fail_if(len(proof_bytes) > MAX_PROOF_BYTES, "too_large")
    verify_records(comm, claims, decode_records(proof_bytes))

def verify_json(comm, claims, proof_json):
    records = decode_json_proof(proof_json)
    # §5.5: the record counts of §5.4 once the whole proof is converted, then the binary length.
    counts = [0, 0]
    for r in records:
        count_record(counts, {"empty": 0x00, "leaf": 0x01, "other_leaf": 0x02, "branch": 0x03}[r[0]])
    # Guess: step 1 applied to the size of the equivalent binary encoding.
    fail_if(len(encode_records(records)) > MAX_PROOF_BYTES, "too_large")
    verify_records(comm, claims, records)

def verify_records(comm, claims, records):
    fail_if(len(claims) == 0 or len(claims) > MAX_KEYS, "too_many_keys")
    for key, value in claims:
        fail_if(len(key) > MAX_KEY_BYTES, "too_large")
        fail_if(value is not None and len(value) > MAX_VALUE_BYTES, "too_large")
    Q = sorted(((path_of(k), v) for k, v in claims), key=lambda q: q[0])
    for a, b in zip(Q, Q[1:]):
        fail_if(a[0] == b[0], "duplicate_key")
    cursor = [0]
    h, _ = walk(0, Q, records, cursor)
    fail_if(cursor[0] != len(records), "unused_records")
    fail_if(h != comm, "root_mismatch")

def walk(d, Q, records, cursor):
    fail_if(cursor[0] >= len(records), "proof_exhausted")
    r = records[cursor[0]]
    cursor[0] += 1
    present = [q for q in Q if q[1] is not None]
    if r[0] == "empty":
        fail_if(present, "expected_present")
        return EMPTY, "empty"
    if r[0] == "leaf":
        fail_if(len(present) != 1, "expected_absent")
        p, v = present[0]
        return leaf_hash(p, value_hash(v)), "leaf"
    if r[0] == "other_leaf":
        _, p, vh = r
        fail_if(present, "expected_present")
        for q in Q:
            fail_if(p == q[0] or lcp(p, q[0]) < d, "other_leaf_mismatch")
        return leaf_hash(p, vh), "leaf"
    _, mask, hashes = r
    fail_if(d >= 64, "depth_exceeded")
    E = sorted({nibble(q[0], d) for q in Q})
    F = frontier(E)
    fail_if(mask >> len(F) != 0, "non_canonical")
    units, leaf_units, child = bin(mask).count("1"), 0, {}
    for c in E:
        child[c], kind = walk(d + 1, [q for q in Q if nibble(q[0], d) == c], records, cursor)
        if child[c] != EMPTY:
            units += 1
        if kind == "leaf":
            leaf_units += 1
    fail_if(units == 0, "non_canonical")
    fail_if(units == 1 and leaf_units == 1, "non_canonical")
    return fold_with_frontier(E, F, mask, hashes, child), "branch"

def fold_with_frontier(E, F, mask, hashes, child):
    """Compute the binary fold of §3.3 where frontier subtree i has a given hash."""
    sub = {}
    it = iter(hashes)
    for i, rng in enumerate(F):
        sub[rng] = next(it) if (mask >> i) & 1 else EMPTY

    def h(lo, hi):
        if (lo, hi) in sub:
            return sub[(lo, hi)]
        if hi - lo == 1:
            return child[lo]
        mid = (lo + hi) // 2
        return inner(h(lo, mid), h(mid, hi))

    return h(0, 16)

# ---------------------------------------------------------------- §8 history

def history_leaf(tid, version, root):
    return H(0x10, tid.to_bytes(4, "little") + version.to_bytes(8, "little") + root)

def mth(leaves):
    n = len(leaves)
    if n == 0:
        return EMPTY
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return H(0x11, mth(leaves[:k]) + mth(leaves[k:]))

def decode_history_proof(b, typ):
    """§8.2 (typ 3: index, tree_size) / §8.3 (typ 4: old_size, new_size)."""
    check_header(b, typ)
    fail_if(len(b) < 2 + 8 + 8 + 1, "truncated")
    a = int.from_bytes(b[2:10], "little")
    c = int.from_bytes(b[10:18], "little")
    count = b[18]
    fail_if(count > MAX_HISTORY_HASHES, "too_large")
    end = 19 + 32 * count
    fail_if(len(b) < end, "truncated")
    fail_if(len(b) > end, "trailing_data")
    return a, c, [bytes(b[19 + 32 * k:51 + 32 * k]) for k in range(count)]

def verify_inclusion(history_root, tree_size, leaf, proof):
    index, p_size, hashes = proof
    fail_if(p_size != tree_size, "history_size_mismatch")
    fail_if(index >= tree_size, "history_index_out_of_range")
    fn, sn, r = index, tree_size - 1, leaf
    for p in hashes:
        fail_if(sn == 0, "history_proof_length")
        if fn % 2 == 1 or fn == sn:
            r = H(0x11, p + r)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = H(0x11, r + p)
        fn >>= 1
        sn >>= 1
    fail_if(sn != 0, "history_proof_length")
    fail_if(r != history_root, "history_root_mismatch")

def verify_consistency(old_size, old_root, new_size, new_root, proof):
    p_old, p_new, hashes = proof
    fail_if(p_old != old_size or p_new != new_size, "history_size_mismatch")
    fail_if(old_size > new_size, "history_size_mismatch")
    if old_size == new_size:
        fail_if(hashes, "history_proof_length")
        fail_if(old_root != new_root, "history_root_mismatch")
        return
    if old_size == 0:
        fail_if(hashes, "history_proof_length")
        return
    path = list(hashes)
    if old_size & (old_size - 1) == 0:
        path = [old_root] + path
    fail_if(not path, "history_proof_length")
    fn, sn = old_size - 1, new_size - 1
    while fn % 2 == 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        fail_if(sn == 0, "history_proof_length")
        if fn % 2 == 1 or fn == sn:
            fr = H(0x11, c + fr)
            sr = H(0x11, c + sr)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = H(0x11, sr + c)
        fn >>= 1
        sn >>= 1
    fail_if(sn != 0, "history_proof_length")
    fail_if(fr != old_root or sr != new_root, "history_root_mismatch")

# ---------------------------------------------------------------- §7 digests

DIGEST_FIELDS = ("tid", "version", "root", "history_len", "history_root")

def decode_digest(b):
    check_header(b, 0x02)
    fail_if(len(b) < 86, "truncated")
    fail_if(len(b) > 86, "trailing_data")
    d = {"tid": int.from_bytes(b[2:6], "little"), "version": int.from_bytes(b[6:14], "little"),
         "root": bytes(b[14:46]), "history_len": int.from_bytes(b[46:54], "little"),
         "history_root": bytes(b[54:86])}
    fail_if(d["history_len"] == 0, "malformed")
    return d

def encode_digest(d):
    return (b"\x01\x02" + d["tid"].to_bytes(4, "little") + d["version"].to_bytes(8, "little")
            + d["root"] + d["history_len"].to_bytes(8, "little") + d["history_root"])

def digest_from_json(j):
    """§7 JSON form: every field present; tid a u32, version and history_len u64 (JSON integers, not bools),
    hashes of 64 hex digits; history_len 0 is malformed as in the binary form."""
    fail_if(not isinstance(j, dict), "malformed")
    for f, bits in (("tid", 32), ("version", 64), ("history_len", 64)):
        v = j.get(f)
        fail_if(type(v) is not int or not 0 <= v < 1 << bits, "malformed")
    d = {"tid": j["tid"], "version": j["version"], "root": json_hash(j.get("root")),
         "history_len": j["history_len"], "history_root": json_hash(j.get("history_root"))}
    fail_if(d["history_len"] == 0, "malformed")
    return d

class DigestChecker:
    """§7.1. The spec leaves the bookkeeping open; this is the reading chosen here:
    forks are looked for against every earlier digest of the same (tid, version) or (tid, history_len);
    a fork with a checkpoint on either side is a checkpoint_conflict; otherwise a source reporting a
    lower version or history_len than it reported before for the trie is a rollback; otherwise
    agreement if a digest with the same (tid, version) or (tid, history_len) was seen, else new."""

    def __init__(self):
        self.seen = []       # (source, digest)
        self.latest = {}     # (source, tid) -> (max version, max history_len)

    def observe(self, source, d):
        fork = conflict = comparable = False
        for s, e in self.seen:
            if e["tid"] != d["tid"]:
                continue
            same_v = e["version"] == d["version"]
            same_n = e["history_len"] == d["history_len"]
            comparable |= same_v or same_n
            bad = (same_v and any(e[f] != d[f] for f in ("root", "history_len", "history_root"))) \
                or (same_n and e["history_root"] != d["history_root"])
            if bad:
                fork = True
                conflict |= s is None or source is None
        rollback = False
        if source is not None:
            last = self.latest.get((source, d["tid"]))
            if last is not None:
                rollback = d["version"] < last[0] or d["history_len"] < last[1]
                self.latest[(source, d["tid"])] = (max(last[0], d["version"]),
                                                   max(last[1], d["history_len"]))
            else:
                self.latest[(source, d["tid"])] = (d["version"], d["history_len"])
        self.seen.append((source, d))
        if conflict:
            return "checkpoint_conflict"
        if fork:
            return "fork"
        if rollback:
            return "rollback"
        return "agreement" if comparable else "new"

# ---------------------------------------------------------------- §9.2 exports

def read_export(stream, trusted_root):
    """Returns the record count, or raises VerifyError."""
    b, i = stream, 0

    def take(n):
        nonlocal i
        fail_if(len(b) - i < n, "truncated")
        out = bytes(b[i:i + n])
        i += n
        return out

    if len(b) < 8:
        # Guess: shorter than the magic -> bad_magic if what is there differs, else truncated.
        raise VerifyError("truncated" if b"LETUSEXP".startswith(bytes(b)) else "bad_magic")
    fail_if(take(8) != b"LETUSEXP", "bad_magic")
    fail_if(take(1)[0] != 0x01, "unsupported_format")
    take(4 + 8 + 32)             # tid, version, claimed root: not trusted
    root = StreamingRoot()
    while True:
        tag = take(1)[0]
        if tag == 0xFF:
            count = int.from_bytes(take(8), "little")
            fail_if(count != root.count, "count_mismatch")
            fail_if(i != len(b), "trailing_data")
            break
        fail_if(tag != 0x01, "unknown_tag")
        klen = int.from_bytes(take(4), "little")
        vlen = int.from_bytes(take(4), "little")
        fail_if(klen > MAX_KEY_BYTES or vlen > MAX_VALUE_BYTES, "too_large")
        key, value = take(klen), take(vlen)
        root.update(key, value)
    fail_if(root.finalize() != trusted_root, "root_mismatch")
    return root.count

# ---------------------------------------------------------------- §12 snapshots

class Cursor:
    def __init__(self, b, pos=0):
        self.b, self.pos = b, pos

    def take(self, n):
        fail_if(self.pos + n > len(self.b), "truncated")
        out = self.b[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self):
        return self.take(1)[0]

    def u32(self):
        return int.from_bytes(self.take(4), "little")

    def u64(self):
        return int.from_bytes(self.take(8), "little")

    def end(self):
        fail_if(self.pos != len(self.b), "trailing_data")

def read_position(c):
    """§12.1: depth and prefix of an entry or chunk."""
    depth = c.u8()
    fail_if(depth > 64, "malformed")
    prefix = c.take(32)
    fail_if(any(nibble(prefix, i) != 0 for i in range(depth, 64)), "non_canonical")
    return depth, prefix

def decode_manifest(b):
    check_header(b, 0x05)
    c = Cursor(b, 2)
    tid, version, root, n = c.u32(), c.u64(), c.take(32), c.u32()
    fail_if(n > MAX_SNAPSHOT_ITEMS, "too_large")
    items = []
    for _ in range(n):
        depth, prefix = read_position(c)
        count = c.u64()
        fail_if(count == 0, "malformed")
        h = c.take(32)
        fail_if(h == EMPTY, "non_canonical")
        items.append((depth, prefix, count, h))
    c.end()
    return tid, version, root, items

def manifest_root(items, d):
    """§12.2 H(E, d)."""
    if not items:
        return EMPTY
    if len(items) == 1 and (items[0][0] == d or items[0][2] == 1):
        return items[0][3]
    return fold([manifest_root([e for e in items if nibble(e[1], d) == ch], d + 1) for ch in range(16)])

def verify_manifest(b, tid, version, trusted):
    mtid, mversion, _claimed, items = decode_manifest(b)
    fail_if((mtid, mversion) != (tid, version), "wrong_snapshot")
    fail_if(sum(e[2] for e in items) >= 2 ** 64, "malformed")
    for a, e in zip(items, items[1:]):
        m = min(a[0], e[0])
        l = min(lcp(a[1], e[1]), m)
        fail_if(not (l < m and nibble(a[1], l) < nibble(e[1], l)), "out_of_order")
    fail_if(manifest_root(items, 0) != trusted, "root_mismatch")
    return items

def verify_chunk(items, mtid, mversion, index, b):
    fail_if(len(b) > MAX_CHUNK_BYTES, "too_large")
    check_header(b, 0x06)
    c = Cursor(b, 2)
    tid, version, cindex = c.u32(), c.u64(), c.u32()
    depth, prefix = read_position(c)
    count = c.u64()
    fail_if(count == 0, "malformed")
    pairs = []
    for _ in range(count):
        kl, vl = c.u32(), c.u32()
        fail_if(kl > MAX_KEY_BYTES, "too_large")
        fail_if(vl > MAX_VALUE_BYTES, "too_large")
        pairs.append((c.take(kl), c.take(vl)))
    c.end()
    fail_if(index >= len(items) or cindex != index, "chunk_mismatch")
    fail_if((tid, version) != (mtid, mversion), "wrong_snapshot")
    e = items[index]
    fail_if((depth, prefix) != (e[0], e[1]), "chunk_mismatch")
    leaves, prev = [], None
    for k, v in pairs:
        p = path_of(k)
        fail_if(lcp(p, e[1]) < e[0], "outside_chunk")
        fail_if(prev is not None and p == prev, "duplicate_key")
        fail_if(prev is not None and p < prev, "out_of_order")
        prev = p
        leaves.append((p, leaf_hash(p, value_hash(v))))
    fail_if(node_hash(e[0], leaves) != e[3], "root_mismatch")
    fail_if(len(pairs) != e[2], "count_mismatch")
    return len(pairs)

# ---------------------------------------------------------------- vector checking

def run(fn):
    """Run fn(); return None on success or the error code."""
    try:
        fn()
        return None
    except VerifyError as e:
        return e.code

def expect(case, code):
    """Compare an outcome (None = success) with the case's valid/error; return a problem or None."""
    want = case.get("error")
    if want is None and not case.get("valid", False):
        return "case has neither valid:true nor error"
    if want is None:
        return None if code is None else f"expected valid, got {code}"
    return None if code == want else f"expected {want}, got {code or 'valid'}"

def hx(s):
    return bytes.fromhex(s)

def check_roots(case):
    pairs = [(hx(p["key"]), hx(p["value"])) for p in case["pairs"]]
    for n, (k, v) in enumerate(pairs):
        if path_of(k).hex() != case["paths"][n].lower():
            return f"path of pair {n} differs"
        if value_hash(v).hex() != case["value_hashes"][n].lower():
            return f"value_hash of pair {n} differs"
    root = recursive_root(pairs)
    if root.hex() != case["root"].lower():
        return f"root: computed {root.hex()}, vector {case['root']}"
    sroot = streaming_root(sorted(pairs, key=lambda kv: path_of(kv[0])))
    if sroot != root:
        return "streaming root (§9.1) differs from recursive root (§3.3)"
    return None

def check_proofs(case):
    root = hx(case["root"])
    claims = [(hx(c["key"]), None if c.get("value") is None else hx(c["value"]))
              for c in case["claims"]]
    proof = hx(case["proof"])
    problem = expect(case, run(lambda: verify_binary(root, claims, proof)))
    if problem:
        return "binary: " + problem
    if case.get("proof_json") is None:
        return None
    pj = case["proof_json"]
    if "json_error" in case:
        code = run(lambda: verify_json(root, claims, pj))
        return None if code == case["json_error"] else \
            f"json: expected {case['json_error']}, got {code or 'valid'}"
    if case.get("valid"):
        try:
            if decode_json_proof(pj) != decode_records(proof):
                return "json: records differ from the binary proof"
        except VerifyError as e:
            return f"json: decode failed with {e.code}"
    problem = expect(case, run(lambda: verify_json(root, claims, pj)))
    return "json: " + problem if problem else None

def check_history(case):
    t = case["type"]
    if t == "roots":
        leaves = []
        for n, e in enumerate(case["entries"]):
            leaves.append(history_leaf(e["tid"], e["version"], hx(e["root"])))
            if mth(leaves).hex() != case["roots"][n].lower():
                return f"MTH after {n + 1} entries differs"
        return None
    if t == "inclusion":
        e = case["entry"]

        def go():
            proof = decode_history_proof(hx(case["proof"]), 0x03)
            verify_inclusion(hx(case["history_root"]), case["tree_size"],
                             history_leaf(e["tid"], e["version"], hx(e["root"])), proof)
        return expect(case, run(go))
    if t == "consistency":
        def go():
            proof = decode_history_proof(hx(case["proof"]), 0x04)
            verify_consistency(case["old_size"], hx(case["old_root"]),
                               case["new_size"], hx(case["new_root"]), proof)
        return expect(case, run(go))
    return f"unknown history case type {t!r}"

def check_digests(case):
    t = case["type"]
    if t == "encoding":
        want = digest_from_json(case["digest"])
        b = hx(case["binary"])
        try:
            got = decode_digest(b)
        except VerifyError as e:
            return f"decode failed with {e.code}"
        if got != want:
            return "decoded binary differs from the JSON digest"
        return None if encode_digest(got) == b else "re-encoding differs"
    if t == "json_decode":
        code = run(lambda: digest_from_json(case["digest"]))
        return None if code == case["error"] else f"expected {case['error']}, got {code or 'valid'}"
    if t == "decode":
        code = run(lambda: decode_digest(hx(case["binary"])))
        return None if code == case["error"] else f"expected {case['error']}, got {code or 'valid'}"
    if t == "checker":
        checker = DigestChecker()
        for n, step in enumerate(case["steps"]):
            got = checker.observe(step.get("source"), digest_from_json(step["digest"]))
            if got != step["report"]:
                return f"step {n}: expected {step['report']}, got {got}"
        return None
    return f"unknown digest case type {t!r}"

def check_exports(case):
    result = {}

    def go():
        result["n"] = read_export(hx(case["stream"]), hx(case["trusted_root"]))
    problem = expect(case, run(go))
    if problem is None and case.get("valid") and result["n"] != case["records"]:
        problem = f"record count {result['n']}, vector {case['records']}"
    return problem

def check_snapshots(case):
    result = {}
    args = (case["tid"], case["version"], hx(case["trusted_root"]))

    def manifest():
        result["n"] = sum(e[2] for e in verify_manifest(hx(case["manifest"]), *args))

    def chunk():
        items = verify_manifest(hx(case["manifest"]), *args)
        result["n"] = verify_chunk(items, case["tid"], case["version"], case["index"], hx(case["chunk"]))
    t = case["type"]
    if t not in ("manifest", "chunk"):
        return f"unknown snapshot case type {t!r}"
    problem = expect(case, run(manifest if t == "manifest" else chunk))
    want = case.get("pairs" if t == "manifest" else "records")
    if problem is None and case.get("valid") and result["n"] != want:
        problem = f"count {result['n']}, vector {want}"
    return problem

CHECKERS = {"snapshots": check_snapshots, "roots": check_roots, "proofs": check_proofs, "history": check_history,
            "digests": check_digests, "exports": check_exports}

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    vdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "letus-verify", "vectors")
    passed = failed = 0
    files = sorted(glob.glob(os.path.join(vdir, "*.json")))
    if not files:
        print(f"no vector files in {vdir}")
        failed += 1
    for fname in files:
        base = os.path.basename(fname)
        with open(fname) as f:
            doc = json.load(f)
        checker = CHECKERS.get(doc.get("kind"))
        if doc.get("spec") != "letus-verify/1" or checker is None:
            print(f"{base}: unknown spec {doc.get('spec')!r} or kind {doc.get('kind')!r}")
            failed += 1
            continue
        for case in doc["cases"]:
            try:
                problem = checker(case)
            except Exception as e:  # a malformed case is a failure, not a crash
                problem = f"exception {type(e).__name__}: {e}"
            if problem:
                print(f"{base}: {case.get('name', '?')}: {problem}")
                failed += 1
            else:
                passed += 1
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1

if __name__ == "__main__":
    sys.exit(main())
