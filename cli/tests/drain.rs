//! `raygate drain plan|check`. The real test API server serves no Nodes or Pods, so the command's
//! functions run in-process against the simulated cluster (read through `kube::Client`, as the
//! binary reads a live cluster); the built binary is run for its flags and exit codes.

use kube::Client;
use kube::api::{Api, PostParams};
use raygate::cli::drain::capacity_check;
use raygate::cli::drain::{CheckFlags, CheckReport, PlanFlags, check_table, exit, plan_table};
use raygate::cli::drain::{Groups, HandoffMode, PlanReport, plan_exit_code};
use raygate::cli::{Output, render};
use raygate::types::k8s_openapi::api::apps::v1::DaemonSet;
use raygate::types::k8s_openapi::api::core::v1::{Node, Pod};
use raygate::types::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use raygate::types::k8s_openapi::jiff::Timestamp;
use raygate_sim::Sim;
use raygate_testing::core::{self, NodeExt, PdbExt, PodExt, int};
use serde_json::{Value, json};

const UD: &str = "raygate.io/upgrade-domain";

async fn node(client: &Client, name: &str, ud: &str) {
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &core::node(name, "").label(UD, ud))
        .await
        .unwrap();
}

/// Creates pod `ns/name` on `node`, controlled by a `kind` named `<name>-owner` (`None`: no
/// controller); a leader (`role=leader`) has a readiness probe.
async fn pod(
    client: &Client,
    ns: &str,
    name: &str,
    node: &str,
    labels: &[(&str, &str)],
    owner: Option<&str>,
) {
    let mut p = core::pod(&format!("{ns}/{name}"), node).unowned();
    if let Some(kind) = owner {
        p = p.owned_by("apps/v1", kind, &format!("{name}-owner"));
    }
    p = labels.iter().fold(p, |p, (k, v)| p.label(k, v));
    if labels.contains(&("role", "leader")) {
        p = p.readiness_probe();
    }
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
}

/// Two upgrade domains: ud-a (n1, n2) and ud-b (n3). Two groups of workload `w` (a leader and a
/// worker each), one per domain, a budget over the leaders, a node agent on every node, and a
/// pod without a controller on n2.
async fn cluster() -> Sim {
    let sim = Sim::builder().namespace("t").build();
    sim.ensure_namespace("kube-system");
    let client = sim.client();
    for (n, ud) in [("n1", "ud-a"), ("n2", "ud-a"), ("n3", "ud-b")] {
        node(&client, n, ud).await;
        // the DaemonSet the agent's owner reference names (`<pod>-owner`)
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": format!("agent-{n}-owner"), "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]}}}}))
        .unwrap();
        Api::<DaemonSet>::namespaced(client.clone(), "kube-system")
            .create(&PostParams::default(), &ds)
            .await
            .unwrap();
        let labels = [("app", "agent")];
        pod(
            &client,
            "kube-system",
            &format!("agent-{n}"),
            n,
            &labels,
            Some("DaemonSet"),
        )
        .await;
    }
    for (group, node) in [("g1", "n1"), ("g2", "n3")] {
        for role in ["leader", "worker"] {
            let labels = [("app", "w"), ("group", group), ("role", role)];
            let name = format!("w-{group}-{role}");
            pod(&client, "t", &name, node, &labels, Some("StatefulSet")).await;
        }
    }
    pod(&client, "t", "scratch", "n2", &[("app", "scratch")], None).await;
    let pdb = core::pdb("t/w-leaders", &[("app", "w"), ("role", "leader")]);
    Api::<PodDisruptionBudget>::namespaced(client, "t")
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    sim
}

fn plan_flags(args: &[&str]) -> PlanFlags {
    use clap::Parser;
    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        flags: PlanFlags,
    }
    let mut argv = vec!["plan"];
    argv.extend(args);
    Cmd::try_parse_from(argv).unwrap().flags
}

