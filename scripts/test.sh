#!/usr/bin/env bash
# Runs every test. On a fresh machine it first installs what the tests need from the package
# registries (Debian packages, PyPI, npm); nothing is downloaded from anywhere else.
#
#   bash scripts/test.sh            # install prerequisites, then the whole suite
#   bash scripts/test.sh -p maestro-piece   # extra arguments go to cargo nextest
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/prerequisites.sh

# The real-model tier runs when a local llama.cpp server is built (scripts/local-llm.sh
# build); start it and point the tests at it. Without it those tests say they were skipped.
LOCAL_LLM=scripts/local-llm.sh
if [ -z "${MAESTRO_TEST_LLM_URL:-}" ] && [ -f "$LOCAL_LLM" ] \
  && [ -x "${MAESTRO_LLM_CACHE:-$HOME/.cache/maestro-local-llm}/llama.cpp/build/bin/llama-server" ]; then
  if url=$(bash "$LOCAL_LLM" start 8088 2>/dev/null); then
    export MAESTRO_TEST_LLM_URL="$url"
    echo "real-model tier: $MAESTRO_TEST_LLM_URL"
  fi
fi

cargo nextest run --workspace --no-fail-fast "$@"
