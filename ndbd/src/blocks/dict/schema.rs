//! Schema changes on every data node: create and drop of tables and indexes reach every data
//! node before the API hears of them, and one that fails anywhere fails everywhere.
//!
//! API nodes send schema changes to the DICT master (the data node with the lowest id). The
//! master runs one change at a time (others queue): it applies the change itself, passes the
//! same request to every other data node, prefixed with the id its dictionary gave the first
//! new object (each follower moves its id counter up to it, so a change one of them refused
//! leaves no gap) and the GCI it logged the change in (each follower logs it in that one, so a
//! system restart finds it on every node or on none; not so the undo of a failed create,
//! logged in a later GCI than the create, nor a takeover's correction, which a system restart
//! makes agree: `dict/agree.rs`), and compares their answers with its own
//! (the same table and index ids). When one refuses, a create is undone (dropped again) on
//! every node, and the API gets the refusal once they all answered the undo. A drop cannot be
//! undone; a drop refused somewhere is reported. The master applies a drop to itself last,
//! once every other node answered (in its GCI of then), so that no drop is on the master
//! alone (`dict/agree.rs`).
//!
//! A DROP TABLE first waits for the transactions that hold the table's rows, as NDB's
//! PREP_DROP_TAB_REQ and WAIT_DROP_TAB_REQ do: the master marks the table as being dropped and
//! sends PREP_DROP_TAB_REQ to every other data node, which marks it too. From its mark on, a
//! node starts no operation or scan on the table (283); it answers PREP_DROP_TAB_CONF once no
//! transaction holds or waits for a row of it there (checked every timer tick). When every node
//! has answered and the master's own rows are free, the drop runs as any change. So every
//! transaction that wrote the table before the drop has committed or aborted on every node
//! before any node drops it: none is acknowledged whose rows a node dropped under it. (A backup
//! is not waited for: one begun during the wait fails with 1340 when the table goes, as a
//! backup stuck on a failed disk must not hold the drop, every schema change and every node
//! restart for good.) A node that fails during the wait is not waited for; when the master
//! fails during it, the others take their marks off again (the table stays, and the API's
//! request fails with its link; when the master fails after its DROP_TABLE_REQ reached only
//! some nodes, the new master finishes the drop on the others: `dict/takeover.rs`). The
//! master sends PREP_DROP_TAB_REQ again every second to the nodes that have not answered: one
//! that did not yet see it as master (a node restart ended) ignored it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rndb_config::NodeId;
use rndb_protocol::signals::{self, block, gsn, CreateIndexReq, IndexName, Refusal, TableInfo};
use rndb_protocol::NdbError;
use rndb_transporter::FrameHeader;

use super::index::PendingBuild;
use crate::blocks::dict::index_build::BuildReply;
use crate::blocks::{refuse, reply, Kernel, Outbox, ProtocolViolation, Signal};
use crate::ndbfs::format::gci_hi;

/// Schema changes waiting while one runs, at most.
const QUEUED_MAX: usize = 64;

/// Bytes the master puts before the API's request when it passes a schema change on (see
/// [`PassedChange::encode`]).
const MASTER_PREFIX_BYTES: usize = 20;

/// A schema change as the master passes it on: what every data node applies, and what a new
/// master's takeover finishes or takes back (`dict/takeover.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PassedChange {
    /// Its place in the masters' order of changes: one more than the last change's (an undo is
    /// a change too; a takeover that finishes a change on the nodes behind sends it with its
    /// own number). Not kept on disk: every node counts from 0 again after a system restart,
    /// and a node restart copies the president's.
    pub seq: u64,
    /// The request's signal (CREATE/DROP TABLE/INDEX).
    pub signal: u16,
    /// The id the master's dictionary gave the first new object.
    pub first_id: u32,
    /// The epoch the master logged the change in: every node logs it in that one.
    pub gci: u64,
    /// The API's request.
    pub request: Vec<u8>,
}

impl PassedChange {
    /// `first_id u32 | gci u64 | seq u64 | request` (the signal is the frame's).
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.first_id.to_le_bytes());
        b.extend_from_slice(&self.gci.to_le_bytes());
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&self.request);
    }

    /// The change of a schema request signal `signal` from the master, its request checked.
    pub fn decode(signal: u16, payload: &[u8]) -> Result<PassedChange, ProtocolViolation> {
        let Some((prefix, request)) = payload.split_first_chunk::<MASTER_PREFIX_BYTES>() else {
            return Err(ProtocolViolation(format!(
                "schema change of {} bytes from the master, without its {MASTER_PREFIX_BYTES}-byte prefix",
                payload.len()
            )));
        };
        let (first_id, rest) = prefix.split_at(4);
        let (gci, seq) = rest.split_at(8);
        let first_id = u32::from_le_bytes(first_id.try_into().expect("4 bytes"));
        check_id_counter(first_id)?;
        let seq = u64::from_le_bytes(seq.try_into().expect("8 bytes"));
        check_seq(seq)?;
        check_payload(signal, request)?;
        Ok(PassedChange {
            seq,
            signal,
            first_id,
            gci: u64::from_le_bytes(gci.try_into().expect("8 bytes")),
            request: request.to_vec(),
        })
    }
}

