#!/usr/bin/env bash
# Dependency audit (CI runs it), with what works without internet access beyond crates.io:
#   cargo-deny:    licenses (deny.toml's allow list), bans (wildcard versions fail; duplicate
#                  versions are listed as warnings), sources (crates.io only), all offline.
#   cargo-machete: dependencies declared in a Cargo.toml but never used (fails on any).
# Not checked: security advisories. cargo-deny fetches the RustSec database from GitHub, which
# CI cannot reach; run `cargo deny check advisories` where it can.
# The tools are installed once per machine with `cargo install --locked` at pinned versions and
# reused afterwards (then this step takes about 5 s). Cold installs measured on this project's
# 2-core machine at load ~17, niced: cargo-deny 883 s, cargo-machete 1104 s (both far less on an
# idle machine; CI's budget is 90 min).
set -euo pipefail
cd "$(dirname "$0")/.."
DENY_VERSION=0.20.2
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

ensure cargo-deny "$DENY_VERSION"
ensure cargo-machete "$MACHETE_VERSION"
# cargo-deny --offline reads every locked crate, including target-specific ones a build on this
# platform never downloads (e.g. plotters' web-sys): fetch them first (seconds when cached)
cargo fetch --locked --quiet
cargo deny --locked --offline check licenses bans sources
cargo machete
