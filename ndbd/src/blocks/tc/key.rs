//! TC's key operations: TCKEYREQ (or TCINDXREQ, through a unique index) checks an operation
//! against the dictionary, asks DIH which live replicas hold its partition (NDB's
//! DIGETNODESREQ) and sends LQHKEYREQ to the replica that runs it; LQHKEYCONF and LQHKEYREF come
//! back (from this node's LQH through the job queue, or from another node's over the link) and
//! TC answers the API; TC_EXECUTE_REQ ends a batch, and TC ends the execute when every
//! operation is answered.
//!
//! A read's row may reach the API without passing here (NDB's TRANSID_AI, see
//! `lqh/key.rs`).

use std::time::Instant;

use rndb_config::NodeId;
use rndb_protocol::lqh::{self, LqhKeyConf, LqhKeyRef};
use rndb_protocol::signals::{
    block, gsn, TcExecuteConf, TcExecuteRef, TcExecuteReq, TcKeyRef, TcKeyReqView, TcKeyRow,
    REPLICA_PRIMARY,
};
use rndb_protocol::{ExecType, LockMode, NdbError, OperationType};

use super::{ApiAnswer, Holds, TcAction};
use crate::blocks::acc::{Row, TransId};
use crate::blocks::lqh::key::is_committed_read;
use crate::blocks::lqh::{IndexChange, LqhKeyConfRef, LqhKeyReq, OpRole};
use crate::blocks::tc::index;
use crate::blocks::{api_header, dih, tc, tup, Kernel, Outbox, SendFailure, Signal};

impl Kernel {
    /// An execute ends a batch of operations (a TC_EXECUTE_REQ, or the last operation's
    /// FLAG_EXECUTE).
    pub(crate) fn exec_tc_execute_req(
        &mut self,
        from: NodeId,
        request_id: u32,
        execute: TcExecuteReq,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let trans = tc::trans_id(from, request_id);
        if let Some(answer) = self.tc.on_execute_req(trans, execute, now) {
            self.answer_api(trans, answer, out);
        }
        self.complete(trans, out, now);
    }

    pub(crate) fn exec_tckeyreq(
        &mut self,
        from: NodeId,
        request_id: u32,
        req: TcKeyReqView<'_>,
        via_index: bool,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let trans = tc::trans_id(from, request_id);
        let mut req_replica = req.replica();
        let dml = req.op_type() != OperationType::Read;
        let committed_read = !dml && req.lock_mode() == LockMode::CommittedRead;
        let accepted =
            (self.tc).on_key_req(trans, req.flags(), req.op_index(), dml, committed_read, now);
        if let Some(Ok(_)) = accepted {
            self.tc
                .counters
                .count_key_operation(req.op_type(), req.lock_mode());
        }
        match accepted {
            None => {}
            Some(Err(error)) => self.answer_api(
                trans,
                ApiAnswer::KeyRef {
                    op_index: req.op_index(),
                    code: error.code,
                },
                out,
            ),
            Some(Ok(_)) => match if via_index {
                req_replica = REPLICA_PRIMARY;
                (self.tc.take_index_operation(trans, req.op_index()))
                    .map_err(|e| (req.op_index(), e))
                    .and_then(|()| self.build_unique_lookup(trans, req.to_owned()))
                    .map(Box::new)
            } else {
                self.build_lqh_req(trans, req)
            } {
                Ok(lqh_req) => self.dispatch(lqh_req, req_replica, out),
                Err((op_index, error)) => {
                    self.answer_api(
                        trans,
                        ApiAnswer::KeyRef {
                            op_index,
                            code: error.code,
                        },
                        out,
                    );
                    self.tc.on_refused_before_dispatch(trans, op_index, error);
                }
            },
        }
    }

