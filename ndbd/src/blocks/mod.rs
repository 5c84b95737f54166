//! The kernel: NDB's blocks on one data node, and the job queue through which they signal each
//! other.
//!
//! Frames from API nodes enter through [`Kernel::on_frame`]; internal signals (TC → LQH and back)
//! go through the job queue, run by [`Kernel::run_jobs`]. The same handler runs whether a signal
//! came from this node's queue or, later, from another data node's link: only routing differs.
//!
//! `index.rs` holds the kernel's unique-index paths (dictionary requests, the two hops of an
//! operation through a unique index, index maintenance fired by writes); `scan.rs` holds TC's
//! scan records and batches.

pub mod acc;
mod answers;
pub mod dict;
pub mod dih;
mod dist;
mod index;
pub mod lqh;
pub mod node_set;
pub mod tc;
pub mod tup;
pub mod tux;

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rndb_config::{ClusterConfig, DataNodeConfig, NodeId};
use rndb_protocol::lqh::gsn as dgsn;
use rndb_protocol::scan::{ScanNextReq, ScanTabReq};
use rndb_protocol::signals::{
    self, block, gsn, IndexName, Refusal, TableInfo, TcExecuteRef, TcExecuteReq, TcKeyRef,
    TcKeyReqView, TcKeyRow, REPLICA_PRIMARY,
};
use rndb_protocol::{DecodeError, NdbError, OperationType};
use rndb_transporter::FrameHeader;

use acc::TransId;
use lqh::{LqhAnswer, LqhKeyReq, LqhWork, OpRole, ScanKey};
use tc::{ApiAnswer, TcAction};

/// How many jobs run between two [`Outbox::flush_early`] calls.
const FLUSH_EARLY_EVERY_JOBS: usize = 4;

/// Why a frame could not be sent.
#[derive(Debug)]
pub enum SendFailure {
    /// The link's send buffer is full even after a flush (NDB error 1218).
    Overloaded,
    /// The link is gone or failed; it is being closed.
    Gone,
}

