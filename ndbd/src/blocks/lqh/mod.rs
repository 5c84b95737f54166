//! LQH: runs key operations on the fragments of this node, using ACC for the hash index and
//! locks and TUP for row images and DataMemory. Keeps, per transaction, the rows it touched, so
//! that commit and abort visit exactly those.

pub mod commit;
pub mod foreign;
pub mod key;
pub mod lcp;
pub mod redo;
mod restore;
pub mod scan;

use hashbrown::HashMap;

use rndb_config::NodeId;
use rndb_protocol::id_hash::SequentialIds;
use rndb_protocol::interpreter::Program;
use rndb_protocol::{LockMode, NdbError, OperationType, TableDef, Value};

use crate::blocks::acc::{
    KeyHash, LockKind, OpKey, Pending, Row, RowSlot, SlotId, SlotStore, TransId, Waiter,
};
use crate::blocks::dict::{Dict, Table};
use crate::blocks::tup::{self, DataMemory};
use crate::blocks::tux::OrderedIndex;
use crate::ndbfs::backup::backup_kind;
use crate::ndbfs::format::{gci_hi, kind, RowChange};

/// Names a scan: the API node that opened it and its scan id for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScanKey {
    pub api: NodeId,
    pub scan_id: u32,
}

/// Work parked in a row lock's queue until the lock is granted.
#[derive(Debug)]
pub enum LqhWork {
    /// A key operation, run again when granted.
    Key(Box<LqhKeyReq>),
    /// A scan of one fragment, resumed at the row it waits for.
    Scan { scan: ScanKey, fragment: u32 },
}

/// Why TC sent a key operation, which decides what happens with its answer.
#[derive(Clone, Debug)]
pub enum OpRole {
    /// An operation the API defined: answered to the API.
    Api,
    /// The first hop of an operation through a unique index: a read of the index table, whose
    /// answer names the base row the second hop works on.
    UniqueLookup(Box<UniqueLookup>),
    /// Index maintenance fired by a base-table write (NDB's trigger): its failure fails the
    /// base operation (a duplicate becomes 893) and aborts the transaction.
    Trigger,
    /// An operation whose TC is on node `tc_node` (or whose role TC keeps under `token`
    /// while a replica on another node runs it): the answer goes back to that TC.
    Remote { tc_node: NodeId, token: u32 },
}

/// The base-table operation that follows a unique-index lookup.
#[derive(Clone, Debug)]
pub struct UniqueLookup {
    pub base_table_id: u32,
    pub op_type: OperationType,
    pub lock_mode: LockMode,
    pub attrs: Vec<(u16, Value)>,
}

/// One key operation, as TC hands it to LQH.
#[derive(Clone, Debug)]
pub struct LqhKeyReq {
    pub trans: TransId,
    /// The operation's index in its execute, echoed back to the API.
    pub op_index: u32,
    pub op_type: OperationType,
    pub lock_mode: LockMode,
    pub table_id: u32,
    pub fragment: u32,
    /// The canonical key encoding (the hash-index key), with its hash.
    pub key_bytes: OpKey,
    pub key: Vec<Value>,
    pub attrs: Vec<(u16, Value)>,
    pub role: OpRole,
    /// Replicas that run a write after this node, in order, each with its run as the TC knew
    /// it (`lqh::RUN_UNKNOWN` when it did not): the last one answers TC.
    pub chain: Vec<(NodeId, u64)>,
    /// The last replica commits the transaction on its node when the operation succeeds (TC
    /// decided to commit, and nothing else of the transaction can fail).
    pub commit_at_last: bool,
    /// This replica is a backup: the primary already ran the operation.
    pub backup: bool,
    /// An interpreted operation's program: an update's runs at the primary replica against
    /// the row it locked, and its backups get the values it computed as attributes instead;
    /// a read's or delete's condition decides whether it reads or deletes.
    pub program: Option<Box<Program>>,
}

impl LqhKeyReq {
    /// A read of nothing by nobody, for `build_lqh_req` to fill in place.
    #[inline]
    pub fn blank() -> LqhKeyReq {
        LqhKeyReq {
            trans: TransId(0),
            op_index: 0,
            op_type: OperationType::Read,
            lock_mode: LockMode::CommittedRead,
            table_id: 0,
            fragment: 0,
            key_bytes: OpKey::blank(),
            key: Vec::new(),
            attrs: Vec::new(),
            role: OpRole::Api,
            chain: Vec::new(),
            commit_at_last: false,
            backup: false,
            program: None,
        }
    }
}

/// A change of a unique index's hidden table that a base-table write fired.
#[derive(Debug)]
pub struct IndexChange {
    pub hidden_table_id: u32,
    /// Insert (a new unique value) or Delete (an old one).
    pub op_type: OperationType,
    /// The unique columns' values: the hidden table's key.
    pub key: Vec<Value>,
    /// The base row's canonical primary key (the hidden row's value).
    pub pk: Box<[u8]>,
}

/// LQH's answer to one operation.
#[derive(Debug)]
pub enum LqhKeyConfRef {
    /// Done; a read carries its row, a write the index changes it fired.
    Conf {
        trans: TransId,
        op_index: u32,
        /// A read's row: the stored image itself (shared, not copied).
        row: Option<Row>,
        role: OpRole,
        fired: Vec<IndexChange>,
        /// The transaction is committed on this node (see `LqhKeyReq::commit_at_last`).
        committed: bool,
    },
    /// Failed with an NDB error.
    Ref {
        trans: TransId,
        op_index: u32,
        error: NdbError,
        role: OpRole,
        /// A backup replica refused what its primary ran: the transaction must abort.
        backup: bool,
    },
}

/// A row a transaction touched (locked, or queued for), by slot id: a slot is removed only when
/// nobody holds or waits for its lock, and only the transaction's own commit or abort releases
/// what it holds or waits for, so the id stays valid until then.
#[derive(Debug)]
pub(crate) struct RowRef {
    pub table_id: u32,
    pub fragment: u32,
    pub slot: SlotId,
    /// This node touched the row as a backup replica (the operation that first touched it here
    /// came down a replica chain), so it may commit in TC's first round; a row held as the
    /// primary (or locked by a read or a scan) commits only in the second, after its backups.
    /// A transaction's role on a row cannot change while it holds it: a new primary takes over
    /// only when the old one fails, and that aborts every active transaction with rows there.
    pub backup: bool,
}

/// 16 bytes: the row lists are walked by every commit and abort.
const _: () = assert!(std::mem::size_of::<RowRef>() <= 16);

/// Which of a transaction's rows a commit finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitRows {
    /// Every row (TC's last round to this node, an early commit, a take-over's decision).
    All,
    /// Only the rows held as a backup replica (`RowRef::backup`): TC's first round to a node
    /// that is also the primary of another write of the transaction.
    BackupOnly,
}

impl CommitRows {
    /// [`CommitRows::BackupOnly`] when `backup_only`, else [`CommitRows::All`].
    pub fn backup_only_if(backup_only: bool) -> CommitRows {
        if backup_only {
            CommitRows::BackupOnly
        } else {
            CommitRows::All
        }
    }
}

