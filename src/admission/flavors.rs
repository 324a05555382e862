//! Flavor assignment: which ResourceFlavor each PodSet's resources get in a ClusterQueue, and
//! whether the Workload fits now, fits only if something is preempted, or cannot fit at all.
//!
//! Per PodSet and resource group the flavors are tried in order, as Kueue's
//! `findFlavorForPodSetResource` (`pkg/scheduler/flavorassigner/flavorassigner.go` v0.19.2)
//! tries them: a flavor whose `nodeLabels` contradict the PodSet's `nodeSelector` is skipped; each
//! other flavor gets a mode (fits, fits by preempting, does not fit) and a borrowing height (0: in
//! the ClusterQueue's nominal quota), the worst over the group's resources; the search stops at
//! the first flavor the ClusterQueue's `flavorFungibility` does not ask to pass over (a fit that
//! borrows passes with `whenCanBorrow: TryNextFlavor`, a preempting one with `whenCanPreempt:
//! TryNextFlavor`), else the best flavor seen wins (Kueue's `isPreferred` with its default
//! `BorrowingOverPreemption`: fitting before preempting, then the lower borrowing height, then
//! the earlier flavor). A replacement slice is checked for its delta over the
//! slice it replaces, per (flavor, resource) over the whole Workload, and keeps that slice's
//! flavor for every PodSet name the slice had (sticky flavors).

use std::fmt::Write as _;
use std::ops::Range;

use super::cohorts::QuotaGroup;
use super::ids::{CqIx, FlavorIx, FrIx};
use super::preemption::{SimulatedKind, Simulation};
use super::queues::{Fungibility, Queues};
use super::quota::{Charges, Usage, add_charge};
use super::workloads::{HeldQuota, PodSetRequests};
use crate::quantity::Quantity;

/// How well a Workload fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mode {
    Fit,
    Preempt,
    NoFit,
}

/// How a flavor can take a resource group's requests: Kueue's `preemptionMode`, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fitting {
    NoFit,
    /// Fits only by preempting, and the simulation found no victims.
    NoCandidates,
    /// Fits by preempting, a victim in the Workload's own ClusterQueue.
    Preempt,
    /// Fits by reclaiming from other ClusterQueues of the cohort only.
    Reclaim,
    Fit,
}

impl Fitting {
    fn mode(self) -> Mode {
        match self {
            Fitting::NoFit => Mode::NoFit,
            Fitting::Fit => Mode::Fit,
            _ => Mode::Preempt,
        }
    }
}

/// A flavor's fitting and borrowing height for one resource group: Kueue's `granularMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Granular {
    fitting: Fitting,
    /// Kueue's `borrowingLevel`: [`super::quota::Tree::borrowing_height`] of what the Workload
    /// needs; for a preempting flavor, once the simulated victims are gone.
    borrow: u8,
}

impl Granular {
    const BEST: Granular = Granular {
        fitting: Fitting::Fit,
        borrow: 0,
    };
    const NO_FIT: Granular = Granular {
        fitting: Fitting::NoFit,
        borrow: u8::MAX,
    };

    /// Kueue's `isPreferred`: a viable flavor before one without preemption candidates, then,
    /// under `BorrowingOverPreemption` (the default), the better fitting and then the lower
    /// borrowing height; under `PreemptionOverBorrowing` the other way round.
    fn preferred_to(self, other: Granular, f: Fungibility) -> bool {
        if self.fitting == Fitting::NoFit {
            return false;
        }
        if other.fitting == Fitting::NoFit {
            return true;
        }
        let (a_none, b_none) = (
            self.fitting == Fitting::NoCandidates,
            other.fitting == Fitting::NoCandidates,
        );
        if a_none != b_none {
            return !a_none;
        }
        if f.preemption_over_borrowing && self.borrow != other.borrow {
            return self.borrow < other.borrow;
        }
        if self.fitting != other.fitting {
            return self.fitting > other.fitting;
        }
        self.borrow < other.borrow
    }

