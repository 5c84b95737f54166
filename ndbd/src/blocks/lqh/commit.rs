//! LQH's end of a transaction: COMMIT and ABORT (LQH_COMMITREQ, LQH_ABORTREQ from another
//! node's TC, or this node's TC through the job queue) commit or undo what the transaction holds
//! here and confirm; the last replica of a write may commit early, on TC's order. When a
//! transaction's coordinator fails, the survivors ask each other (TC_FAIL_QUERY) whether any of
//! them committed it, and all decide alike.

use rndb_config::NodeId;
use rndb_protocol::lqh::{self, gsn as lgsn};
use rndb_protocol::signals::block;

use super::foreign::live;
use crate::blocks::acc::TransId;
use crate::blocks::{data_node_header, Kernel, Outbox, Signal};

impl Kernel {
    /// NODE_FAILREP in LQH: the transactions the failed node coordinated here are committed
    /// if any survivor committed them (the commit round reached it before the coordinator
    /// died), else rolled back; every survivor asks every other, so all decide alike.
    pub(crate) fn lqh_node_failrep(&mut self, node: NodeId, out: &mut dyn Outbox) {
        let mut orphans: Vec<TransId> = self
            .foreign
            .tc_of
            .iter()
            .filter(|(_, tc)| **tc == node)
            .map(|(t, _)| *t)
            .collect();
        // Sorted: a hash map's order differs from run to run, and the queries go out in it.
        orphans.sort_unstable();
        let survivors: Vec<NodeId> = self.qmgr.peers_up().collect();
        for trans in orphans {
            self.foreign
                .resolving
                .insert(trans, (node, survivors.clone(), false));
            let query = lqh::TcFailQuery {
                trans,
                tc_node: node.0,
            };
            for &peer in &survivors {
                let frame = data_node_header(lgsn::TC_FAIL_QUERY, block::DBLQH, block::DBLQH);
                self.unsent.send(out, peer, frame, &mut |b| query.encode(b));
            }
            self.resolve_if_answered(trans, out);
        }
        // Queries that waited for this node to handle the failure: everything the dead
        // coordinator sent here has run now.
        let (ready, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.foreign.deferred_queries)
            .into_iter()
            .partition(|&(_, _, tc)| tc == node);
        self.foreign.deferred_queries = still;
        for (asker, trans, _) in ready {
            self.answer_tc_fail_query(asker, trans, out);
        }
        // Resolutions that waited for the node that failed now.
        let mut waiting: Vec<TransId> = self
            .foreign
            .resolving
            .iter()
            .filter(|(_, (_, awaiting, _))| awaiting.contains(&node))
            .map(|(t, _)| *t)
            .collect();
        waiting.sort_unstable();
        for trans in waiting {
            if let Some((_, awaiting, _)) = self.foreign.resolving.get_mut(&trans) {
                awaiting.retain(|&n| n != node);
            }
            self.resolve_if_answered(trans, out);
        }
    }

    /// Ends a transaction whose coordinator failed once every survivor has said how it stands
    /// there: committed if any committed it, else rolled back.
    pub(crate) fn resolve_if_answered(&mut self, trans: TransId, out: &mut dyn Outbox) {
        let Some((tc_node, awaiting, committed)) = self.foreign.resolving.get(&trans) else {
            return;
        };
        if !awaiting.is_empty() {
            return;
        }
        let (tc_node, committed) = (*tc_node, *committed);
        self.foreign.resolving.remove(&trans);
        tracing::info!(trans = %trans, node = %tc_node, committed, "ended a transaction whose coordinator failed");
        self.lqh_finish(trans, tc_node, committed, out);
    }

    /// Says how `trans` stands here to `asker`, a survivor of its coordinator's failure.
    pub(crate) fn answer_tc_fail_query(
        &mut self,
        asker: NodeId,
        trans: TransId,
        out: &mut dyn Outbox,
    ) {
        let answer = lqh::TcFailAnswer {
            trans,
            outcome: self.foreign.outcome(trans),
        };
        let frame = data_node_header(lgsn::TC_FAIL_ANSWER, block::DBLQH, block::DBLQH);
        self.unsent
            .send(out, asker, frame, &mut |b| answer.encode(b));
    }

