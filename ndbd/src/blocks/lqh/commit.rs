//! LQH's end of a transaction: COMMIT and ABORT (LQH_COMMITREQ, LQH_ABORTREQ from another
//! node's TC, or this node's TC through the job queue) commit or undo what the transaction holds
//! here and confirm; a COMMIT may cover only the rows held as a backup replica (TC's first round
//! to a node that is also a primary: see `tc/commit.rs`). The last replica of a write may
//! commit early, on TC's order. When a transaction's coordinator fails, the master decides it
//! for every survivor (TC_FAIL_REPORT, TC_FAIL_QUERY, TC_FAIL_ANSWER, TC_FAIL_DECISION; see
//! `foreign.rs`).

use rndb_config::NodeId;
use rndb_protocol::lqh::{self, gsn as lgsn};
use rndb_protocol::signals::block;

use super::foreign::{live, Orphan, Resolution};
use super::CommitRows;
use crate::blocks::acc::TransId;
use crate::blocks::{data_node_header, Kernel, Outbox, ProtocolViolation, Signal};

impl Kernel {
    /// NODE_FAILREP in LQH: the transactions the failed node coordinated here become orphans,
    /// decided by the master for every survivor (see `foreign.rs`); what waited for this
    /// failure to be handled here runs now; and when the master itself failed, the orphans go
    /// to the next one.
    pub(crate) fn lqh_node_failrep(&mut self, node: NodeId, out: &mut dyn Outbox) {
        let master = self.qmgr.master();
        let mut orphans: Vec<TransId> = self
            .foreign
            .tc_of
            .iter()
            .filter(|(_, record)| record.tc_node == node)
            .map(|(t, _)| *t)
            .collect();
        // Sorted: a hash map's order differs from run to run, and reports go out in it.
        orphans.sort_unstable();
        for trans in orphans {
            let orphan = Orphan {
                tc_node: node,
                // Nobody yet: reported below.
                reported_to: node,
            };
            self.foreign.orphans.insert(trans, orphan);
        }
        // Every orphan not yet with the master (new ones, and all of them when the master
        // failed) goes to it, before the answers to its deferred queries: a report that came
        // after the master had decided on the answers would start a second decision.
        let unreported: Vec<(TransId, NodeId)> = self
            .foreign
            .orphans
            .iter()
            .filter(|(_, o)| o.reported_to != master)
            .map(|(t, o)| (*t, o.tc_node))
            .collect();
        for (trans, tc_node) in unreported {
            if let Some(orphan) = self.foreign.orphans.get_mut(&trans) {
                orphan.reported_to = master;
            }
            if master == self.me {
                self.start_resolution(trans, tc_node, out);
            } else {
                let report = lqh::TcFailQuery {
                    trans,
                    tc_node: tc_node.0,
                };
                let frame = data_node_header(lgsn::TC_FAIL_REPORT, block::DBLQH, block::DBLQH);
                self.unsent
                    .send(out, master, frame, &mut |b| report.encode(b));
            }
        }
        // Queries and reports that waited for this node to handle the failure: everything the
        // dead coordinator sent here has run now.
        for (asker, trans, _) in take_about(&mut self.foreign.deferred_queries, node) {
            self.answer_tc_fail_query(asker, trans, out);
        }
        for (_, trans, tc_node) in take_about(&mut self.foreign.deferred_reports, node) {
            self.start_resolution(trans, tc_node, out);
        }
        // Decisions in progress here stop waiting for the node that failed.
        let waiting: Vec<TransId> = self
            .foreign
            .resolving
            .iter()
            .filter(|(_, r)| r.awaiting.contains(&node))
            .map(|(t, _)| *t)
            .collect();
        for trans in waiting {
            if let Some(resolution) = self.foreign.resolving.get_mut(&trans) {
                resolution.awaiting.retain(|&n| n != node);
            }
            self.resolve_if_answered(trans, out);
        }
    }

