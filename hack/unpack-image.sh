#!/usr/bin/env bash
# unpack-image.sh ARCHIVE DIR — the root filesystem of an OCI image archive (hack/build-image.sh's)
# into DIR/rootfs and its config into DIR/config.json, with tar and python3 only (what
# `umoci unpack` does, for a single-platform image whose layers add files). Used by hack/test.sh
# to boot the image's binary.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: hack/unpack-image.sh ARCHIVE DIR" >&2; exit 2; }
archive=$(realpath "$1")
dir=$2
rm -rf "$dir"
mkdir -p "$dir/layout" "$dir/rootfs"
tar -xf "$archive" -C "$dir/layout"
python3 - "$dir" <<'PY'
import hashlib, json, subprocess, sys
d = sys.argv[1]
def blob(desc):
    path = f"{d}/layout/blobs/" + desc["digest"].replace(":", "/")
    data = open(path, "rb").read()
    if "sha256:" + hashlib.sha256(data).hexdigest() != desc["digest"] or len(data) != desc["size"]:
        sys.exit(f"unpack-image: {path} does not match its descriptor")
    return path, data
index = json.load(open(f"{d}/layout/index.json"))
(desc,) = index["manifests"]
manifest = json.loads(blob(desc)[1])
_, config = blob(manifest["config"])
open(f"{d}/config.json", "wb").write(config)
for layer in manifest["layers"]:
    path, _ = blob(layer)
    subprocess.run(["tar", "-xzf", path, "-C", f"{d}/rootfs", "--same-owner", "--no-overwrite-dir"], check=True)
PY
echo "unpack-image.sh: $dir/rootfs ($(du -sh "$dir/rootfs" | cut -f1))"