/// The master's schema changes: the running one and those waiting.
#[derive(Debug, Default)]
pub(crate) struct SchemaOps {
    current: Option<SchemaOp>,
    queue: VecDeque<(NodeId, FrameHeader, Vec<u8>)>,
    next_id: u32,
    /// Changes done everywhere whose CONF waits for a restorable global checkpoint.
    held: Vec<HeldConf>,
    /// The master's PREP_DROP_TAB_REQ this node marked its table for (not the master).
    follower_prep: Option<FollowerPrep>,
    /// The `seq` of the last change this node handled (applied, or refused), as master or
    /// not, and that change (`None` after a restart).
    pub(super) seq: u64,
    pub(super) last: Option<PassedChange>,
    /// This node applied that change (and built its unique index, if it made one): false
    /// when it refused the change or the index's build failed here.
    pub(super) last_applied: bool,
    /// A DICT_TAKEOVER_REQ that came before this node held its sender as master, answered
    /// once it does (the sender also sends it again every second).
    pub(super) takeover_asked: Option<(NodeId, FrameHeader)>,
    /// A DROP TABLE that came with no PREP_DROP_TAB_REQ before it (a new master finishes one
    /// its predecessor began), waiting here for the transactions holding the table's rows.
    deferred: Option<DeferredDrop>,
    /// A new master's takeover, until every node agrees on the last change.
    pub(crate) takeover: Option<super::takeover::Takeover>,
}

/// A DROP TABLE waiting for the transactions holding its table's rows on this node, then
/// applied (and answered to `answer`).
#[derive(Debug)]
struct DeferredDrop {
    answer: Option<(NodeId, FrameHeader)>,
    change: PassedChange,
    wait: DropWait,
}

/// A drop's wait for the transactions holding its table's rows on this node.
#[derive(Debug)]
struct DropWait {
    /// The table and its hidden index tables, marked as being dropped here.
    tables: Vec<u32>,
    /// No transaction holds or waits for a row of them here any more.
    drained: bool,
    /// When the wait began, when it was last logged, and (at the master) when
    /// PREP_DROP_TAB_REQ last went to the nodes not answered yet.
    since: Instant,
    logged: Instant,
    sent: Instant,
}

impl DropWait {
    fn new(tables: Vec<u32>, now: Instant) -> DropWait {
        DropWait {
            tables,
            drained: false,
            since: now,
            logged: now,
            sent: now,
        }
    }

    /// Checks whether the rows are free here; logs, every [`DROP_WAIT_LOG_EVERY`], a wait
    /// that goes on. True once drained.
    fn check(&mut self, lqh: &crate::blocks::lqh::Lqh, now: Instant) -> bool {
        if !self.drained {
            self.drained = !lqh.holds_rows_of(&self.tables);
        }
        if !self.drained && now.duration_since(self.logged) >= DROP_WAIT_LOG_EVERY {
            self.logged = now;
            tracing::warn!(
                tables = ?self.tables,
                waited_s = now.duration_since(self.since).as_secs(),
                "DROP TABLE waits for the transactions holding the table's rows here to commit or abort"
            );
        }
        self.drained
    }
}

/// How often a drop that still waits for transactions says so in the log.
const DROP_WAIT_LOG_EVERY: Duration = Duration::from_secs(10);
/// How often the master sends PREP_DROP_TAB_REQ again to the nodes that have not answered: a
/// node that did not yet see the sender as master (it had not heard of the old master's
/// failure, or of the end of the sender's node restart) ignored it.
const PREP_DROP_RESEND: Duration = Duration::from_secs(1);

/// A follower's part of a drop's first round.
#[derive(Debug)]
struct FollowerPrep {
    master: NodeId,
    request: FrameHeader,
    wait: DropWait,
    /// PREP_DROP_TAB_CONF was sent.
    answered: bool,
}

/// A schema change's CONF, held until global checkpoint `gci` is restorable: every node's
/// schema log then holds the change durably, so a system restart brings it back (NDB's
/// DICT waits for a GCP the same way before it answers a CREATE TABLE).
#[derive(Debug)]
struct HeldConf {
    gci: u32,
    api: NodeId,
    header: FrameHeader,
    conf: Vec<u8>,
    /// When it was held: past twice TimeBetweenGlobalCheckpointsTimeout it is answered 4012,
    /// as a durable commit is (`dict_saves_overdue`).
    since: Instant,
}

impl SchemaOps {
    /// True while a schema change runs or waits, or a new master's takeover runs.
    pub fn is_busy(&self) -> bool {
        self.current.is_some()
            || !self.queue.is_empty()
            || self.takeover.is_some()
            || self.deferred.is_some()
    }

    /// True while a schema change runs or waits at this master.
    pub(super) fn runs_change(&self) -> bool {
        self.current.is_some() || !self.queue.is_empty()
    }

    /// The `seq` of the last change this node handled, which a node restart copies.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// A node restart's copy of the president's `seq`: the dictionary copied holds every
    /// change up to it.
    pub fn set_seq(&mut self, seq: u64) {
        self.seq = seq;
        self.last = None;
        self.last_applied = true;
    }
}

/// A schema change the master has applied and passed on.
#[derive(Debug)]
struct SchemaOp {
    /// The API node that asked, and its request.
    api: NodeId,
    header: FrameHeader,
    /// The request id the other data nodes answer.
    request_id: u32,
    payload: Vec<u8>,
    /// The master's CONF payload, which every node's must equal.
    conf: Vec<u8>,
    awaiting: Vec<NodeId>,
    failure: Option<NdbError>,
    /// The change failed and its undo went to every node: `awaiting` names the nodes whose
    /// answer to the undo has not come (the API hears of the failure after them).
    undoing: bool,
    /// The hidden table of the unique index this change builds here, until that ends.
    building: Option<u32>,
    /// A DROP TABLE's first round, until every node's rows of the table are free: `awaiting`
    /// then names the nodes whose PREP_DROP_TAB_CONF has not come.
    prep: Option<DropWait>,
    /// A drop this master applies to itself only once every other node answered it (see
    /// `run_schema_op`).
    apply_last: bool,
}

/// The CONF and REF signals answering a schema request.
pub(crate) fn answers_of(request: u16) -> (u16, u16) {
    match request {
        gsn::CREATE_TABLE_REQ => (gsn::CREATE_TABLE_CONF, gsn::CREATE_TABLE_REF),
        gsn::DROP_TABLE_REQ => (gsn::DROP_TABLE_CONF, gsn::DROP_TABLE_REF),
        gsn::CREATE_INDEX_REQ => (gsn::CREATE_INDEX_CONF, gsn::CREATE_INDEX_REF),
        _ => (gsn::DROP_INDEX_CONF, gsn::DROP_INDEX_REF),
    }
}

