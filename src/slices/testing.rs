//! Test helpers shared by the slice and gate tests: Workload status the way admission writes it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::types::kueue::{
    Admission, PodSetAssignment, Workload, WorkloadStatus, condition, reason,
};

/// Sets (replaces) condition `type_` on `w`.
pub(crate) fn set_condition(
    w: &mut Workload,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) {
    let st = w.status.get_or_insert_with(WorkloadStatus::default);
    st.conditions.retain(|c| c.type_ != type_);
    st.conditions.push(Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(Timestamp::from_second(100).unwrap_or(Timestamp::UNIX_EPOCH)),
        observed_generation: None,
    });
}

/// Marks a slice admitted with its current counts.
pub(crate) fn admit(w: &mut Workload) {
    let assignments = w
        .spec
        .pod_sets
        .iter()
        .map(|p| PodSetAssignment {
            name: p.name.clone(),
            count: Some(p.count),
            ..Default::default()
        })
        .collect();
    w.status
        .get_or_insert_with(WorkloadStatus::default)
        .admission = Some(Admission {
        cluster_queue: "cq".into(),
        pod_set_assignments: assignments,
    });
    set_condition(
        w,
        condition::QUOTA_RESERVED,
        "True",
        reason::QUOTA_RESERVED,
        "",
    );
    set_condition(w, condition::ADMITTED, "True", reason::ADMITTED, "");
}
