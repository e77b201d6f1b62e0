#!/usr/bin/env node
// letus-verify: command-line full verification of a letus state export (SPEC.md §9.2) against a trusted root.
//
//   letus-verify audit --url URL --tid T --version V --root HEX [--json] [--quiet] [--idle-timeout S]
//   letus-verify audit --file PATH|- --root HEX [--tid T] [--version V] [--json] [--quiet]
//
// The export is streamed chunk by chunk through FullVerifier (memory bounded by one record plus the trie depth),
// never buffered whole. stdout gets exactly one JSON line, the summary:
//   {"ok":true,"tid":0,"version":7,"root":"…","records":N,"bytes":B,"seconds":S,"keys_per_second":K}
//   {"ok":false,"code":"root_mismatch","message":"…",…}
// Exit status: 0 the recomputed root equals --root; 1 verification failed (root_mismatch, truncated, …, or the
// export header names another trie/version: answer_mismatch); 2 bad command line; 3 network error, timeout or
// an error answer of the node.
import { createReadStream } from 'node:fs';
import { FullVerifier, LetusNodeError, LetusVerifyError } from '../src/index.js';
import { errorOf, readCapped } from '../src/http.js';

const USAGE = `usage:
  letus-verify audit --url URL --tid T --version V --root HEX [options]
  letus-verify audit --file PATH|- --root HEX [--tid T] [--version V] [options]

Streams GET URL/v1/tries/T/export?version=V (or a local export file, - for stdin) through the full verifier
and compares the recomputed root with --root, a root you trust (from a validator-signed header, or a digest
you checked against other nodes). The root in the export's own header is never trusted.

options:
  --json              progress on stderr as JSON lines, and no human-readable result line on stderr
  --quiet             no progress and no result line on stderr (the JSON summary still goes to stdout)
  --idle-timeout S    give up when no byte arrives for S seconds (default 60; 0 disables)
  --progress-ms MS    minimum interval between progress reports (default 1000)
  -h, --help          this help

stdout: one JSON line {ok, tid, version, root, records, bytes, seconds, keys_per_second}
        or {ok: false, code, message, ...}
exit:   0 root matches; 1 verification failed; 2 bad command line; 3 network/node error or timeout`;

const EXIT_OK = 0;
const EXIT_VERIFY = 1;
const EXIT_USAGE = 2;
const EXIT_NETWORK = 3;

class CliError extends Error {
  constructor(code, message, exit, extra = {}) {
    super(message);
    this.code = code;
    this.exit = exit;
    this.extra = extra;
  }
}

function usageError(message) {
  return new CliError('bad_input', message, EXIT_USAGE);
}

function parseArgs(argv) {
  const flags = { json: false, quiet: false, idleTimeout: 60, progressMs: 1000 };
  const valued = new Set(['--url', '--file', '--tid', '--version', '--root', '--idle-timeout', '--progress-ms']);
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    let value;
    const eq = a.indexOf('=');
    if (a.startsWith('--') && eq > 0) {
      value = a.slice(eq + 1);
      a = a.slice(0, eq);
    }
    if (a === '-h' || a === '--help') {
      flags.help = true;
    } else if (a === '--json' || a === '--quiet') {
      if (value !== undefined) throw usageError(`${a} takes no value`);
      flags[a.slice(2)] = true;
    } else if (valued.has(a)) {
      if (value === undefined) {
        if (i + 1 >= argv.length) throw usageError(`${a} needs a value`);
        value = argv[++i];
      }
      const name = a.slice(2).replace(/-([a-z])/g, (_, c) => c.toUpperCase());
      if (flags[name] !== undefined && !['idleTimeout', 'progressMs'].includes(name)) throw usageError(`${a} given twice`);
      flags[name] = value;
    } else {
      throw usageError(`unknown argument: ${argv[i]}`);
    }
  }
  return flags;
}

function parseU64(s, what) {
  if (typeof s !== 'string' || !/^[0-9]+$/.test(s)) throw usageError(`${what} must be a decimal integer, got ${JSON.stringify(s)}`);
  const v = BigInt(s);
  if (v > 0xffffffffffffffffn) throw usageError(`${what} is out of range (u64)`);
  return v;
}

function parseU32(s, what) {
  const v = parseU64(s, what);
  if (v > 0xffffffffn) throw usageError(`${what} is out of range (u32)`);
  return Number(v);
}

function parseNumber(s, what) {
  const n = Number(s);
  if (typeof s !== 'string' || s.trim() === '' || !Number.isFinite(n) || n < 0) throw usageError(`${what} must be a non-negative number`);
  return n;
}

function parseRoot(s) {
  if (s === undefined) throw usageError('--root is required: the root you trust for that trie and version');
  const h = s.toLowerCase().replace(/^0x/, '');
  if (!/^[0-9a-f]{64}$/.test(h)) throw usageError(`--root must be 64 hex characters (a 32-byte hash), got ${JSON.stringify(s)}`);
  return h;
}

