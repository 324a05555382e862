#!/usr/bin/env bash
# The one command that runs every raygate test: unit, property and integration tests.
# Integration tests need the test API server and the Kueue manager; they are installed first
# (seconds when cached). The HTML report's browser test needs Debian's Chromium (installed once: 22 s measured here; then 0.3 s);
# the chart tests render charts/raygate with Helm's library (PyPI's helm-python-sdk: 25 s once) and
# check its alerts and dashboard queries with promtool (Debian's prometheus package).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/install-test-apiserver.sh
# the real Kueue v0.19.2 manager for tests/real_kueue.rs and Kueue's scheduler as a driver for
# tests/kueue_differential (built once from ../shared/third-party: about 7 min on 2 cores, then
# cached)
hack/install-kueue.sh
hack/install-chromium.sh
hack/install-helm.sh
hack/install-promtool.sh
# The image: the controller build links no simulator (cargo tree, 1 s); its daemonless OCI archive
# from the debug build (a release build would add about ten minutes: docs/decisions.md),
# unpacked for tests/image_boot.rs, which boots its binary from the image's root filesystem.
hack/check-controller-deps.sh
image_dir=${CARGO_TARGET_DIR:-target}/image
PROFILE=dev OUT="$image_dir/raygate.oci.tar" hack/build-image.sh
hack/unpack-image.sh "$image_dir/raygate.oci.tar" "$image_dir/unpacked"
RAYGATE_IMAGE_DIR=$(realpath "$image_dir/unpacked")
export RAYGATE_IMAGE_DIR
exec cargo test --workspace "$@"
