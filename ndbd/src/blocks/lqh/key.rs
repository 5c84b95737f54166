//! LQH's key operations: LQHKEYREQ runs an operation on this node's replica of a fragment (ACC
//! finds and locks the row, TUP reads or changes it); a write that succeeded goes on to the next
//! replica of its chain, and the last replica answers TC with LQHKEYCONF (or LQHKEYREF), on this
//! node through the job queue or on another through the link.
//!
//! ```text
//!  API ─TCKEYREQ─► TC (node A) ─LQHKEYREQ─► LQH primary (node P) ─LQHKEYREQ─► LQH backup (B)
//!                     ▲                                                          │
//!                     └──────────────────────── LQHKEYCONF ──────────────────────┘
//! ```
//!
//! The one shortcut past TC is NDB's TRANSID_AI: a read's row goes from LQH straight to the API
//! (see `run_lqh_key_req`).

use std::time::Instant;

use rndb_config::NodeId;
use rndb_protocol::lqh::{self, gsn as lgsn, FiredChange, LqhKeyConf, LqhKeyRef};
use rndb_protocol::signals::block;
use rndb_protocol::{LockMode, NdbError, OperationType};

use super::foreign::{live, ForeignTrans};
use super::{LqhKeyConfRef, LqhKeyReq, LqhWork, OpRole};
use crate::blocks::acc::OpKey;
use crate::blocks::node_set::NodeSet;
use crate::blocks::{data_node_header, Kernel, Outbox, ProtocolViolation, SendFailure, Signal};

/// A CommittedRead: it takes no lock and waits for none.
pub(crate) fn is_committed_read(req_type: OperationType, lock: LockMode) -> bool {
    req_type == OperationType::Read && lock == LockMode::CommittedRead
}

