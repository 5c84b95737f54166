//! Simulated API nodes. Each speaks the real protocol: frames built with `rndb_protocol`'s
//! encoders under a [`FrameHeader`], answers decoded with its decoders, request ids naming
//! transactions, and the TC chosen as the API node chooses it (the first live replica of the
//! partition of the transaction's first key).
//!
//! A client runs one request at a time: API_REGREQ to each data node, then (client 0) the
//! tables' creation and their rows, then its workload's operations until the workload ends,
//! then (client 0) the final reads. A data node's link that comes back while the client runs
//! is used once that node answers an API_REGREQ saying it serves, as the API hands over a new
//! link. Every request has a deadline; a request without an answer by then is a liveness
//! failure (a hang), except under partitions. A scan, which the API sends to every data node
//! at once, is sent here to one node after the other (see `ScanRead`), so that a client
//! still has one request outstanding.

use std::collections::{BTreeMap, BTreeSet};

use rndb_config::{key_hash, NodeId, PartitionMap};
use rndb_protocol::filter::{CmpOp, Filter};
use rndb_protocol::interpreter::Program;
use rndb_protocol::lqh::{gsn as lgsn, ApiRegConf};
use rndb_protocol::qmgr::{Arbit, ArbiterState};
use rndb_protocol::scan::{
    decode_scan_rows, ScanNextReq, ScanTabConf, ScanTabReq, SCAN_BATCH_BYTES_MAX, SCAN_FLAG_PART,
    SCAN_FLAG_START_TRANSACTION,
};
use rndb_protocol::signals::{
    self, block, gsn, CreateIndexReq, IndexInfo, IndexName, Refusal, TableInfo, TcExecuteConf,
    TcExecuteRef, TcExecuteReq, TcKeyRef, TcKeyReqRef, TcKeyRow, FLAG_DURABLE_COMMIT,
    FLAG_START_TRANSACTION, REPLICA_PRIMARY,
};
use rndb_protocol::{
    AbortOption, BlobSize, ColumnDef, ColumnType, ExecType, IndexKind, LockMode, NdbError,
    OperationType, TableDef, Value, Writer,
};
use rndb_transporter::FrameHeader;

use crate::check::{self, KEY_OPS_MAX};
use crate::knobs::{Knobs, Sabotage, Workload};
use crate::rng::Rng;

/// The client that arbitrates (ArbitrationRank 1 in the config): client 0, which never dies
/// and whose links never drop, as a management server's would not in a split of the data
/// nodes alone.
pub const ARBITRATOR: usize = 0;
/// How long a request may wait for its answer before the run fails as hung (simulated).
pub const REQUEST_TIMEOUT_NS: u64 = 20_000_000_000;
/// Pause before retrying a final read that failed, or polling for the tables.
const RETRY_NS: u64 = 20_000_000;
/// Attempts of one final read before the run fails.
const FINAL_ATTEMPTS_MAX: u32 = 200;
/// Reads of the backups' check that may differ from the primaries' before the run fails
/// (20 ms apart: two seconds, past a heartbeat bound and a slow link's delay).
const BACKUP_CHECK_ATTEMPTS: u32 = 100;
/// A bank account's balance when the rows are created.
pub const INITIAL_BALANCE: i64 = 1_000;
/// The largest amount one transfer moves.
const TRANSFER_MAX: u64 = 300;
/// Reads through the set's unique index look up the value of one of this many latest inserts.
const RECENT_INSERTS: usize = 4;
/// Operations per register key the workload leaves room for (the final reads take the rest).
const KEY_OPS_WORKLOAD_MAX: usize = KEY_OPS_MAX - 16;

/// Table numbers (`which`): the bank's accounts, the registers, the set's elements, the bank's
/// ledger (seeds with [`Knobs::ledger`]).
pub const BANK: usize = 0;
pub const REGISTERS: usize = 1;
pub const SETS: usize = 2;
pub const LEDGER: usize = 3;
/// The set's unique hash index on its value column, created after the tables
/// (`Phase::Creating(SET_INDEX)`).
const SET_INDEX: usize = 4;
/// The scratch table client 0 drops under the transfers (`Fault::Drop`), created last.
pub const SCRATCH: usize = 5;
/// The scratch table's name.
pub const SCRATCH_NAME: &str = "scratch";
/// The scratch table's BLOB column, and its place.
const SCRATCH_BLOB_COLUMN_NAME: &str = "notes";
pub const SCRATCH_BLOB_COLUMN: usize = 2;
/// The scratch table's write in a transfer's first execute: its third operation.
const SCRATCH_OP: u32 = 2;
/// Reads through the bank's unique index per transaction of the final check: within the
/// smallest MaxNoOfConcurrentIndexOperations `Fault::Limits` draws.
const INDEX_READS_PER_TRANSACTION: u16 = 1;
/// The index client 0 creates on the bank (`Fault::Index`): a unique one over (balance, id),
/// or an ordered one over the balance.
pub const BANK_INDEX: &str = "accounts_balance";
/// Key reads of the ledger per transaction of the final read (below the smallest
/// MaxNoOfConcurrentOperations a seed draws, 64).
const LEDGER_READS_PER_TRANSACTION: usize = 24;

/// The tables, once created.
#[derive(Clone, Debug, Default)]
pub struct Tables {
    pub bank: Option<TableInfo>,
    pub registers: Option<TableInfo>,
    pub sets: Option<TableInfo>,
    /// The unique hash index on the set's value column (every insert writes a unique value).
    pub set_index: Option<IndexInfo>,
    pub ledger: Option<TableInfo>,
    /// The scratch table (`Fault::Drop`) until client 0 has dropped it.
    pub scratch: Option<TableInfo>,
    /// The scratch table's id, once created (kept after the drop): its BLOB column's parts
    /// table is `NDB$BLOB_<id>_2`.
    pub scratch_id: Option<u32>,
}

impl Tables {
    pub fn get(&self, which: usize) -> Option<&TableInfo> {
        match which {
            BANK => self.bank.as_ref(),
            REGISTERS => self.registers.as_ref(),
            SETS => self.sets.as_ref(),
            LEDGER => self.ledger.as_ref(),
            _ => None,
        }
    }
}

/// What happened to one register or set operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    /// Done; a read's value (a set read: [`check::PRESENT`] or [`check::ABSENT`]).
    Ok(Option<i64>),
    /// Refused with an error that shows the row's state, not applied: 630 (an insert found
    /// the row) or 626 (a delete or read found none).
    Refused(u32),
    /// Surely not applied.
    Fail,
    /// Unknown: the commit was sent and no answer came.
    Info,
}

/// What a register or set operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    /// A register write of this (unique) value.
    Write(i64),
    /// A set insert.
    Insert,
    /// A set delete.
    Delete,
    /// A set read through the unique index on the value column, of the value an insert of
    /// this element wrote; `locked` for a shared-lock read (CommittedRead otherwise).
    IndexRead {
        value: i64,
        locked: bool,
    },
}

/// One register or set operation of the history.
#[derive(Clone, Copy, Debug)]
pub struct Record {
    /// [`REGISTERS`] or [`SETS`].
    pub table: usize,
    pub key: u16,
    pub access: Access,
    pub client: u16,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    pub outcome: Outcome,
    /// The GCI its acknowledgement named (a write's TC_EXECUTE_CONF).
    pub gci: Option<u64>,
}

/// One transfer whose commit was sent, as the ledger check needs it.
#[derive(Clone, Copy, Debug)]
pub struct Transfer {
    /// Its ledger row's key.
    pub id: i32,
    pub from: u16,
    pub to: u16,
    pub amount: i64,
    pub client: u16,
    /// When its commit was sent.
    pub invoke_ns: u64,
    /// Confirmed (when it was acknowledged), unknown, or surely not applied.
    pub outcome: TransferOutcome,
    /// The GCI its acknowledgement named.
    pub gci: Option<u64>,
}

/// How a transfer's commit ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferOutcome {
    Pending,
    /// Acknowledged at this simulated ns.
    Acknowledged(u64),
    Unknown,
    Failed,
}

impl Transfer {
    /// The ledger row's value: the accounts and the amount, packed.
    pub fn ledger_value(&self) -> i64 {
        (i64::from(self.from) << 48) | (i64::from(self.to) << 32) | self.amount
    }
}

/// Counters for the report.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub transfers_ok: u64,
    pub transfers_failed: u64,
    pub transfers_unknown: u64,
    pub audits_ok: u64,
    /// Full reads of the bank done as scans: checked under locks, checked committed reads
    /// (every account once, each value one a transfer may have committed), failed ones.
    pub scan_audits_locked: u64,
    pub scan_audits_committed: u64,
    pub scan_audits_failed: u64,
    /// Scan batches asked for with SCAN_NEXTREQ.
    pub scan_next_requests: u64,
    pub writes_ok: u64,
    pub writes_failed: u64,
    pub writes_unknown: u64,
    pub reads_ok: u64,
    pub reads_failed: u64,
    /// Set inserts that succeeded, and those refused because the element was there (630).
    pub inserts_ok: u64,
    pub inserts_duplicate: u64,
    /// Set deletes that succeeded, and those refused because the element was not there (626).
    pub deletes_ok: u64,
    pub deletes_missing: u64,
    /// Set reads that found the element, and those that did not (626).
    pub set_reads_present: u64,
    pub set_reads_absent: u64,
    /// Set reads through the unique index that found the row, and that found none (626: the
    /// insert failed, or the element was deleted or holds another insert's value since).
    pub index_reads_found: u64,
    pub index_reads_missing: u64,
    /// Set operations that failed otherwise (not applied), and writes of unknown outcome.
    pub set_ops_failed: u64,
    pub set_ops_unknown: u64,
    /// NDB error codes the clients saw (TC_EXECUTE_REF, refused schema requests).
    pub errors: BTreeMap<u32, u64>,
    /// Clients that died with a request outstanding.
    pub deaths_mid_request: u64,
    /// The 702 of the schema request sent to a non-master was seen, and the retry succeeded.
    pub non_master_702: bool,
}

/// A committed-read scan of the bank, checked at the end of the run.
#[derive(Clone, Debug)]
pub struct CommittedScan {
    pub client: u16,
    /// When it ended (simulated ns).
    pub at_ns: u64,
    /// (account, balance) of every row.
    pub rows: Vec<(i32, i64)>,
}

/// State the clients share with the world.
#[derive(Debug)]
pub struct Shared {
    pub tables: Option<Tables>,
    /// The tables exist and hold their rows: the workload (and the faults) may begin.
    pub ready: bool,
    /// Clients start no new operations.
    pub stopping: bool,
    pub final_done: bool,
    pub history: Vec<Record>,
    /// Operations recorded per (table, key) of the registers and the set.
    key_ops: BTreeMap<(usize, u16), usize>,
    /// (element, value) of every set insert sent: what reads through the index look up.
    inserted_values: Vec<(u16, i64)>,
    pub stats: Stats,
    /// The first invariant violation; the world stops at the step that set it.
    pub failure: Option<String>,
    pub partitions: PartitionMap,
    pub accounts: u16,
    pub register_keys: u16,
    pub set_keys: u16,
    pub bank: bool,
    pub registers: bool,
    pub sets: bool,
    /// Partitions are on: a request without an answer is an unknown outcome, not a hang.
    pub hangs_expected: bool,
    /// Single user mode windows are on: clients other than 0 may be refused with 299 (a
    /// transaction that never committed).
    pub single_user_expected: bool,
    pub total: i64,
    /// Lines for `--trace`.
    pub log: Vec<String>,
    pub sabotage: Option<Sabotage>,
    /// The final reads' values at the primaries: (table, row id) → value.
    pub final_rows: BTreeMap<(usize, i32), i64>,
    /// Times the whole cluster went down (cluster crashes, and every data node stopping):
    /// final reads from before the last one may show what the restart did not restore.
    pub cluster_downs: u32,
    /// (account, balance) pairs a transfer whose commit was sent wrote, and the initial ones:
    /// what a committed read may see.
    pub balances_written: BTreeSet<(i32, i64)>,
    /// Committed-read scans of the bank, checked against `balances_written` at the end (a
    /// transfer whose commit was sent may end later): (client, simulated ns, rows).
    pub committed_scans: Vec<CommittedScan>,
    /// Log what clients send and how their requests end (`--trace`).
    pub trace: bool,
    /// Client 0 sends its first CREATE TABLE to a non-master first (see [`Knobs`]).
    pub schema_to_non_master: bool,
    /// Transfers also insert a ledger row (see [`Knobs::ledger`]).
    pub ledger: bool,
    /// Every transfer whose commit was sent (with a ledger).
    pub transfers: Vec<Transfer>,
    /// The final read of the ledger: transfer id → its row's value, for the rows found.
    pub ledger_rows: BTreeMap<i32, i64>,
    /// Commits ask to be durable (`Options::durable_commits`).
    pub durable_commits: bool,
    /// Every live node of some node group has a failed disk: no global checkpoint can be
    /// saved until an operator starts another, so a durable commit may wait for good. Set
    /// before each wake.
    pub saves_stuck: bool,
    /// When into the workload client 0 drops the scratch table (`Knobs::drop_at_ns`), and
    /// when the workload began.
    pub drop_at_ns: Option<u64>,
    pub running_since_ns: u64,
    /// The scratch table's drop was acknowledged (DROP_TABLE_CONF: durable), and the DROP
    /// TABLEs sent. (A 709 to one sent again shows the drop applied, not durable: a cluster
    /// crash may bring the table back.)
    pub scratch_dropped: bool,
    /// A DROP TABLE was answered CONF or, sent again, 709.
    pub scratch_gone: bool,
    pub drops_sent: u32,
    /// When into the workload client 0 creates the bank's index (`Knobs::index_at_ns`); its
    /// CREATE INDEX was acknowledged (durable: the index must be there at the end), or ended
    /// for good; the index as the final check found it.
    pub index_at_ns: Option<u64>,
    pub bank_index_acknowledged: bool,
    pub bank_index_settled: bool,
    pub bank_index: Option<IndexInfo>,
    /// When client 0 drops the index again (`Knobs::index_drop_at_ns`); its DROP INDEX was
    /// acknowledged (the index must be gone at the end), ended for good, or sent (its outcome
    /// may then be either).
    pub index_drop_at_ns: Option<u64>,
    pub bank_index_dropped: bool,
    pub bank_index_drop_settled: bool,
    pub bank_index_drop_sent: bool,
    /// The bank's index is an ordered one over the balance (`Knobs::index_ordered`).
    pub index_ordered: bool,
    /// Some node group's nodes are all gone or stopped on request: no global checkpoint can
    /// be saved. Set before each wake.
    pub group_cannot_save: bool,
}

