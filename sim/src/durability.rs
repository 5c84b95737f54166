//! What a cluster crash may lose, and how the checkers learn it.
//!
//! A transaction's GCI is the epoch its TC's DIH was in when its commit started
//! (`Gcp::commit_started`), and a system restart at GCI `G` promises every transaction whose
//! GCI's high word is at most `G`. The client never learns its transaction's GCI, so the
//! simulator bounds it: [`GciClock`] records, after every step of every kernel, the highest
//! `current_gci() >> 32` any kernel has had since the last restart. A transaction acknowledged
//! at simulated time `t` started its commit before `t`, at a TC that had stepped by then, in
//! an epoch no later than that TC's current one, so its GCI's high word is at most
//! `clock.at(t)`, whether the TC still runs at `t` or not (the maximum is over every kernel
//! seen, dead ones included). The transaction is therefore **durable** at a crash when
//! `clock.at(t) <= G`, `G` being the GCI the cluster restarts at.
//!
//! `G` is the GCI the system restart chose, as the kernels hear it from the master. Until then
//! it is read from the disks right after the crash: the highest restorable GCI any node's
//! surviving sysfile names (NDB's rule, which `restart.rs` follows when every node takes
//! part). A restart that goes on without a node (it failed during the restart: a partial
//! start) chooses from the others' sysfiles, which may name less when that node's was the only
//! one naming the newest GCI: no kernel answered durable commits of that GCI, and its
//! transactions may be lost. `G` is at least the highest `durable_gci()` any kernel reported
//! before the crash (a kernel answers durable commits only once every node of the save named
//! the GCI in its sysfile); the world checks that too, both against the disks and against the
//! GCI the restart chose.
//!
//! The brief's suggestion was `restorable >= 1 + clock.at(t)`; that is sound but waits a whole
//! global checkpoint longer than needed, so it checks fewer transactions. The bound here
//! needs no margin because the clock includes every kernel, the TC among them, at every step.
//!
//! An operation sent before a crash and answered after it (a node that answered, then crashed
//! alone, its answer held up on a slow link) may have taken effect before the crash, so it is
//! treated as not durable, whatever the clock says.
//!
//! Operations that completed before a crash and are not durable by it change their outcome:
//! a write (register write, set insert or delete, transfer) becomes unknown (it may be restored
//! or not), and a read constrains nothing (what it saw may be gone). Every durable operation
//! keeps its outcome, and so does every operation after the last crash. This is sound: the
//! restored state is the state after every transaction of GCI at most `G` in the serial order
//! (a GCI is a consistent cut, see `dih/gcp.rs`), and every durable operation lies in that
//! prefix: a durable read saw only writes whose commit began before it ended, whose GCI is at
//! most `clock.at(t) <= G` too.

use std::collections::BTreeMap;

use rndb_config::NodeId;

/// The highest global checkpoint (GCI high word) any kernel has been in since the last
/// restart, as a step function of simulated time.
#[derive(Clone, Debug, Default)]
pub struct GciClock {
    /// (simulated ns, highest GCI high word from then on), in time order; a restart starts a
    /// new era (the restarted cluster counts again from its restart GCI).
    steps: Vec<(u64, u32)>,
    era_max: u32,
}

impl GciClock {
    /// A kernel that just stepped at `now_ns` is in epoch `current_gci`.
    pub fn observe(&mut self, now_ns: u64, current_gci: u64) {
        let high = (current_gci >> 32) as u32;
        if high > self.era_max {
            self.era_max = high;
            self.steps.push((now_ns, high));
        }
    }

    /// Every kernel was replaced at `now_ns` (a cluster restart): the clock counts anew.
    pub fn new_era(&mut self, now_ns: u64) {
        self.era_max = 0;
        self.steps.push((now_ns, 0));
    }

    /// The bound on the GCI high word of a transaction acknowledged at `t_ns` (steps at `t_ns`
    /// itself included, which only makes it larger).
    pub fn at(&self, t_ns: u64) -> u32 {
        let after = self.steps.partition_point(|&(at, _)| at <= t_ns);
        after.checked_sub(1).map_or(0, |i| self.steps[i].1)
    }

    /// The bound now.
    pub fn now(&self) -> u32 {
        self.era_max
    }
}

