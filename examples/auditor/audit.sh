#!/bin/sh
# Full audit of one trie of a letus node, for a CI job: streams the node's state export through the
# letus-verify full verifier and fails (non-zero exit) unless the recomputed root is the trusted root.
#
#   audit.sh URL TID VERSION TRUSTED_ROOT
#   LETUS_URL=… LETUS_TID=… LETUS_VERSION=… LETUS_TRUSTED_ROOT=… audit.sh
#
# Arguments win over the environment. LETUS_VERIFY_CLI overrides the CLI to run (default: the copy in this
# repository, js/bin/letus-verify.js, else `npx --yes letus-verify`). The one-line JSON summary goes to stdout,
# and is also appended to $GITHUB_STEP_SUMMARY when that is set (GitHub Actions). Exit status is the CLI's:
# 0 root matches, 1 verification failed, 2 bad input, 3 network/node error.
set -eu

URL=${1:-${LETUS_URL:-}}
TID=${2:-${LETUS_TID:-0}}
VERSION=${3:-${LETUS_VERSION:-}}
ROOT=${4:-${LETUS_TRUSTED_ROOT:-}}

if [ -z "$URL" ] || [ -z "$VERSION" ] || [ -z "$ROOT" ]; then
  echo "usage: audit.sh URL TID VERSION TRUSTED_ROOT  (or LETUS_URL, LETUS_TID, LETUS_VERSION, LETUS_TRUSTED_ROOT)" >&2
  exit 2
fi

HERE=$(cd "$(dirname "$0")" && pwd)
if [ -n "${LETUS_VERIFY_CLI:-}" ]; then
  set -- $LETUS_VERIFY_CLI
elif [ -f "$HERE/../../js/bin/letus-verify.js" ]; then
  set -- node "$HERE/../../js/bin/letus-verify.js"
else
  set -- npx --yes letus-verify
fi

echo "audit: trie $TID at version $VERSION of $URL against trusted root $ROOT" >&2
status=0
summary=$("$@" audit --url "$URL" --tid "$TID" --version "$VERSION" --root "$ROOT" ${LETUS_AUDIT_FLAGS:-}) || status=$?
echo "$summary"

if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  if [ "$status" -eq 0 ]; then verdict="passed"; else verdict="FAILED (exit $status)"; fi
  {
    echo "### letus audit $verdict"
    echo
    echo "trie \`$TID\`, version \`$VERSION\`, node \`$URL\`"
    echo
    echo '```json'
    echo "$summary"
    echo '```'
  } >> "$GITHUB_STEP_SUMMARY"
fi

if [ "$status" -ne 0 ]; then
  echo "audit: FAILED (exit $status)" >&2
else
  echo "audit: OK" >&2
fi
exit "$status"