/// True for the schema requests (API → master → every other data node).
pub(crate) fn is_schema_request(signal: u16) -> bool {
    matches!(
        signal,
        gsn::CREATE_TABLE_REQ | gsn::DROP_TABLE_REQ | gsn::CREATE_INDEX_REQ | gsn::DROP_INDEX_REQ
    )
}

/// True for the answers data nodes send the master.
pub(crate) fn is_schema_answer(signal: u16) -> bool {
    matches!(
        signal,
        gsn::CREATE_TABLE_CONF
            | gsn::CREATE_TABLE_REF
            | gsn::DROP_TABLE_CONF
            | gsn::DROP_TABLE_REF
            | gsn::CREATE_INDEX_CONF
            | gsn::CREATE_INDEX_REF
            | gsn::DROP_INDEX_CONF
            | gsn::DROP_INDEX_REF
    )
}

/// The request that takes a change back, when there is one.
pub(super) fn undo_of(signal: u16, payload: &[u8]) -> Option<(u16, Vec<u8>)> {
    let mut undo = Vec::new();
    match signal {
        gsn::CREATE_TABLE_REQ => {
            let def = signals::decode_table_def(payload).ok()?;
            signals::encode_name(&mut undo, &def.name);
            Some((gsn::DROP_TABLE_REQ, undo))
        }
        gsn::CREATE_INDEX_REQ => {
            let req = CreateIndexReq::decode(payload).ok()?;
            IndexName {
                table: req.table,
                index: req.index,
            }
            .encode(&mut undo);
            Some((gsn::DROP_INDEX_REQ, undo))
        }
        _ => None,
    }
}

/// Refuses an id counter from another data node at the end of the ids: the next object would
/// have none.
pub(super) fn check_id_counter(next_id: u32) -> Result<(), ProtocolViolation> {
    if next_id == u32::MAX {
        return Err(ProtocolViolation(format!(
            "a dictionary id counter of {next_id}: no id is left"
        )));
    }
    Ok(())
}

/// Refuses a schema change sequence number from another data node at the end of the numbers:
/// the next change would have none.
pub(super) fn check_seq(seq: u64) -> Result<(), ProtocolViolation> {
    if seq == u64::MAX {
        return Err(ProtocolViolation(format!(
            "a schema change sequence number of {seq}: no number is left"
        )));
    }
    Ok(())
}

/// Decodes a schema request without applying it (a queued request is checked on arrival).
fn check_payload(signal: u16, payload: &[u8]) -> Result<(), ProtocolViolation> {
    match signal {
        gsn::CREATE_TABLE_REQ => signals::decode_table_def(payload).map(drop)?,
        gsn::DROP_TABLE_REQ => signals::decode_name(payload).map(drop)?,
        gsn::CREATE_INDEX_REQ => CreateIndexReq::decode(payload).map(drop)?,
        _ => IndexName::decode(payload).map(drop)?,
    }
    Ok(())
}

impl Kernel {
    /// CREATE/DROP TABLE/INDEX from an API node (coordinated here when this is the master) or
    /// from the master (applied and answered).
    pub(crate) fn exec_schema_req(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), ProtocolViolation> {
        let ref_signal = answers_of(header.signal).1;
        if self.qmgr.is_data_node(from) {
            if from != self.qmgr.master() {
                // Refused, not a protocol violation: right after a master's failure, the new
                // master may have handled it before this node did.
                let error = NdbError::with_detail(
                    702,
                    format!(
                        "schema change from data node {from}, but the DICT master here is {}",
                        self.qmgr.master()
                    ),
                );
                refuse(&mut self.unsent, out, from, header, ref_signal, &error);
                return Ok(());
            }
            let change = PassedChange::decode(header.signal, payload)?;
            self.apply_passed(Some((from, *header)), change, out, now);
            return Ok(());
        }
        let refusal = if !self.qmgr.started() {
            Some(NdbError::with_detail(
                4009,
                "the cluster has not started: not every data node is connected",
            ))
        } else if self.me != self.qmgr.master() {
            Some(NdbError::with_detail(
                702,
                format!("schema changes go to data node {}", self.qmgr.master()),
            ))
        } else if self.node_restart_running() {
            Some(NdbError::with_detail(
                711,
                "System busy with node restart, schema operations not allowed",
            ))
        } else if self.schema.queue.len() >= QUEUED_MAX {
            // A queue waits for a running change, a takeover, or this node's deferred drop.
            Some(NdbError::with_detail(
                701,
                format!("{QUEUED_MAX} schema changes already wait"),
            ))
        } else {
            None
        };
        check_payload(header.signal, payload)?;
        if let Some(error) = refusal {
            refuse(&mut self.unsent, out, from, header, ref_signal, &error);
            return Ok(());
        }
        self.schema
            .queue
            .push_back((from, *header, payload.to_vec()));
        self.next_schema_op(out, now);
        Ok(())
    }

    /// A change the master passed on, or (`answer` `None`) one a new master's takeover
    /// finishes or takes back on itself: applied, and answered. A DROP TABLE that found
    /// transactions holding the table's rows here (no PREP_DROP_TAB_REQ came before it: a new
    /// master finishes a drop its predecessor began) marks the table and waits for them first.
    pub(super) fn apply_passed(
        &mut self,
        answer: Option<(NodeId, FrameHeader)>,
        change: PassedChange,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        self.schema.seq = self.schema.seq.max(change.seq);
        self.schema.last = Some(change.clone());
        self.schema.last_applied = false;
        if change.signal == gsn::DROP_TABLE_REQ {
            // The drop's first round is over (this drop takes the marks off).
            self.schema.follower_prep = None;
            let table = signals::decode_name(&change.request)
                .ok()
                .and_then(|name| self.dict.by_name(&name).ok().map(|t| t.info.table_id));
            if let Some(table) = table {
                let tables = self.dict.start_dropping(table);
                if self.lqh.holds_rows_of(&tables) {
                    tracing::info!(?tables, "DROP TABLE with no PREP_DROP_TAB_REQ before it: waits for the transactions holding the table's rows here");
                    if let Some(old) = self.schema.deferred.take() {
                        self.apply_passed_now(old.answer, old.change, out, now);
                    }
                    self.schema.deferred = Some(DeferredDrop {
                        answer,
                        change,
                        wait: DropWait::new(tables, now),
                    });
                    return;
                }
            }
        }
        self.apply_passed_now(answer, change, out, now);
    }