impl Shared {
    pub fn new(knobs: &Knobs, partitions: PartitionMap, workload: Workload) -> Shared {
        Shared {
            tables: None,
            ready: false,
            stopping: false,
            final_done: false,
            history: Vec::new(),
            key_ops: BTreeMap::new(),
            inserted_values: Vec::new(),
            stats: Stats::default(),
            failure: None,
            partitions,
            accounts: knobs.accounts,
            register_keys: knobs.register_keys,
            set_keys: knobs.set_keys,
            bank: workload.bank(),
            registers: workload.registers(),
            sets: workload.sets(),
            hangs_expected: knobs.partitions > 0,
            single_user_expected: knobs.single_user_windows > 0,
            total: i64::from(knobs.accounts) * INITIAL_BALANCE,
            log: Vec::new(),
            sabotage: None,
            final_rows: BTreeMap::new(),
            cluster_downs: 0,
            balances_written: (0..i32::from(knobs.accounts))
                .map(|id| (id, INITIAL_BALANCE))
                .collect(),
            committed_scans: Vec::new(),
            trace: false,
            schema_to_non_master: knobs.schema_to_non_master,
            ledger: knobs.ledger && workload.bank(),
            transfers: Vec::new(),
            ledger_rows: BTreeMap::new(),
            durable_commits: false,
            saves_stuck: false,
            drop_at_ns: knobs.drop_at_ns,
            running_since_ns: 0,
            scratch_dropped: false,
            scratch_gone: false,
            drops_sent: 0,
            index_at_ns: knobs.index_at_ns,
            bank_index_acknowledged: false,
            bank_index_settled: false,
            bank_index: None,
            index_drop_at_ns: knobs.index_drop_at_ns,
            bank_index_dropped: false,
            bank_index_drop_settled: false,
            bank_index_drop_sent: false,
            index_ordered: knobs.index_ordered,
            group_cannot_save: false,
        }
    }

    pub(crate) fn fail(&mut self, what: String) {
        self.failure.get_or_insert(what);
    }

    /// Which tables the workload uses.
    fn wanted(&self) -> [bool; 3] {
        [self.bank, self.registers, self.sets]
    }

    /// Which tables client 0 creates: the workload's, and the ledger.
    fn creates(&self) -> [bool; 4] {
        let [bank, registers, sets] = self.wanted();
        [bank, registers, sets, self.ledger]
    }

    /// The tables' rows at the start: the accounts and the registers exist, the set is empty.
    fn initial_rows(&self, which: usize) -> u16 {
        match which {
            BANK => self.accounts,
            REGISTERS => self.register_keys,
            _ => 0,
        }
    }

    /// The key space of the registers or the set.
    fn keys(&self, which: usize) -> u16 {
        match which {
            BANK => self.accounts,
            REGISTERS => self.register_keys,
            _ => self.set_keys,
        }
    }
}

/// What a client asks the world to do after handling an event.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub now_ns: u64,
    pub sends: Vec<(NodeId, FrameHeader, Vec<u8>)>,
    /// Wake the client at these times.
    pub wakes: Vec<u64>,
    pub shared: &'a mut Shared,
}

impl<'a> Ctx<'a> {
    pub fn new(now_ns: u64, shared: &'a mut Shared) -> Ctx<'a> {
        Ctx {
            now_ns,
            sends: Vec::new(),
            wakes: Vec::new(),
            shared,
        }
    }
}

/// Where a client is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// API_REGREQ to data node `index` of the config's list.
    Registering(usize),
    /// Client 0: create table `which` (0 bank, 1 registers).
    Creating(usize),
    /// Client 0: insert table `which`'s rows.
    Populating(usize),
    WaitingForTables,
    Running,
    /// Client 0: the final full read (bank), then the ledger's rows (in transactions of
    /// [`LEDGER_READS_PER_TRANSACTION`] reads, from the transfer of this index on), then the
    /// final read of each register key, then the final read of every element of the set's key
    /// space.
    FinalAudit,
    /// Client 0 (`Fault::Index`): the bank's index looked up (`None`), then every account
    /// read through it by its final balance, from account `Some(from)` on (an ordered index:
    /// the bank scanned through it).
    FinalBankIndex(Option<u16>),
    FinalLedger(usize),
    FinalRead(u16),
    FinalSetRead,
    /// Client 0: every row of table `which` read at its first backup (a CommittedRead of
    /// replica 1) must equal the final read at its primary: the replicas agree.
    BackupCheck(usize),
    Done,
    Dead,
}

/// What the outstanding request is.
#[derive(Clone, Debug)]
enum Kind {
    RegReq,
    /// API_REGREQ to a data node whose link came back while the client ran.
    RegReqAgain {
        node: NodeId,
    },
    CreateTable {
        which: usize,
        at_non_master: bool,
    },
    CreateIndex,
    Populate {
        which: usize,
    },
    /// The transfer's locking reads (and, with `scratch`, a write of the scratch table).
    TransferRead {
        a: u16,
        b: u16,
        amount: i64,
        scratch: bool,
    },
    /// The transfer's commit, writing (account, balance) twice, and its ledger row
    /// (`transfer`: its index in `Shared::transfers`).
    TransferWrite {
        writes: [(i32, i64); 2],
        transfer: Option<usize>,
    },
    Rollback,
    Audit,
    /// One batch of a scan of the bank (see [`ScanRead`]).
    ScanBatch,
    /// A locked scan's part on another node than the TC, asked whether it still holds its
    /// locks (an empty NoCommit execute).
    ScanConfirm,
    /// The commit of a scan's transaction at its TC.
    ScanCommit,
    RegWrite {
        record: usize,
    },
    RegRead {
        record: usize,
    },
    /// A set insert, delete or read.
    SetOp {
        record: usize,
    },
    FinalSetRead,
    /// Reads of the ledger's rows, from transfer `from` on.
    FinalLedgerRead {
        from: usize,
    },
    BackupRead {
        which: usize,
    },
    /// Client 0's DROP TABLE of the scratch table.
    DropTable,
    /// Client 0's CREATE INDEX and DROP INDEX of the bank's index, and the final check's
    /// look-up.
    CreateBankIndex,
    DropBankIndex,
    GetBankIndex,
    /// Reads of accounts through the bank's unique index, from account `from` on.
    FinalIndexRead {
        from: u16,
    },
}

/// The one request a client has outstanding.
#[derive(Clone, Debug)]
struct Request {
    request_id: u32,
    to: NodeId,
    kind: Kind,
    deadline_ns: u64,
    /// The execute that was sent commits (its outcome is unknown if no answer comes).
    commit_sent: bool,
    /// When it was sent (simulated ns).
    sent_ns: u64,
    rows: BTreeMap<u32, Vec<Value>>,
    /// Operations refused (TCKEYREF): op index → NDB error code.
    refused: BTreeMap<u32, u32>,
}

/// How a request ended.
#[derive(Clone, Debug)]
enum Ended {
    /// TC_EXECUTE_CONF (or TCKEY_ROW_CONF), API_REGCONF, CREATE_TABLE_CONF.
    Conf(Vec<u8>),
    /// TC_EXECUTE_REF or a schema REF: the NDB error code.
    Refused(u32),
    /// The link to the node it went to closed before the answer.
    Lost,
    /// No answer by the deadline.
    TimedOut,
}

/// A full read of the bank as a table scan, as the API does it: one transaction, the scan
/// sent to every data node the client has a link to (each scans the fragments it is the
/// live primary of), here one node after the other, each node's part read to its end batch by
/// batch (SCAN_NEXTREQ). The first node is the transaction's TC; the others attach it
/// (SCAN_FLAG_PART) and hear of its end after the TC's commit, as `finish_elsewhere` does.
/// A locked scan first asks each of those others whether its part still holds its locks (an
/// empty NoCommit execute, as the API's commit does): a node whose link to the client dropped
/// rolled its part back, and a transfer may then have committed between that node's rows and
/// a later node's, which the client may hear of only after the TC's commit answered.
#[derive(Clone, Debug)]
struct ScanRead {
    /// The transaction's request id (the scans' ids are others).
    trans_request_id: u32,
    lock: LockMode,
    /// The data nodes scanned, the TC first (the `alive` list of every SCAN_TABREQ).
    nodes: Vec<NodeId>,
    /// The node being scanned (index into `nodes`).
    at: usize,
    /// The open scan's id at that node.
    scan_id: u32,
    /// Parts of a locked scan confirmed to still hold their locks: `nodes[1..=confirmed]`.
    confirmed: usize,
    /// (account, balance) of every row returned so far.
    rows: Vec<(i32, i64)>,
    /// The ordered index scanned (id, version); `None`: the table.
    index: Option<(u32, u32)>,
}

/// One simulated API node.
#[derive(Debug)]
pub struct Client {
    pub node: NodeId,
    pub index: usize,
    /// An earlier DROP TABLE of the scratch table may have been applied though its answer did
    /// not say so (lost, timed out, or 4009: a node failed during it).
    drop_unclear: bool,
    /// An earlier DROP INDEX of the bank's index got no answer, or 4009/4012 (a 4243 is then
    /// no failure).
    index_drop_unclear: bool,
    /// An earlier CREATE INDEX of the bank's index got no answer, or 4009/4012: it may have
    /// made the index (a 721 is then no failure).
    index_unclear: bool,
    rng: Rng,
    phase: Phase,
    /// Data nodes of the config, in id order.
    data_nodes: Vec<NodeId>,
    /// Data nodes whose link is up, as this client knows it.
    links_up: BTreeSet<NodeId>,
    /// Data nodes that said they stop (NODE_STOPPING_REP) over their present link: new
    /// transactions go to another replica while one is up.
    stopping: BTreeSet<NodeId>,
    /// Data nodes whose link came back while the client ran, and when the client next asks
    /// each whether it serves (API_REGREQ): as the API hands over a data node's new link only
    /// once it says so, the client uses it only then (a node that restarts and is not let in
    /// yet has a link, and serves nothing).
    registering: BTreeMap<NodeId, u64>,
    next_request_id: u32,
    request: Option<Request>,
    /// When the next operation may start (think time, retries).
    resume_ns: u64,
    /// Attempts of the current final read.
    attempts: u32,
    /// `Shared::cluster_downs` when the final reads began.
    final_downs: u32,
    /// The value this client's last read returned (for `Sabotage::Registers`).
    last_read: Option<i64>,
    think_ns_max: u64,
    /// The bank's full read being done as a scan.
    scan: Option<ScanRead>,
    /// See [`Knobs::scan_reads`].
    scan_reads: bool,
    scan_batch_rows: u32,
    /// Client 0 is the arbitrator (its slot has ArbitrationRank 1): the decisions it made, as
    /// an API node keeps them (`rndb_protocol::qmgr::ArbiterState`).
    arbiter: Option<ArbiterState>,
}

impl Client {
    pub fn new(
        index: usize,
        node: NodeId,
        data_nodes: Vec<NodeId>,
        rng: Rng,
        knobs: &Knobs,
    ) -> Client {
        Client {
            node,
            index,
            rng,
            phase: Phase::Registering(0),
            links_up: data_nodes.iter().copied().collect(),
            stopping: BTreeSet::new(),
            registering: BTreeMap::new(),
            data_nodes,
            next_request_id: 1,
            request: None,
            resume_ns: 0,
            attempts: 0,
            final_downs: 0,
            last_read: None,
            think_ns_max: knobs.think_ns_max,
            scan: None,
            scan_reads: knobs.scan_reads,
            scan_batch_rows: knobs.scan_batch_rows,
            arbiter: (index == ARBITRATOR).then(ArbiterState::default),
            drop_unclear: false,
            index_unclear: false,
            index_drop_unclear: false,
        }
    }

    pub fn is_alive(&self) -> bool {
        self.phase != Phase::Dead
    }

    /// True once a data node's president made this client the arbitrator.
    pub fn arbitrator_started(&self) -> bool {
        self.arbiter.as_ref().is_some_and(ArbiterState::has_ticket)
    }

    /// True when the client has nothing outstanding (the workload may end).
    pub fn is_idle(&self) -> bool {
        self.request.is_none()
    }

    /// A wake-up: start what is due, or time out the outstanding request.
    pub fn on_wake(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(request) = &self.request {
            if ctx.now_ns >= request.deadline_ns {
                let what = format!(
                    "liveness: client {} got no answer from data node {} to request {} ({:?}) in {} s",
                    self.node,
                    request.to,
                    request.request_id,
                    request.kind,
                    REQUEST_TIMEOUT_NS / 1_000_000_000
                );
                // A durable commit waits for a save that a node group whose disks all failed
                // cannot make (both nodes stay, each its group's last serving member, until
                // an operator starts another): its outcome is unknown, not a hang, when TC's
                // own bound (4012 after twice TimeBetweenGlobalCheckpointsTimeout) is longer
                // than the client's (see `World::saves_stuck`).
                // A schema change's answer waits for a durable global checkpoint too
                // (`answer_applied`), with no bound of its own: while a node group cannot
                // save (its disks failed), its wait is no hang either.
                let drop_unsaved = matches!(
                    request.kind,
                    Kind::DropTable | Kind::CreateBankIndex | Kind::DropBankIndex
                ) && ctx.shared.group_cannot_save;
                let unsaved = drop_unsaved
                    || (request.commit_sent
                        && ctx.shared.durable_commits
                        && ctx.shared.saves_stuck);
                if !ctx.shared.hangs_expected && !unsaved {
                    ctx.shared.fail(what);
                    return;
                }
                self.end_request(ctx, Ended::TimedOut);
            }
            return;
        }
        if ctx.now_ns >= self.resume_ns {
            self.next(ctx);
        }
    }

