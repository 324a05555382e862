#!/usr/bin/env python3
"""Packs a root filesystem directory into an OCI image archive (an OCI image layout in one tar,
what `skopeo copy oci-archive:FILE docker://REGISTRY/IMAGE:TAG` pushes and `umoci unpack`
reads), with no container daemon and nothing but the standard library.

Usage: oci-image.py ROOTFS OUT.tar REF [--label KEY=VALUE ...] [--created RFC3339]

One layer (the tree under ROOTFS: files, directories, symlinks), every entry owned by root (the
image's user only reads); the config runs /raygate as 65532:65532 with `controller` as its
argument, as the Dockerfile's image does. The output is reproducible: entries sorted, times
set to --created (default: SOURCE_DATE_EPOCH, else 0), gzip without a name or time.
"""
import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

USER = "65532:65532"
ENTRYPOINT = ["/raygate"]
CMD = ["controller"]


def layer_tar(root: str, mtime: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                paths.append(os.path.join(dirpath, name))
        for path in sorted(paths, key=lambda p: os.path.relpath(p, root)):
            info = tar.gettarinfo(path, arcname=os.path.relpath(path, root))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = mtime
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def blob(blobs: dict, media_type: str, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = mtime
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("rootfs")
    p.add_argument("out")
    p.add_argument("ref", help="the tag recorded in index.json (org.opencontainers.image.ref.name)")
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--created", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", "0")))
    a = p.parse_args()
    created = datetime.datetime.fromtimestamp(a.created, datetime.timezone.utc)
    created_text = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = dict(label.split("=", 1) for label in a.label)

    raw = layer_tar(a.rootfs, a.created)
    compressed = gzip.compress(raw, compresslevel=9, mtime=0)
    blobs: dict = {}
    layer = blob(blobs, "application/vnd.oci.image.layer.v1.tar+gzip", compressed)
    config = {
        "created": created_text,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": USER,
            "Entrypoint": ENTRYPOINT,
            "Cmd": CMD,
            "Env": ["PATH=/"],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        "history": [{"created": created_text, "created_by": "hack/build-image.sh"}],
    }
    config_desc = blob(
        blobs,
        "application/vnd.oci.image.config.v1+json",
        json.dumps(config, sort_keys=True, separators=(",", ":")).encode(),
    )
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer],
        "annotations": {k: v for k, v in labels.items() if k.startswith("org.opencontainers.")},
    }
    manifest_desc = blob(
        blobs,
        "application/vnd.oci.image.manifest.v1+json",
        json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode(),
    )
    manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": a.ref}
    manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [manifest_desc],
    }

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}', a.created)
        add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode(), a.created)
        for digest in sorted(blobs):
            add_bytes(tar, "blobs/sha256/" + digest.split(":", 1)[1], blobs[digest], a.created)
    os.replace(tmp, a.out)
    print(
        f"oci-image: {a.out}: {a.ref}, manifest {manifest_desc['digest']}, "
        f"layer {len(compressed)} bytes ({len(raw)} unpacked)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
