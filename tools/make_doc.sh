#!/bin/sh
# Writes the API reference (LDoc, config.ld) to $1 (default build/doc).
# The sources are copied to build/doc-src and rewritten where this code base
# and LDoc disagree (line for line, but for one line after the header):
# - "------------ topic" section banners start with three dashes, which LDoc
#   takes for doc comments: they become blank lines;
# - ops registered as `def('name', function(args)` (oneflow/ops/*.lua, each
#   both flow.name and a tensor method) read as `function flow.name(args)`,
#   and `function T.flow.name(` (oneflow/tensor.lua) as `function flow.name(`;
# - each file's header comment (line 1, `-- oneflow.x: what it is`) becomes
#   the module's doc comment (`@module`), or LDoc would take the first
#   function's comment for it (LDoc ignores a `---` line holding " -- ").
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-build/doc}
cd "$ROOT"
command -v ldoc >/dev/null || { echo "make doc: ldoc not found (apt-get install lua-ldoc)" >&2; exit 1; }
SRC=build/doc-src
rm -rf "$SRC"
mkdir -p "$SRC"
cp -R lua/oneflow lua/flowvision lua/flowtext "$SRC"/
find "$SRC" -name '*.lua' -exec sed -i \
  -e 's/^----\+ *[^- ].*$//' \
  -e "s/^def('\\([A-Za-z0-9_]*\\)', *function *(/function flow.\\1(/" \
  -e 's/^function T\.flow\./function flow./' \
  -e "s/^def('\\([A-Za-z0-9_]*\\)', */flow.\\1 = /" {} +
# the header comment: `--- ` on its first line, `-- @module name` after it
find "$SRC" -name '*.lua' | while read -r f; do
  mod=$(echo "${f#"$SRC"/}" | sed -e 's/\.lua$//' -e 's|/init$||' -e 's|/|.|g')
  awk -v mod="$mod" '
    NR == 1 && /^-- / { head = 1; sub(/^-- /, ""); gsub(/ -- /, ": "); $0 = "--- " $0 }
    head && !/^--/ { print "-- @module " mod; head = 0 }
    { print }' "$f" > "$f.tmp" && mv "$f.tmp" "$f"
done
ldoc -q -c config.ld -d "$OUT" . 2>&1 | grep -v ': contains no items$' >&2 || true
# ldoc -q exits 0 on some errors: the index page is the proof
test -s "$OUT/index.html" || { echo "make doc: ldoc wrote no $OUT/index.html" >&2; exit 1; }
echo "API reference: $OUT/index.html"