impl Kernel {
    /// LQH: runs an operation here; a write that succeeded goes on to the next replica of its
    /// chain, anything else is answered.
    pub(crate) fn run_lqh_key_req(
        &mut self,
        req: Box<LqhKeyReq>,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let committed_read = is_committed_read(req.op_type, req.lock_mode);
        let remote = matches!(req.role, OpRole::Remote { .. });
        // A CommittedRead for another node takes no lock and belongs to no transaction here.
        let exempt = committed_read && remote;
        if !exempt && !live(&self.tc, &self.foreign, req.trans) {
            // Its transaction's commit or abort started while the operation was queued (a
            // second hop, index maintenance, a granted lock, a replica's turn): it must not run
            // any more.
            let (tc, foreign) = (&self.tc, &self.foreign);
            let granted = self.lqh.drop_work(&req, &|t| live(tc, foreign, t));
            self.resume(granted);
            return;
        }
        if req.op_type != OperationType::Read && self.builds.locks(req.table_id) {
            // NDB builds an index under a table lock: the build's entries must not race the
            // index maintenance of writes.
            let answer = LqhKeyConfRef::Ref {
                trans: req.trans,
                op_index: req.op_index,
                error: NdbError::with_detail(
                    701,
                    format!(
                        "a unique index of table {} (or that table, a unique index's) is being built",
                        req.table_id
                    ),
                ),
                role: req.role,
                backup: req.backup,
            };
            return self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
        }
        if req.op_type != OperationType::Read && !req.backup && !self.qmgr.copying.is_empty() {
            if let Some(missing) = self.chain_misses_copied_to(&req) {
                // Its TC chose the chain before it included the node, and the row may since
                // have reached the node by a later transaction's chain: run here, the write
                // would reach every replica but that one, and the copy, which sends only the
                // rows that are, would not undo it there (seed 0xac021be: a delete waited
                // here for an insert's lock; the insert reached the restarting node, the
                // delete did not). NDB's "distribution changed": the transaction retries.
                let answer = LqhKeyConfRef::Ref {
                    trans: req.trans,
                    op_index: req.op_index,
                    error: NdbError::with_detail(
                        1204,
                        format!(
                            "data node {missing}, restarting, joined partition {}'s replicas after the operation's were chosen",
                            req.fragment
                        ),
                    ),
                    role: req.role,
                    backup: req.backup,
                };
                return self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
            }
        }
        if req.op_type != OperationType::Read {
            // The redo log must be able to take the change when it commits.
            let refusal = self.fs.refusal().or_else(|| {
                self.lqh
                    .redo
                    .as_ref()
                    .and_then(|redo| redo.refusal(req.fragment))
            });
            if let Some(error) = refusal {
                let answer = LqhKeyConfRef::Ref {
                    trans: req.trans,
                    op_index: req.op_index,
                    error,
                    role: req.role,
                    backup: req.backup,
                };
                return self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
            }
        }
        let forward = (!req.chain.is_empty()).then(|| req.clone());
        let commit_here = req.commit_at_last && req.chain.is_empty();
        let (trans, role_is_local) = (req.trans, !remote);
        // Matched where `execute` wrote it: moving the answer into a tuple with `forward`
        // first copied it whole, with loads wider than the stores that had just written it
        // (a store-forwarding stall per operation).
        match self.lqh.execute(&self.dict, req) {
            // Waits for a lock; it runs again, chain and all, when granted.
            None => {}
            Some(LqhKeyConfRef::Conf { fired, .. }) if forward.is_some() => {
                let Some(mut next) = forward else { return };
                let program = next.program.take();
                if let Some(program) = program.filter(|_| next.op_type == OperationType::Update) {
                    // The backups set the values the program computed here, as a plain
                    // update (NDB's primary likewise sends its backups the after values).
                    match self.lqh.resolved_attrs(&next, &program) {
                        Some(attrs) => next.attrs = attrs,
                        None => {
                            // Its row is locked here, so never; were it gone, the backups
                            // must not go on without the values: the transaction aborts.
                            let answer = LqhKeyConfRef::Ref {
                                trans: next.trans,
                                op_index: next.op_index,
                                error: NdbError::with_detail(
                                    1204,
                                    "an interpreted update's row vanished at its primary",
                                ),
                                role: next.role,
                                backup: true,
                            };
                            return self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
                        }
                    }
                }
                let (to, run) = next.chain.remove(0);
                next.backup = true;
                if next.chain.is_empty() && role_is_local && fired.is_empty() {
                    // This node's TC coordinates: when the transaction's fate now hangs
                    // only on this write's last replica, that replica commits at once,
                    // saving the commit round trip.
                    let replicas: NodeSet = [self.me, to]
                        .into_iter()
                        .chain(next.chain.iter().map(|&(node, _)| node))
                        .collect();
                    next.commit_at_last =
                        !self.gcp.prepared && self.tc.start_early_commit(trans, &replicas, to);
                    if next.commit_at_last {
                        let gci = self.gcp.commit_started();
                        self.tc.set_gci(trans, gci);
                    }
                }
                self.send_lqh_key_req(to, run, *next, out);
            }
            Some(LqhKeyConfRef::Conf {
                trans,
                op_index,
                row,
                role,
                fired,
                ..
            }) if commit_here => {
                let tc_node = match role {
                    OpRole::Remote { tc_node, .. } => tc_node,
                    _ => self.me,
                };
                self.commit_here(trans, tc_node);
                self.jobs
                    .push_back(Signal::LqhKeyConfRef(Box::new(LqhKeyConfRef::Conf {
                        trans,
                        op_index,
                        row,
                        role,
                        fired,
                        committed: true,
                    })));
            }
            Some(LqhKeyConfRef::Conf {
                trans,
                op_index,
                row: Some(row),
                role: OpRole::Api,
                fired,
                committed: false,
            }) if fired.is_empty() => {
                // NDB's TRANSID_AI: a read's row goes from LQH straight to the API, while it
                // is still in the cache; TC counts it in the same step (see
                // `exec_transid_ai`). Safe because the `live` check above ran in this same
                // call: the transaction is Active.
                self.exec_transid_ai(trans, op_index, row, out, now);
            }
            Some(answer) => self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer))),
        }
    }

    /// A node being copied to by node restart that holds a replica of the write's partition
    /// here, and that its chain (the replicas after this one) leaves out.
    fn chain_misses_copied_to(&self, req: &LqhKeyReq) -> Option<NodeId> {
        let replicas = self.dih.replicas(req.fragment);
        self.qmgr.copying.iter().find(|&node| {
            node != self.me
                && replicas.contains(&node)
                && !req.chain.iter().any(|&(n, _)| n == node)
        })
    }

    pub(crate) fn exec_lqhkeyreq(&mut self, wire: lqh::LqhKeyReq) -> Result<(), ProtocolViolation> {
        let tc_node = NodeId(wire.tc_node);
        let chain: Vec<(NodeId, u64)> = (wire.chain.iter())
            .map(|&(node, run)| (NodeId(node), run))
            .collect();
        if let Some(bad) = std::iter::once(tc_node)
            .chain(chain.iter().map(|&(node, _)| node))
            .find(|&n| !self.qmgr.is_data_node(n))
        {
            return Err(ProtocolViolation(format!(
                "LQHKEYREQ names node {bad}, which is not a data node"
            )));
        }
        // A transaction id is an API node id over a request id; anything wider would collide
        // with the row lock's "no holder" value.
        if !wire.trans.is_well_formed() {
            return Err(ProtocolViolation(format!(
                "LQHKEYREQ names transaction {:#x}, which no API node can have",
                wire.trans
            )));
        }
        // NDB's OPERATIONS counts an LQHKEYREQ as it arrives (not again when a lock wait ends).
        self.lqh.operations_total += 1;
        if wire.run != lqh::RUN_UNKNOWN && wire.run != self.node_restart_run() {
            // For this node's earlier run: its TC chose the replicas before it handled that
            // run's failure, and the transaction aborts (the run was among its participants).
            // Taken, its lock here would be ended by nobody: the operation may have waited
            // for a lock at the replica before this one, or on a slow link, while this node
            // failed and came back (seed 0x7d0235a).
            tracing::debug!(trans = %wire.trans, "LQHKEYREQ for an earlier run of this node; dropped");
            return Ok(());
        }
        let early_gci = wire.gci;
        let req = LqhKeyReq {
            trans: wire.trans,
            op_index: wire.op_index,
            op_type: wire.op_type,
            lock_mode: wire.lock_mode,
            table_id: wire.table_id,
            fragment: wire.fragment,
            key_bytes: OpKey::new(&wire.key_bytes),
            key: wire.key,
            attrs: wire.attrs,
            role: OpRole::Remote {
                tc_node,
                token: wire.token,
            },
            chain,
            // Only another node's TC orders an early commit here (never this node's own).
            commit_at_last: tc_node != self.me
                && wire.flags & lqh::LQHKEY_COMMIT_AT_LAST_REPLICA != 0,
            backup: wire.flags & lqh::LQHKEY_BACKUP != 0,
            program: wire.program.map(Box::new),
        };
        if tc_node != self.me && !self.qmgr.is_up(tc_node) {
            // Its coordinator failed: nobody would commit, abort or hear of it.
            return Ok(());
        }
        if tc_node != self.me && !req.backup && !is_committed_read(req.op_type, req.lock_mode) {
            if let Some(primary) = self.primary_here(req.fragment).filter(|&p| p != self.me) {
                // The coordinator took this node for the partition's primary: it handled a
                // failure of data node `primary` that this node has not yet (its link to it
                // still delivers). Run here, the operation would take none of the locks that
                // node's transactions hold, and a transaction reading under a lock there
                // could have its update overwritten (sim seed 0x13006e8). Refused with NDB's
                // node failure error (the execute fails with it; nothing ran here), and a
                // retry finds the views agreeing. Right after a primary switch round, whose
                // commit reaches the nodes at different times, a restarted node may refuse so
                // a hop from a TC that switched before it did: the same temporary error, for
                // as long as that skew lasts.
                let answer = LqhKeyConfRef::Ref {
                    trans: req.trans,
                    op_index: req.op_index,
                    error: NdbError::with_detail(
                        4010,
                        format!(
                            "data node {primary} is the primary replica of partition {} on data \
                             node {}: a node failure (or a primary switch) is being handled",
                            req.fragment, self.me
                        ),
                    ),
                    role: req.role,
                    backup: false,
                };
                self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
                return Ok(());
            }
        }
        if tc_node != self.me && !is_committed_read(req.op_type, req.lock_mode) {
            if self.foreign.ended.contains_key(&req.trans) {
                // The transaction's abort overtook this operation: refused, so that it takes
                // no lock nobody would release. (Its TC no longer waits for the answer.)
                let answer = LqhKeyConfRef::Ref {
                    trans: req.trans,
                    op_index: req.op_index,
                    error: NdbError::with_detail(4010, "the transaction already ended here"),
                    role: req.role,
                    backup: req.backup,
                };
                self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
                return Ok(());
            }
            self.foreign
                .tc_of
                .entry(req.trans)
                .or_insert(ForeignTrans::new(tc_node));
            if req.commit_at_last {
                self.foreign.gci.insert(req.trans, early_gci);
            }
        }
        self.prefetch_if_alone(&req);
        self.jobs.push_back(Signal::LqhKeyReq(Box::new(req)));
        Ok(())
    }

    /// The primary replica of partition `fragment` as this node sees it: its first live
    /// replica in chain order (as TC's `dispatch` picks it).
    fn primary_here(&self, fragment: u32) -> Option<NodeId> {
        let replicas = self.dih.replicas(fragment);
        if self.qmgr.rejoined.is_empty() {
            replicas.iter().copied().find(|&n| self.qmgr.is_alive(n))
        } else {
            let ordered = self.qmgr.chain_order(replicas);
            ordered.iter().copied().find(|&n| self.qmgr.is_alive(n))
        }
    }

    /// Sends an operation to node `to`'s LQH. Its role stays with this node's TC (under a
    /// token) unless another node's TC already keeps it.
    pub(crate) fn send_lqh_key_req(
        &mut self,
        to: NodeId,
        run: u64,
        req: LqhKeyReq,
        out: &mut dyn Outbox,
    ) {
        let (tc_node, token) = match req.role {
            OpRole::Remote { tc_node, token } => (tc_node, token),
            _ => (self.me, self.tc.stash(req.trans, &req, to)),
        };
        let wire = lqh::LqhKeyReq {
            trans: req.trans,
            tc_node: tc_node.0,
            token,
            op_index: req.op_index,
            op_type: req.op_type,
            lock_mode: req.lock_mode,
            table_id: req.table_id,
            fragment: req.fragment,
            key_bytes: req.key_bytes.to_vec(),
            key: req.key,
            attrs: req.attrs,
            run,
            chain: (req.chain.iter())
                .map(|&(node, run)| (node.0, run))
                .collect(),
            flags: if req.commit_at_last {
                lqh::LQHKEY_COMMIT_AT_LAST_REPLICA
            } else {
                0
            } | if req.backup { lqh::LQHKEY_BACKUP } else { 0 },
            gci: if req.commit_at_last {
                self.tc.gci_of(req.trans).unwrap_or(0)
            } else {
                0
            },
            program: req.program.map(|p| *p),
        };
        // A node that failed is never sent to again, even if it reconnected.
        let sent = if self.qmgr.is_up(to) {
            out.send(
                to,
                data_node_header(lgsn::LQHKEYREQ, block::DBLQH, block::DBTC),
                &mut |b| wire.encode(b),
            )
        } else {
            Err(SendFailure::Gone)
        };
        if let Err(failure) = sent {
            let error = match failure {
                SendFailure::Gone => {
                    NdbError::with_detail(4010, format!("data node {to} is not connected"))
                }
                SendFailure::Overloaded => NdbError::with_detail(
                    1218,
                    format!("the send buffer to data node {to} is full"),
                ),
            };
            let answer = LqhKeyConfRef::Ref {
                trans: wire.trans,
                op_index: wire.op_index,
                error,
                role: OpRole::Remote { tc_node, token },
                backup: req.backup,
            };
            self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
        }
    }

    /// Starts the miss of `req`'s hash-index entry when `req` is about to be the only job
    /// queued, so that it overlaps the rest of the turn's work (SHM serial_pk p50 −3 %): a key
    /// read, a unique index's lookup, the base row it found, or a replica's operation. A run of
    /// queued operations is warmed in stages instead (`Lqh::warm`).
    pub(crate) fn prefetch_if_alone(&self, req: &LqhKeyReq) {
        if self.jobs.is_empty() {
            self.lqh
                .prefetch_key(req.table_id, req.fragment, &req.key_bytes);
        }
    }

    /// LQHKEYCONF or LQHKEYREF to another node's TC, for the operation it sent under `token`.
    pub(crate) fn send_lqhkey_answer(
        &mut self,
        tc_node: NodeId,
        token: u32,
        answer: LqhKeyConfRef,
        out: &mut dyn Outbox,
    ) {
        // Kept until it can be sent (a TC waits for it, and a lost one would hold its locks); a
        // TC that is gone hears nothing, and its transactions here are rolled back when its
        // link's loss is handled.
        match answer {
            LqhKeyConfRef::Conf {
                trans,
                op_index,
                row,
                fired,
                committed,
                ..
            } => {
                let conf = LqhKeyConf {
                    flags: if committed {
                        lqh::LQHKEYCONF_COMMITTED
                    } else {
                        0
                    },
                    trans,
                    token,
                    op_index,
                    row: row.map(|r| r.unpack()),
                    fired: fired
                        .into_iter()
                        .map(|c| FiredChange {
                            hidden_table_id: c.hidden_table_id,
                            op_type: c.op_type,
                            key: c.key,
                            pk: c.pk.into_vec(),
                        })
                        .collect(),
                };
                self.unsent.send(
                    out,
                    tc_node,
                    data_node_header(lgsn::LQHKEYCONF, block::DBTC, block::DBLQH),
                    &mut |b| conf.encode(b),
                )
            }
            LqhKeyConfRef::Ref {
                trans,
                op_index,
                error,
                backup,
                ..
            } => {
                let refusal = LqhKeyRef {
                    flags: if backup { lqh::LQHKEYREF_BACKUP } else { 0 },
                    trans,
                    token,
                    op_index,
                    code: error.code,
                    detail: error.message,
                };
                self.unsent.send(
                    out,
                    tc_node,
                    data_node_header(lgsn::LQHKEYREF, block::DBTC, block::DBLQH),
                    &mut |b| refusal.encode(b),
                )
            }
        }
    }

    /// Work whose locks were granted runs again, in the order it was granted. (LQH grants only
    /// work of live transactions; the guards in `run_jobs` and `resume_scan` drop work whose
    /// transaction ended before its turn.)
    pub(crate) fn resume(&mut self, granted: Vec<LqhWork>) {
        self.jobs.extend(granted.into_iter().map(|work| match work {
            LqhWork::Key(req) => Signal::LqhKeyReq(req),
            LqhWork::Scan { scan, fragment } => Signal::NextScanConf { scan, fragment },
        }));
    }
}
