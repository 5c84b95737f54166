//! TC's commit and abort: when an execute ends with Commit (or a transaction aborts), TC runs
//! rounds over the transaction's participants; the API hears of it when every participant
//! confirmed (LQH_COMMITCONF, LQH_ABORTCONF). This node is always a participant of its own
//! transactions. An abort goes to every participant at once.
//!
//! A commit orders rows, as NDB's linear commit orders each operation's replicas: first every
//! row held as a backup replica commits, then every row held as the primary. So a change that a
//! CommittedRead at its primary sees is committed on all its replicas, and if the coordinator
//! fails, a survivor holding one of them tells the master "committed", and the master commits
//! it everywhere. The rounds go by node, so a node that is a backup of one write and the
//! primary of another (two rows in one node group, or a unique index's hidden row) is in both:
//! its first LQH_COMMITREQ says "backup rows only" (`LQH_COMMIT_BACKUP_ROWS_ONLY`), its second
//! commits the rest.
//!
//! ```text
//!  commit: TC ─LQH_COMMITREQ─► nodes holding backup replicas (their backup rows) ─CONF─► TC
//!             ─LQH_COMMITREQ─► the other participants (the primaries) ─CONF─► TC ─► API
//! ```
//!
//! The early commit at the last replica (`Tc::start_early_commit`) skips both rounds there;
//! TC orders it only when that replica is the primary of no write.

use std::time::Instant;

use rndb_config::NodeId;
use rndb_protocol::lqh::{gsn as lgsn, LqhCommitReq, TransSignal, LQH_COMMIT_BACKUP_ROWS_ONLY};
use rndb_protocol::signals::block;
use rndb_protocol::NdbError;

use super::ApiAnswer;
use crate::blocks::acc::TransId;
use crate::blocks::lqh::{CommitRows, LqhKeyConfRef, OpRole};
use crate::blocks::{data_node_header, Kernel, Outbox, Signal};

impl Kernel {
    /// NODE_FAILREP in TC: operations out on the failed node fail with 4010, transactions
    /// with rows there abort with 286, and commit rounds stop waiting for it.
    pub(crate) fn tc_node_failrep(&mut self, node: NodeId) {
        // Operations out on it.
        let lost: Vec<((TransId, u32), u32)> = self
            .tc
            .remote_ops
            .iter()
            .filter(|(_, op)| op.to == node)
            .map(|(k, op)| (*k, op.op_index))
            .collect();
        for ((trans, token), op_index) in &lost {
            let answer = LqhKeyConfRef::Ref {
                trans: *trans,
                op_index: *op_index,
                error: NdbError::with_detail(4010, format!("data node {node} failed")),
                role: OpRole::Remote {
                    tc_node: self.me,
                    token: *token,
                },
                // What other replicas hold of it may differ: the transaction aborts.
                backup: true,
            };
            self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
        }
        // This TC's transactions with rows there.
        let error = NdbError::with_detail(286, format!("data node {node} failed"));
        for trans in self.tc.fail_participant(node, &error) {
            self.jobs.push_back(Signal::TcContinueB(trans));
        }
        for trans in self.tc.awaiting_node(node) {
            self.jobs.push_back(Signal::RoundConf { trans, node });
        }
    }

    /// The transaction's commit or abort is over on every participant: TC forgets it and
    /// answers the API.
    pub(crate) fn finish_transaction(
        &mut self,
        trans: TransId,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        // The invariant that keeps locks from leaking: no work of a transaction runs in LQH
        // once TC has started its commit or abort, so when TC forgets it, LQH holds nothing
        // of it (this node is always a participant, and its round has run), unless another
        // node's TC runs it and this record was only its scans' (that TC ends it here).
        debug_assert!(
            !self.lqh.touches_rows(trans) || self.foreign.is_foreign(trans),
            "transaction {trans:#x} touched rows after its commit or abort"
        );
        self.tc.forget_operations_of(trans);
        self.tc.count_end(trans);
        if let Some(gci) = self.tc.gci_of(trans) {
            self.gcp.commit_ended(gci);
            self.gcp_check_finished(out);
        }
        let early = self.tc.is_early_commit(trans);
        let answer = if self.tc.hold_for_checkpoint(trans, self.gcp.durable, now) {
            // A durable commit (or any, while arbitration holds commits): answered by
            // `tc_checkpoint_saved`, after a save the master starts at once rather than at
            // TimeBetweenGlobalCheckpoints (group commit: every commit held meanwhile shares
            // it).
            self.gcp_want_save(out);
            None
        } else {
            self.tc.on_finished(trans)
        };
        let ended_with = match &answer {
            Some(ApiAnswer::ExecuteRef { error, .. }) => Some(error.clone()),
            _ => self.tc.aborted_unasked(trans).cloned(),
        };
        let scan_error = || {
            ended_with
                .clone()
                .unwrap_or_else(|| NdbError::with_detail(4120, "the scan's transaction ended"))
        };
        self.close_scans_of(trans, &scan_error, out);
        match answer {
            Some(answer @ ApiAnswer::ExecuteRef { .. }) if early && self.tc.commits_held() => {
                self.tc.held_aborts.push((trans, answer));
            }
            Some(answer) => self.answer_api(trans, answer, out),
            None => {}
        }
    }

