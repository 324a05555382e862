#!/usr/bin/env bash
# Dependency audit (CI runs it), with what works without internet access beyond crates.io:
#   cargo-machete: dependencies declared in a Cargo.toml but never used (fails on any).
# Not checked here yet: licenses, bans and duplicate versions (cargo-deny), and security
# advisories (cargo-deny fetches the RustSec database from GitHub, which CI cannot reach).
# The tool is installed once per machine with `cargo install --locked` at a pinned version and
# reused afterwards (then this step takes about a second). A cold install took 18 min on this
# project's 2-core machine at load ~17 (niced); expect a few minutes on an idle one.
set -euo pipefail
cd "$(dirname "$0")/.."
MACHETE_VERSION=0.9.2

ensure() {
  local name=$1 version=$2
  if "$name" --version 2>/dev/null | grep -qF "$version"; then
    return
  fi
  local t0=$SECONDS
  echo "installing $name $version (once per machine)"
  cargo install --locked --quiet "$name" --version "$version"
  echo "installed $name $version in $((SECONDS - t0)) s"
}

ensure cargo-machete "$MACHETE_VERSION"
cargo machete
