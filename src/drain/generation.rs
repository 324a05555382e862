//! Node generations: which configuration a node runs (a label, or a `status.nodeInfo` field such
//! as the kubelet version), which nodes are outdated, and an order on generation values.
//!
//! Values are ordered as versions are read by people: runs of digits compare as numbers, the
//! rest as text (`v1.9.2` < `v1.10.0`, `ubuntu-22.04` < `ubuntu-24.04`). "Newest" is the
//! greatest value among the nodes considered.

use std::cmp::Ordering;

use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

/// A `status.nodeInfo` field that names a node's generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum NodeInfoField {
    KubeletVersion,
    OsImage,
    KernelVersion,
    ContainerRuntimeVersion,
}

impl NodeInfoField {
    /// The field's name in `status.nodeInfo`.
    pub fn field_name(self) -> &'static str {
        match self {
            NodeInfoField::KubeletVersion => "kubeletVersion",
            NodeInfoField::OsImage => "osImage",
            NodeInfoField::KernelVersion => "kernelVersion",
            NodeInfoField::ContainerRuntimeVersion => "containerRuntimeVersion",
        }
    }
}

/// Where a node's generation is read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum GenerationSource {
    /// A node label key.
    Label(String),
    /// A `status.nodeInfo` field.
    NodeInfo(NodeInfoField),
}

impl std::fmt::Display for GenerationSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GenerationSource::Label(key) => write!(f, "node label {key}"),
            GenerationSource::NodeInfo(field) => {
                write!(f, "status.nodeInfo.{}", field.field_name())
            }
        }
    }
}

/// The generation nodes should be at; every other node is outdated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum GenerationTarget {
    Value(String),
    /// The greatest value among the nodes the selector picked.
    Newest,
}

/// Target *outdated* nodes: those whose generation (from `source`) is not `target`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Generation {
    pub source: GenerationSource,
    pub target: GenerationTarget,
}

/// A node's generation from `source`; `None` when the label is absent or the field empty.
pub fn node_generation<'a>(node: &'a Node, source: &GenerationSource) -> Option<&'a str> {
    let value = match source {
        GenerationSource::Label(key) => node.metadata.labels.as_ref()?.get(key)?.as_str(),
        GenerationSource::NodeInfo(field) => {
            let info = node.status.as_ref()?.node_info.as_ref()?;
            match field {
                NodeInfoField::KubeletVersion => info.kubelet_version.as_str(),
                NodeInfoField::OsImage => info.os_image.as_str(),
                NodeInfoField::KernelVersion => info.kernel_version.as_str(),
                NodeInfoField::ContainerRuntimeVersion => info.container_runtime_version.as_str(),
            }
        }
    };
    (!value.is_empty()).then_some(value)
}

/// Orders generation values as versions: digit runs numerically, other runs as text; equal
/// under that order but different strings (`v01` / `v1`) fall back to plain text order, so the
/// order is total and agrees with equality.
pub fn compare_generations(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a, b);
    loop {
        match (chunk(x), chunk(y)) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((cx, rx)), Some((cy, ry))) => {
                let order = compare_chunks(cx, cy);
                if order != Ordering::Equal {
                    return order;
                }
                (x, y) = (rx, ry);
            }
        }
    }
}

/// The leading run of digits or of non-digits, and the rest.
fn chunk(s: &str) -> Option<(&str, &str)> {
    let first = s.chars().next()?;
    let digit = first.is_ascii_digit();
    let end = s
        .char_indices()
        .find(|(_, c)| c.is_ascii_digit() != digit)
        .map_or(s.len(), |(i, _)| i);
    Some(s.split_at(end))
}

fn compare_chunks(a: &str, b: &str) -> Ordering {
    let numeric = |s: &str| s.starts_with(|c: char| c.is_ascii_digit());
    match (numeric(a), numeric(b)) {
        (true, true) => {
            let (a, b) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
            a.len().cmp(&b.len()).then_with(|| a.cmp(b))
        }
        // A number sorts before text in the same position.
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn versions_compare_numerically_by_part() {
        let sorted = [
            "v1.9.2", "v1.10.0", "v1.10.1", "v1.30.0", "v2.0.0", "v10.0.0",
        ];
        for pair in sorted.windows(2) {
            assert_eq!(
                compare_generations(pair[0], pair[1]),
                Ordering::Less,
                "{pair:?}"
            );
        }
        assert_eq!(
            compare_generations("Ubuntu 22.04.4 LTS", "Ubuntu 24.04.1 LTS"),
            Ordering::Less
        );
        assert_eq!(compare_generations("gen-a", "gen-b"), Ordering::Less);
        assert_eq!(compare_generations("v01", "v1"), "v01".cmp("v1"));
        assert_eq!(compare_generations("", "a"), Ordering::Less);
    }

    proptest! {
        #[test]
        fn generation_order_is_a_total_order_agreeing_with_equality(
            a in "[a-c0-9.]{0,6}", b in "[a-c0-9.]{0,6}", c in "[a-c0-9.]{0,6}",
        ) {
            prop_assert_eq!(compare_generations(&a, &b), compare_generations(&b, &a).reverse());
            prop_assert_eq!(compare_generations(&a, &b) == Ordering::Equal, a == b);
            if compare_generations(&a, &b) != Ordering::Greater
                && compare_generations(&b, &c) != Ordering::Greater
            {
                prop_assert_ne!(compare_generations(&a, &c), Ordering::Greater);
            }
        }
    }
}
