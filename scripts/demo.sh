#!/usr/bin/env bash
# The README's first command: `letus demo` with the wallet page. Installs what the JS package needs if it is
# missing (the wasm32 target, wasm-bindgen-cli pinned to Cargo.lock, from crates.io), builds the package into
# js/pkg, then runs the demo from the repository, which serves the page at /wallet/index.html.
# Arguments go to `letus demo` (e.g. --listen 127.0.0.1:0, --blocks 20).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -f js/pkg/letus_wasm.js ] || [ ! -f js/pkg/letus_wasm_bg.wasm ]; then
  echo "demo.sh: building the JS package for the wallet page (once)" >&2
  rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
  wb_version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
  if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$wb_version" ]; then
    cargo install --locked wasm-bindgen-cli --version "$wb_version"
  fi
  sh js/scripts/build.sh >&2
fi
exec cargo run --release --quiet -p letus-node -- demo "$@"
