#!/bin/sh
# Builds the module (scripts/build.sh), type-checks the TypeScript declarations with the example in test-types/
# (the `typescript` package from the lockfile), then runs every test in js/test with Node's test runner.
set -eu
JS_DIR=$(cd "$(dirname "$0")/.." && pwd)
sh "$JS_DIR/scripts/build.sh"
cd "$JS_DIR"
if [ ! -x node_modules/.bin/tsc ]; then npm ci --no-audit --no-fund; fi
echo "tsc: src/index.d.ts through test-types/example.ts"
node_modules/.bin/tsc -p test-types
exec node --test test/
