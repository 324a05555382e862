#!/usr/bin/env bash
# Fails when crds/ differs from what `raygate crdgen` generates from vendored-types.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo run --quiet --bin raygate -- crdgen --out "$tmp" >/dev/null
if ! diff -ru crds "$tmp" >"$tmp.diff" 2>&1; then
  echo "crds/ is stale: run 'cargo run -- crdgen' and commit the result. Difference:" >&2
  head -50 "$tmp.diff" >&2
  rm -f "$tmp.diff"
  exit 1
fi
rm -f "$tmp.diff"
echo "crds/ is up to date ($(ls crds | wc -l) CRDs)"
