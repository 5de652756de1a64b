#!/usr/bin/env bash
# Vendor the web client's third-party modules from npm into web-fixtures/vendor/ (committed, so
# the binary builds with cargo alone): marked (Markdown), DOMPurify (its HTML made safe) and
# highlight.js (code highlighting, its common languages), each as one ES module, with their
# licenses. Run it to change a version; the versions are pinned here.
set -euo pipefail
cd "$(dirname "$0")/.."

marked=18.2.1
dompurify=3.4.18
highlight=11.12.0

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "marked@$marked" "dompurify@$dompurify" \
  "@highlightjs/cdn-assets@$highlight" > /dev/null)
for tgz in "$work"/*.tgz; do
  mkdir -p "${tgz%.tgz}" && tar xzf "$tgz" -C "${tgz%.tgz}"
done

out=web-fixtures/vendor
mkdir -p "$out"
strip_map() { sed '/^\/\/# sourceMappingURL=/d' "$1"; }
strip_map "$work/marked-$marked/package/lib/marked.esm.js" > "$out/marked.js"
strip_map "$work/dompurify-$dompurify/package/dist/purify.es.mjs" > "$out/purify.js"
strip_map "$work/highlightjs-cdn-assets-$highlight/package/es/highlight.min.js" > "$out/highlight.js"
{
  echo "# Licenses of the vendored modules"
  echo
  echo "Written by scripts/vendor-web.sh from npm."
  for pair in "marked.js:marked@$marked:marked-$marked/package/LICENSE" \
              "purify.js:dompurify@$dompurify:dompurify-$dompurify/package/LICENSE" \
              "highlight.js:@highlightjs/cdn-assets@$highlight:highlightjs-cdn-assets-$highlight/package/LICENSE"; do
    IFS=: read -r file package license <<< "$pair"
    echo
    echo "## $file — $package"
    echo
    echo '```'
    cat "$work/$license"
    echo '```'
  done
} > "$out/LICENSES.md"
echo "vendor-web.sh: wrote $out/"
