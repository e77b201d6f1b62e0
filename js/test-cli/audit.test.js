// `letus-verify audit` (bin/letus-verify.js) and examples/auditor/audit.sh against a real `letus serve` node.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AUDIT_SH, CLI, cleanup, getJson, postBlock, run, startNode, startProxy, writesFor, hex } from './helpers.js';

const VERIFY_CODES = new Set(['root_mismatch', 'truncated', 'out_of_order', 'duplicate_key', 'count_mismatch', 'unknown_tag', 'too_large', 'bad_magic', 'trailing_data', 'unsupported_format']);

let node;
const roots = {};
const HEADER = 8 + 1 + 4 + 8 + 32;

function audit(args, opts) {
  return run(process.execPath, [CLI, 'audit', ...args], { timeoutMs: 60000, ...opts });
}
function summaryOf(r) {
  const lines = r.stdout.trim().split('\n');
  assert.equal(lines.length, 1, `one JSON line on stdout, got: ${r.stdout}\nstderr: ${r.stderr}`);
  return JSON.parse(lines[0]);
}

before(async () => {
  node = await startNode();
  // v1: 300 keys; v2: 200 more, 10 deleted, 20 updated; v3: 100 more → 590 keys.
  await postBlock(node.url, 1, writesFor(0, 300, 'a'));
  const w2 = [...writesFor(300, 200, 'a'), ...writesFor(0, 20, 'b')];
  for (let i = 100; i < 110; i++) w2.push({ tid: 0, key: hex(`key-${i}`), value: null });
  await postBlock(node.url, 2, w2);
  await postBlock(node.url, 3, writesFor(500, 100, 'c'));
  for (const v of [1, 2, 3]) roots[v] = (await getJson(`${node.url}/v1/digest/${v}`)).digests[0].root;
});

after(cleanup);