#[tokio::test]
async fn plan_reads_the_cluster_and_prints_domains_phases_skips_and_blocks() {
    let sim = cluster().await;
    let objects = raygate::client::live::drain_objects(&sim.client())
        .await
        .unwrap();
    assert_eq!(
        (objects.nodes.len(), objects.pods.len(), objects.pdbs.len()),
        (3, 8, 1)
    );
    // the agents' DaemonSets are read: each agent's exists
    assert_eq!(objects.daemon_sets.as_ref().map(Vec::len), Some(3));

    let options = plan_flags(&["--ignore-daemonsets", "--group-label", "group"])
        .options()
        .unwrap();
    let plan = raygate::drain::plan(&objects.cluster(), &options, Timestamp::UNIX_EPOCH).unwrap();
    let table = plan_table(&plan);
    assert_eq!(
        table,
        "\
#  DOMAIN  NODES      PHASE 1 (PROTECTED)  GROUPS  PHASE 2  SKIPPED          BLOCKED
1  ud-a    2 [n1,n2]  1                    1       1        2 (DaemonSet 2)  1
2  ud-b    1 [n3]     1                    1       1        1 (DaemonSet 1)  0
2 domain(s), 3 node(s): phase 1 2, phase 2 2, skipped 3, blocked 1

domain ud-a:
  blocked: cannot delete Pods that declare no controller (use --force to override): t/scratch
  warning: ignoring DaemonSet-managed Pods: kube-system/agent-n1, kube-system/agent-n2

domain ud-b:
  warning: ignoring DaemonSet-managed Pods: kube-system/agent-n3
"
    );
    assert_eq!(plan_exit_code(&plan), exit::PROBLEMS);
    assert_eq!(plan.domains[0].phase1[0].pod.name, "w-g1-leader");
    assert_eq!(plan.domains[0].phase2[0].name, "w-g1-worker");

    // --force lets the pod through (with kubectl's warning): nothing blocks
    let options = plan_flags(&["--ignore-daemonsets", "--force", "--order", "explicit"]).options();
    assert!(options.is_err(), "--order explicit without --domains");
    let options = plan_flags(&[
        "--ignore-daemonsets",
        "--force",
        "--order",
        "explicit",
        "--domains",
        "ud-b,ud-a",
    ])
    .options()
    .unwrap();
    let plan = raygate::drain::plan(&objects.cluster(), &options, Timestamp::UNIX_EPOCH).unwrap();
    assert_eq!(plan_exit_code(&plan), exit::OK);
    let names: Vec<&str> = plan.domains.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["ud-b", "ud-a"]);
    let table = plan_table(&plan);
    assert!(
        table.contains("  warning: deleting Pods that declare no controller: t/scratch\n"),
        "{table}"
    );

    // JSON is the plan itself
    let json: Value = serde_json::from_str(&render(&plan, Output::Json).unwrap()).unwrap();
    assert_eq!(json["domains"][0]["name"], "ud-b");
    assert_eq!(json["domains"][1]["phase1"][0]["pdb"], "w-leaders");

    // a node selector that matches nothing is bad input
    let options = plan_flags(&["-l", "pool=none"]).options().unwrap();
    let err =
        raygate::drain::plan(&objects.cluster(), &options, Timestamp::UNIX_EPOCH).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no node matched: node selector \"pool=none\""
    );
}

#[tokio::test]
async fn check_prints_each_finding_with_its_fix_and_fails_on_any() {
    let sim = cluster().await;
    let client = sim.client();
    let flags = CheckFlags {
        ud_label: UD.into(),
        groups: Groups::Custom,
        group_label: Some("group".into()),
        representative: Some("role=leader".into()),
        taint_outdated: false,
        selector: String::new(),
        handoff: None,
    };
    let options = flags.options().unwrap();
    let objects = raygate::client::live::drain_objects(&client).await.unwrap();
    let findings = raygate::drain::preflight(&objects.cluster(), &options).unwrap();
    let report = CheckReport {
        nodes: objects.nodes.len(),
        pods: objects.pods.len(),
        findings,
        dead_ends: Vec::new(),
        health_dead_ends: Vec::new(),
        exposed: Vec::new(),
    };
    assert_eq!(
        check_table(&report),
        "the group contract holds: no findings (3 nodes, 8 pods checked)\n"
    );
    assert_eq!(report.exit_code(), exit::OK);

    // a third group split over both domains
    pod(
        &client,
        "t",
        "w-g3-leader",
        "n1",
        &[("app", "w"), ("group", "g3"), ("role", "leader")],
        Some("StatefulSet"),
    )
    .await;
    pod(
        &client,
        "t",
        "w-g3-worker",
        "n3",
        &[("app", "w"), ("group", "g3"), ("role", "worker")],
        Some("StatefulSet"),
    )
    .await;
    let objects = raygate::client::live::drain_objects(&client).await.unwrap();
    let findings = raygate::drain::preflight(&objects.cluster(), &options).unwrap();
    let report = CheckReport {
        nodes: objects.nodes.len(),
        pods: objects.pods.len(),
        findings,
        dead_ends: Vec::new(),
        health_dead_ends: Vec::new(),
        exposed: Vec::new(),
    };
    assert_eq!(report.exit_code(), exit::PROBLEMS);
    let table = check_table(&report);
    assert!(
        table.starts_with("1 finding(s) (3 nodes, 10 pods checked):\n"),
        "{table}"
    );
    assert!(table.contains("\nGroupSplitAcrossDomains  "), "{table}");
    assert!(table.contains("  problem: "), "{table}");
    assert!(table.contains("  fix: "), "{table}");

    // --groups custom without its two flags is refused before anything is read
    let flags = CheckFlags {
        group_label: None,
        ..flags
    };
    assert_eq!(
        flags.options().unwrap_err(),
        "--groups custom needs --group-label and --representative"
    );
}

