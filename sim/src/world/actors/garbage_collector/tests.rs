//! The collector's decisions, after `garbagecollector.go` and its `garbagecollector_test.go`
//! (`TestAttemptToDeleteItem`-style vectors: solid, dangling and waiting owners).

use super::*;

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            group: "apps".into(),
            kind: "ReplicaSet".into(),
            namespaced: true,
        },
        Kind {
            group: String::new(),
            kind: "Pod".into(),
            namespaced: true,
        },
    ]
}

fn owner_ref(name: &str, uid: &str, block: bool) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(block),
    }
}

fn rs(name: &str, uid: &str) -> Item {
    Item {
        kind: 0,
        namespace: Some("t".into()),
        name: name.into(),
        uid: uid.into(),
        owners: vec![],
        finalizers: vec![],
        deleting: false,
    }
}

fn pod(name: &str, owners: Vec<OwnerReference>) -> Item {
    Item {
        kind: 1,
        namespace: Some("t".into()),
        name: name.into(),
        uid: format!("uid-{name}"),
        owners,
        finalizers: vec![],
        deleting: false,
    }
}

#[test]
fn a_dependent_of_a_gone_owner_is_deleted_in_the_background() {
    let items = vec![pod("p", vec![owner_ref("r", "u-r", true)])];
    assert_eq!(
        plan(&items, &kinds()),
        vec![Action::Delete {
            item: 0,
            policy: Propagation::Background,
            absent_owners: vec![owner_ref("r", "u-r", true)]
        }]
    );
}

#[test]
fn an_owner_with_the_same_name_but_another_uid_is_gone() {
    let items = vec![
        rs("r", "u-new"),
        pod("p", vec![owner_ref("r", "u-old", true)]),
    ];
    assert!(matches!(
        plan(&items, &kinds())[..],
        [Action::Delete {
            item: 1,
            policy: Propagation::Background,
            ..
        }]
    ));
}

#[test]
fn a_live_owner_keeps_its_dependents_and_a_second_gone_owner_only_loses_its_reference() {
    let items = vec![rs("r", "u-r"), pod("p", vec![owner_ref("r", "u-r", true)])];
    assert!(plan(&items, &kinds()).is_empty());
    let items = vec![
        rs("r", "u-r"),
        pod(
            "p",
            vec![owner_ref("r", "u-r", true), owner_ref("gone", "u-g", false)],
        ),
    ];
    assert_eq!(
        plan(&items, &kinds()),
        vec![Action::RemoveOwners {
            item: 1,
            uids: vec!["u-g".into()]
        }]
    );
}

#[test]
fn an_orphaned_dependent_is_deleted_with_the_propagation_its_finalizers_ask_for() {
    let mut p = pod("p", vec![owner_ref("r", "u-r", true)]);
    p.finalizers = vec![ORPHAN_FINALIZER.into()];
    assert!(matches!(
        plan(&[p.clone()], &kinds())[..],
        [Action::Delete {
            policy: Propagation::Orphan,
            ..
        }]
    ));
    p.finalizers = vec![FOREGROUND_FINALIZER.into()];
    assert!(matches!(
        plan(&[p], &kinds())[..],
        [Action::Delete {
            policy: Propagation::Foreground,
            ..
        }]
    ));
}

#[test]
fn a_foreground_deletion_waits_for_blocking_dependents_and_deletes_them() {
    let mut owner = rs("r", "u-r");
    owner.deleting = true;
    owner.finalizers = vec![FOREGROUND_FINALIZER.into()];
    let items = vec![
        owner.clone(),
        pod("a", vec![owner_ref("r", "u-r", true)]),
        pod("b", vec![owner_ref("r", "u-r", false)]),
    ];
    let actions = plan(&items, &kinds());
    // no finalizer removal while "a" blocks; both dependents are deleted (no dependents of their own)
    assert_eq!(
        actions,
        vec![
            Action::Delete {
                item: 1,
                policy: Propagation::Background,
                absent_owners: vec![]
            },
            Action::Delete {
                item: 2,
                policy: Propagation::Background,
                absent_owners: vec![]
            },
        ]
    );
    // "a" still terminating (e.g. a pod in its grace period): the owner keeps waiting
    let mut a = pod("a", vec![owner_ref("r", "u-r", true)]);
    a.deleting = true;
    assert!(plan(&[owner.clone(), a], &kinds()).is_empty());
    // only a non-blocking dependent left: the finalizer goes
    let items = vec![owner, pod("b", vec![owner_ref("r", "u-r", false)])];
    assert_eq!(
        plan(&items, &kinds())[0],
        Action::RemoveFinalizer {
            item: 0,
            finalizer: FOREGROUND_FINALIZER
        }
    );
}

#[test]
fn a_dependent_with_dependents_of_its_own_is_deleted_in_foreground() {
    let mut owner = rs("top", "u-top");
    owner.deleting = true;
    owner.finalizers = vec![FOREGROUND_FINALIZER.into()];
    let mut mid = rs("mid", "u-mid");
    mid.owners = vec![owner_ref("top", "u-top", true)];
    let leaf = pod("leaf", vec![owner_ref("mid", "u-mid", true)]);
    let actions = plan(&[owner, mid, leaf], &kinds());
    assert_eq!(
        actions,
        vec![Action::Delete {
            item: 1,
            policy: Propagation::Foreground,
            absent_owners: vec![]
        }]
    );
}

#[test]
fn a_dependent_with_a_live_owner_besides_the_foreground_one_only_loses_that_reference() {
    let mut owner = rs("r", "u-r");
    owner.deleting = true;
    owner.finalizers = vec![FOREGROUND_FINALIZER.into()];
    let items = vec![
        owner,
        rs("keep", "u-k"),
        pod(
            "p",
            vec![owner_ref("r", "u-r", true), owner_ref("keep", "u-k", false)],
        ),
    ];
    assert_eq!(
        plan(&items, &kinds()),
        vec![Action::RemoveOwners {
            item: 2,
            uids: vec!["u-r".into()]
        }]
    );
}

#[test]
fn an_orphaning_owner_releases_its_dependents_then_its_finalizer() {
    let mut owner = rs("r", "u-r");
    owner.deleting = true;
    owner.finalizers = vec![ORPHAN_FINALIZER.into()];
    let items = vec![owner.clone(), pod("p", vec![owner_ref("r", "u-r", true)])];
    assert_eq!(
        plan(&items, &kinds()),
        vec![Action::RemoveOwners {
            item: 1,
            uids: vec!["u-r".into()]
        }]
    );
    assert_eq!(
        plan(&[owner, pod("p", vec![])], &kinds()),
        vec![Action::RemoveFinalizer {
            item: 0,
            finalizer: ORPHAN_FINALIZER
        }]
    );
}

#[test]
fn an_owner_of_an_uncovered_kind_is_never_judged_gone() {
    let mut r = owner_ref("x", "u-x", true);
    r.api_version = "ray.io/v1".into();
    r.kind = "RayCluster".into();
    assert!(plan(&[pod("p", vec![r])], &kinds()).is_empty());
}
