//! The health check after a domain's hand-off (pure), Service Fabric's monitored upgrade: after
//! the wait, every affected budget current and satisfied and every evicted group Ready again, held
//! for the stable period; unhealthy for the retry timeout is a failure. A group that is down with
//! a node that is not Ready is the node's failure, not the domain's: it is named and not waited
//! for (the next domain's consent still counts it unavailable, from its members).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::SignedDuration;

use super::evict::GangWorkload;
use super::{Step, Stepper, human, node_ready, pod_serving};
use crate::drain::in_group;
use crate::events::EventType;

/// What the health check found in one look.
struct Health {
    /// What keeps the domain from being healthy.
    problems: Vec<String>,
    /// Each affected budget's `currentHealthy`.
    counts: BTreeMap<String, i32>,
    /// Groups not waited for: down with a node that is not Ready.
    excused: Vec<String>,
}

impl Stepper<'_> {
    pub(super) fn health_check(&mut self, i: usize) {
        let Some(handed_off) = self.s.domains[i].handed_off else {
            return;
        };
        let wait_until = handed_off
            .checked_add(self.o.health_check_wait)
            .unwrap_or(handed_off);
        if self.now < wait_until {
            self.s.domains[i].message = format!("health check wait until {wait_until}");
            return;
        }
        let Health {
            problems,
            counts,
            excused,
        } = self.health(i);
        let stable = self.stable();
        let now = self.now;
        let d = &mut self.s.domains[i];
        // a restarted caller did not watch the domain while it was down: its stable period
        // starts again (the time it was down is no evidence of health)
        if self.s.memory.health_watched.insert(d.name.clone()) {
            d.health.healthy_since = None;
        }
        let checking_since = *d.health.checking_since.get_or_insert(now);
        let dropped = counts
            .iter()
            .any(|(k, v)| d.health.current_healthy.get(k).is_some_and(|old| v < old));
        d.health.current_healthy = counts;
        if !problems.is_empty() || dropped {
            d.health.healthy_since = None;
        }
        if !problems.is_empty() {
            let since = d.health.last_healthy.unwrap_or(checking_since);
            let why = problems.join("; ");
            d.message = format!("waiting for health: {why}");
            if now.duration_since(since) >= self.o.health_check_retry_timeout {
                let reason = format!(
                    "upgrade domain {} stayed unhealthy for the health check retry timeout ({}): {why}",
                    d.name,
                    human(self.o.health_check_retry_timeout)
                );
                self.fail(reason);
            }
            return;
        }
        d.health.last_healthy = Some(now);
        let since = *d.health.healthy_since.get_or_insert(now);
        let held = now.duration_since(since);
        if held < stable {
            d.message = format!(
                "healthy for {} of the stable period {}",
                human(held),
                human(stable)
            );
            if !excused.is_empty() {
                d.message += &format!("; not waited for: {}", excused.join("; "));
            }
            return;
        }
        self.health_passed(i, stable);
    }

    /// Domain `i` stayed healthy for the stable period: done, or waiting for a resume.
    fn health_passed(&mut self, i: usize, stable: SignedDuration) {
        let d = &mut self.s.domains[i];
        let node = d.nodes.first().cloned().unwrap_or_default();
        let name = d.name.clone();
        if self.o.manual {
            d.step = Step::AwaitingResume;
            d.message = "healthy; manual mode: waiting for the operator to resume".into();
        } else {
            d.step = Step::Done;
            d.message = "done".into();
        }
        let manual = if self.o.manual {
            "; manual mode: resume to go on"
        } else {
            ""
        };
        self.report(
            &node,
            EventType::Normal,
            "DomainHealthy",
            format!(
                "upgrade domain {name} stayed healthy for {}{manual}",
                human(stable)
            ),
        );
    }

    /// What keeps the domain from being healthy, each affected budget's `currentHealthy`, and
    /// the groups not waited for.
    fn health(&self, i: usize) -> Health {
        let (mut problems, counts) = self.budget_problems(i);
        let (groups, excused) = self.group_problems(i);
        problems.extend(groups);
        Health {
            problems,
            counts,
            excused,
        }
    }

    /// Every budget that protected an evicted pod: current, satisfied as its status says, and
    /// at or above its floor counted from its groups' members (its status lags them).
    fn budget_problems(&self, i: usize) -> (Vec<String>, BTreeMap<String, i32>) {
        let d = &self.s.domains[i];
        let mut problems = Vec::new();
        let mut counts = BTreeMap::new();
        let budgets: BTreeSet<&str> = d
            .evicted
            .iter()
            .filter_map(|e| e.pdb.as_deref())
            .chain(d.folded.budgets.iter().map(String::as_str))
            .collect();
        for key in budgets {
            let Some(pdb) = self
                .obs
                .pdbs
                .iter()
                .find(|b| crate::meta::key(&b.metadata) == key)
            else {
                continue; // a deleted budget protects nothing
            };
            let Some(status) = &pdb.status else {
                problems.push(format!("PodDisruptionBudget {key} has no status yet"));
                continue;
            };
            if status.observed_generation != pdb.metadata.generation {
                problems.push(format!("PodDisruptionBudget {key} is not current"));
                continue;
            }
            let (current, desired) = (
                status.current_healthy.unwrap_or(0),
                status.desired_healthy.unwrap_or(0),
            );
            counts.insert(key.to_string(), current);
            if current < desired {
                problems.push(format!(
                    "PodDisruptionBudget {key} needs {desired} healthy pods and has {current}"
                ));
            }
            let members = self.groups.as_ref().and_then(|v| v.budgets.get(key));
            if let Some(b) = members
                && let Some(floor) = b.floor
                && i64::try_from(b.available_count()).unwrap_or(i64::MAX) < floor
            {
                problems.push(format!(
                    "PodDisruptionBudget {key} has {} group(s) available counted from their \
                     members, under its floor of {floor}",
                    b.available_count()
                ));
            }
        }
        (problems, counts)
    }

    /// Every evicted group Ready again: by its workload's count of Ready groups (less the groups
    /// down with a failed node, returned apart), or by name.
    fn group_problems(&self, i: usize) -> (Vec<String>, Vec<String>) {
        let d = &self.s.domains[i];
        let mut problems = Vec::new();
        let mut excused = Vec::new();
        // groups only: a pod without a group value is covered by its budget (a ReplicaSet's
        // replacement has a new name, so there is nothing to wait for by name)
        if self.o.wait_for_evicted_groups && !self.o.plan.groups.is_empty() {
            let mut groups: BTreeSet<(&str, &str)> = d
                .evicted
                .iter()
                .filter(|e| e.refused.is_none())
                .filter_map(|e| {
                    let ns = e.pod.split_once('/').map_or("", |(ns, _)| ns);
                    Some((ns, e.group.as_deref()?))
                })
                .chain(d.folded.groups.iter().filter_map(|g| g.split_once('/')))
                .collect();
            // by workload: as many Ready groups as before, whatever their names now
            for (key, baseline) in &d.workloads {
                let ns = key.split_once('/').map_or("", |(ns, _)| ns);
                // a folded baseline's evictions are not listed one by one: its groups count
                let evicted: Vec<&str> = baseline
                    .groups
                    .iter()
                    .map(String::as_str)
                    .filter(|g| groups.remove(&(ns, *g)) || baseline.folded)
                    .collect();
                if evicted.is_empty() {
                    continue;
                }
                let Some(workload) = GangWorkload::parse(key) else {
                    continue;
                };
                let (ready, _) = self.ready_groups(&workload, Some(baseline.group_size));
                let down = self.groups_down_with_their_node(&workload, baseline.group_size);
                if ready + down.len() < baseline.ready_groups {
                    problems.push(format!(
                        "workload {key} has {ready} of its {} Ready groups back (evicted: {})",
                        baseline.ready_groups,
                        evicted.join(", ")
                    ));
                } else if ready < baseline.ready_groups {
                    excused.extend(down.iter().map(|(group, node)| {
                        format!("group {group} of {key} is down with its node {node} not Ready")
                    }));
                }
            }
            // by name: groups whose workload is not known
            for (ns, group) in groups {
                let mut members = self
                    .obs
                    .pods
                    .iter()
                    .filter(|p| in_group(p, ns, &self.o.plan.groups, group))
                    .peekable();
                let ready = members.peek().is_some() && members.all(pod_serving);
                if !ready {
                    problems.push(format!("group {group} is not Ready again"));
                }
            }
        }
        (problems, excused)
    }

    /// The workload's groups that are not Ready (a member not serving, or fewer than `size`)
    /// and have a member on a node whose Ready condition is not True, each with that node: a
    /// node failure took them, wherever the drain had sent them.
    fn groups_down_with_their_node(
        &self,
        w: &GangWorkload,
        size: usize,
    ) -> BTreeMap<String, String> {
        let failed: BTreeSet<&str> = self
            .obs
            .nodes
            .iter()
            .filter(|n| !node_ready(n))
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        self.group_tallies(w)
            .into_iter()
            .filter(|(_, g)| !g.ready(size))
            .filter_map(|(group, g)| {
                let node = g.nodes.into_iter().find(|n| failed.contains(n))?;
                Some((group.to_string(), node.to_string()))
            })
            .collect()
    }
}