    /// Checks the operation against the dictionary, encodes its key and picks its fragment.
    fn build_lqh_req(
        &mut self,
        trans: TransId,
        req: TcKeyReqView<'_>,
    ) -> Result<Box<LqhKeyReq>, (u32, NdbError)> {
        let table = self
            .dict
            .for_operation(req.table_id(), req.table_version())
            .map_err(|e| (req.op_index(), e))?;
        // Checked and taken as it came: the key values are built only for an operation that
        // stores them in a row (a read needs the canonical key alone).
        let key_bytes =
            rndb_protocol::schema::canonical_key(&table.info.def, &table.key_columns, req.key)
                .map_err(|e| (req.op_index(), e))?;
        let hash = dih::key_hash(key_bytes);
        let partition = self.dih.partition_of(hash);
        // Filled in field by field over a blank written straight into the new box: a request
        // built on the stack was copied into its box by a `memcpy` call (`Box::new` evaluates
        // its argument before it allocates) and then read back with loads of other widths
        // than the stores that had just written it (a store-forwarding stall in `dispatch`).
        let mut lqh_req = Box::write(Box::new_uninit(), LqhKeyReq::blank());
        lqh_req.trans = trans;
        lqh_req.op_index = req.op_index();
        lqh_req.op_type = req.op_type();
        lqh_req.lock_mode = req.lock_mode();
        lqh_req.table_id = req.table_id();
        lqh_req.fragment = table.fragment_of(partition);
        lqh_req.key_bytes.set(key_bytes, hash);
        if req.op_type() != OperationType::Read {
            lqh_req.key = req.key_values();
        }
        // A read names no attributes: the blank's empty list stands, without a `Vec` returned
        // through memory.
        if req.has_attrs() {
            lqh_req.attrs = req.attr_values();
        }
        if let Some(program) = req.program() {
            (program.check_operation(req.op_type()))
                .and_then(|()| program.check(&table.info.def))
                .and_then(|()| program.check_attrs(&table.info.def, &lqh_req.attrs))
                .map_err(|e| (req.op_index(), e))?;
            lqh_req.program = Some(Box::new(program));
        }
        Ok(lqh_req)
    }

    pub(crate) fn exec_lqhkey_answer(
        &mut self,
        answer: LqhKeyConfRef,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        // The answer of an operation another node's TC (or this node's, through another
        // node's replica) sent: to that TC, or, here, back to the role TC kept for it.
        let answer = match self.route_answer(answer, out) {
            Some(answer) => answer,
            None => return,
        };
        let (trans, op_index, result, role, fired) = match answer {
            LqhKeyConfRef::Conf {
                trans,
                op_index,
                row,
                role,
                fired,
                ..
            } => (trans, op_index, Ok(row), role, fired),
            LqhKeyConfRef::Ref {
                trans,
                op_index,
                error,
                role,
                backup,
            } => {
                // A hidden table being dropped (709) may differ between replicas: it goes.
                let moot = matches!(role, OpRole::Trigger) && error.code == 709;
                if backup && !moot {
                    // The primary holds what a backup refused: the replicas would differ.
                    self.tc.force_abort(trans);
                }
                (trans, op_index, Err(error), role, Vec::new())
            }
        };
        let result = match role {
            // `route_answer` gave every answer for this TC its role back.
            OpRole::Api | OpRole::Remote { .. } => result,
            OpRole::UniqueLookup(lookup) => match result {
                // The index row names the base row: the second hop goes out, and the
                // operation stays outstanding until it answers.
                Ok(row) => match self.unique_second_hop(trans, op_index, *lookup, row) {
                    Ok(req) => return self.dispatch(Box::new(req), REPLICA_PRIMARY, out),
                    Err(error) => Err(error),
                },
                // The index's hidden table is gone there: the index is being dropped.
                Err(error) if error.code == 709 => Err(NdbError::with_detail(
                    4243,
                    "the unique index is being dropped",
                )),
                Err(error) => Err(error),
            },
            OpRole::Trigger => match result {
                // The index's hidden table is gone there: the index is being dropped (a DROP
                // INDEX, or the undo of a create whose build failed), which goes on to every
                // node (a new master rolls a drop forward), so its maintenance is moot, not
                // the write's failure (sim seed 0x6000018f: a transfer refused 709 while the
                // nodes dropped the index one after the other). No write maintains an index
                // whose hidden table some node has yet to make: the build refuses writes
                // until every node has it.
                Err(error) if error.code == 709 => {
                    self.tc.release_fired_trigger(trans);
                    self.tc.on_internal_done(trans);
                    return self.complete(trans, out, now);
                }
                Ok(_) => {
                    self.tc.release_fired_trigger(trans);
                    self.tc.on_internal_done(trans);
                    return self.complete(trans, out, now);
                }
                Err(error) => {
                    self.tc.release_fired_trigger(trans);
                    self.tc.force_abort(trans);
                    Err(index::trigger_error(error))
                }
            },
        };
        for change in fired {
            self.fire(trans, op_index, change, out);
        }
        match self.tc.on_lqh_answer(trans, op_index, result) {
            Some(ApiAnswer::Row { op_index, row }) => {
                return self.forward_row(trans, op_index, row, out, now)
            }
            Some(api_answer) => self.answer_api(trans, api_answer, out),
            None => {}
        }
        self.complete(trans, out, now);
    }