/// One fragment: its rows (ACC slots with TUP images) and its ordered indexes (TUX).
#[derive(Debug, Default)]
pub struct Fragment {
    pub rows: SlotStore<LqhWork>,
    pub ordered: Vec<OrderedIndex>,
    /// What changed since the local checkpoint scan last passed (kept only with a redo log).
    pub lcp: lcp::Changes,
    /// While an online backup backs this fragment up here: the changes committed since it
    /// began, not yet handed to its log file (`backup.rs`).
    pub backup_log: Option<Box<crate::blocks::backup::BackupLog>>,
    /// While the fragment's table has event subscribers: the changes committed since the
    /// last epoch SUMA reported complete (`suma.rs`).
    pub events: Option<Box<crate::blocks::suma::EventLog>>,
}

/// The LQH block with its fragments.
#[derive(Debug)]
pub struct Lqh {
    /// Per table, its fragments.
    pub(crate) fragments: HashMap<u32, Vec<Fragment>>,
    /// Rows each live transaction touched.
    pub(crate) trans_rows: HashMap<TransId, Vec<RowRef>, SequentialIds>,
    /// Entries of `trans_rows` (NDB's LQH operation records: a row a live transaction
    /// locked, wrote or waits for), and how many key operations may hold
    /// (MaxNoOfLocalOperations; a key operation that finds none free fails with 1217).
    records_held: u64,
    records_max: u64,
    /// Emptied row lists of ended transactions, reused by new ones (at most
    /// [`SPARE_ROW_LISTS`], each of at most [`SPARE_ROW_LIST_CAPACITY`] entries).
    spare_rows: Vec<Vec<RowRef>>,
    pub(crate) memory: DataMemory,
    /// The redo log (`None` without files).
    pub(crate) redo: Option<redo::Redo>,
    /// This node restarts and its fragments are being copied to it: an update or delete of a
    /// row it does not have yet succeeds without doing anything (NDB's AC_IGNORED), since the
    /// copy brings the row's committed image after the writer's commit (see `node_restart.rs`).
    pub(crate) copying: bool,
    /// Key operations and locking scans that had to wait for a row lock, since the start
    /// (reported to ndb_mgmd; monotonic).
    pub(crate) lock_waits_total: u64,
    /// Key operations run here since the start (NDB's DBLQH OPERATIONS counter).
    pub(crate) operations_total: u64,
    /// The newest epoch a commit here belonged to, logged or not (a node being copied to
    /// keeps no redo log yet): a local checkpoint taken after it may lack a row such a commit
    /// deleted, which no record of the checkpoint names.
    pub(crate) newest_committed: u64,
    /// Rows a commit found their table dropped under (their fragment gone): DROP TABLE waits
    /// for the transactions holding its table's rows, so this stays 0 (the simulator checks).
    pub(crate) commits_of_dropped_rows: u64,
}

/// Queued jobs [`Lqh::warm`] looks ahead at.
pub const WARM_MAX: usize = 16;

/// Work whose rows [`Lqh::warm`] brings into the cache.
#[derive(Clone, Copy, Debug)]
pub enum Warm<'a> {
    /// A key operation's row.
    Key(&'a LqhKeyReq),
    /// The rows a transaction holds, for its commit or abort.
    Rows(TransId),
}

/// Row lists kept for reuse: enough for the transactions a busy node starts between two
/// rounds of its loop.
const SPARE_ROW_LISTS: usize = 4096;
/// A row list with room for more rows is freed rather than kept, so the spares hold at most
/// 4096 × 64 × 16 bytes (4 MiB) however large the transactions were.
const SPARE_ROW_LIST_CAPACITY: usize = 64;

impl Lqh {
    pub fn new(data_memory_bytes: u64) -> Lqh {
        Lqh {
            fragments: HashMap::new(),
            trans_rows: HashMap::default(),
            records_held: 0,
            records_max: u64::MAX,
            spare_rows: Vec::new(),
            memory: DataMemory::new(data_memory_bytes),
            redo: None,
            copying: false,
            lock_waits_total: 0,
            operations_total: 0,
            newest_committed: 0,
            commits_of_dropped_rows: 0,
        }
    }

    /// Key operations leave `pct` percent of DataMemory free (MinFreePct).
    pub fn with_min_free_pct(mut self, pct: u8) -> Lqh {
        self.memory.set_min_free_pct(pct);
        self
    }

    /// Key operations hold at most `max` operation records (MaxNoOfLocalOperations).
    pub fn with_local_operations_max(mut self, max: u32) -> Lqh {
        self.records_max = u64::from(max);
        self
    }

    pub fn create_fragments(&mut self, table_id: u32, count: u32) {
        self.fragments
            .insert(table_id, (0..count).map(|_| Fragment::default()).collect());
    }

    /// Fragment `fragment` of table `table_id`.
    pub(crate) fn fragment(&self, table_id: u32, fragment: u32) -> Option<&Fragment> {
        self.fragments.get(&table_id)?.get(fragment as usize)
    }

    pub(crate) fn fragment_mut(&mut self, table_id: u32, fragment: u32) -> Option<&mut Fragment> {
        self.fragments
            .get_mut(&table_id)?
            .get_mut(fragment as usize)
    }

    /// Starts (`Some`: with the images changes replace, or not) or stops (`None`) logging
    /// the changes committed to each of `fragments` (table, fragment) for an online backup
    /// (`Fragment::backup_log`).
    pub(crate) fn set_backup_logs(&mut self, fragments: &[(u32, u32)], log: Option<bool>) {
        for &(table_id, fragment) in fragments {
            if let Some(f) = self.fragment_mut(table_id, fragment) {
                f.backup_log = log.map(crate::blocks::backup::BackupLog::new);
            }
        }
    }

    /// True while a live transaction holds, or waits for, a row of one of `tables` here.
    pub(crate) fn holds_rows_of(&self, tables: &[u32]) -> bool {
        (self.trans_rows.values().flatten()).any(|r| tables.contains(&r.table_id))
    }

    /// Drops a table's fragments and frees their memory. Operations queued on its rows fail
    /// with 709; scans queued on them are returned, to be resumed (they then find the table
    /// gone).
    pub fn drop_fragments(&mut self, table_id: u32) -> (Vec<LqhKeyConfRef>, Vec<(ScanKey, u32)>) {
        let mut answers = Vec::new();
        let mut scans = Vec::new();
        for mut fragment in self.fragments.remove(&table_id).unwrap_or_default() {
            for index in &mut fragment.ordered {
                index.clear(&mut self.memory);
            }
            for mut slot in fragment.rows.drain() {
                self.memory.free(charged_bytes(&slot));
                for work in drain_waiters(&mut slot) {
                    match work {
                        LqhWork::Key(req) => answers.push(refuse(
                            &req,
                            NdbError::with_detail(709, "the table was dropped"),
                        )),
                        LqhWork::Scan { scan, fragment } => scans.push((scan, fragment)),
                    }
                }
            }
        }
        (answers, scans)
    }