/// Where blocks put frames for other nodes.
pub trait Outbox {
    /// Encodes one frame for node `to` with `encode` filling the payload.
    fn send(
        &mut self,
        to: NodeId,
        header: FrameHeader,
        encode: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<(), SendFailure>;

    /// Closes the link to node `to` (a peer that does not take its answers); the kernel hears
    /// of it through [`Kernel::on_disconnect`].
    fn close(&mut self, to: NodeId, reason: String) {
        let _ = (to, reason);
    }

    /// Pushes out the links whose unsent answers have grown large, in the middle of a long run
    /// of jobs, so that the peer starts on them while this node works on the rest.
    fn flush_early(&mut self) {}
}

/// Signals between blocks of this node, named after NDB's (LQHKEYREQ, LQHKEYCONF, ...); more
/// blocks' signals join them as the blocks arrive.
///
/// Sixteen bytes (the large ones boxed), so that a signal is built and queued in two
/// registers: a larger enum was built on the stack and copied into the queue by loads wider
/// than the stores that had just written it (a store-forwarding stall per key operation).
#[derive(Debug)]
#[allow(clippy::enum_variant_names)]
enum Signal {
    LqhKeyReq(Box<LqhKeyReq>),
    LqhAnswer(Box<LqhAnswer>),
    /// TC: start the next round of a transaction's commit or abort (or end it, when the last
    /// round is done).
    TcRound(TransId),
    /// LQH: commit what the transaction holds on this node, then confirm to its TC.
    LqhCommit {
        trans: TransId,
        tc_node: NodeId,
    },
    /// LQH: undo what the transaction holds on this node, then confirm to its TC.
    LqhAbort {
        trans: TransId,
        tc_node: NodeId,
    },
    /// TC: a participant confirmed the current round.
    RoundDone {
        trans: TransId,
        node: NodeId,
    },
    /// A row lock a scan waited for was granted.
    ScanResume {
        scan: ScanKey,
        fragment: u32,
    },
}

const _: () = assert!(std::mem::size_of::<Signal>() <= 16);

/// The blocks of one data node.
#[derive(Debug)]
pub struct Kernel {
    me: NodeId,
    dict: dict::Dict,
    dih: dih::Dih,
    tc: tc::Tc,
    lqh: lqh::Lqh,
    scans: tc::scan::Scans,
    /// Membership, other nodes' transactions here, and operations out on other nodes.
    dist: dist::Dist,
    /// Schema changes this node coordinates as DICT master.
    schema: dict::schema::SchemaOps,
    /// Unique indexes being built over existing rows.
    builds: dict::index_build::Builds,
    jobs: VecDeque<Signal>,
    /// Jobs at the front of `jobs` whose rows `Lqh::warm` has brought into the cache. Counts
    /// right because jobs are only ever taken from the front and added at the back.
    warmed: usize,
    /// Final answers waiting for a send buffer.
    unsent: answers::Unsent,
    /// Reused for encoding keys.
    key_scratch: Vec<u8>,
}

/// A frame from a peer that could not be understood: the link must be closed.
#[derive(Debug)]
pub struct ProtocolViolation(pub String);

impl From<DecodeError> for ProtocolViolation {
    fn from(e: DecodeError) -> Self {
        ProtocolViolation(e.to_string())
    }
}

impl Kernel {
    pub fn new(config: &ClusterConfig, node: &DataNodeConfig) -> Kernel {
        // NDB's "unlimited" TransactionInactiveTimeout is 4294967039; anything this large means
        // no timeout.
        let inactive = node.transaction_inactive_timeout_ms;
        let inactive_timeout =
            (inactive < 1 << 31).then(|| Duration::from_millis(u64::from(inactive)));
        Kernel {
            me: node.node_id,
            dict: dict::Dict::new(
                node.max_no_of_tables,
                node.max_no_of_ordered_indexes,
                node.max_no_of_unique_hash_indexes,
            ),
            dih: dih::Dih::new(config),
            dist: dist::Dist::new(config, node.node_id),
            schema: dict::schema::SchemaOps::default(),
            builds: dict::index_build::Builds::default(),
            tc: tc::Tc::new(
                node.node_id,
                node.max_no_of_concurrent_transactions,
                node.max_no_of_concurrent_operations,
                Duration::from_millis(u64::from(node.transaction_deadlock_detection_timeout_ms)),
                inactive_timeout,
            ),
            lqh: lqh::Lqh::new(node.data_memory_bytes),
            scans: tc::scan::Scans::new(node.max_no_of_concurrent_scans),
            jobs: VecDeque::new(),
            warmed: 0,
            unsent: answers::Unsent::new(
                node.max_no_of_concurrent_transactions as usize
                    + node.max_no_of_concurrent_scans as usize
                    + answers::OTHER_REQUESTS_MAX,
            )
            .with_data_nodes(
                config.data_nodes.iter().map(|n| n.node_id),
                node.max_no_of_concurrent_operations as usize
                    + 2 * node.max_no_of_concurrent_transactions as usize
                    + answers::OTHER_REQUESTS_MAX,
            ),
            key_scratch: Vec::with_capacity(256),
        }
    }

    /// Handles one frame from node `from`. An error means the peer broke the protocol.
    pub fn on_frame(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), ProtocolViolation> {
        if !self.dist.started() && self.refuse_before_start(from, header, payload, out) {
            return Ok(());
        }
        match header.signal {
            gsn::TCKEYREQ | gsn::TCINDXREQ => {
                let req = TcKeyReqView::decode(payload)?;
                let execute = req.execute();
                let via_index = header.signal == gsn::TCINDXREQ;
                self.on_key_req(from, header.request_id, req, via_index, out, now);
                if let Some(execute) = execute {
                    self.on_execute_req(from, header.request_id, execute, out, now);
                }
            }
            gsn::SCAN_TABREQ => {
                self.on_scan_req(from, header, ScanTabReq::decode(payload)?, out, now)
            }
            gsn::SCAN_NEXTREQ => {
                self.on_scan_next(from, header, ScanNextReq::decode(payload)?, out, now)
            }
            gsn::CREATE_INDEX_REQ
            | gsn::DROP_INDEX_REQ
            | gsn::CREATE_TABLE_REQ
            | gsn::DROP_TABLE_REQ => self.on_schema_req(from, header, payload, out, now)?,
            signal if dict::schema::is_schema_answer(signal) && self.dist.is_data_node(from) => {
                self.on_schema_answer(from, header, payload, out, now)?
            }
            dgsn::LQHKEYREQ..=dgsn::LQH_ABORTCONF | dgsn::TC_FAIL_QUERY | dgsn::TC_FAIL_ANSWER => {
                self.on_data_node_frame(from, header, payload, out)?
            }
            dgsn::API_REGREQ => self.api_reg(from, header, out),
            dgsn::INDEX_BUILD_ROWS | dgsn::INDEX_BUILD_DONE => {
                self.on_index_build_frame(from, header, payload, out, now)?
            }
            gsn::GET_INDEX_REQ => {
                let name = IndexName::decode(payload)?;
                match self.dict.index_by_name(&name.table, &name.index) {
                    Ok(index) => reply(
                        &mut self.unsent,
                        out,
                        from,
                        header,
                        gsn::GET_INDEX_CONF,
                        &mut |b| index.info.encode(b),
                    ),
                    Err(e) => refuse(&mut self.unsent, out, from, header, gsn::GET_INDEX_REF, &e),
                }
            }
            gsn::TC_EXECUTE_REQ => {
                let execute = TcExecuteReq::decode(payload)?;
                self.on_execute_req(from, header.request_id, execute, out, now);
            }
            gsn::PING_REQ => reply(
                &mut self.unsent,
                out,
                from,
                header,
                gsn::PING_CONF,
                &mut |_| {},
            ),
            gsn::GET_TABINFO_REQ => {
                let name = signals::decode_name(payload)?;
                match self.dict.by_name(&name) {
                    Ok(table) => reply(
                        &mut self.unsent,
                        out,
                        from,
                        header,
                        gsn::GET_TABINFO_CONF,
                        &mut |b| table.info.encode(b),
                    ),
                    Err(e) => refuse(
                        &mut self.unsent,
                        out,
                        from,
                        header,
                        gsn::GET_TABINFO_REF,
                        &e,
                    ),
                }
            }
            other => return Err(ProtocolViolation(format!("unknown signal {other}"))),
        }
        Ok(())
    }