    /// A read's row for the API, its operation already counted as answered. When it is the
    /// last answer of an execute in which nothing failed, it confirms the execute too, in one
    /// TCKEY_ROW_CONF instead of the row and a TC_EXECUTE_CONF: a NoCommit execute at once
    /// (only once that frame is sent is the execute concluded; a row that does not fit goes
    /// the usual way, and its lost answer fails the execute with 1218); a Commit execute once
    /// the commit is over, TC keeping the row until then (`finish_transaction`).
    fn forward_row(
        &mut self,
        trans: TransId,
        op_index: u32,
        row: Row,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        match self.tc.row_ends_execute(trans) {
            Some(ExecType::NoCommit) if self.send_row_conf(trans, op_index, &row, out) => {
                let concluded = self.tc.try_complete(trans, now);
                debug_assert!(
                    matches!(concluded, Some(Ok(ApiAnswer::ExecuteConf { gci: None }))),
                    "the row confirmed the execute: {concluded:?}"
                );
                return;
            }
            Some(ExecType::Commit) => self.tc.keep_last_row(trans, op_index, row),
            _ => self.answer_api(trans, ApiAnswer::Row { op_index, row }, out),
        }
        self.complete(trans, out, now);
    }

    /// Ends the transaction's execute if it is complete.
    pub(crate) fn complete(&mut self, trans: TransId, out: &mut dyn Outbox, now: Instant) {
        match self.tc.try_complete(trans, now) {
            None => {}
            Some(Ok(answer)) => self.answer_api(trans, answer, out),
            Some(Err(TcAction::Commit(t)) | Err(TcAction::Abort(t))) => {
                self.jobs.push_back(Signal::TcContinueB(t))
            }
            Some(Err(TcAction::Dispatch)) => {}
        }
    }

    /// Sends a read's row as the confirmation of its NoCommit execute too (TCKEY_ROW_CONF).
    /// False when it could not be sent (the caller then answers the usual way).
    pub(crate) fn send_row_conf(
        &mut self,
        trans: TransId,
        op_index: u32,
        row: &tup::Row,
        out: &mut dyn Outbox,
    ) -> bool {
        let (api, request_id) = tc::trans_parts(trans);
        let header = api_header(gsn::TCKEY_ROW_CONF, request_id);
        out.send(api, header, &mut |b| {
            TcKeyRow::encode_encoded_conf(b, op_index, row.encoded(), None)
        })
        .is_ok()
    }

    pub(crate) fn answer_api(&mut self, trans: TransId, answer: ApiAnswer, out: &mut dyn Outbox) {
        let (api, request_id) = tc::trans_parts(trans);
        let header = |signal| api_header(signal, request_id);
        let (sent, op_index) = match &answer {
            ApiAnswer::Row { op_index, row } => (
                out.send(api, header(gsn::TCKEY_ROW), &mut |b| {
                    TcKeyRow::encode_encoded(b, *op_index, row.encoded())
                }),
                *op_index,
            ),
            ApiAnswer::KeyRef { op_index, code } => (
                out.send(api, header(gsn::TCKEYREF), &mut |b| {
                    TcKeyRef {
                        op_index: *op_index,
                        code: *code,
                    }
                    .encode(b)
                }),
                *op_index,
            ),
            // The execute's answer ends the API's request: it is kept until it can be sent.
            ApiAnswer::ExecuteConf { gci } => {
                let conf = TcExecuteConf { gci: *gci };
                return self
                    .unsent
                    .send(out, api, header(gsn::TC_EXECUTE_CONF), &mut |b| {
                        conf.encode(b)
                    });
            }
            // A commit's row and confirmation: the commit is over, so the row must not be lost
            // any more than the confirmation.
            ApiAnswer::RowConf { op_index, row, gci } => {
                return self
                    .unsent
                    .send(out, api, header(gsn::TCKEY_ROW_CONF), &mut |b| {
                        TcKeyRow::encode_encoded_conf(b, *op_index, row.encoded(), *gci)
                    });
            }
            ApiAnswer::ExecuteRef { error, op_index } => {
                return self
                    .unsent
                    .send(out, api, header(gsn::TC_EXECUTE_REF), &mut |b| {
                        TcExecuteRef {
                            code: error.code,
                            op_index: *op_index,
                            detail: error.message.clone(),
                        }
                        .encode(b)
                    })
            }
        };
        if let Err(SendFailure::Overloaded) = sent {
            // The row or error does not fit the API's send buffer: the execute fails with
            // 1218 naming the operation, whatever its abort option, and the transaction
            // aborts (a retry with a smaller batch may succeed).
            self.tc.on_send_failure(
                trans,
                op_index,
                NdbError::with_detail(
                    1218,
                    format!("answer to node {api} does not fit its send buffer"),
                ),
            );
        }
    }