    /// Forgets the rows transactions hold of table `table_id`, whose fragments were dropped
    /// under them: a unique index's hidden table, dropped with its index while transactions
    /// that maintained it run (the entries go with the index; the base rows commit as
    /// usual). A table of the application's is never dropped under a transaction (a drop
    /// waits for them), and a commit that finds one gone is a broken invariant.
    pub fn forget_rows_of(&mut self, table_id: u32) {
        let mut forgotten = 0;
        for rows in self.trans_rows.values_mut() {
            let before = rows.len();
            rows.retain(|r| r.table_id != table_id);
            forgotten += before - rows.len();
        }
        self.records_held = self.records_held.saturating_sub(forgotten as u64);
    }

    /// Builds an ordered index over every row of a table's fragments (committed and
    /// uncommitted images alike). On failure (902) nothing of it remains.
    pub fn build_ordered(
        &mut self,
        table_id: u32,
        index_id: u32,
        columns: &[usize],
    ) -> Result<(), NdbError> {
        let Some(fragments) = self.fragments.get_mut(&table_id) else {
            return Err(NdbError::with_detail(709, format!("table id {table_id}")));
        };
        let mut result = Ok(());
        for fragment in fragments.iter_mut() {
            let mut index = OrderedIndex::new(index_id, columns.to_vec());
            for (id, slot) in fragment.rows.iter() {
                if result.is_err() {
                    break;
                }
                let pending = slot.pending.as_ref().and_then(|p| p.image.as_ref());
                let keys = [slot.committed.as_ref(), pending]
                    .into_iter()
                    .flatten()
                    .map(|row| index.entry_key(row, &slot.key))
                    .collect();
                result = index.add_all(keys, id, &mut self.memory);
            }
            fragment.ordered.push(index);
        }
        if result.is_err() {
            self.drop_ordered(table_id, index_id);
        }
        result
    }

    /// Stores a committed row outside any transaction (building a unique index's hidden table
    /// from existing rows): 630 if the key exists, 827 without memory.
    /// It is logged in the redo log in epoch `gci`.
    pub fn insert_committed(
        &mut self,
        table_id: u32,
        fragment_no: u32,
        key: Box<[u8]>,
        row: Row,
        gci: u64,
    ) -> Result<(), NdbError> {
        let fragment = fragment_no;
        let Some(fragment) = self
            .fragments
            .get_mut(&table_id)
            .and_then(|f| f.get_mut(fragment as usize))
        else {
            return Err(NdbError::with_detail(709, format!("table id {table_id}")));
        };
        if let Some(id) = fragment.rows.id_of(&key) {
            // The same row again is no duplicate (a unique index's build gets each entry from
            // every replica of its base row).
            let same = (fragment.rows.slot(id).and_then(|s| s.committed.as_ref()))
                .is_some_and(|committed| committed.encoded() == row.encoded());
            return if same {
                Ok(())
            } else {
                Err(NdbError::new(630))
            };
        }
        self.memory
            .reserve(tup::slot_bytes(&key) + tup::row_bytes(&row))?;
        let id = fragment.rows.insert(&key);
        if let Some(redo) = self.redo.as_mut() {
            fragment.lcp.changed(id);
            redo.log_change(
                &RowChange {
                    table_id,
                    table_version: 0,
                    fragment: fragment_no,
                    key: &key,
                    row: Some(row.encoded()),
                },
                gci,
            );
        }
        if let Some(slot) = fragment.rows.slot_mut(id) {
            slot.committed = Some(row);
            slot.gci = gci_hi(gci);
        }
        Ok(())
    }

    /// Removes an ordered index from every fragment of its table, freeing its memory.
    pub fn drop_ordered(&mut self, table_id: u32, index_id: u32) {
        for fragment in self.fragments.get_mut(&table_id).into_iter().flatten() {
            for index in &mut fragment.ordered {
                if index.index_id == index_id {
                    index.clear(&mut self.memory);
                }
            }
            fragment.ordered.retain(|i| i.index_id != index_id);
        }
    }

    pub fn memory_used_bytes(&self) -> u64 {
        self.memory.used_bytes()
    }

    /// Operation records held, and MaxNoOfLocalOperations (`u64::MAX` when unbounded).
    pub fn operation_records(&self) -> (u64, u64) {
        (self.records_held, self.records_max)
    }

    /// Row locks held or waited for by live transactions at this LQH (one per row a
    /// transaction locked or wrote here): the operation records in use.
    pub fn row_locks(&self) -> u64 {
        self.debug_check_records();
        self.records_held
    }

    /// In debug builds, that `records_held` counts the entries of `trans_rows`.
    fn debug_check_records(&self) {
        debug_assert_eq!(
            self.records_held,
            self.trans_rows
                .values()
                .map(|rows| rows.len() as u64)
                .sum::<u64>(),
            "operation records held"
        );
    }

