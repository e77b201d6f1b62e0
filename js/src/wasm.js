import initWasm, * as bindings from '../pkg/letus_wasm.js';
import { wrapError } from './errors.js';

let ready;

/**
 * Loads the WebAssembly module once. In Node.js the .wasm file next to the package is read with fs; in a
 * browser it is fetched from its URL. `source` (optional) overrides: a URL, a Response, bytes or a
 * WebAssembly.Module. Every API function calls this itself; call it early to pay the cost up front.
 */
export function init(source) {
  if (!ready) {
    ready = (async () => {
      let moduleOrPath = source;
      if (moduleOrPath === undefined) {
        const url = new URL('../pkg/letus_wasm_bg.wasm', import.meta.url);
        if (url.protocol === 'file:' && typeof process === 'object' && process.versions && process.versions.node) {
          const { readFile } = await import('node:fs/promises');
          moduleOrPath = await readFile(url);
        } else {
          moduleOrPath = url;
        }
      }
      await initWasm({ module_or_path: moduleOrPath });
      return bindings;
    })();
    ready.catch(() => {
      ready = undefined; // let a later call retry
    });
  }
  return ready;
}

/** Runs `f(bindings)` with the module loaded, turning its coded Errors into LetusVerifyError. */
export async function withWasm(f) {
  const w = await init();
  try {
    return f(w);
  } catch (e) {
    throw wrapError(e);
  }
}