/// One cluster crash and what the disks kept.
#[derive(Clone, Debug)]
pub struct ClusterCrash {
    pub at_ns: u64,
    /// The highest `durable_gci()` a kernel reported before it (what the kernels promised).
    pub restorable: u32,
    /// The highest GCI any node's surviving sysfile names: what the restart comes back at
    /// when every node takes part.
    pub restart_gci: u32,
    /// The GCI the system restart after it chose (the master's CNTR_START_CONF), once a kernel
    /// heard it. Below `restart_gci` when the only sysfiles naming the newer GCIs were on nodes
    /// the restart went on without (one failed during it: a partial start); never below
    /// `restorable` (the world checks).
    pub chosen: Option<u32>,
    /// The cluster served after its restart. Until then another cluster crash may leave
    /// only what the next restart chooses, which may be less (`chosen` is lowered to it).
    pub served: bool,
    /// Each node's restorable GCI by its own surviving sysfile (0: none).
    pub own: BTreeMap<NodeId, u32>,
    /// Data nodes whose logs stop before the cluster's: they crashed alone (or stopped) and
    /// have not completed a restart since. One of them may be unable to restart at the
    /// restart GCI (it has no copy of what the cluster did since).
    pub lagging: Vec<NodeId>,
}

impl ClusterCrash {
    /// The GCI the cluster came back at: the one the restart chose, or (not chosen yet) the
    /// highest any sysfile names.
    pub fn restored_gci(&self) -> u32 {
        self.chosen.unwrap_or(self.restart_gci)
    }
}

/// What a crash did to an operation completed at some time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// No cluster crash followed it.
    NoCrashAfter,
    /// The first crash after it keeps it.
    Durable,
    /// The first crash after it keeps it because its durable commit was answered, where the
    /// clock alone would have let the crash lose it.
    DurableCommit,
    /// The first crash after it may have lost it.
    MayBeLost,
}

/// The fate of an operation invoked at `invoke_ns` and answered at `complete_ns`. One whose
/// answer came after a cluster crash it was sent before may have taken effect before the
/// crash (a data node that answered, then crashed alone, its answer still on a slow link):
/// it may have been lost. A `durable` one (a write whose durable commit was acknowledged:
/// TC answered only once its global checkpoint was saved) is kept by the crash after it,
/// whatever the clock says.
pub fn fate(
    crashes: &[ClusterCrash],
    clock: &GciClock,
    invoke_ns: u64,
    complete_ns: u64,
    durable: bool,
) -> Fate {
    if crashes
        .iter()
        .any(|c| c.at_ns >= invoke_ns && c.at_ns < complete_ns)
    {
        return Fate::MayBeLost;
    }
    match crashes.iter().find(|c| c.at_ns >= complete_ns) {
        None => Fate::NoCrashAfter,
        Some(crash) if clock.at(complete_ns) <= crash.restored_gci() => Fate::Durable,
        Some(_) if durable => Fate::DurableCommit,
        Some(_) => Fate::MayBeLost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_the_highest_gci_seen_since_the_last_restart() {
        let mut clock = GciClock::default();
        clock.observe(10, 1 << 32);
        clock.observe(20, 3 << 32 | 7);
        clock.observe(30, 2 << 32);
        assert_eq!(
            (clock.at(5), clock.at(10), clock.at(25), clock.at(35)),
            (0, 1, 3, 3)
        );
        clock.new_era(40);
        clock.observe(50, 2 << 32);
        assert_eq!((clock.at(45), clock.at(50)), (0, 2));
        let crash = ClusterCrash {
            at_ns: 38,
            restorable: 2,
            restart_gci: 2,
            chosen: None,
            served: true,
            own: BTreeMap::new(),
            lagging: Vec::new(),
        };
        let crashes = [crash];
        assert_eq!(fate(&crashes, &clock, 12, 15, false), Fate::Durable);
        assert_eq!(fate(&crashes, &clock, 12, 25, false), Fate::MayBeLost);
        assert_eq!(fate(&crashes, &clock, 12, 38, false), Fate::MayBeLost);
        assert_eq!(fate(&crashes, &clock, 55, 60, false), Fate::NoCrashAfter);
        // Sent before the crash, answered after it.
        assert_eq!(fate(&crashes, &clock, 37, 60, false), Fate::MayBeLost);
        // A partial start chose an older GCI than the disks named: what came after it is not
        // durable.
        let crash = ClusterCrash {
            restart_gci: 3,
            chosen: Some(2),
            ..crashes[0].clone()
        };
        let crashes = [crash];
        assert_eq!(fate(&crashes, &clock, 12, 15, false), Fate::Durable);
        assert_eq!(fate(&crashes, &clock, 12, 25, false), Fate::MayBeLost);
        // A durable commit's answer: kept whatever its GCI, unless a crash came before it.
        assert_eq!(fate(&crashes, &clock, 12, 15, true), Fate::Durable);
        assert_eq!(fate(&crashes, &clock, 12, 25, true), Fate::DurableCommit);
        assert_eq!(fate(&crashes, &clock, 37, 60, true), Fate::MayBeLost);
    }
}
