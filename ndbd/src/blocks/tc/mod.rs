//! TC: the transaction coordinator. Owns each transaction's state, sends its operations to LQH,
//! answers the API, and runs commit and abort.
//!
//! One execute, seen from TC: the API's `TcKeyReq`s arrive and go to LQH at once (a lock wait
//! holds only that operation); LQH's answers are forwarded as they come (rows, errors); when the
//! `TcExecuteReq` has arrived and no operation is outstanding, TC ends the execute: NoCommit
//! answers at once, Commit and Rollback go through LQH first; a durable commit's answer then
//! waits, with its record, until the global checkpoint holding its GCI is saved (answered from
//! `Kernel::tc_checkpoint_saved`, see `dih/gcp.rs`). A transaction whose operations
//! have been outstanding longer than TransactionDeadlockDetectionTimeout is aborted with 266; one
//! idle longer than TransactionInactiveTimeout is aborted silently, and its next request is
//! refused with 237.

pub mod commit;
pub mod index;
pub mod key;
pub mod scan;
mod trans_table;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

// hashbrown's default hasher (foldhash, randomly seeded) costs a fraction of std's SipHash for
// these integer keys.
use hashbrown::HashMap;
use rndb_config::NodeId;
use rndb_protocol::signals::{
    TcExecuteReq, FLAG_DURABLE_COMMIT, FLAG_START_TRANSACTION, OP_INDEX_NONE,
};
use rndb_protocol::{AbortOption, ExecType, LockMode, NdbError, OperationType};

use crate::blocks::acc::{Row, TransId};
use crate::blocks::lqh::{LqhKeyReq, OpRole};
use crate::blocks::node_set::NodeSet;
use crate::blocks::tc::trans_table::TransTable;
use crate::ndbfs::format::gci_hi;

/// What TC asks of the kernel after handling a signal.
#[derive(Debug)]
pub enum TcAction {
    /// Send the operation to LQH (the kernel builds the `LqhKeyReq`).
    Dispatch,
    /// Commit the transaction in LQH, then answer.
    Commit(TransId),
    /// Abort the transaction in LQH, then answer as `AbortReply` says.
    Abort(TransId),
}

/// How an abort is answered once LQH has undone everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AbortReply {
    /// The API asked for a rollback: TC_EXECUTE_CONF.
    Conf,
    /// The execute failed: TC_EXECUTE_REF with this error and operation (boxed: rare, and a
    /// transaction record stays small).
    Ref(Box<(NdbError, u32)>),
    /// TC aborted the transaction on its own while no execute waited (a participant failed,
    /// a lock wait or the transaction's idleness timed out): the API's next execute, whenever
    /// it comes, is refused with this error, not the abort's end.
    Unasked(Box<(NdbError, u32)>),
    /// Nobody is waiting, nor will ask: the API left.
    Silent,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Running executes.
    Active,
    /// Waiting for LQH to commit.
    Committing,
    /// Waiting for LQH to abort.
    Aborting(AbortReply),
    /// A durable commit, over on every participant: only its answer waits, until the global
    /// checkpoint holding its GCI is saved (see [`Tc::hold_for_checkpoint`]).
    Saving,
}

/// NDB's DBTC counters (ndbinfo.counters): events since the node started, of the transactions
/// this node coordinates.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcCounters {
    /// Transactions started (NDB's TRANSACTIONS).
    pub transactions: u64,
    /// Transactions committed, and aborted (COMMITS, ABORTS).
    pub commits: u64,
    pub aborts: u64,
    /// Key reads that lock (READS), committed reads (SIMPLE_READS), and inserts, updates,
    /// writes and deletes (WRITES), through the primary key or a unique index.
    pub reads: u64,
    pub simple_reads: u64,
    pub writes: u64,
    /// Of those, the ones whose primary replica is on this node (LOCAL_READS, LOCAL_WRITES).
    pub local_reads: u64,
    pub local_writes: u64,
    /// Scans of a whole table, and of an ordered index's ranges (TABLE_SCANS, RANGE_SCANS).
    pub table_scans: u64,
    pub range_scans: u64,
}

/// One transaction of [`Tc::transaction_records`].
#[derive(Clone, Copy, Debug)]
pub struct TransactionRow {
    pub trans: TransId,
    /// NDB's word for its phase.
    pub state: &'static str,
    /// Operation records it holds, and operations not answered yet.
    pub operations: u32,
    pub outstanding: u32,
    /// Since the API last sent anything for it.
    pub inactive_seconds: u64,
}

impl TcCounters {
    /// A key operation TC accepted.
    pub fn count_key_operation(&mut self, op: OperationType, lock: LockMode) {
        match (op, lock) {
            (OperationType::Read, LockMode::CommittedRead) => self.simple_reads += 1,
            (OperationType::Read, _) => self.reads += 1,
            _ => self.writes += 1,
        }
    }
}

/// One transaction's record.
#[derive(Debug)]
// Laid out by hand (`repr(C)`), most used fields first: with thousands of transactions in
// flight the records are beyond the cache, and a lookup that finds what it needs in the
// record's first line costs one miss instead of two or three. The rare error records are
// boxed, and so is the record itself in `Tc::transactions`.
#[repr(C)]
struct TcTransaction {
    phase: Phase,
    /// A triggered index operation failed: the transaction aborts whatever the abort option.
    must_abort: bool,
    /// The last operation went to its last replica with the order to commit there: the
    /// transaction commits unless that operation fails, and nothing may abort it meanwhile.
    early_commit: bool,
    /// A rollback arrived while an execute was still running: the transaction aborts when
    /// that execute's operations are done (an API that gave up waiting, or dropped it).
    rollback_requested: bool,
    /// Created by a scan part: another node coordinates this transaction.
    scan_part: bool,
    /// The execute that commits asked for a durable commit (`FLAG_DURABLE_COMMIT`): its
    /// answer waits for the commit's global checkpoint to be saved.
    durable: bool,
    /// The commit runs in two rounds: the rows held as backup replicas first, then the rest.
    commit_round: u8,
    /// Operations received in the current execute.
    ops_received: u32,
    /// Operations sent to LQH and not answered yet.
    ops_outstanding: u32,
    /// Operation records this transaction holds (released when it ends).
    operations: u32,
    /// Those of `operations` that are CommittedReads of the current execute: they go when
    /// the execute ends, answered (NDB's DBTC frees a dirty read's record at its answer), so
    /// that reading many rows, or a long BLOB's parts, over many executes holds none.
    committed_reads: u32,
    /// Inserts, updates, writes and deletes it defined, over all its executes (NDB's
    /// `m_write_count`, held against MaxDMLOperationsPerTransaction).
    dml_operations: u32,
    /// The execute request, once it has arrived.
    execute: Option<TcExecuteReq>,
    /// When the API last sent anything for this transaction.
    last_activity: Instant,
    /// The first failed operation of the current execute.
    first_error: Option<Box<(NdbError, u32)>>,
    /// An operation's row or error could not be sent (1218): the execute fails with it and
    /// the transaction aborts, whatever the abort option, since the API cannot learn that
    /// operation's outcome otherwise.
    lost_answer: Option<Box<(NdbError, u32)>>,
    /// Nodes whose commit or abort confirmation is still to come.
    awaiting: NodeSet,
    /// Data nodes whose LQH may hold rows of this transaction (this node always). Commit
    /// and abort go to each.
    participants: NodeSet,
    /// The participants that hold backup replicas of rows it wrote (those rows commit first).
    backups: NodeSet,
    /// The participants that are the primary replica of rows it wrote (those rows commit in
    /// the second round, after every backup). A node may be in both sets.
    primaries: NodeSet,
    /// When the current execute's operations went to LQH.
    dispatched_at: Instant,
    /// The epoch its commit belongs to, once the commit started (0 before).
    gci: u64,
    /// It wrote a row (some participant holds a primary or backup replica of a change): only
    /// then does its commit's answer name the GCI.
    wrote: bool,
    /// The row of a read that was the last answer of a Commit execute in which nothing
    /// failed (operation index, row): kept until the commit is over, then sent with its
    /// confirmation in one TCKEY_ROW_CONF. Boxed: most transactions never keep one.
    last_row: Option<Box<(u32, Row)>>,
    /// Index maintenance operations fired for it and not answered yet (fired trigger
    /// records, released with their answers, or with the transaction).
    fired_triggers: u32,
    /// The operations (by index in the execute) through a unique index that hold an index
    /// operation record (NDB's TcIndexOperation): each is released when its operation is
    /// answered, or with the transaction. Last: most transactions use no index.
    index_ops: Vec<u32>,
}