    /// Starts the next request of the client's phase (first, while it runs, an API_REGREQ to
    /// a data node whose link came back).
    fn next(&mut self, ctx: &mut Ctx<'_>) {
        let runs = match self.phase {
            Phase::Running => !ctx.shared.stopping,
            phase => matches!(
                phase,
                Phase::FinalAudit
                    | Phase::FinalBankIndex(_)
                    | Phase::FinalLedger(_)
                    | Phase::FinalRead(_)
                    | Phase::FinalSetRead
                    | Phase::BackupCheck(_)
            ),
        };
        let final_phase = runs && self.phase != Phase::Running;
        if final_phase && ctx.shared.cluster_downs != self.final_downs {
            // A step of the final reads (or its retry) after the cluster went down: they begin
            // again (see `final_stage_done`; seed 0xc701ece: the backups' check, retried
            // across a cluster crash, compared the restored backup with a value read before).
            if ctx.shared.trace {
                let line = "the cluster went down during the final reads: they begin again";
                ctx.shared.log.push(line.into());
            }
            self.final_from_start(ctx);
        }
        let due = (self.registering.iter()).find(|&(_, &at)| at <= ctx.now_ns);
        if let (true, Some((&node, _))) = (runs, due) {
            return self.send_request(
                ctx,
                node,
                Kind::RegReqAgain { node },
                lgsn::API_REGREQ,
                block::QMGR,
                Vec::new(),
            );
        }
        match self.phase {
            Phase::Registering(i) => match self.data_nodes.get(i).copied() {
                Some(node) if self.links_up.contains(&node) => self.send_request(
                    ctx,
                    node,
                    Kind::RegReq,
                    lgsn::API_REGREQ,
                    block::QMGR,
                    Vec::new(),
                ),
                Some(_) => {
                    self.phase = Phase::Registering(i + 1);
                    self.next(ctx)
                }
                None if self.index == 0 => {
                    self.phase = Phase::Creating(0);
                    self.next(ctx)
                }
                None => {
                    self.phase = Phase::WaitingForTables;
                    self.next(ctx)
                }
            },
            Phase::Creating(which) => self.create_table(ctx, which, false),
            Phase::Populating(which) => self.populate(ctx, which),
            Phase::WaitingForTables => {
                if ctx.shared.ready {
                    self.phase = Phase::Running;
                    self.next(ctx)
                } else {
                    self.resume_after(ctx, RETRY_NS);
                }
            }
            Phase::Running => {
                if self.drop_due(ctx) && !ctx.shared.stopping {
                    self.drop_scratch(ctx);
                } else if self.index_due(ctx) && !ctx.shared.stopping {
                    self.create_bank_index(ctx);
                } else if self.index_drop_due(ctx) && !ctx.shared.stopping {
                    self.drop_bank_index(ctx);
                } else if !ctx.shared.stopping {
                    self.start_operation(ctx);
                }
            }
            Phase::FinalAudit => self.audit(ctx),
            Phase::FinalBankIndex(None) => self.get_bank_index(ctx),
            Phase::FinalBankIndex(Some(from)) => self.final_index_read(ctx, from),
            Phase::FinalLedger(from) => self.final_ledger_read(ctx, from),
            Phase::FinalRead(key) => self.register_read(ctx, key, LockMode::Read),
            Phase::FinalSetRead => self.final_set_read(ctx),
            Phase::BackupCheck(which) => self.backup_read(ctx, which),
            Phase::Done | Phase::Dead => {}
        }
    }

    /// Client 0, once every client is idle after the workload: the final reads.
    pub fn start_final(&mut self, ctx: &mut Ctx<'_>) {
        self.final_from_start(ctx);
        self.resume_ns = ctx.now_ns;
        self.next(ctx);
    }

    /// The final reads begin (again), forgetting what earlier ones read.
    fn final_from_start(&mut self, ctx: &mut Ctx<'_>) {
        self.phase = final_phases(ctx.shared)[0];
        self.attempts = 0;
        self.final_downs = ctx.shared.cluster_downs;
        ctx.shared.final_rows.clear();
        ctx.shared.ledger_rows.clear();
    }

    /// Moves on to the final phase after `stage` (the final phases run in a fixed order, those
    /// of absent workloads left out). After the cluster went down meanwhile, they begin again:
    /// a value read before may be of a GCI the restart did not restore, and the replicas'
    /// check compared it with the restored backup (seed 0xa606a66).
    fn final_stage_done(&mut self, ctx: &mut Ctx<'_>, stage: Phase) {
        if ctx.shared.cluster_downs != self.final_downs {
            // `next` begins them again.
            return self.final_step_done(ctx);
        }
        let phases = final_phases(ctx.shared);
        let index = phases.iter().position(|&p| p == stage).unwrap_or(0);
        self.phase = phases.get(index + 1).copied().unwrap_or(Phase::Done);
        self.attempts = 0;
        self.final_step_done(ctx);
    }

    fn create_table(&mut self, ctx: &mut Ctx<'_>, which: usize, retry_on_master: bool) {
        let wanted = ctx.shared.creates();
        if which == SET_INDEX && ctx.shared.sets {
            return self.create_index(ctx);
        }
        let scratch = which == SCRATCH && ctx.shared.drop_at_ns.is_some();
        if which >= wanted.len() && !scratch {
            if which < SCRATCH {
                self.phase = Phase::Creating(SCRATCH);
            } else {
                self.phase = Phase::Populating(0);
            }
            return self.next(ctx);
        }
        if !scratch && !wanted[which] {
            self.phase = Phase::Creating(which + 1);
            return self.next(ctx);
        }
        let def = table_def(which);
        let mut payload = Vec::new();
        signals::encode_table_def(&mut payload, &def);
        // The DICT master is the live data node with the lowest id; the first table of some
        // seeds goes to another node first, which must refuse it with 702.
        // A client whose link to the master is not up yet (issue 21 item 10) asks the first
        // data node it has a link to, which refuses with 702 until the link comes up.
        let master = self.data_nodes[0];
        let non_master = *self.data_nodes.last().unwrap_or(&master);
        let reachable = self.reachable();
        let to = if which == first_table(ctx.shared)
            && !retry_on_master
            && ctx.shared.schema_to_non_master
        {
            non_master
        } else {
            reachable
        };
        let at_non_master = to != master;
        self.send_request(
            ctx,
            to,
            Kind::CreateTable {
                which,
                at_non_master,
            },
            gsn::CREATE_TABLE_REQ,
            block::DBDICT,
            payload,
        );
    }

    /// A unique hash index on the set's value column, at the first data node this client
    /// reaches (the master, or one that refuses with 702 until the master's link is up).
    fn create_index(&mut self, ctx: &mut Ctx<'_>) {
        let mut payload = Vec::new();
        CreateIndexReq {
            table: table_def(SETS).name,
            index: "elements_value".into(),
            kind: IndexKind::Unique,
            columns: vec!["value".into()],
        }
        .encode(&mut payload);
        self.send_to_dict(ctx, Kind::CreateIndex, gsn::CREATE_INDEX_REQ, payload);
    }

    fn populate(&mut self, ctx: &mut Ctx<'_>, which: usize) {
        let tables = ctx.shared.tables.clone().unwrap_or_default();
        let (table, rows) = match which {
            BANK | REGISTERS | SETS | LEDGER => {
                (tables.get(which).cloned(), ctx.shared.initial_rows(which))
            }
            _ => {
                self.phase = Phase::Running;
                ctx.shared
                    .log
                    .push(format!("client {}: tables ready", self.node));
                ctx.shared.ready = true;
                ctx.shared.running_since_ns = ctx.now_ns;
                return self.next(ctx);
            }
        };
        let Some(table) = table.filter(|_| rows > 0) else {
            self.phase = Phase::Populating(which + 1);
            return self.next(ctx);
        };
        let value = if which == BANK { INITIAL_BALANCE } else { 0 };
        let ops: Vec<KeyOp> = (0..rows)
            .map(|id| KeyOp::write(&table, OperationType::Insert, id, value))
            .collect();
        self.send_transaction(ctx, Kind::Populate { which }, &ops, ExecType::Commit, true);
    }

    /// Registers the created tables where the other clients find them (instead of a
    /// GET_TABINFO_REQ each: the definition is the one client 0 got back).
    fn table_created(&mut self, ctx: &mut Ctx<'_>, which: usize, info: TableInfo) {
        let tables = ctx.shared.tables.get_or_insert_with(Tables::default);
        match which {
            BANK => tables.bank = Some(info),
            REGISTERS => tables.registers = Some(info),
            LEDGER => tables.ledger = Some(info),
            SCRATCH => {
                tables.scratch_id = Some(info.table_id);
                tables.scratch = Some(info);
            }
            _ => tables.sets = Some(info),
        }
    }

