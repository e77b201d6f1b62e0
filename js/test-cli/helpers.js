// Shared helpers of the CLI / example tests: real `letus serve` nodes on 127.0.0.1, small proxies, and child
// processes with timeouts. Every process and server started here is registered and stopped by `cleanup()`
// (called from an `after` hook of each test file, and on process exit as a last resort).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const JS_DIR = join(here, '..');
export const ROOT = join(JS_DIR, '..');
export const LETUS = process.env.LETUS_BIN || join(ROOT, 'target', 'release', 'letus');
export const CLI = join(JS_DIR, 'bin', 'letus-verify.js');
export const LIGHT_CLIENT = join(ROOT, 'examples', 'light-client', 'light-client.mjs');
export const AUDIT_SH = join(ROOT, 'examples', 'auditor', 'audit.sh');
export const TOKEN = 'test-token-cli';

const children = new Set();
const servers = new Set();
const dirs = new Set();

export function tempDir(prefix = 'letus-cli-test-') {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.add(d);
  return d;
}

/** Starts `letus serve` on a free port of 127.0.0.1 over a fresh data dir; resolves to {url, proc, data}. */
export function startNode({ timeoutMs = 20000 } = {}) {
  if (!existsSync(LETUS)) throw new Error(`${LETUS} is missing: cargo build --release -p letus-node`);
  const data = join(tempDir(), 'data');
  const proc = spawn(LETUS, ['serve', '--listen', '127.0.0.1:0', '--token', TOKEN, '--data', data], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, RUST_LOG: 'warn' },
  });
  children.add(proc);
  proc.on('exit', () => children.delete(proc));
  proc.stderr.resume();
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error('letus serve did not start in time'));
    }, timeoutMs);
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`letus serve exited with ${code} before it printed its address`));
    });
    proc.stdout.on('data', (c) => {
      buf += c;
      const m = /letus node on (http:\/\/[^\s]+)/.exec(buf);
      if (m) {
        clearTimeout(timer);
        proc.stdout.resume();
        resolve({ url: m[1], proc, data });
      }
    });
  });
}

/** Stops a node with SIGTERM (SIGKILL after 5 s); resolves when it exited. */
export function stopProcess(proc, graceMs = 5000) {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => proc.kill('SIGKILL'), graceMs);
    proc.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
    proc.kill('SIGTERM');
  });
}

export async function postBlock(url, version, writes, { timeoutMs = 30000 } = {}) {
  const res = await fetch(`${url}/v1/blocks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ version, writes }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`POST /v1/blocks v${version}: ${res.status} ${text}`);
  return JSON.parse(text);
}

export async function getJson(url) {
  const res = await fetch(url, { signal: AbortSignal.timeout(10000) });
  const text = await res.text();
  if (!res.ok) throw new Error(`GET ${url}: ${res.status} ${text}`);
  return JSON.parse(text);
}

export const hex = (s) => Buffer.from(s).toString('hex');

/** Deterministic writes: `n` keys `k<start+i>` = `v<i>-<salt>` in trie `tid`. */
export function writesFor(start, n, salt = '', tid = 0) {
  const w = [];
  for (let i = 0; i < n; i++) w.push({ tid, key: hex(`key-${start + i}`), value: hex(`value-${start + i}-${salt}`) });
  return w;
}

/**
 * A reverse proxy in front of `target`. `handler(req, res, forward)` may answer itself or call
 * `forward(transform?)`, where `transform(chunk, offset) → chunk` rewrites the upstream body on the fly.
 */
export function startProxy(target, handler = (req, res, forward) => forward()) {
  const t = new URL(target);
  const server = createServer((req, res) => {
    const forward = (transform) => {
      const up = httpRequest(
        { host: t.hostname, port: t.port, path: req.url, method: req.method, headers: { ...req.headers, host: t.host } },
        (ur) => {
          const headers = { ...ur.headers };
          if (transform) delete headers['content-length'];
          res.writeHead(ur.statusCode, headers);
          let offset = 0;
          ur.on('data', (c) => {
            const out = transform ? transform(c, offset) : c;
            offset += c.length;
            if (out && out.length) res.write(out);
          });
          ur.on('end', () => res.end());
          ur.on('error', () => res.destroy());
        },
      );
      up.on('error', () => {
        res.statusCode = 502;
        res.end();
      });
      req.pipe(up);
    };
    Promise.resolve(handler(req, res, forward)).catch(() => res.destroy());
  });
  servers.add(server);
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({ url: `http://127.0.0.1:${server.address().port}`, server }));
  });
}

/**
 * Runs a command to completion with a timeout (SIGKILL after it). Resolves to {code, signal, stdout, stderr}.
 * `onStdoutLine(line, child)` sees each stdout line as it arrives.
 */
export function run(cmd, args, { timeoutMs = 60000, env, cwd, onStdoutLine } = {}) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env }, cwd });
  children.add(child);
  let stdout = '';
  let stderr = '';
  let pending = '';
  child.stdout.on('data', (c) => {
    stdout += c;
    if (onStdoutLine) {
      pending += c;
      let i;
      while ((i = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, i);
        pending = pending.slice(i + 1);
        onStdoutLine(line, child);
      }
    }
  });
  child.stderr.on('data', (c) => (stderr += c));
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

export const jsonLines = (text) =>
  text
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l));

export async function cleanup() {
  for (const s of servers) {
    s.closeAllConnections?.();
    s.close();
  }
  servers.clear();
  await Promise.all([...children].map((c) => stopProcess(c, 3000)));
  children.clear();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs.clear();
}

process.on('exit', () => {
  for (const c of children) {
    try {
      c.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
