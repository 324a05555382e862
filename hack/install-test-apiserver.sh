#!/usr/bin/env bash
# install-test-apiserver.sh — build a real Kubernetes CRD API server
# (k8s.io/apiextensions-apiserver) and fetch etcd for raygate's integration
# tests, from Debian sid packages, into a cache directory outside the repo.
#
# Result (stable paths):
#   $RAYGATE_CACHE_DIR/test-apiserver/bin/apiextensions-apiserver
#   $RAYGATE_CACHE_DIR/test-apiserver/bin/etcd
# ($RAYGATE_CACHE_DIR defaults to $HOME/.cache/raygate.)
#
# How: a private apt configuration (own sources.list, lists, cache and an
# empty dpkg status; the host's apt sources and state are never touched)
# resolves the dependency closure of golang-k8s-apiextensions-apiserver-dev in
# sid, downloads the golang-*-dev source packages, the Go toolchain and
# etcd-server, unpacks them with dpkg-deb into a scratch root and builds the
# server in GOPATH mode with no network.
#
# Idempotent: when both binaries exist and the stamp file records the same
# inputs, it prints "up to date" and exits 0 without touching the network.
# Parallel callers are serialised with flock.
#
# Environment:
#   RAYGATE_CACHE_DIR               cache root (default $HOME/.cache/raygate)
#   GO_PKG                          Go toolchain package, e.g. golang-1.27-go
#                                   (default: what sid's golang-go depends on)
#   DEBIAN_MIRROR                   default http://deb.debian.org/debian
#   DEBIAN_SUITE                    default sid
#   RAYGATE_TEST_APISERVER_REFRESH  1: re-read sid even if up to date, and
#                                   rebuild if any package version changed
#   RAYGATE_TEST_APISERVER_KEEP_WORK 1: keep the scratch root/Go cache
#   RAYGATE_TEST_APISERVER_SCRATCH  directory for the ~3.7 GiB (120k files)
#                                   of build scratch. Default: /dev/shm if it
#                                   is a tmpfs with room to spare and RAM is
#                                   plentiful, else inside the cache dir.
#                                   (On a busy disk, deleting the scratch
#                                   alone took minutes; on tmpfs, seconds.)