    fn start_operation(&mut self, ctx: &mut Ctx<'_>) {
        let which = match ctx.shared.wanted() {
            // The draws of the bank and register workloads, alone or together, as before the
            // set workload came.
            [true, true, false] => {
                if self.rng.coin() {
                    BANK
                } else {
                    REGISTERS
                }
            }
            [true, _, false] => BANK,
            [false, true, false] => REGISTERS,
            [false, false, _] => SETS,
            [bank, registers, _] => {
                let choices: Vec<usize> = [(bank, BANK), (registers, REGISTERS), (true, SETS)]
                    .iter()
                    .filter(|(on, _)| *on)
                    .map(|(_, w)| *w)
                    .collect();
                self.pick(&choices)
            }
        };
        if which == BANK {
            return if self.rng.below(5) == 0 {
                self.audit(ctx)
            } else {
                self.transfer(ctx)
            };
        }
        let keys = u64::from(ctx.shared.keys(which));
        let start = self.rng.below(keys);
        let key = (0..keys).map(|i| ((start + i) % keys) as u16).find(|&k| {
            ctx.shared.key_ops.get(&(which, k)).copied().unwrap_or(0) < KEY_OPS_WORKLOAD_MAX
        });
        let Some(key) = key else {
            return;
        };
        if which == REGISTERS {
            return match self.rng.below(3) {
                0 => self.register_write(ctx, key),
                1 => self.register_read(ctx, key, LockMode::CommittedRead),
                _ => self.register_read(ctx, key, LockMode::Read),
            };
        }
        let mut access = match self.rng.below(9) {
            0..=2 => Access::Insert,
            3..=5 => Access::Delete,
            6..=7 => Access::Read,
            _ => Access::IndexRead {
                value: 0,
                locked: false,
            },
        };
        let locked = self.rng.coin();
        let lock = if locked {
            LockMode::Read
        } else {
            LockMode::CommittedRead
        };
        let mut key = key;
        if let Access::IndexRead { .. } = access {
            let inserted = &ctx.shared.inserted_values;
            if inserted.is_empty() {
                return self.set_op(ctx, key, Access::Read, lock);
            }
            // One of the latest inserts, most of which are still there.
            let recent = inserted.len().min(RECENT_INSERTS);
            let pick = inserted.len() - 1 - self.rng.below(recent as u64) as usize;
            let (element, value) = inserted[pick];
            if ctx
                .shared
                .key_ops
                .get(&(SETS, element))
                .copied()
                .unwrap_or(0)
                >= KEY_OPS_WORKLOAD_MAX
            {
                return self.set_op(ctx, key, Access::Read, lock);
            }
            key = element;
            access = Access::IndexRead { value, locked };
        }
        self.set_op(ctx, key, access, lock);
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.below(items.len() as u64) as usize]
    }

    /// One insert, delete or read of a set element, in a transaction of its own.
    fn set_op(&mut self, ctx: &mut Ctx<'_>, key: u16, access: Access, lock: LockMode) {
        let Some(table) = ctx.shared.tables.as_ref().and_then(|t| t.sets.clone()) else {
            return;
        };
        let record = self.record(ctx, SETS, key, access);
        let op = match access {
            Access::Insert => {
                let value = (i64::from(self.node.0) << 32) | i64::from(self.next_request_id);
                ctx.shared.inserted_values.push((key, value));
                KeyOp::write(&table, OperationType::Insert, key, value)
            }
            Access::IndexRead { value, .. } => {
                let Some(index) = ctx.shared.tables.as_ref().and_then(|t| t.set_index.clone())
                else {
                    return;
                };
                KeyOp {
                    signal: gsn::TCINDXREQ,
                    table_id: index.index_id,
                    table_version: index.index_version,
                    key: vec![Value::Int64(value)],
                    ..KeyOp::read(&table, key, lock)
                }
            }
            Access::Delete => KeyOp {
                attrs: Vec::new(),
                // Every other delete is an interpreted one whose condition every element
                // meets (its value is never NULL): the same outcomes, through the program.
                program: self.next_request_id.is_multiple_of(2).then(|| Program {
                    condition: Some(Filter::IsNotNull(1)),
                    ..Program::default()
                }),
                ..KeyOp::write(&table, OperationType::Delete, key, 0)
            },
            // Every other read is an interpreted one whose condition every element meets.
            _ => KeyOp {
                program: self.next_request_id.is_multiple_of(2).then(|| Program {
                    condition: Some(Filter::IsNotNull(1)),
                    ..Program::default()
                }),
                ..KeyOp::read(&table, key, lock)
            },
        };
        self.send_transaction(ctx, Kind::SetOp { record }, &[op], ExecType::Commit, true);
    }

    /// The final read of the set: every key of its space, in one transaction under shared
    /// locks, a missing row refused (626) without failing the others (IgnoreError).
    fn final_set_read(&mut self, ctx: &mut Ctx<'_>) {
        let Some(table) = ctx.shared.tables.as_ref().and_then(|t| t.sets.clone()) else {
            return;
        };
        let ops: Vec<KeyOp> = (0..ctx.shared.set_keys)
            .map(|id| KeyOp::read(&table, id, LockMode::Read))
            .collect();
        self.send_transaction_with(
            ctx,
            Kind::FinalSetRead,
            &ops,
            ExecType::Commit,
            AbortOption::IgnoreError,
        );
    }

    fn bank_table(ctx: &Ctx<'_>) -> Option<TableInfo> {
        ctx.shared.tables.as_ref()?.bank.clone()
    }

    fn register_table(ctx: &Ctx<'_>) -> Option<TableInfo> {
        ctx.shared.tables.as_ref()?.registers.clone()
    }

    /// A transfer's first half: read both accounts under exclusive locks (NoCommit).
    fn transfer(&mut self, ctx: &mut Ctx<'_>) {
        let Some(table) = Self::bank_table(ctx) else {
            return;
        };
        let accounts = u64::from(ctx.shared.accounts);
        let a = self.rng.below(accounts) as u16;
        let b = ((u64::from(a) + self.rng.between(1, accounts - 1)) % accounts) as u16;
        let amount = self.rng.between(1, TRANSFER_MAX) as i64;
        let mut ops = vec![
            KeyOp::read(&table, a, LockMode::Exclusive),
            KeyOp::read(&table, b, LockMode::Exclusive),
        ];
        // With `Fault::Drop`, the transfer's transaction also holds a scratch row from here
        // to its commit: the scratch table's drop must wait for it.
        let scratch = (ctx.shared.tables.as_ref()).and_then(|t| t.scratch.clone());
        if let Some(scratch) = &scratch {
            ops.push(KeyOp::write(scratch, OperationType::Write, a, amount));
        }
        let kind = Kind::TransferRead {
            a,
            b,
            amount,
            scratch: scratch.is_some(),
        };
        self.send_transaction(ctx, kind, &ops, ExecType::NoCommit, true);
    }

    /// A full read of the bank in one transaction, under shared locks; in seeds with scan
    /// reads mostly a table scan (the final one always), under shared or exclusive locks or
    /// as committed reads.
    fn audit(&mut self, ctx: &mut Ctx<'_>) {
        let is_final = self.phase == Phase::FinalAudit;
        if self.scan_reads && (is_final || self.rng.below(4) != 0) {
            let lock = if is_final {
                LockMode::Read
            } else {
                self.pick(&[LockMode::Read, LockMode::Exclusive, LockMode::CommittedRead])
            };
            return self.scan_bank(ctx, lock, None);
        }
        let Some(table) = Self::bank_table(ctx) else {
            return;
        };
        let ops: Vec<KeyOp> = (0..ctx.shared.accounts)
            .map(|id| KeyOp::read(&table, id, LockMode::Read))
            .collect();
        self.send_transaction(ctx, Kind::Audit, &ops, ExecType::Commit, true);
    }

    /// Starts a scan of the bank (through ordered index `index`, else the table) at the first
    /// data node this client has a link to that did not say it stops (else the first), which
    /// becomes the transaction's TC.
    fn scan_bank(&mut self, ctx: &mut Ctx<'_>, lock: LockMode, index: Option<(u32, u32)>) {
        let mut nodes: Vec<NodeId> = self
            .data_nodes
            .iter()
            .copied()
            .filter(|n| self.links_up.contains(n))
            .collect();
        if let Some(i) = nodes.iter().position(|n| !self.stopping.contains(n)) {
            let tc = nodes.remove(i);
            nodes.insert(0, tc);
        }
        let trans_request_id = self.new_request_id();
        self.scan = Some(ScanRead {
            trans_request_id,
            lock,
            nodes,
            at: 0,
            scan_id: 0,
            confirmed: 0,
            rows: Vec::new(),
            index,
        });
        self.scan_part(ctx);
    }

    /// Sends SCAN_TABREQ to the scan's current node.
    fn scan_part(&mut self, ctx: &mut Ctx<'_>) {
        let (Some(table), Some(scan)) = (Self::bank_table(ctx), self.scan.as_mut()) else {
            return;
        };
        let Some(&to) = scan.nodes.get(scan.at) else {
            // No link to any data node: the read fails unsent.
            return self.scan_failed(ctx, &Ended::Lost);
        };
        let req = ScanTabReq {
            flags: if scan.at == 0 {
                SCAN_FLAG_START_TRANSACTION
            } else {
                SCAN_FLAG_START_TRANSACTION | SCAN_FLAG_PART
            },
            trans_request_id: scan.trans_request_id,
            table_id: table.table_id,
            table_version: table.table_version,
            index_id: scan.index.map_or(0, |i| i.0),
            index_version: scan.index.map_or(0, |i| i.1),
            lock_mode: scan.lock,
            parallelism: 0,
            batch_rows: self.scan_batch_rows,
            batch_bytes: SCAN_BATCH_BYTES_MAX,
            batch_bytes_total: SCAN_BATCH_BYTES_MAX,
            ranges: Vec::new(),
            filter: None,
            alive: scan.nodes.iter().map(|n| n.0).collect(),
        };
        let mut payload = Vec::new();
        req.encode(&mut payload);
        let scan_id = self.next_request_id;
        if let Some(scan) = self.scan.as_mut() {
            scan.scan_id = scan_id;
        }
        self.log_scan(ctx, to, "SCAN_TABREQ");
        self.send_request(
            ctx,
            to,
            Kind::ScanBatch,
            gsn::SCAN_TABREQ,
            block::DBTC,
            payload,
        );
    }

    fn log_scan(&self, ctx: &mut Ctx<'_>, to: NodeId, what: &str) {
        if let (true, Some(scan)) = (ctx.shared.trace, &self.scan) {
            ctx.shared.log.push(format!(
                "client {}: scan of transaction {} ({:?}) at {to}: {what} (scan {})",
                self.node, scan.trans_request_id, scan.lock, scan.scan_id
            ));
        }
    }

    /// A scan batch ended.
    fn scan_batch_ended(&mut self, ctx: &mut Ctx<'_>, request: &Request, ended: Ended) {
        let Ended::Conf(payload) = &ended else {
            return self.scan_failed(ctx, &ended);
        };
        let conf = match ScanTabConf::decode(payload) {
            Ok(conf) => conf,
            Err(e) => return ctx.shared.fail(format!("SCAN_TABCONF: {e}")),
        };
        let Some(scan) = self.scan.as_mut() else {
            return;
        };
        if !conf.finished {
            ctx.shared.stats.scan_next_requests += 1;
            let mut payload = Vec::new();
            ScanNextReq {
                scan_id: scan.scan_id,
                close: false,
                fragments: Vec::new(),
            }
            .encode(&mut payload);
            self.log_scan(ctx, request.to, "SCAN_NEXTREQ");
            return self.send_request(
                ctx,
                request.to,
                Kind::ScanBatch,
                gsn::SCAN_NEXTREQ,
                block::DBTC,
                payload,
            );
        }
        scan.at += 1;
        if scan.at < scan.nodes.len() {
            return self.scan_part(ctx);
        }
        self.scan_confirm_or_commit(ctx);
    }

    /// Every node's part is read. A locked scan's parts at nodes other than the TC are asked,
    /// one after the other, whether they still hold their locks (see [`ScanRead`]); then the
    /// transaction commits at the TC (which releases the locks there).
    fn scan_confirm_or_commit(&mut self, ctx: &mut Ctx<'_>) {
        let Some(scan) = self.scan.as_mut() else {
            return;
        };
        if scan.lock != LockMode::CommittedRead && scan.confirmed + 1 < scan.nodes.len() {
            scan.confirmed += 1;
            let (node, trans) = (scan.nodes[scan.confirmed], scan.trans_request_id);
            self.log_scan(ctx, node, "confirm the part's locks");
            self.send_end(ctx, node, trans, ExecType::NoCommit);
            return self.expect(ctx, trans, node, Kind::ScanConfirm, false);
        }
        let (tc, trans) = (scan.nodes[0], scan.trans_request_id);
        let header = FrameHeader {
            signal: gsn::TC_EXECUTE_REQ,
            receiver_block: block::DBTC,
            sender_block: block::API,
            request_id: trans,
        };
        let mut payload = Vec::new();
        TcExecuteReq {
            flags: 0,
            exec_type: ExecType::Commit,
            abort_option: AbortOption::AbortOnError,
            op_count: 0,
        }
        .encode(&mut payload);
        ctx.sends.push((tc, header, payload));
        self.expect(ctx, trans, tc, Kind::ScanCommit, false);
    }

    /// The scan's transaction committed at its TC: the other nodes hear of it (nobody waits),
    /// and the rows are checked.
    fn scan_committed(&mut self, ctx: &mut Ctx<'_>, ended: Ended, think: u64) {
        let Ended::Conf(_) = ended else {
            return self.scan_failed(ctx, &ended);
        };
        let Some(scan) = self.scan.take() else {
            return;
        };
        for &node in &scan.nodes[1..] {
            self.send_end(ctx, node, scan.trans_request_id, ExecType::Commit);
        }
        let is_final = self.phase == Phase::FinalAudit;
        let accounts = usize::from(ctx.shared.accounts);
        let mut rows = scan.rows.clone();
        rows.sort_unstable();
        let ids: BTreeSet<i32> = rows.iter().map(|(id, _)| *id).collect();
        let described = format!(
            "a full read as a {:?} scan of data nodes {:?}",
            scan.lock, scan.nodes
        );
        if ids.len() != rows.len() || ids.len() != accounts {
            return ctx.shared.fail(format!(
                "bank: client {}: {described} returned {} rows for {} accounts of {accounts}: {rows:?}",
                self.node,
                rows.len(),
                ids.len()
            ));
        }
        if scan.lock == LockMode::CommittedRead {
            ctx.shared.stats.scan_audits_committed += 1;
            ctx.shared.committed_scans.push(CommittedScan {
                client: self.node.0,
                at_ns: ctx.now_ns,
                rows,
            });
            return self.resume_after(ctx, think);
        }
        if scan.index.is_some() {
            // The final check through the ordered index: every account at its final balance.
            let expected: Vec<(i32, i64)> =
                (ctx.shared.final_rows.range((BANK, 0)..=(BANK, i32::MAX)))
                    .map(|(&(_, id), &balance)| (id, balance))
                    .collect();
            if rows != expected {
                return ctx.shared.fail(format!(
                    "bank: {described} through ordered index {BANK_INDEX} returned {rows:?}, the final audit {expected:?}"
                ));
            }
            return self.final_stage_done(ctx, Phase::FinalBankIndex(None));
        }
        if let Err(e) = check::check_bank(&rows, accounts, ctx.shared.total) {
            return ctx
                .shared
                .fail(format!("bank: client {}: {described}: {e}", self.node));
        }
        ctx.shared.stats.scan_audits_locked += 1;
        ctx.shared.stats.audits_ok += 1;
        if is_final {
            for &(id, balance) in &rows {
                ctx.shared.final_rows.insert((BANK, id), balance);
            }
            return self.final_stage_done(ctx, Phase::FinalAudit);
        }
        self.resume_after(ctx, think);
    }

    /// A scan failed (refused, a link lost, the commit refused): its transaction is rolled
    /// back at every node it reached, nobody waiting.
    fn scan_failed(&mut self, ctx: &mut Ctx<'_>, ended: &Ended) {
        if ctx.shared.trace {
            ctx.shared.log.push(format!(
                "client {}: the scan {:?} failed: {ended:?}",
                self.node, self.scan
            ));
        }
        let mut unsent = false;
        if let Some(scan) = self.scan.take() {
            unsent = scan.nodes.is_empty();
            let reached = scan.nodes.len().min(scan.at + 1);
            for &node in &scan.nodes[..reached] {
                self.send_end(ctx, node, scan.trans_request_id, ExecType::Rollback);
            }
        }
        ctx.shared.stats.scan_audits_failed += 1;
        if self.phase == Phase::FinalAudit {
            return self.final_retry(ctx, "the final full read of the bank (a scan)", ended);
        }
        if let Phase::FinalBankIndex(_) = self.phase {
            return self.final_retry(ctx, "the final scan through the bank index", ended);
        }
        let mut think = self.rng.between(0, self.think_ns_max);
        if unsent || matches!(ended, Ended::Refused(4009)) {
            // As in `end_request`: the cluster is restarting, or no link is up.
            think = think.max(RETRY_NS);
        }
        self.resume_after(ctx, think);
    }

    /// Sends transaction `request_id` an empty execute `exec` at `node`; for a commit or a
    /// rollback nobody waits for the answer.
    fn send_end(&mut self, ctx: &mut Ctx<'_>, node: NodeId, request_id: u32, exec: ExecType) {
        let header = FrameHeader {
            signal: gsn::TC_EXECUTE_REQ,
            receiver_block: block::DBTC,
            sender_block: block::API,
            request_id,
        };
        let mut payload = Vec::new();
        TcExecuteReq {
            flags: 0,
            exec_type: exec,
            abort_option: AbortOption::AbortOnError,
            op_count: 0,
        }
        .encode(&mut payload);
        ctx.sends.push((node, header, payload));
    }

    fn register_write(&mut self, ctx: &mut Ctx<'_>, key: u16) {
        let Some(table) = Self::register_table(ctx) else {
            return;
        };
        // Unique: this client's id above its own request counter.
        let value = (i64::from(self.node.0) << 32) | i64::from(self.next_request_id);
        let record = self.record(ctx, REGISTERS, key, Access::Write(value));
        let ops = [KeyOp::write(&table, OperationType::Update, key, value)];
        self.send_transaction(ctx, Kind::RegWrite { record }, &ops, ExecType::Commit, true);
    }

    fn register_read(&mut self, ctx: &mut Ctx<'_>, key: u16, lock: LockMode) {
        let Some(table) = Self::register_table(ctx) else {
            return;
        };
        let record = self.record(ctx, REGISTERS, key, Access::Read);
        let ops = [KeyOp::read(&table, key, lock)];
        self.send_transaction(ctx, Kind::RegRead { record }, &ops, ExecType::Commit, true);
    }

    fn record(&mut self, ctx: &mut Ctx<'_>, table: usize, key: u16, access: Access) -> usize {
        *ctx.shared.key_ops.entry((table, key)).or_default() += 1;
        ctx.shared.history.push(Record {
            table,
            key,
            access,
            client: self.node.0,
            invoke_ns: ctx.now_ns,
            complete_ns: 0,
            outcome: Outcome::Pending,
            gci: None,
        });
        ctx.shared.history.len() - 1
    }

    /// Sends one execute of key operations to the TC of the first key's partition (a fresh
    /// transaction when `starts`), aborting on the first failed operation.
    fn send_transaction(
        &mut self,
        ctx: &mut Ctx<'_>,
        kind: Kind,
        ops: &[KeyOp],
        exec: ExecType,
        starts: bool,
    ) {
        self.send_execute(ctx, kind, ops, exec, starts, AbortOption::AbortOnError);
    }

    /// A fresh transaction of key operations with the abort option `abort`.
    fn send_transaction_with(
        &mut self,
        ctx: &mut Ctx<'_>,
        kind: Kind,
        ops: &[KeyOp],
        exec: ExecType,
        abort: AbortOption,
    ) {
        self.send_execute(ctx, kind, ops, exec, true, abort);
    }

    fn send_execute(
        &mut self,
        ctx: &mut Ctx<'_>,
        kind: Kind,
        ops: &[KeyOp],
        exec: ExecType,
        starts: bool,
        abort: AbortOption,
    ) {
        let tc = if starts {
            // A read through a unique index goes to any data node when no replica of its
            // index key's partition is linked: the base row's may be.
            self.tc_of(ctx.shared, &ops[0].key).or_else(|| {
                (ops[0].signal == gsn::TCINDXREQ)
                    .then(|| {
                        self.data_nodes
                            .iter()
                            .copied()
                            .find(|n| self.links_up.contains(n))
                    })
                    .flatten()
            })
        } else {
            self.request.as_ref().map(|r| r.to)
        };
        let request_id = if starts {
            self.new_request_id()
        } else {
            self.request.as_ref().map_or(0, |r| r.request_id)
        };
        let Some(tc) = tc else {
            // No live replica of the key's partition: the operation fails unsent.
            self.request = Some(Request {
                request_id,
                to: NodeId(0),
                kind,
                deadline_ns: u64::MAX,
                commit_sent: false,
                sent_ns: ctx.now_ns,
                rows: BTreeMap::new(),
                refused: BTreeMap::new(),
            });
            return self.end_request(ctx, Ended::Lost);
        };
        let header = FrameHeader {
            signal: gsn::TCKEYREQ,
            receiver_block: block::DBTC,
            sender_block: block::API,
            request_id,
        };
        for (op_index, op) in ops.iter().enumerate() {
            let mut payload = Vec::new();
            TcKeyReqRef {
                flags: if starts && op_index == 0 {
                    FLAG_START_TRANSACTION
                } else {
                    0
                },
                op_index: op_index as u32,
                op_type: op.op_type,
                lock_mode: op.lock_mode,
                table_id: op.table_id,
                table_version: op.table_version,
                replica: op.replica,
                key: &op.key,
                attrs: &op.attrs,
                program: op.program.as_ref(),
            }
            .encode(&mut payload);
            if op_index + 1 == ops.len() {
                let durable = exec == ExecType::Commit && ctx.shared.durable_commits;
                TcExecuteReq {
                    flags: if starts { FLAG_START_TRANSACTION } else { 0 }
                        | if durable { FLAG_DURABLE_COMMIT } else { 0 },
                    exec_type: exec,
                    abort_option: abort,
                    op_count: ops.len() as u32,
                }
                .append_to_key_req(&mut payload, 0);
            }
            let header = FrameHeader {
                signal: op.signal,
                ..header
            };
            ctx.sends.push((tc, header, payload));
        }
        if ctx.shared.trace {
            let described: Vec<String> = ops
                .iter()
                .map(|op| {
                    format!(
                        "{:?} {:?} {:?} {:?}",
                        op.op_type, op.lock_mode, op.key, op.attrs
                    )
                })
                .collect();
            ctx.shared.log.push(format!(
                "client {}: request {request_id} at {tc} ({kind:?}, {exec:?}): {}",
                self.node,
                described.join("; ")
            ));
        }
        self.expect(ctx, request_id, tc, kind, exec == ExecType::Commit);
    }

    /// Ends the open transaction `request_id` at `tc` with a rollback; `wait` keeps it as the
    /// outstanding request (otherwise nobody waits for the answer).
    fn send_rollback(&mut self, ctx: &mut Ctx<'_>, tc: NodeId, request_id: u32, wait: bool) {
        let header = FrameHeader {
            signal: gsn::TC_EXECUTE_REQ,
            receiver_block: block::DBTC,
            sender_block: block::API,
            request_id,
        };
        let mut payload = Vec::new();
        TcExecuteReq {
            flags: 0,
            exec_type: ExecType::Rollback,
            abort_option: AbortOption::AbortOnError,
            op_count: 0,
        }
        .encode(&mut payload);
        ctx.sends.push((tc, header, payload));
        if wait {
            self.expect(ctx, request_id, tc, Kind::Rollback, false);
        }
    }

    fn send_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        to: NodeId,
        kind: Kind,
        signal: u16,
        receiver_block: u16,
        payload: Vec<u8>,
    ) {
        let request_id = self.new_request_id();
        let header = FrameHeader {
            signal,
            receiver_block,
            sender_block: block::API,
            request_id,
        };
        ctx.sends.push((to, header, payload));
        self.expect(ctx, request_id, to, kind, false);
    }

    fn expect(&mut self, ctx: &mut Ctx<'_>, request_id: u32, to: NodeId, kind: Kind, commit: bool) {
        let deadline_ns = ctx.now_ns + REQUEST_TIMEOUT_NS;
        self.request = Some(Request {
            request_id,
            to,
            kind,
            deadline_ns,
            commit_sent: commit,
            sent_ns: ctx.now_ns,
            rows: BTreeMap::new(),
            refused: BTreeMap::new(),
        });
        ctx.wakes.push(deadline_ns);
    }

    fn new_request_id(&mut self) -> u32 {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }

    /// The TC of a transaction whose first key is `key`: the first replica of its partition
    /// whose link is up (the primary, or the backup that took over), passing over one that
    /// said it stops while another is up.
    fn tc_of(&self, shared: &Shared, key: &[Value]) -> Option<NodeId> {
        let mut bytes = Vec::new();
        let mut w = Writer::new(&mut bytes);
        for value in key {
            value.encode(&mut w);
        }
        let partition = shared.partitions.partition_of(key_hash(&bytes));
        let replicas = shared.partitions.replicas(partition);
        let up = |n: &&NodeId| self.links_up.contains(n);
        (replicas.iter().filter(up))
            .find(|n| !self.stopping.contains(n))
            .or_else(|| replicas.iter().find(up))
            .copied()
    }

    fn resume_after(&mut self, ctx: &mut Ctx<'_>, delay_ns: u64) {
        self.resume_ns = ctx.now_ns + delay_ns;
        ctx.wakes.push(self.resume_ns);
    }

    /// A frame from data node `from`.
    pub fn on_frame(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: NodeId,
        header: &FrameHeader,
        payload: &[u8],
    ) {
        if self.phase == Phase::Dead {
            return;
        }
        if matches!(header.signal, gsn::ARBIT_STARTREQ | gsn::ARBIT_CHOOSEREQ) {
            self.arbitrate(ctx, from, header, payload);
            return;
        }
        if header.signal == gsn::NODE_STOPPING_REP {
            // As the API library: no new transaction there from now on, and the node told so.
            self.stopping.insert(from);
            let conf = FrameHeader {
                signal: gsn::NODE_STOPPING_CONF,
                receiver_block: block::QMGR,
                sender_block: block::API,
                request_id: 0,
            };
            ctx.sends.push((from, conf, Vec::new()));
            return;
        }
        let Some(request) = self.request.as_mut() else {
            return;
        };
        if header.request_id != request.request_id || from != request.to {
            // The late answer of a request given up on (a rollback nobody waits for).
            return;
        }
        let decoded: Result<Option<Ended>, String> = match header.signal {
            lgsn::API_REGCONF
            | gsn::CREATE_TABLE_CONF
            | gsn::CREATE_INDEX_CONF
            | gsn::GET_INDEX_CONF
            | gsn::DROP_INDEX_CONF
            | gsn::DROP_TABLE_CONF
            | gsn::TC_EXECUTE_CONF => Ok(Some(Ended::Conf(payload.to_vec()))),
            gsn::CREATE_TABLE_REF
            | gsn::CREATE_INDEX_REF
            | gsn::GET_INDEX_REF
            | gsn::DROP_INDEX_REF
            | gsn::DROP_TABLE_REF => Refusal::decode(payload)
                .map(|r| Some(Ended::Refused(r.code)))
                .map_err(|e| e.to_string()),
            gsn::TCKEY_ROW => match TcKeyRow::decode(payload) {
                Ok(row) => {
                    request.rows.insert(row.op_index, row.values);
                    Ok(None)
                }
                Err(e) => Err(e.to_string()),
            },
            // The row, then what a TC_EXECUTE_CONF would have said (a commit's GCI).
            gsn::TCKEY_ROW_CONF => match TcKeyRow::decode_conf(payload) {
                Ok((row, gci)) => {
                    request.rows.insert(row.op_index, row.values);
                    let mut conf = Vec::new();
                    TcExecuteConf { gci }.encode(&mut conf);
                    Ok(Some(Ended::Conf(conf)))
                }
                Err(e) => Err(e.to_string()),
            },
            gsn::TCKEYREF => match TcKeyRef::decode(payload) {
                Ok(r) => {
                    request.refused.insert(r.op_index, r.code);
                    Ok(None)
                }
                Err(e) => Err(e.to_string()),
            },
            gsn::TC_EXECUTE_REF => TcExecuteRef::decode(payload)
                .map(|r| {
                    request.refused.insert(r.op_index, r.code);
                    Some(Ended::Refused(r.code))
                })
                .map_err(|e| e.to_string()),
            gsn::SCAN_TABCONF => Ok(Some(Ended::Conf(payload.to_vec()))),
            gsn::SCAN_TABREF => Refusal::decode(payload)
                .map(|r| Some(Ended::Refused(r.code)))
                .map_err(|e| e.to_string()),
            gsn::SCAN_ROWS => self.scan_rows(ctx.shared, payload).map(|()| None),
            other => Err(format!("unexpected signal {other}")),
        };
        match decoded {
            Ok(None) => {}
            Ok(Some(ended)) => self.end_request(ctx, ended),
            Err(e) => ctx.shared.fail(format!(
                "client {} got a malformed answer from data node {from} (signal {}, request {}): {e}",
                self.node, header.signal, header.request_id
            )),
        }
    }

    /// A data node's president asks this client to arbitrate (ARBIT_STARTREQ), or a side's
    /// president asks whether its side goes on (ARBIT_CHOOSEREQ): answered as the API node
    /// answers, from the same state. A client that may not arbitrate does not answer, as an
    /// API node of ArbitrationRank 0.
    fn arbitrate(&mut self, ctx: &mut Ctx<'_>, from: NodeId, header: &FrameHeader, payload: &[u8]) {
        let Some(arbiter) = self.arbiter.as_mut() else {
            return;
        };
        let request = match Arbit::decode(payload) {
            Ok(request) => request,
            Err(e) => {
                return ctx.shared.fail(format!(
                    "client {} got a malformed arbitration request from data node {from} (signal {}): {e}",
                    self.node, header.signal
                ))
            }
        };
        let Some((signal, answer, event)) = arbiter.answer(header.signal, &request) else {
            return;
        };
        if ctx.shared.trace {
            println!(
                "{:>14.6} ms  client {} arbitrates for data node {from}: {event:?}",
                ctx.now_ns as f64 / 1e6,
                self.node
            );
        }
        let mut bytes = Vec::new();
        answer.encode(&mut bytes);
        let header = FrameHeader {
            signal,
            receiver_block: block::QMGR,
            sender_block: block::API,
            request_id: 0,
        };
        ctx.sends.push((from, header, bytes));
    }

    /// Files a SCAN_ROWS frame's rows in the scan.
    fn scan_rows(&mut self, shared: &Shared, payload: &[u8]) -> Result<(), String> {
        let (Some(scan), Some(table)) = (
            self.scan.as_mut(),
            shared.tables.as_ref().and_then(|t| t.bank.as_ref()),
        ) else {
            return Err("SCAN_ROWS without a scan".into());
        };
        decode_scan_rows(payload, &table.def, &mut |_, values| {
            if let (Some(Value::Int32(id)), Some(Value::Int64(balance))) =
                (values.first(), values.get(1))
            {
                scan.rows.push((*id, *balance));
            }
            Ok(())
        })
        .map_err(|e| e.to_string())
    }

    /// The link to data node `node` closed. A scan that read rows there lost their locks
    /// with it, and one that did not yet cannot read the fragments that node is primary of:
    /// either way it fails too.
    pub fn on_link_down(&mut self, ctx: &mut Ctx<'_>, node: NodeId) {
        self.links_up.remove(&node);
        self.stopping.remove(&node);
        self.registering.remove(&node);
        let scanned = self.scan.as_ref().is_some_and(|s| s.nodes.contains(&node));
        if self.request.as_ref().is_some_and(|r| r.to == node) || scanned {
            self.end_request(ctx, Ended::Lost);
        }
    }

    /// The link to data node `node` is not up when the client starts.
    pub fn start_without_link(&mut self, node: NodeId) {
        self.links_up.remove(&node);
    }

    /// The link to data node `node` is back: during setup (no faults yet) it is used at once;
    /// later once the node says it serves (`registering`).
    pub fn on_link_up(&mut self, node: NodeId) {
        match self.phase {
            Phase::Dead => {}
            Phase::Registering(_)
            | Phase::Creating(_)
            | Phase::Populating(_)
            | Phase::WaitingForTables => {
                self.links_up.insert(node);
            }
            _ => {
                self.registering.insert(node, 0);
            }
        }
    }

    /// The client dies: its outstanding request's outcome stays unknown.
    pub fn die(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(request) = self.request.take() {
            ctx.shared.stats.deaths_mid_request += 1;
            match request.kind {
                Kind::RegWrite { record } => {
                    ctx.shared.history[record].outcome = Outcome::Info;
                    ctx.shared.stats.writes_unknown += 1;
                }
                Kind::RegRead { record } => ctx.shared.history[record].outcome = Outcome::Fail,
                Kind::SetOp { record } => {
                    let r = &mut ctx.shared.history[record];
                    r.outcome = if matches!(r.access, Access::Read | Access::IndexRead { .. }) {
                        Outcome::Fail
                    } else {
                        ctx.shared.stats.set_ops_unknown += 1;
                        Outcome::Info
                    };
                }
                Kind::TransferWrite { writes, transfer } => {
                    ctx.shared.stats.transfers_unknown += 1;
                    ctx.shared.balances_written.extend(writes);
                    if let Some(t) = transfer {
                        ctx.shared.transfers[t].outcome = TransferOutcome::Unknown;
                    }
                }
                _ => {}
            }
        }
        self.phase = Phase::Dead;
        self.links_up.clear();
        self.stopping.clear();
        self.registering.clear();
    }

    fn end_request(&mut self, ctx: &mut Ctx<'_>, ended: Ended) {
        let Some(request) = self.request.take() else {
            return;
        };
        if ctx.shared.trace {
            ctx.shared.log.push(format!(
                "client {}: request {} at {} ({:?}) ended: {ended:?}",
                self.node, request.request_id, request.to, request.kind
            ));
        }
        if let Ended::Refused(code) = ended {
            *ctx.shared.stats.errors.entry(code).or_default() += 1;
            let error = NdbError::new(code);
            let single_user = code == 299 && ctx.shared.single_user_expected && self.index != 0;
            // The scratch table being dropped (283), or gone (709, 241 for a table made
            // again by a system restart that undid the drop; 709 for a drop sent again).
            // (A DROP TABLE's refusals are judged by `drop_ended`: 761 while a backup runs.)
            // (So are the bank index's create and look-up: `bank_index_created`, and 4243 when
            // no create was acknowledged.)
            let scratch = matches!(
                request.kind,
                Kind::DropTable | Kind::CreateBankIndex | Kind::DropBankIndex | Kind::GetBankIndex
            ) || (matches!(code, 283 | 709 | 241)
                && matches!(request.kind, Kind::TransferRead { scratch: true, .. })
                && request.refused.get(&SCRATCH_OP) == Some(&code));
            if !error.is_temporary() && !matches!(code, 626 | 630 | 893) && !single_user && !scratch
            {
                // The clients send only well-formed requests, in order: a permanent error
                // other than the workloads' own outcomes (no such row, a duplicate) is a data
                // node's mistake, such as a 4000 for an execute taken for a second one, and an
                // application would give up on it.
                ctx.shared.fail(format!(
                    "client {}: request {} at {} ({:?}) refused with {code} ({:?}, permanent)",
                    self.node, request.request_id, request.to, request.kind, error.class
                ));
            }
        }
        // 4012 after a commit: committed, but TC gave up waiting for the global checkpoint
        // that would make it durable (`Tc::saves_overdue`).
        let unknown = matches!(ended, Ended::Lost | Ended::TimedOut | Ended::Refused(4012))
            && request.commit_sent;
        if matches!(ended, Ended::TimedOut) && request.to.0 != 0 {
            // As the API's drop does: roll back, nobody waits for the answer.
            self.send_rollback(ctx, request.to, request.request_id, false);
        }
        let mut think = self.rng.between(0, self.think_ns_max);
        if matches!(ended, Ended::Refused(4009 | 299)) || request.to.0 == 0 {
            // The cluster is restarting (4009), in single user mode for another client (299),
            // or no replica's link is up: the next try waits, as an application would,
            // instead of filling the history with failures.
            think = think.max(RETRY_NS);
        }
        match request.kind {
            Kind::RegReq => self.registration_ended(ctx, &ended),
            Kind::RegReqAgain { node } => {
                match ended {
                    Ended::Conf(payload) => match ApiRegConf::decode(&payload) {
                        Ok(conf) if conf.started => {
                            self.registering.remove(&node);
                            self.links_up.insert(node);
                        }
                        Ok(_) => {
                            self.registering.insert(node, ctx.now_ns + RETRY_NS);
                        }
                        Err(e) => return ctx.shared.fail(format!("API_REGCONF: {e}")),
                    },
                    // The link closed (`on_link_down` forgot the node), or no answer yet.
                    _ => {
                        if let Some(at) = self.registering.get_mut(&node) {
                            *at = ctx.now_ns + RETRY_NS;
                        }
                    }
                }
                self.resume_after(ctx, 0);
            }
            Kind::CreateTable {
                which,
                at_non_master,
            } => self.create_ended(ctx, &request, which, at_non_master, ended),
            Kind::CreateIndex => match ended {
                Ended::Conf(payload) => match IndexInfo::decode(&payload) {
                    Ok(info) => {
                        if let Some(tables) = ctx.shared.tables.as_mut() {
                            tables.set_index = Some(info);
                        }
                        self.phase = Phase::Creating(SET_INDEX + 1);
                        self.resume_after(ctx, 0);
                    }
                    Err(e) => ctx.shared.fail(format!("CREATE_INDEX_CONF: {e}")),
                },
                // A non-master (the master's link is not up yet), or BUGGIFY's full buffers.
                Ended::Refused(702 | 1218) => self.resume_after(ctx, RETRY_NS),
                other => ctx
                    .shared
                    .fail(format!("CREATE INDEX ended with {other:?}")),
            },
            Kind::Populate { which } => match ended {
                Ended::Conf(_) => {
                    self.phase = Phase::Populating(which + 1);
                    self.resume_after(ctx, 0);
                }
                // Before faults begin, only an overloaded send buffer (BUGGIFY) or records
                // other clients' transactions hold (TC's, LQH's, fired triggers) refuse it.
                Ended::Refused(1218 | 234 | 1217 | 221) => self.resume_after(ctx, RETRY_NS),
                other => ctx.shared.fail(format!(
                    "inserting the rows of table {which} ended with {other:?}"
                )),
            },
            Kind::TransferRead { a, b, amount, .. } => match ended {
                Ended::Conf(_) => self.transfer_write(ctx, &request, a, b, amount),
                _ => {
                    ctx.shared.stats.transfers_failed += 1;
                    self.resume_after(ctx, think);
                }
            },
            Kind::TransferWrite { writes, transfer } => {
                let outcome = match ended {
                    Ended::Conf(_) => {
                        ctx.shared.stats.transfers_ok += 1;
                        TransferOutcome::Acknowledged(ctx.now_ns)
                    }
                    _ if unknown => {
                        ctx.shared.stats.transfers_unknown += 1;
                        TransferOutcome::Unknown
                    }
                    _ => {
                        ctx.shared.stats.transfers_failed += 1;
                        TransferOutcome::Failed
                    }
                };
                if let Some(t) = transfer {
                    ctx.shared.transfers[t].outcome = outcome;
                    if let Ended::Conf(conf) = &ended {
                        let gci = TcExecuteConf::decode(conf).ok().and_then(|c| c.gci);
                        ctx.shared.transfers[t].gci = gci;
                    }
                }
                if matches!(ended, Ended::Conf(_)) || unknown {
                    ctx.shared.balances_written.extend(writes);
                }
                self.resume_after(ctx, think);
            }
            Kind::ScanBatch => self.scan_batch_ended(ctx, &request, ended),
            Kind::ScanConfirm => match ended {
                Ended::Conf(_) => self.scan_confirm_or_commit(ctx),
                // The part lost its locks: the API fails such a commit with 4010.
                other => self.scan_failed(ctx, &other),
            },
            Kind::ScanCommit => self.scan_committed(ctx, ended, think),
            Kind::Rollback => self.resume_after(ctx, think),
            Kind::Audit => self.audit_ended(ctx, &request, ended, think),
            Kind::RegWrite { record } => {
                self.write_ended(ctx, record, &ended, unknown);
                self.resume_after(ctx, think);
            }
            Kind::BackupRead { which } => self.backup_read_ended(ctx, &request, which, ended),
            Kind::RegRead { record } => self.read_ended(ctx, &request, record, ended, think),
            Kind::SetOp { record } => {
                self.set_op_ended(ctx, &request, record, &ended, unknown);
                self.resume_after(ctx, think);
            }
            Kind::FinalSetRead => self.final_set_read_ended(ctx, &request, ended),
            Kind::FinalLedgerRead { from } => {
                self.final_ledger_read_ended(ctx, &request, from, ended)
            }
            Kind::DropTable => self.drop_ended(ctx, &request, ended),
            Kind::CreateBankIndex => self.bank_index_created(ctx, &request, ended),
            Kind::DropBankIndex => self.bank_index_dropped(ctx, &request, ended),
            Kind::GetBankIndex => self.bank_index_found(ctx, ended),
            Kind::FinalIndexRead { from } => {
                self.final_index_read_ended(ctx, &request, from, ended)
            }
        }
    }

    /// Client 0, while the workload runs: the scratch table's drop is due (`Fault::Drop`).
    fn drop_due(&self, ctx: &Ctx<'_>) -> bool {
        let scratch = (ctx.shared.tables.as_ref()).is_some_and(|t| t.scratch.is_some());
        let at = ctx
            .shared
            .drop_at_ns
            .map(|at| ctx.shared.running_since_ns + at);
        self.index == 0 && scratch && at.is_some_and(|at| ctx.now_ns >= at)
    }

    /// Client 0, while the workload runs: the bank index's create is due (`Fault::Index`).
    fn index_due(&self, ctx: &Ctx<'_>) -> bool {
        let bank = (ctx.shared.tables.as_ref()).is_some_and(|t| t.bank.is_some());
        let at = (ctx.shared.index_at_ns).map(|at| ctx.shared.running_since_ns + at);
        self.index == 0
            && bank
            && !ctx.shared.bank_index_settled
            && at.is_some_and(|at| ctx.now_ns >= at)
    }

    /// The first data node this client has a link to (the master, or one that refuses a
    /// schema change with 702 until the master's link is up).
    fn reachable(&self) -> NodeId {
        (self.data_nodes.iter().copied())
            .find(|n| self.links_up.contains(n))
            .unwrap_or(self.data_nodes[0])
    }

    /// A schema request to the first data node this client reaches (the master, or one that
    /// refuses with 702 until the master's link is up).
    fn send_to_dict(&mut self, ctx: &mut Ctx<'_>, kind: Kind, signal: u16, payload: Vec<u8>) {
        let to = self.reachable();
        self.send_request(ctx, to, kind, signal, block::DBDICT, payload);
    }

    /// CREATE INDEX: a unique hash index over the bank's (balance, id), or an ordered index
    /// over its balance.
    fn create_bank_index(&mut self, ctx: &mut Ctx<'_>) {
        let mut payload = Vec::new();
        let (kind, columns) = if ctx.shared.index_ordered {
            (IndexKind::Ordered, vec!["balance".into()])
        } else {
            (IndexKind::Unique, vec!["balance".into(), "id".into()])
        };
        CreateIndexReq {
            table: table_def(BANK).name,
            index: BANK_INDEX.into(),
            kind,
            columns,
        }
        .encode(&mut payload);
        self.send_to_dict(ctx, Kind::CreateBankIndex, gsn::CREATE_INDEX_REQ, payload);
    }

    /// The bank index's create ended: done (CONF; 721 once an earlier attempt whose answer
    /// was lost may have made it), or to be sent again.
    fn bank_index_created(&mut self, ctx: &mut Ctx<'_>, request: &Request, ended: Ended) {
        ctx.shared.log.push(format!(
            "client {}: CREATE INDEX {BANK_INDEX} at data node {} ended with {ended:?}",
            self.node, request.to
        ));
        match ended {
            Ended::Conf(payload) => match IndexInfo::decode(&payload) {
                Ok(_) => {
                    ctx.shared.bank_index_acknowledged = true;
                    ctx.shared.bank_index_settled = true;
                }
                Err(e) => return ctx.shared.fail(format!("CREATE_INDEX_CONF: {e}")),
            },
            Ended::Refused(721) if self.index_unclear => ctx.shared.bank_index_settled = true,
            ref again if retried(again).is_some() => {
                self.index_unclear |= retried(again) == Some(true);
            }
            other => {
                return ctx
                    .shared
                    .fail(format!("CREATE INDEX {BANK_INDEX} ended with {other:?}"))
            }
        }
        self.resume_after(ctx, RETRY_NS);
    }

    /// Client 0, while the workload runs: the bank index's drop is due (once its create
    /// ended).
    fn index_drop_due(&self, ctx: &Ctx<'_>) -> bool {
        let at = (ctx.shared.index_drop_at_ns).map(|at| ctx.shared.running_since_ns + at);
        self.index == 0
            && ctx.shared.bank_index_settled
            && !ctx.shared.bank_index_drop_settled
            && at.is_some_and(|at| ctx.now_ns >= at)
    }

    /// DROP INDEX of the bank's index.
    fn drop_bank_index(&mut self, ctx: &mut Ctx<'_>) {
        let payload = bank_index_name();
        ctx.shared.bank_index_drop_sent = true;
        self.send_to_dict(ctx, Kind::DropBankIndex, gsn::DROP_INDEX_REQ, payload);
    }

    /// The bank index's drop ended: done (CONF; 4243 once an earlier attempt whose answer was
    /// lost may have dropped it, or when no create was acknowledged), or to be sent again.
    fn bank_index_dropped(&mut self, ctx: &mut Ctx<'_>, request: &Request, ended: Ended) {
        ctx.shared.log.push(format!(
            "client {}: DROP INDEX {BANK_INDEX} at data node {} ended with {ended:?}",
            self.node, request.to
        ));
        let gone_before = self.index_drop_unclear || !ctx.shared.bank_index_acknowledged;
        match ended {
            Ended::Conf(_) => {
                ctx.shared.bank_index_dropped = true;
                ctx.shared.bank_index_drop_settled = true;
            }
            Ended::Refused(4243) if gone_before => ctx.shared.bank_index_drop_settled = true,
            ref again if retried(again).is_some() => {
                self.index_drop_unclear |= retried(again) == Some(true);
            }
            other => {
                return ctx
                    .shared
                    .fail(format!("DROP INDEX {BANK_INDEX} ended with {other:?}"))
            }
        }
        self.resume_after(ctx, RETRY_NS);
    }

    /// The final check's look-up of the bank's index (GET_INDEX_REQ).
    fn get_bank_index(&mut self, ctx: &mut Ctx<'_>) {
        let payload = bank_index_name();
        self.send_to_dict(ctx, Kind::GetBankIndex, gsn::GET_INDEX_REQ, payload);
    }

    /// The index found: every account is read through it next (a failure once its drop was
    /// acknowledged). Not found: a failure if its create was acknowledged and no drop was
    /// sent, else nothing to check.
    fn bank_index_found(&mut self, ctx: &mut Ctx<'_>, ended: Ended) {
        match ended {
            Ended::Conf(_) if ctx.shared.bank_index_dropped => ctx.shared.fail(format!(
                "bank: the index {BANK_INDEX} whose DROP INDEX was acknowledged is back"
            )),
            Ended::Conf(payload) => match IndexInfo::decode(&payload) {
                Ok(info) => {
                    ctx.shared.bank_index = Some(info);
                    self.attempts = 0;
                    self.phase = Phase::FinalBankIndex(Some(0));
                    self.final_step_done(ctx);
                }
                Err(e) => ctx.shared.fail(format!("GET_INDEX_CONF: {e}")),
            },
            Ended::Refused(4243)
                if ctx.shared.bank_index_acknowledged && !ctx.shared.bank_index_drop_sent =>
            {
                ctx.shared.fail(format!(
                    "bank: the acknowledged CREATE INDEX {BANK_INDEX} is lost (4243)"
                ))
            }
            Ended::Refused(4243) => self.final_stage_done(ctx, Phase::FinalBankIndex(None)),
            other => self.final_retry(ctx, "the bank index's look-up", &other),
        }
    }

    /// Reads accounts `from`.. through the bank's unique index, each by the balance the
    /// final audit read (at most [`INDEX_READS_PER_TRANSACTION`] a transaction).
    fn final_index_read(&mut self, ctx: &mut Ctx<'_>, from: u16) {
        if let (true, Some(index)) = (ctx.shared.index_ordered, ctx.shared.bank_index.as_ref()) {
            // The whole bank, scanned through the ordered index under shared locks.
            let index = Some((index.index_id, index.index_version));
            return self.scan_bank(ctx, LockMode::Read, index);
        }
        let tables = ctx.shared.tables.as_ref();
        let (Some(table), Some(index)) = (
            tables.and_then(|t| t.bank.clone()),
            ctx.shared.bank_index.clone(),
        ) else {
            return self.final_stage_done(ctx, Phase::FinalBankIndex(None));
        };
        let end = ctx.shared.accounts.min(from + INDEX_READS_PER_TRANSACTION);
        if from >= end {
            return self.final_stage_done(ctx, Phase::FinalBankIndex(None));
        }
        let mut ops = Vec::new();
        for id in from..end {
            let Some(&balance) = ctx.shared.final_rows.get(&(BANK, i32::from(id))) else {
                return ctx
                    .shared
                    .fail(format!("bank: the final audit read no account {id}"));
            };
            ops.push(KeyOp {
                signal: gsn::TCINDXREQ,
                table_id: index.index_id,
                table_version: index.index_version,
                key: vec![Value::Int64(balance), Value::Int32(i32::from(id))],
                ..KeyOp::read(&table, id, LockMode::Read)
            });
        }
        self.send_transaction_with(
            ctx,
            Kind::FinalIndexRead { from },
            &ops,
            ExecType::Commit,
            AbortOption::IgnoreError,
        );
    }

    /// Each account read through the index must be the row of that id and balance.
    fn final_index_read_ended(
        &mut self,
        ctx: &mut Ctx<'_>,
        request: &Request,
        from: u16,
        ended: Ended,
    ) {
        if !matches!(ended, Ended::Conf(_)) || request.refused.values().any(|&code| code != 626) {
            return self.final_retry(ctx, "the final read through the bank index", &ended);
        }
        let end = ctx.shared.accounts.min(from + INDEX_READS_PER_TRANSACTION);
        for id in from..end {
            let op = u32::from(id - from);
            let balance = ctx.shared.final_rows.get(&(BANK, i32::from(id))).copied();
            let expected = (Some(Value::Int32(i32::from(id))), balance.map(Value::Int64));
            let got = request
                .rows
                .get(&op)
                .map(|row| (row.first().cloned(), row.get(1).cloned()));
            if got.as_ref() != Some(&expected) {
                return ctx.shared.fail(format!(
                    "bank: account {id} of balance {balance:?} read through unique index {BANK_INDEX}: {got:?} (refused {:?})",
                    request.refused.get(&op)
                ));
            }
        }
        self.attempts = 0;
        self.phase = Phase::FinalBankIndex(Some(end));
        self.final_step_done(ctx);
    }

    /// DROP TABLE of the scratch table, at the first data node this client reaches (the
    /// master, or one that refuses with 702 until the master's link is up).
    fn drop_scratch(&mut self, ctx: &mut Ctx<'_>) {
        let mut payload = Vec::new();
        signals::encode_name(&mut payload, SCRATCH_NAME);
        ctx.shared.drops_sent += 1;
        self.send_to_dict(ctx, Kind::DropTable, gsn::DROP_TABLE_REQ, payload);
    }

    /// The scratch table's drop ended: done (709: an earlier one whose answer was lost
    /// dropped it), or to be sent again.
    fn drop_ended(&mut self, ctx: &mut Ctx<'_>, request: &Request, ended: Ended) {
        if matches!(ended, Ended::Refused(709)) && !self.drop_unclear {
            return ctx.shared.fail(format!(
                "DROP TABLE {SCRATCH_NAME}, with no earlier attempt that may have dropped it, refused with 709: the table its acknowledged CREATE made is gone"
            ));
        }
        self.drop_unclear |= retried(&ended) == Some(true);
        let done = matches!(ended, Ended::Conf(_) | Ended::Refused(709));
        ctx.shared.log.push(format!(
            "client {}: DROP TABLE {SCRATCH_NAME} at data node {} ended with {ended:?}{}",
            self.node,
            request.to,
            if done { "" } else { ": sent again later" }
        ));
        match ended {
            _ if done => {
                ctx.shared.scratch_dropped |= matches!(ended, Ended::Conf(_));
                ctx.shared.scratch_gone = true;
                if let Some(tables) = ctx.shared.tables.as_mut() {
                    tables.scratch = None;
                }
                self.resume_after(ctx, 0);
            }
            ref again if retried(again).is_some() => self.resume_after(ctx, RETRY_NS),
            other => ctx
                .shared
                .fail(format!("DROP TABLE {SCRATCH_NAME} ended with {other:?}")),
        }
    }

    fn registration_ended(&mut self, ctx: &mut Ctx<'_>, ended: &Ended) {
        if let Phase::Registering(i) = self.phase {
            match ended {
                Ended::Conf(payload) => match ApiRegConf::decode(payload) {
                    Ok(conf) if conf.started => self.phase = Phase::Registering(i + 1),
                    Ok(_) => return self.resume_after(ctx, RETRY_NS),
                    Err(e) => return ctx.shared.fail(format!("API_REGCONF: {e}")),
                },
                // The link dropped: that node is left out.
                _ => self.phase = Phase::Registering(i + 1),
            }
        }
        self.resume_after(ctx, 0);
    }

    /// A CREATE TABLE ended: the table, or (sent to a non-master) 702 and the retry on the
    /// master, or 4009 (sent before the node started) and a retry; anything else fails the
    /// run (no faults run during setup).
    fn create_ended(
        &mut self,
        ctx: &mut Ctx<'_>,
        request: &Request,
        which: usize,
        at_non_master: bool,
        ended: Ended,
    ) {
        match ended {
            Ended::Conf(payload) if !at_non_master => match TableInfo::decode(&payload) {
                Ok(info) => {
                    self.table_created(ctx, which, info);
                    self.phase = Phase::Creating(which + 1);
                    self.resume_after(ctx, 0);
                }
                Err(e) => ctx.shared.fail(format!("CREATE_TABLE_CONF: {e}")),
            },
            Ended::Refused(702) if at_non_master => {
                ctx.shared.stats.non_master_702 = true;
                let master_up = self.links_up.contains(&self.data_nodes[0]);
                ctx.shared.log.push(format!(
                    "client {}: CREATE TABLE at data node {} refused with 702 (non-master): {}",
                    self.node,
                    request.to,
                    if master_up {
                        "retrying on the master"
                    } else {
                        "no link to the master yet, retrying later"
                    }
                ));
                if master_up {
                    self.create_table(ctx, which, true);
                } else {
                    self.resume_after(ctx, RETRY_NS);
                }
            }
            // The master has not started yet (it hears the last data node's CM_REGREQ after
            // another node told this client the cluster serves): as an API node does, the
            // client tries again (seed 0x5f5e5823).
            Ended::Refused(4009) => {
                ctx.shared.log.push(format!(
                    "client {}: CREATE TABLE at data node {} refused with 4009 (not started yet): retrying later",
                    self.node, request.to
                ));
                self.resume_after(ctx, RETRY_NS);
            }
            other => ctx.shared.fail(format!(
                "CREATE TABLE at data node {} (non-master: {at_non_master}) ended with {other:?}",
                request.to
            )),
        }
    }

    /// Files a register write's outcome in the history.
    fn write_ended(&mut self, ctx: &mut Ctx<'_>, record: usize, ended: &Ended, unknown: bool) {
        let stats = &mut ctx.shared.stats;
        let outcome = match ended {
            Ended::Conf(_) => {
                stats.writes_ok += 1;
                Outcome::Ok(None)
            }
            _ if unknown => {
                stats.writes_unknown += 1;
                Outcome::Info
            }
            _ => {
                stats.writes_failed += 1;
                Outcome::Fail
            }
        };
        let r = &mut ctx.shared.history[record];
        r.outcome = outcome;
        r.complete_ns = ctx.now_ns;
        r.gci = commit_gci(ended);
    }

    /// A transfer's second half: both updates and the commit, or a rollback when the first
    /// account has nothing to give.
    fn transfer_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        request: &Request,
        a: u16,
        b: u16,
        amount: i64,
    ) {
        let balance = |op: u32| -> Option<i64> {
            match request.rows.get(&op)?.get(1)? {
                Value::Int64(v) => Some(*v),
                _ => None,
            }
        };
        let (Some(from), Some(to)) = (balance(0), balance(1)) else {
            return ctx.shared.fail(format!(
                "client {}: a transfer's reads of accounts {a} and {b} were confirmed without both rows: {:?}",
                self.node, request.rows
            ));
        };
        let Some(table) = Self::bank_table(ctx) else {
            return;
        };
        // The request stays this transaction's (same id, same TC).
        self.request = Some(request.clone());
        let moved = amount.min(from);
        if moved <= 0 {
            self.request = None;
            return self.send_rollback(ctx, request.to, request.request_id, true);
        }
        let credit = to + moved + i64::from(ctx.shared.sabotage == Some(Sabotage::Bank));
        let mut ops = match request.request_id % 16 {
            // Every other transfer changes the balances by interpreted updates under the
            // locks its reads took, which leave the same values (chosen by request id, so
            // that the random streams, and the seeds' schedules, stay as they were).
            0..=6 => vec![
                KeyOp::interpreted(&table, a, -moved, Some(moved)),
                KeyOp::interpreted(&table, b, credit - to, None),
            ],
            // Now and then its condition fails (the balance is below itself plus one): 626,
            // and the whole transfer aborts.
            7 => vec![
                KeyOp::interpreted(&table, a, -moved, Some(from + 1)),
                KeyOp::interpreted(&table, b, credit - to, None),
            ],
            _ => vec![
                KeyOp::write(&table, OperationType::Update, a, from - moved),
                KeyOp::write(&table, OperationType::Update, b, credit),
            ],
        };
        let writes = [(i32::from(a), from - moved), (i32::from(b), credit)];
        let ledger = ctx.shared.tables.as_ref().and_then(|t| t.ledger.clone());
        let transfer = match ledger.filter(|_| ctx.shared.ledger) {
            Some(ledger) => {
                // Unique in the run: the client's index above its request id.
                let id = ((self.index as i32) << 24) | (request.request_id & 0xff_ffff) as i32;
                let transfer = Transfer {
                    id,
                    from: a,
                    to: b,
                    amount: moved,
                    client: self.node.0,
                    invoke_ns: ctx.now_ns,
                    outcome: TransferOutcome::Pending,
                    gci: None,
                };
                ops.push(KeyOp {
                    key: vec![Value::Int32(id)],
                    ..KeyOp::write(&ledger, OperationType::Insert, 0, transfer.ledger_value())
                });
                ctx.shared.transfers.push(transfer);
                Some(ctx.shared.transfers.len() - 1)
            }
            None => None,
        };
        self.send_transaction(
            ctx,
            Kind::TransferWrite { writes, transfer },
            &ops,
            ExecType::Commit,
            false,
        );
    }

    fn audit_ended(&mut self, ctx: &mut Ctx<'_>, request: &Request, ended: Ended, think: u64) {
        let is_final = self.phase == Phase::FinalAudit;
        if let Ended::Conf(_) = ended {
            let balances: Vec<(i32, i64)> = request
                .rows
                .values()
                .filter_map(|row| match (row.first(), row.get(1)) {
                    (Some(Value::Int32(id)), Some(Value::Int64(b))) => Some((*id, *b)),
                    _ => None,
                })
                .collect();
            let total = ctx.shared.total;
            if let Err(e) = check::check_bank(&balances, usize::from(ctx.shared.accounts), total) {
                let when = if is_final {
                    "the final full read"
                } else {
                    "a full read"
                };
                return ctx
                    .shared
                    .fail(format!("bank: client {}: {when}: {e}", self.node));
            }
            ctx.shared.stats.audits_ok += 1;
            if is_final {
                for &(id, balance) in &balances {
                    ctx.shared.final_rows.insert((BANK, id), balance);
                }
                return self.final_stage_done(ctx, Phase::FinalAudit);
            }
        } else if is_final {
            return self.final_retry(ctx, "the final full read of the bank", &ended);
        }
        self.resume_after(ctx, think);
    }

    fn read_ended(
        &mut self,
        ctx: &mut Ctx<'_>,
        request: &Request,
        record: usize,
        ended: Ended,
        think: u64,
    ) {
        let is_final = matches!(self.phase, Phase::FinalRead(_));
        let key = ctx.shared.history[record].key;
        ctx.shared.history[record].complete_ns = ctx.now_ns;
        match ended {
            Ended::Conf(_) => {
                let value = match request.rows.get(&0).and_then(|row| row.get(1)) {
                    Some(Value::Int64(v)) => *v,
                    other => {
                        return ctx.shared.fail(format!(
                            "client {}: a read of register {key} was confirmed with {other:?}",
                            self.node
                        ))
                    }
                };
                let stale = ctx.shared.sabotage == Some(Sabotage::Registers)
                    && self.index == 1
                    && self.rng.below(3) == 0;
                let reported = match self.last_read {
                    Some(last) if stale => last,
                    _ => value,
                };
                self.last_read = Some(value);
                ctx.shared.history[record].outcome = Outcome::Ok(Some(reported));
                ctx.shared.stats.reads_ok += 1;
                if let Phase::FinalRead(key) = self.phase {
                    ctx.shared
                        .final_rows
                        .insert((REGISTERS, i32::from(key)), value);
                    if key + 1 < ctx.shared.register_keys {
                        self.attempts = 0;
                        self.phase = Phase::FinalRead(key + 1);
                        return self.final_step_done(ctx);
                    }
                    return self.final_stage_done(ctx, Phase::FinalRead(0));
                }
            }
            ref other => {
                ctx.shared.history[record].outcome = Outcome::Fail;
                ctx.shared.stats.reads_failed += 1;
                if is_final {
                    return self.final_retry(
                        ctx,
                        &format!("the final read of register {key}"),
                        other,
                    );
                }
            }
        }
        self.resume_after(ctx, think);
    }

    /// Reads every key of table `which` at its first live backup, in one transaction (a
    /// missing row, which only the set has, is refused with 626 without failing the rest).
    fn backup_read(&mut self, ctx: &mut Ctx<'_>, which: usize) {
        let Some(table) = ctx
            .shared
            .tables
            .as_ref()
            .and_then(|t| t.get(which).cloned())
        else {
            return;
        };
        let ops: Vec<KeyOp> = (0..ctx.shared.keys(which))
            .map(|id| KeyOp {
                replica: 1,
                ..KeyOp::read(&table, id, LockMode::CommittedRead)
            })
            .collect();
        self.send_transaction_with(
            ctx,
            Kind::BackupRead { which },
            &ops,
            ExecType::Commit,
            AbortOption::IgnoreError,
        );
    }

    fn backup_read_ended(
        &mut self,
        ctx: &mut Ctx<'_>,
        request: &Request,
        which: usize,
        ended: Ended,
    ) {
        if !matches!(ended, Ended::Conf(_)) || request.refused.values().any(|&code| code != 626) {
            // Another refusal of an operation (1218: its row did not fit the send buffer)
            // fails the read, not the run.
            return self.final_retry(ctx, "the read of every row at its backup", &ended);
        }
        for id in 0..i32::from(ctx.shared.keys(which)) {
            let primary = ctx.shared.final_rows.get(&(which, id)).copied();
            let row = request
                .rows
                .get(&(id as u32))
                .map(|row| (row.first(), row.get(1)));
            let backup = match (row, request.refused.get(&(id as u32))) {
                (Some((Some(Value::Int32(got)), Some(Value::Int64(v)))), None) if *got == id => {
                    Some(*v)
                }
                (None, Some(626)) => None,
                other => {
                    return ctx.shared.fail(format!(
                        "the read of table {which} at the backups answered key {id} with {other:?}"
                    ))
                }
            };
            if primary != backup || (primary.is_none() && which != SETS) {
                // A backup may lag while it has not yet handled a coordinator's failure in
                // the middle of a commit (a slow link held its news; the take-over then
                // commits there too: seed 0xce00f2a): the check is read again, and only a
                // difference that lasts BACKUP_CHECK_ATTEMPTS reads fails the run.
                self.attempts += 1;
                if self.attempts < BACKUP_CHECK_ATTEMPTS {
                    return self.resume_after(ctx, RETRY_NS);
                }
                let table = table_def(which).name;
                let name = |v: Option<i64>| v.map_or("nothing".into(), check::value_name);
                return ctx.shared.fail(format!(
                    "replicas differ: {table} row {id} is {} at its primary (the final locking read) but {} at its backup (a committed read of replica 1)",
                    name(primary),
                    name(backup)
                ));
            }
        }
        self.final_stage_done(ctx, Phase::BackupCheck(which));
    }

    /// Files a set operation's outcome in the history.
    fn set_op_ended(
        &mut self,
        ctx: &mut Ctx<'_>,
        request: &Request,
        record: usize,
        ended: &Ended,
        unknown: bool,
    ) {
        let access = ctx.shared.history[record].access;
        let stats = &mut ctx.shared.stats;
        let outcome = match (ended, access) {
            (Ended::Conf(_), Access::IndexRead { value, locked }) => {
                let key = ctx.shared.history[record].key;
                let row = request.rows.get(&0).map(|row| (row.first(), row.get(1)));
                match row {
                    Some((Some(Value::Int32(id)), Some(Value::Int64(v))))
                        if i32::from(key) == *id && (*v == value || !locked) =>
                    {
                        stats.index_reads_found += 1;
                        Outcome::Ok(Some(check::PRESENT))
                    }
                    other => {
                        return ctx.shared.fail(format!(
                            "set: client {}: a read through the unique index of value {} (inserted into element {key}, {}) returned {other:?}",
                            self.node,
                            check::value_name(value),
                            if locked { "shared lock" } else { "committed read" }
                        ))
                    }
                }
            }
            (Ended::Refused(626), Access::IndexRead { .. }) => {
                stats.index_reads_missing += 1;
                Outcome::Fail
            }
            (Ended::Conf(_), Access::Read) => {
                if request.rows.contains_key(&0) {
                    stats.set_reads_present += 1;
                    Outcome::Ok(Some(check::PRESENT))
                } else {
                    return ctx.shared.fail(format!(
                        "client {}: a read of set element {} was confirmed without its row",
                        self.node, ctx.shared.history[record].key
                    ));
                }
            }
            (Ended::Conf(_), Access::Insert) => {
                stats.inserts_ok += 1;
                Outcome::Ok(None)
            }
            (Ended::Conf(_), _) => {
                stats.deletes_ok += 1;
                Outcome::Ok(None)
            }
            (Ended::Refused(630), Access::Insert) => {
                stats.inserts_duplicate += 1;
                Outcome::Refused(630)
            }
            (Ended::Refused(626), Access::Delete)
                if ctx.shared.sabotage == Some(Sabotage::Sets) && self.index == 1 =>
            {
                stats.deletes_ok += 1;
                Outcome::Ok(None)
            }
            (Ended::Refused(626), Access::Delete) => {
                stats.deletes_missing += 1;
                Outcome::Refused(626)
            }
            (Ended::Refused(626), Access::Read) => {
                stats.set_reads_absent += 1;
                Outcome::Refused(626)
            }
            (_, Access::Insert | Access::Delete) if unknown => {
                stats.set_ops_unknown += 1;
                Outcome::Info
            }
            _ => {
                stats.set_ops_failed += 1;
                Outcome::Fail
            }
        };
        let r = &mut ctx.shared.history[record];
        r.outcome = outcome;
        r.complete_ns = ctx.now_ns;
        r.gci = commit_gci(ended);
    }

    /// Reads the ledger rows of the transfers from index `from` on (at most
    /// [`LEDGER_READS_PER_TRANSACTION`]), in one transaction under shared locks, a missing row
    /// refused (626) without failing the others; every transfer whose commit was sent is read,
    /// failed ones too (their rows must be missing).
    fn final_ledger_read(&mut self, ctx: &mut Ctx<'_>, from: usize) {
        let Some(table) = ctx.shared.tables.as_ref().and_then(|t| t.ledger.clone()) else {
            return self.final_stage_done(ctx, Phase::FinalLedger(0));
        };
        let end = ctx
            .shared
            .transfers
            .len()
            .min(from + LEDGER_READS_PER_TRANSACTION);
        if from >= end {
            return self.final_stage_done(ctx, Phase::FinalLedger(0));
        }
        let ops: Vec<KeyOp> = ctx.shared.transfers[from..end]
            .iter()
            .map(|t| KeyOp {
                key: vec![Value::Int32(t.id)],
                ..KeyOp::read(&table, 0, LockMode::Read)
            })
            .collect();
        self.send_transaction_with(
            ctx,
            Kind::FinalLedgerRead { from },
            &ops,
            ExecType::Commit,
            AbortOption::IgnoreError,
        );
    }

    /// Files the ledger rows read, and goes on with the next transfers.
    fn final_ledger_read_ended(
        &mut self,
        ctx: &mut Ctx<'_>,
        request: &Request,
        from: usize,
        ended: Ended,
    ) {
        if !matches!(ended, Ended::Conf(_)) || request.refused.values().any(|&code| code != 626) {
            return self.final_retry(ctx, "the final read of the ledger", &ended);
        }
        let end = ctx
            .shared
            .transfers
            .len()
            .min(from + LEDGER_READS_PER_TRANSACTION);
        for index in from..end {
            let op = (index - from) as u32;
            let id = ctx.shared.transfers[index].id;
            match (request.rows.get(&op), request.refused.get(&op)) {
                (Some(row), None) => match (row.first(), row.get(1)) {
                    (Some(Value::Int32(got)), Some(Value::Int64(v))) if *got == id => {
                        ctx.shared.ledger_rows.insert(id, *v);
                    }
                    other => {
                        return ctx.shared.fail(format!(
                            "bank: the final read of ledger row {id} returned {other:?}"
                        ))
                    }
                },
                (None, Some(626)) => {}
                other => {
                    return ctx.shared.fail(format!(
                        "bank: the final read answered ledger row {id} with {other:?}"
                    ))
                }
            }
        }
        self.attempts = 0;
        self.phase = Phase::FinalLedger(end);
        self.final_step_done(ctx);
    }

    /// The final read of the set ended: each key read present (a row) or absent (626) joins
    /// its element's history as a read from when the read was sent to now.
    fn final_set_read_ended(&mut self, ctx: &mut Ctx<'_>, request: &Request, ended: Ended) {
        if !matches!(ended, Ended::Conf(_)) || request.refused.values().any(|&code| code != 626) {
            return self.final_retry(ctx, "the final read of the set", &ended);
        }
        for key in 0..ctx.shared.set_keys {
            let op = u32::from(key);
            let row = request.rows.get(&op);
            let state = match (row, request.refused.get(&op)) {
                (Some(row), None) => {
                    if let Some(Value::Int64(v)) = row.get(1) {
                        ctx.shared.final_rows.insert((SETS, i32::from(key)), *v);
                    }
                    check::PRESENT
                }
                (None, Some(626)) => check::ABSENT,
                other => {
                    return ctx.shared.fail(format!(
                        "set: the final read answered element {key} with {other:?}"
                    ))
                }
            };
            ctx.shared.history.push(Record {
                table: SETS,
                key,
                access: Access::Read,
                client: self.node.0,
                invoke_ns: request.sent_ns,
                complete_ns: ctx.now_ns,
                outcome: Outcome::Ok(Some(state)),
                gci: None,
            });
        }
        self.final_stage_done(ctx, Phase::FinalSetRead);
    }

    fn final_step_done(&mut self, ctx: &mut Ctx<'_>) {
        if self.phase == Phase::Done {
            ctx.shared.final_done = true;
        } else {
            self.resume_after(ctx, 0);
        }
    }

    fn final_retry(&mut self, ctx: &mut Ctx<'_>, what: &str, ended: &Ended) {
        self.attempts += 1;
        if self.attempts >= FINAL_ATTEMPTS_MAX {
            return ctx.shared.fail(format!(
                "liveness: {what} failed {FINAL_ATTEMPTS_MAX} times after the faults ended (last: {ended:?})"
            ));
        }
        self.resume_after(ctx, RETRY_NS);
    }
}