/// Operation `op_index` of `t` was answered: the index operation record it holds, if it went
/// through a unique index, is free again (`in_use` counts them).
fn release_index_op(t: &mut TcTransaction, in_use: &mut u32, op_index: u32) {
    if let Some(at) = t.index_ops.iter().position(|&o| o == op_index) {
        t.index_ops.swap_remove(at);
        *in_use = in_use.saturating_sub(1);
    }
}

/// What a participant holds of a transaction, which decides the commit rounds it is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// The primary replica of a written row: it commits after the row's backups.
    Primary,
    /// A backup replica of a written row: it commits first.
    Backup,
    /// A read's lock at the primary: no change, only a lock to release in whichever round
    /// reaches the node.
    Lock,
}

/// One round of a commit or an abort: the nodes it goes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Round {
    pub nodes: NodeSet,
    /// The nodes of a commit's first round that commit only the rows they hold as a backup
    /// replica: they are also the primary of another write, whose rows wait for the
    /// second round.
    pub backup_rows_only: NodeSet,
}

/// An answer TC sends to the API.
#[derive(Debug)]
pub enum ApiAnswer {
    Row {
        op_index: u32,
        row: Row,
    },
    KeyRef {
        op_index: u32,
        code: u32,
    },
    /// The execute succeeded; `gci` is the GCI of its commit, when it committed a
    /// transaction that wrote.
    ExecuteConf {
        gci: Option<u64>,
    },
    /// The execute's last answer, a read's row, with the execute's confirmation
    /// (TCKEY_ROW_CONF): a committed execute's, whose row TC kept until the commit was over.
    RowConf {
        op_index: u32,
        row: Row,
        gci: Option<u64>,
    },
    ExecuteRef {
        error: NdbError,
        op_index: u32,
    },
}

/// An operation out on another node, as this node's TC remembers it.
#[derive(Debug)]
pub(crate) struct RemoteOp {
    pub role: OpRole,
    /// The node it was sent to.
    pub to: NodeId,
    pub op_index: u32,
    /// It was sent with the order to commit at that (last) replica.
    pub commit_at_last: bool,
}

/// The TC block.
#[derive(Debug)]
pub struct Tc {
    /// NDB's DBTC counters since the node started (ndbinfo.counters).
    pub counters: TcCounters,
    /// Operations this TC sent to another node, by transaction and token: the role TC keeps
    /// for the answer, and the node the operation went to.
    pub(crate) remote_ops: BTreeMap<(TransId, u32), RemoteOp>,
    next_token: u32,
    /// This data node.
    me: NodeId,
    /// Looked up several times per operation, mostly for the transaction looked up last.
    transactions: TransTable<TcTransaction>,
    operations_in_use: u32,
    /// MaxNoOfConcurrentTransactions.
    transactions_max: u32,
    /// MaxNoOfConcurrentOperations.
    operations_max: u32,
    /// MaxDMLOperationsPerTransaction.
    dml_max: u32,
    /// Index operation records the live transactions hold.
    index_operations_in_use: u32,
    /// MaxNoOfConcurrentIndexOperations.
    index_operations_max: u32,
    fired_triggers_in_use: u32,
    /// MaxNoOfFiredTriggers.
    fired_triggers_max: u32,
    deadlock_timeout: Duration,
    /// None when TransactionInactiveTimeout is "unlimited".
    inactive_timeout: Option<Duration>,
    /// Transactions TC aborted on its own whose API has not asked since (at most
    /// MaxNoOfConcurrentTransactions, oldest forgotten first), with the error their next
    /// execute is told (237 after TransactionInactiveTimeout, 286 after a node failure).
    aborted_unasked: HashMap<TransId, NdbError>,
    aborted_unasked_order: VecDeque<TransId>,
    /// When `expired` looks at the transactions again.
    next_expiry_scan: Option<Instant>,
    /// Durable commits whose answer waits for their global checkpoint to be saved, by
    /// (checkpoint, transaction), so they are answered in GCI order once `Gcp::restorable`
    /// reaches theirs. Each keeps its transaction record (phase `Saving`) until answered, so
    /// there are never more than MaxNoOfConcurrentTransactions; new transactions meanwhile get
    /// 233 as for any record in use.
    saving: BTreeSet<(u32, TransId)>,
    /// When each checkpoint in `saving` (but 0) had its first commit held: a checkpoint not
    /// saved in time has its commits answered as unknown (`saves_overdue`).
    saving_since: BTreeMap<u32, Instant>,
    /// Arbitration decides whether this side of a failure goes on: key operations and commits
    /// are refused (286), and finished commits' answers held, until it has (`arbit.rs`).
    commits_held: bool,
    /// A round moving primaries runs (`primary.rs`): no transaction starts (1204).
    starts_held: bool,
    /// Answers of transactions that aborted while commits were held though their last
    /// replica may have committed early (it failed before saying so): on a split that
    /// replica may live on the other side, so the abort is told only if this side goes on
    /// (then the other side stops and its commit goes with it).
    pub held_aborts: Vec<(TransId, ApiAnswer)>,
    /// Commit rounds put off while commits are held (`Kernel::tc_round`): a round commits
    /// rows and releases their locks, and what it shows may be what the other side of a split
    /// aborts (a round decided here that reached only this side's replicas). They go on when
    /// arbitration lets this side go on.
    pub held_rounds: Vec<TransId>,
}

/// Names a transaction: the API node and its request id.
pub fn trans_id(api: NodeId, request_id: u32) -> TransId {
    TransId::new(api.0, request_id)
}

/// The API node and request id of a transaction.
pub fn trans_parts(trans: TransId) -> (NodeId, u32) {
    (NodeId(trans.api_node()), trans.request_id())
}

impl Tc {
    /// Remembers an operation sent to node `to`; answers the token its answer will carry.
    pub(crate) fn stash(&mut self, trans: TransId, req: &LqhKeyReq, to: NodeId) -> u32 {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(1);
        let op = RemoteOp {
            role: req.role.clone(),
            to,
            op_index: req.op_index,
            commit_at_last: req.commit_at_last,
        };
        self.remote_ops.insert((trans, token), op);
        token
    }

