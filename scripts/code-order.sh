#!/usr/bin/env bash
# Writes the code order of a `maestro` binary (to OUT, by default
# crates/maestro-cli/code-order.txt): the functions of the binary that a run
# executes (the footprint bench's 3-movement run, under valgrind's callgrind). build.rs hands
# the list to the linker (`--symbol-ordering-file`), which lays those functions out together, so
# the run touches a few MiB of the binary's code instead of pages spread over all of it
# (docs/benchmarks.md, "Footprint of a run").
#
#   cargo build --profile dist -p maestro-cli
#   bash scripts/code-order.sh target/dist/maestro [OUT]
#   MAESTRO_CODE_ORDER=OUT cargo build --profile dist -p maestro-cli    # links again with it
#
# (scripts/dist.sh does all three, with OUT=target/code-order.txt.)
#
# The names carry a hash of each crate's build settings (profile, features, toolchain, lock
# file), so the list fits the build it was taken from; a function it does not name is placed
# after the listed ones, as before. Take it again after changing the dependencies, the dist
# profile or the toolchain: the footprint bench shows when it has gone stale.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:?usage: scripts/code-order.sh path/to/maestro [OUT]}")
out=$(realpath -m "${2:-crates/maestro-cli/code-order.txt}")
command -v valgrind >/dev/null || { echo "error: valgrind is needed (apt-get install valgrind)" >&2; exit 1; }

# The scripted model server of the footprint bench (a development build of the harness).
bench=$(cargo bench --profile dev -p maestro-cli --bench footprint --no-run 2>&1 \
  | sed -n 's/.*Executable benches\/footprint.rs (\(.*\))$/\1/p')
work=$(mktemp -d)
FOOTPRINT_SERVE=1 "$bench" >"$work/serve" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
until [ -s "$work/serve" ]; do
  kill -0 "$server" 2>/dev/null || { cat "$work/serve" >&2; exit 1; }
  sleep 0.2
done
read -r url dir <"$work/serve"
mkdir "$work/run"
cp "$dir/piece.yaml" "$dir/notes.md" "$work/run/"
(cd "$work/run" && HOME="$work/run" valgrind --tool=callgrind --demangle=no \
  --callgrind-out-file="$work/callgrind.out" "$bin" run piece.yaml --task "Summarise the notes" \
  --workspace . --llm-base-url "$url" --model scripted-model --tool-mode native \
  >/dev/null 2>"$work/valgrind.log") || { tail -n 20 "$work/valgrind.log" >&2; exit 1; }

# Every function with a cost line (`fn=`) while the object (`ob=`) is the binary. Callgrind
# names an object or function once, as `(id) name`, and by `(id)` alone afterwards; it marks a
# function's second context in a recursive cycle with `'2`.
awk -v bin="$bin" '
  function name(line, table,   s, id) {
    s = substr(line, index(line, "=") + 1)
    if (match(s, /^\([0-9]+\)/)) {
      id = substr(s, 2, RLENGTH - 2)
      if (length(s) > RLENGTH) table[id] = substr(s, RLENGTH + 2)
      return table[id]
    }
    return s
  }
  /^c?ob=/ { o = name($0, objects); if ($0 ~ /^ob=/) current = o; next }
  /^c?fn=/ {
    f = name($0, functions)
    sub(/'"'"'[0-9]+$/, "", f)
    if ($0 ~ /^fn=/ && current == bin && f !~ /^(0x|[(]|$)/) hot[f] = 1
  }
  END { for (f in hot) print f }
' "$work/callgrind.out" | LC_ALL=C sort >"$out"
echo "$(wc -l <"$out") functions in $out"
