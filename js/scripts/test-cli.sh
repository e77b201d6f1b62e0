#!/bin/sh
# Tests of the command line (bin/letus-verify.js) and of examples/auditor and examples/light-client against
# real `letus serve` nodes on 127.0.0.1: builds the module (scripts/build.sh), builds the node if
# target/release/letus is missing, then runs node --test test-cli/.
set -eu
JS_DIR=$(cd "$(dirname "$0")/.." && pwd)
ROOT=$(cd "$JS_DIR/.." && pwd)
sh "$JS_DIR/scripts/build.sh"
if [ ! -x "${LETUS_BIN:-$ROOT/target/release/letus}" ]; then
  (cd "$ROOT" && cargo build --release -p letus-node)
fi
cd "$JS_DIR"
exec node --test test-cli/