# The whole script is one { ... } block: bash parses it completely before
# running it, so a checkout or edit of this file during a build is harmless.
{
set -Eeuo pipefail

# Bump whenever the build recipe changes: it invalidates every cache.
readonly SCRIPT_VERSION="raygate-test-apiserver/1"

readonly MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
readonly SUITE="${DEBIAN_SUITE:-sid}"
readonly KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
readonly MAIN_PKG=golang-k8s-apiextensions-apiserver-dev
readonly ETCD_PKG=etcd-server
readonly GO_IMPORT=k8s.io/apiextensions-apiserver
readonly CACHE_DIR="${RAYGATE_CACHE_DIR:-${HOME:?HOME is not set}/.cache/raygate}/test-apiserver"
readonly BIN_DIR="$CACHE_DIR/bin"
readonly STAMP="$CACHE_DIR/stamp"
readonly APISERVER="$BIN_DIR/apiextensions-apiserver"
readonly ETCD="$BIN_DIR/etcd"
readonly TOTAL_STEPS=7
readonly LOG_PREFIX="install-test-apiserver"

STEP_NO=0
STEP_NAME="start"
STEP_T0=0
RUN_T0=$(date +%s%N)

log() { printf '%s: %s\n' "$LOG_PREFIX" "$*"; }

die() {
    printf '%s: step %s/%s (%s): %s\n' "$LOG_PREFIX" "$STEP_NO" "$TOTAL_STEPS" "$STEP_NAME" "$*" >&2
    exit 1
}

# shellcheck disable=SC2317 # invoked by the ERR trap
on_err() {
    local rc=$1 line=$2 cmd=$3
    trap - ERR
    die "command failed (exit $rc) at line $line: $cmd"
}
trap 'on_err $? $LINENO "$BASH_COMMAND"' ERR

# On any exit, free the big parts of the scratch (RAM when it is a tmpfs);
# its small logs stay for a look after a failure.
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup_scratch() {
    if [[ -n "${ROOT:-}" && "${RAYGATE_TEST_APISERVER_KEEP_WORK:-0}" != 1 ]]; then
        rm -rf "$ROOT" "$WORK_DIR/gocache" "$WORK_DIR/tmp"
    fi
}
trap cleanup_scratch EXIT

# elapsed NS_START -> "12.3s"
elapsed() {
    local ms=$((($(date +%s%N) - $1) / 1000000))
    printf '%d.%ds' $((ms / 1000)) $((ms % 1000 / 100))
}

end_step() {
    if ((STEP_NO > 0)); then
        log "step $STEP_NO/$TOTAL_STEPS ($STEP_NAME) done in $(elapsed "$STEP_T0")"
    fi
}

step() {
    end_step
    STEP_NO=$1
    STEP_NAME=$2
    STEP_T0=$(date +%s%N)
    log "step $STEP_NO/$TOTAL_STEPS ($STEP_NAME): $3"
}

# Prints the stamp's first line: everything that, when changed, must cause a
# rebuild without first asking the network.
inputs_key() {
    printf 'script=%s mirror=%s suite=%s arch=%s go_pkg=%s\n' \
        "$SCRIPT_VERSION" "$MIRROR" "$SUITE" "$ARCH" "${GO_PKG:-auto}"
}

up_to_date_fast() {
    [[ -x "$APISERVER" && -x "$ETCD" && -f "$STAMP" ]] || return 1
    [[ "$(head -n 1 "$STAMP")" == "$(inputs_key)" ]]
}

ARCH=$(dpkg --print-architecture 2>/dev/null || true)
[[ -n "$ARCH" ]] || { STEP_NAME=preflight; die "dpkg --print-architecture failed (is this Debian?)"; }

if [[ "${RAYGATE_TEST_APISERVER_REFRESH:-0}" != 1 ]] && up_to_date_fast; then
    log "up to date ($APISERVER, $ETCD)"
    exit 0
fi

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.lock"
if ! flock -n 9; then
    log "another install is running in $CACHE_DIR; waiting for its lock (up to 30 min)"
    flock -w 1800 9 || { STEP_NAME=lock; die "timed out waiting for $CACHE_DIR/.lock"; }
    # The other caller may have finished the job meanwhile.
    if [[ "${RAYGATE_TEST_APISERVER_REFRESH:-0}" != 1 ]] && up_to_date_fast; then
        log "up to date ($APISERVER, $ETCD)"
        exit 0
    fi
fi

readonly APT_DIR="$CACHE_DIR/apt"
readonly DEB_DIR="$CACHE_DIR/debs"
# Scratch for the unpacked root and the Go build cache.
scratch="${RAYGATE_TEST_APISERVER_SCRATCH:-}"
if [[ -z "$scratch" && -d /dev/shm && -w /dev/shm && "$(stat -f -c %T /dev/shm 2>/dev/null)" == tmpfs ]]; then
    shm_free_mib=$(df -Pk /dev/shm | awk 'NR == 2 { print int($4 / 1024) }')
    mem_avail_mib=$(awk '$1 == "MemAvailable:" { print int($2 / 1024) }' /proc/meminfo 2>/dev/null || echo 0)
    if ((shm_free_mib >= 6144 && mem_avail_mib >= 12288)); then
        scratch=/dev/shm
    fi
fi
if [[ -n "$scratch" ]]; then
    # One scratch per cache dir, so the cache dir's lock covers it too.
    cache_id=$(printf %s "$CACHE_DIR" | cksum | cut -d' ' -f1)
    WORK_DIR="$scratch/raygate-test-apiserver-$cache_id"
else
    WORK_DIR="$CACHE_DIR/work"
fi
readonly WORK_DIR
readonly ROOT="$WORK_DIR/root"

# ---------------------------------------------------------------------------
step 1 preflight "checking tools, keyring and space (cache: $CACHE_DIR, scratch: $WORK_DIR)"

for tool in apt-get apt-cache dpkg-deb flock awk sed sort find; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        case $tool in
            apt-get | apt-cache) pkg=apt ;;
            dpkg-deb) pkg=dpkg ;;
            flock) pkg=util-linux ;;
            awk) pkg=mawk ;;
            find) pkg=findutils ;;
            *) pkg=coreutils ;;
        esac
        die "required tool '$tool' not found (package $pkg)"
    fi
done

