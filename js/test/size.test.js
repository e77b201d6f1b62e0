// The shipped WebAssembly module must stay under its size budget: 40 KB gzipped (issue budget; measured sizes
// are in docs/BENCHMARKS.md). The glue and the package's own JS are reported alongside.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { gzipSync } from 'node:zlib';

const gz = (buf) => gzipSync(buf, { level: 9 }).length;
const here = (p) => new URL(p, import.meta.url);

test('letus_wasm_bg.wasm is at most 40 KB gzipped', () => {
  const wasm = readFileSync(here('../pkg/letus_wasm_bg.wasm'));
  const size = gz(wasm);
  console.log(`wasm: ${wasm.length} B raw, ${size} B gzipped`);
  assert.ok(size <= 40 * 1024, `wasm is ${size} B gzipped, over the 40 KB budget`);
});

test('JS glue and package sources stay small', () => {
  const glue = gz(readFileSync(here('../pkg/letus_wasm.js')));
  const src = Buffer.concat(readdirSync(here('../src/')).filter((f) => f.endsWith('.js')).map((f) => readFileSync(here(`../src/${f}`))));
  console.log(`glue: ${glue} B gzipped; package JS: ${gz(src)} B gzipped`);
  assert.ok(glue + gz(src) <= 24 * 1024, 'JS over 24 KB gzipped');
});