    /// TC: sends an operation to the replica that runs it (`replica` chooses one for a
    /// CommittedRead; everything else runs on the primary) and records the nodes that will
    /// hold its rows.
    pub(crate) fn dispatch(&mut self, mut req: Box<LqhKeyReq>, replica: u8, out: &mut dyn Outbox) {
        // The partition's replicas that are alive, primary first: when a primary has failed,
        // its first live backup takes over (it holds every committed row, as replication is
        // synchronous). Walked in place rather than collected into a `Replicas`: the copy was
        // written two bytes at a time and read back sixteen, a store-forwarding stall on every
        // key operation.
        let qmgr = &self.qmgr;
        let replicas = self.dih.replicas(req.fragment);
        // Nodes that rejoined by node restart come last (only then is the order rebuilt).
        let reordered;
        let ordered: &[NodeId] = if qmgr.rejoined.is_empty() {
            replicas
        } else {
            reordered = qmgr.chain_order(replicas);
            &reordered
        };
        let live = ordered.iter().copied().filter(|&node| qmgr.is_alive(node));
        // A node still being copied to (a node restart) takes writes but serves no read.
        let readable = live
            .clone()
            .filter(|&node| qmgr.copying.is_empty() || !qmgr.copying.contains(node));
        let Some(primary) = live.clone().next() else {
            let error = NdbError::with_detail(
                4010,
                format!("every replica of partition {} has failed", req.fragment),
            );
            let answer = LqhKeyConfRef::Ref {
                trans: req.trans,
                op_index: req.op_index,
                error,
                role: req.role,
                backup: false,
            };
            return self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
        };
        if primary == self.me && matches!(req.role, OpRole::Api) {
            // NDB's LOCAL_READS and LOCAL_WRITES: this TC is on the row's primary replica.
            match req.op_type {
                OperationType::Read => self.tc.counters.local_reads += 1,
                _ => self.tc.counters.local_writes += 1,
            }
        }
        let committed_read = is_committed_read(req.op_type, req.lock_mode);
        let read_backup = committed_read
            && replica == REPLICA_PRIMARY
            && readable.clone().any(|node| node == self.me)
            && self
                .dict
                .get(req.table_id)
                .is_some_and(|t| t.info.def.read_backup);
        let target = if read_backup {
            // READ_BACKUP: the nearest replica is this node's.
            self.me
        } else if committed_read {
            readable
                .clone()
                .nth(usize::from(replica))
                .unwrap_or(primary)
        } else {
            primary
        };
        if req.op_type != OperationType::Read {
            for (i, node) in live.clone().enumerate() {
                let holds = if i == 0 {
                    Holds::Primary
                } else {
                    Holds::Backup
                };
                self.tc.add_participant(req.trans, node, holds);
            }
            req.chain = live.skip(1).map(|node| (node, self.run_of(node))).collect();
        } else if !committed_read {
            self.tc.add_participant(req.trans, primary, Holds::Lock);
        }
        if target == self.me {
            self.prefetch_if_alone(&req);
            self.lqh.operations_total += 1;
            self.jobs.push_back(Signal::LqhKeyReq(req));
        } else {
            let run = self.run_of(target);
            self.send_lqh_key_req(target, run, *req, out);
        }
    }

