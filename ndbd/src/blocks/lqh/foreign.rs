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
    /// Transactions of other nodes' TCs that hold or wait for rows here, with their TC.
    pub tc_of: HashMap<TransId, NodeId>,
    /// Foreign transactions that ended here, and whether they committed.
    pub ended: HashMap<TransId, bool>,
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
    /// Some node committed it (this one, or one that answered).
    pub committed: bool,
}

impl Foreign {
    /// True while `trans` is another node's transaction with work here.
    pub fn is_foreign(&self, trans: TransId) -> bool {
        self.tc_of.contains_key(&trans)
    }

    /// Another node's transaction ended here (or was told to end before any of its work came):
    /// its record goes, and it is remembered, with how it ended, so that late work of it is
    /// refused and survivors of its coordinator's failure can ask.
    pub fn end(&mut self, trans: TransId, committed: bool) {
        self.tc_of.remove(&trans);
        self.gci.remove(&trans);
        match self.ended.get(&trans) {
            // Ended once: how it ended stands (a late signal must not change what this node
            // answers a master deciding it).
            Some(&before) => {
                debug_assert_eq!(
                    before, committed,
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

    /// How `trans` stands here, for a survivor of its coordinator's failure.
    pub fn outcome(&self, trans: TransId) -> TransOutcome {
        match self.ended.get(&trans) {
            Some(true) => TransOutcome::Committed,
            Some(false) => TransOutcome::Aborted,
            None => TransOutcome::Open,
        }
    }
}

/// True while work of `trans` may run in LQH here: its TC (this node's) is running executes,
/// or another node's TC has not ended it yet. An orphan's work never runs: its coordinator
/// failed, and what it holds here waits for the master's decision (work it had queued would
/// take locks, or commit at the last replica, after this node told the master "open").
pub(crate) fn live(tc: &Tc, foreign: &Foreign, trans: TransId) -> bool {
    tc.is_active(trans) || (foreign.is_foreign(trans) && !foreign.orphans.contains_key(&trans))
}