    fn apply_passed_now(
        &mut self,
        answer: Option<(NodeId, FrameHeader)>,
        change: PassedChange,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        self.dict.advance_next_id(change.first_id);
        let gci = self.follower_schema_gci(change.gci);
        let result = self.apply_schema(change.signal, &change.request, gci, out, now);
        if self
            .schema
            .last
            .as_ref()
            .is_some_and(|c| c.seq == change.seq)
        {
            self.schema.last_applied = result.is_ok();
        }
        let Some((master, request)) = answer else {
            // A takeover's own part: drops only, which build nothing.
            if let Err(e) = result {
                tracing::warn!("a schema change the DICT takeover finishes here: {e}");
            }
            return;
        };
        match result {
            Ok((conf, Some(build))) => {
                // Answered when the index is built across the cluster.
                let hidden = build.hidden;
                let reply = BuildReply::Follower {
                    master,
                    request,
                    conf,
                    seq: change.seq,
                };
                self.start_unique_build(build, reply, out);
                self.finish_build_if_done(hidden, out, now);
            }
            result => self.answer_schema(master, &request, result.map(|(conf, _)| conf), out),
        }
        let next_id = self.dict.next_id();
        self.builds_forget_early_below(next_id);
    }

    /// This node is no longer master: the changes queued here go to the new one (702).
    pub(super) fn schema_refuse_queued(&mut self, out: &mut dyn Outbox) {
        let master = self.qmgr.master();
        for (api, header, _) in std::mem::take(&mut self.schema.queue) {
            let error =
                NdbError::with_detail(702, format!("schema changes go to data node {master}"));
            refuse(
                &mut self.unsent,
                out,
                api,
                &header,
                answers_of(header.signal).1,
                &error,
            );
        }
    }

    /// Takes the marks of a drop called off from `tables`, but not from those a deferred drop
    /// still waits to drop (both may mark one table).
    fn stop_dropping_but_deferred(&mut self, tables: &[u32]) {
        let kept: Vec<u32> = (tables.iter().copied())
            .filter(|t| (self.schema.deferred.as_ref()).is_none_or(|d| !d.wait.tables.contains(t)))
            .collect();
        self.dict.stop_dropping(&kept);
    }

    /// Records a change this node makes as master: the next `seq`.
    fn master_change(
        &mut self,
        signal: u16,
        first_id: u32,
        gci: u64,
        request: &[u8],
    ) -> PassedChange {
        self.schema.seq += 1;
        let change = PassedChange {
            seq: self.schema.seq,
            signal,
            first_id,
            gci,
            request: request.to_vec(),
        };
        self.schema.last = Some(change.clone());
        self.schema.last_applied = true;
        change
    }

    /// Starts queued schema changes until one has to wait for other nodes (none while a new
    /// master's takeover runs, or its own part of one, a drop, waits for transactions here:
    /// a CREATE of the name would find the table still here; none while arbitration holds
    /// commits: this side may be about to stop, and lose what it changed, sim seed
    /// 0x52000458; `schema_queue_tick` starts them after).
    pub(super) fn next_schema_op(&mut self, out: &mut dyn Outbox, now: Instant) {
        while self.schema.current.is_none()
            && self.schema.takeover.is_none()
            && self.schema.deferred.is_none()
            && !self.tc.commits_held()
        {
            let Some((api, header, payload)) = self.schema.queue.pop_front() else {
                return;
            };
            if header.signal == gsn::DROP_TABLE_REQ {
                self.prepare_drop(api, header, payload, out, now);
            } else {
                self.run_schema_op(api, header, payload, out, now);
            }
        }
    }

    /// Every timer tick: the changes queued while arbitration held commits start once it no
    /// longer does.
    pub(crate) fn schema_queue_tick(&mut self, out: &mut dyn Outbox, now: Instant) {
        if !self.schema.queue.is_empty() && self.schema.current.is_none() {
            self.next_schema_op(out, now);
        }
    }

    /// A schema request's id for the other data nodes' answers.
    pub(super) fn new_schema_request_id(&mut self) -> u32 {
        self.schema.next_id = self.schema.next_id.wrapping_add(1).max(1);
        self.schema.next_id
    }

    /// A DROP TABLE's first round at the master (see the module's docs): marks the table,
    /// asks every other data node to, and waits.
    fn prepare_drop(
        &mut self,
        api: NodeId,
        header: FrameHeader,
        payload: Vec<u8>,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let table = signals::decode_name(&payload)
            .map_err(|e| NdbError::with_detail(4000, e.to_string()))
            .and_then(|name| Ok(self.dict.droppable(&name)?.info.table_id));
        let table_id = match table {
            Ok(id) => id,
            Err(e) => {
                let ref_signal = answers_of(header.signal).1;
                refuse(&mut self.unsent, out, api, &header, ref_signal, &e);
                return;
            }
        };
        let tables = self.dict.start_dropping(table_id);
        let peers: Vec<NodeId> = self.qmgr.peers_up().collect();
        let request_id = self.new_schema_request_id();
        self.send_prep_drop(&peers, request_id, table_id, out);
        self.schema.current = Some(SchemaOp {
            api,
            header,
            request_id,
            payload,
            conf: Vec::new(),
            awaiting: peers,
            undoing: false,
            failure: None,
            building: None,
            prep: Some(DropWait::new(tables, now)),
            apply_last: false,
        });
        self.drop_wait_check(out, now);
    }

