#!/bin/sh
# Builds the module (scripts/build.sh) then runs every test in js/test with Node's test runner.
set -eu
JS_DIR=$(cd "$(dirname "$0")/.." && pwd)
sh "$JS_DIR/scripts/build.sh"
cd "$JS_DIR"
exec node --test test/
