#!/usr/bin/env bash
# Long fuzzing of every decoder (not part of CI): letus-verify's (proofs, digests, history proofs, exports) and the
# engine's and node's (page records, value log, index files, roots/tombstone logs, history base, block-store
# segments, JSON request bodies). Needs the nightly toolchain; installs cargo-fuzz from crates.io if missing.
#   scripts/fuzz.sh [seconds-per-target]    (default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-300}"
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
for dir in letus-verify/fuzz fuzz; do
  for t in $(cd "$dir" && cargo +nightly fuzz list); do
    echo "==> $dir: $t for ${secs}s"
    (cd "$dir" && cargo +nightly fuzz run -O "$t" -- -max_total_time="$secs" -rss_limit_mb=2048)
  done
done
