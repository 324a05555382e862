#!/usr/bin/env bash
# The one command that runs every raygate test: unit, property and integration tests.
# Integration tests need the test API server; it is installed first (seconds when cached). The
# HTML report's browser test needs Debian's Chromium (installed once: 22 s measured here; then 0.3 s);
# the chart tests render charts/raygate with Helm's library (PyPI's helm-python-sdk: 25 s once) and
# check its alerts and dashboard queries with promtool (Debian's prometheus package).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/install-test-apiserver.sh
hack/install-chromium.sh
hack/install-helm.sh
hack/install-promtool.sh
exec cargo test --workspace "$@"
