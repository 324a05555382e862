//! One admission pass over an [`Index`]: evictions that do not depend on quota (deactivated,
//! stopped queues), then every pending Workload of every ClusterQueue in one global queue order,
//! each against the usage left by the ones before it; then the usage and counts per queue as they
//! stand once the decisions are applied.
//!
//! Kueue's `schedule → nominate → processEntry`, by concept:
//! * [`pass`]: one pass's state ([`Pass`]) and the evictions that need no quota;
//! * [`nominate`]: the pending Workloads per ClusterQueue and the rounds of heads;
//! * [`entry`]: one pending Workload decided: admitted, preempting or left pending;
//! * [`preempt`]: the victims one preempts, and the admissions a preemption conflicts with;
//! * [`hold`]: Workloads held back for a reclaimer, and the quota kept for them;
//! * [`late`]: held-back Workloads looked at again once their reclaimer is decided;
//! * [`lookahead`]: what the next passes would undo, for [`run`] to redo the pass without it;
//! * [`memo`]: decisions reused for Workloads of the same shape;
//! * [`usage`]: the usage and counts per queue once the decisions are applied.

mod entry;
mod hold;
mod late;
mod lookahead;
mod memo;
mod nominate;
mod pass;
mod preempt;
mod usage;

use super::ids::{TiVec, WorkloadIx};
use super::index::Index;
use super::{CycleResult, Options};
use lookahead::later_pass_victims;
use nominate::{nominate, rounds};
use pass::Pass;
use usage::report_usage;

/// Per Workload: the Workload it is held back for in a pass (one that could preempt it in the
/// next pass to take back the quota it would use).
type Forbidden = TiVec<WorkloadIx, Option<WorkloadIx>>;

/// Per Workload: flavors to try, per PodSet (request index, flavor), see [`pass::Pass::pins`].
type Pins = TiVec<WorkloadIx, Option<crate::admission::flavors::PodSetFlavors>>;

/// Runs one pass, in Kueue's phases: quota-independent evictions, then the pending Workloads in
/// rounds of one head per ClusterQueue (see [`nominate::rounds`]), then the usage report.
///
/// A pass is checked against the passes after it ([`later_pass_victims`]): with its decisions
/// applied and nothing else changed, they must not evict what this one admitted or what preempted
/// in it. If they would, this pass is redone with those Workloads held back for the ones that
/// would evict them, as Kueue would have had those take the quota first.
pub(crate) fn run(ix: &Index, options: &Options) -> CycleResult {
    let mut forbidden: Forbidden = TiVec::from(vec![None; ix.workloads.len()]);
    let mut pass = converge(ix, &mut forbidden);
    for _ in 0..MAX_LOOKAHEADS {
        let victims = later_pass_victims(ix, &pass, options);
        if victims.is_empty() {
            break;
        }
        for (v, by) in victims {
            forbidden[v] = Some(by);
        }
        pass = converge(ix, &mut forbidden);
    }
    let (cluster_queues, local_queues) = report_usage(&pass, options);
    CycleResult {
        decisions: pass.decisions,
        cluster_queues,
        local_queues,
    }
}

/// A pass redone until none of its admissions is one a Workload it left waiting could preempt
/// (as far as the end of the pass shows: [`Pass::reclaimable`] and the conflicts preemption met);
/// `forbidden` gains each Workload held back so.
fn converge<'a>(ix: &'a Index, forbidden: &mut Forbidden) -> Pass<'a> {
    let mut pins: Pins = TiVec::from(vec![None; ix.workloads.len()]);
    let mut pass = one_pass(ix, forbidden.clone(), pins.clone());
    for _ in 0..MAX_RETRIES {
        let mut extra = std::mem::take(&mut pass.conflicts);
        for (v, by, flavors) in pass.reclaimable() {
            if !extra.iter().any(|&(x, _)| x == v) {
                extra.push((v, by));
                // as Kueue ends up once `by` preempted `v`: `by` on the flavors it takes then
                pins[by].get_or_insert(flavors);
            }
        }
        if extra.is_empty() {
            break;
        }
        for (v, by) in extra {
            forbidden[v] = Some(by);
        }
        pass = one_pass(ix, forbidden.clone(), pins.clone());
    }
    pass
}

/// How many times a pass is redone without the Workloads a waiting one could reclaim.
const MAX_RETRIES: usize = 64;

/// How many times a pass is redone because a later pass would evict what it admitted.
const MAX_LOOKAHEADS: usize = 8;

/// One pass: evictions without quota, stale replaced slices finished, the pending Workloads
/// nominated and processed in rounds, then the held-back ones looked at again.
fn one_pass(ix: &Index, forbidden: Forbidden, pins: Pins) -> Pass<'_> {
    let mut pass = Pass::new(ix, forbidden, pins);
    pass.evict_without_quota();
    let finished_pending = pass.finish_stale_replaced();
    let (mut stray, mut queues) = nominate(ix);
    if finished_pending {
        stray.retain(|&i| !pass.gone[i]);
        queues.iter_mut().for_each(|q| q.retain(|&i| !pass.gone[i]));
    }
    for i in stray {
        pass.process_entry(i);
    }
    rounds(&mut pass, &queues);
    pass.late(&queues);
    pass
}