/// A schema change (client 0's DROP TABLE, CREATE or DROP INDEX) that ended so is sent again
/// later: not the master (yet), the cluster restarting, a node failed during the change,
/// another change or a node restart running, a backup, full send buffers, applied but not
/// saved in time (4012), or no answer (its node failed, or a partition). `Some(true)` when
/// it may have been applied meanwhile (no answer, 4009, 4012); `None`: not sent again.
fn retried(ended: &Ended) -> Option<bool> {
    match ended {
        Ended::Refused(702 | 4009 | 701 | 711 | 761 | 1218 | 4012)
        | Ended::Lost
        | Ended::TimedOut => Some(matches!(
            ended,
            Ended::Lost | Ended::TimedOut | Ended::Refused(4009 | 4012)
        )),
        _ => None,
    }
}

/// The bank index's name (DROP_INDEX_REQ, GET_INDEX_REQ).
fn bank_index_name() -> Vec<u8> {
    let mut payload = Vec::new();
    IndexName {
        table: table_def(BANK).name,
        index: BANK_INDEX.into(),
    }
    .encode(&mut payload);
    payload
}

/// The GCI a commit's TC_EXECUTE_CONF named.
fn commit_gci(ended: &Ended) -> Option<u64> {
    match ended {
        Ended::Conf(conf) => TcExecuteConf::decode(conf).ok().and_then(|c| c.gci),
        _ => None,
    }
}

