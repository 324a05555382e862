//! Outside programs the integration tests run.

use std::path::PathBuf;

/// kubectl: `$RAYGATE_KUBECTL`, else the first on `PATH`. Tests that need it fail without it
/// (they are not skipped).
pub fn kubectl() -> PathBuf {
    if let Some(p) = std::env::var_os("RAYGATE_KUBECTL") {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("kubectl"))
                .find(|p| p.is_file())
        })
        .expect("kubectl not found: put it on PATH or set RAYGATE_KUBECTL (these tests are not skipped)")
}

/// raygate's cache of built tools (`hack/install-*.sh` put them there): `$RAYGATE_CACHE_DIR`,
/// else `~/.cache/raygate`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("RAYGATE_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/raygate")
        })
}

/// `raygate-kueue-admit`, Kueue v0.19.2's own scheduler driven one cycle at a time
/// (`hack/kueue-admit/`): `$RAYGATE_KUEUE_ADMIT`, else where `hack/install-kueue.sh` puts it.
/// The path is returned whether or not the file exists.
pub fn kueue_admit() -> PathBuf {
    std::env::var_os("RAYGATE_KUEUE_ADMIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("kueue/bin/raygate-kueue-admit"))
}