    /// As master: starts deciding a transaction of failed coordinator `tc_node` for every
    /// survivor, by asking each how it stands there (unless a decision is already in
    /// progress).
    fn start_resolution(&mut self, trans: TransId, tc_node: NodeId, out: &mut dyn Outbox) {
        if self.foreign.resolving.contains_key(&trans) {
            return;
        }
        let awaiting: Vec<NodeId> = self.qmgr.peers_up().collect();
        let query = lqh::TcFailQuery {
            trans,
            tc_node: tc_node.0,
        };
        for &peer in &awaiting {
            let frame = data_node_header(lgsn::TC_FAIL_QUERY, block::DBLQH, block::DBLQH);
            self.unsent.send(out, peer, frame, &mut |b| query.encode(b));
        }
        let (outcome, gci) = self.foreign.outcome(trans);
        let resolution = Resolution {
            tc_node,
            awaiting,
            committed: (outcome == lqh::TransOutcome::Committed).then_some(gci),
        };
        self.foreign.resolving.insert(trans, resolution);
        self.resolve_if_answered(trans, out);
    }

    /// As master: once every survivor has said how the transaction stands, decides it (commit
    /// if any committed it, in the epoch its coordinator gave it, else abort), applies the
    /// decision here and tells every survivor.
    pub(crate) fn resolve_if_answered(&mut self, trans: TransId, out: &mut dyn Outbox) {
        let Some(resolution) = self.foreign.resolving.get(&trans) else {
            return;
        };
        if !resolution.awaiting.is_empty() {
            return;
        }
        let (tc_node, committed) = (resolution.tc_node, resolution.committed);
        self.foreign.resolving.remove(&trans);
        tracing::info!(trans = %trans, node = %tc_node, ?committed, "decided a transaction whose coordinator failed, for every survivor");
        let decision = lqh::TcFailAnswer {
            trans,
            outcome: if committed.is_some() {
                lqh::TransOutcome::Committed
            } else {
                lqh::TransOutcome::Aborted
            },
            gci: committed.unwrap_or(0),
        };
        let peers: Vec<NodeId> = self.qmgr.peers_up().collect();
        for peer in peers {
            let frame = data_node_header(lgsn::TC_FAIL_DECISION, block::DBLQH, block::DBLQH);
            self.unsent
                .send(out, peer, frame, &mut |b| decision.encode(b));
        }
        self.apply_tc_fail_decision(trans, committed, out);
    }

    /// Ends an orphan as the master decided: committed in epoch `committed`, or aborted
    /// (nothing, if it is not one here). A save of a global checkpoint that waited for this
    /// node's orphans may go on.
    fn apply_tc_fail_decision(
        &mut self,
        trans: TransId,
        committed: Option<u64>,
        out: &mut dyn Outbox,
    ) {
        if let Some(orphan) = self.foreign.orphans.remove(&trans) {
            let end = match committed {
                Some(gci) => {
                    // Every survivor commits it in the epoch the rows that already committed
                    // have: a system restart restores all of it or none.
                    self.foreign.gci.insert(trans, gci);
                    End::Commit(CommitRows::All)
                }
                None => End::Abort,
            };
            self.lqh_finish(trans, orphan.tc_node, end, out);
            self.gcp_try_save(out);
        }
    }

    /// Says how `trans` stands here to `asker`, the master deciding it.
    pub(crate) fn answer_tc_fail_query(
        &mut self,
        asker: NodeId,
        trans: TransId,
        out: &mut dyn Outbox,
    ) {
        let (outcome, gci) = self.foreign.outcome(trans);
        let answer = lqh::TcFailAnswer {
            trans,
            outcome,
            gci,
        };
        let frame = data_node_header(lgsn::TC_FAIL_ANSWER, block::DBLQH, block::DBLQH);
        self.unsent
            .send(out, asker, frame, &mut |b| answer.encode(b));
    }