    /// Runs queued signals until none is left.
    pub fn run_jobs(&mut self, out: &mut dyn Outbox, now: Instant) {
        // Final answers that found a full send buffer go first.
        self.unsent.retry(out);
        let mut ran = 0usize;
        loop {
            // One queued operation alone gains nothing from warming (it would look its row up
            // twice), so a run of them is warmed only when another job follows.
            if self.warmed == 0
                && self.jobs.len() > 1
                && matches!(
                    self.jobs.front(),
                    Some(Signal::LqhKeyReq(_) | Signal::LqhCommit { .. } | Signal::LqhAbort { .. })
                )
            {
                self.warm_ahead();
            }
            let Some(signal) = self.jobs.pop_front() else {
                break;
            };
            self.warmed = self.warmed.saturating_sub(1);
            ran += 1;
            if ran.is_multiple_of(FLUSH_EARLY_EVERY_JOBS) {
                out.flush_early();
            }
            match signal {
                Signal::LqhKeyReq(req) => self.run_lqh_key_req(req, out, now),
                Signal::ScanResume { scan, fragment } => self.resume_scan(scan, fragment, out, now),
                Signal::LqhAnswer(answer) => self.on_lqh_answer(*answer, out, now),
                Signal::TcRound(trans) => self.tc_round(trans, out),
                Signal::LqhCommit { trans, tc_node } => self.lqh_finish(trans, tc_node, true, out),
                Signal::LqhAbort { trans, tc_node } => self.lqh_finish(trans, tc_node, false, out),
                Signal::RoundDone { trans, node } => {
                    if self.tc.round_done(trans, node) {
                        self.tc_round(trans, out);
                    }
                }
            }
        }
    }

    /// Warms the cache for the key operations among the next jobs (see `Lqh::warm`).
    fn warm_ahead(&mut self) {
        let ahead = self.jobs.len().min(lqh::WARM_MAX);
        self.lqh
            .warm(self.jobs.iter().take(ahead).filter_map(|job| match job {
                Signal::LqhKeyReq(req) => Some(lqh::Warm::Key(req)),
                Signal::LqhCommit { trans, .. } | Signal::LqhAbort { trans, .. } => {
                    Some(lqh::Warm::Rows(*trans))
                }
                _ => None,
            }));
        self.warmed = ahead;
    }

    /// The transaction's commit or abort is over on every participant: TC forgets it and
    /// answers the API.
    fn finish_transaction(&mut self, trans: TransId, out: &mut dyn Outbox) {
        // The invariant that keeps locks from leaking: no work of a transaction runs in LQH
        // once TC has started its commit or abort, so when TC forgets it, LQH holds nothing
        // of it (this node is always a participant, and its round has run), unless another
        // node's TC runs it and this record was only its scans' (that TC ends it here).
        debug_assert!(
            !self.lqh.touches_rows(trans) || self.dist.is_foreign(trans),
            "transaction {trans:#x} touched rows after its commit or abort"
        );
        self.dist.forget_operations_of(trans);
        let answer = self.tc.on_finished(trans);
        let scan_error = || match &answer {
            Some(ApiAnswer::ExecuteRef { error, .. }) => error.clone(),
            _ => NdbError::with_detail(4120, "the scan's transaction ended"),
        };
        self.close_scans_of(trans, &scan_error, out);
        if let Some(answer) = answer {
            self.answer_api(trans, answer, out);
        }
    }

