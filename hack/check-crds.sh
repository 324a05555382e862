#!/usr/bin/env bash
# Fails when crds/ or its copy config/crd/bases/ (what `kubectl apply -k config/default`
# installs; kustomize cannot load ../../crds) differs from what `raygate crdgen` generates.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo run --quiet --bin raygate -- crdgen --out "$tmp/gen" >/dev/null
stale=0
for dir in crds config/crd/bases; do
  if ! diff -ru "$dir" "$tmp/gen" >"$tmp/diff" 2>&1; then
    echo "$dir/ is stale: run 'cargo run -- crdgen --out $dir' and commit the result. Difference:" >&2
    head -50 "$tmp/diff" >&2
    stale=1
  fi
done
[ "$stale" = 0 ] || exit 1
echo "crds/ and config/crd/bases/ are up to date ($(ls crds | wc -l) CRDs)"