    /// PREP_DROP_TAB_REQ for `table_id` to each of `peers`.
    fn send_prep_drop(
        &mut self,
        peers: &[NodeId],
        request_id: u32,
        table_id: u32,
        out: &mut dyn Outbox,
    ) {
        self.dict_send(peers, gsn::PREP_DROP_TAB_REQ, request_id, out, &mut |b| {
            b.extend_from_slice(&table_id.to_le_bytes())
        });
    }

    /// DICT signal `signal` to DICT on each of `peers`, answered under `request_id`.
    pub(super) fn dict_send(
        &mut self,
        peers: &[NodeId],
        signal: u16,
        request_id: u32,
        out: &mut dyn Outbox,
        encode: &mut dyn FnMut(&mut Vec<u8>),
    ) {
        for &peer in peers {
            let header = FrameHeader {
                signal,
                receiver_block: block::DBDICT,
                sender_block: block::DBDICT,
                request_id,
            };
            self.unsent.send(out, peer, header, encode);
        }
    }

    /// Every timer tick while a drop waits for transactions (and when a node answers or
    /// fails): the master runs the drop once its rows and every other node's are free; a
    /// follower answers once its own are.
    pub(crate) fn drop_wait_check(&mut self, out: &mut dyn Outbox, now: Instant) {
        if let Some(deferred) = self.schema.deferred.as_mut() {
            if deferred.wait.check(&self.lqh, now) {
                if let Some(deferred) = self.schema.deferred.take() {
                    self.apply_passed_now(deferred.answer, deferred.change, out, now);
                    self.next_schema_op(out, now);
                }
            }
        }
        if let Some(prep) = self.schema.follower_prep.as_mut() {
            if !prep.answered && prep.wait.check(&self.lqh, now) {
                prep.answered = true;
                let (master, request) = (prep.master, prep.request);
                reply(
                    &mut self.unsent,
                    out,
                    master,
                    &request,
                    gsn::PREP_DROP_TAB_CONF,
                    &mut |_| {},
                );
            }
        }
        let Some(op) = self.schema.current.as_mut() else {
            return;
        };
        let Some(prep) = op.prep.as_mut() else {
            return;
        };
        if !op.awaiting.is_empty() && now.duration_since(prep.sent) >= PREP_DROP_RESEND {
            prep.sent = now;
            if let Some(&table_id) = prep.tables.first() {
                let (awaiting, request_id) = (op.awaiting.clone(), op.request_id);
                self.send_prep_drop(&awaiting, request_id, table_id, out);
            }
            return;
        }
        if !prep.check(&self.lqh, now) || !op.awaiting.is_empty() {
            return;
        }
        let Some(op) = self.schema.current.take() else {
            return;
        };
        self.run_schema_op(op.api, op.header, op.payload, out, now);
        self.next_schema_op(out, now);
    }

    /// PREP_DROP_TAB_REQ from the master: marks the table as being dropped here, and answers
    /// once no transaction holds a row of it here.
    pub(crate) fn exec_prep_drop_tab_req(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), ProtocolViolation> {
        let Some(bytes) = payload.first_chunk::<4>().filter(|_| payload.len() == 4) else {
            return Err(ProtocolViolation(format!(
                "PREP_DROP_TAB_REQ of {} bytes, not 4",
                payload.len()
            )));
        };
        if from != self.qmgr.master() {
            tracing::warn!(node = %from, master = %self.qmgr.master(), "PREP_DROP_TAB_REQ from a data node that is not the DICT master here: ignored");
            return Ok(());
        }
        if let Some(old) = self.schema.follower_prep.take() {
            self.stop_dropping_but_deferred(&old.wait.tables);
        }
        let tables = self.dict.start_dropping(u32::from_le_bytes(*bytes));
        self.schema.follower_prep = Some(FollowerPrep {
            master: from,
            request: *header,
            wait: DropWait::new(tables, now),
            answered: false,
        });
        self.drop_wait_check(out, now);
        Ok(())
    }

    /// PREP_DROP_TAB_CONF: a node's rows of the table being dropped are free.
    pub(crate) fn exec_prep_drop_tab_conf(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let Some(op) = self.schema.current.as_mut() else {
            return;
        };
        if op.prep.is_none() || header.request_id != op.request_id {
            return;
        }
        op.awaiting.retain(|&n| n != from);
        self.drop_wait_check(out, now);
    }

    /// Applies a schema change here and passes it on to every other data node (with none to
    /// wait for, answers the API as [`Kernel::answer_applied`] does).
    fn run_schema_op(
        &mut self,
        api: NodeId,
        header: FrameHeader,
        payload: Vec<u8>,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let ref_signal = answers_of(header.signal).1;
        let first_id = self.dict.next_id();
        let gci = self.gcp.current;
        let peers: Vec<NodeId> = self.qmgr.peers_up().collect();
        // A drop goes to the other nodes first, and is applied here once they all answered:
        // a drop this master alone logged (its copies lost with its links) could otherwise
        // reach a system restart of a GCI the others saved, which would drop the table they
        // kept, written since, everywhere (`dict/agree.rs`). A create is applied here first:
        // its ids go with it.
        let drop = matches!(header.signal, gsn::DROP_TABLE_REQ | gsn::DROP_INDEX_REQ);
        let apply_last = drop && !peers.is_empty();
        let applied = if apply_last {
            self.check_drop(header.signal, &payload)
                .map(|()| (Vec::new(), None))
        } else {
            self.apply_schema(header.signal, &payload, gci, out, now)
        };
        let (conf, build) = match applied {
            Ok(applied) => applied,
            Err(e) => {
                refuse(&mut self.unsent, out, api, &header, ref_signal, &e);
                return;
            }
        };
        let change = self.master_change(header.signal, first_id, gci, &payload);
        self.schema.last_applied = !apply_last;
        if peers.is_empty() && build.is_none() {
            // Alone: done everywhere it must be, answered once durable as any change.
            self.answer_applied(api, header, conf, out, now);
            return;
        }
        let request_id = self.new_schema_request_id();
        self.pass_on(&peers, request_id, &change, out);
        self.schema.current = Some(SchemaOp {
            api,
            header,
            request_id,
            payload,
            conf,
            awaiting: peers,
            undoing: false,
            failure: None,
            building: build.as_ref().map(|b| b.hidden),
            prep: None,
            apply_last,
        });
        if let Some(build) = build {
            let hidden = build.hidden;
            self.start_unique_build(build, BuildReply::Master, out);
            self.finish_build_if_done(hidden, out, now);
        }
    }