#[path = "support/binary.rs"]
mod binary;
use binary::raygate;

#[test]
fn the_binary_exits_2_on_bad_flags_and_3_when_the_cluster_cannot_be_read() {
    // bad flags: refused before the cluster is read (the kubeconfig does not even exist)
    let missing = "/nonexistent/kubeconfig";
    let (code, _, err) = raygate(&[
        "drain",
        "plan",
        "--order",
        "explicit",
        "--kubeconfig",
        missing,
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err,
        "error: --order explicit needs --domains (every domain, in order)\n"
    );
    let (code, _, err) = raygate(&[
        "drain",
        "check",
        "--groups",
        "custom",
        "--kubeconfig",
        missing,
    ]);
    assert_eq!(code, Some(2), "{err}");
    // clap's own usage errors are 2 as well
    let (code, _, err) = raygate(&["drain", "plan", "--no-such-flag"]);
    assert_eq!(code, Some(2), "{err}");

    // an unreadable kubeconfig
    let (code, out, err) = raygate(&["drain", "plan", "--kubeconfig", missing]);
    assert_eq!(code, Some(3), "{err}");
    assert!(out.is_empty());
    assert!(
        err.starts_with("error: kubeconfig: /nonexistent/kubeconfig"),
        "{err}"
    );

    // a server that serves no Nodes (the CRD-only test API server)
    let server = raygate_testing::apiserver::TestServer::get();
    let kubeconfig = server.kubeconfig.to_string_lossy().into_owned();
    for command in ["plan", "check"] {
        let (code, _, err) =
            raygate(&["drain", command, "--kubeconfig", &kubeconfig, "-o", "json"]);
        assert_eq!(code, Some(3), "{command}: {err}");
        assert!(
            err.starts_with("error: reading Nodes: "),
            "{command}: {err}"
        );
    }
    // `rollout watch` and `abort` exit as the table says: no such NodeRollout 2, no cluster 3
    for verb in ["watch", "abort"] {
        let (code, _, err) = raygate(&["rollout", verb, "nope", "--kubeconfig", &kubeconfig]);
        assert_eq!(code, Some(2), "{verb}: {err}");
        assert_eq!(err, "error: noderollout \"nope\" not found\n");
        let (code, _, err) = raygate(&["rollout", verb, "nope", "--kubeconfig", missing]);
        assert_eq!(code, Some(3), "{verb}: {err}");
    }
}

/// The fixed-capacity dead end: ud-a (old-a) holds groups a0 and a1, ud-b (old-b) holds b0 (a
/// leader and a worker, a GPU each), the budget over the three leaders tolerates one down, so one
/// of ud-a's groups must be Ready elsewhere before its last leader goes; with the outdated nodes
/// tainted the only room is `spare` (8 GPUs, outside the rollout), cordoned or not.
async fn room_cluster(spare_cordoned: bool) -> Sim {
    let sim = Sim::builder().namespace("t").build();
    let client = sim.client();
    for (name, ud, pool, unschedulable) in [
        ("old-a", "ud-a", "old", false),
        ("old-b", "ud-b", "old", false),
        ("spare", "ud-n", "new", spare_cordoned),
    ] {
        let n = core::node(name, "")
            .label(UD, ud)
            .label("pool", pool)
            .allocatable(&[("cpu", "64"), ("nvidia.com/gpu", "8"), ("pods", "110")]);
        let n = if unschedulable { n.cordoned() } else { n };
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &n)
            .await
            .unwrap();
    }
    for (group, node) in [("a0", "old-a"), ("a1", "old-a"), ("b0", "old-b")] {
        for role in ["leader", "worker"] {
            let name = format!("w-{group}-{role}");
            let p = core::pod(&format!("t/{name}"), node)
                .owned_by("apps/v1", "StatefulSet", &format!("w-{group}"))
                .label("app", "w")
                .label("group", group)
                .label("role", role)
                .readiness_probe()
                .requests(&[("cpu", "1"), ("nvidia.com/gpu", "1")]);
            Api::<Pod>::namespaced(client.clone(), "t")
                .create(&PostParams::default(), &p)
                .await
                .unwrap();
        }
    }
    let pdb = core::pdb("t/w-leaders", &[("app", "w"), ("role", "leader")]).min_available(int(2));
    Api::<PodDisruptionBudget>::namespaced(client, "t")
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    sim
}