describe('letus-verify audit', () => {
  it('exits 0 with the right root and reports the record count', async () => {
    for (const [v, n] of [[1, 300], [3, 590]]) {
      const r = await audit(['--url', node.url, '--tid', '0', '--version', String(v), '--root', roots[v]]);
      assert.equal(r.code, 0, r.stderr);
      const s = summaryOf(r);
      assert.equal(s.ok, true);
      assert.equal(s.tid, 0);
      assert.equal(s.version, v);
      assert.equal(s.root, roots[v]);
      assert.equal(s.records, n);
      assert.ok(s.bytes > HEADER + n * 9);
      assert.equal(typeof s.seconds, 'number');
      assert.equal(typeof s.keys_per_second, 'number');
      assert.match(r.stderr, /OK: trie 0 at version/);
    }
  });

  it('--json keeps stderr machine-readable', async () => {
    const r = await audit(['--url', node.url, '--tid', '0', '--version', '3', '--root', roots[3].toUpperCase(), '--json', '--progress-ms', '0']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(summaryOf(r).records, 590);
    const progress = r.stderr.trim().split('\n').map((l) => JSON.parse(l));
    assert.ok(progress.length >= 1 && progress.every((p) => typeof p.progress.records === 'number'));
  });

  it('exits non-zero with a wrong root (root_mismatch)', async () => {
    // The root of another version: a real root, only not this one.
    const r = await audit(['--url', node.url, '--tid', '0', '--version', '3', '--root', roots[2]]);
    assert.equal(r.code, 1);
    const s = summaryOf(r);
    assert.equal(s.ok, false);
    assert.equal(s.code, 'root_mismatch');
    assert.equal(s.records, 590);
    assert.equal(s.claimed_root, roots[3]);
    assert.match(r.stderr, /FAILED \(root_mismatch\)/);
  });

  it('rejects bad input with exit 2 and a clear message', async () => {
    const cases = [
      [['--url', node.url, '--tid', '0', '--version', '3', '--root', 'abcd'], /--root must be 64 hex/],
      [['--url', node.url, '--tid', '0', '--version', 'x', '--root', roots[3]], /--version must be a decimal integer/],
      [['--url', node.url, '--version', '3', '--root', roots[3]], /--tid is required/],
      [['--url', node.url, '--tid', '0', '--version', '3'], /--root is required/],
      [['--url', 'not a url', '--tid', '0', '--version', '3', '--root', roots[3]], /--url is not a URL/],
      [['--bogus'], /unknown argument/],
    ];
    for (const [args, re] of cases) {
      const r = await audit(args);
      assert.equal(r.code, 2, `${args}: ${r.stderr}`);
      assert.match(r.stderr, re);
      assert.equal(summaryOf(r).code, 'bad_input');
    }
    const u = await run(process.execPath, [CLI, 'frobnicate']);
    assert.equal(u.code, 2);
  });

  it('exits 3 on a network error or an error answer of the node', async () => {
    const nf = await audit(['--url', node.url, '--tid', '0', '--version', '99', '--root', roots[3]]);
    assert.equal(nf.code, 3);
    assert.equal(summaryOf(nf).code, 'version_not_found');
    // A port that was just free: nothing listens there.
    const p = await startProxy(node.url);
    const deadUrl = p.url;
    await new Promise((r) => p.server.close(r));
    const dead = await audit(['--url', deadUrl, '--tid', '0', '--version', '3', '--root', roots[3]]);
    assert.equal(dead.code, 3, dead.stderr);
    assert.equal(summaryOf(dead).code, 'network');
  });

  it('a proxy that flips a value byte of the export → root_mismatch', async () => {
    let flipped = -1;
    const proxy = await startProxy(node.url, (req, res, forward) => {
      if (!req.url.includes('/export')) return forward();
      // The first record starts right after the header: 0x01 ‖ u32 key_len ‖ u32 value_len ‖ key ‖ value.
      return forward((chunk, offset) => {
        const c = Buffer.from(chunk);
        const start = HEADER - offset;
        if (flipped < 0 && start >= 0 && start + 9 <= c.length) {
          const klen = c.readUInt32LE(start + 1);
          const vlen = c.readUInt32LE(start + 5);
          const at = start + 9 + klen + vlen - 1; // last byte of the first value
          if (vlen > 0 && at < c.length) {
            c[at] ^= 0x01;
            flipped = offset + at;
          }
        }
        return c;
      });
    });
    const r = await audit(['--url', proxy.url, '--tid', '0', '--version', '3', '--root', roots[3]]);
    assert.ok(flipped > HEADER, 'the proxy flipped a byte');
    assert.equal(r.code, 1, r.stderr);
    const s = summaryOf(r);
    assert.equal(s.ok, false);
    assert.equal(s.code, 'root_mismatch');
  });

  it('a proxy that flips a byte in the middle of the stream → a verification code', async () => {
    for (const target of [HEADER + 1, HEADER + 5, 2000, 5000]) {
      const proxy = await startProxy(node.url, (req, res, forward) =>
        forward((chunk, offset) => {
          const c = Buffer.from(chunk);
          if (target >= offset && target < offset + c.length) c[target - offset] ^= 0x80;
          return c;
        }),
      );
      const r = await audit(['--url', proxy.url, '--tid', '0', '--version', '3', '--root', roots[3]]);
      assert.notEqual(r.code, 0, `byte ${target}`);
      const s = summaryOf(r);
      assert.equal(s.ok, false);
      assert.ok(VERIFY_CODES.has(s.code), `byte ${target}: code ${s.code} (${s.message})`);
    }
  });

  it('a proxy that cuts the stream → truncated; one that rewrites only the header root → still ok', async () => {
    const cut = await startProxy(node.url, (req, res, forward) =>
      forward((chunk, offset) => (offset >= 3000 ? null : chunk.subarray(0, Math.max(0, 3000 - offset)))),
    );
    const r = await audit(['--url', cut.url, '--tid', '0', '--version', '3', '--root', roots[3]]);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(summaryOf(r).code, 'truncated');

    // The header root is what the exporter claims, never trusted: only the recomputed root matters.
    const hdr = await startProxy(node.url, (req, res, forward) =>
      forward((chunk, offset) => {
        const c = Buffer.from(chunk);
        if (offset <= 21 && offset + c.length > 21) c[21 - offset] ^= 0xff;
        return c;
      }),
    );
    const ok = await audit(['--url', hdr.url, '--tid', '0', '--version', '3', '--root', roots[3]]);
    assert.equal(ok.code, 0, ok.stderr);
    const s = summaryOf(ok);
    assert.equal(s.records, 590);
  });

  it('examples/auditor/audit.sh passes and fails like the CLI', async () => {
    const good = await run('sh', [AUDIT_SH, node.url, '0', '3', roots[3]]);
    assert.equal(good.code, 0, good.stderr);
    assert.equal(JSON.parse(good.stdout.trim()).records, 590);
    const bad = await run('sh', [AUDIT_SH], {
      env: { LETUS_URL: node.url, LETUS_TID: '0', LETUS_VERSION: '3', LETUS_TRUSTED_ROOT: roots[1] },
    });
    assert.equal(bad.code, 1, bad.stderr);
    assert.equal(JSON.parse(bad.stdout.trim()).code, 'root_mismatch');
    const usage = await run('sh', [AUDIT_SH], { env: { LETUS_URL: '', LETUS_VERSION: '', LETUS_TRUSTED_ROOT: '' } });
    assert.equal(usage.code, 2);
  });
});
