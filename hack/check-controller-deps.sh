#!/usr/bin/env bash
# The controller build (the image's binary: raygate-cli without its default `sim` feature) links
# none of the simulator, the demo, the report's charts, the CEL and JSON Schema evaluators (the
# sim API server's), nor tokio's test-util. Reads Cargo.lock only (cargo tree, offline, ~1 s);
# hack/test.sh runs it. Prints the dependency counts of both builds.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly FORBIDDEN=(raygate-sim raygate-demo raygate-testing plotters plotters-svg cel jsonschema proptest)

tree() { cargo tree --offline --locked -p raygate-cli -e normal --prefix none "$@"; }

controller=$(tree --no-default-features | awk '{ print $1 }' | sort -u)
full=$(tree | awk '{ print $1 }' | sort -u)
bad=()
for crate in "${FORBIDDEN[@]}"; do
    grep -qx "$crate" <<<"$controller" && bad+=("$crate")
done
if ((${#bad[@]} > 0)); then
    echo "check-controller-deps: the controller build links ${bad[*]}:" >&2
    for crate in "${bad[@]}"; do
        cargo tree --offline --locked -p raygate-cli --no-default-features -e normal -i "$crate" >&2
    done
    exit 1
fi
# test-util is a feature, not a crate: look at tokio's enabled features.
if cargo tree --offline --locked -p raygate-cli --no-default-features -e normal,features -i tokio |
    grep -q 'tokio feature "test-util"'; then
    echo "check-controller-deps: the controller build enables tokio's test-util" >&2
    exit 1
fi
# The full build must still have them: otherwise this check tests nothing.
for crate in raygate-sim raygate-demo plotters; do
    grep -qx "$crate" <<<"$full" || { echo "check-controller-deps: the default build lacks $crate" >&2; exit 1; }
done
echo "check-controller-deps: controller build $(wc -l <<<"$controller") crates, default build $(wc -l <<<"$full") (none of ${FORBIDDEN[*]}, no tokio test-util)"
