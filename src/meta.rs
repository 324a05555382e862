//! Small object-metadata helpers: annotations, labels, `<namespace>/<name>` keys and which
//! RayService a RayCluster belongs to.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::types::ray::{
    ORIGINATED_FROM_CR_NAME_LABEL, ORIGINATED_FROM_CRD_LABEL, ORIGINATED_FROM_RAYSERVICE,
};

/// The value of annotation `key`, if set.
pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The value of label `key`, if set.
pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// `<namespace>/<name>`, Kueue's and client-go's object key.
pub fn key(meta: &ObjectMeta) -> String {
    key_of(
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// `<namespace>/<name>` from its parts.
pub fn key_of(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The name, or `""` when unset.
pub fn name(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// The RayService (in the same namespace) a RayCluster was created for, by KubeRay's
/// `ray.io/originated-from-*` labels.
pub fn owning_rayservice(cluster: &ObjectMeta) -> Option<&str> {
    (label(cluster, ORIGINATED_FROM_CRD_LABEL) == Some(ORIGINATED_FROM_RAYSERVICE))
        .then(|| label(cluster, ORIGINATED_FROM_CR_NAME_LABEL))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn owning_rayservice_needs_both_kuberay_labels() {
        let mut m = ObjectMeta {
            namespace: Some("ns".into()),
            name: Some("c".into()),
            labels: Some(BTreeMap::from([(
                ORIGINATED_FROM_CR_NAME_LABEL.to_string(),
                "svc".to_string(),
            )])),
            ..Default::default()
        };
        assert_eq!(owning_rayservice(&m), None);
        m.labels.get_or_insert_default().insert(
            ORIGINATED_FROM_CRD_LABEL.to_string(),
            ORIGINATED_FROM_RAYSERVICE.to_string(),
        );
        assert_eq!(owning_rayservice(&m), Some("svc"));
        assert_eq!(key(&m), "ns/c");
        assert_eq!(annotation(&m, "a"), None);
    }
}