    /// Aborts transactions whose lock waits or idle time ran out.
    pub fn on_timer(&mut self, now: Instant) {
        for trans in self.tc.expired(now) {
            self.jobs.push_back(Signal::TcRound(trans));
        }
    }

    /// Before the cluster has started, an API node's transactions and scans are refused with
    /// 4009 (key operations silently: the execute that follows them is refused). True when
    /// the frame was handled so.
    fn refuse_before_start(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
    ) -> bool {
        if self.dist.is_data_node(from) {
            return false;
        }
        let error = NdbError::with_detail(
            4009,
            "the cluster has not started: not every data node is connected",
        );
        // An operation that ends its execute (FLAG_EXECUTE, its flags' byte) is answered as
        // the execute would be.
        let ends_execute = payload
            .first()
            .is_some_and(|f| f & signals::FLAG_EXECUTE != 0);
        match header.signal {
            gsn::TCKEYREQ | gsn::TCINDXREQ if !ends_execute => {}
            gsn::TCKEYREQ | gsn::TCINDXREQ | gsn::TC_EXECUTE_REQ => {
                let trans = tc::trans_id(from, header.request_id);
                self.answer_api(
                    trans,
                    ApiAnswer::ExecuteRef {
                        error,
                        op_index: signals::OP_INDEX_NONE,
                    },
                    out,
                );
            }
            gsn::SCAN_TABREQ | gsn::SCAN_NEXTREQ => {
                tc::scan::scan_ref(&mut self.unsent, out, from, header.request_id, &error)
            }
            _ => return false,
        }
        true
    }

    /// A link closed. An API node's transactions are rolled back and their locks released; a
    /// data node's loss aborts what touched it.
    pub fn on_disconnect(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        if self.dist.is_data_node(node) {
            self.unsent.forget(node);
            return self.on_data_node_lost(node, out, now);
        }
        self.unsent.forget(node);
        self.abandon_scans(node);
        for trans in self.tc.abandon_node(node) {
            self.jobs.push_back(Signal::TcRound(trans));
        }
    }

    /// True when final answers wait for a send buffer to drain (the loop should come back
    /// soon to retry them).
    pub fn has_unsent_answers(&self) -> bool {
        !self.unsent.is_empty()
    }

    pub fn memory_used_bytes(&self) -> u64 {
        self.lqh.memory_used_bytes()
    }

    pub fn transaction_count(&self) -> usize {
        self.tc.transaction_count()
    }

    pub fn scan_count(&self) -> usize {
        self.scans.count()
    }

