#!/usr/bin/env bash
# Long fuzzing of every decoder of letus-verify (not part of CI). Needs the nightly toolchain.
#   scripts/fuzz.sh [seconds-per-target]    (default 300)
set -euo pipefail
cd "$(dirname "$0")/../letus-verify/fuzz"
secs="${1:-300}"
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
for t in $(cargo +nightly fuzz list); do
  echo "==> $t for ${secs}s"
  cargo +nightly fuzz run -O "$t" -- -max_total_time="$secs" -rss_limit_mb=2048
done