    /// Forgets the operations of a transaction that ended (answers that come late are dropped).
    pub(crate) fn forget_operations_of(&mut self, trans: TransId) {
        let keys: Vec<(TransId, u32)> = self
            .remote_ops
            .range((trans, 0)..=(trans, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            self.remote_ops.remove(&key);
        }
    }

    pub fn new(
        me: NodeId,
        transactions_max: u32,
        operations_max: u32,
        dml_max: u32,
        deadlock_timeout: Duration,
        inactive_timeout: Option<Duration>,
    ) -> Tc {
        Tc {
            counters: TcCounters::default(),
            remote_ops: BTreeMap::new(),
            next_token: 1,
            me,
            transactions: TransTable::default(),
            operations_in_use: 0,
            transactions_max,
            operations_max,
            dml_max,
            index_operations_in_use: 0,
            index_operations_max: u32::MAX,
            fired_triggers_in_use: 0,
            fired_triggers_max: u32::MAX,
            deadlock_timeout,
            inactive_timeout,
            aborted_unasked: HashMap::new(),
            aborted_unasked_order: VecDeque::new(),
            next_expiry_scan: None,
            saving: BTreeSet::new(),
            saving_since: BTreeMap::new(),
            commits_held: false,
            starts_held: false,
            held_aborts: Vec::new(),
            held_rounds: Vec::new(),
        }
    }

    /// True while `trans` runs executes: neither its commit nor its abort has started. Only
    /// then may its operations run in LQH.
    pub fn is_active(&self, trans: TransId) -> bool {
        self.transactions
            .get(trans)
            .is_some_and(|t| t.phase == Phase::Active)
    }

    /// True when an answer of `node` for `trans` comes too late: the transaction ended or
    /// aborts (a commit waits for every answer), and `node` is no participant its abort goes
    /// to.
    pub fn answer_unawaited(&self, trans: TransId, node: NodeId) -> bool {
        self.transactions
            .get(trans)
            .is_none_or(|t| matches!(t.phase, Phase::Aborting(_)) && !t.participants.contains(node))
    }

    /// True while this TC has a record of `trans`.
    pub fn knows(&self, trans: TransId) -> bool {
        self.transactions.contains_key(trans)
    }

    /// The epoch `trans`'s commit belongs to, once its commit started.
    pub fn gci_of(&self, trans: TransId) -> Option<u64> {
        self.transactions
            .get(trans)
            .map(|t| t.gci)
            .filter(|&gci| gci != 0)
    }

    /// The commit of `trans` started in epoch `gci`.
    pub fn set_gci(&mut self, trans: TransId, gci: u64) {
        if let Some(t) = self.transactions.get_mut(trans) {
            t.gci = gci;
        }
    }

    /// True while `trans` is committing (its commit rounds run).
    pub fn is_committing(&self, trans: TransId) -> bool {
        self.transactions
            .get(trans)
            .is_some_and(|t| t.phase == Phase::Committing)
    }

    pub fn transaction_count(&self) -> usize {
        self.transactions.len()
    }

    /// The transactions this TC coordinates whose commit or abort is not over (a durable
    /// commit waiting only to answer is).
    pub fn running_transaction_ids(&self) -> Vec<TransId> {
        self.transactions
            .iter()
            .filter(|(_, t)| t.phase != Phase::Saving)
            .map(|(trans, _)| trans)
            .collect()
    }

    /// True while this TC coordinates a transaction whose commit or abort is not over (a
    /// durable commit waiting only to answer is; a scan part another node coordinates is
    /// not this TC's).
    pub fn coordinates_running(&self) -> bool {
        self.transactions
            .iter()
            .any(|(_, t)| !t.scan_part && t.phase != Phase::Saving)
    }

    /// True while `trans` is one this TC coordinates and its commit or abort is not over.
    pub fn is_running(&self, trans: TransId) -> bool {
        self.transactions
            .get(trans)
            .is_some_and(|t| t.phase != Phase::Saving)
    }

    /// A round moving primaries starts (true) or ends (false): while it runs no transaction
    /// starts here (1204).
    pub fn set_starts_held(&mut self, held: bool) {
        self.starts_held = held;
    }

    /// True while no transaction may start here (see [`Tc::set_starts_held`]).
    pub fn starts_held(&self) -> bool {
        self.starts_held
    }

    /// An operation arrived. `Ok(Dispatch)` sends it to LQH; `Err` answers it at once with an
    /// error (recorded for the execute); `Ok` with nothing happens when the operation must be
    /// dropped (its transaction is unknown: the execute will say why).
    pub fn on_key_req(
        &mut self,
        trans: TransId,
        flags: u8,
        op_index: u32,
        dml: bool,
        committed_read: bool,
        now: Instant,
    ) -> Option<Result<TcAction, NdbError>> {
        if !self.transactions.contains_key(trans) {
            if flags & FLAG_START_TRANSACTION == 0
                || self.transactions.len() >= self.transactions_max as usize
            {
                return None;
            }
            let record = Box::new(TcTransaction::new(self.me, now));
            self.transactions.insert(trans, record);
            self.counters.transactions += 1;
            if self.starts_held {
                let error = NdbError::with_detail(
                    1204,
                    "primaries are moving back to a restarted data node; retry",
                );
                let t = self.transactions.get_mut(trans)?;
                t.first_error
                    .get_or_insert_with(|| Box::new((error.clone(), op_index)));
                t.ops_received += 1;
                t.last_activity = now;
                return Some(Err(error));
            }
        }
        let t = self.transactions.get_mut(trans)?;
        if t.phase != Phase::Active {
            return None;
        }
        if t.ops_received == 0 && t.ops_outstanding == 0 {
            t.dispatched_at = now;
        }
        t.ops_received += 1;
        t.last_activity = now;
        if self.commits_held {
            // This side may be about to stop, and what it holds that the other side lacks
            // (a commit it finished alone as the failure showed) would go with it: nothing of
            // it is shown, not even a row's presence, until arbitration lets the side go on.
            let error = NdbError::with_detail(
                286,
                "a data node failed, and arbitration has not yet decided whether this side of \
                 the cluster goes on",
            );
            t.first_error
                .get_or_insert_with(|| Box::new((error.clone(), op_index)));
            return Some(Err(error));
        }
        if dml {
            t.dml_operations = t.dml_operations.saturating_add(1);
            if t.dml_operations > self.dml_max {
                // As NDB's DBTC: the transaction aborts, whatever the abort option, and its
                // execute fails with 261 (not with an error an earlier operation had).
                let error = NdbError::with_detail(
                    261,
                    format!("MaxDMLOperationsPerTransaction={}", self.dml_max),
                );
                t.must_abort = true;
                t.first_error = Some(Box::new((error.clone(), op_index)));
                return Some(Err(error));
            }
        }
        if self.operations_in_use >= self.operations_max {
            let error = NdbError::with_detail(
                234,
                format!("MaxNoOfConcurrentOperations={}", self.operations_max),
            );
            t.first_error
                .get_or_insert_with(|| Box::new((error.clone(), op_index)));
            return Some(Err(error));
        }
        self.operations_in_use += 1;
        t.operations += 1;
        t.committed_reads += u32::from(committed_read);
        t.ops_outstanding += 1;
        Some(Ok(TcAction::Dispatch))
    }

    /// An operation was refused before it reached LQH (bad table, bad key): counts as answered.
    pub fn on_refused_before_dispatch(&mut self, trans: TransId, op_index: u32, error: NdbError) {
        if let Some(t) = self.transactions.get_mut(trans) {
            release_index_op(t, &mut self.index_operations_in_use, op_index);
            t.ops_outstanding = t.ops_outstanding.saturating_sub(1);
            t.first_error
                .get_or_insert_with(|| Box::new((error, op_index)));
        }
    }

    /// Counts the answer of a read whose row goes straight to the API (`on_lqh_answer` with no
    /// row to forward).
    pub fn count_read_answer(&mut self, trans: TransId, op_index: u32) {
        if let Some(t) = self.transactions.get_mut(trans) {
            release_index_op(t, &mut self.index_operations_in_use, op_index);
            t.ops_outstanding = t.ops_outstanding.saturating_sub(1);
        }
    }

    /// The exec type of `trans`'s execute when a read's row, just counted, is its last answer
    /// and nothing in it failed: the row may then confirm the execute (TCKEY_ROW_CONF). A
    /// NoCommit execute ends at once ([`Tc::try_complete`] answers a TC_EXECUTE_CONF); a
    /// Commit one commits next.
    pub fn row_ends_execute(&self, trans: TransId) -> Option<ExecType> {
        let t = self.transactions.get(trans)?;
        let clean = t.phase == Phase::Active
            && t.ops_outstanding == 0
            && !t.rollback_requested
            && !t.must_abort
            && t.first_error.is_none()
            && t.lost_answer.is_none();
        t.execute.as_ref().filter(|_| clean).map(|e| e.exec_type)
    }

    /// Keeps the row that is the last answer of `trans`'s Commit execute
    /// ([`Tc::row_ends_execute`]) to go out with the commit's confirmation. If the commit
    /// fails instead, the row goes with the transaction: an aborted transaction's read shows
    /// nothing.
    pub fn keep_last_row(&mut self, trans: TransId, op_index: u32, row: Row) {
        if let Some(t) = self.transactions.get_mut(trans) {
            debug_assert!(t.last_row.is_none(), "one last row per execute");
            t.last_row = Some(Box::new((op_index, row)));
        }
    }

    /// LQH answered an operation. Returns what to tell the API (nothing once the transaction is
    /// being aborted).
    pub fn on_lqh_answer(
        &mut self,
        trans: TransId,
        op_index: u32,
        result: Result<Option<Row>, NdbError>,
    ) -> Option<ApiAnswer> {
        let t = self.transactions.get_mut(trans)?;
        release_index_op(t, &mut self.index_operations_in_use, op_index);
        t.ops_outstanding = t.ops_outstanding.saturating_sub(1);
        if t.phase != Phase::Active {
            return None;
        }
        match result {
            Ok(Some(row)) => Some(ApiAnswer::Row { op_index, row }),
            Ok(None) => None,
            Err(error) => {
                let code = error.code;
                t.first_error
                    .get_or_insert_with(|| Box::new((error, op_index)));
                Some(ApiAnswer::KeyRef { op_index, code })
            }
        }
    }

    /// Takes an operation record for work TC starts itself (index maintenance fired by a
    /// write), counted as outstanding like an API operation: 234 when none is free.
    pub fn add_internal_op(&mut self, trans: TransId) -> Result<(), NdbError> {
        let Some(t) = self
            .transactions
            .get_mut(trans)
            .filter(|t| t.phase == Phase::Active)
        else {
            return Err(NdbError::with_detail(
                4000,
                "internal operation of a transaction that ended",
            ));
        };
        if self.operations_in_use >= self.operations_max {
            return Err(NdbError::with_detail(
                234,
                format!("MaxNoOfConcurrentOperations={}", self.operations_max),
            ));
        }
        self.operations_in_use += 1;
        t.operations += 1;
        t.ops_outstanding += 1;
        Ok(())
    }

    /// MaxNoOfConcurrentIndexOperations.
    pub fn with_index_operations_max(mut self, max: u32) -> Tc {
        self.index_operations_max = max;
        self
    }

    /// Takes an index operation record for operation `op_index` of `trans`, through a unique
    /// index, held until that operation is answered: 288 when none is free.
    pub fn take_index_operation(&mut self, trans: TransId, op_index: u32) -> Result<(), NdbError> {
        if self.index_operations_in_use >= self.index_operations_max {
            return Err(NdbError::with_detail(
                288,
                format!(
                    "MaxNoOfConcurrentIndexOperations={}",
                    self.index_operations_max
                ),
            ));
        }
        if let Some(t) = self.transactions.get_mut(trans) {
            self.index_operations_in_use += 1;
            t.index_ops.push(op_index);
        }
        Ok(())
    }

    /// MaxNoOfFiredTriggers.
    pub fn with_fired_triggers_max(mut self, max: u32) -> Tc {
        self.fired_triggers_max = max;
        self
    }

    /// Takes a fired trigger record for an index maintenance operation of `trans`, held until
    /// it is answered: 221 when none is free.
    pub fn take_fired_trigger(&mut self, trans: TransId) -> Result<(), NdbError> {
        if self.fired_triggers_in_use >= self.fired_triggers_max {
            return Err(NdbError::with_detail(
                221,
                format!("MaxNoOfFiredTriggers={}", self.fired_triggers_max),
            ));
        }
        if let Some(t) = self.transactions.get_mut(trans) {
            self.fired_triggers_in_use += 1;
            t.fired_triggers += 1;
        }
        Ok(())
    }

    /// An index maintenance operation of `trans` was answered (or never sent): its fired
    /// trigger record is free again.
    pub fn release_fired_trigger(&mut self, trans: TransId) {
        if let Some(t) = self
            .transactions
            .get_mut(trans)
            .filter(|t| t.fired_triggers > 0)
        {
            t.fired_triggers -= 1;
            self.fired_triggers_in_use = self.fired_triggers_in_use.saturating_sub(1);
        }
    }

    /// `trans`'s commit or abort is over on every participant: counted as NDB's COMMITS or
    /// ABORTS (a scan part's record, which another node coordinates, is not).
    pub fn count_end(&mut self, trans: TransId) {
        match self.transactions.get(trans) {
            Some(t) if t.scan_part => {}
            Some(t) if t.phase == Phase::Committing => self.counters.commits += 1,
            Some(t) if matches!(t.phase, Phase::Aborting(_)) => self.counters.aborts += 1,
            _ => {}
        }
    }

    /// The transaction records from record `from` on, with their index, for
    /// ndbinfo.cluster_transactions: `None` for a free record or one of a scan part (another
    /// node coordinates that transaction).
    pub fn transaction_records(
        &self,
        from: usize,
        now: Instant,
    ) -> impl Iterator<Item = (usize, Option<TransactionRow>)> + '_ {
        self.transactions
            .records_from(from)
            .map(move |(record, entry)| {
                let row = entry
                    .filter(|(_, t)| !t.scan_part)
                    .map(|(trans, t)| TransactionRow {
                        trans,
                        state: match t.phase {
                            Phase::Active => "Started",
                            Phase::Committing => "Committing",
                            Phase::Aborting(_) => "Aborting",
                            Phase::Saving => "Committed",
                        },
                        operations: t.operations,
                        outstanding: t.ops_outstanding,
                        inactive_seconds: now.saturating_duration_since(t.last_activity).as_secs(),
                    });
                (record, row)
            })
    }

