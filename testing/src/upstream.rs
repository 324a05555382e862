//! Access to `../shared`, the upstream CRDs and sample manifests (KubeRay v1.7.0, Kueue v0.19.2)
//! that sit next to the repository on every developer machine and in CI.
//!
//! A missing `shared/` is always an error, never a skip: tests that silently pass without their
//! data would hide exactly the drift they exist to catch.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The sub-directories a usable `shared/` must contain.
const REQUIRED_SUBDIRS: [&str; 2] = ["upstream-crds", "upstream-samples"];

/// Checks that `path` is a usable `shared/` directory and returns it canonicalized.
///
/// `ci` only changes the wording of the error: under CI a missing directory is a broken checkout
/// step, on a developer machine it is a missing clone. Either way the caller must fail.
pub fn locate(path: &Path, ci: bool) -> Result<PathBuf, String> {
    let missing: Vec<&str> = REQUIRED_SUBDIRS
        .iter()
        .copied()
        .filter(|sub| !path.join(sub).is_dir())
        .collect();
    if missing.is_empty() {
        return path
            .canonicalize()
            .map_err(|e| format!("cannot resolve {}: {e}", path.display()));
    }
    let what = if path.is_dir() {
        format!("{} lacks {}", path.display(), missing.join(", "))
    } else {
        format!("{} does not exist", path.display())
    };
    Err(if ci {
        format!(
            "CI=true and the upstream data directory is missing: {what}; the CI job must provide shared/ next to the repository"
        )
    } else {
        format!(
            "the upstream data directory is missing: {what}; shared/ is expected next to the repository checkout"
        )
    })
}

/// `../shared` relative to the workspace root; panics (never skips) when it is missing.
pub fn dir() -> PathBuf {
    let path = crate::workspace_root().join("../shared");
    let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    locate(&path, ci).unwrap_or_else(|e| panic!("{e}"))
}

/// The sample directories, one per upstream project.
pub fn sample_dirs() -> [PathBuf; 2] {
    let samples = dir().join("upstream-samples");
    [
        samples.join("kuberay-v1.7.0"),
        samples.join("kueue-v0.19.2"),
    ]
}

/// Every `.yaml` file in the sample directories, sorted so that failures are listed stably.
pub fn sample_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for d in sample_dirs() {
        let entries =
            std::fs::read_dir(&d).unwrap_or_else(|e| panic!("cannot list {}: {e}", d.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("cannot list {}: {e}", d.display()))
                .path();
            if path.extension().is_some_and(|ext| ext == "yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// An upstream CRD (`upstream-crds/<file_name>`) as JSON.
pub fn crd(file_name: &str) -> Value {
    let path = dir().join("upstream-crds").join(file_name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_saphyr::from_str_with_options(&text, crate::yaml_options())
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()))
}

/// The `openAPIV3Schema` of `version` in the upstream CRD `file_name`.
pub fn crd_schema(file_name: &str, version: &str) -> Value {
    version_schema(&crd(file_name), version)
        .unwrap_or_else(|| panic!("{file_name} has no openAPIV3Schema for version {version}"))
}

/// The `openAPIV3Schema` of `version` in a CRD given as JSON.
pub fn version_schema(crd: &Value, version: &str) -> Option<Value> {
    crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == version)
        .map(|v| v["schema"]["openAPIV3Schema"].clone())
        .filter(|s| s.is_object())
}
