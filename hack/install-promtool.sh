#!/usr/bin/env bash
# promtool, from Debian's prometheus package, for the chart's alert tests (tests/deploy_manifests.rs
# checks the PrometheusRule's rules and the Grafana dashboard's queries with `promtool check
# rules`). Idempotent: returns at once when promtool runs. Installs without recommends; in a
# container without an init system the package's service is not started.
set -euo pipefail
if command -v promtool >/dev/null 2>&1 && promtool --version >/dev/null 2>&1; then
  exit 0
fi
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  as_root=(sudo)
fi
t0=$SECONDS
echo "installing Debian's prometheus for promtool (once per machine)"
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
promtool --version | head -1
echo "installed promtool in $((SECONDS - t0)) s"
