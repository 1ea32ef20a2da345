#!/usr/bin/env bash
# Writes the code order of a `maestro` binary (to OUT, by default
# crates/maestro-cli/code-order.txt): the functions of the binary that a run
# executes (the footprint bench's 3-movement run, under valgrind's callgrind). build.rs hands
# the list to the linker (`--symbol-ordering-file`), which lays those functions out together, so
# the run touches a few MiB of the binary's code instead of pages spread over all of it
# (docs/benchmarks.md, "Footprint of a run").
#
# Given the binary's link map too (MAP: the build made with MAESTRO_LINK_MAP=MAP), it also
# writes the data order (to DATA_OUT, by default crates/maestro-cli/data-order.txt): the input
# sections of `.rodata` that the same run reads (the run under valgrind's lackey, its loads
# placed in the map by the footprint bench's harness). build.rs lays them out together at the
# head of `.rodata`.
#
#   MAESTRO_LINK_MAP=$PWD/target/maestro.map cargo build --profile dist -p maestro-cli
#   bash scripts/code-order.sh target/dist/maestro [OUT [MAP [DATA_OUT]]]
#   MAESTRO_CODE_ORDER=OUT MAESTRO_DATA_ORDER=DATA_OUT cargo build --profile dist -p maestro-cli
#
# (scripts/dist.sh does all three, with OUT and DATA_OUT under target/.)
#
# The names carry a hash of each crate's build settings (profile, features, toolchain, lock
# file), and with fat LTO the internal ones are numbered per build, so the lists fit the build
# they were taken from; what they do not name is placed after what they do, as before. Take them
# again after changing the code, the dependencies, the dist profile or the toolchain: the
# footprint bench shows when they have gone stale.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:?usage: scripts/code-order.sh path/to/maestro [OUT]}")
out=$(realpath -m "${2:-crates/maestro-cli/code-order.txt}")
map=${3:+$(realpath "$3")}
data_out=$(realpath -m "${4:-crates/maestro-cli/data-order.txt}")
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

[ -n "$map" ] || exit 0
# The constants the same run reads. Valgrind loads a position-independent executable at
# 0x108000 on x86-64; the harness refuses a trace whose code is not there.
(cd "$work/run" && rm -rf .maestro output && HOME="$work/run" valgrind --tool=lackey \
  --trace-mem=yes --log-fd=9 "$bin" run piece.yaml --task "Summarise the notes" \
  --workspace . --llm-base-url "$url" --model scripted-model --tool-mode native \
  9>&1 >/dev/null 2>"$work/lackey.log") \
  | FOOTPRINT_DATA_ORDER=1 "$bench" "$map" 108000 >"$work/data-order.txt"
grep -q 'completed' "$work/lackey.log" || { tail -n 20 "$work/lackey.log" >&2; exit 1; }
mv "$work/data-order.txt" "$data_out"
echo "$(wc -l <"$data_out") sections of .rodata in $data_out"