    /// An answer whose TC is elsewhere goes there; one whose role this node's TC keeps gets
    /// it back. Returns the answer for this node's TC, if any.
    pub(crate) fn route_answer(
        &mut self,
        answer: LqhKeyConfRef,
        out: &mut dyn Outbox,
    ) -> Option<LqhKeyConfRef> {
        let (trans, role) = match &answer {
            LqhKeyConfRef::Conf { trans, role, .. } | LqhKeyConfRef::Ref { trans, role, .. } => {
                (*trans, role)
            }
        };
        let OpRole::Remote { tc_node, token } = *role else {
            return Some(answer);
        };
        if tc_node == self.me {
            // Stale when the transaction ended meanwhile.
            let role = self.tc.remote_ops.remove(&(trans, token))?.role;
            return Some(match answer {
                LqhKeyConfRef::Conf {
                    trans,
                    op_index,
                    row,
                    fired,
                    committed,
                    ..
                } => LqhKeyConfRef::Conf {
                    trans,
                    op_index,
                    row,
                    role,
                    fired,
                    committed,
                },
                LqhKeyConfRef::Ref {
                    trans,
                    op_index,
                    error,
                    backup,
                    ..
                } => LqhKeyConfRef::Ref {
                    trans,
                    op_index,
                    error,
                    role,
                    backup,
                },
            });
        }
        self.send_lqhkey_answer(tc_node, token, answer, out);
        None
    }

    /// LQHKEYCONF from another node's LQH: an operation this TC sent there succeeded.
    pub(crate) fn exec_lqhkeyconf(&mut self, from: NodeId, conf: LqhKeyConf, out: &mut dyn Outbox) {
        if self.tc.answer_unawaited(conf.trans, from) {
            // The transaction aborts or ended without this answer, and its abort does not go
            // to `from`: what the operation holds there is released. A primary that had
            // included a restarting node in its chain meanwhile forwarded the write to it
            // (seed 0xcaa93202: node 1 held the row locked for good).
            self.send_trans_signal(from, lqh::gsn::LQH_ABORTREQ, block::DBLQH, conf.trans, out);
            return;
        }
        // The last replica committed on its own: no commit round goes there. Believed
        // only for an operation this TC sent to that very node with the order to.
        let committed = conf.flags & lqh::LQHKEYCONF_COMMITTED != 0
            && self
                .tc
                .remote_ops
                .get(&(conf.trans, conf.token))
                .is_some_and(|op| op.to == from && op.commit_at_last);
        if committed {
            self.tc.participant_committed(conf.trans, from);
        }
        let answer = LqhKeyConfRef::Conf {
            committed,
            trans: conf.trans,
            op_index: conf.op_index,
            row: conf.row.map(|values| Row::pack(&values)),
            role: OpRole::Remote {
                tc_node: self.me,
                token: conf.token,
            },
            fired: conf
                .fired
                .into_iter()
                .map(|c| IndexChange {
                    hidden_table_id: c.hidden_table_id,
                    op_type: c.op_type,
                    key: c.key,
                    pk: c.pk.into_boxed_slice(),
                })
                .collect(),
        };
        self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
    }

    /// LQHKEYREF from another node's LQH: an operation this TC sent there failed.
    pub(crate) fn exec_lqhkeyref(&mut self, r: LqhKeyRef) {
        let answer = LqhKeyConfRef::Ref {
            trans: r.trans,
            op_index: r.op_index,
            error: NdbError::from_wire(r.code, &r.detail),
            role: OpRole::Remote {
                tc_node: self.me,
                token: r.token,
            },
            backup: r.flags & lqh::LQHKEYREF_BACKUP != 0,
        };
        self.jobs.push_back(Signal::LqhKeyConfRef(Box::new(answer)));
    }

    /// TRANSID_AI, run at once (NDB's EXECUTE_DIRECT) by LQH for a read of this node's own
    /// transaction: the row goes straight to the API while it is still in the cache, and TC
    /// counts the operation as answered (all it would do with the answer). LQH calls it only
    /// right after checking that the transaction is Active, so TC would have sent the row too;
    /// the execute completes only when every operation is counted, so another operation's
    /// answer still queued holds it back, and its CONF or REF follows the row on the same link.
    ///
    /// When this row is its execute's last answer, it confirms the execute too (see
    /// `forward_row`).
    pub(crate) fn exec_transid_ai(
        &mut self,
        trans: TransId,
        op_index: u32,
        row: Row,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        self.tc.count_read_answer(trans, op_index);
        self.forward_row(trans, op_index, row, out, now);
    }
}
