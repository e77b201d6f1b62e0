/**
 * JSON.parse that keeps integers above Number.MAX_SAFE_INTEGER exact: every integer literal of 16 digits or
 * more outside strings is turned into a decimal string before parsing (versions are u64; toU64 accepts
 * decimal strings). Everything else parses exactly as JSON.parse. With `{strict: true}` (what LetusClient uses
 * for a node's answers, which hold only unsigned integers) a number with a sign, a fraction or an exponent
 * (`-0`, `5.0`, `5e0`) is kept as its text too, so that toU64 rejects it as SPEC.md §7 asks, where JSON.parse
 * would have read it as an integer.
 */
export function parseJson(text, { strict = false } = {}) {
  let out = '';
  let last = 0;
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 34) {
      // a string: skip to its closing quote
      i++;
      while (i < n) {
        const d = text.charCodeAt(i);
        if (d === 92) i += 2;
        else if (d === 34) break;
        else i++;
      }
      i++;
    } else if ((c >= 48 && c <= 57) || c === 45) {
      const start = i;
      i++;
      while (i < n && /[0-9]/.test(text[i])) i++;
      const isInt = !(i < n && /[.eE]/.test(text[i]));
      if (isInt && i - start >= 16 && !(strict && c === 45)) {
        out += text.slice(last, start) + '"' + text.slice(start, i) + '"';
        last = i;
      }
      while (i < n && /[0-9.eE+-]/.test(text[i])) i++;
      if (strict && (!isInt || c === 45)) {
        out += text.slice(last, start) + '"' + text.slice(start, i) + '"';
        last = i;
      }
    } else {
      i++;
    }
  }
  return JSON.parse(out + text.slice(last));
}