/// The table client 0 creates first (the one some seeds send to a non-master).
fn first_table(shared: &Shared) -> usize {
    shared.wanted().iter().position(|&w| w).unwrap_or(BANK)
}

/// The final phases of the workloads that run, in order, then `Done`.
fn final_phases(shared: &Shared) -> Vec<Phase> {
    [
        (shared.bank, Phase::FinalAudit),
        (
            shared.bank && shared.index_at_ns.is_some(),
            Phase::FinalBankIndex(None),
        ),
        (shared.ledger, Phase::FinalLedger(0)),
        (shared.registers, Phase::FinalRead(0)),
        (shared.sets, Phase::FinalSetRead),
        (shared.bank, Phase::BackupCheck(BANK)),
        (shared.registers, Phase::BackupCheck(REGISTERS)),
        (shared.sets, Phase::BackupCheck(SETS)),
        (true, Phase::Done),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, phase)| *phase)
    .collect()
}

/// Table `which`: the bank's accounts, the registers, the set's elements. Each: an Int32 key
/// and an Int64.
pub fn table_def(which: usize) -> TableDef {
    let (name, column) = match which {
        BANK => ("accounts", "balance"),
        REGISTERS => ("registers", "value"),
        LEDGER => ("ledger", "transfer"),
        SCRATCH => (SCRATCH_NAME, "value"),
        _ => ("elements", "value"),
    };
    let mut columns = vec![
        ColumnDef::key("id", ColumnType::Int32),
        ColumnDef::new(column, ColumnType::Int64),
    ];
    if which == SCRATCH {
        // A BLOB column (NULL in every row written): the table has a parts table, which the
        // data nodes create, restore and drop with it.
        columns.push(ColumnDef::nullable(
            SCRATCH_BLOB_COLUMN_NAME,
            ColumnType::Blob(BlobSize::Blob),
        ));
    }
    TableDef::new(name, columns)
}

