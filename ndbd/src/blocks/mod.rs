//! The kernel: NDB's blocks on one data node, and the job queue through which they signal each
//! other.
//!
//! Each block owns its state and its signal handlers, in its own module: TC (`tc/`: key
//! requests, commit, scans, unique-index reads), LQH (`lqh/`: LQHKEYREQ along a replica chain,
//! commit and abort of what a transaction holds here, fragment scans), ACC (`acc/`: hash index,
//! row locks), TUP (`tup.rs`: rows), TUX (`tux.rs`: ordered indexes), DICT (`dict/`: tables,
//! indexes, schema changes, index builds), DIH (`dih.rs`: partitions and their live replicas),
//! QMGR (`qmgr.rs`: membership, node failure). The kernel here only dispatches: frames enter
//! through [`Kernel::on_frame`] and go to the handler of the block they name; signals between
//! blocks of this node go through the job queue, run by [`Kernel::run_jobs`]. The same handler
//! runs whether a signal came from this node's queue or from another data node's link: only
//! routing differs.
//!
//! A primary-key read that stays on this node: API ─TCKEYREQ─► TC (`tc/key.rs`) ─LQHKEYREQ─►
//! LQH (`lqh/key.rs`) ─► ACC, TUP ─ the row straight to the API (NDB's TRANSID_AI) ─► TC counts
//! it and ends the execute.
//!
//! The kernel does no I/O: frames come in, frames go out through an [`Outbox`], and time is
//! passed in, so the same kernel runs in `ndbd` and in a simulator.

pub mod acc;
mod answers;
mod arbit;
pub(crate) mod backup;
pub mod dbinfo;
pub mod dict;
pub mod dih;
mod fs;
mod graceful_stop;
pub mod lqh;
mod node_restart;
pub mod node_set;
mod primary;
mod qmgr;
mod restart;
mod single_user;
mod stop_perm;
pub(crate) mod suma;
pub mod tc;
pub mod tup;
pub mod tux;

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rndb_config::{ClusterConfig, DataNodeConfig, NodeId};
use rndb_protocol::dih::GcpSignal;
use rndb_protocol::lqh::{self as lqh_signals, gsn as dgsn, LqhKeyConf, LqhKeyRef, TransSignal};
use rndb_protocol::qmgr::FailRep;
use rndb_protocol::scan::{ScanNextReq, ScanTabReq};
use rndb_protocol::signals::{self, block, gsn, IndexName, Refusal, TcExecuteReq, TcKeyReqView};
use rndb_protocol::{DecodeError, NdbError};
use rndb_transporter::FrameHeader;

use acc::TransId;
use lqh::commit::End;
use lqh::{CommitRows, LqhKeyConfRef, LqhKeyReq, ScanKey};
use node_set::NodeSet;

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

    /// Closes the link to data node `to`, which the cluster declared failed (QMGR's
    /// NODE_FAILREP), after sending what is queued for it (the NODE_FAILREP that tells it). The
    /// kernel has handled the failure already.
    fn declare_failed(&mut self, to: NodeId, reason: String) {
        let _ = (to, reason);
    }

    /// Pushes out the links whose unsent answers have grown large, in the middle of a long run
    /// of jobs, so that the peer starts on them while this node works on the rest.
    fn flush_early(&mut self) {}
}