    /// TC: global checkpoints up to `Gcp::restorable` are saved (this node wrote its sysfile,
    /// or, diskless, heard that every node saved): the durable commits held for them are
    /// answered, and the schema changes (`dict_checkpoint_saved`).
    pub(crate) fn tc_checkpoint_saved(&mut self, out: &mut dyn Outbox) {
        if self.tc.commits_held() {
            // Answered once arbitration lets this side go on (`arbit_end_round`).
            return;
        }
        for (trans, answer) in std::mem::take(&mut self.tc.held_aborts) {
            self.answer_api(trans, answer, out);
        }
        for (trans, answer) in self.tc.checkpoint_saved(self.gcp.durable) {
            self.answer_api(trans, answer, out);
        }
        let schema_held = self.dict_checkpoint_saved(out);
        if self.tc.saving_count() > 0 || schema_held {
            // Commits of a later checkpoint still wait: the next save, now.
            self.gcp.asked_save = false;
            self.gcp_want_save(out);
        }
    }

    /// TC: durable commits whose checkpoint is overdue are answered as unknown
    /// (`Tc::saves_overdue`).
    pub(crate) fn tc_saves_overdue(&mut self, out: &mut dyn Outbox, now: Instant) {
        let limit = self.gcp.save_timeout().saturating_mul(2);
        let overdue = self.tc.saves_overdue(now, limit);
        if !overdue.is_empty() {
            tracing::warn!(
                commits = overdue.len(),
                restorable_gci = self.gcp.restorable,
                "{} durable commits waited {} ms for their global checkpoint to be saved: each is answered 4012 (committed, durability unknown)",
                overdue.len(),
                limit.as_millis()
            );
        }
        for (trans, answer) in overdue {
            self.answer_api(trans, answer, out);
        }
    }

    /// TC: the next round of a commit or an abort, or the end of the transaction when every
    /// round is done.
    pub(crate) fn tc_round(&mut self, trans: TransId, out: &mut dyn Outbox, now: Instant) {
        let commit = self.tc.is_committing(trans);
        if commit && self.tc.commits_held() {
            // Shown now, the rows could reveal a commit the other side of a split aborts
            // (seed 0x950306a7f: the primary's round ran as the backup's link failed, and a
            // read waiting on its lock saw the delete the other side rolled back).
            if !self.tc.held_rounds.contains(&trans) {
                self.tc.held_rounds.push(trans);
            }
            return;
        }
        if commit && self.tc.gci_of(trans).is_none() {
            // The commit starts: in the current epoch, unless the nodes are switching epochs
            // (GCP_PREPARE), when it waits for GCP_COMMIT (see `dih/gcp.rs`).
            if self.gcp.prepared {
                return self.gcp.held.push(trans);
            }
            let gci = self.gcp.commit_started();
            self.tc.set_gci(trans, gci);
        }
        let round = self.tc.next_round(trans);
        if round.nodes.is_empty() {
            return self.finish_transaction(trans, out, now);
        }
        for node in round.nodes {
            let backup_rows_only = round.backup_rows_only.contains(node);
            if node == self.me && self.foreign.is_foreign(trans) {
                // This node's own record of another node's transaction (its scans attached
                // it here): that TC commits or aborts what the transaction holds here.
                self.jobs.push_back(Signal::RoundConf { trans, node });
            } else if node == self.me {
                self.jobs.push_back(if commit {
                    Signal::LqhCommitReq {
                        trans,
                        tc_node: node,
                        rows: CommitRows::backup_only_if(backup_rows_only),
                    }
                } else {
                    Signal::LqhAbortReq {
                        trans,
                        tc_node: node,
                    }
                });
            } else if !self.qmgr.is_up(node) {
                // Nothing of it can be reached there any more.
                self.jobs.push_back(Signal::RoundConf { trans, node });
            } else if commit {
                let req = LqhCommitReq {
                    trans,
                    flags: if backup_rows_only {
                        LQH_COMMIT_BACKUP_ROWS_ONLY
                    } else {
                        0
                    },
                    gci: self.tc.gci_of(trans).unwrap_or(self.gcp.current),
                };
                let header = data_node_header(lgsn::LQH_COMMITREQ, block::DBLQH, block::DBTC);
                // Kept until it can be sent, as every commit or abort signal.
                self.unsent.send(out, node, header, &mut |b| req.encode(b));
            } else {
                self.send_trans_signal(node, lgsn::LQH_ABORTREQ, block::DBLQH, trans, out);
            }
        }
    }

    /// Sends a commit or abort signal naming `trans`, kept until it can be sent (a commit round
    /// must not be lost to a full send buffer).
    pub(crate) fn send_trans_signal(
        &mut self,
        to: NodeId,
        signal: u16,
        receiver_block: u16,
        trans: TransId,
        out: &mut dyn Outbox,
    ) {
        let sender_block = if receiver_block == block::DBLQH {
            block::DBTC
        } else {
            block::DBLQH
        };
        self.unsent.send(
            out,
            to,
            data_node_header(signal, receiver_block, sender_block),
            &mut |b| TransSignal { trans }.encode(b),
        );
    }
}