    /// LQH: commits or undoes what `trans` holds here and confirms to its TC.
    pub(crate) fn lqh_finish(
        &mut self,
        trans: TransId,
        tc_node: NodeId,
        commit: bool,
        out: &mut dyn Outbox,
    ) {
        if tc_node != self.me {
            // First, so that none of its own queued work is granted.
            self.foreign.end(trans, commit);
        }
        let (tc, foreign) = (&self.tc, &self.foreign);
        let granted = if commit {
            self.lqh.commit(trans, &|t| live(tc, foreign, t))
        } else {
            self.lqh.abort(trans, &|t| live(tc, foreign, t))
        };
        self.resume(granted);
        if tc_node == self.me {
            self.jobs.push_back(Signal::RoundConf {
                trans,
                node: self.me,
            });
        } else if self.qmgr.is_up(tc_node) {
            let signal = if commit {
                lgsn::LQH_COMMITCONF
            } else {
                lgsn::LQH_ABORTCONF
            };
            self.send_trans_signal(tc_node, signal, block::DBTC, trans, out);
        }
    }

    /// The last replica's early commit: everything the transaction holds here is committed
    /// without waiting for TC's commit round (TC will not send one here).
    pub(crate) fn commit_here(&mut self, trans: TransId, tc_node: NodeId) {
        if tc_node != self.me {
            self.foreign.end(trans, true);
        }
        let (tc, foreign) = (&self.tc, &self.foreign);
        let granted = self.lqh.commit(trans, &|t| live(tc, foreign, t));
        self.resume(granted);
    }

    /// LQH_COMMITREQ or LQH_ABORTREQ from another node's TC: commit or undo what its
    /// transaction holds here.
    pub(crate) fn exec_lqh_commitreq(&mut self, from: NodeId, signal: u16, trans: TransId) {
        let owner = self.foreign.tc_of.get(&trans).copied();
        let own = self.tc.knows(trans) && !self.tc.is_scan_part(trans);
        if owner.is_some_and(|tc| tc != from) || (owner.is_none() && own) {
            // Not that node's transaction here: nothing of it is touched.
            tracing::warn!(node = %from, trans = %trans, "commit or abort of a transaction another TC runs; ignored");
            return;
        }
        self.jobs.push_back(if signal == lgsn::LQH_COMMITREQ {
            Signal::LqhCommitReq {
                trans,
                tc_node: from,
            }
        } else {
            Signal::LqhAbortReq {
                trans,
                tc_node: from,
            }
        });
    }

    /// TC_FAIL_QUERY: a survivor of a coordinator's failure asks how its transaction stands
    /// here.
    pub(crate) fn exec_tc_fail_query(
        &mut self,
        from: NodeId,
        query: lqh::TcFailQuery,
        out: &mut dyn Outbox,
    ) {
        let tc_node = NodeId(query.tc_node);
        if self.qmgr.is_up(tc_node) {
            // Not handled here yet: its last frames may still be queued.
            self.foreign
                .deferred_queries
                .push((from, query.trans, tc_node));
        } else {
            self.answer_tc_fail_query(from, query.trans, out);
        }
    }

    /// TC_FAIL_ANSWER: another survivor says how a transaction of a failed coordinator stands
    /// there.
    pub(crate) fn exec_tc_fail_answer(
        &mut self,
        from: NodeId,
        answer: lqh::TcFailAnswer,
        out: &mut dyn Outbox,
    ) {
        if let Some((_, awaiting, committed)) = self.foreign.resolving.get_mut(&answer.trans) {
            awaiting.retain(|&n| n != from);
            *committed |= answer.outcome == lqh::TransOutcome::Committed;
        }
        self.resolve_if_answered(answer.trans, out);
    }
}