    /// Kueue's `shouldTryNextFlavor`.
    fn try_next(self, f: Fungibility) -> bool {
        match self.fitting {
            Fitting::NoFit | Fitting::NoCandidates => true,
            Fitting::Preempt | Fitting::Reclaim if f.preempt_try_next => true,
            _ => self.borrow > 0 && f.borrow_try_next,
        }
    }
}

/// Asked by the flavor assigner what preempting for `need` of one (flavor, resource) would
/// find (Kueue's `SimulatePreemption`). Without one ([`assign_pinned`]), a flavor that needs
/// preemption counts as preempting in the Workload's own ClusterQueue, at its borrowing height
/// before preemption.
pub(crate) trait Oracle {
    fn simulate(&self, fr: FrIx, need: Quantity) -> Simulation;
}

/// The admitted slice a replacement is charged against.
pub(crate) struct Replacing<'a> {
    pub key: &'a str,
    pub held: &'a HeldQuota,
}

impl Replacing<'_> {
    fn credit(&self, fr: FrIx) -> Quantity {
        match self.held.usage.binary_search_by_key(&fr, |(f, _)| *f) {
            Ok(i) => self.held.usage[i].1,
            Err(_) => Quantity::ZERO,
        }
    }
}

/// Per PodSet: (request index, flavor).
pub(crate) type PodSetFlavors = Vec<Vec<(usize, FlavorIx)>>;

/// Where a flavor scan resumes: (PodSet, resource group, position of the first flavor to try),
/// for the scans that stopped before the group's last flavor (Kueue's `LastTriedFlavorIdx` + 1,
/// `FlavorFungibilityPreserveScanProgress`); the others start at the first flavor.
pub(crate) type ScanFrom = Vec<(usize, usize, usize)>;

/// Result of flavor assignment.
#[derive(Debug)]
pub(crate) struct Assignment {
    pub mode: Mode,
    /// Per PodSet: (request index, flavor).
    pub flavors: PodSetFlavors,
    /// The Workload's full usage per (flavor, resource) once admitted.
    pub totals: Charges,
    /// What must fit: `totals` minus what the replaced slice holds, positive entries only.
    pub need: Charges,
    /// Pairs where `need` exceeds what is available now.
    pub short: Vec<FrIx>,
    /// Why it does not fit (the first PodSet that does not).
    pub failure: Option<Failure>,
    /// Where the next scan resumes, were this one cut short.
    pub scan: ScanFrom,
}

#[derive(Debug)]
pub(crate) struct Failure {
    pub podset: String,
    pub reasons: Vec<Reason>,
}

/// Why one flavor did not fit.
#[derive(Debug)]
pub(crate) enum Reason {
    Uncovered {
        resource: String,
    },
    Selector {
        flavor: FlavorIx,
        key: String,
        wanted: String,
        has: String,
    },
    Sticky {
        flavor: FlavorIx,
        resource: String,
    },
    Quota {
        fr: FrIx,
        need: Quantity,
        total: Quantity,
        credit: Quantity,
        available: Quantity,
        potential: Quantity,
        exceeds_max: bool,
    },
}

fn max0(q: Quantity) -> Quantity {
    if q.is_negative() { Quantity::ZERO } else { q }
}

fn get(totals: &[(FrIx, Quantity)], fr: FrIx) -> Quantity {
    totals
        .iter()
        .find(|(f, _)| *f == fr)
        .map_or(Quantity::ZERO, |(_, q)| *q)
}

fn no_fit(failure: Failure) -> Assignment {
    Assignment {
        mode: Mode::NoFit,
        flavors: Vec::new(),
        totals: Vec::new(),
        need: Vec::new(),
        short: Vec::new(),
        failure: Some(failure),
        scan: Vec::new(),
    }
}