/// `drain plan` with the flags `plan` takes; the report as `raygate drain plan` prints it.
async fn plan_report(
    sim: &Sim,
    args: &[&str],
) -> (Vec<raygate::drain::DeadEnd>, String, Value, u8) {
    let objects = raygate::client::live::drain_objects(&sim.client())
        .await
        .unwrap();
    let flags = plan_flags(args);
    let options = flags.options().unwrap();
    let world = objects.cluster();
    let plan = raygate::drain::plan(&world, &options, Timestamp::UNIX_EPOCH).unwrap();
    let dead_ends = raygate::drain::dead_ends(&world, &plan, &options, flags.handoff.returns());
    let health_dead_ends =
        raygate::drain::health_dead_ends(&world, &plan, &options, flags.handoff.returns());
    let exposed = raygate::drain::exposures(&world, &plan);
    let report = PlanReport {
        plan,
        dead_ends: dead_ends.clone(),
        health_dead_ends,
        exposed,
    };
    let table = render(&report, Output::Table).unwrap();
    let json: Value = serde_json::from_str(&render(&report, Output::Json).unwrap()).unwrap();
    // -o name: the plan's nodes in drain order, as kubectl names them
    let names: Vec<String> = json["domains"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["nodes"].as_array().unwrap().iter())
        .map(|n| format!("node/{}\n", n["name"].as_str().unwrap()))
        .collect();
    assert_eq!(render(&report, Output::Name).unwrap(), names.concat());
    (dead_ends, table, json, report.exit_code())
}

const ROOM_FLAGS: [&str; 5] = [
    "-l",
    "pool=old",
    "--taint-outdated",
    "--group-label",
    "group",
];

#[tokio::test]
async fn plan_reports_a_domain_whose_groups_have_no_room_to_recover() {
    let sim = room_cluster(true).await;
    let (dead, table, json, code) = plan_report(&sim, &ROOM_FLAGS).await;
    assert_eq!(dead.len(), 1, "{table}");
    assert_eq!(code, exit::PROBLEMS);
    for says in [
        "\nno room to recover: 1 domain(s) cannot be drained",
        "  domain ud-a: upgrade domain ud-a holds 2 group(s) under PodDisruptionBudget \
         t/w-leaders (a0, a1), which tolerates 1 down",
        "room for 0 such group(s)",
        "    fix: add capacity outside the rollout (a node of the new generation) for 1 more \
         group(s), or set spec.taintOutdated to false, or let the budget tolerate 2 down",
    ] {
        assert!(table.contains(says), "no {says:?} in\n{table}");
    }
    // JSON/YAML: the plan's fields and `deadEnds`
    assert_eq!(json["domains"][0]["name"], "ud-a");
    assert_eq!(json["deadEnds"][0]["domain"], "ud-a");
    assert_eq!(json["deadEnds"][0]["pdb"], "t/w-leaders");
    assert_eq!(json["deadEnds"][0]["groups"], json!(["a0", "a1"]));
    assert_eq!(json["deadEnds"][0]["room"], 0);
    assert_eq!(json["deadEnds"][0]["mustMove"], 1);

    // without --taint-outdated the later domains' nodes still take pods: nothing predicted
    let (dead, table, json, code) = plan_report(&sim, &ROOM_FLAGS[..2]).await;
    assert!(dead.is_empty(), "{table}");
    assert!(!table.contains("no room to recover"), "{table}");
    assert_eq!(json["deadEnds"], json!([]));
    assert_eq!(code, exit::OK);

    // the spare node uncordoned: room for the group that must move
    let sim = room_cluster(false).await;
    let (dead, table, _, code) = plan_report(&sim, &ROOM_FLAGS).await;
    assert!(dead.is_empty(), "{table}");
    assert!(!table.contains("no room to recover"), "{table}");
    assert_eq!(code, exit::OK);
}

