//! `raygate status rayservices [-A]`: every opted-in RayService of a namespace (or all), one line
//! each, from the same [`ServiceReport`]s `raygate status rayservice/NAME` shows one at a time.

use std::collections::BTreeMap;

use kube::ResourceExt;
use serde::Serialize;

use super::status::{ServiceReport, service_report};
use crate::types::kueue::Workload;
use crate::types::ray::{ORIGINATED_FROM_CR_NAME_LABEL, RayCluster, RayService};

/// The opted-in RayServices, by namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServiceList {
    pub items: Vec<ServiceReport>,
}

/// Each RayService's report, from its own children (by KubeRay's originated-from label) and
/// slices (by raygate's RayService label).
pub fn service_list(
    services: &[RayService],
    clusters: &[RayCluster],
    workloads: &[Workload],
) -> ServiceList {
    let children = by_owner(clusters, ORIGINATED_FROM_CR_NAME_LABEL);
    let slices = by_owner(workloads, crate::slices::RAYSERVICE_LABEL);
    let key = |s: &RayService| (s.namespace().unwrap_or_default(), s.name_any());
    let mut items: Vec<ServiceReport> = services
        .iter()
        .map(|s| {
            let k = key(s);
            service_report(
                s,
                children.get(&k).map(Vec::as_slice).unwrap_or_default(),
                slices.get(&k).map(Vec::as_slice).unwrap_or_default(),
            )
        })
        .collect();
    items.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    ServiceList { items }
}

/// Objects by (namespace, the RayService their `label` names).
fn by_owner<K: ResourceExt + Clone>(
    objects: &[K],
    label: &str,
) -> BTreeMap<(String, String), Vec<K>> {
    let mut out: BTreeMap<(String, String), Vec<K>> = BTreeMap::new();
    for o in objects {
        let owner = o.labels().get(label).cloned().unwrap_or_default();
        out.entry((o.namespace().unwrap_or_default(), owner))
            .or_default()
            .push(o.clone());
    }
    out
}

/// One line per RayService: its queue, children, held children and why, what quota must still
/// cover.
impl super::View for ServiceList {
    fn table(&self) -> String {
        service_list_table(self)
    }

    fn names(&self) -> Vec<String> {
        self.items.iter().flat_map(super::View::names).collect()
    }
}

pub fn service_list_table(list: &ServiceList) -> String {
    if list.items.is_empty() {
        return "No opted-in RayService found.\n".into();
    }
    let rows: Vec<[String; 6]> = list
        .items
        .iter()
        .map(|r| {
            let held = match r.held.iter().next() {
                None => "-".to_string(),
                Some((child, why)) => format!("{child}: {why}"),
            };
            let short = match r.shortfall.is_empty() {
                true => "-".to_string(),
                false => r
                    .shortfall
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
            };
            [
                r.namespace.clone(),
                r.name.clone(),
                r.queue.clone().unwrap_or_else(|| "-".into()),
                r.children.len().to_string(),
                short,
                held,
            ]
        })
        .collect();
    let head = [
        "NAMESPACE",
        "NAME",
        "QUEUE",
        "CHILDREN",
        "SHORTFALL",
        "HELD",
    ];
    let mut width = head.map(str::len);
    for row in &rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(width).enumerate() {
            match i {
                5 => s.push_str(cell),
                _ => s.push_str(&format!("{cell:<w$}  ")),
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head);
    for row in &rows {
        out.push_str(&line(row.each_ref().map(String::as_str)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(ns: &str, name: &str) -> RayService {
        serde_json::from_value(json!({"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"rayClusterConfig": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": []}}}}}}))
        .unwrap()
    }

    fn child(ns: &str, owner: &str, name: &str) -> RayCluster {
        serde_json::from_value(json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": ns, "labels": {
                "ray.io/originated-from-crd": "RayService", ORIGINATED_FROM_CR_NAME_LABEL: owner}},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": []}}}}}))
        .unwrap()
    }

    #[test]
    fn each_service_gets_its_own_children_across_namespaces_in_name_order() {
        let services = [
            service("b", "svc"),
            service("a", "svc"),
            service("a", "other"),
        ];
        let clusters = [
            child("a", "svc", "svc-1"),
            child("b", "svc", "svc-2"),
            child("b", "svc", "svc-3"),
        ];
        let list = service_list(&services, &clusters, &[]);
        let seen: Vec<(String, String, usize)> = list
            .items
            .iter()
            .map(|r| (r.namespace.clone(), r.name.clone(), r.children.len()))
            .collect();
        assert_eq!(
            seen,
            [
                ("a".into(), "other".into(), 0),
                ("a".into(), "svc".into(), 1),
                ("b".into(), "svc".into(), 2)
            ]
        );
        let table = service_list_table(&list);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "NAMESPACE  NAME   QUEUE  CHILDREN  SHORTFALL  HELD"
        );
        assert_eq!(lines.len(), 4, "{table}");
        assert!(
            lines[3].starts_with("b          svc    lq     2         "),
            "{table}"
        );
        assert_eq!(
            service_list_table(&ServiceList::default()),
            "No opted-in RayService found.\n"
        );
    }
}