fn failure(podset: &str, reasons: Vec<Reason>) -> Failure {
    Failure {
        podset: podset.to_string(),
        reasons,
    }
}

/// Assigns flavors to every PodSet of a Workload in ClusterQueue `cq` against `usage`, asking
/// `oracle` what preempting would find where a flavor needs it.
pub(crate) fn assign_with(
    q: &Queues,
    usage: &Usage,
    cq: CqIx,
    podsets: &[PodSetRequests],
    replacing: Option<&Replacing>,
    oracle: &dyn Oracle,
    resume: &[(usize, usize, usize)],
) -> Assignment {
    Assigner {
        q,
        usage,
        cq,
        replacing,
        pinned: None,
        oracle: Some(oracle),
        resume,
    }
    .assign(podsets)
}

/// Assigns the flavors of `pinned` (per PodSet: (request index, flavor), as
/// [`Assignment::flavors`]) and no other: whether the Workload fits there now.
pub(crate) fn assign_pinned(
    q: &Queues,
    usage: &Usage,
    cq: CqIx,
    podsets: &[PodSetRequests],
    pinned: &[Vec<(usize, FlavorIx)>],
) -> Assignment {
    Assigner {
        q,
        usage,
        cq,
        replacing: None,
        pinned: Some(pinned),
        oracle: None,
        resume: &[],
    }
    .assign(podsets)
}

impl Assigner<'_> {
    fn assign(&self, podsets: &[PodSetRequests]) -> Assignment {
        let (a, q, cq) = (self, self.q, self.cq);
        let mut totals: Charges = Vec::new();
        let mut flavors = Vec::with_capacity(podsets.len());
        let mut mode = Mode::Fit;
        let mut failure = None;
        let mut scan = Vec::new();
        for (pi, ps) in podsets.iter().enumerate() {
            let mut chosen = Vec::new();
            if ps.count == 0 || ps.requests.is_empty() {
                flavors.push(chosen);
                continue;
            }
            let placed = match a.place(ps) {
                Ok(placed) => placed,
                Err(f) => return no_fit(f),
            };
            for reqs in placed.chunk_by(|x, y| x.0 == y.0) {
                let gi = reqs[0].0;
                let group = &q.cqs[cq].groups[gi];
                let (fp, m, reasons, next) = match a.choose_flavor((pi, gi), ps, reqs, &totals) {
                    Ok(chosen) => chosen,
                    Err(f) => return no_fit(f),
                };
                if next > 0 {
                    scan.push((pi, gi, next));
                }
                if m == Mode::Preempt && failure.is_none() {
                    failure = Some(Failure {
                        podset: ps.name.clone(),
                        reasons,
                    });
                }
                mode = mode.max(m);
                for &(_, pos, ri) in reqs {
                    add_charge(&mut totals, group.fr[fp][pos], ps.requests[ri].total);
                    chosen.push((ri, group.flavors[fp]));
                }
            }
            chosen.sort_unstable();
            flavors.push(chosen);
        }
        let mut out = a.finish(mode, flavors, totals, failure);
        out.scan = scan;
        out
    }
}

/// One flavor assignment in progress: a Workload in ClusterQueue `cq` against `usage`.
struct Assigner<'a> {
    q: &'a Queues,
    usage: &'a Usage,
    cq: CqIx,
    replacing: Option<&'a Replacing<'a>>,
    /// Per PodSet: the only flavor to try for each request ([`assign_pinned`]).
    pinned: Option<&'a [Vec<(usize, FlavorIx)>]>,
    oracle: Option<&'a dyn Oracle>,
    /// Where each scan starts ([`ScanFrom`]).
    resume: &'a [(usize, usize, usize)],
}

