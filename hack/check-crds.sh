#!/usr/bin/env bash
# Fails when crds/ or its copies config/crd/bases/ and config/crd-raygate/ (what `kubectl apply -k
# config/default` installs; kustomize cannot load ../../crds) or the Helm chart's copy differs from what
# `raygate crdgen` generates, or when the upstream CRDs vendored in sim/crds/upstream/ differ from
# ../shared/upstream-crds.
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
# raygate's own CRDs, copied into config/crd-raygate (installed in every mode)
for f in "$tmp"/gen/*.raygate.io.yaml; do
  if ! diff -u "$f" "config/crd-raygate/$(basename "$f")" >"$tmp/diff" 2>&1; then
    echo "config/crd-raygate/$(basename "$f") is stale: run 'cp crds/*.raygate.io.yaml config/crd-raygate/' and commit the result. Difference:" >&2
    head -50 "$tmp/diff" >&2
    stale=1
  fi
done
# the Helm chart's copy (hack/chart-crds.sh renders it from crds/)
mkdir -p "$tmp/chart"
cp -r charts "$tmp/chart/" && mkdir -p "$tmp/chart/crds" && cp crds/*.yaml "$tmp/chart/crds/"
mkdir -p "$tmp/chart/hack" && cp hack/chart-crds.sh "$tmp/chart/hack/"
(cd "$tmp/chart" && hack/chart-crds.sh >/dev/null)
if ! diff -ru charts/raygate/templates/crds "$tmp/chart/charts/raygate/templates/crds" >"$tmp/diff" 2>&1; then
  echo "charts/raygate/templates/crds/ is stale: run hack/chart-crds.sh and commit the result. Difference:" >&2
  head -50 "$tmp/diff" >&2
  stale=1
fi
# the upstream CRDs (KubeRay, Kueue, LWS) vendored for the binary (`raygate demo` embeds them:
# sim/src/server/upstream.rs) must be the ones every test checks against (../shared/upstream-crds)
if [ ! -d ../shared/upstream-crds ]; then
  echo "../shared/upstream-crds is missing (beside this checkout): cannot check sim/crds/upstream/" >&2
  stale=1
elif ! diff -ru ../shared/upstream-crds sim/crds/upstream >"$tmp/diff" 2>&1; then
  echo "sim/crds/upstream/ differs from ../shared/upstream-crds: run 'cp ../shared/upstream-crds/*.yaml sim/crds/upstream/' (and list new files in sim/src/server/upstream.rs), then commit. Difference:" >&2
  head -50 "$tmp/diff" >&2
  stale=1
fi
[ "$stale" = 0 ] || exit 1
echo "crds/, config/crd/bases/ and the chart's copy are up to date ($(ls crds | wc -l) CRDs); sim/crds/upstream/ matches ../shared/upstream-crds ($(ls sim/crds/upstream | wc -l) files)"
