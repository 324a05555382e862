//! The upstream CRDs the stories need, embedded in the binary: KubeRay v1.7 (`ray.io/v1`
//! RayCluster, RayService), Kueue v0.19 (`kueue.x-k8s.io/v1beta2`) and LeaderWorkerSet
//! (`leaderworkerset.x-k8s.io/v1`), vendored verbatim in `sim/crds/upstream/` from
//! `../shared/upstream-crds` (`hack/check-crds.sh` fails when they differ), and raygate's own
//! NodeRollout, generated from its types as `raygate crdgen` writes it. `raygate demo` and
//! `raygate simulate` read nothing from disk.

use serde_json::Value;

use crate::server::kinds::{CrdError, Registry};

/// Every vendored upstream CRD file: (file name, YAML), in name order.
pub const CRDS: &[(&str, &str)] = &[
    (
        "kueue.x-k8s.io_clusterqueues.yaml",
        include_str!("../../crds/upstream/kueue.x-k8s.io_clusterqueues.yaml"),
    ),
    (
        "kueue.x-k8s.io_cohorts.yaml",
        include_str!("../../crds/upstream/kueue.x-k8s.io_cohorts.yaml"),
    ),
    (
        "kueue.x-k8s.io_localqueues.yaml",
        include_str!("../../crds/upstream/kueue.x-k8s.io_localqueues.yaml"),
    ),
    (
        "kueue.x-k8s.io_resourceflavors.yaml",
        include_str!("../../crds/upstream/kueue.x-k8s.io_resourceflavors.yaml"),
    ),
    (
        "kueue.x-k8s.io_workloadpriorityclasses.yaml",
        include_str!("../../crds/upstream/kueue.x-k8s.io_workloadpriorityclasses.yaml"),
    ),
    (
        "kueue.x-k8s.io_workloads.yaml",
        include_str!("../../crds/upstream/kueue.x-k8s.io_workloads.yaml"),
    ),
    (
        "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        include_str!("../../crds/upstream/leaderworkerset.x-k8s.io_leaderworkersets.yaml"),
    ),
    (
        "ray.io_rayclusters.yaml",
        include_str!("../../crds/upstream/ray.io_rayclusters.yaml"),
    ),
    (
        "ray.io_rayservices.yaml",
        include_str!("../../crds/upstream/ray.io_rayservices.yaml"),
    ),
];

/// The embedded YAML of one vendored file (`leaderworkerset.x-k8s.io_leaderworkersets.yaml`).
pub fn crd(file: &str) -> Option<&'static str> {
    CRDS.iter().find(|(f, _)| *f == file).map(|(_, y)| *y)
}

/// The LeaderWorkerSet CRD.
pub fn leaderworkerset() -> &'static str {
    crd("leaderworkerset.x-k8s.io_leaderworkersets.yaml").unwrap_or_default()
}

/// raygate's own CRDs (`raygate.io`: NodeRollout), generated from its types.
pub fn add_raygate(registry: &mut Registry) -> Result<(), CrdError> {
    for (_, crd) in raygate::crdgen::crds() {
        if crd.spec.group != "raygate.io" {
            continue;
        }
        let value: Value = serde_json::to_value(&crd).map_err(|e| CrdError::Yaml {
            index: 0,
            reason: format!("serializing {}: {e}", crd.spec.names.kind),
        })?;
        registry.add_crd(&value)?;
    }
    Ok(())
}

/// The built-in kinds, every vendored upstream CRD and raygate's NodeRollout: what a story on
/// the sim needs. Parsing the 4.7 MB takes a while; build it once and clone it per sim
/// ([`crate::SimBuilder::registry`]).
pub fn registry() -> Result<Registry, CrdError> {
    let mut registry = Registry::with_builtins();
    for (_, yaml) in CRDS {
        registry.add_crds_yaml(yaml)?;
    }
    add_raygate(&mut registry)?;
    Ok(registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vendored_file_is_embedded_in_name_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/upstream");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let embedded: Vec<&str> = CRDS.iter().map(|(f, _)| *f).collect();
        assert_eq!(embedded, files);
        for (f, yaml) in CRDS {
            assert_eq!(
                *yaml,
                std::fs::read_to_string(dir.join(f)).unwrap(),
                "{f} is embedded verbatim"
            );
        }
    }

    #[test]
    fn the_registry_serves_every_kind_a_story_needs() {
        let registry = registry().unwrap();
        let sim = crate::Sim::builder().registry(registry).build();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let client = sim.client();
            for (group, version, kind) in [
                ("ray.io", "v1", "RayService"),
                ("ray.io", "v1", "RayCluster"),
                ("kueue.x-k8s.io", "v1beta2", "ClusterQueue"),
                ("kueue.x-k8s.io", "v1beta2", "Workload"),
                ("kueue.x-k8s.io", "v1beta2", "LocalQueue"),
                ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
                ("raygate.io", "v1alpha1", "NodeRollout"),
            ] {
                let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
                assert!(
                    kube::discovery::pinned_kind(&client, &gvk).await.is_ok(),
                    "{kind} is served"
                );
            }
        });
    }
}