impl Assigner<'_> {
    fn credit(&self, fr: FrIx) -> Quantity {
        self.replacing.map_or(Quantity::ZERO, |r| r.credit(fr))
    }

    /// Each request of a PodSet as (group, position in the group, request index), by group; an
    /// uncovered resource makes the Workload not fit.
    fn place(&self, ps: &PodSetRequests) -> Result<Vec<(usize, usize, usize)>, Failure> {
        let info = &self.q.cqs[self.cq];
        let mut placed: Vec<(usize, usize, usize)> = Vec::with_capacity(ps.requests.len());
        for (ri, r) in ps.requests.iter().enumerate() {
            match r
                .res
                .and_then(|id| info.group_of.get(id).copied().flatten())
            {
                Some((g, pos)) => placed.push((g, pos, ri)),
                None => {
                    return Err(failure(
                        &ps.name,
                        vec![Reason::Uncovered {
                            resource: r.name.clone(),
                        }],
                    ));
                }
            }
        }
        placed.sort_unstable();
        Ok(placed)
    }

    /// The flavor positions to try for one group: the replaced slice's flavor for this PodSet
    /// (sticky), else all in order.
    fn candidates(
        &self,
        (pi, gi): (usize, usize),
        ps: &PodSetRequests,
        group: &QuotaGroup,
        reqs: &[(usize, usize, usize)],
    ) -> Result<Range<usize>, Failure> {
        if let Some(pinned) = self.pinned {
            let f = pinned.get(pi).and_then(|fl| {
                fl.iter()
                    .find(|(ri, _)| reqs.iter().any(|&(_, _, r)| r == *ri))
                    .map(|(_, f)| *f)
            });
            return match f.and_then(|f| group.flavors.iter().position(|x| *x == f)) {
                Some(p) => Ok(p..p + 1),
                None => Err(failure(&ps.name, Vec::new())),
            };
        }
        let sticky = self
            .replacing
            .and_then(|r| r.held.flavors.iter().find(|(n, _)| *n == ps.name))
            .and_then(|(_, fl)| {
                reqs.iter().find_map(|&(_, _, ri)| {
                    fl.iter()
                        .find(|(res, _)| *res == ps.requests[ri].name)
                        .map(|(_, f)| *f)
                })
            });
        let Some(f) = sticky else {
            let from = self
                .resume
                .iter()
                .find(|&&(p, g, _)| p == pi && g == gi)
                .map_or(0, |&(_, _, from)| from);
            return Ok(from.min(group.flavors.len())..group.flavors.len());
        };
        match group.flavors.iter().position(|x| *x == f) {
            Some(p) => Ok(p..p + 1),
            None => Err(failure(
                &ps.name,
                vec![Reason::Sticky {
                    flavor: f,
                    resource: ps.requests[reqs[0].2].name.clone(),
                }],
            )),
        }
    }

    /// The flavor Kueue's search settles on (the module's doc), with the reasons the flavors
    /// tried did not fit.
    /// The flavor for one resource group of PodSet `pi` (group `gi`), its mode, why flavors
    /// before it did not fit, and where the next scan resumes (0: at the first flavor).
    fn choose_flavor(
        &self,
        (pi, gi): (usize, usize),
        ps: &PodSetRequests,
        reqs: &[(usize, usize, usize)],
        totals: &[(FrIx, Quantity)],
    ) -> Result<(usize, Mode, Vec<Reason>, usize), Failure> {
        let fungibility = self.q.cqs[self.cq].fungibility;
        let group = &self.q.cqs[self.cq].groups[gi];
        let last = group.flavors.len().saturating_sub(1);
        let mut reasons = Vec::new();
        let mut best: Option<(usize, Granular)> = None;
        for fp in self.candidates((pi, gi), ps, group, reqs)? {
            let fid = group.flavors[fp];
            if let Some((key, wanted, has)) =
                conflict(&self.q.catalog.flavors[fid].node_labels, &ps.node_selector)
            {
                reasons.push(Reason::Selector {
                    flavor: fid,
                    key,
                    wanted,
                    has,
                });
                continue;
            }
            let g = self.try_flavor(ps, &group.fr[fp], reqs, totals, &mut reasons);
            if g.fitting == Fitting::NoFit {
                continue;
            }
            if !g.try_next(fungibility) {
                let next = if fp < last { fp + 1 } else { 0 };
                return Ok((fp, g.fitting.mode(), reasons, next));
            }
            if best.is_none_or(|(_, b)| g.preferred_to(b, fungibility)) {
                best = Some((fp, g));
            }
        }
        match best {
            Some((fp, g)) => Ok((fp, g.fitting.mode(), reasons, 0)),
            None => Err(failure(&ps.name, reasons)),
        }
    }

    /// How the group's requests fit in one flavor (`row`: its (flavor, resource) ids), the worst
    /// over the requests, adding a reason per request that does not fit now.
    fn try_flavor(
        &self,
        ps: &PodSetRequests,
        row: &[FrIx],
        reqs: &[(usize, usize, usize)],
        totals: &[(FrIx, Quantity)],
        reasons: &mut Vec<Reason>,
    ) -> Granular {
        let tree = &self.q.tree;
        let mut worst = Granular::BEST;
        for &(_, pos, ri) in reqs {
            let fr = row[pos];
            let total = get(totals, fr) + ps.requests[ri].total;
            let credit = self.credit(fr);
            let need = max0(total - credit);
            let potential = tree.potential(self.cq, fr);
            let available = tree.available(self.usage, self.cq, fr);
            let exceeds_max = need > potential;
            let mut g = Granular {
                fitting: Fitting::Fit,
                borrow: tree.borrowing_height(self.usage, self.cq, fr, need),
            };
            if exceeds_max || need > available {
                reasons.push(Reason::Quota {
                    fr,
                    need,
                    total,
                    credit,
                    available,
                    potential,
                    exceeds_max,
                });
                // Kueue's `fitsResourceQuota`: preemption is tried only for what fits in the
                // ClusterQueue's nominal quota, or in a sub-cohort below the root, or when the
                // ClusterQueue may preempt while borrowing (`borrowWithinCohort`,
                // `canPreemptWhileBorrowing`); else the flavor does not fit
                let nominal = tree.node(self.cq).quota[fr].nominal;
                let while_borrowing = self.q.cqs[self.cq].borrow_within.is_some();
                if exceeds_max
                    || (need > nominal
                        && !while_borrowing
                        && !tree.may_reclaim_in_hierarchy(self.usage, self.cq, fr, need))
                {
                    return Granular::NO_FIT;
                }
                g = self.simulate(fr, need, g.borrow);
            }
            if worst.preferred_to(g, self.q.cqs[self.cq].fungibility) {
                worst = g;
            }
        }
        worst
    }

    /// A flavor that needs preemption for `need` of `fr`: what the oracle finds there.
    fn simulate(&self, fr: FrIx, need: Quantity, borrow_now: u8) -> Granular {
        let Some(oracle) = self.oracle else {
            return Granular {
                fitting: Fitting::Preempt,
                borrow: borrow_now,
            };
        };
        let s = oracle.simulate(fr, need);
        let fitting = match s.kind {
            SimulatedKind::NoCandidates => Fitting::NoCandidates,
            SimulatedKind::Preempt => Fitting::Preempt,
            SimulatedKind::Reclaim => Fitting::Reclaim,
        };
        Granular {
            fitting,
            borrow: s.borrow_after,
        }
    }

    /// What must fit (totals minus the replaced slice's credit) and where it is short now.
    fn finish(
        &self,
        mode: Mode,
        flavors: Vec<Vec<(usize, FlavorIx)>>,
        mut totals: Charges,
        failure: Option<Failure>,
    ) -> Assignment {
        totals.sort_unstable_by_key(|(fr, _)| *fr);
        let need: Charges = totals
            .iter()
            .map(|&(fr, t)| (fr, max0(t - self.credit(fr))))
            .filter(|(_, n)| !n.is_zero())
            .collect();
        let short = need
            .iter()
            .filter(|&&(fr, n)| n > self.q.tree.available(self.usage, self.cq, fr))
            .map(|(fr, _)| *fr)
            .collect();
        Assignment {
            mode,
            flavors,
            totals,
            need,
            short,
            failure,
            scan: Vec::new(),
        }
    }
}

