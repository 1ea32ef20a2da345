#!/usr/bin/env bash
# Builds the shipped `maestro` binary (target/dist/maestro): the dist profile (fat LTO, one
# codegen unit), with the functions a run executes laid out together. The layout list is taken
# from a first build of this very source into target/code-order.txt (beside the build, never in
# the checkout), then the binary is linked again with it (build.rs reads the list that
# MAESTRO_CODE_ORDER names), so the list always fits the code it orders: with fat LTO, internal
# functions are numbered per build, and a list taken from older code misses them (the run's
# resident set then climbs from about 10 MiB towards 17; docs/benchmarks.md, "Footprint of a
# run"). Needs valgrind (apt-get install valgrind).
#
# The committed crates/maestro-cli/code-order.txt is the list builds made without this script
# use; --update-code-order copies the new list over it, to commit with a release.
#
#   bash scripts/dist.sh                        # then: target/dist/maestro
#   bash scripts/dist.sh --update-code-order    # also rewrites crates/maestro-cli/code-order.txt
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
cargo build --locked --profile dist -p maestro-cli
cp "$target/dist/maestro" "$target/dist/maestro.unordered"
bash scripts/code-order.sh "$target/dist/maestro.unordered" "$order"
rm -f "$target/dist/maestro.unordered"
MAESTRO_CODE_ORDER=$order cargo build --locked --profile dist -p maestro-cli
if $update; then
  cp "$order" crates/maestro-cli/code-order.txt
  echo "updated crates/maestro-cli/code-order.txt"
fi
echo "built $target/dist/maestro"