#[tokio::test]
async fn check_lists_a_domain_without_room_to_recover_as_a_finding() {
    let report = |sim: Sim, taint_outdated: bool| async move {
        let flags = CheckFlags {
            ud_label: UD.into(),
            groups: Groups::Custom,
            group_label: Some("group".into()),
            representative: Some("role=leader".into()),
            taint_outdated,
            selector: "pool=old".into(),
            handoff: None,
        };
        let options = flags.options().unwrap();
        let objects = raygate::client::live::drain_objects(&sim.client())
            .await
            .unwrap();
        let world = objects.cluster();
        let findings = raygate::drain::preflight(&world, &options).unwrap();
        let found = match flags.plan_options(&options) {
            Some(o) => {
                let plan = raygate::drain::plan(&world, &o, Timestamp::UNIX_EPOCH).unwrap();
                raygate::drain::CapacityCheck::check(&world, &plan, &o, flags.returns())
            }
            None => raygate::drain::CapacityCheck::default(),
        };
        CheckReport {
            nodes: objects.nodes.len(),
            pods: objects.pods.len(),
            findings,
            dead_ends: found.dead_ends,
            health_dead_ends: found.health_dead_ends,
            exposed: Vec::new(),
        }
    };
    let r = report(room_cluster(true).await, true).await;
    assert_eq!(r.exit_code(), exit::PROBLEMS);
    let table = check_table(&r);
    // the budget's dead end in ud-a, and (hand-off none) neither domain's health check can pass
    assert!(
        table.starts_with("3 finding(s) (3 nodes, 6 pods checked):\n"),
        "{table}"
    );
    for says in [
        "\nNoRoomToRecover  health check  upgrade domain ud-a\n",
        "\nNoRoomToRecover  health check  upgrade domain ud-b\n",
    ] {
        assert!(table.contains(says), "no {says:?} in\n{table}");
    }
    for says in [
        "\nNoRoomToRecover  PodDisruptionBudget t/w-leaders  upgrade domain ud-a\n",
        "  problem: upgrade domain ud-a holds 2 group(s)",
        "  fix: add capacity outside the rollout",
    ] {
        assert!(table.contains(says), "no {says:?} in\n{table}");
    }
    let json: Value = serde_json::from_str(&render(&r, Output::Json).unwrap()).unwrap();
    assert_eq!(json["deadEnds"][0]["domain"], "ud-a");

    // not asked (no --taint-outdated): the contract holds
    let r = report(room_cluster(true).await, false).await;
    assert_eq!(r.exit_code(), exit::OK, "{}", check_table(&r));
    // the spare node uncordoned: no finding
    let r = report(room_cluster(false).await, true).await;
    assert_eq!(r.exit_code(), exit::OK, "{}", check_table(&r));
    assert_eq!(
        check_table(&r),
        "the group contract holds: no findings (3 nodes, 6 pods checked)\n"
    );
}