    /// Index operation records in use, and MaxNoOfConcurrentIndexOperations.
    pub fn index_operations_in_use(&self) -> (u32, u32) {
        (self.index_operations_in_use, self.index_operations_max)
    }

    /// Fired trigger records in use, and MaxNoOfFiredTriggers.
    pub fn fired_triggers_in_use(&self) -> (u32, u32) {
        (self.fired_triggers_in_use, self.fired_triggers_max)
    }

    /// Operation records in use, and MaxNoOfConcurrentOperations.
    pub fn operations_in_use(&self) -> (u32, u32) {
        (self.operations_in_use, self.operations_max)
    }

    /// MaxNoOfConcurrentTransactions.
    pub fn transactions_max(&self) -> u32 {
        self.transactions_max
    }

    /// Operation records not in use (MaxNoOfConcurrentOperations less those held).
    pub fn operations_free(&self) -> u32 {
        self.operations_max.saturating_sub(self.operations_in_use)
    }

    /// A locking scan of `trans` locked `count` rows: each holds an operation record until the
    /// transaction ends.
    pub fn take_scan_records(&mut self, trans: TransId, count: u32) {
        if count == 0 {
            return;
        }
        if let Some(t) = self.transactions.get_mut(trans) {
            self.operations_in_use += count;
            t.operations += count;
        }
    }

