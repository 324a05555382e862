#!/usr/bin/env bash
# install-kueue.sh — build the real Kueue v0.19.2 manager (sigs.k8s.io/kueue/cmd/kueue) from the
# vendored source archive in ../shared/third-party, offline, with the Go toolchain
# hack/install-test-apiserver.sh already downloaded (Debian's golang-1.NN-go and -src .debs in
# its cache), for the tests that run raygate's kueue mode against it (tests/real_kueue.rs); and,
# from the same tree, raygate-kueue-admit (hack/kueue-admit/: Kueue's own scheduler, cache and
# queue manager run to a fixed point on a file of Kueue objects), the reference side of the
# admission differential (tests/kueue_differential.rs).
#
# Result (stable paths):
#   $RAYGATE_CACHE_DIR/kueue/bin/kueue-manager
#   $RAYGATE_CACHE_DIR/kueue/bin/raygate-kueue-admit
#   $RAYGATE_CACHE_DIR/kueue/crds/*.yaml          Kueue's CRDs as its source ships them
# ($RAYGATE_CACHE_DIR defaults to $HOME/.cache/raygate.)
#
# Idempotent: when the binary exists and the stamp records the same archive and toolchain, it
# prints "up to date" and exits. Parallel callers are serialised with flock. About 6 minutes on
# 2 cores when cold.
#
# Environment:
#   RAYGATE_CACHE_DIR     cache root (default $HOME/.cache/raygate)
#   RAYGATE_SHARED_DIR    directory holding third-party/ (default <repo>/../shared)
{
set -Eeuo pipefail

readonly SCRIPT_VERSION="raygate-kueue/2"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO
readonly CACHE="${RAYGATE_CACHE_DIR:-${HOME:?HOME is not set}/.cache/raygate}"
readonly DIR="$CACHE/kueue"
readonly BIN="$DIR/bin/kueue-manager"
readonly DRIVER="$DIR/bin/raygate-kueue-admit"
readonly STAMP="$DIR/stamp"
readonly ARCHIVE="${RAYGATE_SHARED_DIR:-$REPO/../shared}/third-party/kueue-v0.19.2-src.tar.xz"
readonly DEBS="$CACHE/test-apiserver/debs"

log() { printf 'install-kueue: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ -f "$ARCHIVE" ]] || die "no Kueue source archive at $ARCHIVE"
if ! compgen -G "$DEBS/golang-1.*-go_*.deb" >/dev/null; then
    log "no Go toolchain in $DEBS yet: running hack/install-test-apiserver.sh first"
    "$REPO/hack/install-test-apiserver.sh"
fi
go_deb=$(ls "$DEBS"/golang-1.*-go_*.deb | sort -V | tail -n 1)
src_deb=$(ls "$DEBS"/golang-1.*-src_*.deb | sort -V | tail -n 1)
[[ -f "$go_deb" && -f "$src_deb" ]] || die "no golang-1.NN-go/-src .debs in $DEBS"
driver_sum=$(cat "$REPO"/hack/kueue-admit/*.go | sha256sum | cut -c1-16)
key="$SCRIPT_VERSION $(sha256sum "$ARCHIVE" | cut -c1-16) $(basename "$go_deb") driver $driver_sum"

up_to_date() { [[ -x "$BIN" && -x "$DRIVER" && -f "$STAMP" && "$(cat "$STAMP")" == "$key" ]]; }
if up_to_date; then
    log "up to date ($BIN)"
    exit 0
fi
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock -w 1800 9 || die "timed out waiting for $DIR/.lock"
if up_to_date; then
    log "up to date ($BIN)"
    exit 0
fi

t0=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/raygate-kueue.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "unpacking $(basename "$go_deb"), $(basename "$src_deb") and the Kueue source into $work"
dpkg-deb -x "$go_deb" "$work/root"
dpkg-deb -x "$src_deb" "$work/root"
goroot=$(ls -d "$work"/root/usr/lib/go-1.* | head -n 1)
[[ -x "$goroot/bin/go" ]] || die "no go binary in $go_deb"
mkdir -p "$work/src"
tar -xJf "$ARCHIVE" -C "$work/src"

mkdir -p "$work/src/cmd/raygate-kueue-admit"
cp "$REPO/hack/kueue-admit/main.go" "$REPO/hack/kueue-admit/bench.go" "$work/src/cmd/raygate-kueue-admit/"
cp "$REPO/hack/kueue-admit/export.go" "$work/src/pkg/scheduler/zz_raygate_export.go"

log "go build ./cmd/kueue ./cmd/raygate-kueue-admit (vendored, no network)"
mkdir -p "$DIR/bin" "$work/out"
if ! (cd "$work/src" && env -u GOFLAGS GOENV=off GOROOT="$goroot" GOPATH="$work/gopath" \
    GOCACHE="$work/gocache" GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=vendor \
    CGO_ENABLED=0 "$goroot/bin/go" build -trimpath -ldflags='-s -w' -o "$work/out/" \
    ./cmd/kueue ./cmd/raygate-kueue-admit >"$work/build.log" 2>&1); then
    tail -n 40 "$work/build.log" >&2
    die "go build of Kueue failed"
fi
"$work/out/kueue" --help >/dev/null 2>&1 || die "the built kueue-manager does not run here"
mv -f "$work/out/kueue" "$BIN.new"
mv -f "$work/out/raygate-kueue-admit" "$DRIVER"
rm -rf "$DIR/crds"
cp -r "$work/src/config/components/crd/bases" "$DIR/crds"
mv -f "$BIN.new" "$BIN"
printf '%s\n' "$key" >"$STAMP"
log "installed $BIN ($(du -h "$BIN" | cut -f1)), $DRIVER and $(ls "$DIR/crds" | wc -l) CRDs in $(($(date +%s) - t0)) s"
exit 0
}
