#!/usr/bin/env bash
# The one command that runs every raygate test: unit, property and integration tests.
# Integration tests need the test API server; it is installed first (seconds when cached).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/install-test-apiserver.sh
exec cargo test --workspace "$@"