    /// An internal operation finished without anything to tell the API.
    pub fn on_internal_done(&mut self, trans: TransId) {
        if let Some(t) = self.transactions.get_mut(trans) {
            t.ops_outstanding = t.ops_outstanding.saturating_sub(1);
        }
    }

    /// The transaction must abort at the end of this execute, whatever its abort option.
    pub fn force_abort(&mut self, trans: TransId) {
        if let Some(t) = self.transactions.get_mut(trans) {
            t.must_abort = true;
        }
    }

    /// A scan starts in `trans`: creates the transaction when `start` is set (233 when no
    /// record is free); refuses a transaction that is unknown or ending.
    pub fn attach_scan(
        &mut self,
        trans: TransId,
        start: bool,
        part: bool,
        now: Instant,
    ) -> Result<(), NdbError> {
        if !self.transactions.contains_key(trans) {
            if !start {
                return Err(NdbError::with_detail(
                    237,
                    "the scan's transaction was aborted after TransactionInactiveTimeout",
                ));
            }
            if self.transactions.len() >= self.transactions_max as usize {
                return Err(NdbError::with_detail(
                    233,
                    format!("MaxNoOfConcurrentTransactions={}", self.transactions_max),
                ));
            }
            let mut t = Box::new(TcTransaction::new(self.me, now));
            t.scan_part = part;
            self.transactions.insert(trans, t);
            if !part {
                self.counters.transactions += 1;
            }
        }
        self.touch(trans, now)
    }

    /// True when this node's record of `trans` was made by a scan part (another node
    /// coordinates it).
    pub fn is_scan_part(&self, trans: TransId) -> bool {
        self.transactions.get(trans).is_some_and(|t| t.scan_part)
    }

    /// The API did something for `trans` (a scan batch): it is not idle. Refuses a transaction
    /// that is unknown or ending (4114).
    pub fn touch(&mut self, trans: TransId, now: Instant) -> Result<(), NdbError> {
        match self.transactions.get_mut(trans) {
            Some(t) if t.phase == Phase::Active => {
                t.last_activity = now;
                Ok(())
            }
            _ => Err(NdbError::with_detail(
                4114,
                "the scan's transaction has ended",
            )),
        }
    }

    /// A scan of `trans` waits for a row lock: counted like an outstanding operation, so the
    /// lock wait is bounded by TransactionDeadlockDetectionTimeout.
    pub fn scan_wait_started(&mut self, trans: TransId, now: Instant) {
        if let Some(t) = self.transactions.get_mut(trans) {
            if t.ops_outstanding == 0 {
                t.dispatched_at = now;
            }
            t.ops_outstanding += 1;
        }
    }

    /// A scan's lock wait ended.
    pub fn scan_wait_ended(&mut self, trans: TransId) {
        self.on_internal_done(trans);
    }

    /// Records an error for an operation whose answer could not be sent (1218): the execute
    /// fails and the transaction aborts, whatever its abort option.
    pub fn on_send_failure(&mut self, trans: TransId, op_index: u32, error: NdbError) {
        if let Some(t) = self.transactions.get_mut(trans) {
            t.lost_answer
                .get_or_insert_with(|| Box::new((error, op_index)));
        }
    }

    /// Index maintenance could not start (234): the base operation fails with it and the
    /// transaction aborts, whatever its abort option.
    pub fn on_trigger_refused(&mut self, trans: TransId, op_index: u32, error: NdbError) {
        if let Some(t) = self.transactions.get_mut(trans) {
            t.must_abort = true;
            t.first_error
                .get_or_insert_with(|| Box::new((error, op_index)));
        }
    }

    /// The API's execute request arrived. Returns an immediate answer when the transaction is
    /// unknown or the request is inconsistent.
    pub fn on_execute_req(
        &mut self,
        trans: TransId,
        req: TcExecuteReq,
        now: Instant,
    ) -> Option<ApiAnswer> {
        let Some(t) = self.transactions.get_mut(trans) else {
            if let Some(error) = self.aborted_unasked.remove(&trans) {
                return Some(ApiAnswer::ExecuteRef {
                    error,
                    op_index: OP_INDEX_NONE,
                });
            }
            return Some(unknown_transaction_answer(&req, self.transactions_max));
        };
        if let Phase::Aborting(reply @ AbortReply::Unasked(_)) = &mut t.phase {
            // Aborted here while the API was between executes: this execute is answered with
            // the abort's error once the abort is over.
            let AbortReply::Unasked(failed) = std::mem::replace(reply, AbortReply::Conf) else {
                unreachable!("matched above");
            };
            *reply = AbortReply::Ref(failed);
            t.last_activity = now;
            return None;
        }
        if t.phase == Phase::Active && t.execute.is_some() && req.exec_type == ExecType::Rollback {
            // Answered when the running execute ends, by the abort (an early commit is
            // already decided and goes on).
            t.rollback_requested |= !t.early_commit;
            t.last_activity = now;
            return None;
        }
        if t.phase != Phase::Active || t.execute.is_some() {
            return Some(ApiAnswer::ExecuteRef {
                error: NdbError::with_detail(
                    4000,
                    "execute while the previous one is still running",
                ),
                op_index: OP_INDEX_NONE,
            });
        }
        if req.op_count != t.ops_received {
            let detail = format!(
                "execute announces {} operations, {} arrived",
                req.op_count, t.ops_received
            );
            t.first_error = Some(Box::new((
                NdbError::with_detail(4000, detail),
                OP_INDEX_NONE,
            )));
            t.execute = Some(TcExecuteReq {
                abort_option: AbortOption::AbortOnError,
                ..req
            });
        } else {
            t.execute = Some(req);
        }
        t.last_activity = now;
        None
    }

