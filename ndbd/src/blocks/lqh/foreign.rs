//! LQH's records of other nodes' transactions: a node that runs an operation for another node's
//! TC records the transaction as *foreign* until that TC's commit or abort arrives; the record is
//! what keeps its queued work alive. Foreign transactions that ended are remembered for a while,
//! so that an operation arriving late (the abort overtook it) is refused instead of taking locks
//! nobody would release, and so that survivors of its coordinator's failure can ask how it ended.

use std::collections::VecDeque;

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
    /// Foreign transactions whose coordinator failed, waiting for the other survivors to say
    /// whether any of them committed it: (the failed coordinator, nodes yet to answer,
    /// committed somewhere).
    pub resolving: HashMap<TransId, (NodeId, Vec<NodeId>, bool)>,
    /// Queries about transactions of a coordinator whose failure this node has not handled
    /// yet (its last frames may still be queued here): (asking node, transaction, coordinator).
    pub deferred_queries: Vec<(NodeId, TransId, NodeId)>,
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
        if self.ended.insert(trans, committed).is_none() {
            self.ended_order.push_back(trans);
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
/// or another node's TC has not ended it yet.
pub(crate) fn live(tc: &Tc, foreign: &Foreign, trans: TransId) -> bool {
    tc.is_active(trans) || foreign.is_foreign(trans)
}
