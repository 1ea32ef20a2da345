#!/usr/bin/env bash
# Installs the system programs the test suite runs for real: bubblewrap (the Bash sandbox),
# OpenSSH server (SSH tools), PostgreSQL (the store's second backend; the tests start their own
# throwaway clusters with its initdb and pg_ctl), sqlite3 and make (Bash policy tests),
# reference MCP servers, the official `openai` Python package (the gateway's test client),
# poppler-utils and qpdf (the PDF tools) with the Python writers of the document tests, the
# npm packages of the test OpenID Connect provider (crates/maestro-testkit/oidc), and Debian's
# Chromium with chromedriver plus axe-core (crates/maestro-testkit/axe) for the web UI's browser
# tests. Idempotent; quick when all is present.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v ssh-keygen >/dev/null || need_apt+=(openssh-client)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need_apt+=(postgresql)
# Programs the Bash policy tests run inside the sandbox (harmless uses, and `*`).
command -v sqlite3 >/dev/null || need_apt+=(sqlite3)
command -v make >/dev/null || need_apt+=(make)
# The MCP reference servers and the test OpenID Connect provider run on node.
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
# The web UI's browser tests (maestro_testkit::Browser) drive Debian's Chromium over WebDriver.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
# The PDF tools run poppler-utils (pdfinfo, pdftotext, pdftoppm) and qpdf in the sandbox.
command -v pdftotext >/dev/null || need_apt+=(poppler-utils)
command -v qpdf >/dev/null || need_apt+=(qpdf)
# `maestro sandbox setup` builds the sandbox's Python environment with Debian's python3 -m venv.
{ [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; } || need_apt+=(python3 python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
mkdir -p /run/sshd 2>/dev/null || true
command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
# Unused-dependency check run by .ci/run.
command -v cargo-machete >/dev/null || cargo install --locked cargo-machete@0.9.2

# Reference MCP servers the MCP tests talk to (written elsewhere, pinned here).
python3 -c 'import mcp' 2>/dev/null \
  || python3 -m pip install -q --disable-pip-version-check 'mcp==2.3.0'
# The official OpenAI client, which the gateway's tests drive the gateway with (pinned).
python3 -c 'import openai, sys; sys.exit(openai.__version__ != "3.51.0")' 2>/dev/null \
  || python3 -m pip install -q --disable-pip-version-check 'openai==3.51.0'
# The writers the document tools' tests make their Word, Excel (xlsx, xls), OpenDocument,
# PowerPoint and PDF files with,
# and msoffcrypto-tool to encrypt them as Office does (pinned).
python3 - <<'PY' 2>/dev/null \
  || python3 -m pip install -q --disable-pip-version-check 'python-docx==1.2.0' 'openpyxl==3.1.5' \
    'python-pptx==1.0.2' 'reportlab==4.2.5' 'msoffcrypto-tool==5.4.2' 'xlwt==1.3.0' 'odfpy==1.4.1' \
    'pypandoc-binary==1.17'
import sys
from importlib.metadata import version
pins = {"python-docx": "1.2.0", "openpyxl": "3.1.5", "python-pptx": "1.0.2",
        "reportlab": "4.2.5", "msoffcrypto-tool": "5.4.2", "xlwt": "1.3.0", "odfpy": "1.4.1",
        "pypandoc-binary": "1.17"}
sys.exit(any(version(name) != pin for name, pin in pins.items()))
PY
MCP_FS=/opt/maestro-test/node_modules/.bin/mcp-server-filesystem
if [ ! -x "$MCP_FS" ]; then
  command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; }
  npm install --silent --no-audit --no-fund --prefix /opt/maestro-test \
    @modelcontextprotocol/server-filesystem@2026.8.31 >/dev/null
fi

# The test OpenID Connect provider (npm oidc-provider, pinned by its package-lock.json), for
# maestro_testkit::OidcProvider. Reinstalled when the lock file is newer than the install. It
# needs node 20.12 or later (Debian 12's own nodejs is 18: its tests are then ignored).
OIDC=crates/maestro-testkit/oidc
if command -v npm >/dev/null \
  && { [ ! -f "$OIDC/node_modules/.package-lock.json" ] \
    || [ "$OIDC/package-lock.json" -nt "$OIDC/node_modules/.package-lock.json" ]; }; then
  (cd "$OIDC" && npm ci --silent --no-audit --no-fund >/dev/null)
fi

# axe-core, the accessibility checker the browser tests inject into Chromium (pinned by its
# package-lock.json), reinstalled when the lock file is newer than the install.
AXE=crates/maestro-testkit/axe
if command -v npm >/dev/null \
  && { [ ! -f "$AXE/node_modules/.package-lock.json" ] \
    || [ "$AXE/package-lock.json" -nt "$AXE/node_modules/.package-lock.json" ]; }; then
  (cd "$AXE" && npm ci --silent --no-audit --no-fund >/dev/null)
fi