    /// Arbitration holds commits (true) or lets them go on (false).
    pub fn set_commits_held(&mut self, held: bool) {
        self.commits_held = held;
    }

    /// True when the last replica of `trans` was told to commit at once (an early commit).
    pub fn is_early_commit(&self, trans: TransId) -> bool {
        self.transactions.get(trans).is_some_and(|t| t.early_commit)
    }

    /// True while arbitration holds commits.
    pub fn commits_held(&self) -> bool {
        self.commits_held
    }

    /// Ends the current execute of `trans` if it is complete: every operation answered and the
    /// execute request in. Returns the answer to send now, or the LQH action to start.
    pub fn try_complete(
        &mut self,
        trans: TransId,
        now: Instant,
    ) -> Option<Result<ApiAnswer, TcAction>> {
        let t = self.transactions.get_mut(trans)?;
        if t.phase != Phase::Active || t.ops_outstanding > 0 {
            return None;
        }
        let execute = t.execute.take()?;
        t.ops_received = 0;
        t.last_activity = now;
        // Every operation of the execute is answered: its CommittedReads hold nothing more.
        let answered_reads = std::mem::take(&mut t.committed_reads);
        t.operations -= answered_reads;
        self.operations_in_use = self.operations_in_use.saturating_sub(answered_reads);
        if t.rollback_requested {
            t.phase = Phase::Aborting(AbortReply::Conf);
            return Some(Err(TcAction::Abort(trans)));
        }
        let first_error = t.first_error.take();
        let lost_answer = t.lost_answer.take();
        let abort_on_error = execute.abort_option == AbortOption::AbortOnError;
        let abort = abort_on_error || t.must_abort || lost_answer.is_some();
        // The first error, as the API saw it, unless errors are ignored: then the lost answer.
        let failed = if abort_on_error || t.must_abort {
            first_error.or(lost_answer)
        } else {
            lost_answer.or(first_error)
        };
        if let (Some(failed), true) = (failed, abort) {
            t.phase = Phase::Aborting(AbortReply::Ref(failed));
            return Some(Err(TcAction::Abort(trans)));
        }
        // A transaction whose last replica committed early (before the hold) must commit
        // everywhere: the hold stops new commits, not one already made.
        if self.commits_held && execute.exec_type == ExecType::Commit && !t.early_commit {
            let held = NdbError::with_detail(
                286,
                "a data node failed, and arbitration has not yet decided whether this side of \
                 the cluster goes on",
            );
            t.phase = Phase::Aborting(AbortReply::Ref(Box::new((held, OP_INDEX_NONE))));
            return Some(Err(TcAction::Abort(trans)));
        }
        match execute.exec_type {
            ExecType::NoCommit => Some(Ok(ApiAnswer::ExecuteConf { gci: None })),
            ExecType::Commit => {
                t.phase = Phase::Committing;
                t.durable = execute.flags & FLAG_DURABLE_COMMIT != 0;
                Some(Err(TcAction::Commit(trans)))
            }
            ExecType::Rollback => {
                t.phase = Phase::Aborting(AbortReply::Conf);
                Some(Err(TcAction::Abort(trans)))
            }
        }
    }

    /// Node `node` may hold rows of `trans` from now on, as `holds` says.
    pub fn add_participant(&mut self, trans: TransId, node: NodeId, holds: Holds) {
        if let Some(t) = self.transactions.get_mut(trans) {
            t.participants.insert(node);
            match holds {
                Holds::Primary => t.primaries.insert(node),
                Holds::Backup => t.backups.insert(node),
                Holds::Lock => false,
            };
            t.wrote |= holds != Holds::Lock;
        }
    }

    /// True when the operation being passed to its last replica `last` (`replicas` are the
    /// nodes of its partition) may have that replica commit at once: the execute asks for
    /// Commit, no operation failed or is outstanding besides this one, no node outside
    /// `replicas` holds rows of the transaction, and `last` is the primary of no write (it
    /// commits everything it holds, and a primary's row must not commit before its backups;
    /// a read's lock it releases early changes nothing).
    /// Then only this operation's own failure can stop the commit, and it leaves nothing on the
    /// last replica. Marks the transaction so that nothing aborts it meanwhile.
    pub fn start_early_commit(&mut self, trans: TransId, replicas: &NodeSet, last: NodeId) -> bool {
        let Some(t) = self.transactions.get_mut(trans) else {
            return false;
        };
        let commits = t
            .execute
            .is_some_and(|e| e.exec_type == ExecType::Commit && e.op_count == t.ops_received);
        let ok = !self.commits_held
            && t.phase == Phase::Active
            && commits
            && t.ops_outstanding == 1
            && t.first_error.is_none()
            && t.lost_answer.is_none()
            && !t.must_abort
            && !t.rollback_requested
            && t.participants.is_subset(replicas)
            && !t.primaries.contains(last);
        t.early_commit |= ok;
        ok
    }

    /// `node` committed the transaction on its own (an early commit): no round goes to it.
    pub fn participant_committed(&mut self, trans: TransId, node: NodeId) {
        if let Some(t) = self.transactions.get_mut(trans) {
            debug_assert!(
                !t.primaries.contains(node),
                "early commit at node {node}, the primary of a write of {trans:#x}"
            );
            t.participants.remove(node);
            t.backups.remove(node);
            t.primaries.remove(node);
        }
    }

    /// Starts the next round of the commit or the abort of `trans` and returns the nodes to
    /// send it to (none when it is over). A commit runs per row, as NDB's linear commit does
    /// per operation: first every node holding a backup replica commits those rows, then the
    /// primaries commit theirs, so a row a reader can see at its primary is committed on every
    /// replica. A node that is a backup of one write and the primary of another is in both
    /// rounds, committing only its backup rows in the first. An abort goes to every participant
    /// at once.
    pub fn next_round(&mut self, trans: TransId) -> Round {
        let Some(t) = self.transactions.get_mut(trans) else {
            return Round::default();
        };
        let backups = t.backups.intersection(&t.participants);
        // Pure backups (and their read locks) are done after the first round; every other
        // participant (this node, the primaries, nodes holding only read locks) commits in the
        // second.
        let second = t.participants.difference(&backups.difference(&t.primaries));
        let round = match (&t.phase, t.commit_round) {
            (Phase::Committing, 0) if !backups.is_empty() => {
                t.commit_round = 1;
                Round {
                    nodes: backups,
                    backup_rows_only: backups.intersection(&second),
                }
            }
            (Phase::Committing, 0 | 1) => {
                t.commit_round = 2;
                Round {
                    nodes: second,
                    backup_rows_only: NodeSet::new(),
                }
            }
            (Phase::Aborting(_), 0) => {
                t.commit_round = 2;
                Round {
                    nodes: t.participants,
                    backup_rows_only: NodeSet::new(),
                }
            }
            _ => Round::default(),
        };
        t.awaiting = round.nodes;
        round
    }

    /// Node `node` confirmed the current round of `trans`'s commit or abort. True when the
    /// round is complete.
    pub fn round_done(&mut self, trans: TransId, node: NodeId) -> bool {
        let Some(t) = self.transactions.get_mut(trans) else {
            return false;
        };
        let before = t.awaiting.len();
        t.awaiting.remove(node);
        before > 0 && t.awaiting.is_empty()
    }

