#!/bin/sh
# Real-browser test of the wallet example (examples/wallet): the real `letus serve` node, headless Chromium
# (Debian's /usr/bin/chromium, driven by playwright-core; no browser is downloaded) and a tampering proxy.
# Env: LETUS_BIN (default target/release/letus, relative to the repository root), CHROMIUM (default /usr/bin/chromium).
set -eu
JS_DIR=$(cd "$(dirname "$0")/.." && pwd)
ROOT=$(cd "$JS_DIR/.." && pwd)
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
export CHROMIUM

if [ ! -x "$CHROMIUM" ]; then
  echo "test-browser.sh: $CHROMIUM not found; install Debian's package: apt-get install -y chromium" >&2
  exit 1
fi

cd "$JS_DIR"
if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
sh "$JS_DIR/scripts/build.sh"

cd "$ROOT"
LETUS_BIN=${LETUS_BIN:-target/release/letus}
case "$LETUS_BIN" in /*) ;; *) LETUS_BIN="$ROOT/$LETUS_BIN" ;; esac
if [ ! -x "$LETUS_BIN" ]; then
  if [ "$LETUS_BIN" = "$ROOT/target/release/letus" ]; then
    cargo build --release -p letus-node
  else
    echo "test-browser.sh: LETUS_BIN=$LETUS_BIN is not an executable" >&2
    exit 1
  fi
fi
export LETUS_BIN

cd "$JS_DIR"
exec node --test test-browser/