/// The first label where a flavor's `nodeLabels` contradict a PodSet's `nodeSelector`.
fn conflict(
    labels: &std::collections::BTreeMap<String, String>,
    selector: &std::collections::BTreeMap<String, String>,
) -> Option<(String, String, String)> {
    if labels.is_empty() || selector.is_empty() {
        return None;
    }
    selector.iter().find_map(|(k, want)| {
        labels
            .get(k)
            .filter(|has| *has != want)
            .map(|has| (k.clone(), want.clone(), has.clone()))
    })
}

/// The user-facing message for a Workload that does not fit.
pub(crate) fn message(q: &Queues, cq: CqIx, failure: &Failure, replacing: Option<&str>) -> String {
    let cq_name = &q.cqs[cq].name;
    let mut s = String::with_capacity(200);
    let _ = write!(s, "couldn't assign flavors to pod set {}: ", failure.podset);
    for (i, r) in failure.reasons.iter().enumerate() {
        if i > 0 {
            s.push_str("; ");
        }
        let _ = match r {
            Reason::Uncovered { resource } => {
                write!(
                    s,
                    "resource {resource} is not covered by ClusterQueue {cq_name}"
                )
            }
            Reason::Selector {
                flavor,
                key,
                wanted,
                has,
            } => write!(
                s,
                "flavor {} doesn't match the node selector {key}={wanted} (its nodeLabels have {key}={has})",
                q.catalog.flavors[*flavor].name
            ),
            Reason::Sticky { flavor, resource } => write!(
                s,
                "flavor {} that the replaced slice {} holds for {resource} is not in ClusterQueue {cq_name}",
                q.catalog.flavors[*flavor].name,
                replacing.unwrap_or("?")
            ),
            Reason::Quota { .. } => write_quota_reason(&mut s, q, cq, r, replacing),
        };
    }
    s
}

