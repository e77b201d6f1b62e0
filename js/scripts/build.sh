#!/bin/sh
# Builds the letus-verify WebAssembly module and its JS glue into js/pkg (generated, gitignored).
# Installs nothing: needs cargo with the wasm32-unknown-unknown target and wasm-bindgen-cli on PATH.
set -eu
JS_DIR=$(cd "$(dirname "$0")/.." && pwd)
ROOT=$(cd "$JS_DIR/.." && pwd)
# cargo's target directory: CARGO_TARGET_DIR if set (relative to the repository root), else target/.
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
WASM="$TARGET_DIR/wasm32-unknown-unknown/wasm/letus_wasm.wasm"

# wasm-bindgen-cli must be exactly the version of the wasm-bindgen crate in Cargo.lock.
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$ROOT/Cargo.lock")
if ! command -v wasm-bindgen >/dev/null 2>&1; then
  echo "build.sh: wasm-bindgen not found; install wasm-bindgen-cli $want (cargo install wasm-bindgen-cli --version $want)" >&2
  exit 1
fi
have=$(wasm-bindgen --version | awk '{ print $2 }')
if [ "$have" != "$want" ]; then
  echo "build.sh: wasm-bindgen is $have but Cargo.lock pins $want; install wasm-bindgen-cli $want" >&2
  exit 1
fi

cd "$ROOT"
cargo build -p letus-wasm --target wasm32-unknown-unknown --profile wasm
rm -rf "$JS_DIR/pkg"
wasm-bindgen --target web --out-dir "$JS_DIR/pkg" "$WASM"
# Drop the files the package does not ship.
rm -f "$JS_DIR/pkg/package.json" "$JS_DIR/pkg/.gitignore"

for f in "$JS_DIR/pkg/letus_wasm_bg.wasm" "$JS_DIR/pkg/letus_wasm.js"; do
  echo "$(basename "$f"): $(wc -c < "$f") bytes, $(gzip -9c "$f" | wc -c) gzipped"
done
