// Real-browser test of examples/wallet: the real `letus serve` binary, headless Chromium (Debian's
// /usr/bin/chromium through playwright-core), and a tampering proxy. Run: node --test test-browser/
// Env: LETUS_BIN (default <repo>/target/release/letus), CHROMIUM (default /usr/bin/chromium).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { proofFromJson, toHex, verifyProof } from '../src/index.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const LETUS_BIN = path.resolve(REPO, process.env.LETUS_BIN || 'target/release/letus');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TOKEN = 't';
const STEP_MS = 15_000; // longest wait for one thing on the page

const hex = (s) => Buffer.from(s).toString('hex');
const u64le = (n) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(n));
  return b.toString('hex');
};
const acct = (i) => `acct/${String(i).padStart(8, '0')}`;

// ------------------------------------------------------------------ the node

const procs = []; // everything started here, killed in after() and on exit
process.on('exit', () => {
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});

async function startNode(dataDir) {
  const args = ['serve', '--listen', '127.0.0.1:0', '--data', dataDir, '--token', TOKEN,
    '--static', `/wallet=${path.join(REPO, 'examples/wallet')}`, '--static', `/js=${path.join(REPO, 'js')}`];
  const child = spawn(LETUS_BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RUST_LOG: 'warn' } });
  procs.push(child);
  let stderr = '';
  child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-4000); });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`letus serve did not start in 20 s: ${stderr}`)), 20_000);
    child.once('error', (e) => { clearTimeout(timer); reject(e); });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`letus serve exited (${code}): ${stderr}`)); });
    readline.createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer);
      const m = /^letus node on (http:\/\/127\.0\.0\.1:\d+)/.exec(line);
      m ? resolve(m[1]) : reject(new Error(`unexpected first line: ${line}`));
    });
  });
  return { child, url };
}

