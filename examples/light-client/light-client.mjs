#!/usr/bin/env node
// A light client that follows several letus nodes and trusts none of them (see README.md).
//
// Each round, for every node: GET /v1/digest → DigestMonitor (SPEC.md §7.1: agreement, fork, rollback, checkpoint
// conflict); when a node moved forward, GET /v1/digest/consistency from the last digest of it we accepted, verified
// (SPEC.md §8.3: its new history extends the old one, so nothing was rewritten between); nodes at different heights
// are cross-checked at the lowest common version (GET /v1/digest/{v}); and each watched key is read with
// LetusClient.getVerified against the root just accepted.
//
// stdout: one JSON object per line (events, then a final {"event":"summary"}); stderr: a readable log.
// Exit: 0 no alarm; 1 an alarm (fork, rollback, checkpoint_conflict, inconsistent_history, bad_proof); 2 bad usage.

import { parseArgs } from 'node:util';

// The package when installed (npm install letus-verify), else the copy of this repository.
let lv;
try {
  lv = await import('letus-verify');
} catch {
  lv = await import(new URL('../../js/src/index.js', import.meta.url));
}
const { DigestMonitor, LetusClient, LetusNodeError, LetusVerifyError, digestFromJson, toHex } = lv;

const USAGE = `usage: node light-client.mjs --node URL --node URL [...] [options]

  --node URL          a node to follow (repeat; two or more to detect forks)
  --tid T             a trie to follow (repeat; default: every trie the nodes report)
  --watch KEY         a key (hex) to read with a verified proof each round (repeat); the key is read in the
                      first followed trie, or give TID:KEY
  --checkpoint JSON   a digest you trust, e.g. from a validator-signed header: '{"tid":0,"version":7,...}' (repeat)
  --interval-ms MS    pause between rounds (default 2000)
  --rounds N          stop after N rounds (default 0: run until an alarm or SIGINT)
  --timeout-ms MS     per-request timeout (default 10000)
  --keep-going        do not stop at the first round with an alarm (the exit status is still 1)
  --quiet             no log on stderr (the JSON lines on stdout remain)
  -h, --help`;

function usage(msg) {
  if (msg) process.stderr.write(`light-client: ${msg}\n`);
  process.stderr.write(USAGE + '\n');
  process.exit(2);
}

