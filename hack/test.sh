#!/usr/bin/env bash
# The one command that runs every raygate test: unit, property and integration tests.
# Integration tests need the test API server; it is installed first (seconds when cached). The
# HTML report's browser test needs Debian's Chromium (installed once: 22 s measured here; then 0.3 s).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/install-test-apiserver.sh
hack/install-chromium.sh
exec cargo test --workspace "$@"
