#!/usr/bin/env bash
# Installs the system programs the test suite runs for real: bubblewrap (the Bash sandbox),
# OpenSSH server (SSH tools), and reference MCP servers. Idempotent; quick when all is present.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v ssh-keygen >/dev/null || need_apt+=(openssh-client)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
mkdir -p /run/sshd 2>/dev/null || true
command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