/// Signals between blocks of this node, with NDB's names. The same signals cross nodes as
/// frames (`rndb_protocol::lqh::gsn`); a block sends to a block of this node by queueing one of
/// these, and the kernel runs it later in the same turn.
///
/// Sixteen bytes (the large ones boxed), so that a signal is built and queued in two
/// registers: a larger enum was built on the stack and copied into the queue by loads wider
/// than the stores that had just written it (a store-forwarding stall per key operation).
#[derive(Debug)]
#[allow(clippy::enum_variant_names)]
enum Signal {
    /// TC or the previous replica's LQH → LQH: run a key operation here.
    LqhKeyReq(Box<LqhKeyReq>),
    /// LQH → TC: LQHKEYCONF or LQHKEYREF, the outcome of a key operation.
    LqhKeyConfRef(Box<LqhKeyConfRef>),
    /// TC → TC (NDB's CONTINUEB): start the next round of a transaction's commit or abort, or
    /// end it when the last round is done.
    TcContinueB(TransId),
    /// TC → LQH: commit what the transaction holds on this node (all of it, or only the rows
    /// held as a backup replica), then confirm to its TC.
    LqhCommitReq {
        trans: TransId,
        tc_node: NodeId,
        rows: CommitRows,
    },
    /// TC → LQH: undo what the transaction holds on this node, then confirm to its TC.
    LqhAbortReq { trans: TransId, tc_node: NodeId },
    /// LQH → TC: LQH_COMMITCONF or LQH_ABORTCONF, a participant finished the current round.
    RoundConf { trans: TransId, node: NodeId },
    /// ACC → LQH (NDB's NEXT_SCANCONF after a lock wait): the row lock a scan waited for was
    /// granted, and the scan of that fragment goes on.
    NextScanConf { scan: ScanKey, fragment: u32 },
    /// DIH ↔ DIH of this node: a GCP_* or CNTR_* signal (see `dih/gcp.rs`).
    Gcp { signal: u16, from: NodeId, gci: u64 },
    /// NDBCNTR: a starting node tells the master what its sysfile names (`restart.rs`).
    CntrStartReq {
        from: NodeId,
        req: Box<rndb_protocol::dih::CntrStartReq>,
    },
    /// NDBCNTR: the master's restart GCI and restart history (`restart.rs`).
    CntrStartConf {
        from: NodeId,
        conf: Box<rndb_protocol::dih::CntrStartConf>,
    },
    /// The timer: the master's global checkpoints, a start waiting for its peers.
    Timer,
    /// This node's restore of a system restart is done at this GCI (it tells the master, and
    /// serves once every node has restored).
    StartDone { gci: u32 },
    /// LQH → LQH: the next step of a local checkpoint's scan.
    LcpStep,
    /// BACKUP → BACKUP: the next step of a backup's scan.
    BackupStep,
    /// QMGR: a data-node link came up; the peer hears whether this node served then
    /// (CM_REGREQ).
    CmRegReq { node: NodeId, started: bool },
    /// LQH → LQH: the next step of the fragment copies to a restarting node.
    CopyStep,
    /// QMGR as president: a node restart cannot finish; the restarting node is failed.
    AbortNodeRestart(NodeId),
    /// QMGR as president: the inclusion of a restarting node ended with its link; every
    /// other node hears NODE_FAILREP after the INCL_NODEREQ it was sent.
    InclusionEnded(NodeId),
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
    /// QMGR: membership.
    qmgr: qmgr::Qmgr,
    /// LQH's records of other nodes' transactions with work here.
    foreign: lqh::foreign::Foreign,
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
    /// The redo log's and checkpoints' parameters.
    durability: rndb_config::Durability,
    /// This node keeps files (`with_files`); one without (Diskless) confirms every save.
    has_files: bool,
    /// DIH's global checkpoints.
    gcp: dih::gcp::Gcp,
    /// File requests for NDBFS.
    fs: fs::FsQueue,
    /// DICT's schema log.
    dict_log: dict::log::DictLog,
    /// Saves after which the schema log is compacted (see `dict/log.rs`).
    schema_compact_after: u32,
    /// LQH's local checkpoints.
    lcps: lqh::lcp::Lcps,
    /// NDBCNTR: a start in progress (restoring, or agreeing on the restart GCI).
    restart: Option<restart::Restart>,
    /// Node restarts: this node's own, or another's it lets in, includes or copies to.
    node_restart: node_restart::NodeRestarts,
    /// Arbitration: which side of a split goes on.
    arbit: arbit::Arbit,
    /// Rounds moving a restarted node's primaries back (`primary.rs`).
    primary: primary::PrimarySwitch,
    /// Why this node must stop, when it must (a restart that cannot restore).
    fatal: Option<String>,
    /// The start failed in a way starting again cures: this node's files cannot restore the
    /// GCI the cluster restarts at, and its next run joins by node restart once the cluster
    /// serves (an angel starts it again: `fatal_cured_by_rejoin`).
    rejoin_cures: bool,
    /// `Lqh::commits_of_dropped_rows` when `take_broken_invariant` last reported it.
    dropped_rows_reported: u64,
    /// Single user mode: the one API node let in (`single_user.rs`).
    single_user: Option<NodeId>,
    /// A graceful stop in its last steps (`graceful_stop.rs`).
    stopping: Option<graceful_stop::Stopping>,
    /// The stop asked for is one of every data node (said in NODE_STOPPING_REP).
    stop_system: bool,
    /// Data nodes that said, in a stop of every data node, that they saved what they
    /// answered (STOP_SAVED_REP).
    stop_saved: std::collections::BTreeSet<NodeId>,
    /// Online backups (`backup.rs`).
    backups: backup::Backups,
    /// The ndbinfo tables' state (`dbinfo.rs`).
    dbinfo: dbinfo::Dbinfo,
    /// The event API's subscriptions (`suma.rs`).
    suma: suma::Suma,
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
                node.max_no_of_attributes,
            ),
            dih: dih::Dih::new(config),
            qmgr: qmgr::Qmgr::new(config, node.node_id),
            foreign: lqh::foreign::Foreign::default(),
            schema: dict::schema::SchemaOps::default(),
            builds: dict::index_build::Builds::default(),
            tc: tc::Tc::new(
                node.node_id,
                node.max_no_of_concurrent_transactions,
                node.max_no_of_concurrent_operations,
                node.max_dml_operations_per_transaction,
                Duration::from_millis(u64::from(node.transaction_deadlock_detection_timeout_ms)),
                inactive_timeout,
            )
            .with_index_operations_max(node.max_no_of_concurrent_index_operations)
            .with_fired_triggers_max(node.max_no_of_fired_triggers),
            lqh: lqh::Lqh::new(node.data_memory_bytes)
                .with_min_free_pct(node.min_free_pct)
                .with_local_operations_max(node.max_no_of_local_operations),
            scans: tc::scan::Scans::new(node.max_no_of_concurrent_scans)
                .with_fragment_scans_max(node.max_no_of_local_scans),
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
            durability: node.durability.clone(),
            has_files: false,
            gcp: dih::gcp::Gcp::new(&node.durability, 0),
            fs: fs::FsQueue::default(),
            dict_log: dict::log::DictLog::default(),
            schema_compact_after: dict::log::COMPACT_AFTER,
            lcps: lqh::lcp::Lcps::new(node.durability.time_between_local_checkpoints, 0, 0),
            restart: None,
            node_restart: node_restart::NodeRestarts::default(),
            arbit: arbit::Arbit::new(config, node),
            primary: primary::PrimarySwitch::new(node),
            fatal: None,
            rejoin_cures: false,
            dropped_rows_reported: 0,
            single_user: None,
            stopping: None,
            stop_system: false,
            stop_saved: Default::default(),
            backups: backup::Backups::default(),
            dbinfo: dbinfo::Dbinfo::new(config, node.node_id),
            suma: suma::Suma::new(node),
        }
    }

    /// A kernel that keeps its files (redo log, schema log, sysfile) through NDBFS: it
    /// restores what they hold, unless `initial`, and serves once the cluster agreed on the
    /// GCI it restarts at. (`new` makes one without files, as Diskless does.)
    pub fn with_files(config: &ClusterConfig, node: &DataNodeConfig, initial: bool) -> Kernel {
        let mut kernel = Kernel::new(config, node);
        kernel.has_files = true;
        kernel.qmgr.hold_start();
        kernel.begin_start(initial);
        kernel
    }

    /// Compacts the schema log after `saves` global checkpoint saves rather than
    /// `dict::log::COMPACT_AFTER` (the simulator's runs save a few dozen times).
    pub fn compact_schema_log_after(&mut self, saves: u32) {
        self.schema_compact_after = saves;
        self.dict_log.set_compact_after(saves);
    }

    /// Why this node must stop, once (a restart that cannot restore its files).
    pub fn take_fatal(&mut self) -> Option<String> {
        self.fatal.take()
    }

    /// True when this node stopped because its files cannot restore the GCI of the system
    /// restart the others run: started again, it joins by node restart once they serve.
    pub fn fatal_cured_by_rejoin(&self) -> bool {
        self.rejoin_cures
    }

    /// A broken invariant this node found in itself, once: a change logged in its redo log
    /// behind its own GCI's GCI_COMPLETED (see `Redo::late_change`), or a commit that found
    /// its rows' table dropped under it (see `Lqh::commits_of_dropped_rows`). The simulator
    /// fails the seed on it.
    pub fn take_broken_invariant(&mut self) -> Option<String> {
        if self.lqh.commits_of_dropped_rows > self.dropped_rows_reported {
            self.dropped_rows_reported = self.lqh.commits_of_dropped_rows;
            return Some(format!(
                "committed rows of a table dropped under their transaction ({} so far)",
                self.lqh.commits_of_dropped_rows
            ));
        }
        self.lqh.redo.as_mut().and_then(|r| r.late_change.take())
    }

    /// The epoch commits start in now (NDB's GCI: checkpoint in the high word).
    pub fn current_gci(&self) -> u64 {
        self.gcp.current
    }

    /// As president: the node groups whose last restorable files were let go (a node let in
    /// while the group's other members could not save) with no save naming a node of the
    /// group since: a cluster crash now leaves such a group nothing to restore.
    pub fn groups_files_given_up(&self) -> impl Iterator<Item = u32> + '_ {
        self.node_restart.files_given_up.iter().copied()
    }

    /// The newest global checkpoint this node knows to be restorable.
    pub fn restorable_gci(&self) -> u32 {
        self.gcp.restorable
    }

    /// The newest global checkpoint whose durable commits this node answers: every node its
    /// save's COPY_GCIREQ went to answered it (`Gcp::durable`).
    pub fn durable_gci(&self) -> u32 {
        self.gcp.durable
    }

    /// The GCI the system restart under way brings the cluster back at, once the master said
    /// (CNTR_START_CONF); `None` before, once started, and in a node restart.
    pub fn system_restart_gci(&self) -> Option<u32> {
        (self.restart.as_ref())
            .filter(|r| !r.node_restart)
            .and_then(|r| r.gci)
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
        if self.qmgr.dead {
            return Ok(());
        }
        self.qmgr.heard(from);
        if !self.qmgr.started() && self.refuse_before_start(from, header, payload, out) {
            return Ok(());
        }
        if self.qmgr.just_woke_from_stall(now) && is_whole_request(header.signal, payload) {
            // Until the window has passed without a peer closing its link (which would say
            // the cluster went on without this node), it starts no transaction that a
            // single frame would also end (a read answered from what the cluster may have
            // moved on from). Transactions already open go on: refusing their requests
            // would leave their locks held.
            let why = "this data node did not run for longer than the heartbeat bound and \
                       checks that the cluster still counts it alive; retry";
            if self.refuse_api_request(from, header, payload, out, why) {
                return Ok(());
            }
        }
        if self.single_user.is_some() && self.refuse_single_user(from, header, payload, out) {
            return Ok(());
        }
        if self.stopping.is_some() && self.refuse_while_stopping(from, header, payload, out) {
            return Ok(());
        }
        match header.signal {
            // TC
            gsn::TCKEYREQ | gsn::TCINDXREQ => {
                let req = TcKeyReqView::decode(payload)?;
                let execute = req.execute();
                let via_index = header.signal == gsn::TCINDXREQ;
                self.exec_tckeyreq(from, header.request_id, req, via_index, out, now);
                if let Some(execute) = execute {
                    self.exec_tc_execute_req(from, header.request_id, execute, out, now);
                }
            }
            gsn::TC_EXECUTE_REQ => {
                let execute = TcExecuteReq::decode(payload)?;
                self.exec_tc_execute_req(from, header.request_id, execute, out, now);
            }
            gsn::SCAN_TABREQ => {
                self.exec_scan_tabreq(from, header, ScanTabReq::decode(payload)?, out, now)
            }
            gsn::SCAN_NEXTREQ => {
                self.exec_scan_nextreq(from, header, ScanNextReq::decode(payload)?, out, now)
            }
            // Signals between data nodes: TC and LQH.
            dgsn::LQHKEYREQ..=dgsn::LQH_ABORTCONF
            | dgsn::TC_FAIL_QUERY
            | dgsn::TC_FAIL_ANSWER
            | dgsn::TC_FAIL_REPORT
            | dgsn::TC_FAIL_DECISION => self.on_data_node_signal(from, header, payload, out)?,
            // DICT
            gsn::CREATE_INDEX_REQ
            | gsn::DROP_INDEX_REQ
            | gsn::CREATE_TABLE_REQ
            | gsn::DROP_TABLE_REQ => {
                if !self.refuse_drop_during_backup(from, header, out) {
                    self.exec_schema_req(from, header, payload, out, now)?
                }
            }
            signal if dict::schema::is_schema_answer(signal) && self.qmgr.is_data_node(from) => {
                self.exec_schema_answer(from, header, payload, out, now)?
            }
            gsn::PREP_DROP_TAB_REQ if self.qmgr.is_data_node(from) => {
                self.exec_prep_drop_tab_req(from, header, payload, out, now)?
            }
            gsn::PREP_DROP_TAB_CONF if self.qmgr.is_data_node(from) => {
                self.exec_prep_drop_tab_conf(from, header, out, now)
            }
            gsn::DICT_TAKEOVER_REQ if self.qmgr.is_data_node(from) => {
                self.exec_dict_takeover_req(from, header, out)
            }
            gsn::DICT_TAKEOVER_CONF if self.qmgr.is_data_node(from) => {
                self.exec_dict_takeover_conf(from, header, payload, out, now)?
            }
            gsn::DICT_RESTORED_REP if self.qmgr.is_data_node(from) => {
                self.exec_dict_restored_rep(from, payload)?
            }
            gsn::DICT_RESTART_DROP if self.qmgr.is_data_node(from) => {
                self.exec_dict_restart_drop(from, payload, out, now)?
            }
            // From a data node this one holds failed, read before its link closed and handled
            // after its failure: the rounds it was in ended with it (`dih_node_failrep`).
            // Handled now, a master's GCP_PREPARE would hold every commit for a GCP_COMMIT
            // that can no longer come. (A failed node comes back only by node restart, which
            // takes it out of `failed` as it is included.)
            signal @ gsn::GCP_PREPARE..=gsn::GCP_DURABLE_REP
                if self.qmgr.failed.contains(from) && dih::gcp::is_round_signal(signal) =>
            {
                GcpSignal::decode(payload)?;
                tracing::debug!(node = %from, signal, "a GCP signal from a data node held failed; dropped");
            }
            gsn::CNTR_START_REQ if self.qmgr.is_data_node(from) => {
                let req = Box::new(rndb_protocol::dih::CntrStartReq::decode(payload)?);
                self.jobs.push_back(Signal::CntrStartReq { from, req });
            }
            gsn::CNTR_START_CONF if self.qmgr.is_data_node(from) => {
                let conf = Box::new(rndb_protocol::dih::CntrStartConf::decode(payload)?);
                self.jobs.push_back(Signal::CntrStartConf { from, conf });
            }
            gsn::GCP_PREPARE..=gsn::GCP_DURABLE_REP if self.qmgr.is_data_node(from) => {
                let GcpSignal { gci, nodes } = GcpSignal::decode(payload)?;
                match header.signal {
                    gsn::GCP_SAVEREQ | gsn::CNTR_START_REP => {
                        self.gcp.master_failed = NodeSet::from_words(nodes)
                    }
                    gsn::COPY_GCIREQ => self.gcp.copy_named(gci, NodeSet::from_words(nodes)),
                    _ => {}
                }
                self.jobs.push_back(Signal::Gcp {
                    signal: header.signal,
                    from,
                    gci,
                });
            }
            gsn::HEARTBEAT if self.qmgr.is_data_node(from) => {}
            gsn::CM_REGREQ..=gsn::NODE_STARTED_REP if self.qmgr.is_data_node(from) => {
                self.exec_node_restart_signal(from, header, payload, out, now)?
            }
            gsn::ARBIT_STARTCONF | gsn::ARBIT_CHOOSECONF | gsn::ARBIT_CHOOSEREF
                if !self.qmgr.is_data_node(from) =>
            {
                let arbit = rndb_protocol::qmgr::Arbit::decode(payload)?;
                self.exec_arbit_from_api(from, header.signal, arbit, out, now)
            }
            gsn::PRIMARY_SWITCH_REQ..=gsn::PRIMARY_SWITCH_QUERY if self.qmgr.is_up(from) => {
                let arbit = rndb_protocol::qmgr::Arbit::decode(payload)?;
                self.exec_primary_switch_signal(from, header.signal, &arbit, out, now)
            }
            // From a data node this one holds failed: its round ended with it.
            gsn::PRIMARY_SWITCH_REQ..=gsn::PRIMARY_SWITCH_QUERY if self.qmgr.is_data_node(from) => {
                rndb_protocol::qmgr::Arbit::decode(payload)?;
            }
            gsn::ARBIT_PREPREQ | gsn::ARBIT_VERDICT if self.qmgr.is_up(from) => {
                let arbit = rndb_protocol::qmgr::Arbit::decode(payload)?;
                self.exec_arbit_from_data_node(from, header.signal, arbit, out, now)
            }
            gsn::PREP_FAILREQ if self.qmgr.is_up(from) => {
                let request = rndb_protocol::qmgr::Arbit::decode(payload)?;
                self.exec_prep_failreq(from, request, out, now)
            }
            gsn::PREP_FAILCONF if self.qmgr.is_up(from) => {
                let conf = rndb_protocol::qmgr::Arbit::decode(payload)?;
                self.exec_prep_failconf(from, conf, out, now)
            }
            // From a data node this one holds failed (sent before this node's link closed,
            // as that node's side decided alone): it speaks for no side of this node's.
            gsn::ARBIT_PREPREQ | gsn::ARBIT_VERDICT | gsn::PREP_FAILREQ | gsn::PREP_FAILCONF
                if self.qmgr.is_data_node(from) =>
            {
                rndb_protocol::qmgr::Arbit::decode(payload)?;
            }
            gsn::STOP_PERM_REQ..=gsn::STOP_ABORT_REP if self.qmgr.is_up(from) => {
                let arbit = rndb_protocol::qmgr::Arbit::decode(payload)?;
                self.exec_stop_perm_signal(from, header.signal, &arbit, out)
            }
            // From a data node this one holds failed: an attempt this node gave up on.
            gsn::STOP_PERM_REQ..=gsn::STOP_ABORT_REP if self.qmgr.is_data_node(from) => {
                rndb_protocol::qmgr::Arbit::decode(payload)?;
            }
            gsn::NODE_STOPPING_REP if self.qmgr.is_data_node(from) => match payload.first() {
                Some(&graceful_stop::STOP_BEGINS) => self.exec_stop_begins_rep(from, out),
                Some(&graceful_stop::STOP_EVERY_NODE) => self.exec_stop_every_node(from, now),
                first => self.exec_node_stopping_rep(from, first == Some(&1)),
            },
            gsn::STOP_SAVED_REP if self.qmgr.is_data_node(from) => {
                self.exec_stop_saved_rep(from, now)
            }
            gsn::NODE_STOPPING_CONF => self.exec_node_stopping_conf(from),
            gsn::FAIL_REP if self.qmgr.is_up(from) => {
                self.exec_fail_rep(from, FailRep::decode(payload)?, out, now)
            }
            gsn::NODE_FAILREP if self.qmgr.is_up(from) => {
                self.exec_node_failrep(from, FailRep::decode(payload)?, out, now)
            }
            // From a data node this one holds failed (its new link, before it rejoined): it
            // has no say in who failed.
            gsn::FAIL_REP | gsn::NODE_FAILREP if self.qmgr.is_data_node(from) => {
                FailRep::decode(payload)?;
            }
            dgsn::INDEX_BUILD_ROWS | dgsn::INDEX_BUILD_DONE => {
                self.exec_index_build_signal(from, header, payload, out, now)?
            }
            gsn::GET_INDEX_REQ => {
                self.exec_get_index_req(from, header, &IndexName::decode(payload)?, out)
            }
            gsn::GET_TABINFO_REQ => {
                self.exec_get_tabinfo_req(from, header, &signals::decode_name(payload)?, out)
            }
            gsn::LIST_TABLES_REQ => {
                let req = signals::ListTablesReq::decode(payload)?;
                let conf = self.dict.list(req.from_id);
                reply(
                    &mut self.unsent,
                    out,
                    from,
                    header,
                    gsn::LIST_TABLES_CONF,
                    &mut |b| conf.encode(b),
                )
            }
            gsn::DBINFO_SCANREQ => {
                let req = rndb_protocol::ndbinfo::DbinfoScanReq::decode(payload)?;
                self.exec_dbinfo_scanreq(from, header, req, out, now)
            }
            // SUMA
            gsn::SUB_START_REQ if !self.qmgr.is_data_node(from) => {
                let req = rndb_protocol::suma::SubStartReq::decode(payload)?;
                self.exec_sub_start_req(from, header.request_id, req, out)
            }
            gsn::SUB_STOP_REQ if !self.qmgr.is_data_node(from) => {
                self.exec_sub_stop_req(from, header.request_id, out)
            }
            gsn::GCP_COMPLETE_REP if self.qmgr.is_data_node(from) => {
                let GcpSignal { gci, nodes } = GcpSignal::decode(payload)?;
                // From a node held failed: a report of a master gone, which the next covers.
                if self.qmgr.is_up(from) {
                    self.suma_epoch_completed(gci, NodeSet::from_words(nodes), out);
                }
            }
            // QMGR
            dgsn::API_REGREQ => self.exec_api_regreq(from, header, out),
            gsn::PING_REQ => reply(
                &mut self.unsent,
                out,
                from,
                header,
                gsn::PING_CONF,
                &mut |_| {},
            ),
            other => return Err(ProtocolViolation(format!("unknown signal {other}"))),
        }
        Ok(())
    }

    /// Signals only data nodes may send: to LQH (LQHKEYREQ, LQH_COMMITREQ, LQH_ABORTREQ, and
    /// the TC_FAIL_* signals of a failed coordinator's take-over) or to TC (LQHKEYCONF,
    /// LQHKEYREF, LQH_COMMITCONF, LQH_ABORTCONF).
    fn on_data_node_signal(
        &mut self,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
        out: &mut dyn Outbox,
    ) -> Result<(), ProtocolViolation> {
        if !self.qmgr.is_data_node(from) {
            return Err(ProtocolViolation(format!(
                "signal {} is for data nodes, and node {from} is not one",
                header.signal
            )));
        }
        if !self.qmgr.is_up(from) {
            // Read before its link closed here, and handled after: its failure is handled
            // already (its transactions decided by the survivors, its operations answered
            // 4010), and a late commit would commit what the survivors may roll back (seed
            // 0x730060d: a paused node committed a failed TC's backup rows after answering the
            // master's TC_FAIL_QUERY "open", and the transfer's debit stayed alone).
            tracing::debug!(node = %from, signal = header.signal, "a signal from a data node held failed; dropped");
            return Ok(());
        }
        match header.signal {
            dgsn::LQHKEYREQ => self.exec_lqhkeyreq(lqh_signals::LqhKeyReq::decode(payload)?)?,
            dgsn::LQHKEYCONF => self.exec_lqhkeyconf(from, LqhKeyConf::decode(payload)?, out),
            dgsn::LQHKEYREF => self.exec_lqhkeyref(LqhKeyRef::decode(payload)?),
            dgsn::LQH_COMMITREQ => {
                let req = lqh_signals::LqhCommitReq::decode(payload)?;
                let rows = CommitRows::backup_only_if(req.backup_rows_only());
                if self.exec_lqh_commitreq(from, req.trans, End::Commit(rows)) {
                    self.foreign.gci.insert(req.trans, req.gci);
                }
            }
            dgsn::LQH_ABORTREQ => {
                let trans = TransSignal::decode(payload)?.trans;
                self.exec_lqh_commitreq(from, trans, End::Abort);
            }
            dgsn::LQH_COMMITCONF | dgsn::LQH_ABORTCONF => {
                let trans = TransSignal::decode(payload)?.trans;
                self.jobs.push_back(Signal::RoundConf { trans, node: from });
            }
            dgsn::TC_FAIL_QUERY => {
                self.exec_tc_fail_query(from, lqh_signals::TcFailQuery::decode(payload)?, out)
            }
            dgsn::TC_FAIL_ANSWER => {
                self.exec_tc_fail_answer(from, lqh_signals::TcFailAnswer::decode(payload)?, out)?
            }
            dgsn::TC_FAIL_REPORT => {
                self.exec_tc_fail_report(from, lqh_signals::TcFailQuery::decode(payload)?, out)
            }
            dgsn::TC_FAIL_DECISION => {
                self.exec_tc_fail_decision(lqh_signals::TcFailAnswer::decode(payload)?, out)?
            }
            other => return Err(ProtocolViolation(format!("unknown signal {other}"))),
        }
        Ok(())
    }

    /// Runs queued signals until none is left.
    pub fn run_jobs(&mut self, out: &mut dyn Outbox, now: Instant) {
        if self.qmgr.dead {
            // Stopped: only a graceful stop's NODE_STOPPING_REP that met a full buffer.
            self.send_stopping_reps(out);
            return;
        }
        // Final answers that found a full send buffer go first.
        self.unsent.retry(out);
        self.suma_flush(out);
        let mut ran = 0usize;
        loop {
            // One queued operation alone gains nothing from warming (it would look its row up
            // twice), so a run of them is warmed only when another job follows.
            if self.warmed == 0
                && self.jobs.len() > 1
                && matches!(
                    self.jobs.front(),
                    Some(
                        Signal::LqhKeyReq(_)
                            | Signal::LqhCommitReq { .. }
                            | Signal::LqhAbortReq { .. }
                    )
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
                Signal::NextScanConf { scan, fragment } => {
                    self.resume_scan(scan, fragment, out, now)
                }
                Signal::LqhKeyConfRef(answer) => self.exec_lqhkey_answer(*answer, out, now),
                Signal::TcContinueB(trans) => self.tc_round(trans, out, now),
                Signal::LqhCommitReq {
                    trans,
                    tc_node,
                    rows,
                } => self.lqh_finish(trans, tc_node, End::Commit(rows), out),
                Signal::LqhAbortReq { trans, tc_node } => {
                    self.lqh_finish(trans, tc_node, End::Abort, out)
                }
                Signal::RoundConf { trans, node } => {
                    if self.tc.round_done(trans, node) {
                        self.tc_round(trans, out, now);
                    }
                }
                Signal::CntrStartReq { from, req } => self.exec_cntr_start_req(from, *req, out),
                // The restart's CONF and START_REP count only from this node's master: one
                // from a master this node has seen fail (read before its link closed) would
                // renumber or start it behind the back of the master it serves now.
                Signal::CntrStartConf { from, .. }
                | Signal::Gcp {
                    from,
                    signal: gsn::CNTR_START_REP,
                    ..
                } if from != self.me && from != self.qmgr.master() => {
                    tracing::info!(node = %from, master = %self.qmgr.master(), "a system restart's CNTR_START_CONF or CNTR_START_REP from a data node that is not the master here: ignored");
                }
                Signal::CntrStartConf { from, conf } => {
                    let excluded = if from == self.me {
                        self.qmgr.failed()
                    } else {
                        NodeSet::from_words(conf.failed)
                    };
                    self.start_excluding(excluded, out, now);
                    if let Err(why) = self.exec_cntr_start_conf(*conf, out) {
                        self.fatal.get_or_insert(why);
                    }
                }
                Signal::Gcp { signal, from, gci } => match signal {
                    gsn::CNTR_WAITREP => self.exec_cntr_waitrep(from, gci, out, now),
                    gsn::CNTR_START_REP => {
                        // The master started the nodes it holds live: one it holds failed
                        // that is still up here (its link's close not seen yet: a slow link)
                        // fails here first. Kept, it would stay in this node's chains: a
                        // restarting node's copy plan named it the source of fragments it
                        // never copied (seed 0x850915b, three replicas).
                        if from != self.me {
                            let excluded = std::mem::take(&mut self.gcp.master_failed);
                            self.start_excluding(excluded, out, now);
                        }
                        self.exec_cntr_start_rep(gci, now)
                    }
                    _ => self.exec_gcp_signal(from, signal, gci, out, now),
                },
                Signal::Timer => {
                    self.start_timer(out, now);
                    self.qmgr_timer(out, now);
                    self.arbit_timer(out, now);
                    self.restart_request(out);
                    self.gcp_timer(out, now);
                    self.gcp_stop_check(out, now);
                    self.tc_saves_overdue(out, now);
                    self.dict_saves_overdue(out, now);
                    self.schema_queue_tick(out, now);
                    self.lcp_timer(out);
                    self.backup_timer(now);
                    self.node_restart_timer(out, now);
                    self.primary_switch_timer(out, now);
                    self.suma_timer(out);
                    self.drop_wait_check(out, now);
                    self.dict_takeover_timer(out, now);
                }
                Signal::LcpStep => self.lcp_step(),
                Signal::BackupStep => self.backup_step(),
                Signal::CmRegReq { node, started } => self.send_cm_regreq(node, started, out),
                Signal::CopyStep => self.copy_step(out),
                Signal::AbortNodeRestart(node) => self.abort_node_restart(node, out, now),
                Signal::InclusionEnded(node) => self.inclusion_ended(node, out),
                Signal::StartDone { gci } => self.start_done(gci, out, now),
            }
        }
    }

    /// Warms the cache for the key operations among the next jobs (see `Lqh::warm`).
    fn warm_ahead(&mut self) {
        let ahead = self.jobs.len().min(lqh::WARM_MAX);
        self.lqh
            .warm(self.jobs.iter().take(ahead).filter_map(|job| match job {
                Signal::LqhKeyReq(req) => Some(lqh::Warm::Key(req)),
                Signal::LqhCommitReq { trans, .. } | Signal::LqhAbortReq { trans, .. } => {
                    Some(lqh::Warm::Rows(*trans))
                }
                _ => None,
            }));
        self.warmed = ahead;
    }

    /// Aborts transactions whose lock waits or idle time ran out.
    pub fn on_timer(&mut self, now: Instant) {
        self.dbinfo_tick(now);
        if self.qmgr.dead {
            return;
        }
        for trans in self.tc.expired(now) {
            self.jobs.push_back(Signal::TcContinueB(trans));
        }
        self.single_user_sweep();
        self.jobs.push_back(Signal::Timer);
    }

    /// A link closed. An API node's transactions are rolled back and their locks released; a
    /// data node's loss aborts what touched it.
    pub fn on_disconnect(&mut self, node: NodeId, out: &mut dyn Outbox, now: Instant) {
        if self.qmgr.dead {
            return;
        }
        if self.qmgr.is_data_node(node) {
            self.unsent.forget(node);
            return self.node_failrep(node, out, now);
        }
        self.unsent.forget(node);
        self.suma_api_gone(node);
        self.qmgr.forget_api(node);
        self.stop_api_gone(node);
        self.arbit_api_gone(node);
        self.abandon_scans(node);
        for trans in self.tc.abandon_node(node) {
            self.jobs.push_back(Signal::TcContinueB(trans));
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

    /// The ids of the tables this node marks as being dropped (a DROP TABLE's wait).
    pub fn tables_being_dropped(&self) -> Vec<u32> {
        self.dict
            .table_ids()
            .into_iter()
            .filter(|&id| self.dict.is_dropping(id))
            .collect()
    }

    /// True when this node's dictionary has a table named `name`.
    pub fn has_table(&self, name: &str) -> bool {
        self.dict.by_name(name).is_ok()
    }

    /// True when this node's dictionary has index `name` of table `table`.
    pub fn has_index(&self, table: &str, name: &str) -> bool {
        self.dict.index_by_name(table, name).is_ok()
    }

    pub fn scan_count(&self) -> usize {
        self.scans.count()
    }

    /// The data nodes this node holds alive (itself included).
    pub fn alive_data_nodes(&self) -> NodeSet {
        let mut alive = NodeSet::new();
        for node in self.qmgr.alive() {
            alive.insert(node);
        }
        alive
    }

    /// How this node orders the chains' live rejoined nodes (see `primary.rs`), once it is
    /// settled: `None` while this node does not serve, a node restart copies, a round
    /// moving primaries holds it, or a failure round runs (its side, undecided, serves
    /// nothing and may yet stop: seed 0xa204621, node 2 cut off alone before its stop).
    /// Every node that returns `Some` must return the same list.
    /// (A failed node's place does not matter: it is put last again when it rejoins.)
    pub fn settled_chain_order(&self) -> Option<Vec<NodeId>> {
        let settled = self.qmgr.started()
            && self.qmgr.copying.is_empty()
            && !self.tc.starts_held()
            && !self.arbit_round_running();
        settled.then(|| {
            self.qmgr
                .rejoined
                .iter()
                .copied()
                .filter(|&n| self.qmgr.is_alive(n))
                .collect()
        })
    }

    /// Restarted data nodes this node has moved back to their config place in the chains.
    pub fn primaries_moved_back(&self) -> u64 {
        self.primary.moves
    }

    /// What ndb_mgmd's reports carry beyond memory and transactions (see `mgm_report`).
    pub fn figures(&self) -> KernelFigures {
        let (operations, operations_max) = self.tc.operations_in_use();
        KernelFigures {
            transactions_max: self.tc.transactions_max(),
            operations,
            operations_max,
            row_locks: self.lqh.row_locks(),
            lock_waits_total: self.lqh.lock_waits_total,
            lcp_id: self.lcps.last_id,
            lcp_restorable_id: self.lcps.promoted,
            lcp_running: self.lcps.is_running(),
            tc: self.tc.counters,
            lqh_operations: self.lqh.operations_total,
        }
    }
}

/// The kernel's figures a report to ndb_mgmd carries (read on the execution thread's timer).
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelFigures {
    /// DBTC's counters (ndbinfo.counters).
    pub tc: tc::TcCounters,
    /// DBLQH's OPERATIONS counter.
    pub lqh_operations: u64,
    /// MaxNoOfConcurrentTransactions.
    pub transactions_max: u32,
    /// TC operation records in use, and MaxNoOfConcurrentOperations.
    pub operations: u32,
    pub operations_max: u32,
    /// Row locks held or waited for by live transactions at LQH.
    pub row_locks: u64,
    /// Lock requests that waited, since the start.
    pub lock_waits_total: u64,
    /// The newest local checkpoint started (complete or running), and the newest a restart
    /// would use.
    pub lcp_id: u32,
    pub lcp_restorable_id: u32,
    pub lcp_running: bool,
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

/// The header of a signal between data nodes' blocks.
/// True for an API request that starts a transaction and ends its execute in one frame (a
/// single key operation with its execute, or a scan that starts its transaction).
fn is_whole_request(signal: u16, payload: &[u8]) -> bool {
    let flags = payload.first().copied().unwrap_or(0);
    match signal {
        gsn::TCKEYREQ | gsn::TCINDXREQ => {
            let both = signals::FLAG_START_TRANSACTION | signals::FLAG_EXECUTE;
            flags & both == both
        }
        gsn::SCAN_TABREQ => flags & rndb_protocol::scan::SCAN_FLAG_START_TRANSACTION != 0,
        _ => false,
    }
}

fn data_node_header(signal: u16, receiver_block: u16, sender_block: u16) -> FrameHeader {
    FrameHeader {
        signal,
        receiver_block,
        sender_block,
        request_id: 0,
    }
}
