//! The default of `taintOutdated` (pure): taint the outdated nodes whenever the cluster has room
//! for the evicted groups outside them, so a group evicted from one domain never lands on a later
//! one to be disrupted again; without that room the taint would leave groups nowhere to run, so
//! the nodes stay untainted and the caller says why.

use k8s_openapi::jiff::Timestamp;

use super::{CapacityCheck, Cluster, DrainError, PlanOptions, Returns, outdated_taint, plan};

/// What the room check decided for a rollout that leaves `taintOutdated` to raygate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AutoTaint {
    pub taint: bool,
    /// When not tainted: the dead ends the taint would have made.
    pub skipped: Option<CapacityCheck>,
}

/// Taints when the plan with the taint has no dead end, or when the plan without it has dead
/// ends too (then the taint is not what leaves the groups nowhere: the room check refuses
/// either way, and the taint stays the safe choice).
pub fn auto_taint(
    cluster: &Cluster,
    options: &PlanOptions,
    now: Timestamp,
    returns: Returns,
) -> Result<AutoTaint, DrainError> {
    let tainted = PlanOptions {
        taint: Some(outdated_taint()),
        ..options.clone()
    };
    let with = CapacityCheck::check(cluster, &plan(cluster, &tainted, now)?, &tainted, returns);
    if with.is_empty() {
        return Ok(AutoTaint {
            taint: true,
            skipped: None,
        });
    }
    let untainted = PlanOptions {
        taint: None,
        ..options.clone()
    };
    let without = CapacityCheck::check(
        cluster,
        &plan(cluster, &untainted, now)?,
        &untainted,
        returns,
    );
    Ok(match without.is_empty() {
        true => AutoTaint {
            taint: false,
            skipped: Some(with),
        },
        false => AutoTaint {
            taint: true,
            skipped: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::capacity::tests::{gpu_node, leaders_pdb, options, world};

    fn decide(
        nodes: &[k8s_openapi::api::core::v1::Node],
        pods: &[k8s_openapi::api::core::v1::Pod],
    ) -> AutoTaint {
        let pdbs = vec![leaders_pdb(2)];
        let cluster = Cluster::new(nodes, pods, &pdbs);
        auto_taint(
            &cluster,
            &options(false),
            Timestamp::UNIX_EPOCH,
            Returns::AfterHandOff,
        )
        .unwrap()
    }

    #[test]
    fn with_room_outside_the_outdated_nodes_the_default_taints_them() {
        // ud-a's three groups, two tolerated down: one must run elsewhere, and new-1 holds it
        let (nodes, pods) = world(3, 1, vec![gpu_node("new-1", "ud-n", "new")]);
        assert_eq!(
            decide(&nodes, &pods),
            AutoTaint {
                taint: true,
                skipped: None
            }
        );
    }

    #[test]
    fn without_room_outside_the_default_leaves_them_untainted_and_says_why() {
        // no node outside the rollout: the taint would leave a group of ud-a nowhere to run,
        // while untainted it can go to ud-b
        let (nodes, pods) = world(3, 1, Vec::new());
        let auto = decide(&nodes, &pods);
        assert!(!auto.taint);
        let skipped = auto.skipped.expect("the dead ends the taint would make");
        assert_eq!(skipped.dead_ends.len(), 1);
        assert_eq!(skipped.dead_ends[0].domain, "ud-a");
        let message = crate::drain::rollout::taint_skipped(&skipped);
        assert!(
            message.contains("not tainted") && message.contains("ud-a"),
            "{message}"
        );
    }
}