    /// Transactions that wait for a confirmation from `node`.
    pub fn awaiting_node(&self, node: NodeId) -> Vec<TransId> {
        self.transactions
            .iter()
            .filter(|(_, t)| t.awaiting.contains(node))
            .map(|(id, _)| id)
            .collect()
    }

    /// Active transactions with rows on `node`: they abort with `error` (the node failed).
    pub fn fail_participant(&mut self, node: NodeId, error: &NdbError) -> Vec<TransId> {
        let mut failed = Vec::new();
        for (trans, t) in self.transactions.iter_mut() {
            if t.phase == Phase::Active && t.participants.remove(node) {
                t.phase = Phase::Aborting(t.abort_reply(error.clone()));
                failed.push(trans);
            } else {
                t.participants.remove(node);
            }
            t.backups.remove(node);
            t.primaries.remove(node);
        }
        failed
    }

    /// LQH finished committing or aborting: the record goes, and this is the API's answer.
    pub fn on_finished(&mut self, trans: TransId) -> Option<ApiAnswer> {
        let t = self.transactions.remove(trans)?;
        self.operations_in_use = self.operations_in_use.saturating_sub(t.operations);
        self.index_operations_in_use =
            (self.index_operations_in_use).saturating_sub(t.index_ops.len() as u32);
        self.fired_triggers_in_use = self.fired_triggers_in_use.saturating_sub(t.fired_triggers);
        match t.phase {
            Phase::Committing => Some(t.committed_answer()),
            Phase::Aborting(AbortReply::Conf) => Some(ApiAnswer::ExecuteConf { gci: None }),
            Phase::Aborting(AbortReply::Ref(failed)) => {
                let (error, op_index) = *failed;
                Some(ApiAnswer::ExecuteRef { error, op_index })
            }
            Phase::Aborting(AbortReply::Unasked(failed)) => {
                self.aborted_unasked.insert(trans, failed.0);
                self.aborted_unasked_order.push_back(trans);
                while self.aborted_unasked_order.len() > self.transactions_max as usize {
                    if let Some(old) = self.aborted_unasked_order.pop_front() {
                        self.aborted_unasked.remove(&old);
                    }
                }
                None
            }
            Phase::Aborting(AbortReply::Silent) | Phase::Active | Phase::Saving => None,
        }
    }

    /// The commit of `trans` is over on every participant: when it is durable and its global
    /// checkpoint is newer than `restorable` (the newest saved one), its answer is held until
    /// that checkpoint is saved, and true is returned. The record stays (it bounds the held
    /// answers by MaxNoOfConcurrentTransactions); its operation records go at once.
    ///
    /// While commits are held (arbitration has not decided whether this side of the cluster
    /// goes on) every commit's answer is held: one given now could be lost if the side stops
    /// (its commit reached this side's replicas only). A commit that is not durable, or whose
    /// checkpoint is saved, waits as checkpoint 0, answered when the hold ends.
    pub fn hold_for_checkpoint(&mut self, trans: TransId, restorable: u32, now: Instant) -> bool {
        let held = self.commits_held;
        let Some(t) = self.transactions.get_mut(trans) else {
            return false;
        };
        // A transaction that wrote nothing has nothing to save: answered at once.
        let unsaved = t.durable && t.wrote && gci_hi(t.gci) > restorable;
        if t.phase != Phase::Committing || !(unsaved || held) {
            return false;
        }
        let checkpoint = if unsaved { gci_hi(t.gci) } else { 0 };
        debug_assert!(
            t.gci != 0 || !unsaved,
            "a commit over everywhere has its GCI"
        );
        t.phase = Phase::Saving;
        self.operations_in_use = self.operations_in_use.saturating_sub(t.operations);
        t.operations = 0;
        self.index_operations_in_use =
            (self.index_operations_in_use).saturating_sub(t.index_ops.len() as u32);
        t.index_ops.clear();
        self.fired_triggers_in_use = self.fired_triggers_in_use.saturating_sub(t.fired_triggers);
        t.fired_triggers = 0;
        self.saving.insert((checkpoint, trans));
        if checkpoint != 0 {
            self.saving_since.entry(checkpoint).or_insert(now);
        }
        true
    }

    /// Global checkpoints up to `restorable` are saved: the durable commits held for them end,
    /// oldest checkpoint first, each with its answer for the API.
    pub fn checkpoint_saved(&mut self, restorable: u32) -> Vec<(TransId, ApiAnswer)> {
        let mut saved = Vec::new();
        while let Some(&(checkpoint, trans)) = self.saving.first() {
            if checkpoint > restorable {
                break;
            }
            self.saving.pop_first();
            if let Some(t) = self.transactions.remove(trans) {
                debug_assert_eq!(t.phase, Phase::Saving);
                saved.push((trans, t.committed_answer()));
            }
        }
        self.saving_since = self.saving_since.split_off(&restorable.saturating_add(1));
        saved
    }

    /// The durable commits held for a checkpoint that is still not saved `limit` after its
    /// first commit was held (twice TimeBetweenGlobalCheckpointsTimeout: the bound of a
    /// node's part in the save, the GCP stop, and as long again for the rest of its node group
    /// to save without it). Each is committed, but whether it will survive a crash of the
    /// whole cluster is unknown: it ends with 4012 (unknown result), and its record goes, so
    /// that a cluster that can no longer save (every live node of a group on a failed disk)
    /// does not keep MaxNoOfConcurrentTransactions records for good. Not while commits are
    /// held for arbitration (their answers wait for its decision, which is bounded).
    pub fn saves_overdue(&mut self, now: Instant, limit: Duration) -> Vec<(TransId, ApiAnswer)> {
        let overdue = self
            .saving_since
            .iter()
            .take_while(|(_, &since)| now.saturating_duration_since(since) >= limit)
            .map(|(&checkpoint, _)| checkpoint)
            .last();
        let Some(overdue) = overdue.filter(|_| !self.commits_held) else {
            return Vec::new();
        };
        self.saving_since = self.saving_since.split_off(&(overdue + 1));
        let ended: Vec<(u32, TransId)> = self
            .saving
            .range((1, TransId(0))..=(overdue, TransId(u64::MAX)))
            .copied()
            .collect();
        let mut answers = Vec::with_capacity(ended.len());
        for (checkpoint, trans) in ended {
            self.saving.remove(&(checkpoint, trans));
            if self.transactions.remove(trans).is_some() {
                let error = NdbError::with_detail(
                    4012,
                    format!(
                        "committed in memory, but global checkpoint {checkpoint} was not saved \
                         within {} ms (twice TimeBetweenGlobalCheckpointsTimeout): whether \
                         the commit is durable is unknown",
                        limit.as_millis()
                    ),
                );
                answers.push((
                    trans,
                    ApiAnswer::ExecuteRef {
                        error,
                        op_index: OP_INDEX_NONE,
                    },
                ));
            }
        }
        answers
    }

    /// Durable commits whose answers wait for a global checkpoint.
    pub fn saving_count(&self) -> usize {
        self.saving.len()
    }

    /// The error the next execute of `trans` is told: TC aborted it on its own, and its API has
    /// not asked since.
    pub fn aborted_unasked(&self, trans: TransId) -> Option<&NdbError> {
        self.aborted_unasked.get(&trans)
    }