    /// Brings into the cache what running `reqs` will read, so that their cache misses
    /// overlap instead of coming one after another: the hash-index entries first, then the
    /// slots, then the committed rows (each stage needs the one before, and the loads of one
    /// stage are independent of each other, so the CPU has them in flight together).
    pub fn warm<'r>(&self, work: impl Iterator<Item = Warm<'r>>) {
        /// Where one job's row is, as far as a stage has found it.
        #[derive(Clone, Copy)]
        enum Found<'a> {
            Key(&'a SlotStore<LqhWork>, KeyHash),
            Slot(&'a SlotStore<LqhWork>, SlotId),
        }
        let rows_of = |table_id: u32, fragment: u32| {
            self.fragments
                .get(&table_id)
                .and_then(|f| f.get(fragment as usize))
                .map(|f| &f.rows)
        };
        let mut found: [Option<Found<'_>>; WARM_MAX] = [None; WARM_MAX];
        for (entry, work) in found.iter_mut().zip(work) {
            *entry = match work {
                Warm::Key(req) => rows_of(req.table_id, req.fragment)
                    .map(|rows| Found::Key(rows, req.key_bytes.index_hash())),
                // A commit or abort starts with the first row the transaction touched.
                Warm::Rows(trans) => self
                    .trans_rows
                    .get(&trans)
                    .and_then(|refs| refs.first())
                    .and_then(|r| Some(Found::Slot(rows_of(r.table_id, r.fragment)?, r.slot))),
            };
        }
        // Each stage reads what the one before brought in, and starts the misses of the next
        // for every job at once: the index entries, then the slots, then the rows.
        let mut touched = 0u64;
        for f in found.iter().flatten() {
            if let Found::Key(rows, hash) = f {
                touched ^= rows.touch_index(*hash);
            }
        }
        for f in found.iter_mut() {
            if let Some(Found::Key(rows, hash)) = *f {
                *f = rows.candidate(hash).map(|id| Found::Slot(rows, id));
            }
        }
        let slots = || {
            found.iter().filter_map(|f| match f {
                Some(Found::Slot(rows, id)) => Some((*rows, *id)),
                _ => None,
            })
        };
        for (rows, id) in slots() {
            touched ^= u64::from(rows.touch_slot(id));
        }
        for (rows, id) in slots() {
            touched ^= u64::from(rows.touch_row(id));
        }
        std::hint::black_box(touched);
    }

    /// Starts bringing in the hash-index entry of `key` in `fragment` of `table_id` (nothing
    /// when this node has no such fragment), so that its miss overlaps the work before the
    /// operation runs.
    pub fn prefetch_key(&self, table_id: u32, fragment: u32, key: &OpKey) {
        if let Some(f) = self
            .fragments
            .get(&table_id)
            .and_then(|f| f.get(fragment as usize))
        {
            f.rows.prefetch_index(key.index_hash());
        }
    }

    /// The values an interpreted update left in its row, as attributes for its backups: its
    /// own attributes' columns and its program's (`None` when the row is gone, which a
    /// confirmed update's lock prevents).
    pub fn resolved_attrs(&self, req: &LqhKeyReq, program: &Program) -> Option<Vec<(u16, Value)>> {
        let row = self
            .fragments
            .get(&req.table_id)?
            .get(req.fragment as usize)?
            .rows
            .get_op(&req.key_bytes)?
            .visible_to(req.trans)?
            .unpack();
        // Each column once, so the backups' request names no more than the table has.
        let columns: std::collections::BTreeSet<u16> = (req.attrs.iter().map(|&(c, _)| c))
            .chain(program.changes.iter().map(|&(c, _)| c))
            .collect();
        columns
            .into_iter()
            .map(|c| Some((c, row.get(usize::from(c))?.clone())))
            .collect()
    }

    /// Runs one operation. Returns `None` when it waits for a lock; it is handed back by
    /// `commit` or `abort` of the holder when the lock is granted.
    pub fn execute(&mut self, dict: &Dict, req: Box<LqhKeyReq>) -> Option<LqhKeyConfRef> {
        if let Some(program) = &req.program {
            // TC checked it; another node's request may hold anything.
            if let Err(error) = program.check_operation(req.op_type) {
                return Some(refuse(&req, error));
            }
        }
        let Some(table) = dict.get(req.table_id) else {
            return Some(refuse(
                &req,
                NdbError::with_detail(709, format!("table id {}", req.table_id)),
            ));
        };
        // No operation starts on a table being dropped: the drop waits only for the rows
        // held when it began (its transaction may still commit or abort what it holds).
        if let Err(e) = dict.check_not_dropping(req.table_id) {
            return Some(refuse(&req, e));
        }
        let Some(fragment) = self
            .fragments
            .get_mut(&req.table_id)
            .and_then(|f| f.get_mut(req.fragment as usize))
        else {
            return Some(refuse(
                &req,
                NdbError::with_detail(
                    4000,
                    format!("table {} has no fragment {}", req.table_id, req.fragment),
                ),
            ));
        };
        let kind = match (req.op_type, req.lock_mode) {
            (OperationType::Read, LockMode::CommittedRead) => {
                let row = fragment
                    .rows
                    .get_op(&req.key_bytes)
                    .and_then(|s| s.visible_to(req.trans));
                return Some(read_answer(&req, &table.info.def, row));
            }
            (OperationType::Read, LockMode::Read) => LockKind::Shared,
            _ => LockKind::Exclusive,
        };
        let id = match fragment.rows.id_of_op(&req.key_bytes) {
            Some(id) => id,
            None => {
                if matches!(req.op_type, OperationType::Update | OperationType::Delete)
                    && self.copying
                    && !table.unique.is_empty()
                {
                    // The unique index changes this write fires come from the last replica's
                    // image of the row, which this node does not have yet: the transaction
                    // fails with a temporary error and is retried (after the copy, or once
                    // the copy has brought the row).
                    return Some(refuse(
                        &req,
                        NdbError::with_detail(
                            1204,
                            "this replica's node restarts and has not copied the row yet",
                        ),
                    ));
                }
                if matches!(req.op_type, OperationType::Update | OperationType::Delete)
                    && self.copying
                {
                    return Some(LqhKeyConfRef::Conf {
                        trans: req.trans,
                        op_index: req.op_index,
                        row: None,
                        role: req.role.clone(),
                        fired: Vec::new(),
                        committed: false,
                    });
                }
                if matches!(
                    req.op_type,
                    OperationType::Read | OperationType::Update | OperationType::Delete
                ) {
                    return Some(refuse(&req, NdbError::new(626)));
                }
                if self.records_held >= self.records_max {
                    return Some(refuse(&req, out_of_records(self.records_max)));
                }
                if let Err(e) = (self.memory).reserve_for_operation(tup::slot_bytes(&req.key_bytes))
                {
                    return Some(refuse(&req, e));
                }
                fragment.rows.insert(&req.key_bytes)
            }
        };
        let slot = fragment.rows.slot_mut(id)?;
        if !slot.lock.held_by(req.trans) {
            // A row the transaction does not hold yet takes a record (checked before a new
            // row's slot is made, so nothing is left to undo); one it holds, or an operation
            // run again once granted the lock it waited for, takes none.
            if self.records_held >= self.records_max {
                return Some(refuse(&req, out_of_records(self.records_max)));
            }
            self.records_held += 1;
            let spare = &mut self.spare_rows;
            self.trans_rows
                .entry(req.trans)
                .or_insert_with(|| spare.pop().unwrap_or_default())
                .push(RowRef {
                    table_id: req.table_id,
                    fragment: req.fragment,
                    slot: id,
                    backup: req.backup,
                });
        }
        if !slot.lock.try_acquire(req.trans, kind) {
            self.lock_waits_total += 1;
            slot.lock.enqueue(Waiter {
                trans: req.trans,
                kind,
                work: LqhWork::Key(req),
            });
            return None;
        }
        apply(fragment, id, table, &mut self.memory, &req)
    }

    /// Makes every change of `trans` the committed image and releases its locks. Returns the
    /// work whose locks were granted, to be run again: only work of transactions that are
    /// still `live` (a waiter of a transaction whose own commit or abort has started is dropped
    /// instead, so that none of its work runs after that).
    /// Each change is logged in the redo log, tagged with epoch `gci`.
    pub fn commit(
        &mut self,
        trans: TransId,
        gci: u64,
        live: &dyn Fn(TransId) -> bool,
    ) -> Vec<LqhWork> {
        self.newest_committed = self.newest_committed.max(gci);
        self.finish(trans, Some(gci), live)
    }

    /// Commits the rows of `trans` that `rows` names (with [`CommitRows::BackupOnly`], the
    /// others stay held for the round that commits them). Returns the granted work, as
    /// [`commit`](Self::commit).
    pub fn commit_rows(
        &mut self,
        trans: TransId,
        rows: CommitRows,
        gci: u64,
        live: &dyn Fn(TransId) -> bool,
    ) -> Vec<LqhWork> {
        self.newest_committed = self.newest_committed.max(gci);
        match rows {
            CommitRows::All => self.finish(trans, Some(gci), live),
            CommitRows::BackupOnly => self.commit_backup_rows(trans, gci, live),
        }
    }

    /// Discards every change of `trans`, drops its queued operations and releases its locks.
    /// Returns the granted work, as [`commit`](Self::commit).
    pub fn abort(&mut self, trans: TransId, live: &dyn Fn(TransId) -> bool) -> Vec<LqhWork> {
        self.finish(trans, None, live)
    }

    /// True when `trans` holds here, as the primary replica, a change not yet committed: the
    /// change a commit of every row would make visible before that row's backups commit.
    pub fn holds_primary_change(&self, trans: TransId) -> bool {
        self.trans_rows.get(&trans).is_some_and(|rows| {
            rows.iter().filter(|r| !r.backup).any(|r| {
                self.fragments
                    .get(&r.table_id)
                    .and_then(|f| f.get(r.fragment as usize))
                    .and_then(|f| f.rows.slot(r.slot))
                    .and_then(|slot| slot.pending.as_ref())
                    .is_some_and(|p| p.trans == trans)
            })
        })
    }

    /// True while `trans` holds or waits for a row here.
    pub fn touches_rows(&self, trans: TransId) -> bool {
        self.trans_rows.contains_key(&trans)
    }

    /// Work of a transaction that ended is dropped instead of run (its commit or abort started
    /// before the work's turn came). If that transaction's commit or abort has already run
    /// here, a lock the work was granted is released, and the work it grants is returned.
    pub fn drop_work(&mut self, req: &LqhKeyReq, live: &dyn Fn(TransId) -> bool) -> Vec<LqhWork> {
        if self.trans_rows.contains_key(&req.trans) {
            // Its commit or abort is still to run and releases everything it holds.
            return Vec::new();
        }
        let Some(rows) = self
            .fragments
            .get_mut(&req.table_id)
            .and_then(|f| f.get_mut(req.fragment as usize))
            .map(|f| &mut f.rows)
        else {
            return Vec::new();
        };
        let Some(id) = rows.id_of(&req.key_bytes) else {
            return Vec::new();
        };
        let Some(slot) = rows.slot_mut(id) else {
            return Vec::new();
        };
        if !slot.lock.held_by(req.trans) {
            return Vec::new();
        }
        slot.lock.release(req.trans);
        let granted = slot.lock.grant_live_waiters(live);
        if slot.is_empty() {
            if let Some(slot) = rows.remove(id) {
                self.memory.free(tup::slot_bytes(&slot.key));
            }
        }
        granted
    }

    /// Commits (in epoch `commit`, logging each change) or aborts (`None`) every row of
    /// `trans` and releases its locks.
    fn finish(
        &mut self,
        trans: TransId,
        commit: Option<u64>,
        live: &dyn Fn(TransId) -> bool,
    ) -> Vec<LqhWork> {
        let mut granted = Vec::new();
        let Lqh {
            fragments,
            trans_rows,
            records_held,
            records_max: _,
            spare_rows,
            memory,
            redo,
            copying: _,
            lock_waits_total: _,
            operations_total: _,
            newest_committed: _,
            commits_of_dropped_rows,
        } = self;
        let mut rows = trans_rows.remove(&trans).unwrap_or_default();
        debug_assert!(*records_held >= rows.len() as u64, "operation records held");
        *records_held = records_held.saturating_sub(rows.len() as u64);
        // Rows of one transaction mostly belong to one table: look its fragments up once.
        let mut table: Option<(u32, &mut Vec<Fragment>)> = None;
        for row in rows.drain(..) {
            if table.as_ref().is_none_or(|(id, _)| *id != row.table_id) {
                table = fragments.get_mut(&row.table_id).map(|f| (row.table_id, f));
            }
            if let Some(fragment) = table
                .as_mut()
                .and_then(|(_, f)| f.get_mut(row.fragment as usize))
            {
                let end = match commit {
                    Some(gci) => {
                        RowEnd::Commit(gci, redo.as_mut().map(|r| (r, row.table_id, row.fragment)))
                    }
                    None => RowEnd::Abort,
                };
                release_row(fragment, row.slot, trans, end, live, memory, &mut granted);
            } else if commit.is_some() {
                *commits_of_dropped_rows += 1;
            }
        }
        if spare_rows.len() < SPARE_ROW_LISTS
            && (1..=SPARE_ROW_LIST_CAPACITY).contains(&rows.capacity())
        {
            spare_rows.push(rows);
        }
        granted
    }

    /// Commits the rows `trans` holds as a backup replica and releases their locks; the others
    /// stay in its list, in order, for the round that commits them.
    fn commit_backup_rows(
        &mut self,
        trans: TransId,
        gci: u64,
        live: &dyn Fn(TransId) -> bool,
    ) -> Vec<LqhWork> {
        let mut granted = Vec::new();
        let Lqh {
            fragments,
            trans_rows,
            records_held,
            memory,
            redo,
            commits_of_dropped_rows,
            ..
        } = self;
        let Some(rows) = trans_rows.get_mut(&trans) else {
            return granted;
        };
        let held_before = rows.len();
        // Rare (a node that is backup of one write and primary of another): each row's
        // fragment is looked up afresh.
        rows.retain(|row| {
            if !row.backup {
                return true;
            }
            if let Some(fragment) = fragments
                .get_mut(&row.table_id)
                .and_then(|f| f.get_mut(row.fragment as usize))
            {
                let log = redo.as_mut().map(|r| (r, row.table_id, row.fragment));
                let end = RowEnd::Commit(gci, log);
                release_row(fragment, row.slot, trans, end, live, memory, &mut granted);
            } else {
                *commits_of_dropped_rows += 1;
            }
            false
        });
        let released = (held_before - rows.len()) as u64;
        debug_assert!(*records_held >= released, "operation records held");
        *records_held = records_held.saturating_sub(released);
        if rows.is_empty() {
            // Nothing is left: the list goes, as after a full commit (a spare is not worth
            // keeping for this rare case).
            trans_rows.remove(&trans);
        }
        granted
    }
}

/// 1217: every LQH operation record (MaxNoOfLocalOperations) is held.
fn out_of_records(max: u64) -> NdbError {
    NdbError::with_detail(
        1217,
        format!("MaxNoOfLocalOperations={max}: every operation record is held"),
    )
}

/// How a row's transaction ends: committed in a GCI (and logged in the redo log, when there
/// is one: the log, the table and the fragment), or aborted.
enum RowEnd<'r> {
    Commit(u64, Option<(&'r mut redo::Redo, u32, u32)>),
    Abort,
}

/// Commits or discards what `trans` holds on one row, releases its lock and adds the work that
/// lock grants to `granted`; frees the slot once nobody uses it.
#[inline]
fn release_row(
    fragment: &mut Fragment,
    id: SlotId,
    trans: TransId,
    end: RowEnd<'_>,
    live: &dyn Fn(TransId) -> bool,
    memory: &mut DataMemory,
    granted: &mut Vec<LqhWork>,
) {
    finish_row(fragment, id, trans, end, memory);
    let Some(slot) = fragment.rows.slot_mut(id) else {
        return;
    };
    slot.lock.release(trans);
    granted.extend(slot.lock.grant_live_waiters(live));
    if slot.is_empty() {
        if let Some(slot) = fragment.rows.remove(id) {
            memory.free(tup::slot_bytes(&slot.key));
        }
    }
}

/// Commits or discards the uncommitted image `trans` holds on a slot, keeping the ordered
/// indexes in step: the entries of the image that goes away are removed unless the image that
/// stays has the same entry.
fn finish_row(
    fragment: &mut Fragment,
    id: SlotId,
    trans: TransId,
    end: RowEnd<'_>,
    memory: &mut DataMemory,
) {
    let Some(slot) = fragment.rows.slot_mut(id) else {
        return;
    };
    if slot.pending.as_ref().is_none_or(|p| p.trans != trans) {
        return;
    }
    let Some(pending) = slot.pending.take() else {
        return;
    };
    let commit = matches!(end, RowEnd::Commit(..));
    if let RowEnd::Commit(gci, _) = &end {
        let gci = *gci;
        // A committed change: the row's image is current (see `RowSlot::restored`).
        slot.gci = gci_hi(gci);
        slot.restored = false;
        if let Some(events) = fragment.events.as_mut() {
            events.push(gci, pending.image.as_ref(), slot.committed.as_ref());
        }
    }
    if let RowEnd::Commit(gci, Some((redo, table_id, fragment_no))) = end {
        match &pending.image {
            Some(_) => fragment.lcp.changed(id),
            None => fragment.lcp.deleted(&slot.key),
        }
        redo.log_change(
            &RowChange {
                table_id,
                table_version: 0,
                fragment: fragment_no,
                key: &slot.key,
                row: pending.image.as_ref().map(Row::encoded),
            },
            gci,
        );
        if let Some(log) = fragment.backup_log.as_mut() {
            // A put logs its new image (a SNAPSHOTSTART backup's the one it replaces first),
            // a delete the image it removes.
            match (&pending.image, &slot.committed) {
                (Some(image), replaced) => {
                    if let Some(old) = replaced.as_ref().filter(|_| log.before_images) {
                        log.push(gci, backup_kind::BEFORE, table_id, fragment_no, old);
                    }
                    log.push(gci, kind::PUT, table_id, fragment_no, image);
                }
                (None, Some(gone)) => log.push(gci, kind::DELETE, table_id, fragment_no, gone),
                (None, None) => {}
            }
        }
    }
    let (gone, stays) = if commit {
        let old = std::mem::replace(&mut slot.committed, pending.image);
        (old, slot.committed.as_ref())
    } else {
        (pending.image, slot.committed.as_ref())
    };
    if let Some(gone) = &gone {
        for index in &mut fragment.ordered {
            let stale = index.entry_key(gone, &slot.key);
            if stays.is_none_or(|s| index.entry_key(s, &slot.key) != stale) {
                index.remove(&stale, memory);
            }
        }
    }
    memory.free(gone.as_ref().map_or(0, tup::row_bytes));
}

/// Runs an operation that holds the lock it needs. Returns `Some` always, as `execute` does:
/// built in the caller's `Option`, the answer is not copied again on the way (a copy read it
/// with wider loads than the stores that had just written it, a stall per operation).
fn apply(
    fragment: &mut Fragment,
    id: SlotId,
    table: &Table,
    memory: &mut DataMemory,
    req: &LqhKeyReq,
) -> Option<LqhKeyConfRef> {
    let Some(slot) = fragment.rows.slot(id) else {
        return Some(refuse(req, NdbError::with_detail(4000, "slot vanished")));
    };
    let def = &table.info.def;
    let own_change = slot.pending.as_ref().is_some_and(|p| p.trans == req.trans);
    if slot.restored && !own_change && req.op_type != OperationType::Read {
        if !table.unique.is_empty() {
            // As for a row this node does not have yet (see `execute`): the unique index
            // changes would come from an image that may be stale.
            return Some(refuse(
                req,
                NdbError::with_detail(
                    1204,
                    "this replica's node restarts and has not copied the row yet",
                ),
            ));
        }
        if matches!(req.op_type, OperationType::Insert | OperationType::Write) {
            // The live replica inserts (or writes) a row this node restored from its own
            // files: the row was deleted there since, and the new image is built afresh.
            let image = tup::build_row(def, &table.key_columns, &req.key, &req.attrs);
            return Some(
                match image
                    .and_then(|image| set_pending(fragment, id, req.trans, Some(image), memory))
                {
                    Ok(()) => LqhKeyConfRef::Conf {
                        trans: req.trans,
                        op_index: req.op_index,
                        row: None,
                        role: req.role.clone(),
                        fired: Vec::new(),
                        committed: false,
                    },
                    Err(error) => refuse(req, error),
                },
            );
        }
    }
    let current = slot.visible_to(req.trans);
    let image: Result<Option<Row>, NdbError> = match req.op_type {
        OperationType::Read => return Some(read_answer(req, def, current)),
        OperationType::Insert if current.is_some() => Err(NdbError::new(630)),
        OperationType::Insert => {
            tup::build_row(def, &table.key_columns, &req.key, &req.attrs).map(Some)
        }
        OperationType::Update | OperationType::Delete if current.is_none() => {
            Err(NdbError::new(626))
        }
        OperationType::Update | OperationType::Write if current.is_some() => {
            let mut row: Vec<Value> = current.map(Row::unpack).unwrap_or_default();
            // An interpreted update's program runs against the row as it is, then its
            // attributes are set (NDB's interpreted, then final update sections).
            let program = (req.program.as_ref()).map_or(Ok(()), |p| p.run(def, &mut row));
            program
                .and_then(|()| tup::apply_attrs(def, &mut row, &req.attrs))
                .map(|()| Some(Row::pack(&row)))
        }
        OperationType::Write | OperationType::Update => {
            tup::build_row(def, &table.key_columns, &req.key, &req.attrs).map(Some)
        }
        // An interpreted delete (NDB's interpretedDeleteTuple): its condition, on the row.
        OperationType::Delete => match (&req.program, current) {
            (Some(p), Some(current)) => {
                let mut row = current.unpack();
                p.run(def, &mut row).map(|()| None)
            }
            _ => Ok(None),
        },
    };
    let image = match image {
        Ok(image) => image,
        Err(error) => return Some(refuse(req, error)),
    };
    let fired = fire_unique(table, &slot.key, current, image.as_ref());
    Some(match set_pending(fragment, id, req.trans, image, memory) {
        Ok(()) => LqhKeyConfRef::Conf {
            trans: req.trans,
            op_index: req.op_index,
            row: None,
            role: req.role.clone(),
            fired,
            committed: false,
        },
        Err(error) => refuse(req, error),
    })
}

/// The unique-index changes a write from `old` to `new` fires: for each unique index whose
/// values changed, delete the old entry and insert the new one. A value with a NULL in a
/// unique column has no entry (NULLs never collide, as in NDB).
fn fire_unique(table: &Table, pk: &[u8], old: Option<&Row>, new: Option<&Row>) -> Vec<IndexChange> {
    let mut fired = Vec::new();
    for unique in &table.unique {
        let values = |row: &Row| -> Option<Vec<Value>> {
            let key: Vec<Value> = unique.columns.iter().map(|&c| row.value(c)).collect();
            (!key.contains(&Value::Null)).then_some(key)
        };
        let old_key = old.and_then(values);
        let new_key = new.and_then(values);
        if old_key == new_key {
            continue;
        }
        for (op_type, key) in [
            (OperationType::Delete, old_key),
            (OperationType::Insert, new_key),
        ] {
            if let Some(key) = key {
                fired.push(IndexChange {
                    hidden_table_id: unique.hidden_table_id,
                    op_type,
                    key,
                    pk: pk.into(),
                });
            }
        }
    }
    fired
}

/// Records `image` as the transaction's uncommitted change, charging its memory and its
/// ordered-index entries first (827 or 902, and nothing changed, when they do not fit).
fn set_pending(
    fragment: &mut Fragment,
    id: SlotId,
    trans: TransId,
    image: Option<Row>,
    memory: &mut DataMemory,
) -> Result<(), NdbError> {
    let Fragment { rows, ordered, .. } = fragment;
    let Some(slot) = rows.slot_mut(id) else {
        return Err(NdbError::with_detail(4000, "slot vanished"));
    };
    debug_assert!(
        slot.pending.as_ref().is_none_or(|p| p.trans == trans),
        "uncommitted change of another transaction under an exclusive lock"
    );
    let image_bytes = image.as_ref().map_or(0, tup::row_bytes);
    memory.reserve_for_operation(image_bytes)?;
    if let Some(new) = &image {
        let mut entry_bytes = 0;
        let keys: Vec<Box<[u8]>> = ordered
            .iter()
            .map(|ix| ix.entry_key(new, &slot.key))
            .collect();
        for (ix, key) in ordered.iter().zip(&keys) {
            if !ix.entries.contains_key(key) {
                entry_bytes += crate::blocks::tux::entry_bytes(key);
            }
        }
        if let Err(e) = memory.reserve_for_operation(entry_bytes) {
            memory.free(image_bytes);
            return Err(NdbError::with_detail(902, e.message));
        }
        for (ix, key) in ordered.iter_mut().zip(keys) {
            if !ix.entries.contains_key(&key) {
                ix.insert_prepaid(key, id);
            }
        }
    }
    if let Some(old) = slot.pending.take() {
        if let Some(old_image) = &old.image {
            for ix in ordered.iter_mut() {
                let stale = ix.entry_key(old_image, &slot.key);
                let kept_by =
                    |r: Option<&Row>| r.is_some_and(|r| ix.entry_key(r, &slot.key) == stale);
                if !kept_by(slot.committed.as_ref()) && !kept_by(image.as_ref()) {
                    ix.remove(&stale, memory);
                }
            }
        }
        memory.free(old.image.as_ref().map_or(0, tup::row_bytes));
    }
    slot.pending = Some(Box::new(Pending { trans, image }));
    Ok(())
}

fn read_answer(req: &LqhKeyReq, def: &TableDef, row: Option<&Row>) -> LqhKeyConfRef {
    let Some(row) = row else {
        return refuse(req, NdbError::new(626));
    };
    if let Some(program) = &req.program {
        // An interpreted read (NDB's readTuple with a program): the row only if it meets the
        // program's condition, else the program's exit code.
        let mut values = row.unpack();
        if let Err(error) = program.run(def, &mut values) {
            return refuse(req, error);
        }
    }
    LqhKeyConfRef::Conf {
        trans: req.trans,
        op_index: req.op_index,
        row: Some(row.clone()),
        role: req.role.clone(),
        fired: Vec::new(),
        committed: false,
    }
}

fn refuse(req: &LqhKeyReq, error: NdbError) -> LqhKeyConfRef {
    LqhKeyConfRef::Ref {
        trans: req.trans,
        op_index: req.op_index,
        error,
        role: req.role.clone(),
        backup: req.backup,
    }
}

/// Bytes a slot is charged in all: key, committed image, uncommitted image.
fn charged_bytes(slot: &RowSlot<LqhWork>) -> u64 {
    let image = |r: Option<&Row>| r.map_or(0, tup::row_bytes);
    tup::slot_bytes(&slot.key)
        + image(slot.committed.as_ref())
        + image(slot.pending.as_ref().and_then(|p| p.image.as_ref()))
}

/// Takes every queued piece of work off a slot's lock.
fn drain_waiters(slot: &mut RowSlot<LqhWork>) -> Vec<LqhWork> {
    slot.lock.take_waiters()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rndb_protocol::signals::CreateIndexReq;
    use rndb_protocol::{ColumnDef, ColumnType, IndexKind, TableDef};

    /// A table `t(id key, a Int32)` with an ordered index on `a`, one fragment.
    fn setup() -> (Dict, Lqh, u32) {
        let mut dict = Dict::new(10, 10, 10, 1000);
        let def = TableDef::new(
            "t",
            vec![
                ColumnDef::key("id", ColumnType::UInt32),
                ColumnDef::new("a", ColumnType::Int32),
            ],
        );
        let table_id = dict.create(def, 1).expect("create").info.table_id;
        let mut lqh = Lqh::new(1 << 20);
        lqh.create_fragments(table_id, 1);
        let req = CreateIndexReq {
            table: "t".into(),
            index: "by_a".into(),
            kind: IndexKind::Ordered,
            columns: vec!["a".into()],
        };
        let index = dict.create_index(&req, 1).expect("create index");
        lqh.build_ordered(table_id, index.info.index_id, &index.columns)
            .expect("build");
        (dict, lqh, table_id)
    }

    fn op(trans: TransId, table_id: u32, op_type: OperationType, id: u32, a: i32) -> LqhKeyReq {
        let mut key_bytes = Vec::new();
        Value::UInt32(id).encode(&mut rndb_protocol::Writer::new(&mut key_bytes));
        LqhKeyReq {
            trans,
            op_index: 0,
            op_type,
            lock_mode: LockMode::Exclusive,
            table_id,
            fragment: 0,
            key_bytes: OpKey::new(&key_bytes),
            key: vec![Value::UInt32(id)],
            attrs: vec![(1, Value::Int32(a))],
            role: OpRole::Api,
            chain: Vec::new(),
            commit_at_last: false,
            backup: false,
            program: None,
        }
    }

    fn run(lqh: &mut Lqh, dict: &Dict, req: LqhKeyReq) {
        match lqh.execute(dict, Box::new(req)) {
            Some(LqhKeyConfRef::Conf { .. }) => {}
            other => panic!("operation failed: {other:?}"),
        }
    }

    fn entry_count(lqh: &Lqh, table_id: u32) -> usize {
        lqh.fragments[&table_id][0].ordered[0].entries.len()
    }

    fn slot_of(lqh: &Lqh, t: u32, id: u32) -> Option<&RowSlot<LqhWork>> {
        let mut key = Vec::new();
        Value::UInt32(id).encode(&mut rndb_protocol::Writer::new(&mut key));
        lqh.fragments[&t][0].rows.get(&key)
    }

    /// MaxNoOfLocalOperations: a row a transaction newly holds takes a record, one it holds
    /// takes none, and an operation that waited for its lock is not refused when it runs
    /// again, even with every record held (its record was taken when it queued).
    #[test]
    fn local_operation_records_are_taken_per_row_and_kept_by_a_waiter() {
        let (dict, lqh, t) = setup();
        let mut lqh = lqh.with_local_operations_max(3);
        run(
            &mut lqh,
            &dict,
            op(TransId(1), t, OperationType::Insert, 1, 1),
        );
        run(
            &mut lqh,
            &dict,
            op(TransId(1), t, OperationType::Insert, 2, 2),
        );
        lqh.commit(TransId(1), 1 << 32, &|_| true);
        assert_eq!(lqh.row_locks(), 0);
        run(
            &mut lqh,
            &dict,
            op(TransId(2), t, OperationType::Update, 1, 10),
        );
        run(
            &mut lqh,
            &dict,
            op(TransId(2), t, OperationType::Update, 1, 11),
        );
        assert_eq!(lqh.row_locks(), 1, "a second operation on a held row");
        // Transaction 3 queues behind 2's lock on row 1: its record is taken now.
        let waiting = op(TransId(3), t, OperationType::Update, 1, 30);
        assert!(lqh.execute(&dict, Box::new(waiting)).is_none(), "waits");
        assert_eq!(lqh.row_locks(), 2);
        run(
            &mut lqh,
            &dict,
            op(TransId(4), t, OperationType::Update, 2, 40),
        );
        let refused = lqh.execute(
            &dict,
            Box::new(op(TransId(5), t, OperationType::Insert, 3, 5)),
        );
        assert!(
            matches!(&refused, Some(LqhKeyConfRef::Ref { error, .. }) if error.code == 1217),
            "{refused:?}"
        );
        let granted = lqh.commit(TransId(2), 2 << 32, &|_| true);
        // Before the granted work runs, another transaction takes the record 2 freed.
        run(
            &mut lqh,
            &dict,
            op(TransId(6), t, OperationType::Insert, 4, 6),
        );
        assert_eq!(lqh.row_locks(), 3, "every record held");
        let [LqhWork::Key(again)] = granted.as_slice() else {
            panic!("one granted operation: {granted:?}");
        };
        run(&mut lqh, &dict, (**again).clone());
        assert_eq!(lqh.row_locks(), 3);
        for trans in [3, 4, 6] {
            lqh.abort(TransId(trans), &|_| true);
        }
        assert_eq!(lqh.row_locks(), 0);
        assert!(lqh.trans_rows.is_empty());
    }

    /// A commit records its GCI in the row. Rows restored for a node restart stay marked
    /// until the copy confirms them, a live commit makes them current, or the copy's end
    /// removes them; an insert of a restored key succeeds.
    #[test]
    fn restored_rows_are_confirmed_replaced_or_removed() {
        let (dict, mut lqh, t) = setup();
        for id in 0..4 {
            run(
                &mut lqh,
                &dict,
                op(TransId(1), t, OperationType::Insert, id, 10 + id as i32),
            );
        }
        lqh.commit(TransId(1), 7 << 32 | 3, &|_| true);
        assert_eq!(slot_of(&lqh, t, 2).map(|s| s.gci), Some(7));
        let used = lqh.memory_used_bytes();
        assert_eq!(lqh.mark_restored(), 4);
        // Key 0: the copy says unchanged. Key 1: a live update commits. Key 2: the live
        // replica inserts it again (deleted there since). Key 3: neither, so it goes at the
        // end.
        let mut key = Vec::new();
        Value::UInt32(0).encode(&mut rndb_protocol::Writer::new(&mut key));
        lqh.confirm_restored(t, 0, &key).expect("key 0 is restored");
        let mut missing = Vec::new();
        Value::UInt32(9).encode(&mut rndb_protocol::Writer::new(&mut missing));
        assert!(
            lqh.confirm_restored(t, 0, &missing).is_err(),
            "key 9 is not here"
        );
        run(
            &mut lqh,
            &dict,
            op(TransId(2), t, OperationType::Update, 1, 11),
        );
        // Not 630: the restored row is stale, the live replica has none.
        run(
            &mut lqh,
            &dict,
            op(TransId(2), t, OperationType::Insert, 2, 99),
        );
        lqh.commit(TransId(2), 9 << 32, &|_| true);
        assert_eq!(lqh.remove_unconfirmed(), 1);
        assert!(slot_of(&lqh, t, 3).is_none(), "key 3 was removed");
        for id in 0..3 {
            let slot = slot_of(&lqh, t, id).expect("kept");
            assert!(!slot.restored, "key {id} is current");
        }
        assert_eq!(slot_of(&lqh, t, 1).map(|s| s.gci), Some(9));
        let inserted = slot_of(&lqh, t, 2).and_then(|s| s.committed.as_ref());
        assert_eq!(
            inserted.map(Row::unpack),
            Some(vec![Value::UInt32(2), Value::Int32(99)])
        );
        assert!(
            lqh.memory_used_bytes() < used,
            "the removed row's memory is free"
        );
    }

    /// Index entries follow committed and uncommitted images, and DataMemory returns to zero
    /// once every row is gone and the index is dropped.
    #[test]
    fn index_entries_and_memory_follow_every_change() {
        let (dict, mut lqh, t) = setup();
        for id in 0..10 {
            run(
                &mut lqh,
                &dict,
                op(TransId(1), t, OperationType::Insert, id, id as i32),
            );
        }
        lqh.commit(TransId(1), 1 << 32, &|_| true);
        assert_eq!(entry_count(&lqh, t), 10);
        // An uncommitted update adds an entry; a second update replaces it; abort drops it.
        run(
            &mut lqh,
            &dict,
            op(TransId(2), t, OperationType::Update, 3, 100),
        );
        assert_eq!(entry_count(&lqh, t), 11);
        run(
            &mut lqh,
            &dict,
            op(TransId(2), t, OperationType::Update, 3, 200),
        );
        assert_eq!(entry_count(&lqh, t), 11);
        lqh.abort(TransId(2), &|_| true);
        assert_eq!(entry_count(&lqh, t), 10);
        // A committed update moves the entry; an update to the same value keeps one entry.
        run(
            &mut lqh,
            &dict,
            op(TransId(3), t, OperationType::Update, 4, 400),
        );
        run(
            &mut lqh,
            &dict,
            op(TransId(3), t, OperationType::Update, 5, 5),
        );
        lqh.commit(TransId(3), 1 << 32, &|_| true);
        assert_eq!(entry_count(&lqh, t), 10);
        for id in 0..10 {
            run(
                &mut lqh,
                &dict,
                op(TransId(4), t, OperationType::Delete, id, 0),
            );
        }
        assert_eq!(
            entry_count(&lqh, t),
            10,
            "deletes keep the committed entries until commit"
        );
        lqh.commit(TransId(4), 1 << 32, &|_| true);
        assert_eq!(entry_count(&lqh, t), 0);
        assert_eq!(lqh.memory_used_bytes(), 0, "every byte is returned");
        // Rebuilt over loaded rows, then dropped: memory returns to what the rows take.
        for id in 0..5 {
            run(
                &mut lqh,
                &dict,
                op(TransId(5), t, OperationType::Insert, id, 1),
            );
        }
        lqh.commit(TransId(5), 1 << 32, &|_| true);
        let rows_only = lqh.memory_used_bytes();
        lqh.build_ordered(t, 99, &[1]).expect("second index");
        assert!(lqh.memory_used_bytes() > rows_only);
        lqh.drop_ordered(t, 99);
        assert_eq!(lqh.memory_used_bytes(), rows_only);
    }
}
