#!/usr/bin/env bash
# build-image.sh — raygate's image as an OCI image archive, without a container daemon:
#
#   hack/build-image.sh                      # the release profile, dist/raygate-image.oci.tar
#   PROFILE=dev hack/build-image.sh          # the debug build (CI boots this one: minutes, not tens)
#   skopeo copy oci-archive:dist/raygate-image.oci.tar docker://registry.example.com/raygate:v0.1.0
#
# The binary is the controller build (raygate-cli without its default `sim` feature: no simulator,
# demo, charts, CEL or JSON Schema; hack/check-controller-deps.sh). The root filesystem is built
# from files, like distroless/cc: the binary at /raygate, the C libraries it links (glibc, libgcc_s:
# from this machine, as `ldd` lists them), CA certificates, /etc/passwd and /etc/group with the
# unprivileged user 65532 (distroless' "nonroot"), nothing else: no shell, no package manager.
# The config matches the Dockerfile's image (tests/deploy_manifests.rs): user 65532:65532,
# entrypoint /raygate, argument `controller`, labels org.opencontainers.image.*.
#
# Environment:
#   PROFILE   cargo profile: release (default), dev, or any profile of Cargo.toml
#   VERSION   image tag and version label (default: v + the workspace version)
#   OUT       output archive (default dist/raygate-image.oci.tar)
#   SOURCE_DATE_EPOCH  the image's creation time (default: the last commit's; reproducible)
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "build-image.sh: $*" >&2; exit 1; }

readonly PROFILE=${PROFILE:-release}
workspace_version=$(awk '/^\[workspace.package\]/ { p = 1 } p && /^version *=/ { gsub(/"/, "", $3); print $3; exit }' Cargo.toml)
readonly VERSION=${VERSION:-v$workspace_version}
readonly OUT=${OUT:-dist/raygate-image.oci.tar}
if [[ -z "${SOURCE_DATE_EPOCH:-}" ]]; then
    SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH

t0=$SECONDS
cargo build --locked --quiet -p raygate-cli --no-default-features --bin raygate --profile "$PROFILE"
case $PROFILE in
    dev | test) dir=debug ;;
    bench) dir=release ;;
    *) dir=$PROFILE ;;
esac
readonly BIN=${CARGO_TARGET_DIR:-target}/$dir/raygate
[[ -x "$BIN" ]] || die "cargo built no $BIN"
echo "build-image.sh: built $BIN ($PROFILE profile) in $((SECONDS - t0)) s, $(stat -c %s "$BIN") bytes"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/etc/ssl/certs" "$root/home/nonroot" "$root/tmp"
chmod 1777 "$root/tmp"
# The image runs the stripped binary; the unstripped one stays in target/ to symbolize a backtrace.
strip -o "$root/raygate" "$BIN"
chmod 0755 "$root/raygate"

# The shared libraries and the dynamic loader, at the paths the binary names (`ldd` prints
# "name => /path (addr)" and the loader as "/path (addr)").
if ldd "$BIN" >/dev/null 2>&1; then
    while read -r lib; do
        [[ -n "$lib" ]] || continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
        chmod 0755 "$root$lib"
    done < <(ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
fi

ca=/etc/ssl/certs/ca-certificates.crt
[[ -s "$ca" ]] || die "no $ca on this machine (Debian's ca-certificates package)"
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
nonroot:x:65532:
GROUP
# glibc's resolver: /etc/hosts, then DNS (the pod's resolv.conf is mounted by the kubelet).
echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
chmod -R u=rwX,go=rX "$root/etc" "$root/home"

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
mkdir -p "$(dirname "$OUT")"
python3 hack/oci-image.py "$root" "$OUT" "$VERSION" \
    --label "org.opencontainers.image.title=raygate" \
    --label "org.opencontainers.image.description=Quota gate for KubeRay RayService zero-downtime upgrades on fixed capacity" \
    --label "org.opencontainers.image.version=$VERSION" \
    --label "org.opencontainers.image.revision=$revision" \
    --label "org.opencontainers.image.licenses=Apache-2.0" \
    --label "org.opencontainers.image.created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
echo "build-image.sh: wrote $OUT ($(stat -c %s "$OUT") bytes; /raygate $(stat -c %s "$root/raygate") bytes stripped) in $((SECONDS - t0)) s"
