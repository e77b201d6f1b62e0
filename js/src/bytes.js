import { fail } from './errors.js';

const HEX_RE = /^(?:[0-9a-fA-F]{2})*$/;
const U64_MAX = (1n << 64n) - 1n;

/** Hex (upper or lower case, no 0x) to bytes; `malformed` on anything else. */
export function fromHex(s, what = 'hex string') {
  if (typeof s !== 'string' || !HEX_RE.test(s)) fail('malformed', `${what} is not an even-length hex string`);
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.substr(2 * i, 2), 16);
  return out;
}

export function toHex(b) {
  let s = '';
  for (let i = 0; i < b.length; i++) s += (b[i] < 16 ? '0' : '') + b[i].toString(16);
  return s;
}

/** Bytes from a Uint8Array (Buffer included), an ArrayBuffer, a DataView or a hex string. */
export function toBytes(x, what = 'bytes') {
  if (x instanceof Uint8Array) return x;
  if (x instanceof ArrayBuffer) return new Uint8Array(x);
  if (ArrayBuffer.isView(x)) return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
  if (typeof x === 'string') return fromHex(x, what);
  return fail('malformed', `${what} must be a Uint8Array or a hex string`);
}

/** A 32-byte hash given as bytes or 64 hex digits. */
export function toHash(x, what = 'hash') {
  const b = toBytes(x, what);
  if (b.length !== 32) fail('malformed', `${what} must be 32 bytes`);
  return b;
}

export function hashHex(x, what) {
  return toHex(toHash(x, what));
}

export function bytesEqual(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A u64 from a bigint, a non-negative safe integer or a decimal string (no sign, no leading zero); a bigint. */
export function toU64(x, what = 'version') {
  let v;
  if (typeof x === 'bigint') v = x;
  else if (typeof x === 'number' && Number.isSafeInteger(x)) v = BigInt(x);
  else if (typeof x === 'string' && /^(?:0|[1-9][0-9]{0,19})$/.test(x)) v = BigInt(x);
  else return fail('malformed', `${what} must be an unsigned 64-bit integer`);
  if (v < 0n || v > U64_MAX) fail('malformed', `${what} is out of the u64 range`);
  return v;
}

export function toU32(x, what = 'tid') {
  const v = toU64(x, what);
  if (v > 0xffffffffn) fail('malformed', `${what} is out of the u32 range`);
  return Number(v);
}

export function concat(parts) {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let i = 0;
  for (const p of parts) {
    out.set(p, i);
    i += p.length;
  }
  return out;
}