if [[ ! -s "$KEYRING" ]]; then
    if [[ $(id -u) -ne 0 ]]; then
        die "package debian-archive-keyring: $KEYRING is missing; run 'apt-get install debian-archive-keyring' as root"
    fi
    log "package debian-archive-keyring: $KEYRING is missing; installing it with the system apt"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debian-archive-keyring; then
        die "package debian-archive-keyring: $KEYRING is missing and 'apt-get install debian-archive-keyring' failed (the system's apt lists may need 'apt-get update')"
    fi
    [[ -s "$KEYRING" ]] || die "package debian-archive-keyring: installed but $KEYRING still missing"
fi

# A build peaks at about 4.2 GiB: 2.3 GiB of unpacked sources and a 1.4 GiB Go
# build cache (both removed afterwards, in WORK_DIR), 280 MiB of .debs and
# 100 MiB of binaries (kept, in CACHE_DIR).
mkdir -p "$WORK_DIR"
free_mib() { df -Pk "$1" | awk 'NR == 2 { print int($4 / 1024) }'; }
need_work=4096 need_cache=512
if [[ "$(stat -c %d "$WORK_DIR")" == "$(stat -c %d "$CACHE_DIR")" ]]; then
    need_work=$((need_work + need_cache)) need_cache=0
fi
avail=$(free_mib "$WORK_DIR")
((avail >= need_work)) || die "only $avail MiB free for $WORK_DIR; a build needs about $need_work MiB"
avail=$(free_mib "$CACHE_DIR")
((avail >= need_cache)) || die "only $avail MiB free in $CACHE_DIR; need about $need_cache MiB"

# ---------------------------------------------------------------------------
step 2 index "fetching the $SUITE package index from $MIRROR (private apt config in $APT_DIR)"

mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" "$APT_DIR/empty.d" "$DEB_DIR" "$WORK_DIR"
printf 'deb [signed-by=%s] %s %s main\n' "$KEYRING" "$MIRROR" "$SUITE" >"$APT_DIR/sources.list"
: >"$APT_DIR/status" # empty dpkg status: resolve as for an empty system
: >"$APT_DIR/preferences"
cat >"$APT_DIR/apt.conf" <<EOF
// Generated by $0; private to the test-apiserver cache.
// The host's hooks must not run for this private index.
#clear APT::Update::Post-Invoke;
#clear APT::Update::Post-Invoke-Success;
#clear DPkg::Post-Invoke;
#clear DPkg::Pre-Invoke;
#clear APT::Architectures;
APT::Architecture "$ARCH";
APT::Architectures { "$ARCH"; };
Dir::Etc::sourcelist "$APT_DIR/sources.list";
Dir::Etc::sourceparts "$APT_DIR/empty.d";
Dir::Etc::preferences "$APT_DIR/preferences";
Dir::Etc::preferencesparts "$APT_DIR/empty.d";
Dir::State::Lists "$APT_DIR/lists";
Dir::State::status "$APT_DIR/status";
Dir::State::extended_states "$APT_DIR/extended_states";
Dir::Cache "$APT_DIR/cache";
Dir::Cache::pkgcache "pkgcache.bin";
Dir::Cache::srcpkgcache "srcpkgcache.bin";
Acquire::Languages "none";
Acquire::IndexTargets::deb::DEP-11::DefaultEnabled "false";
EOF
if [[ $(id -u) -eq 0 ]]; then
    # The cache lives in root's private home, which the _apt sandbox user
    # cannot enter; say so up front instead of getting a warning per file.
    echo 'APT::Sandbox::User "root";' >>"$APT_DIR/apt.conf"
fi

APT_OPTS=(-c "$APT_DIR/apt.conf" -q)

if ! apt-get "${APT_OPTS[@]}" --error-on=any update >"$APT_DIR/update.log" 2>&1; then
    sed 's/^/    /' "$APT_DIR/update.log" >&2
    die "apt-get update of '$SUITE' from $MIRROR failed (see above)"
fi
if ! compgen -G "$APT_DIR/lists/*_dists_${SUITE}_main_binary-${ARCH}_Packages*" >/dev/null; then
    sed 's/^/    /' "$APT_DIR/update.log" >&2
    die "apt-get update left no Packages index for $SUITE/main/$ARCH"
fi

# ---------------------------------------------------------------------------
step 3 resolve "resolving $MAIN_PKG's dependency closure and the Go toolchain"