/// A [`Reason::Quota`]: what was requested (a replacement: its delta), what is available of the
/// nominal quota, and whether it can ever fit.
fn write_quota_reason(
    s: &mut String,
    q: &Queues,
    cq: CqIx,
    reason: &Reason,
    replacing: Option<&str>,
) -> std::fmt::Result {
    let Reason::Quota {
        fr,
        need,
        total,
        credit,
        available,
        potential,
        exceeds_max,
    } = reason
    else {
        return Ok(());
    };
    let cq_name = &q.cqs[cq].name;
    let (res, flavor) = (q.catalog.resource_name(*fr), q.catalog.flavor_name(*fr));
    let delta = match replacing {
        Some(old) if !credit.is_zero() => {
            format!(" ({total} for this slice minus {credit} held by {old})")
        }
        _ => String::new(),
    };
    let node = q.tree.node(cq);
    let nominal = node.quota[*fr].nominal;
    let available = max0(*available);
    if !*exceeds_max {
        return write!(
            s,
            "insufficient unused quota for {res} in flavor {flavor} of ClusterQueue {cq_name}: requested {need}{delta}, {available} available of nominal {nominal} ({} more needed)",
            *need - available
        );
    }
    let limit = match (node.parent, node.quota[*fr].borrowing_limit) {
        (None, _) => String::new(),
        (Some(_), Some(bl)) => format!(" with borrowing limit {bl}"),
        (Some(_), None) => " with all the cohort can lend".to_string(),
    };
    write!(
        s,
        "insufficient quota for {res} in flavor {flavor} of ClusterQueue {cq_name}: requested {need}{delta}, {available} available of nominal {nominal}; the maximum is {potential}{limit}, so it can never fit"
    )
}
