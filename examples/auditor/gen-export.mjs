#!/usr/bin/env node
// Generates a valid state export of N keys (default 1,000,000) with the real node, for measuring the full
// verifier: starts `letus serve` on a fresh data dir on 127.0.0.1, posts blocks of 10,000 writes, downloads
// GET /v1/tries/0/export?version=V to a file, reads the root from GET /v1/digest/V, and stops the node.
//
//   node gen-export.mjs [--keys N] [--out FILE] [--letus PATH] [--value-bytes B]
//
// Prints one JSON line: {"file", "keys", "version", "root", "bytes"}. Then, e.g.:
//   /usr/bin/time -v node ../../js/bin/letus-verify.js audit --file FILE --tid 0 --version V --root ROOT
import { spawn } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';

const { values: o } = parseArgs({
  options: {
    keys: { type: 'string', default: '1000000' },
    out: { type: 'string', default: join(tmpdir(), 'letus-1m.letusexp') },
    letus: { type: 'string', default: new URL('../../target/release/letus', import.meta.url).pathname },
    'value-bytes': { type: 'string', default: '32' },
  },
});
const N = Number(o.keys);
const VB = Number(o['value-bytes']);
const PER_BLOCK = 10000;
const TOKEN = 'gen-export';
const data = mkdtempSync(join(tmpdir(), 'letus-gen-'));

const node = spawn(o.letus, ['serve', '--listen', '127.0.0.1:0', '--token', TOKEN, '--data', join(data, 'd')], {
  stdio: ['ignore', 'pipe', 'inherit'],
  env: { ...process.env, RUST_LOG: 'warn' },
});
const stopNode = () =>
  new Promise((resolve) => {
    if (node.exitCode !== null || node.signalCode !== null) return resolve();
    node.once('exit', resolve);
    node.kill('SIGTERM');
  });
process.on('exit', () => {
  node.kill('SIGKILL');
  rmSync(data, { recursive: true, force: true });
});

try {
  const url = await new Promise((resolve, reject) => {
    let buf = '';
    node.stdout.on('data', (c) => {
      buf += c;
      const m = /letus node on (http:\/\/\S+)/.exec(buf);
      if (m) resolve(m[1]);
    });
    node.on('exit', (c) => reject(new Error(`letus serve exited (${c})`)));
    setTimeout(() => reject(new Error('letus serve did not start')), 20000);
  });
  node.stdout.resume();

  const t0 = Date.now();
  let version = 0;
  for (let start = 0; start < N; start += PER_BLOCK) {
    const writes = [];
    for (let i = start; i < Math.min(N, start + PER_BLOCK); i++) {
      const key = Buffer.from(`acct-${String(i).padStart(8, '0')}`).toString('hex');
      const value = Buffer.alloc(VB, i % 251).toString('hex');
      writes.push(`{"tid":0,"key":"${key}","value":"${value}"}`);
    }
    version++;
    const res = await fetch(`${url}/v1/blocks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: `{"version":${version},"writes":[${writes.join(',')}]}`,
    });
    if (!res.ok) throw new Error(`block ${version}: ${res.status} ${await res.text()}`);
    await res.arrayBuffer();
    if (version % 10 === 0) process.stderr.write(`gen-export: ${Math.min(N, start + PER_BLOCK)} keys in ${version} blocks, ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  }
  const digest = await (await fetch(`${url}/v1/digest/${version}`)).json();
  const root = digest.digests.find((d) => d.tid === 0).root;
  const res = await fetch(`${url}/v1/tries/0/export?version=${version}`);
  if (!res.ok) throw new Error(`export: ${res.status}`);
  await pipeline(Readable.fromWeb(res.body), createWriteStream(o.out));
  await stopNode();
  console.log(JSON.stringify({ file: o.out, keys: N, version, root, bytes: statSync(o.out).size }));
} catch (e) {
  console.error(`gen-export: ${e.message}`);
  await stopNode();
  process.exit(1);
}