# pkg_field PKG FIELD -> value of FIELD of PKG's candidate, or nothing.
pkg_field() {
    apt-cache "${APT_OPTS[@]}" show --no-all-versions "$1" 2>/dev/null |
        awk -v f="$2:" '$1 == f && !done { sub(/^[^:]*: */, ""); print; done = 1 }' || true
}

require_pkg() {
    [[ -n "$(pkg_field "$1" Version)" ]] || die "package $1 not found in $SUITE${2:+ ($2)}"
}

require_pkg "$MAIN_PKG"
require_pkg "$ETCD_PKG"

if [[ -n "${GO_PKG:-}" ]]; then
    go_pkg="$GO_PKG"
    log "  Go toolchain from GO_PKG: $go_pkg"
else
    go_deps=$(pkg_field golang-go Depends)
    [[ -n "$go_deps" ]] || die "package golang-go not found in $SUITE (needed to pick the Go toolchain; set GO_PKG=golang-1.NN-go)"
    go_pkg=$(grep -oE 'golang-[0-9]+\.[0-9]+-go' <<<"$go_deps" | head -n 1 || true)
    [[ -n "$go_pkg" ]] || die "package golang-go in $SUITE no longer depends on a golang-X.Y-go toolchain (Depends: $go_deps); set GO_PKG=golang-1.NN-go"
    log "  Go toolchain from golang-go's Depends: $go_pkg"
fi
[[ "$go_pkg" =~ ^golang-([0-9]+\.[0-9]+)-go$ ]] || die "package $go_pkg: GO_PKG must look like golang-1.NN-go"
readonly GO_VER="${BASH_REMATCH[1]}"
readonly GO_PKG_NAME="$go_pkg"
readonly GO_SRC_PKG="golang-$GO_VER-src"
require_pkg "$GO_PKG_NAME" "Go toolchain"
require_pkg "$GO_SRC_PKG" "Go standard library sources"

apt-cache "${APT_OPTS[@]}" depends --recurse --no-recommends --no-suggests \
    --no-conflicts --no-breaks --no-replaces --no-enhances "$MAIN_PKG" \
    >"$WORK_DIR/closure.txt" 2>"$WORK_DIR/closure.err" ||
    { sed 's/^/    /' "$WORK_DIR/closure.err" >&2; die "package $MAIN_PKG: apt-cache depends --recurse failed"; }

