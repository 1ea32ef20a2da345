#!/usr/bin/env bash
# Builds the shipped `maestro` binary (target/dist/maestro): the dist profile (fat LTO, one
# codegen unit), with the functions a run executes laid out together. The layout list
# (crates/maestro-cli/code-order.txt) is taken from a first build of this very source, then the
# binary is linked again with it, so the list always fits the code it orders: with fat LTO,
# internal functions are numbered per build, and a list taken from older code misses them (the
# run's resident set then climbs from about 10 MiB towards 17; docs/benchmarks.md, "Footprint
# of a run"). Needs valgrind (apt-get install valgrind).
#
#   bash scripts/dist.sh            # then: target/dist/maestro
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
cargo build --locked --profile dist -p maestro-cli
cp "$target/dist/maestro" "$target/dist/maestro.unordered"
bash scripts/code-order.sh "$target/dist/maestro.unordered"
rm -f "$target/dist/maestro.unordered"
cargo build --locked --profile dist -p maestro-cli
echo "built $target/dist/maestro"