let opts;
try {
  opts = parseArgs({
    options: {
      node: { type: 'string', multiple: true, default: [] },
      tid: { type: 'string', multiple: true, default: [] },
      watch: { type: 'string', multiple: true, default: [] },
      checkpoint: { type: 'string', multiple: true, default: [] },
      'interval-ms': { type: 'string', default: '2000' },
      rounds: { type: 'string', default: '0' },
      'timeout-ms': { type: 'string', default: '10000' },
      'keep-going': { type: 'boolean', default: false },
      quiet: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  }).values;
} catch (e) {
  usage(e.message);
}
if (opts.help) {
  process.stdout.write(USAGE + '\n');
  process.exit(0);
}
const intOpt = (name) => {
  const s = opts[name];
  if (!/^[0-9]+$/.test(s)) usage(`--${name} must be a non-negative integer`);
  return Number(s);
};
const intervalMs = intOpt('interval-ms');
const rounds = intOpt('rounds');
const timeoutMs = intOpt('timeout-ms');
const nodes = opts.node.map((u) => u.replace(/\/+$/, ''));
if (nodes.length === 0) usage('give at least one --node URL (two or more to detect forks)');
if (new Set(nodes).size !== nodes.length) usage('the same --node twice');
const tids = opts.tid.map((t) => {
  if (!/^[0-9]+$/.test(t) || Number(t) > 0xffffffff) usage(`bad --tid ${t}`);
  return Number(t);
});
const watched = opts.watch.map((w) => {
  const m = /^(?:([0-9]+):)?((?:[0-9a-fA-F]{2})+)$/.exec(w);
  if (!m) usage(`bad --watch ${w}: hex key, or TID:hexkey`);
  return { tid: m[1] === undefined ? (tids[0] ?? 0) : Number(m[1]), key: m[2].toLowerCase() };
});

const monitor = new DigestMonitor();
for (const c of opts.checkpoint) {
  try {
    monitor.addCheckpoint(digestFromJson(JSON.parse(c)));
  } catch (e) {
    usage(`bad --checkpoint: ${e.message}`);
  }
}

// ------------------------------------------------------------------------------------------------ output

const alarms = [];
const errors = [];
const jsonText = (o) => JSON.stringify(o, (_, v) => (typeof v === 'bigint' ? (v <= Number.MAX_SAFE_INTEGER ? Number(v) : String(v)) : v));
function emit(event) {
  process.stdout.write(jsonText(event) + '\n');
}
function log(msg) {
  if (!opts.quiet) process.stderr.write(`[${new Date().toISOString()}] ${msg}\n`);
}
const short = (h) => `${h.slice(0, 12)}…`;
function alarm(kind, source, details, message) {
  const a = { event: 'alarm', kind, source, ...details, message };
  alarms.push(a);
  emit(a);
  log(`ALARM ${kind}: ${message}`);
}

// A fetch with a timeout, so a node that hangs cannot stall the client.
const timedFetch = (url, init = {}) => fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
const clients = new Map(nodes.map((u) => [u, new LetusClient(u, { fetch: timedFetch })]));

// The last digest of each (node, tid) that passed the monitor and, from the second on, a consistency proof.
const accepted = new Map(); // `${node}\n${tid}` -> Digest

function describe(e) {
  if (e instanceof LetusNodeError) return { code: e.code, status: e.status, message: e.message };
  if (e instanceof LetusVerifyError) return { code: e.code, message: e.message };
  const cause = e && e.cause && e.cause.message ? `: ${e.cause.message}` : '';
  return { code: e && e.name === 'TimeoutError' ? 'timeout' : 'network', message: `${e && e.message}${cause}` };
}
function nodeError(source, what, e) {
  const d = { event: 'error', source, what, ...describe(e) };
  errors.push(d);
  emit(d);
  log(`error from ${source} (${what}): ${d.message}`);
}

const sameDigest = (a, b) =>
  a.tid === b.tid && a.version === b.version && a.root === b.root && a.history_len === b.history_len && a.history_root === b.history_root;

/** Feeds one digest to the monitor; returns true when it is no alarm. */
function observe(source, d, extra = {}) {
  const r = monitor.observe(source, d);
  emit({ event: 'digest', source, ...extra, tid: d.tid, version: d.version, root: d.root, history_len: d.history_len, report: r.code });
  if (!r.alarm) {
    log(`${source}: trie ${d.tid} v${d.version} root ${short(d.root)} → ${r.code}`);
    return true;
  }
  const details = { tid: d.tid, version: d.version, root: d.root, history_len: d.history_len };
  if (r.code === 'rollback') {
    details.previous = { version: r.previous.version, root: r.previous.root, history_len: r.previous.history_len };
    alarm('rollback', source, details, `${source} went back from version ${r.previous.version} to ${d.version} (trie ${d.tid})`);
  } else {
    const other = r.conflictsWith;
    details.conflicts_with = { source: other.source ?? 'checkpoint', version: other.digest.version, root: other.digest.root, history_len: other.digest.history_len };
    alarm(
      r.code,
      source,
      details,
      `${source} reports trie ${d.tid} v${d.version} root ${short(d.root)} (history_len ${d.history_len}), ` +
        `but ${other.source ?? 'a checkpoint'} reported v${other.digest.version} root ${short(other.digest.root)} (history_len ${other.digest.history_len})`,
    );
  }
  return false;
}

async function followNode(url) {
  const client = clients.get(url);
  let ds;
  try {
    ds = await client.digests();
  } catch (e) {
    nodeError(url, 'digest', e);
    return [];
  }
  const out = [];
  for (const d of ds) {
    if (tids.length && !tids.includes(d.tid)) continue;
    if (!observe(url, d)) continue;
    const k = `${url}\n${d.tid}`;
    const prev = accepted.get(k);
    if (prev && (d.version > prev.version || d.history_len > prev.history_len)) {
      // The node moved forward: its new history must extend the one we accepted before (SPEC.md §8.3).
      try {
        const newer = await client.consistency(prev, d.version);
        if (!sameDigest(newer, d)) throw new LetusVerifyError('answer_mismatch', `consistency proof ends at another digest (v${newer.version} root ${short(newer.root)})`);
        emit({ event: 'consistency', source: url, tid: d.tid, from: prev.version, to: d.version, ok: true });
        log(`${url}: history v${prev.version} → v${d.version} consistent`);
      } catch (e) {
        if (e instanceof LetusVerifyError) {
          alarm('inconsistent_history', url, { tid: d.tid, from: prev.version, to: d.version, code: e.code }, `${url}: history at v${d.version} does not extend v${prev.version}: ${e.message}`);
          continue;
        }
        nodeError(url, 'consistency', e);
        continue; // not accepted; retried next round from the same digest
      }
    }
    if (!prev || d.version >= prev.version) accepted.set(k, d);
    out.push(d);
  }
  return out;
}

/** Nodes at different heights only conflict at a shared version: ask the higher ones for the lowest one. */
async function crossCheck(latest) {
  const byTid = new Map();
  for (const [url, ds] of latest) for (const d of ds) {
    if (!byTid.has(d.tid)) byTid.set(d.tid, []);
    byTid.get(d.tid).push({ url, d });
  }
  for (const [tid, list] of byTid) {
    if (list.length < 2) continue;
    const min = list.reduce((m, x) => (x.d.version < m ? x.d.version : m), list[0].d.version);
    for (const { url, d } of list) {
      if (d.version === min) continue;
      try {
        const at = (await clients.get(url).digests(min)).find((x) => x.tid === tid);
        // A separate source name per version: an older version asked for explicitly is no rollback.
        if (at) observe(`${url}@v${min}`, at, { node: url, lookup: true });
      } catch (e) {
        nodeError(url, `digest at v${min}`, e);
      }
    }
  }
}

async function readWatched(url, latest) {
  const client = clients.get(url);
  for (const w of watched) {
    const d = latest.find((x) => x.tid === w.tid);
    if (!d) continue;
    try {
      // Verified against the root the monitor accepted for this node (not against the answer's own digest).
      const r = await client.getVerified(w.tid, w.key, { version: d.version, trustedRoot: d.root });
      const value = r.value === null ? null : toHex(r.value);
      emit({ event: 'key', source: url, tid: w.tid, key: w.key, version: d.version, present: r.present, value });
      log(`${url}: key ${w.key} @v${d.version} = ${value ?? '(absent)'} (proof verified)`);
    } catch (e) {
      if (e instanceof LetusVerifyError) {
        alarm('bad_proof', url, { tid: w.tid, key: w.key, version: d.version, code: e.code }, `${url}: proof for key ${w.key} at v${d.version} fails: ${e.message}`);
      } else {
        nodeError(url, `key ${w.key}`, e);
      }
    }
  }
}

let stop = false;
process.on('SIGINT', () => {
  stop = true;
});
process.on('SIGTERM', () => {
  stop = true;
});

let round = 0;
while (!stop && (rounds === 0 || round < rounds)) {
  round++;
  const before = alarms.length;
  const latest = new Map();
  for (const url of nodes) latest.set(url, await followNode(url));
  await crossCheck(latest);
  for (const url of nodes) await readWatched(url, latest.get(url));
  const versions = Object.fromEntries([...latest].map(([u, ds]) => [u, ds.map((d) => ({ tid: d.tid, version: d.version, root: d.root }))]));
  emit({ event: 'round', round, alarms: alarms.length - before, nodes: versions });
  if (alarms.length > before && !opts['keep-going']) break;
  if (stop || (rounds !== 0 && round >= rounds)) break;
  await new Promise((r) => setTimeout(r, intervalMs));
}

const ok = alarms.length === 0;
emit({ event: 'summary', ok, rounds: round, alarms: alarms.map((a) => a.kind), errors: errors.length });
log(ok ? `done: ${round} round(s), no alarm (${errors.length} node error(s))` : `ALARM: ${alarms.map((a) => a.kind).join(', ')}`);
process.exit(ok ? 0 : 1);
