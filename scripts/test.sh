#!/usr/bin/env bash
# Runs every test. On a fresh machine it first installs what the tests need from the package
# registries (Debian packages, PyPI, npm); nothing is downloaded from anywhere else.
#
#   bash scripts/test.sh            # install prerequisites, then the whole suite
#   bash scripts/test.sh -p maestro-piece   # extra arguments go to cargo nextest
#
# The last line it prints is `N passed, N failed, N skipped`; the real-model tests count as
# skipped unless MAESTRO_TEST_LLM_URL is set.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/prerequisites.sh

# The real-model tier runs when a local llama.cpp server is built (scripts/local-llm.sh
# build); start it and point the tests at it. Without it those tests are reported as skipped.
LOCAL_LLM=scripts/local-llm.sh
if [ -z "${MAESTRO_TEST_LLM_URL:-}" ] && [ -f "$LOCAL_LLM" ] \
  && [ -x "${MAESTRO_LLM_CACHE:-$HOME/.cache/maestro-local-llm}/llama.cpp/build/bin/llama-server" ]; then
  # A server this script starts is stopped when it ends; one already running is left running.
  bash "$LOCAL_LLM" url >/dev/null 2>&1 || started_llm=1
  if url=$(bash "$LOCAL_LLM" start 8088 2>/dev/null); then
    export MAESTRO_TEST_LLM_URL="$url"
    echo "real-model tier: $MAESTRO_TEST_LLM_URL"
  fi
fi

# Tests that need a real model are `#[ignore]`d: the first run reports them as skipped, and the
# second runs only them, when there is a model to run them against.
# `-p CRATE` among the arguments narrows the run to that crate (with `--workspace` it would not).
scope=(--workspace)
for arg in "$@"; do
  case "$arg" in -p | -p* | --package | --package=*) scope=() ;; esac
done
log=$(mktemp)
trap 'rm -f "$log"; if [ -n "${started_llm:-}" ]; then bash "$LOCAL_LLM" stop >/dev/null 2>&1 || true; fi' EXIT
status=0
cargo nextest run "${scope[@]}" --no-fail-fast "$@" 2>&1 | tee "$log" || status=1
if [ -n "${MAESTRO_TEST_LLM_URL:-}" ]; then
  cargo nextest run "${scope[@]}" --no-fail-fast --no-tests=pass --run-ignored only \
    -E 'binary(real_model)' "$@" 2>&1 | tee -a "$log" || status=1
fi

# Each nextest run ends with `Summary [...] N tests run: N passed, N failed, N skipped`. The
# first run's skipped tests are the ignored ones; those the second run ran are not skipped.
field() {
  awk -v what="$2" '{ while (match($0, "[0-9]+ (" what ")")) { n += substr($0, RSTART, RLENGTH) + 0; $0 = substr($0, RSTART + RLENGTH) } } END { print n + 0 }' <<<"$1"
}
first=$(grep -E '^ *Summary ' "$log" | sed -n 1p || true)
second=$(grep -E '^ *Summary ' "$log" | sed -n 2p || true)
passed=$(( $(field "$first" passed) + $(field "$second" passed) ))
failed=$(( $(field "$first" 'failed|timed out') + $(field "$second" 'failed|timed out') ))
skipped=$(( $(field "$first" skipped) - $(field "$second" 'tests? run') ))
if [ -z "${MAESTRO_TEST_LLM_URL:-}" ]; then
  echo "the real-model tests are skipped: set MAESTRO_TEST_LLM_URL to run them"
fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