/// `drain run --local`'s refusal before anything is touched: the controller's text, and
/// `--skip-room-check` lets it start.
#[tokio::test]
async fn run_local_refuses_a_plan_without_room_to_recover_unless_told_to_skip() {
    let dead = plan_report(&room_cluster(true).await, &ROOM_FLAGS).await.0;
    let refused = capacity_check(
        &raygate::drain::CapacityCheck {
            dead_ends: dead.clone(),
            health_dead_ends: vec![],
        },
        false,
    )
    .unwrap_err();
    for says in [
        "1 upgrade domain(s) cannot be drained, their groups would have nowhere to run: upgrade \
         domain ud-a holds 2 group(s)",
        "Fix: add capacity outside the rollout",
        "Nothing was cordoned or evicted",
        "pass --skip-room-check",
    ] {
        assert!(refused.contains(says), "no {says:?} in {refused}");
    }
    assert!(refused.starts_with(&raygate::drain::dead_end_message(&dead)));
    assert_eq!(
        capacity_check(
            &raygate::drain::CapacityCheck {
                dead_ends: dead.clone(),
                health_dead_ends: vec![]
            },
            true
        ),
        Ok(())
    );
    let dead = plan_report(&room_cluster(false).await, &ROOM_FLAGS).await.0;
    assert_eq!(
        capacity_check(
            &raygate::drain::CapacityCheck {
                dead_ends: dead.clone(),
                health_dead_ends: vec![]
            },
            false
        ),
        Ok(())
    );

    // the binary: --skip-room-check and --taint-outdated are --local's
    let (code, _, err) = raygate(&[
        "drain",
        "run",
        "--ud-label",
        UD,
        "--skip-room-check",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--local"), "{err}");
}

/// The health check's dead end with hand-off none (the default) and no taint: ud-a's groups a0 and
/// a1 run again on old-b, but once ud-b is drained too, all three groups (6 GPUs) need room
/// outside both domains, and the only node there (`spare`) is cordoned. `plan` names ud-b in its
/// own section and exits 1, `check --handoff none` lists it as a `NoRoomToRecover` finding, and
/// `drain run --local` refuses it unless `--skip-room-check`.
#[tokio::test]
async fn a_domain_whose_health_check_cannot_pass_with_hand_off_none_is_reported_and_refused() {
    let flags = ["-l", "pool=old", "--group-label", "group"];
    let sim = room_cluster(true).await;
    let (dead, table, json, code) = plan_report(&sim, &flags).await;
    assert!(
        dead.is_empty(),
        "no budget's dead end without the taint: {table}"
    );
    assert_eq!(code, exit::PROBLEMS, "{table}");
    for says in [
        "\nno room for the health check: 1 domain(s) would fail their health check, their groups \
         would have nowhere to run again:\n",
        "  domain ud-b: upgrade domain ud-b: with hand-off None its nodes stay cordoned, so its \
         health check waits until its 1 group(s) (b0) are Ready again on nodes outside the \
         domains drained so far, as must the 2 group(s) moved out of earlier domains; those \
         nodes have nothing free and the 3 group(s) request cpu 6, nvidia.com/gpu 6, pods 6 \
         (room for 0 such group(s)",
        "    fix: add capacity outside the domains drained so far (a node of the new generation) \
         for cpu 6, nvidia.com/gpu 6, pods 6 (3 more group(s)), or hand the nodes back \
         (spec.handOff.mode Reboot or Replace",
    ] {
        assert!(table.contains(says), "no {says:?} in\n{table}");
    }
    assert!(!table.contains("no room to recover:"), "{table}");
    assert_eq!(json["deadEnds"], json!([]));
    assert_eq!(json["healthDeadEnds"][0]["domain"], "ud-b");
    assert_eq!(json["healthDeadEnds"][0]["groups"], json!(["b0"]));
    assert_eq!(json["healthDeadEnds"][0]["movedBefore"], 2);
    assert_eq!(
        json["healthDeadEnds"][0]["short"],
        "cpu 6, nvidia.com/gpu 6, pods 6"
    );
    // the drained domains come back with a reboot: nothing to predict
    let with_reboot: Vec<&str> = flags
        .iter()
        .copied()
        .chain(["--handoff", "reboot"])
        .collect();
    let (_, table, json, code) = plan_report(&sim, &with_reboot).await;
    assert_eq!(
        (code, &json["healthDeadEnds"]),
        (exit::OK, &json!([])),
        "{table}"
    );

    // check --handoff none (no taint): the same domain as a finding
    let report = |sim: Sim, handoff: Option<HandoffMode>| async move {
        let flags = CheckFlags {
            ud_label: UD.into(),
            groups: Groups::Custom,
            group_label: Some("group".into()),
            representative: Some("role=leader".into()),
            taint_outdated: false,
            selector: "pool=old".into(),
            handoff,
        };
        let options = flags.options().unwrap();
        let objects = raygate::client::live::drain_objects(&sim.client())
            .await
            .unwrap();
        let world = objects.cluster();
        let o = flags.plan_options(&options)?;
        let plan = raygate::drain::plan(&world, &o, Timestamp::UNIX_EPOCH).unwrap();
        let found = raygate::drain::CapacityCheck::check(&world, &plan, &o, flags.returns());
        Some(CheckReport {
            nodes: objects.nodes.len(),
            pods: objects.pods.len(),
            findings: raygate::drain::preflight(&world, &options).unwrap(),
            dead_ends: found.dead_ends,
            health_dead_ends: found.health_dead_ends,
            exposed: raygate::drain::exposures(&world, &plan),
        })
    };
    let r = report(room_cluster(true).await, Some(HandoffMode::None))
        .await
        .unwrap();
    assert_eq!(r.exit_code(), exit::PROBLEMS);
    let table = check_table(&r);
    assert!(
        table.starts_with("1 finding(s) (3 nodes, 6 pods checked):\n"),
        "{table}"
    );
    assert!(
        table.contains(
            "\nNoRoomToRecover  health check  upgrade domain ud-b\n  problem: upgrade domain \
             ud-b: with hand-off None"
        ),
        "{table}"
    );
    let json: Value = serde_json::from_str(&render(&r, Output::Json).unwrap()).unwrap();
    assert_eq!(json["healthDeadEnds"][0]["domain"], "ud-b");
    // neither --taint-outdated nor --handoff: the room is not checked
    assert!(report(room_cluster(true).await, None).await.is_none());

    // drain run --local: refused with the controller's text, unless told to skip
    let objects = raygate::client::live::drain_objects(&sim.client())
        .await
        .unwrap();
    let world = objects.cluster();
    let options = plan_flags(&flags).options().unwrap();
    let plan = raygate::drain::plan(&world, &options, Timestamp::UNIX_EPOCH).unwrap();
    let gate =
        raygate::drain::health_dead_ends(&world, &plan, &options, HandoffMode::None.returns());
    let refused = capacity_check(
        &raygate::drain::CapacityCheck {
            dead_ends: vec![],
            health_dead_ends: gate.clone(),
        },
        false,
    )
    .unwrap_err();
    for says in [
        "1 upgrade domain(s) would fail their health check, their groups would have nowhere to \
         run again: upgrade domain ud-b",
        "Fix: add capacity outside the domains drained so far",
        "Nothing was cordoned or evicted",
        "pass --skip-room-check",
    ] {
        assert!(refused.contains(says), "no {says:?} in {refused}");
    }
    assert_eq!(
        capacity_check(
            &raygate::drain::CapacityCheck {
                dead_ends: vec![],
                health_dead_ends: gate.clone()
            },
            true
        ),
        Ok(())
    );

    // the spare node takes pods: room for all three groups, nothing reported
    let sim = room_cluster(false).await;
    let (_, table, json, code) = plan_report(&sim, &flags).await;
    assert_eq!(
        (code, &json["healthDeadEnds"]),
        (exit::OK, &json!([])),
        "{table}"
    );
    assert!(!table.contains("no room for the health check"), "{table}");
}

/// Issue #32 item 2: a RayCluster whose serve pods all sit in one domain, with no budget over
/// them, is named by `drain plan` before anything is touched, with the least interruption.
#[tokio::test]
async fn plan_names_a_workload_whose_whole_serving_capacity_one_domain_takes() {
    let sim = cluster().await;
    let client = sim.client();
    for (name, node, serve) in [("llm-w0", "n1", "true"), ("llm-w1", "n2", "true")] {
        let labels = [("ray.io/cluster", "llm"), ("ray.io/serve", serve)];
        pod(&client, "t", name, node, &labels, Some("ReplicaSet")).await;
    }
    // the head serves nothing (KubeRay flips its label by the proxy's health) and runs elsewhere
    let labels = [("ray.io/cluster", "llm"), ("ray.io/serve", "false")];
    pod(&client, "t", "llm-head", "n3", &labels, Some("ReplicaSet")).await;
    let (_, table, json, code) = plan_report(&sim, &["--ignore-daemonsets", "--force"]).await;
    let says = "  RayCluster t/llm (serve pods): all 2 serving pod(s) are in domain ud-a and no \
                budget keeps one running";
    assert!(table.contains("\nserving at risk: "), "{table}");
    assert!(table.contains(says), "no {says:?} in\n{table}");
    let exposed = json["exposed"].as_array().unwrap();
    let llm = exposed
        .iter()
        .find(|e| e["workload"] == "RayCluster t/llm (serve pods)")
        .unwrap_or_else(|| panic!("{exposed:?}"));
    assert_eq!(llm["domain"], "ud-a");
    assert_eq!(llm["pods"], json!(["t/llm-w0", "t/llm-w1"]));
    // a warning: the exit code is the plan's
    assert_eq!(code, exit::OK, "{table}");
}