    /// Sends `change` to each of `peers`, answered with `request_id`.
    pub(super) fn pass_on(
        &mut self,
        peers: &[NodeId],
        request_id: u32,
        change: &PassedChange,
        out: &mut dyn Outbox,
    ) {
        self.dict_send(peers, change.signal, request_id, out, &mut |b| {
            change.encode(b)
        });
    }

    /// This node's part of the running schema change's index build ended (the master's).
    pub(crate) fn schema_build_done(
        &mut self,
        error: Option<NdbError>,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        let Some(op) = self.schema.current.as_mut() else {
            return;
        };
        if op.undoing {
            return;
        }
        op.building = None;
        if let Some(error) = error {
            op.failure.get_or_insert(error);
        }
        if op.awaiting.is_empty() {
            self.end_schema_op(out, now);
        }
    }

    /// Answers a schema change the master passed on: CONF with `result`'s payload, or REF.
    pub(crate) fn answer_schema(
        &mut self,
        master: NodeId,
        request: &FrameHeader,
        result: Result<Vec<u8>, NdbError>,
        out: &mut dyn Outbox,
    ) {
        let (conf_signal, ref_signal) = answers_of(request.signal);
        match result {
            Ok(conf) => reply(
                &mut self.unsent,
                out,
                master,
                request,
                conf_signal,
                &mut |b| b.extend_from_slice(&conf),
            ),
            Err(e) => refuse(&mut self.unsent, out, master, request, ref_signal, &e),
        }
    }

    /// A data node answered the running schema change.
    pub(crate) fn exec_schema_answer(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), ProtocolViolation> {
        if self.dict_takeover_answer(from, header, payload, out, now) {
            return Ok(());
        }
        let Some(op) = self.schema.current.as_mut() else {
            // An undo's answer, or one for a change that already ended.
            return Ok(());
        };
        if header.request_id != op.request_id || !op.awaiting.contains(&from) {
            return Ok(());
        }
        op.awaiting.retain(|&n| n != from);
        if op.undoing {
            // A node that never had the change refuses its undo: nothing to take back there.
            if op.awaiting.is_empty() {
                self.end_schema_op(out, now);
            }
            return Ok(());
        }
        let (conf_signal, _) = answers_of(op.header.signal);
        if header.signal == conf_signal {
            if payload != op.conf.as_slice() {
                op.failure.get_or_insert(NdbError::with_detail(
                    4000,
                    format!("data node {from} applied the schema change differently from the master: the dictionaries differ"),
                ));
            }
        } else {
            let refusal = Refusal::decode(payload)?;
            op.failure.get_or_insert(NdbError::from_wire(
                refusal.code,
                &format!("data node {from}: {}", refusal.detail),
            ));
        }
        // A failed create is undone at once: a node still building its unique index may wait
        // for the INDEX_BUILD_DONE of a node that refused it, which never comes; the undo
        // ends that build.
        let undo_now = op.failure.is_some() && undo_of(op.header.signal, &op.payload).is_some();
        if undo_now || (op.awaiting.is_empty() && (op.building.is_none() || op.failure.is_some())) {
            self.end_schema_op(out, now);
        }
        Ok(())
    }

    /// A data node failed: the running schema change fails if it waited for that node (a
    /// drop's first round only stops waiting for it: it changed nothing there). A drop the
    /// failed master asked this node to wait for is called off here.
    pub(crate) fn schema_node_lost(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        if self
            .schema
            .follower_prep
            .as_ref()
            .is_some_and(|p| p.master == node)
        {
            if let Some(prep) = self.schema.follower_prep.take() {
                tracing::info!(master = %node, tables = ?prep.wait.tables, "the DICT master failed during a DROP TABLE's wait: the tables serve again");
                self.stop_dropping_but_deferred(&prep.wait.tables);
            }
        }
        let Some(op) = self.schema.current.as_mut() else {
            return;
        };
        if !op.awaiting.contains(&node) {
            return;
        }
        op.awaiting.retain(|&n| n != node);
        if op.prep.is_some() {
            self.drop_wait_check(out, now);
            return;
        }
        op.failure.get_or_insert(NdbError::with_detail(
            4009,
            format!("data node {node} failed during the schema change"),
        ));
        if op.awaiting.is_empty() && (op.building.is_none() || op.failure.is_some()) {
            self.end_schema_op(out, now);
        }
    }

