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