    /// Transactions to abort now: lock waits past TransactionDeadlockDetectionTimeout (answered
    /// with 266) and idle transactions past TransactionInactiveTimeout (their next execute is
    /// told 237).
    /// Looks at every transaction, so it does so only every tenth of the shorter timeout
    /// (between 10 and 100 ms): a timeout fires at most that much late.
    pub fn expired(&mut self, now: Instant) -> Vec<TransId> {
        if self.next_expiry_scan.is_some_and(|next| now < next) {
            return Vec::new();
        }
        let shortest = self
            .inactive_timeout
            .map_or(self.deadlock_timeout, |t| t.min(self.deadlock_timeout));
        let interval = (shortest / 10).clamp(Duration::from_millis(10), Duration::from_millis(100));
        self.next_expiry_scan = Some(now + interval);
        let mut expired = Vec::new();
        for (trans, t) in self.transactions.iter_mut() {
            if t.phase != Phase::Active || t.early_commit {
                continue;
            }
            if t.ops_outstanding > 0 && now.duration_since(t.dispatched_at) > self.deadlock_timeout
            {
                let detail = format!(
                    "lock wait exceeded TransactionDeadlockDetectionTimeout={} ms",
                    self.deadlock_timeout.as_millis()
                );
                t.phase = Phase::Aborting(t.abort_reply(NdbError::with_detail(266, detail)));
                expired.push(trans);
            } else if t.ops_outstanding == 0 && t.execute.is_none() {
                // Idle: nothing runs for it and no execute is pending, whether or not
                // operations of an execute whose TC_EXECUTE_REQ never came arrived (their
                // locks must not outlive TransactionInactiveTimeout, counted from the last
                // signal the API sent for the transaction).
                if let Some(limit) = self.inactive_timeout {
                    if now.duration_since(t.last_activity) > limit {
                        let error =
                            NdbError::with_detail(237, "aborted after TransactionInactiveTimeout");
                        t.phase =
                            Phase::Aborting(AbortReply::Unasked(Box::new((error, OP_INDEX_NONE))));
                        expired.push(trans);
                    }
                }
            }
        }
        expired
    }

    /// Aborts `trans` if it is idle (open, nothing of it running or asked to run, no early
    /// commit): its API's next execute is told `error`, as after TransactionInactiveTimeout.
    /// True when it was.
    pub fn abort_idle(&mut self, trans: TransId, error: NdbError) -> bool {
        let Some(t) = self.transactions.get_mut(trans) else {
            return false;
        };
        if t.phase != Phase::Active
            || t.early_commit
            || t.ops_outstanding > 0
            || t.execute.is_some()
        {
            return false;
        }
        t.phase = Phase::Aborting(AbortReply::Unasked(Box::new((error, OP_INDEX_NONE))));
        true
    }

    /// Aborts every idle transaction (as [`Tc::abort_idle`]) of API nodes other than `api`,
    /// except scan parts another node coordinates and those `spared` names; returns those
    /// aborted.
    pub fn abort_idle_except(
        &mut self,
        api: NodeId,
        error: &NdbError,
        spared: &dyn Fn(TransId) -> bool,
    ) -> Vec<TransId> {
        let others: Vec<TransId> = (self.transactions.iter())
            .filter(|(trans, t)| trans_parts(*trans).0 != api && !t.scan_part && !spared(*trans))
            .map(|(trans, _)| trans)
            .collect();
        others
            .into_iter()
            .filter(|&trans| self.abort_idle(trans, error.clone()))
            .collect()
    }

    /// Every transaction of an API node that left: aborted without an answer.
    pub fn abandon_node(&mut self, api: NodeId) -> Vec<TransId> {
        let mut abandoned = Vec::new();
        let mut unanswered = Vec::new();
        for (trans, t) in self.transactions.iter_mut() {
            if trans_parts(trans).0 != api {
                continue;
            }
            match &mut t.phase {
                // An early commit runs to its end like a commit.
                Phase::Active if t.early_commit => {}
                Phase::Active => {
                    t.phase = Phase::Aborting(AbortReply::Silent);
                    abandoned.push(trans);
                }
                // A commit or abort that started runs to its end (replicas may already have
                // committed); only its answer goes nowhere.
                Phase::Aborting(reply) => *reply = AbortReply::Silent,
                // Nobody waits for its checkpoint either.
                Phase::Committing => t.durable = false,
                // Committed: only its answer was left, and nobody waits for it now.
                Phase::Saving => unanswered.push((gci_hi(t.gci), trans)),
            }
        }
        for (checkpoint, trans) in unanswered {
            self.saving.remove(&(checkpoint, trans));
            self.transactions.remove(trans);
        }
        abandoned
    }
}

impl TcTransaction {
    fn new(me: NodeId, now: Instant) -> Self {
        TcTransaction {
            participants: [me].into_iter().collect(),
            backups: NodeSet::new(),
            primaries: NodeSet::new(),
            awaiting: NodeSet::new(),
            commit_round: 0,
            early_commit: false,
            durable: false,
            gci: 0,
            rollback_requested: false,
            scan_part: false,
            phase: Phase::Active,
            ops_received: 0,
            ops_outstanding: 0,
            operations: 0,
            committed_reads: 0,
            dml_operations: 0,
            index_ops: Vec::new(),
            fired_triggers: 0,
            execute: None,
            first_error: None,
            must_abort: false,
            lost_answer: None,
            dispatched_at: now,
            last_activity: now,
            wrote: false,
            last_row: None,
        }
    }

    /// How an abort TC starts on its own with `error` is answered: to the execute that waits,
    /// or, between executes, to the API's next one.
    fn abort_reply(&self, error: NdbError) -> AbortReply {
        let failed = Box::new((error, OP_INDEX_NONE));
        if self.execute.is_some() {
            AbortReply::Ref(failed)
        } else {
            AbortReply::Unasked(failed)
        }
    }

    /// The answer of its commit, over on every participant: the row kept for it with the
    /// confirmation, or the confirmation alone; either names the GCI only if it wrote (a
    /// read-only commit changed nothing that a GCI could name, as in NDB).
    fn committed_answer(self: Box<Self>) -> ApiAnswer {
        let gci = (self.wrote && self.gci != 0).then_some(self.gci);
        match self.last_row {
            Some(kept) => {
                let (op_index, row) = *kept;
                ApiAnswer::RowConf { op_index, row, gci }
            }
            None => ApiAnswer::ExecuteConf { gci },
        }
    }
}

/// The answer to an execute for a transaction TC does not know.
fn unknown_transaction_answer(req: &TcExecuteReq, transactions_max: u32) -> ApiAnswer {
    if req.flags & FLAG_START_TRANSACTION == 0 {
        // The API believes the transaction is open: it was aborted here, which only happens on
        // its own (TransactionInactiveTimeout) without the API being told.
        return ApiAnswer::ExecuteRef {
            error: NdbError::with_detail(237, "aborted after TransactionInactiveTimeout"),
            op_index: OP_INDEX_NONE,
        };
    }
    if req.op_count == 0 {
        return ApiAnswer::ExecuteConf { gci: None };
    }
    // A new transaction whose operations found no free transaction record.
    ApiAnswer::ExecuteRef {
        error: NdbError::with_detail(
            233,
            format!("MaxNoOfConcurrentTransactions={transactions_max}"),
        ),
        op_index: OP_INDEX_NONE,
    }
}