    /// The running change's answers are in (a failed one need not wait for this node's index
    /// build: its undo ends it). A failed change that can be undone is undone here and on
    /// every other live data node (one that refused it may still have applied it: a unique
    /// index whose build failed), and the API hears of the failure once they all answered.
    fn end_schema_op(&mut self, out: &mut dyn Outbox, now: Instant) {
        let Some(mut op) = self.schema.current.take() else {
            return;
        };
        if std::mem::take(&mut op.apply_last) {
            // Drops are not undone: applied on the nodes that took it, it is applied here too.
            let gci = self.gcp.current;
            match self.apply_schema(op.header.signal, &op.payload, gci, out, now) {
                Ok(_) => self.schema.last_applied = true,
                Err(e) => {
                    tracing::error!(
                        "a drop every other node answered failed on the DICT master: {e}"
                    );
                    op.failure.get_or_insert(e);
                }
            }
        }
        if op.failure.is_some() && !op.undoing {
            if let Some((undo, payload)) = undo_of(op.header.signal, &op.payload) {
                let gci = self.gcp.current;
                let first_id = self.dict.next_id();
                if let Err(e) = self.apply_schema(undo, &payload, gci, out, now) {
                    tracing::error!("undo of a failed schema change failed here: {e}");
                }
                let change = self.master_change(undo, first_id, gci, &payload);
                let peers: Vec<NodeId> = self.qmgr.peers_up().collect();
                if !peers.is_empty() {
                    op.request_id = self.new_schema_request_id();
                    self.pass_on(&peers, op.request_id, &change, out);
                    op.awaiting = peers;
                    op.undoing = true;
                    op.building = None;
                    self.schema.current = Some(op);
                    return;
                }
            }
        }
        let ref_signal = answers_of(op.header.signal).1;
        match op.failure {
            None => self.answer_applied(op.api, op.header, op.conf, out, now),
            Some(error) => {
                tracing::warn!("schema change failed on a data node: {error}");
                refuse(
                    &mut self.unsent,
                    out,
                    op.api,
                    &op.header,
                    ref_signal,
                    &error,
                );
            }
        }
        self.next_schema_op(out, now);
    }

    /// Answers a schema change applied on every node that must have it: at once, or (with
    /// files) once the global checkpoint after the one it was logged in is durable, so that
    /// no system restart undoes an acknowledged change. Every node logged the change in this
    /// node's GCI but for one that had saved it already (see `follower_schema_gci`), which
    /// logged it in its own: the next at most (the GCP master starts no GCI before every node
    /// has moved to the last).
    fn answer_applied(
        &mut self,
        api: NodeId,
        header: FrameHeader,
        conf: Vec<u8>,
        out: &mut dyn Outbox,
        now: Instant,
    ) {
        // While arbitration holds commits, this side may be about to stop and lose the change
        // (diskless too: sim seed 0x52000458, a CREATE INDEX answered on the side the
        // arbitrator then stopped): answered once it lets the side go on.
        let held = self.tc.commits_held();
        if held || self.has_files && self.gcp.durable <= gci_hi(self.gcp.current) {
            self.schema.held.push(HeldConf {
                gci: if self.has_files {
                    gci_hi(self.gcp.current) + 1
                } else {
                    0
                },
                api,
                header,
                conf,
                since: now,
            });
            self.gcp_want_save(out);
        } else {
            let conf_signal = answers_of(header.signal).0;
            reply(&mut self.unsent, out, api, &header, conf_signal, &mut |b| {
                b.extend_from_slice(&conf)
            });
        }
    }

    /// Every timer tick: a schema change whose CONF waited twice TimeBetweenGlobalCheckpoints-
    /// Timeout for its global checkpoint to be saved (a node group's disks failed) is answered
    /// 4012, as a durable commit is: applied on every data node, its durability unknown.
    pub(crate) fn dict_saves_overdue(&mut self, out: &mut dyn Outbox, now: Instant) {
        if self.schema.held.is_empty() {
            return;
        }
        let limit = self.gcp.save_timeout().saturating_mul(2);
        let (overdue, held): (Vec<HeldConf>, Vec<HeldConf>) = std::mem::take(&mut self.schema.held)
            .into_iter()
            .partition(|h| now.duration_since(h.since) >= limit);
        self.schema.held = held;
        for h in overdue {
            let error = NdbError::with_detail(
                4012,
                format!(
                    "the schema change is applied on every data node, but global checkpoint {} was not saved within {} ms: its durability is unknown",
                    h.gci,
                    limit.as_millis()
                ),
            );
            tracing::warn!("{error}");
            let ref_signal = answers_of(h.header.signal).1;
            refuse(&mut self.unsent, out, h.api, &h.header, ref_signal, &error);
        }
    }

    /// Answers the schema changes held for global checkpoints up to `Gcp::durable`.
    /// Returns true while some still wait for a later one.
    pub(crate) fn dict_checkpoint_saved(&mut self, out: &mut dyn Outbox) -> bool {
        let restorable = self.gcp.durable;
        let (saved, held) = std::mem::take(&mut self.schema.held)
            .into_iter()
            .partition(|h| h.gci <= restorable);
        self.schema.held = held;
        for HeldConf {
            api, header, conf, ..
        } in saved
        {
            let (conf_signal, _) = answers_of(header.signal);
            reply(&mut self.unsent, out, api, &header, conf_signal, &mut |b| {
                b.extend_from_slice(&conf)
            });
        }
        !self.schema.held.is_empty()
    }

    /// The GCI a follower logs the master's schema change in: the master's, so that a system
    /// restart at any GCI finds the change on every node or on none. (Each node's own would
    /// differ: the master may apply a change before it handles its own GCP_COMMIT of the next
    /// GCI, which the others got before the change.) The master saves no GCI before every node
    /// moved past it, and its GCP_SAVE_REQ comes after the change on the same link, so this
    /// node has not saved the master's GCI yet; if it has (after a change of master), a record
    /// logged in it would land after its GCI_COMPLETED, and the node's own GCI is taken.
    fn follower_schema_gci(&self, master_gci: u64) -> u64 {
        if gci_hi(master_gci) > self.dict_log.saved() {
            return master_gci;
        }
        tracing::warn!(
            master_gci = gci_hi(master_gci),
            saved = self.dict_log.saved(),
            "a schema change from the DICT master in a GCI this node already saved: logged in this node's own"
        );
        self.gcp.current
    }

