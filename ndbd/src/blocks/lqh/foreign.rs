//! LQH's records of other nodes' transactions: a node that runs an operation for another node's
//! TC records the transaction as *foreign* until that TC's commit or abort arrives; the record is
//! what keeps its queued work alive. Foreign transactions that ended are remembered for a while,
//! so that an operation arriving late (the abort overtook it) is refused instead of taking locks
//! nobody would release, and so that survivors of its coordinator's failure can ask how it ended.
//!
//! When a coordinator fails, the transactions it leaves open here become *orphans*. One node
//! decides each of them for every survivor: the master (NDB's take-over TC). It asks every
//! survivor how the transaction stands (TC_FAIL_QUERY), decides commit if any committed it and
//! abort otherwise, and tells every survivor (TC_FAIL_DECISION). A survivor never decides an
//! orphan itself: it reports it to the master (TC_FAIL_REPORT) and waits, and when the master
//! fails too, it reports its orphans to the next one. So a second failure during the decision
//! cannot split it: whoever decides hears from every survivor, and a survivor that already
//! applied a decision answers with it.
//!
//! A node that is the primary of one write and a backup of another commits in both of its
//! TC's rounds: its backup rows first, its primary rows last. Between the two its record stays
//! (the second round, or the master's decision, commits the rest), marked *committing*: it
//! answers the master "committed", since part of it is, and none of its work runs any more.

use std::collections::{BTreeMap, VecDeque};

use hashbrown::HashMap;

use rndb_config::NodeId;
use rndb_protocol::lqh::TransOutcome;

use crate::blocks::acc::TransId;
use crate::blocks::tc::Tc;

/// Foreign transactions remembered after they end here.
const ENDED_REMEMBERED: usize = 64 * 1024;

/// Other nodes' transactions with work here, and how those that ended here ended.
#[derive(Debug, Default)]
pub(crate) struct Foreign {
    /// Transactions of other nodes' TCs that hold or wait for rows here.
    pub tc_of: HashMap<TransId, ForeignTrans>,
    /// Foreign transactions that ended here: committed in an epoch (`Some(gci)`) or aborted.
    pub ended: HashMap<TransId, Option<u64>>,
    ended_order: VecDeque<TransId>,
    /// Transactions of failed coordinators held open here, waiting for the master's decision.
    pub orphans: BTreeMap<TransId, Orphan>,
    /// As master: transactions of failed coordinators being decided, waiting for the other
    /// survivors to say whether any of them committed it.
    pub resolving: BTreeMap<TransId, Resolution>,
    /// Queries (from the master) and reports (to it) about transactions of a coordinator whose
    /// failure this node has not handled yet (its last frames may still be queued here):
    /// (sender, transaction, coordinator).
    pub deferred_queries: Vec<(NodeId, TransId, NodeId)>,
    pub deferred_reports: Vec<(NodeId, TransId, NodeId)>,
    /// The epoch its TC gave a transaction's commit (LQH_COMMITREQ, or an early commit's
    /// LQHKEYREQ), until it is logged here.
    pub gci: HashMap<TransId, u64>,
}

/// Another node's transaction with work here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ForeignTrans {
    /// Its TC.
    pub tc_node: NodeId,
    /// Its TC's first commit round committed the rows it holds here as a backup replica; the
    /// rows it holds as the primary wait for the second (set once, then the record ends).
    pub committing: bool,
}

impl ForeignTrans {
    pub fn new(tc_node: NodeId) -> ForeignTrans {
        ForeignTrans {
            tc_node,
            committing: false,
        }
    }
}

/// A transaction of a failed coordinator held open here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Orphan {
    /// Its coordinator, which failed.
    pub tc_node: NodeId,
    /// The master it was reported to (this node, when it decides it itself).
    pub reported_to: NodeId,
}

/// The master's decision in progress on a transaction of a failed coordinator.
#[derive(Clone, Debug)]
pub(crate) struct Resolution {
    /// Its coordinator, which failed.
    pub tc_node: NodeId,
    /// Survivors yet to answer.
    pub awaiting: Vec<NodeId>,
    /// The epoch some node committed it in (this one, or one that answered), if any did.
    pub committed: Option<u64>,
}

impl Foreign {
    /// True while `trans` is another node's transaction with work here.
    pub fn is_foreign(&self, trans: TransId) -> bool {
        self.tc_of.contains_key(&trans)
    }

    /// Another node's transaction ended here (or was told to end before any of its work came),
    /// committed in epoch `committed` or aborted (`None`): its record goes, and it is
    /// remembered, with how it ended, so that late work of it is refused and survivors of its
    /// coordinator's failure can ask.
    pub fn end(&mut self, trans: TransId, committed: Option<u64>) {
        self.tc_of.remove(&trans);
        self.gci.remove(&trans);
        match self.ended.get(&trans) {
            // Ended once: how it ended stands (a late signal must not change what this node
            // answers a master deciding it).
            Some(&before) => {
                debug_assert_eq!(
                    before.is_some(),
                    committed.is_some(),
                    "transaction {trans} ended twice, differently"
                );
                return;
            }
            None => {
                self.ended.insert(trans, committed);
                self.ended_order.push_back(trans);
            }
        }
        while self.ended_order.len() > ENDED_REMEMBERED {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }

    /// Another node's transaction committed its backup rows here, in epoch `gci`, and still
    /// holds its primary rows: it counts as committed from now on, and its record stays until
    /// the rest commits (a record already gone ends it, committed).
    pub fn commit_started(&mut self, trans: TransId, gci: u64) {
        match self.tc_of.get_mut(&trans) {
            Some(record) => {
                record.committing = true;
                self.gci.insert(trans, gci);
            }
            None => self.end(trans, Some(gci)),
        }
    }

    /// How `trans` stands here, for a survivor of its coordinator's failure: committed as soon
    /// as any of its rows is, with the epoch it committed in (0 when it did not).
    pub fn outcome(&self, trans: TransId) -> (TransOutcome, u64) {
        if self.tc_of.get(&trans).is_some_and(|r| r.committing) {
            let gci = self.gci.get(&trans).copied();
            debug_assert!(
                gci.is_some(),
                "transaction {trans} committing without its epoch"
            );
            return (TransOutcome::Committed, gci.unwrap_or(0));
        }
        match self.ended.get(&trans) {
            Some(Some(gci)) => (TransOutcome::Committed, *gci),
            Some(None) => (TransOutcome::Aborted, 0),
            None => (TransOutcome::Open, 0),
        }
    }
}

/// True while work of `trans` may run in LQH here: its TC (this node's) is running executes,
/// or another node's TC has not started to commit or end it here yet. An orphan's work never
/// runs: its coordinator failed, and what it holds here waits for the master's decision (work
/// it had queued would take locks, or commit at the last replica, after this node told the
/// master "open").
pub(crate) fn live(tc: &Tc, foreign: &Foreign, trans: TransId) -> bool {
    tc.is_active(trans)
        || (foreign.tc_of.get(&trans).is_some_and(|r| !r.committing)
            && !foreign.orphans.contains_key(&trans))
}