    /// An execute ends a batch of operations (a TC_EXECUTE_REQ, or the last operation's
    /// FLAG_EXECUTE).
    fn on_execute_req(
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

    fn on_key_req(
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
        match self.tc.on_key_req(trans, req.flags(), req.op_index(), now) {
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
                self.build_unique_lookup(trans, req.to_owned())
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
        Ok(lqh_req)
    }

    fn on_lqh_answer(&mut self, answer: LqhAnswer, out: &mut dyn Outbox, now: Instant) {
        // The answer of an operation another node's TC (or this node's, through another
        // node's replica) sent: to that TC, or, here, back to the role TC kept for it.
        let answer = match self.route_answer(answer, out) {
            Some(answer) => answer,
            None => return,
        };
        let (trans, op_index, result, role, fired) = match answer {
            LqhAnswer::Conf {
                trans,
                op_index,
                row,
                role,
                fired,
                ..
            } => (trans, op_index, Ok(row), role, fired),
            LqhAnswer::Ref {
                trans,
                op_index,
                error,
                role,
                backup,
            } => {
                if backup {
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
                Err(error) => Err(error),
            },
            OpRole::Trigger => match result {
                Ok(_) => {
                    self.tc.on_internal_done(trans);
                    return self.complete(trans, out, now);
                }
                Err(error) => {
                    self.tc.force_abort(trans);
                    Err(index::trigger_error(error))
                }
            },
        };
        for change in fired {
            self.fire(trans, op_index, change, out);
        }
        if let Some(api_answer) = self.tc.on_lqh_answer(trans, op_index, result) {
            self.answer_api(trans, api_answer, out);
        }
        self.complete(trans, out, now);
    }

    /// Ends the transaction's execute if it is complete.
    fn complete(&mut self, trans: TransId, out: &mut dyn Outbox, now: Instant) {
        match self.tc.try_complete(trans, now) {
            None => {}
            Some(Ok(answer)) => self.answer_api(trans, answer, out),
            Some(Err(TcAction::Commit(t)) | Err(TcAction::Abort(t))) => {
                self.jobs.push_back(Signal::TcRound(t))
            }
            Some(Err(TcAction::Dispatch)) => {}
        }
    }

    /// Work whose locks were granted runs again, in the order it was granted. (LQH grants only
    /// work of live transactions; the guards in `run_jobs` and `resume_scan` drop work whose
    /// transaction ended before its turn.)
    fn resume(&mut self, granted: Vec<LqhWork>) {
        self.jobs.extend(granted.into_iter().map(|work| match work {
            LqhWork::Key(req) => Signal::LqhKeyReq(req),
            LqhWork::Scan { scan, fragment } => Signal::ScanResume { scan, fragment },
        }));
    }

    /// Sends a read's row as the confirmation of its execute too (TCKEY_ROW_CONF). False when
    /// it could not be sent (the caller then answers the usual way).
    fn send_row_conf(
        &mut self,
        trans: TransId,
        op_index: u32,
        row: &tup::Row,
        out: &mut dyn Outbox,
    ) -> bool {
        let (api, request_id) = tc::trans_parts(trans);
        let header = api_header(gsn::TCKEY_ROW_CONF, request_id);
        out.send(api, header, &mut |b| {
            TcKeyRow::encode_encoded(b, op_index, row.encoded())
        })
        .is_ok()
    }

    fn answer_api(&mut self, trans: TransId, answer: ApiAnswer, out: &mut dyn Outbox) {
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
            ApiAnswer::ExecuteConf => {
                return self
                    .unsent
                    .send(out, api, header(gsn::TC_EXECUTE_CONF), &mut |_| {})
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

    /// Creates a table here; answers the CONF payload (its id, version and definition).
    fn apply_create_table(&mut self, def: rndb_protocol::TableDef) -> Result<Vec<u8>, NdbError> {
        let fragment_count = self.dih.partition_count();
        let table = self.dict.create(def, fragment_count)?;
        let info: TableInfo = table.info.clone();
        self.lqh.create_fragments(info.table_id, fragment_count);
        tracing::info!(table = %info.def.name, id = info.table_id, "created table");
        let mut conf = Vec::new();
        info.encode(&mut conf);
        Ok(conf)
    }

    /// Drops a table, its indexes and rows here.
    fn apply_drop_table(
        &mut self,
        name: &str,
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<Vec<u8>, NdbError> {
        let (table_id, hidden) = self.dict.drop_table(name)?;
        for id in std::iter::once(table_id).chain(hidden) {
            self.drop_fragments(id, out, now);
        }
        tracing::info!(table = %name, id = table_id, "dropped table");
        Ok(Vec::new())
    }
}

impl Kernel {
    /// Drops a table's fragments: operations queued on its rows fail, scans queued on them
    /// resume and find the table gone.
    fn drop_fragments(&mut self, table_id: u32, out: &mut dyn Outbox, now: Instant) {
        let (answers, scans) = self.lqh.drop_fragments(table_id);
        for answer in answers {
            self.on_lqh_answer(answer, out, now);
        }
        for (scan, fragment) in scans {
            self.jobs.push_back(Signal::ScanResume { scan, fragment });
        }
    }
}

/// Answers a request frame with `signal`, echoing its request id; an answer that meets a full
/// send buffer is kept and sent later.
fn reply(
    unsent: &mut answers::Unsent,
    out: &mut dyn Outbox,
    to: NodeId,
    request: &FrameHeader,
    signal: u16,
    encode: &mut dyn FnMut(&mut Vec<u8>),
) {
    let header = FrameHeader {
        signal,
        receiver_block: request.sender_block,
        sender_block: request.receiver_block,
        request_id: request.request_id,
    };
    unsent.send(out, to, header, encode);
}

fn refuse(
    unsent: &mut answers::Unsent,
    out: &mut dyn Outbox,
    to: NodeId,
    request: &FrameHeader,
    signal: u16,
    error: &NdbError,
) {
    let refusal = Refusal {
        code: error.code,
        detail: error.message.clone(),
    };
    reply(unsent, out, to, request, signal, &mut |b| refusal.encode(b));
}

/// The header of a frame from TC to an API node, answering its request `request_id`.
fn api_header(signal: u16, request_id: u32) -> FrameHeader {
    FrameHeader {
        signal,
        receiver_block: block::API,
        sender_block: block::DBTC,
        request_id,
    }
}