    /// Whether a DROP TABLE or DROP INDEX would apply here (its object exists), without
    /// applying it.
    fn check_drop(&self, signal: u16, payload: &[u8]) -> Result<(), NdbError> {
        let malformed = |e: rndb_protocol::DecodeError| NdbError::with_detail(4000, e.to_string());
        if signal == gsn::DROP_TABLE_REQ {
            let name = signals::decode_name(payload).map_err(malformed)?;
            self.dict.droppable(&name).map(|_| ())
        } else {
            let name = IndexName::decode(payload).map_err(malformed)?;
            self.dict
                .index_by_name(&name.table, &name.index)
                .map(|_| ())
        }
    }

    /// Applies a schema change to this node and records it in the schema log, in epoch `gci`;
    /// answers its CONF payload.
    fn apply_schema(
        &mut self,
        signal: u16,
        payload: &[u8],
        gci: u64,
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(Vec<u8>, Option<PendingBuild>), NdbError> {
        let first_id = self.dict.next_id();
        // A unique index dropped before its build succeeded here was never logged here.
        let unlogged_hidden = (signal == gsn::DROP_INDEX_REQ)
            .then(|| IndexName::decode(payload).ok())
            .flatten()
            .and_then(|name| self.dict.index_by_name(&name.table, &name.index).ok())
            .and_then(|index| index.hidden_table_id)
            .filter(|hidden| self.builds.unlogged.contains_key(hidden));
        let applied = self.apply_schema_change(signal, payload, out, now)?;
        let change = crate::ndbfs::format::SchemaChange {
            signal,
            first_id,
            request: payload.to_vec(),
        };
        if let Some(hidden) = unlogged_hidden {
            self.builds.unlogged.remove(&hidden);
        } else if let Some(build) = &applied.1 {
            self.builds.unlogged.insert(build.hidden, (gci, change));
        } else {
            self.dict_log.append(gci, &change);
        }
        Ok(applied)
    }

    /// A schema change from the schema log, at a restart: applied as it was, with the ids it
    /// got then. (A unique index's entries come back with its hidden table's rows.)
    pub(crate) fn replay_schema_change(
        &mut self,
        change: &crate::ndbfs::format::SchemaChange,
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(), NdbError> {
        self.dict.advance_next_id(change.first_id);
        if change.signal == super::agree::COUNTER_RECORD && change.request.is_empty() {
            return Ok(());
        }
        check_payload(change.signal, &change.request)
            .map_err(|e| NdbError::with_detail(4000, e.0))?;
        self.apply_schema_change(change.signal, &change.request, out, now)
            .map(|_| ())
    }

    fn apply_schema_change(
        &mut self,
        signal: u16,
        payload: &[u8],
        out: &mut dyn Outbox,
        now: Instant,
    ) -> Result<(Vec<u8>, Option<PendingBuild>), NdbError> {
        let malformed = |e: rndb_protocol::DecodeError| NdbError::with_detail(4000, e.to_string());
        let done = |conf| (conf, None);
        match signal {
            gsn::CREATE_TABLE_REQ => self
                .apply_create_table(signals::decode_table_def(payload).map_err(malformed)?)
                .map(done),
            gsn::DROP_TABLE_REQ => {
                let name = signals::decode_name(payload).map_err(malformed)?;
                self.apply_drop_table(&name, out, now).map(done)
            }
            gsn::CREATE_INDEX_REQ => {
                self.apply_create_index(CreateIndexReq::decode(payload).map_err(malformed)?)
            }
            _ => self
                .apply_drop_index(IndexName::decode(payload).map_err(malformed)?, out, now)
                .map(done),
        }
    }

    /// NODE_FAILREP in DICT: a schema change or index build that waited for the failed node
    /// fails.
    pub(crate) fn dict_node_failrep(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        self.schema_node_lost(node, out, now);
        self.builds_node_lost(node, out, now);
        self.dict_takeover_node_lost(node, out, now);
        self.dict_takeover_start(node, out, now);
        self.dict_takeover_answer_asked(out);
    }

    /// GET_TABINFO_REQ: a table's definition, by name.
    pub(crate) fn exec_get_tabinfo_req(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        name: &str,
        out: &mut dyn Outbox,
    ) {
        match self.dict.by_name(name) {
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

    /// GET_INDEX_REQ: an index's definition, by its table's name and its own.
    pub(crate) fn exec_get_index_req(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        name: &IndexName,
        out: &mut dyn Outbox,
    ) {
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

    /// Creates a table here, with its blob parts tables; answers the CONF payload (its id,
    /// version and definition).
    pub(crate) fn apply_create_table(
        &mut self,
        def: rndb_protocol::TableDef,
    ) -> Result<Vec<u8>, NdbError> {
        let fragment_count = self.dih.partition_count();
        let table = self.dict.create(def, fragment_count)?;
        let info: TableInfo = table.info.clone();
        let parts = table.parts.clone();
        for id in std::iter::once(info.table_id).chain(parts) {
            self.lqh.create_fragments(id, fragment_count);
        }
        tracing::info!(table = %info.def.name, id = info.table_id, "created table");
        let mut conf = Vec::new();
        info.encode(&mut conf);
        Ok(conf)
    }

    /// Drops a table, its indexes and rows here.
    pub(crate) fn apply_drop_table(
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

    /// Drops a table's fragments: operations queued on its rows fail, scans queued on them
    /// resume and find the table gone.
    pub(crate) fn drop_fragments(&mut self, table_id: u32, out: &mut dyn Outbox, now: Instant) {
        self.builds_table_dropped(table_id);
        self.backup_table_dropped(table_id);
        self.suma_table_dropped(table_id);
        let (answers, scans) = self.lqh.drop_fragments(table_id);
        for answer in answers {
            self.exec_lqhkey_answer(answer, out, now);
        }
        for (scan, fragment) in scans {
            self.jobs.push_back(Signal::NextScanConf { scan, fragment });
        }
    }
}