/// One key operation to encode.
#[derive(Clone, Debug)]
struct KeyOp {
    /// TCKEYREQ, or TCINDXREQ (then the table id and version name the index, and the key is
    /// the indexed columns' values).
    signal: u16,
    op_type: OperationType,
    lock_mode: LockMode,
    table_id: u32,
    table_version: u32,
    key: Vec<Value>,
    attrs: Vec<(u16, Value)>,
    /// Which replica serves a CommittedRead (`REPLICA_PRIMARY`, or 1 for the first backup).
    replica: u8,
    /// An interpreted update's or delete's program.
    program: Option<Program>,
}

impl KeyOp {
    fn read(table: &TableInfo, id: u16, lock_mode: LockMode) -> KeyOp {
        KeyOp {
            signal: gsn::TCKEYREQ,
            op_type: OperationType::Read,
            lock_mode,
            table_id: table.table_id,
            table_version: table.table_version,
            key: vec![Value::Int32(i32::from(id))],
            attrs: Vec::new(),
            replica: REPLICA_PRIMARY,
            program: None,
        }
    }

    /// An interpreted update adding `delta` to account `id`'s balance, if it is at least
    /// `at_least`.
    fn interpreted(table: &TableInfo, id: u16, delta: i64, at_least: Option<i64>) -> KeyOp {
        KeyOp {
            attrs: Vec::new(),
            program: Some(Program {
                condition: at_least.map(|v| Filter::cmp(1, CmpOp::Ge, Value::Int64(v))),
                changes: vec![(1, delta)],
                ..Program::default()
            }),
            ..KeyOp::write(table, OperationType::Update, id, 0)
        }
    }

    fn write(table: &TableInfo, op_type: OperationType, id: u16, value: i64) -> KeyOp {
        KeyOp {
            signal: gsn::TCKEYREQ,
            op_type,
            lock_mode: LockMode::Exclusive,
            table_id: table.table_id,
            table_version: table.table_version,
            key: vec![Value::Int32(i32::from(id))],
            attrs: vec![(1, Value::Int64(value))],
            replica: REPLICA_PRIMARY,
            program: None,
        }
    }
}
