#!/usr/bin/env bash
# Builds the shipped `maestro` binary (target/dist/maestro): the dist profile (fat LTO, one
# codegen unit), with the functions a run executes, and the constants it reads, laid out
# together. The layout lists are taken from a first build of this very source into
# target/code-order.txt and target/data-order.txt (beside the build, never in the checkout), then
# the binary is linked again with them (build.rs reads the lists that MAESTRO_CODE_ORDER and
# MAESTRO_DATA_ORDER name), so the lists always fit the code they order: with fat LTO, internal
# functions are numbered per build, and a list taken from older code misses them (the run's
# resident set then climbs from about 10 MiB towards 17; docs/benchmarks.md, "Footprint of a
# run"). Needs valgrind (apt-get install valgrind).
#
# The committed crates/maestro-cli/code-order.txt and data-order.txt are the lists builds made
# without this script use; --update-code-order copies the new lists over them, to commit with a
# release.
#
#   bash scripts/dist.sh                        # then: target/dist/maestro
#   bash scripts/dist.sh --update-code-order    # also rewrites crates/maestro-cli/*-order.txt
set -euo pipefail
cd "$(dirname "$0")/.."
update=false
for arg in "$@"; do
  case $arg in
    --update-code-order) update=true ;;
    *) echo "error: unknown argument \`$arg\`; the only one is --update-code-order" >&2; exit 2 ;;
  esac
done
target=${CARGO_TARGET_DIR:-target}
order=$(realpath -m "$target/code-order.txt")
data=$(realpath -m "$target/data-order.txt")
map=$(realpath -m "$target/dist/maestro.map")
MAESTRO_LINK_MAP=$map cargo build --locked --profile dist -p maestro-cli
cp "$target/dist/maestro" "$target/dist/maestro.unordered"
bash scripts/code-order.sh "$target/dist/maestro.unordered" "$order" "$map" "$data"
rm -f "$target/dist/maestro.unordered" "$map"
MAESTRO_CODE_ORDER=$order MAESTRO_DATA_ORDER=$data cargo build --locked --profile dist -p maestro-cli
if $update; then
  cp "$order" crates/maestro-cli/code-order.txt
  cp "$data" crates/maestro-cli/data-order.txt
  echo "updated crates/maestro-cli/code-order.txt and data-order.txt"
fi
echo "built $target/dist/maestro"
