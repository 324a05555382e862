#!/usr/bin/env bash
# release.sh VERSION — everything a release ships, into dist/:
#   raygate.yaml                 the whole install (config/default: CRDs, RBAC, Deployment, Service,
#                                admission policy) in one manifest, the image tag set to VERSION;
#   raygate-CHARTVERSION.tgz     charts/raygate packaged as `helm package` does (Chart.yaml's
#                                version and appVersion set from VERSION);
#   raygate-image-VERSION.oci.tar  the image (hack/build-image.sh, release profile), for
#                                `skopeo copy oci-archive:... docker://$IMAGE:VERSION`.
#
#   hack/release.sh v0.1.0
#   kubectl apply --server-side -f dist/raygate.yaml
#
# Environment:
#   IMAGE     image repository (default ghcr.io/raygate/raygate)
#   DIST_DIR  output directory (default dist)
#   RAYGATE_RELEASE_IMAGE  0: skip the image (its release build takes tens of minutes; the
#             manifest and chart take a second)
#
# Needs neither kubectl nor kustomize: config/ uses only `resources:` (files and directories),
# which this script resolves in order, as kustomize does; it refuses anything else (patches,
# images, ...) rather than render it wrong. tests/deploy_manifests.rs runs it and checks the
# output against its own reading of config/default and, where kubectl is installed, against
# `kubectl kustomize`. The image can also be built with the Dockerfile (see README).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "release.sh: $*" >&2; exit 1; }

[[ $# -eq 1 ]] || die "usage: hack/release.sh VERSION (e.g. v0.1.0)"
readonly VERSION=$1
[[ "$VERSION" =~ ^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
    die "VERSION $VERSION is not a version like v0.1.0 or v0.2.0-rc.1"
readonly IMAGE=${IMAGE:-ghcr.io/raygate/raygate}
# A registry may have a port (host:5000/raygate); the last path segment may not have a tag.
[[ "$IMAGE" =~ ^[a-z0-9][a-z0-9._/:-]*$ && "${IMAGE##*/}" != *:* ]] ||
    die "IMAGE $IMAGE is not an image repository (no tag: the tag is VERSION)"
readonly DIST_DIR=${DIST_DIR:-dist}
# The image config/manager/deployment.yaml names; every occurrence is retagged.
readonly PLACEHOLDER=ghcr.io/raygate/raygate

# The entries of a kustomization's `resources:` list, one a line.
resources() {
    awk '
        /^resources:/ { inlist = 1; next }
        inlist && /^- / { sub(/^- */, ""); sub(/ *(#.*)?$/, ""); print; next }
        inlist && /^[^ #-]/ { inlist = 0 }
    ' "$1"
}

# Prints every object of the kustomization in directory $1, in kustomize's resource order.
render() {
    local dir=$1 k="$1/kustomization.yaml" entry keys
    [[ -f "$k" ]] || die "$dir: no kustomization.yaml"
    keys=$(grep -E '^[A-Za-z]+:' "$k" | cut -d: -f1 | sort | tr '\n' ' ')
    [[ "$keys" == "apiVersion kind resources " ]] ||
        die "$k: uses more than resources ($keys); render it with kustomize instead"
    while IFS= read -r entry; do
        [[ -n "$entry" ]] || continue
        if [[ -d "$dir/$entry" ]]; then
            render "$dir/$entry"
        elif [[ -f "$dir/$entry" ]]; then
            echo "---"
            echo "# Source: $(realpath --relative-to=. "$dir/$entry")"
            # Drop document separators inside the file: one is printed above.
            grep -v '^---[[:space:]]*$' "$dir/$entry"
        else
            die "$k: resource $entry does not exist"
        fi
    done < <(resources "$k")
}

# Orders documents as kustomize does (its "legacy" order): Namespace and CRDs before the objects
# that need them, then by kind and name, so a plain `kubectl apply -f` succeeds in one pass.
sort_documents() {
    awk '
        BEGIN {
            n = split("Namespace ResourceQuota StorageClass CustomResourceDefinition ServiceAccount PodSecurityPolicy Role ClusterRole RoleBinding ClusterRoleBinding ConfigMap Secret Endpoints Service LimitRange PriorityClass PersistentVolume PersistentVolumeClaim Deployment StatefulSet CronJob PodDisruptionBudget", first, " ")
            for (i = 1; i <= n; i++) rank[first[i]] = i
            rank["MutatingWebhookConfiguration"] = 1000
            rank["ValidatingWebhookConfiguration"] = 1001
            docs = 0
        }
        /^---[[:space:]]*$/ { docs++; body[docs] = ""; kind[docs] = ""; name[docs] = ""; inmeta = 0; next }
        {
            body[docs] = body[docs] $0 "\n"
            if ($0 ~ /^kind:/ && kind[docs] == "") kind[docs] = $2
            if ($0 ~ /^metadata:/) inmeta = 1
            else if ($0 ~ /^[^ #]/) inmeta = 0
            if (inmeta && $0 ~ /^  name:/ && name[docs] == "") name[docs] = $2
        }
        END {
            for (i = 1; i <= docs; i++) {
                r = (kind[i] in rank) ? rank[kind[i]] : 500
                key[i] = sprintf("%04d %s %s", r, kind[i], name[i])
                order[i] = i
            }
            for (i = 2; i <= docs; i++)
                for (j = i; j > 1 && key[order[j - 1]] > key[order[j]]; j--) {
                    t = order[j]; order[j] = order[j - 1]; order[j - 1] = t
                }
            for (i = 1; i <= docs; i++) printf "---\n%s", body[order[i]]
        }
    '
}

mkdir -p "$DIST_DIR"
out="$DIST_DIR/raygate.yaml"
tmp=$(mktemp "$DIST_DIR/.raygate.yaml.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
    echo "# raygate $VERSION: the whole install (kubectl apply --server-side -f raygate.yaml)."
    echo "# Rendered from config/default by hack/release.sh; image $IMAGE:$VERSION."
    render config/default | sort_documents
} | sed -E "s#^([[:space:]]*image:[[:space:]]*)$PLACEHOLDER:[^[:space:]]+#\1$IMAGE:$VERSION#" >"$tmp"
grep -q "image: $IMAGE:$VERSION\$" "$tmp" || die "no image line of $PLACEHOLDER found to retag"
mv "$tmp" "$out"
trap - EXIT
echo "release.sh: wrote $out ($(grep -c '^kind:' "$out") objects, image $IMAGE:$VERSION)"

# The chart, packaged as `helm package` does: a gzipped tar of raygate/ with the release's version
# (SemVer without the v: Helm requires it) and the image tag as appVersion.
chart_version=${VERSION#v}
chart_tmp=$(mktemp -d)
trap 'rm -rf "$chart_tmp"' EXIT
cp -r charts/raygate "$chart_tmp/raygate"
sed -i -E "s/^version: .*/version: $chart_version/; s/^appVersion: .*/appVersion: $VERSION/" \
    "$chart_tmp/raygate/Chart.yaml"
chart_out="$DIST_DIR/raygate-$chart_version.tgz"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    --exclude-from=<(grep -v '^#' charts/raygate/.helmignore | grep .) \
    -C "$chart_tmp" -cf - raygate | gzip -n >"$chart_out"
echo "release.sh: wrote $chart_out (chart $chart_version, appVersion $VERSION)"

if [[ "${RAYGATE_RELEASE_IMAGE:-1}" != 0 ]]; then
    VERSION=$VERSION OUT="$DIST_DIR/raygate-image-$VERSION.oci.tar" PROFILE=${PROFILE:-release} \
        hack/build-image.sh
fi