mapfile -t dev_pkgs < <(grep -E '^golang-[^ ]*-dev$' "$WORK_DIR/closure.txt" | sort -u || true)
((${#dev_pkgs[@]} >= 50)) || die "package $MAIN_PKG: only ${#dev_pkgs[@]} golang-*-dev packages in its closure; expected hundreds"

# Dependencies that nothing in sid provides (a "<virtual>" with no provider
# line under it, outside an or-group). Not fatal — many are test-only — but
# named again if the build fails.
unsatisfied=$(awk '
    function flush() { if (pend != "") print pend; pend = "" }
    /^    / { pend = ""; next }            # a provider of the preceding <virtual>
    /^  / {                                # "  Depends: x" or "  |Depends: x"
        flush()
        in_or = prev_or; prev_or = ($1 ~ /^[|]/)
        if (!prev_or && !in_or && $2 ~ /^<.*>$/) { pend = $2; gsub(/[<>]/, "", pend) }
        next
    }
    { flush(); prev_or = 0 }
    END { flush() }' "$WORK_DIR/closure.txt" | grep -E -- '-dev$' | sort -u || true)
if [[ -n "$unsatisfied" ]]; then
    log "  warning: dependencies with no package in $SUITE: $(tr '\n' ' ' <<<"$unsatisfied")"
fi

all_pkgs=("${dev_pkgs[@]}" "$GO_PKG_NAME" "$GO_SRC_PKG" "$ETCD_PKG")

# "pkg version arch" for every package to fetch, sorted.
apt-cache "${APT_OPTS[@]}" show --no-all-versions "${all_pkgs[@]}" 2>"$WORK_DIR/show.err" |
    awk '/^Package: /{p=$2} /^Version: /{v=$2} /^Architecture: /{a=$2} /^$/{ if (p != "") print p, v, a; p=v=a="" }
         END { if (p != "") print p, v, a }' | sort -u >"$WORK_DIR/versions" || true
for p in "${all_pkgs[@]}"; do
    grep -q "^$p " "$WORK_DIR/versions" || die "package $p not found in $SUITE (needed by $MAIN_PKG's closure)"
done

main_ver=$(awk -v p="$MAIN_PKG" '$1 == p { print $2 }' "$WORK_DIR/versions")
go_ver_full=$(awk -v p="$GO_PKG_NAME" '$1 == p { print $2 }' "$WORK_DIR/versions")
etcd_ver=$(awk -v p="$ETCD_PKG" '$1 == p { print $2 }' "$WORK_DIR/versions")
log "  $MAIN_PKG $main_ver, $GO_PKG_NAME $go_ver_full, $ETCD_PKG $etcd_ver; ${#dev_pkgs[@]} golang-*-dev packages"

new_stamp="$(inputs_key)
$(awk '{ print $1, $2 }' "$WORK_DIR/versions")"

if [[ -x "$APISERVER" && -x "$ETCD" && -f "$STAMP" && "$(cat "$STAMP")" == "$new_stamp" ]]; then
    end_step
    log "up to date: no package changed in $SUITE ($APISERVER, $ETCD)"
    rm -rf "$WORK_DIR"
    rm -f "$APT_DIR"/cache/*.bin
    exit 0
fi

# ---------------------------------------------------------------------------
step 4 download "downloading ${#all_pkgs[@]} packages into $DEB_DIR"

# deb_name PKG VERSION ARCH -> file name apt-get download gives it.
deb_name() { printf '%s_%s_%s.deb' "$1" "${2//:/%3a}" "$3"; }

mapfile -t want_debs < <(while read -r p v a; do deb_name "$p" "$v" "$a"; echo; done <"$WORK_DIR/versions")
missing=()
while read -r p v a; do
    [[ -s "$DEB_DIR/$(deb_name "$p" "$v" "$a")" ]] || missing+=("$p=$v")
done <"$WORK_DIR/versions"
log "  $((${#all_pkgs[@]} - ${#missing[@]})) already in the cache, ${#missing[@]} to fetch"
if ((${#missing[@]} > 0)); then
    if ! (cd "$DEB_DIR" && apt-get "${APT_OPTS[@]}" download "${missing[@]}") >"$WORK_DIR/download.log" 2>&1; then
        grep -E '^(E|W):' "$WORK_DIR/download.log" | sed 's/^/    /' >&2 || true
        # Name the first of our packages that apt's errors mention.
        declare -A wanted=()
        for p in "${all_pkgs[@]}"; do wanted[$p]=1; done
        first=""
        while read -r tok; do
            [[ -n "${wanted[$tok]:-}" ]] && { first=$tok; break; }
        done < <(grep -E '^E:' "$WORK_DIR/download.log" | grep -oE '[a-z0-9][a-z0-9.+-]+' || true)
        die "apt-get download failed${first:+ (package $first)}; log: $WORK_DIR/download.log"
    fi
fi
while read -r p v a; do
    [[ -s "$DEB_DIR/$(deb_name "$p" "$v" "$a")" ]] || die "package $p $v: not downloaded (expected $DEB_DIR/$(deb_name "$p" "$v" "$a"))"
done <"$WORK_DIR/versions"
# Forget packages no longer needed (older versions, dropped dependencies).
declare -A keep=()
for f in "${want_debs[@]}"; do keep[$f]=1; done
for f in "$DEB_DIR"/*.deb; do
    [[ -e "$f" ]] || continue
    [[ -n "${keep[$(basename "$f")]:-}" ]] || rm -f "$f"
done
log "  $(du -sh "$DEB_DIR" | cut -f1) of packages"

# ---------------------------------------------------------------------------
step 5 unpack "unpacking into $ROOT"

rm -rf "$ROOT" "$WORK_DIR/gocache" "$WORK_DIR/tmp" # left by a killed run
mkdir -p "$ROOT"
while read -r p v a; do
    deb="$DEB_DIR/$(deb_name "$p" "$v" "$a")"
    if ! dpkg-deb -x "$deb" "$ROOT" 2>"$WORK_DIR/unpack.err"; then
        sed 's/^/    /' "$WORK_DIR/unpack.err" >&2
        rm -f "$deb" # probably truncated or corrupt: fetch it again next time
        die "package $p $v: dpkg-deb -x failed (removed $deb; run again to re-download)"
    fi
done <"$WORK_DIR/versions"
# Absolute symlinks point at the host's /usr; re-aim them inside the root.
relinked=0
while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    ln -sfn "$ROOT$target" "$link"
    relinked=$((relinked + 1))
done < <(find "$ROOT" -type l -lname '/*' -print0)
log "  $(du -sh "$ROOT" | cut -f1) unpacked; $relinked absolute symlinks re-aimed into the root"

readonly GOROOT_DIR="$ROOT/usr/lib/go-$GO_VER"
readonly GO_BIN="$GOROOT_DIR/bin/go"
readonly GOPATH_DIR="$ROOT/usr/share/gocode"
[[ -x "$GO_BIN" ]] || die "package $GO_PKG_NAME: no $GO_BIN after unpacking"
[[ -d "$GOROOT_DIR/src/runtime" ]] || die "package $GO_SRC_PKG: no $GOROOT_DIR/src/runtime after unpacking"
[[ -d "$GOPATH_DIR/src/$GO_IMPORT" ]] || die "package $MAIN_PKG: no $GOPATH_DIR/src/$GO_IMPORT after unpacking"
[[ -x "$ROOT/usr/bin/etcd" ]] || die "package $ETCD_PKG: no usr/bin/etcd after unpacking"

# ---------------------------------------------------------------------------
step 6 build "go build $GO_IMPORT with $GO_PKG_NAME (GOPATH mode, no network)"

mkdir -p "$BIN_DIR" "$WORK_DIR/gocache" "$WORK_DIR/tmp"
if ! env -u GOFLAGS -u GOEXPERIMENT -u GOOS -u GOARCH -u GOBIN \
    GOENV=off GO111MODULE=off GOWORK=off GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 \
    GOROOT="$GOROOT_DIR" GOPATH="$GOPATH_DIR" GOCACHE="$WORK_DIR/gocache" GOTMPDIR="$WORK_DIR/tmp" \
    "$GO_BIN" build -trimpath -ldflags='-s -w' -o "$APISERVER.new" "$GO_IMPORT" \
    >"$WORK_DIR/build.log" 2>&1; then
    sed 's/^/    /' "$WORK_DIR/build.log" | tail -n 40 >&2
    if [[ -n "$unsatisfied" ]]; then
        log "  note: dependencies with no package in $SUITE: $(tr '\n' ' ' <<<"$unsatisfied")" >&2
    fi
    die "package $MAIN_PKG $main_ver: go build failed with $GO_PKG_NAME $go_ver_full (log: $WORK_DIR/build.log)"
fi
install -m 0755 "$ROOT/usr/bin/etcd" "$ETCD.new"

# ---------------------------------------------------------------------------
step 7 check "self-check, then install into $BIN_DIR"

"$APISERVER.new" --help >/dev/null 2>"$WORK_DIR/check.err" ||
    { sed 's/^/    /' "$WORK_DIR/check.err" >&2; die "package $MAIN_PKG: built apiextensions-apiserver --help fails"; }
etcd_version=$("$ETCD.new" --version 2>&1) ||
    { printf '    %s\n' "$etcd_version" >&2; die "package $ETCD_PKG: etcd --version fails on this host"; }
log "  $(head -n 1 <<<"$etcd_version")"
mv -f "$APISERVER.new" "$APISERVER"
mv -f "$ETCD.new" "$ETCD"
printf '%s\n' "$new_stamp" >"$STAMP.new"
mv -f "$STAMP.new" "$STAMP"
log "  apiextensions-apiserver $(du -h "$APISERVER" | cut -f1), etcd $(du -h "$ETCD" | cut -f1)"

end_step
if [[ "${RAYGATE_TEST_APISERVER_KEEP_WORK:-0}" != 1 ]]; then
    t0=$(date +%s%N)
    rm -rf "$WORK_DIR"
    log "removed the scratch root and Go cache in $(elapsed "$t0") (the .debs stay in $DEB_DIR)"
fi
rm -f "$APT_DIR"/cache/*.bin # apt's binary caches (~100 MiB); rebuilt on demand
log "installed in $(elapsed "$RUN_T0"): $APISERVER ($MAIN_PKG $main_ver, $GO_PKG_NAME $go_ver_full), $ETCD ($ETCD_PKG $etcd_ver)"
exit 0
}
