// The letus wallet page: balances verified in the browser by letus-verify (WebAssembly), no framework.
// Served by the node itself (`letus serve --static /wallet=examples/wallet --static /js=js`, or `letus demo`),
// so it talks to the same origin. `?poll=MS` sets how often /v1/digest is polled (default 5000 ms).
import { LetusClient, DigestMonitor, LetusVerifyError, LetusNodeError, toHex } from '/js/src/index.js';

const TID = 0; // demo accounts live in trie 0
const ALARMS = new Set(['fork', 'rollback', 'checkpoint_conflict']);
const POLL_MS = Number(new URLSearchParams(location.search).get('poll')) || 5000;

const monitor = new DigestMonitor();
// Every digest in an answer (lookups and polls) goes through the monitor; an alarm rejects with its code.
const client = new LetusClient(location.origin, { monitor });
const $ = (id) => document.getElementById(id);
let alarm = null; // once the node forked or rolled back, nothing it says is shown any more
let lookups = 0;

/** "1" → "acct/00000001" (the demo's account keys); anything else is the key itself, as text. */
function accountKey(input) {
  const s = input.trim();
  return /^\d{1,8}$/.test(s) ? `acct/${s.padStart(8, '0')}` : s;
}

/** Balances are 8-byte little-endian u64; anything else is shown as hex. */
function formatValue(value) {
  if (value.length === 8) return new DataView(value.buffer, value.byteOffset, 8).getBigUint64(0, true).toString();
  return `0x${toHex(value)}`;
}

function setState(el, state, text, code) {
  el.dataset.state = state;
  if (code) el.dataset.code = code;
  else delete el.dataset.code;
  el.textContent = text;
}

function showAlarm(code, message) {
  alarm = alarm || { code, message };
  const what = {
    fork: 'FORK: the node reported two different roots for the same version.',
    rollback: 'ROLLBACK: the node went back to an older version than it reported before.',
    checkpoint_conflict: 'The node contradicts your trusted checkpoint.',
  }[alarm.code];
  $('balance').textContent = '';
  setState($('status'), alarm.code, `⚠ ${what} Do not trust this node. (${alarm.code}: ${alarm.message})`, alarm.code);
  setState($('monitor'), alarm.code, `⚠ Digest monitor alarm: ${alarm.code}`, alarm.code);
}

async function lookup(event) {
  event.preventDefault();
  if (alarm) return showAlarm();
  const key = accountKey($('account').value);
  if (!key) return;
  const opts = {};
  const version = $('version').value.trim();
  const root = $('root').value.trim();
  if (version && !/^\d+$/.test(version)) return setState($('status'), 'error', 'The version must be a number.', 'bad_version');
  if (version) opts.version = version;
  if (root) opts.trustedRoot = root;
  const mine = ++lookups;
  $('balance').textContent = '';
  delete $('status').dataset.version;
  setState($('status'), 'loading', `Looking up ${key}…`);
  try {
    // A lookup at an older version is observed under its own source name: the monitor still sees a fork (another
    // root for a version it knows), but an old version on purpose is not the node rolling back.
    const c = version ? new LetusClient(location.origin, { monitor, source: `${location.origin} at version ${version}` }) : client;
    const r = await c.getVerified(TID, new TextEncoder().encode(key), opts);
    if (mine !== lookups) return; // a newer lookup was started
    if (alarm) return showAlarm();
    const against = r.trusted ? 'your trusted root' : `the node's digest (root ${r.digest.root.slice(0, 16)}…)`;
    $('balance').textContent = r.present ? formatValue(r.value) : 'no such account';
    $('status').dataset.version = String(r.version);
    $('status').dataset.trusted = String(r.trusted);
    setState(
      $('status'),
      'verified',
      `✓ ${key}: ${r.present ? 'balance' : 'absence'} verified at version ${r.version} against ${against}.`,
    );
  } catch (e) {
    if (mine !== lookups) return;
    if (e instanceof LetusVerifyError && ALARMS.has(e.code)) return showAlarm(e.code, e.message);
    $('balance').textContent = '';
    if (e instanceof LetusVerifyError) {
      setState($('status'), 'failed', `✗ The proof did NOT verify (${e.code}): the node's answer is not shown. ${e.message}`, e.code);
    } else if (e instanceof LetusNodeError) {
      setState($('status'), 'error', `The node answered with an error (${e.code}): ${e.message}`, e.code);
    } else {
      setState($('status'), 'error', `Cannot reach the node: ${e.message}`, 'network');
    }
  }
}

let polls = 0;
async function poll() {
  try {
    const ds = await client.digests(); // each digest is observed by the monitor
    polls += 1;
    const d = ds.find((x) => x.tid === TID);
    if (!alarm) {
      const latest = d ? `latest version ${d.version}, root ${d.root.slice(0, 16)}…` : `no trie ${TID} yet`;
      setState($('monitor'), 'ok', `Digest monitor: ${polls} polls, no fork or rollback seen; ${latest}`);
    }
  } catch (e) {
    if (e instanceof LetusVerifyError && ALARMS.has(e.code)) showAlarm(e.code, e.message);
    else if (!alarm) setState($('monitor'), 'unreachable', `Digest monitor: cannot read /v1/digest (${e.code || e.message})`, e.code);
  }
  if (!alarm) setTimeout(poll, POLL_MS);
}

$('lookup').addEventListener('submit', lookup);
poll();