    /// LQH: commits (all of it, or its backup rows) or undoes what `trans` holds here and
    /// confirms to its TC.
    pub(crate) fn lqh_finish(
        &mut self,
        trans: TransId,
        tc_node: NodeId,
        end: End,
        out: &mut dyn Outbox,
    ) {
        let gci = self.commit_gci(trans, tc_node);
        let remote_tc = tc_node != self.me;
        // First, so that none of its own queued work is granted.
        match end {
            End::Commit(CommitRows::BackupOnly) if remote_tc => {
                self.foreign.commit_started(trans, gci)
            }
            End::Commit(_) if remote_tc => self.foreign.end(trans, Some(gci)),
            End::Abort if remote_tc => self.foreign.end(trans, None),
            _ => {}
        }
        let (tc, foreign) = (&self.tc, &self.foreign);
        let live = |t| live(tc, foreign, t);
        let granted = match end {
            End::Commit(rows) => self.lqh.commit_rows(trans, rows, gci, &live),
            End::Abort => self.lqh.abort(trans, &live),
        };
        self.resume(granted);
        if remote_tc && end == End::Commit(CommitRows::BackupOnly) && !self.lqh.touches_rows(trans)
        {
            // Nothing of it is left here (its primary operation failed, say): it ended, and
            // its TC's second round finds nothing to commit.
            self.foreign.end(trans, Some(gci));
        }
        let commit = end != End::Abort;
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
    /// without waiting for TC's commit round (TC will not send one here). TC orders it only
    /// when this node is the primary of no write of the transaction, so it commits backup rows
    /// alone (and releases locks): a primary's change must not be seen before its backups have
    /// it.
    pub(crate) fn commit_here(&mut self, trans: TransId, tc_node: NodeId) {
        let gci = self.commit_gci(trans, tc_node);
        debug_assert!(
            !self.lqh.holds_primary_change(trans),
            "early commit of transaction {trans:#x} at a node that is the primary of one of its writes"
        );
        if tc_node != self.me {
            self.foreign.end(trans, Some(gci));
        }
        let (tc, foreign) = (&self.tc, &self.foreign);
        let granted = self.lqh.commit(trans, gci, &|t| live(tc, foreign, t));
        self.resume(granted);
    }

    /// The epoch a commit of `trans` here belongs to: the one its TC gave it (this node's TC,
    /// or another's in LQH_COMMITREQ or an early commit's LQHKEYREQ, or the master's
    /// TC_FAIL_DECISION for a failed coordinator's). The current one only for a commit that
    /// came without one, which no TC sends.
    fn commit_gci(&self, trans: TransId, tc_node: NodeId) -> u64 {
        let given = if tc_node == self.me {
            self.tc.gci_of(trans)
        } else {
            self.foreign.gci.get(&trans).copied()
        };
        given.unwrap_or(self.gcp.current)
    }

    /// LQH_COMMITREQ or LQH_ABORTREQ from another node's TC: commit or undo what its
    /// transaction holds here.
    /// False when it was ignored (another TC's transaction).
    pub(crate) fn exec_lqh_commitreq(&mut self, from: NodeId, trans: TransId, end: End) -> bool {
        let owner = self.foreign.tc_of.get(&trans).map(|record| record.tc_node);
        let own = self.tc.knows(trans) && !self.tc.is_scan_part(trans);
        if owner.is_some_and(|tc| tc != from) || (owner.is_none() && own) {
            // Not that node's transaction here: nothing of it is touched.
            tracing::warn!(node = %from, trans = %trans, "commit or abort of a transaction another TC runs; ignored");
            return false;
        }
        self.jobs.push_back(match end {
            End::Commit(rows) => Signal::LqhCommitReq {
                trans,
                tc_node: from,
                rows,
            },
            End::Abort => Signal::LqhAbortReq {
                trans,
                tc_node: from,
            },
        });
        true
    }

    /// True when this node has handled the failure of coordinator `tc_node`: it is not up, or
    /// it is up again as a node being copied to by node restart, which coordinates nothing yet,
    /// so that a query or report about it is of its earlier run, whose failure was handled
    /// here before its new link came (seed 0x31df3: a report that a slow link brought after
    /// the node's inclusion began was deferred for a failure that had passed, for good).
    fn tc_failure_handled(&self, tc_node: NodeId) -> bool {
        !self.qmgr.is_up(tc_node) || self.qmgr.copying.contains(tc_node)
    }

    /// TC_FAIL_QUERY: the master deciding a transaction of a failed coordinator asks how it
    /// stands here.
    pub(crate) fn exec_tc_fail_query(
        &mut self,
        from: NodeId,
        query: lqh::TcFailQuery,
        out: &mut dyn Outbox,
    ) {
        let tc_node = NodeId(query.tc_node);
        if !self.tc_failure_handled(tc_node) {
            // Not handled here yet: its last frames may still be queued.
            self.foreign
                .deferred_queries
                .push((from, query.trans, tc_node));
        } else {
            self.answer_tc_fail_query(from, query.trans, out);
        }
    }

    /// TC_FAIL_REPORT: a survivor holds a transaction of a failed coordinator open and asks
    /// this node, the master, to decide it.
    pub(crate) fn exec_tc_fail_report(
        &mut self,
        from: NodeId,
        report: lqh::TcFailQuery,
        out: &mut dyn Outbox,
    ) {
        let tc_node = NodeId(report.tc_node);
        if !self.tc_failure_handled(tc_node) {
            // Its failure is not handled here yet: decided once it is.
            self.foreign
                .deferred_reports
                .push((from, report.trans, tc_node));
        } else {
            self.start_resolution(report.trans, tc_node, out);
        }
    }

    /// TC_FAIL_ANSWER: a survivor says how a transaction this node decides stands there.
    pub(crate) fn exec_tc_fail_answer(
        &mut self,
        from: NodeId,
        answer: lqh::TcFailAnswer,
        out: &mut dyn Outbox,
    ) -> Result<(), ProtocolViolation> {
        let committed = committed_gci(&answer)?;
        if let Some(resolution) = self.foreign.resolving.get_mut(&answer.trans) {
            resolution.awaiting.retain(|&n| n != from);
            if let Some(gci) = committed {
                if resolution.committed.is_some_and(|before| before != gci) {
                    tracing::error!(trans = %answer.trans, node = %from, gci, before = ?resolution.committed, "survivors committed a transaction in different epochs");
                }
                resolution.committed = resolution.committed.max(Some(gci));
            }
        }
        self.resolve_if_answered(answer.trans, out);
        Ok(())
    }

    /// TC_FAIL_DECISION: the master decided a transaction of a failed coordinator.
    pub(crate) fn exec_tc_fail_decision(
        &mut self,
        decision: lqh::TcFailAnswer,
        out: &mut dyn Outbox,
    ) -> Result<(), ProtocolViolation> {
        if decision.outcome == lqh::TransOutcome::Open {
            return Err(ProtocolViolation(format!(
                "TC_FAIL_DECISION for transaction {} decides nothing",
                decision.trans
            )));
        }
        let committed = committed_gci(&decision)?;
        self.apply_tc_fail_decision(decision.trans, committed, out);
        Ok(())
    }
}

/// The epoch a TC_FAIL_ANSWER or TC_FAIL_DECISION says the transaction committed in, if it
/// says committed (which always names one).
fn committed_gci(answer: &lqh::TcFailAnswer) -> Result<Option<u64>, ProtocolViolation> {
    match (answer.outcome, answer.gci) {
        (lqh::TransOutcome::Committed, 0) => Err(ProtocolViolation(format!(
            "transaction {} is said to be committed in no epoch",
            answer.trans
        ))),
        (lqh::TransOutcome::Committed, gci) => Ok(Some(gci)),
        _ => Ok(None),
    }
}

/// How LQH ends (part of) a transaction here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Commit(CommitRows),
    Abort,
}

/// Takes the deferred entries that waited for the failure of `node` to be handled.
fn take_about(
    entries: &mut Vec<(NodeId, TransId, NodeId)>,
    node: NodeId,
) -> Vec<(NodeId, TransId, NodeId)> {
    let (ready, still): (Vec<_>, Vec<_>) = std::mem::take(entries)
        .into_iter()
        .partition(|&(_, _, tc)| tc == node);
    *entries = still;
    ready
}