async function stopProcess(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

async function postBlock(base, version, writes) {
  const res = await fetch(`${base}/v1/blocks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ version, writes: writes.map(([k, v]) => ({ tid: 0, key: hex(k), value: u64le(v) })) }),
    signal: AbortSignal.timeout(STEP_MS),
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return JSON.parse(text).digests.find((d) => d.tid === 0);
}

// ------------------------------------------------------------------ the tampering proxy

/** Alters the node's answers; each case gets its own proxy (its own origin). */
const TAMPER = {
  // the balance claimed for the key is not the proved one
  value: (a) => { if (a.value) a.value = u64le(1_000_000); },
  // one hash inside the proof changed, binary and JSON forms kept consistent
  proof: (a) => {
    const rec = a.proof.records.find((r) => r.hashes && r.hashes.length > 0);
    const h = rec.hashes[0];
    rec.hashes[0] = (h[0] === '0' ? '1' : '0') + h.slice(1);
    a.proof_hex = toHex(proofFromJson(a.proof));
  },
  // the proof cut short, inside its first hash (binary form only)
  truncated: (a) => { delete a.proof; a.proof_hex = a.proof_hex.slice(0, 40); },
};

async function startProxy(target, mode) {
  let digestCalls = 0;
  const server = http.createServer(async (req, res) => {
    try {
      const url = new URL(req.url, target);
      let upstream = url.pathname + url.search;
      if (mode === 'rollback' && url.pathname === '/v1/digest' && ++digestCalls > 1) upstream = '/v1/digest/1';
      const chunks = [];
      for await (const c of req) chunks.push(c);
      const headers = {};
      for (const h of ['content-type', 'authorization']) if (req.headers[h]) headers[h] = req.headers[h];
      const up = await fetch(new URL(upstream, target), {
        method: req.method,
        headers,
        body: chunks.length ? Buffer.concat(chunks) : undefined,
        signal: AbortSignal.timeout(STEP_MS),
      });
      let body = Buffer.from(await up.arrayBuffer());
      const tamper = TAMPER[mode];
      if (tamper && up.ok && req.method === 'GET' && url.pathname.startsWith('/v1/tries/')) {
        const a = JSON.parse(body);
        tamper(a);
        body = Buffer.from(JSON.stringify(a));
      }
      if (mode === 'fork' && up.ok && url.pathname === '/v1/digest') {
        const a = JSON.parse(body); // another root for the same version
        for (const d of a.digests) d.root = (d.root[0] === 'f' ? '0' : 'f') + d.root.slice(1);
        body = Buffer.from(JSON.stringify(a));
      }
      res.writeHead(up.status, {
        'content-type': up.headers.get('content-type') || 'application/octet-stream',
        'cache-control': 'no-store',
      });
      res.end(body);
    } catch (e) {
      res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(String(e));
    }
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, server };
}

function closeServer(server) {
  server.closeAllConnections();
  return new Promise((r) => server.close(r));
}

// ------------------------------------------------------------------ the page

async function openWallet(context, base) {
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e));
  await page.goto(`${base}/wallet/index.html?poll=300`);
  // the module has loaded and polled /v1/digest once
  await page.waitForFunction(() => document.getElementById('monitor').dataset.state !== 'starting');
  page.on('console', (m) => process.env.WALLET_DEBUG && console.error('[page]', m.text()));
  page.errors = errors;
  return page;
}

async function lookUp(page, account, { version = '', root = '' } = {}) {
  await page.evaluate(() => {
    document.getElementById('status').dataset.state = 'idle';
    document.querySelector('details').open = true;
  });
  await page.fill('#account', String(account));
  await page.fill('#version', String(version));
  await page.fill('#root', root);
  await page.click('#go');
  await page.waitForFunction(() => !['idle', 'loading'].includes(document.getElementById('status').dataset.state));
  return page.evaluate(() => {
    const s = document.getElementById('status');
    return {
      state: s.dataset.state,
      code: s.dataset.code,
      version: s.dataset.version,
      trusted: s.dataset.trusted,
      text: s.textContent,
      balance: document.getElementById('balance').textContent,
    };
  });
}

// ------------------------------------------------------------------ the tests

describe('wallet page in headless Chromium', { timeout: 180_000 }, () => {
  let node, dataDir, profileDir, context;
  const roots = {};
  const proxies = [];

  before(async () => {
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'letus-wallet-data-'));
    profileDir = await mkdtemp(path.join(os.tmpdir(), 'letus-wallet-chromium-'));
    node = await startNode(dataDir);
    // version 1: 10,000 accounts with 1000 each; then two blocks of transfers
    const genesis = Array.from({ length: 10_000 }, (_, i) => [acct(i), 1000]);
    roots[1] = (await postBlock(node.url, 1, genesis)).root;
    roots[2] = (await postBlock(node.url, 2, [[acct(1), 750], [acct(2), 1250]])).root;
    roots[3] = (await postBlock(node.url, 3, [[acct(1), 700], [acct(3), 1050]])).root;
    context = await chromium.launchPersistentContext(profileDir, {
      executablePath: CHROMIUM,
      headless: true,
      timeout: 30_000,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync',
        // nothing but 127.0.0.1 resolves
        '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1'],
    });
  });

  after(async () => {
    await context?.close().catch(() => {});
    await Promise.all(proxies.map(closeServer));
    if (node) await stopProcess(node.child);
    for (const d of [dataDir, profileDir]) if (d) await rm(d, { recursive: true, force: true });
  });

  const proxied = async (mode) => {
    const p = await startProxy(node.url, mode);
    proxies.push(p.server);
    return p.url;
  };

  test('honest node: balances are shown verified at the right version', async () => {
    const page = await openWallet(context, node.url);
    try {
      let r = await lookUp(page, 1);
      assert.deepEqual([r.state, r.balance, r.version, r.trusted], ['verified', '700', '3', 'false'], r.text);
      assert.match(r.text, /verified at version 3/);
      r = await lookUp(page, 2, { version: 1 });
      assert.deepEqual([r.state, r.balance, r.version], ['verified', '1000', '1'], r.text);
      r = await lookUp(page, 'acct/00000003');
      assert.deepEqual([r.state, r.balance, r.version], ['verified', '1050', '3'], r.text);
      r = await lookUp(page, 99999); // acct/00099999 was never written: its absence is proved
      assert.deepEqual([r.state, r.balance, r.version], ['verified', 'no such account', '3'], r.text);
      // against a trusted checkpoint root
      r = await lookUp(page, 2, { version: 2, root: roots[2] });
      assert.deepEqual([r.state, r.balance, r.version, r.trusted], ['verified', '1250', '2', 'true'], r.text);
      r = await lookUp(page, 2, { version: 2, root: roots[1] });
      assert.deepEqual([r.state, r.code, r.balance], ['failed', 'root_mismatch', ''], r.text);
      // an error of the node itself is not a verification failure
      r = await lookUp(page, 1, { version: 9 });
      assert.deepEqual([r.state, r.code], ['error', 'version_not_found'], r.text);
      const monitor = await page.$eval('#monitor', (e) => e.dataset.state);
      assert.equal(monitor, 'ok');
      assert.deepEqual(page.errors, []);
    } finally {
      await page.close();
    }
  });

  for (const [mode, code] of [['value', 'root_mismatch'], ['proof', 'root_mismatch'], ['truncated', 'truncated']]) {
    test(`tampering proxy (${mode}): the page shows the failure, not the balance`, async () => {
      const page = await openWallet(context, await proxied(mode));
      try {
        const r = await lookUp(page, 1);
        assert.deepEqual([r.state, r.code, r.balance], ['failed', code, ''], r.text);
        assert.ok(r.text.includes(code), r.text);
        assert.ok(!r.text.includes('1000000') && !r.text.includes('700'), r.text);
      } finally {
        await page.close();
      }
    });
  }

  test('proxy reporting another root for the same version: fork warning', async () => {
    const page = await openWallet(context, await proxied('fork'));
    try {
      await page.fill('#account', '1');
      await page.click('#go');
      await page.waitForFunction(() => document.getElementById('status').dataset.state === 'fork');
      const s = await page.evaluate(() => ({
        status: document.getElementById('status').textContent,
        monitor: document.getElementById('monitor').dataset.state,
        balance: document.getElementById('balance').textContent,
      }));
      assert.equal(s.monitor, 'fork');
      assert.equal(s.balance, '');
      assert.match(s.status, /FORK/);
    } finally {
      await page.close();
    }
  });

  test('proxy going back to an older version: rollback warning', async () => {
    const page = await openWallet(context, await proxied('rollback'));
    try {
      await page.waitForFunction(() => document.getElementById('status').dataset.state === 'rollback');
      assert.equal(await page.$eval('#monitor', (e) => e.dataset.state), 'rollback');
    } finally {
      await page.close();
    }
  });

  test('benchmark: verifyProof per second, Chromium and Node.js', async (t) => {
    const a = await (await fetch(`${node.url}/v1/tries/0/keys/${hex(acct(1))}`)).json();
    const DURATION_MS = 2000;
    const page = await openWallet(context, node.url);
    let browser;
    try {
      browser = await page.evaluate(async ({ a, DURATION_MS }) => {
        const m = await import('/js/src/index.js');
        const key = new TextEncoder().encode('acct/00000001');
        const value = m.fromHex(a.value);
        const proof = m.fromHex(a.proof_hex);
        await m.verifyProof({ root: a.digest.root }, key, value, proof);
        let n = 0;
        const t0 = performance.now();
        while (performance.now() - t0 < DURATION_MS) {
          await m.verifyProof({ root: a.digest.root }, key, value, proof);
          n++;
        }
        return { n, ms: performance.now() - t0 };
      }, { a, DURATION_MS });
    } finally {
      await page.close();
    }
    const key = Buffer.from(acct(1));
    const value = Buffer.from(a.value, 'hex');
    const proof = Buffer.from(a.proof_hex, 'hex');
    await verifyProof({ root: a.digest.root }, key, value, proof);
    let n = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < DURATION_MS) {
      await verifyProof({ root: a.digest.root }, key, value, proof);
      n++;
    }
    const nodeRate = n / ((performance.now() - t0) / 1000);
    const chromeRate = browser.n / (browser.ms / 1000);
    const line = `verifyProof (${proof.length}-byte proof, 10,000-key trie): Chromium ${Math.round(chromeRate)}/s, Node.js ${process.version} ${Math.round(nodeRate)}/s`;
    t.diagnostic(line);
    assert.ok(browser.n > 0 && n > 0);
  });
  test('snapshot in a Web Worker: 200,000 pairs verify off the page\'s thread, with progress; wrong root and abort reject', async (t) => {
    // A node of its own with 200,000 accounts (two blocks of 100,000 writes).
    const bigDir = await mkdtemp(path.join(os.tmpdir(), 'letus-wallet-big-'));
    const big = await startNode(bigDir);
    try {
      let root;
      for (const v of [1, 2]) {
        const writes = Array.from({ length: 100_000 }, (_, i) => [acct(100_000 * (v - 1) + i), 1000 + i]);
        root = (await postBlock(big.url, v, writes)).root;
      }
      const page = await openWallet(context, big.url);
      let r;
      try {
        r = await page.evaluate(async ({ root }) => {
          const m = await import('/js/src/index.js');
          // The page's thread: a 4 ms ticker records the longest gap between ticks while each verification runs.
          const watch = () => {
            let last = performance.now();
            const w = { ticks: 0, maxGap: 0 };
            const id = setInterval(() => {
              const now = performance.now();
              w.maxGap = Math.max(w.maxGap, now - last);
              w.ticks += 1;
              last = now;
            }, 4);
            w.stop = () => clearInterval(id);
            return w;
          };
          const progress = [];
          let w = watch();
          let t0 = performance.now();
          const done = await m.verifySnapshotInWorker(location.origin, {
            tid: 0, version: 2n, trustedRoot: root, maxPairs: 5000, onProgress: (p) => progress.push(p),
          });
          const worker = { ms: performance.now() - t0, ticks: w.ticks, maxGap: w.maxGap };
          w.stop();
          // For comparison, the same chunks (fetched first) verified on the page's thread, one after the other:
          // what the worker spares the page.
          const bytes = async (u) => new Uint8Array(await (await fetch(u)).arrayBuffer());
          const sv = await m.SnapshotVerifier.fromManifest(await bytes('/v1/tries/0/snapshot?version=2&max_pairs=5000'),
            { tid: 0, version: 2n, trustedRoot: root });
          const chunks = [];
          for (let i = 0; i < sv.entries; i++) {
            const e = sv.entry(i);
            chunks.push(await bytes(`/v1/tries/0/snapshot/chunks/${i}?version=2&depth=${e.depth}&prefix=${e.prefix}`));
          }
          w = watch();
          t0 = performance.now();
          let mainPairs = 0;
          chunks.forEach((c, i) => { mainPairs += sv.verifyChunk(i, c).length; });
          const main = { ms: performance.now() - t0 };
          await new Promise((res) => setTimeout(res, 20));
          Object.assign(main, { ticks: w.ticks, maxGap: w.maxGap });
          w.stop();
          sv.free();
          const code = async (opts) => {
            try {
              await m.verifySnapshotInWorker(location.origin, { tid: 0, version: 2n, maxPairs: 5000, ...opts });
              return 'ok';
            } catch (e) {
              return `${e.name}:${e.code}`;
            }
          };
          const ctl = new AbortController();
          const aborted = code({ trustedRoot: root, signal: ctl.signal, onProgress: () => ctl.abort() });
          return {
            done, progress, worker, main, mainPairs,
            wrongRoot: await code({ trustedRoot: '00'.repeat(32) }),
            missing: await code({ trustedRoot: root, version: 9n }),
            aborted: await aborted,
          };
        }, { root });
      } finally {
        await page.close();
      }
      assert.equal(r.done.pairs, 200_000);
      assert.equal(r.done.total, '200000');
      assert.equal(r.mainPairs, 200_000);
      assert.ok(r.done.entries > 10, `${r.done.entries} chunks`);
      // Progress after the manifest and after every chunk, counting up to the whole.
      assert.equal(r.progress.length, r.done.entries + 1);
      assert.deepEqual(r.progress.map((p) => p.done), Array.from({ length: r.done.entries + 1 }, (_, i) => i));
      assert.equal(r.progress.at(-1).pairs, 200_000);
      // The verification ran in a worker (its global scope says so), and the page's thread kept running its ticker
      // meanwhile; how long the page waited at most is reported, not asserted (a timing).
      assert.equal(r.done.inWorker, true);
      assert.ok(r.worker.ticks > 0, JSON.stringify(r.worker));
      assert.equal(r.wrongRoot, 'LetusVerifyError:root_mismatch');
      assert.equal(r.missing, 'LetusNodeError:version_not_found');
      assert.equal(r.aborted, 'LetusVerifyError:aborted');
      t.diagnostic(`200,000 pairs in ${r.done.entries} chunks: in a worker ${Math.round(r.worker.ms)} ms, the page's longest gap ${Math.round(r.worker.maxGap)} ms (${r.worker.ticks} ticks); the same chunks verified on the page's thread ${Math.round(r.main.ms)} ms, longest gap ${Math.round(r.main.maxGap)} ms`);
    } finally {
      await stopProcess(big.child);
      await rm(bigDir, { recursive: true, force: true });
    }
  });
  test('snapshot: the node\'s manifest and every chunk verify in Chromium; a changed byte is named', async () => {
    const d = await (await fetch(`${node.url}/v1/digest`)).json();
    const { version, root } = { version: d.version, root: d.digests[0].root };
    const page = await openWallet(context, node.url);
    let r;
    try {
      r = await page.evaluate(async ({ version, root }) => {
        const m = await import('/js/src/index.js');
        const bytes = async (u) => new Uint8Array(await (await fetch(u)).arrayBuffer());
        const sv = await m.SnapshotVerifier.fromManifest(
          await bytes(`/v1/tries/0/snapshot?version=${version}&max_pairs=500`),
          { tid: 0, version: BigInt(version), trustedRoot: root },
        );
        let pairs = 0;
        let tampered = null;
        for (let i = 0; i < sv.entries; i++) {
          const e = sv.entry(i);
          const c = await bytes(`/v1/tries/0/snapshot/chunks/${i}?version=${version}&depth=${e.depth}&prefix=${e.prefix}`);
          pairs += sv.verifyChunk(i, c).length;
          if (i === 0) {
            c[c.length - 1] ^= 1;
            try { sv.verifyChunk(0, c); } catch (err) { tampered = err.code; }
          }
        }
        const total = Number(sv.pairs);
        const entries = sv.entries;
        sv.free();
        let wrongRoot = null;
        try {
          await m.SnapshotVerifier.fromManifest(await bytes(`/v1/tries/0/snapshot?version=${version}`),
            { tid: 0, version: BigInt(version), trustedRoot: '00'.repeat(32) });
        } catch (err) { wrongRoot = err.code; }
        return { pairs, total, entries, tampered, wrongRoot };
      }, { version, root });
    } finally {
      await page.close();
    }
    assert.ok(r.entries > 1, `${r.entries} chunks`);
    assert.equal(r.pairs, r.total);
    assert.ok(r.pairs >= 10_000, `${r.pairs} pairs`);
    assert.equal(r.tampered, 'root_mismatch');
    assert.equal(r.wrongRoot, 'root_mismatch');
  });
});