/** JSON with bigints written as numbers (exact: versions above 2^53 stay exact in the text). */
function jsonLine(obj) {
  return JSON.stringify(obj, (_, v) => (typeof v === 'bigint' ? `@@${v}@@` : v)).replace(/"@@([0-9]+)@@"/g, '$1');
}

function fmtBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

/** Yields the chunks of the source, aborting with a timeout error when nothing arrives for `idleMs`. */
async function* withIdleTimeout(iterable, idleMs, controller) {
  if (!idleMs) {
    yield* iterable;
    return;
  }
  let timer;
  let timedOut = false;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      timedOut = true;
      controller?.abort();
    }, idleMs);
  };
  arm();
  try {
    for await (const chunk of iterable) {
      arm();
      yield chunk;
    }
  } catch (e) {
    if (timedOut) throw new CliError('timeout', `no data for ${idleMs / 1000} s`, EXIT_NETWORK);
    throw e;
  } finally {
    clearTimeout(timer);
  }
  if (timedOut) throw new CliError('timeout', `no data for ${idleMs / 1000} s`, EXIT_NETWORK);
}

async function openSource(flags, tid, version, idleMs) {
  if (flags.file !== undefined) {
    if (flags.file === '-') return { chunks: process.stdin, where: 'stdin' };
    const stream = createReadStream(flags.file, { highWaterMark: 256 * 1024 });
    await new Promise((resolve, reject) => {
      stream.once('open', resolve);
      stream.once('error', (e) => reject(new CliError('io_error', `cannot read ${flags.file}: ${e.message}`, EXIT_USAGE)));
    });
    return { chunks: stream, where: flags.file };
  }
  let base;
  try {
    base = new URL(flags.url);
  } catch {
    throw usageError(`--url is not a URL: ${JSON.stringify(flags.url)}`);
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') throw usageError(`--url must be http(s), got ${base.protocol}`);
  const url = `${flags.url.replace(/\/+$/, '')}/v1/tries/${tid}/export?version=${version}`;
  const controller = new AbortController();
  const headersTimer = idleMs ? setTimeout(() => controller.abort(), idleMs) : undefined;
  let res;
  try {
    res = await fetch(url, { signal: controller.signal });
  } catch (e) {
    const cause = e.cause && e.cause.message ? `: ${e.cause.message}` : '';
    if (controller.signal.aborted) throw new CliError('timeout', `no answer from ${url} within ${idleMs / 1000} s`, EXIT_NETWORK);
    throw new CliError('network', `cannot fetch ${url}: ${e.message}${cause}`, EXIT_NETWORK);
  } finally {
    clearTimeout(headersTimer);
  }
  if (!res.ok) {
    // At most 64 KiB of an error answer, within the idle timeout: a node that trickles its error must not hold
    // the CLI.
    const errCtrl = new AbortController();
    const errTimer = idleMs ? setTimeout(() => errCtrl.abort(), idleMs) : undefined;
    const text = await readCapped(res, 64 * 1024, errCtrl.signal)
      .then((b) => new TextDecoder().decode(b))
      .catch(() => '')
      .finally(() => clearTimeout(errTimer));
    const { code, message: said } = errorOf(text);
    const message = said.slice(0, 500);
    const err = new LetusNodeError(res.status, code, message);
    throw new CliError(code, err.message, EXIT_NETWORK, { status: res.status, url });
  }
  if (!res.body) throw new CliError('network', `empty answer from ${url}`, EXIT_NETWORK);
  return { chunks: res.body, where: url, controller };
}

async function audit(flags) {
  if (flags.url === undefined && flags.file === undefined) throw usageError('give --url URL (a letus node) or --file PATH');
  if (flags.url !== undefined && flags.file !== undefined) throw usageError('give either --url or --file, not both');
  if (flags.url !== undefined && flags.tid === undefined) throw usageError('--tid is required with --url');
  if (flags.url !== undefined && flags.version === undefined) throw usageError('--version is required with --url');
  const root = parseRoot(flags.root);
  const tid = flags.tid === undefined ? undefined : parseU32(flags.tid, '--tid');
  const version = flags.version === undefined ? undefined : parseU64(flags.version, '--version');
  const idleMs = parseNumber(String(flags.idleTimeout), '--idle-timeout') * 1000;
  const progressMs = parseNumber(String(flags.progressMs), '--progress-ms');

  const summary = { ok: false, tid: tid ?? null, version: version ?? null, root, records: 0, bytes: 0, seconds: 0, keys_per_second: 0 };
  const started = process.hrtime.bigint();
  const elapsed = () => Number(process.hrtime.bigint() - started) / 1e9;
  const tty = !flags.json && process.stderr.isTTY;
  let lastReport = 0;
  let progressShown = false;
  const report = ({ records, bytes }, force = false) => {
    if (flags.quiet) return;
    const now = Date.now();
    if (!force && now - lastReport < progressMs) return;
    lastReport = now;
    const s = elapsed();
    const kps = s > 0 ? Math.round(records / s) : 0;
    if (flags.json) {
      process.stderr.write(jsonLine({ progress: { records, bytes, seconds: +s.toFixed(3), keys_per_second: kps } }) + '\n');
    } else {
      const line = `verifying: ${records.toLocaleString('en-US')} records, ${fmtBytes(bytes)}, ${s.toFixed(1)} s, ${kps.toLocaleString('en-US')} keys/s`;
      process.stderr.write(tty ? `\r\x1b[K${line}` : `${line}\n`);
      progressShown = true;
    }
  };
  const endProgressLine = () => {
    if (tty && progressShown) process.stderr.write('\n');
  };

  // The verifier forgets its count once it failed: keep the last one seen.
  let seenRecords = 0;
  const v = new FullVerifier({
    onProgress: (p) => {
      seenRecords = p.records;
      report(p);
    },
  });
  const fill = () => {
    summary.records = Math.max(v.records, seenRecords);
    summary.bytes = v.bytes;
    summary.seconds = +elapsed().toFixed(3);
    summary.keys_per_second = summary.seconds > 0 ? Math.round(summary.records / summary.seconds) : 0;
  };
  try {
    const { chunks, controller } = await openSource(flags, tid, version, idleMs);
    for await (const chunk of withIdleTimeout(chunks, idleMs, controller)) await v.feed(chunk);
    const res = await v.finish(root);
    fill();
    summary.records = res.records;
    const h = res.header;
    if (h) {
      if (summary.tid === null) summary.tid = h.tid;
      if (summary.version === null) summary.version = h.version;
      if (h.tid !== summary.tid || h.version !== summary.version) {
        throw new LetusVerifyError(
          'answer_mismatch',
          `the export's header is about trie ${h.tid} at version ${h.version}, not trie ${summary.tid} at version ${summary.version}`,
        );
      }
    }
    summary.ok = true;
    report({ records: summary.records, bytes: summary.bytes }, true);
    endProgressLine();
    if (!flags.quiet && !flags.json) {
      process.stderr.write(`OK: trie ${summary.tid} at version ${summary.version}: ${summary.records} records (${fmtBytes(summary.bytes)}) recomputed in ${summary.seconds} s, root ${root} matches\n`);
    }
    return { summary, exit: EXIT_OK };
  } catch (e) {
    fill();
    endProgressLine();
    if (v.header) summary.claimed_root = v.header.root;
    let exit = EXIT_VERIFY;
    let code = 'error';
    let message = e && e.message ? e.message : String(e);
    if (e instanceof CliError) {
      code = e.code;
      exit = e.exit;
      Object.assign(summary, e.extra);
    } else if (e instanceof LetusVerifyError) {
      code = e.code;
    } else if (e instanceof LetusNodeError) {
      code = e.code;
      exit = EXIT_NETWORK;
    } else if (e && (e.name === 'TypeError' || e.name === 'AbortError' || e.code === 'ECONNRESET' || e.code === 'UND_ERR_SOCKET')) {
      // The connection failed mid-stream (undici reports "terminated").
      code = 'network';
      exit = EXIT_NETWORK;
      if (e.cause && e.cause.message) message += `: ${e.cause.message}`;
    }
    const { ok: _ok, ...rest } = summary;
    if (!flags.quiet && !flags.json) process.stderr.write(`FAILED (${code}): ${message}\n`);
    return { summary: { ok: false, code, message, ...rest }, exit };
  }
}

async function main() {
  const [cmd, ...rest] = process.argv.slice(2);
  if (cmd === undefined || cmd === '-h' || cmd === '--help' || cmd === 'help') {
    process.stdout.write(USAGE + '\n');
    return cmd === undefined ? EXIT_USAGE : EXIT_OK;
  }
  let result;
  try {
    if (cmd !== 'audit') throw usageError(`unknown command ${JSON.stringify(cmd)} (the only command is audit)`);
    const flags = parseArgs(rest);
    if (flags.help) {
      process.stdout.write(USAGE + '\n');
      return EXIT_OK;
    }
    result = await audit(flags);
  } catch (e) {
    if (!(e instanceof CliError)) throw e;
    process.stderr.write(`letus-verify: ${e.message}\n(letus-verify --help for usage)\n`);
    result = { summary: { ok: false, code: e.code, message: e.message }, exit: e.exit };
  }
  process.stdout.write(jsonLine(result.summary) + '\n');
  return result.exit;
}

main().then(
  // Exit at once: an abandoned export stream must not keep the process alive (stdout to a pipe or file is
  // written synchronously by Node, so nothing is lost).
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`letus-verify: internal error: ${e && e.stack ? e.stack : e}\n`);
    process.stdout.write(jsonLine({ ok: false, code: 'internal', message: String(e && e.message ? e.message : e) }) + '\n');
    process.exit(1);
  },
);
