//! Transactions: operations defined locally, sent together by `execute`, answered in one round
//! trip.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use rndb_protocol::interpreter::Program;
use rndb_protocol::scan::{
    ScanTabReq, SCAN_FLAG_DESCENDING, SCAN_FLAG_PART, SCAN_FLAG_START_TRANSACTION,
};
use rndb_protocol::schema::ROW_BYTES_MAX;
use rndb_protocol::signals::{
    block, gsn, TcExecuteConf, TcExecuteRef, TcExecuteReq, TcKeyRef, TcKeyReqRef, TcKeyReqView,
    TcKeyRow, FLAG_DURABLE_COMMIT, FLAG_START_TRANSACTION, OP_INDEX_NONE, REPLICA_PRIMARY,
};
use rndb_protocol::{AbortOption, ExecType, IndexKind, LockMode, NdbError, OperationType, Value};
use rndb_transporter::{FrameHeader, TransportError};

use crate::blob;
use crate::connection::Answers;
use crate::connection::Connection;
use crate::interpreted::InterpretedCode;
use crate::scan::{batch_sizes, Scan, ScanOptions};
use crate::stats::ClientStat;
use crate::{Cluster, Error, Index, NodeId, Table};

/// What an operation works on: a table by primary key, or a unique index by its key.
#[derive(Clone, Copy, Debug)]
struct Target<'t> {
    /// TCKEYREQ or TCINDXREQ.
    signal: u16,
    id: u32,
    version: u32,
    /// The table whose rows a read of it returns (the base table, through an index).
    table: &'t Table,
    /// A part written with its row's operation, whose lock is noted (`Rare::exclusive_rows`).
    part: bool,
}

impl Target<'_> {
    fn table(table: &Table) -> Target<'_> {
        Target {
            signal: gsn::TCKEYREQ,
            id: table.id(),
            version: table.version(),
            table,
            part: false,
        }
    }

    /// A row of a parts table written or deleted with its row (`Transaction::define_parts`).
    fn part(parts: &Table) -> Target<'_> {
        Target {
            part: true,
            ..Target::table(parts)
        }
    }
}

/// The tables a transaction's operations work on, so that a row in an answer is checked
/// against its table's columns. An operation names its table by index here; an operation on the
/// same table as the one before it reuses that one's index. Most transactions use one table,
/// which is kept without an allocation; the others are in the transaction's [`Rare`].
#[derive(Debug, Default)]
struct Tables {
    first: Option<Table>,
}

/// What few transactions need, in one box, so that the others stay small (see
/// `a_transaction_stays_small`).
#[derive(Debug, Default)]
struct Rare {
    /// The tables after the first (see [`Tables`]).
    tables: Vec<Table>,
    /// The data nodes other than the TC where its scans attached it.
    scan_nodes: Option<ScanNodes>,
    /// Reads of rows with BLOB or TEXT columns defined since the last execute, whose rows
    /// the execute makes whole (`crate::blob`): a CommittedRead kept so
    /// (`Transaction::blob_read`), and a unique index's columns when read through one.
    blob_reads: Vec<BlobRead>,
    /// Writes and deletes of rows with parts defined since the last execute: each row's
    /// operation and its parts' operations. They succeed or fail together whatever the
    /// execute's AbortOption: a row's failure with parts written, or a part's failure, rolls
    /// the transaction back (NDB defines part operations AbortOnError).
    blob_writes: Vec<(OpId, Vec<OpId>)>,
    /// Writes, updates and deletes of rows with parts defined since the last execute, whose
    /// row and part operations that execute defines once it has read the old heads
    /// (`Transaction::resolve_blob_writes`), in the order defined.
    pending_writes: Vec<PendingWrite>,
    /// The caller's `OpId` of a pending write whose row operation was defined in another slot
    /// (the read of its old heads names it until then), with that slot.
    aliases: HashMap<usize, usize>,
    /// The result slot of the batch's first operation, while the results already hold slots
    /// past it: an execute that resolves pending writes sends the operations defined after
    /// one later, in the slots their `OpId`s named.
    batch_first: Option<usize>,
    /// Operations sent ahead of the execute that names their AbortOption, with IgnoreError
    /// (by `Transaction::resolve_blob_writes` before a read of old heads, or by a scan that
    /// must see them): the next execute AbortOnError fails with the error of the first that
    /// failed, as it would have had they waited for it.
    deferred: Vec<OpId>,
    /// The parts tables it wrote (or deleted) parts of: its CommittedReads of rows with BLOB or
    /// TEXT columns then take a shared lock (`Transaction::blob_read`).
    wrote_parts: Vec<u32>,
    /// The rows of tables with parts tables it locked exclusively (wrote, deleted, read
    /// Exclusive), sent or not, by table id and encoded key, with the key: a scan of such a
    /// table reads them whole in this transaction when it opens (`Transaction::own_rows`), as
    /// another transaction would wait for those locks and would not see their changes. An
    /// operation is noted here only when something may look (`Transaction::note_exclusive`).
    exclusive_rows: blob::SharedNoted,
    /// The rows of each table its last scan of it read whole (`Transaction::own_rows`): the
    /// next scan reads again only those noted since.
    own_rows: HashMap<u32, Arc<blob::OwnRows>>,
}

/// The table index of a frame that reads no row (the execute's own).
const NO_TABLE: u32 = u32::MAX;

impl Tables {
    /// The index of `table`, added if it is not the first or the last one added (tables after
    /// the first go to `rare`).
    fn index_of(&mut self, table: &Table, rare: &mut Option<Box<Rare>>) -> u32 {
        match &self.first {
            None => {
                self.first = Some(table.clone());
                return 0;
            }
            Some(first) if first.same(table) => return 0,
            Some(_) => {}
        }
        let rest = &mut rare.get_or_insert_default().tables;
        if let Some(last) = rest.last() {
            if last.same(table) {
                return rest.len() as u32;
            }
        }
        // Past u32::MAX - 1 operations on alternating tables, later ones share the last index
        // (never NO_TABLE); a batch that large is refused long before (4021).
        if rest.len() < (NO_TABLE - 1) as usize {
            rest.push(table.clone());
        }
        rest.len() as u32
    }

    fn get<'t>(&'t self, index: u32, rare: &'t Option<Box<Rare>>) -> Option<&'t Table> {
        match index {
            0 => self.first.as_ref(),
            NO_TABLE => None,
            index => rare.as_ref()?.tables.get(index as usize - 1),
        }
    }
}

/// One round trip of an execute: the operations defined since the last one sent with `exec`,
/// and their answers filed. What an execute does above its round trips (the reads and writes
/// of BLOB and TEXT values, the errors of operations sent ahead) is written once, as async code
/// (`Transaction::execute_via`), and run over the blocking API's round trips ([`Blocking`],
/// whose futures are ready when made) or the tokio interface's.
pub(crate) trait RoundTrip {
    fn round_trip<'a>(
        &'a self,
        transaction: &'a mut Transaction<'_>,
        exec: ExecType,
        abort: AbortOption,
    ) -> impl Future<Output = Result<(), Error>>;
}

/// The blocking API's round trip: done (waiting on the calling thread) before its future is
/// returned, ready at once.
pub(crate) struct Blocking;

impl RoundTrip for Blocking {
    fn round_trip<'a>(
        &'a self,
        transaction: &'a mut Transaction<'_>,
        exec: ExecType,
        abort: AbortOption,
    ) -> impl Future<Output = Result<(), Error>> {
        std::future::ready(transaction.execute_now(exec, abort))
    }
}

/// The outcome of `future`, which awaits nothing but [`Blocking`] round trips: it completes
/// in one poll.
pub(crate) fn now<T>(future: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(outcome) => outcome,
        Poll::Pending => Err(Error::ndb_detail(
            4000,
            "a blocking execute waited for an awaited round trip",
        )),
    }
}

/// A read of a row with BLOB or TEXT columns, made whole by its execute.
#[derive(Debug)]
struct BlobRead {
    op: OpId,
    table: Table,
    /// A CommittedRead kept so (`Transaction::blob_read`).
    committed: bool,
}

/// A write, update or delete of a row with parts, defined as NDB's blob handles define one:
/// what it must read first (the old heads, to delete the parts the new value no longer has)
/// is read by the execute, not when it is defined, so that the tokio interface defines it
/// without waiting (`Transaction::resolve_blob_writes`).
#[derive(Debug)]
struct PendingWrite {
    /// The operation sent first, whose slot is the caller's `OpId`: the read of the old heads
    /// (Exclusive), or an insert's row.
    anchor: OpId,
    table: Table,
    key: Vec<Value>,
    kind: PendingKind,
    /// Each parted column's new parts (none for a delete).
    writes: Vec<blob::PartWrites>,
}

#[derive(Debug)]
enum PendingKind {
    /// An insert whose parts are too many bytes to go with its row in one batch: the row is
    /// the anchor, its parts follow in batches of their own.
    Insert,
    /// A write of the whole row (`attrs`: its non-key columns, heads for long values): an
    /// insert when the row is missing.
    Write(Vec<(u16, Value)>),
    /// An update of these columns: nothing when the row is missing (the read's 626).
    Update(Vec<(u16, Value)>),
    /// A delete: nothing when the row is missing (the read's 626).
    Delete,
}

/// Rows read again under a lock in one execute, to be made whole.
const COMPLETE_ROWS_MAX: usize = 256;

/// How a scan completes the rows with BLOB or TEXT values past their heads that its
/// transaction locked exclusively (`Transaction::own_scan`).
#[derive(Debug, PartialEq)]
pub(crate) enum OwnScan {
    /// It locked none of the table's rows: as any scan (`blob::fill_scanned`).
    No,
    /// It locked these rows (their keys, and how many times): they are read whole when the
    /// scan opens and handed out in their place (`blob::OwnRows`); the others as any scan.
    Rows(Vec<(Vec<Value>, u64)>),
    /// It locked rows it cannot name: the scan is read whole when it opens and completed in
    /// the transaction (`Transaction::complete_scanned`).
    Whole,
}

/// The primary key of `row` of `table`.
pub(crate) fn key_of(table: &Table, row: &[Value]) -> Vec<Value> {
    (table.key_columns().iter())
        .map(|&c| row[c].clone())
        .collect()
}

/// What `begin_execute` leaves to do.
pub(crate) enum Begun {
    /// Nothing to send: this is the execute's outcome.
    Done(Result<(), Error>),
    /// Send `frames` to `connection` (expecting answers under the transaction's request id),
    /// then hand the answers to `complete_execute` with `sent`.
    Send {
        connection: Arc<Connection>,
        frames: Encoded,
        sent: Sent,
    },
}

/// Bytes and frames an execute's encoding starts with.
const ENCODED_BYTES_INITIAL: usize = 256;
const ENCODED_FRAMES_INITIAL: usize = 4;

/// Frames encoded back to back: every payload in one buffer, and each frame's header with the
/// range of its payload (one allocation per execute, not one per operation).
#[derive(Debug, Default)]
pub(crate) struct Encoded {
    bytes: Vec<u8>,
    /// Each frame's header, payload range, the index in the transaction's `Tables` of the
    /// table whose row an operation's answer carries ([`NO_TABLE`] for the execute's frame),
    /// and whether its lock is yet to be noted (`Transaction::note_exclusive`).
    frames: Vec<(FrameHeader, u32, u32, u32, bool)>,
}

impl Encoded {
    /// Appends a frame whose payload `encode` writes; an operation's answer rows are rows of
    /// table `table` (an index into the transaction's `Tables`).
    fn push(&mut self, header: FrameHeader, table: u32, encode: impl FnOnce(&mut Vec<u8>)) {
        if self.frames.capacity() == 0 {
            // The buffers of this thread's last execute, or room for a few operations and the
            // execute's frame without growing.
            *self = SPARE_ENCODED.take();
            if self.frames.capacity() == 0 {
                self.bytes.reserve(ENCODED_BYTES_INITIAL);
                self.frames.reserve(ENCODED_FRAMES_INITIAL);
            }
        }
        let start = self.bytes.len() as u32;
        encode(&mut self.bytes);
        self.frames
            .push((header, start, self.bytes.len() as u32, table, false));
    }

    /// Marks the last frame's lock as yet to be noted (`Transaction::note_exclusive`).
    fn mark_unnoted(&mut self) {
        if let Some(frame) = self.frames.last_mut() {
            frame.4 = true;
        }
    }

    /// Every frame, in order.
    pub fn iter(&self) -> impl Iterator<Item = (FrameHeader, &[u8])> + Clone {
        self.frames
            .iter()
            .map(|&(header, start, end, ..)| (header, &self.bytes[start as usize..end as usize]))
    }

    /// Bytes the frames take, headers included (an estimate for sizing sends).
    pub fn size_bytes(&self) -> usize {
        self.bytes.len() + 32 * self.frames.len()
    }

    fn len(&self) -> usize {
        self.frames.len()
    }

    /// The frames from `at` on, taken out and numbered again from 0 (each operation's index
    /// in its execute), to be sent by a later execute than the ones before them.
    fn split_off(&mut self, at: usize) -> Encoded {
        let Some(&(_, base, ..)) = self.frames.get(at) else {
            return Encoded::default();
        };
        let mut rest = Encoded {
            bytes: self.bytes.split_off(base as usize),
            frames: self.frames.split_off(at),
        };
        for (index, (_, start, end, ..)) in rest.frames.iter_mut().enumerate() {
            *start -= base;
            *end -= base;
            let payload = &mut rest.bytes[*start as usize..*end as usize];
            TcKeyReqRef::set_op_index(payload, index as u32);
        }
        rest
    }

    /// Keeps the buffers (emptied) for this thread's next execute, unless they grew large.
    pub fn recycle(mut self) {
        if self.bytes.capacity() <= SPARE_ENCODED_BYTES_MAX {
            self.bytes.clear();
            self.frames.clear();
            SPARE_ENCODED.set(self);
        }
    }
}

thread_local! {
    /// The buffers of the last execute this thread sent, emptied, for its next one: a thread
    /// executing one request after another then allocates none to encode them.
    static SPARE_ENCODED: Cell<Encoded> = const {
        Cell::new(Encoded {
            bytes: Vec::new(),
            frames: Vec::new(),
        })
    };
}

thread_local! {
    /// Row vectors of this thread's dropped transactions, emptied, for its next rows: a thread
    /// running one transaction after another then allocates none for them. With thousands of
    /// client threads, each allocation cost cache misses in that thread's own heap (issue 26).
    static SPARE_ROWS: RefCell<Vec<Vec<Value>>> = const { RefCell::new(Vec::new()) };
}

/// Row vectors kept per thread.
const SPARE_ROWS_MAX: usize = 16;
/// A row vector with room for more values than this is freed rather than kept.
const SPARE_ROW_VALUES_MAX: usize = 64;

/// An empty row vector: one this thread kept, or a new one.
fn spare_row() -> Vec<Value> {
    SPARE_ROWS
        .try_with(|spare| spare.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Keeps the rows of `results` (emptied) for this thread's next transactions.
fn recycle_rows(results: &mut [OpResult]) {
    let _ = SPARE_ROWS.try_with(|spare| {
        let mut spare = spare.borrow_mut();
        for mut row in results.iter_mut().filter_map(|r| r.row.take()) {
            if spare.len() >= SPARE_ROWS_MAX {
                break;
            }
            if row.capacity() <= SPARE_ROW_VALUES_MAX {
                row.clear();
                spare.push(row);
            }
        }
    });
}

/// Encoding buffers larger than this are freed after their execute rather than kept.
const SPARE_ENCODED_BYTES_MAX: usize = 64 * 1024;

/// An execute on its way: what its answers are matched against.
#[derive(Debug)]
pub(crate) struct Sent {
    /// The result slot of its operation 0; its operations' slots follow in order.
    first: usize,
    /// How many operations it sent.
    count: u32,
    /// How many of them went through a unique index (the client statistics' UkOpCount).
    unique_ops: u32,
    exec: ExecType,
}

/// What few operations set besides their key and attributes.
struct Extras<'p> {
    /// Which replica serves a CommittedRead (`TcKeyReq::replica`).
    replica: u8,
    /// An interpreted operation's program.
    program: Option<&'p Program>,
}

/// Names one operation of a transaction, to fetch its row or error after `execute`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(usize);

impl OpId {
    /// A tag for a row made whole that belongs to no operation (a scan's).
    pub(crate) const NONE: OpId = OpId(usize::MAX);
}

/// The data nodes other than its TC where a transaction's scans attached it: its commit or
/// rollback is passed to them too, after the TC's.
#[derive(Debug, Default)]
struct ScanNodes {
    nodes: Vec<NodeId>,
    /// A scan that locks its rows (Read or Exclusive) went to them: the commit first confirms
    /// that each still holds its locks (see [`Transaction::scan_locks_to_confirm`]).
    locked: bool,
}

/// Where a transaction stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing sent yet.
    Fresh,
    /// The data node holds a transaction record (locks, uncommitted changes).
    Open,
    /// Committed, rolled back or aborted: no more executes.
    Finished,
    /// Aborted by the API because an execute failed on the way (its batch was refused, 4021;
    /// no answer in time, 4012; the link failed, 4010): no more executes (4114), as in NDB,
    /// where such a transaction must be closed and the application retries with a new one.
    /// Unlike `Finished`, the data node may still hold the transaction record (what was sent
    /// started it), so dropping rolls it back. Never reusing the transaction after a timeout
    /// also means a late answer to the timed-out execute, which carries the same request id,
    /// cannot complete a later one.
    Abandoned,
}

/// The outcome of one operation.
#[derive(Debug, Default)]
struct OpResult {
    row: Option<Vec<Value>>,
    error: Option<NdbError>,
    /// Its table in the transaction's `Tables`, whose row an answer must be (set when the
    /// execute is sent).
    table: u32,
}

/// A transaction of one API node. Dropping an open transaction rolls it back.
///
/// An `execute` that fails on the way rather than with the data node's answer (4021: the batch
/// did not fit in the send buffer, and nothing of it was sent; 4012: no answer in time; 4010 or
/// a transport error: the link failed) aborts the transaction, as NDB does: every later execute
/// or operation fails with 4114, dropping rolls back whatever the data node holds, and the
/// application retries the whole transaction with a new one (all three errors are temporary).
#[derive(Debug)]
pub struct Transaction<'c> {
    cluster: &'c Cluster,
    /// Names this transaction on the wire (the frame header's request id).
    request_id: u32,
    /// The link to the data node whose TC runs this transaction: the primary replica of the
    /// first operation's key (NDB's transaction hint), chosen when the first operation is
    /// defined. The link, not just the node: once chosen, the TC never changes, and if that
    /// link fails so does the transaction (4010), even once the node has restarted and has a
    /// new link, as its new run does not know what the old one did.
    tc: Option<Arc<Connection>>,
    /// Its tables after the first, and the other data nodes its scans attached it on.
    rare: Option<Box<Rare>>,
    state: State,
    /// Operations defined since the last execute, encoded. Their result slots are made when
    /// the execute is sent (`begin_execute`): an operation's `OpId` is `batch_first()` (most
    /// often `results.len()`) plus its index in the batch.
    batch: Encoded,
    /// Every operation's outcome, by `OpId`.
    results: Vec<OpResult>,
    /// The tables its operations work on, for checking the rows answered.
    tables: Tables,
    /// The GCI its commit took, once an execute committed (NDB's `getGCI`).
    gci: Option<NonZeroU64>,
    /// A commit returns only once its global checkpoint is saved (`set_durable_commit`).
    durable_commit: bool,
}

impl<'c> Transaction<'c> {
    pub(crate) fn new(cluster: &'c Cluster, request_id: u32) -> Self {
        cluster.counters().add(ClientStat::TransStartCount, 1);
        Transaction {
            cluster,
            request_id,
            tc: None,
            rare: None,
            state: State::Fresh,
            batch: Encoded::default(),
            results: Vec::new(),
            tables: Tables::default(),
            gci: None,
            durable_commit: false,
        }
    }

    /// Reads the row with primary key `key` (values in key-column order).
    pub fn read(&mut self, table: &Table, key: &[Value], lock: LockMode) -> Result<OpId, Error> {
        check_key(table, key)?;
        if table.blobs().is_empty() {
            return self.define(Target::table(table), OperationType::Read, lock, key, &[]);
        }
        blob::check_parts(table)?;
        self.blob_read(Target::table(table), table, lock, key)
    }

    /// A read by key (or through a unique index, not a CommittedRead) of a row of `table`
    /// (which has BLOB or TEXT columns), whose values its execute makes whole. A
    /// CommittedRead stays one unless this transaction wrote parts
    /// (`Transaction::execute_blob_reads` then reads the values again where they have parts);
    /// any other takes its lock, which covers the parts read next.
    fn blob_read(
        &mut self,
        target: Target<'_>,
        table: &Table,
        lock: LockMode,
        key: &[Value],
    ) -> Result<OpId, Error> {
        let wrote = self
            .rare
            .as_ref()
            .is_some_and(|r| !r.wrote_parts.is_empty());
        let committed = lock == LockMode::CommittedRead && table.has_parts() && !wrote;
        let lock = if committed {
            lock
        } else {
            blob::read_lock(table, lock)
        };
        let op = self.define(target, OperationType::Read, lock, key, &[])?;
        self.rare_mut().blob_reads.push(BlobRead {
            op,
            table: table.clone(),
            committed,
        });
        Ok(op)
    }

    /// A read of `table`'s row as the data node holds it (a BLOB's or TEXT's head only).
    pub(crate) fn read_heads(
        &mut self,
        table: &Table,
        key: &[Value],
        lock: LockMode,
    ) -> Result<OpId, Error> {
        self.define(Target::table(table), OperationType::Read, lock, key, &[])
    }

    /// Reads the committed row with primary key `key` from one replica of its partition:
    /// 0 is the primary, 1 the first backup, and so on (see [`Cluster::replicas_of`]). A
    /// CommittedRead: it takes no lock and sees what the last commit left on that replica.
    pub fn read_from_replica(
        &mut self,
        table: &Table,
        key: &[Value],
        replica: usize,
    ) -> Result<OpId, Error> {
        check_key(table, key)?;
        if table.has_parts() {
            return Err(blob::unsupported(table, "a read from a chosen replica"));
        }
        let replicas = self.cluster.config().no_of_replicas.max(1) as usize;
        if replica >= replicas {
            return Err(Error::ndb_detail(
                4116,
                format!("replica {replica} asked for, but NoOfReplicas={replicas}"),
            ));
        }
        self.define_at(
            Target::table(table),
            OperationType::Read,
            LockMode::CommittedRead,
            key,
            &[],
            Extras {
                replica: replica as u8,
                program: None,
            },
        )
    }

    /// Inserts a whole row (every column, in column order); 630 if the key exists.
    pub fn insert(&mut self, table: &Table, row: &[Value]) -> Result<OpId, Error> {
        if !table.blobs().is_empty() {
            return self.write_blobs(table, row, OperationType::Insert);
        }
        let (key, attrs) = split_row(table, row)?;
        self.define(
            Target::table(table),
            OperationType::Insert,
            LockMode::Exclusive,
            &key,
            &attrs,
        )
    }

    /// Inserts a row, or overwrites it when the key exists (NDB's writeTuple).
    pub fn write(&mut self, table: &Table, row: &[Value]) -> Result<OpId, Error> {
        if !table.blobs().is_empty() {
            return self.write_blobs(table, row, OperationType::Write);
        }
        let (key, attrs) = split_row(table, row)?;
        self.define(
            Target::table(table),
            OperationType::Write,
            LockMode::Exclusive,
            &key,
            &attrs,
        )
    }

    /// Sets some non-key columns of an existing row (626 if there is none).
    pub fn update(
        &mut self,
        table: &Table,
        key: &[Value],
        set: &[(usize, Value)],
    ) -> Result<OpId, Error> {
        check_key(table, key)?;
        if set.iter().any(|(c, _)| table.blob_column(*c).is_some()) {
            return self.update_blobs(table, key, set);
        }
        let attrs = check_set(table, set)?;
        self.define(
            Target::table(table),
            OperationType::Update,
            LockMode::Exclusive,
            key,
            &attrs,
        )
    }

    /// Runs `code` against the row with primary key `key` in the data node, under its
    /// exclusive lock, then sets `set` (NDB's `interpretedUpdateTuple`): 626 if there is no
    /// such row, the program's exit code if its condition does not hold, 878 if a change meets
    /// a NULL or leaves its column's range. A read of the row later in the same transaction
    /// sees the values it left.
    pub fn interpreted_update(
        &mut self,
        table: &Table,
        key: &[Value],
        set: &[(usize, Value)],
        code: &InterpretedCode,
    ) -> Result<OpId, Error> {
        check_key(table, key)?;
        if set.iter().any(|(c, _)| table.blob_column(*c).is_some()) {
            // The value would go as the row's head, leaving the old value's parts behind.
            return Err(blob::unsupported(
                table,
                "an interpreted update of a BLOB or TEXT column",
            ));
        }
        let attrs = check_set(table, set)?;
        code.check_for(table)?;
        code.program.check_attrs(table.def(), &attrs)?;
        let op = (OperationType::Update, LockMode::Exclusive);
        self.define_interpreted(table, op, key, &attrs, code)
    }

    /// Writes a whole row (as [`Transaction::write`]) unless its key's row is there and does
    /// not meet `code`'s condition: then the program's exit code, and nothing changes. A
    /// missing row is inserted (it has no values for a condition to test). An rndb extension:
    /// a single round trip for "insert, or overwrite a row that is still so". A program that changes columns is refused (4116), and so is a
    /// table handle with BLOB or TEXT columns (its heads would go without parts; use
    /// [`Table::raw`] to write heads as the data node holds them).
    pub fn interpreted_write(
        &mut self,
        table: &Table,
        row: &[Value],
        code: &InterpretedCode,
    ) -> Result<OpId, Error> {
        if !table.blobs().is_empty() {
            return Err(blob::unsupported(table, "an interpreted write"));
        }
        code.check_condition_only(table, "write")?;
        let (key, attrs) = split_row(table, row)?;
        let op = (OperationType::Write, LockMode::Exclusive);
        self.define_interpreted(table, op, &key, &attrs, code)
    }

    /// Reads the row with primary key `key` if it meets `code`'s condition (NDB's `readTuple`
    /// with an interpreted program): 626 if there is no such row, the program's exit code if
    /// the condition does not hold (a locked read keeps its lock either way, until the
    /// transaction ends). A program that changes columns is refused (4116).
    pub fn interpreted_read(
        &mut self,
        table: &Table,
        key: &[Value],
        lock: LockMode,
        code: &InterpretedCode,
    ) -> Result<OpId, Error> {
        check_key(table, key)?;
        if !table.blobs().is_empty() {
            return Err(blob::unsupported(table, "an interpreted read"));
        }
        code.check_condition_only(table, "read")?;
        self.define_interpreted(table, (OperationType::Read, lock), key, &[], code)
    }

    /// Deletes the row with primary key `key` if it meets `code`'s condition (NDB's
    /// `interpretedDeleteTuple`): 626 if there is no such row, the program's exit code if the
    /// condition does not hold. A program that changes columns is refused (4116).
    pub fn interpreted_delete(
        &mut self,
        table: &Table,
        key: &[Value],
        code: &InterpretedCode,
    ) -> Result<OpId, Error> {
        check_key(table, key)?;
        if table.has_parts() {
            return Err(blob::unsupported(table, "an interpreted delete"));
        }
        code.check_condition_only(table, "delete")?;
        let op = (OperationType::Delete, LockMode::Exclusive);
        self.define_interpreted(table, op, key, &[], code)
    }

    /// An operation of `table`'s row `key` at its primary replica carrying `code`'s program
    /// (checked by the caller).
    fn define_interpreted(
        &mut self,
        table: &Table,
        (op_type, lock_mode): (OperationType, LockMode),
        key: &[Value],
        attrs: &[(u16, Value)],
        code: &InterpretedCode,
    ) -> Result<OpId, Error> {
        self.define_at(
            Target::table(table),
            op_type,
            lock_mode,
            key,
            attrs,
            Extras {
                replica: REPLICA_PRIMARY,
                program: Some(&code.program),
            },
        )
    }

    /// Deletes the row with this key (626 if there is none).
    pub fn delete(&mut self, table: &Table, key: &[Value]) -> Result<OpId, Error> {
        check_key(table, key)?;
        if table.has_parts() {
            return self.delete_blobs(table, key);
        }
        self.define(
            Target::table(table),
            OperationType::Delete,
            LockMode::Exclusive,
            key,
            &[],
        )
    }

    /// Reads the row whose unique-index columns equal `key` (values in index-column order):
    /// two hops in the data node, the index's hidden table and then the base table. A
    /// CommittedRead takes a shared lock, as NDB's `NdbIndexOperation::readTuple` makes it:
    /// unlocked, the row found may have moved to another key between the two hops.
    pub fn read_unique(
        &mut self,
        index: &Index,
        key: &[Value],
        lock: LockMode,
    ) -> Result<OpId, Error> {
        let target = unique_target(index, key)?;
        let table = index.table();
        let lock = match lock {
            LockMode::CommittedRead => LockMode::Read,
            lock => lock,
        };
        if table.blobs().is_empty() {
            return self.define(target, OperationType::Read, lock, key, &[]);
        }
        blob::check_parts(table)?;
        self.blob_read(target, table, lock, key)
    }

    /// Sets non-key columns of the row found through a unique index (626 if there is none).
    /// Changing an indexed column moves the row's index entry.
    pub fn update_unique(
        &mut self,
        index: &Index,
        key: &[Value],
        set: &[(usize, Value)],
    ) -> Result<OpId, Error> {
        let target = unique_target(index, key)?;
        if set
            .iter()
            .any(|(c, _)| index.table().blob_column(*c).is_some())
        {
            return Err(blob::unsupported(
                index.table(),
                "an update of a BLOB or TEXT column through a unique index",
            ));
        }
        let attrs = check_set(index.table(), set)?;
        self.define(
            target,
            OperationType::Update,
            LockMode::Exclusive,
            key,
            &attrs,
        )
    }

    /// Deletes the row found through a unique index (626 if there is none).
    pub fn delete_unique(&mut self, index: &Index, key: &[Value]) -> Result<OpId, Error> {
        if index.table().has_parts() {
            return Err(blob::unsupported(
                index.table(),
                "a delete through a unique index",
            ));
        }
        let target = unique_target(index, key)?;
        self.define(target, OperationType::Delete, LockMode::Exclusive, key, &[])
    }

    /// Starts a full-table scan in this transaction and waits for its first batch. Filters,
    /// lock mode, parallelism and batch sizes come from `options` (ranges and order are for
    /// index scans and are refused here).
    pub fn scan_table(&mut self, table: &Table, options: &ScanOptions) -> Result<Scan<'c>, Error> {
        if !options.ranges.is_empty() || options.sorted || options.descending {
            return Err(Error::ndb_detail(
                4259,
                "ranges and order need an ordered index scan",
            ));
        }
        self.start_scan(table, None, options)
    }

    /// Starts an ordered-index scan over `options.ranges` (all of the index when empty) and
    /// waits for its first batch. A sorted scan merges the fragments' streams in index order.
    pub fn scan_index(&mut self, index: &Index, options: &ScanOptions) -> Result<Scan<'c>, Error> {
        if index.kind() != IndexKind::Ordered {
            return Err(Error::ndb_detail(
                4243,
                format!("{} is not an ordered index", index.name()),
            ));
        }
        self.start_scan(index.table(), Some(index), options)
    }

    fn start_scan(
        &mut self,
        table: &Table,
        index: Option<&Index>,
        options: &ScanOptions,
    ) -> Result<Scan<'c>, Error> {
        if self.has_pending_writes() {
            // Their rows' locks are noted as they are resolved: before the scan takes note.
            now(self.send_pending(&Blocking))?;
        }
        let own = self.own_scan(table);
        let whole = own == OwnScan::Whole;
        let own_rows = match own {
            OwnScan::No if table.has_parts() => {
                Some(Arc::new(blob::OwnRows::new(table, self.noted())))
            }
            OwnScan::No => None,
            OwnScan::Rows(keys) => {
                now(self.send_pending(&Blocking))?;
                Some(now(self.own_rows(&Blocking, table, keys))?)
            }
            OwnScan::Whole => {
                now(self.send_pending(&Blocking))?;
                None
            }
        };
        let scan = self.send_scan(table, index, options, Connection::register_request)?;
        let mut scan = self.scan_opened(Scan::open(scan))?;
        // An Exclusive scan's own rows are its to complete: noted before its snapshot.
        self.note_exclusive_scan(table, options);
        if let Some(own_rows) = own_rows {
            scan.set_own_rows(own_rows, self.unnamed_locks(table));
        }
        if whole {
            let rows = scan.drain_own()?;
            let (locked, check) = scan.completion();
            let check = check.as_deref();
            let rows = now(self.complete_scanned(&Blocking, table, locked, check, rows))?;
            scan.set_completed(rows);
        }
        Ok(scan)
    }

    /// An Exclusive scan of `table` (with parts tables) locks rows this transaction cannot
    /// name: noted for the scans opened after it.
    pub(crate) fn note_exclusive_scan(&mut self, table: &Table, options: &ScanOptions) {
        let Some(id) = table
            .locks_rows_of()
            .filter(|_| options.lock == LockMode::Exclusive)
        else {
            return;
        };
        self.note_batch();
        blob::lock_noted(&self.rare_mut().exclusive_rows).note_table(id);
    }

    /// How many times this transaction locked rows of `table` it cannot name
    /// (`blob::Noted`): a scan takes it when it opens.
    pub(crate) fn unnamed_locks(&mut self, table: &Table) -> u64 {
        self.note_batch();
        (self.rare.as_ref()).map_or(0, |r| {
            blob::lock_noted(&r.exclusive_rows).table_count(table.id())
        })
    }

    /// This transaction locked `row` of `table` exclusively, or may have: by its key, or as
    /// rows of the table it cannot name (`Rare::exclusive_rows`, once `note_batch` ran).
    fn owns(&self, table: &Table, row: &[Value]) -> bool {
        debug_assert!(
            self.batch.frames.iter().all(|f| !f.4),
            "owns asked before note_batch"
        );
        let Some(rare) = self.rare.as_ref() else {
            return false;
        };
        let noted = blob::lock_noted(&rare.exclusive_rows);
        noted.table_count(table.id()) > 0 || noted.count(table, &key_of(table, row)) > 0
    }

    /// How a scan of `table` completes the rows this transaction locked exclusively (a
    /// committed read or a lock of another transaction would not see their changes, or would
    /// wait for them): see [`OwnScan`].
    pub(crate) fn own_scan(&mut self, table: &Table) -> OwnScan {
        self.note_batch();
        let Some(rare) = self.rare.as_ref().filter(|_| table.has_parts()) else {
            return OwnScan::No;
        };
        let id = table.id();
        let noted = blob::lock_noted(&rare.exclusive_rows);
        if noted.table_count(id) > 0 {
            return OwnScan::Whole;
        }
        let keys = noted.of_table(id);
        if keys.is_empty() {
            OwnScan::No
        } else {
            OwnScan::Rows(keys)
        }
    }

    /// The rows of `table` with these `keys`, which this transaction locked exclusively,
    /// read whole here before a scan of `table` opens (`blob::OwnRows`): each head under a
    /// shared lock (this transaction's version; a lock of its own where its exclusive
    /// operation failed), then the parts, shared too. Rows an earlier scan of the table read
    /// and not noted since are taken from it (`Rare::own_rows`); at most
    /// `OWN_PARTS_SCAN_BYTES_MAX` bytes of them (4000).
    pub(crate) async fn own_rows<R: RoundTrip>(
        &mut self,
        trip: &R,
        table: &Table,
        keys: Vec<(Vec<Value>, u64)>,
    ) -> Result<Arc<blob::OwnRows>, Error> {
        let mut own = blob::OwnRows::new(table, self.noted());
        // The rows an earlier scan of the table read, not noted again since, are taken as
        // they are (reading them again would take their locks, and records, again).
        let earlier = self
            .rare
            .as_mut()
            .and_then(|r| r.own_rows.remove(&table.id()));
        let keys: Vec<(Vec<Value>, u64)> = match &earlier {
            Some(earlier) => (keys.into_iter())
                .filter(|(key, count)| !own.reuse(earlier, table, key, *count))
                .collect(),
            None => keys,
        };
        let mut bytes = own.whole_bytes(table)?;
        for chunk in keys.chunks(COMPLETE_ROWS_MAX) {
            let heads = (self.read_locked(trip, chunk.iter().map(|(k, _)| (table, k)))).await?;
            let (mut long, mut counts) = (Vec::new(), Vec::new());
            for ((key, count), head) in chunk.iter().zip(heads) {
                match head.map(|h| blob::whole_or_long(table, h)).transpose()? {
                    Some(Err(head)) => {
                        bytes = bytes.saturating_add(blob::row_bytes(table, &head)?);
                        if bytes > crate::scan::OWN_PARTS_SCAN_BYTES_MAX {
                            let what = "the rows its transaction locked, read for a scan,";
                            return Err(blob::held_too_much(table, what));
                        }
                        long.push((OpId::NONE, table.clone(), head));
                        counts.push(*count);
                    }
                    // Whole in its head, or gone: a scan finds it so, or finds it changed.
                    _ => own.insert_short(table, key, *count),
                }
            }
            let heads: Vec<Vec<Value>> = long.iter().map(|(_, _, h)| h.clone()).collect();
            self.fill_rows(trip, &mut long, ExecType::NoCommit).await?;
            for ((head, (_, _, whole)), count) in heads.into_iter().zip(long).zip(counts) {
                own.insert_whole(table, head, whole, count);
            }
        }
        let own = Arc::new(own);
        let cache = &mut self.rare_mut().own_rows;
        cache.insert(table.id(), Arc::clone(&own));
        Ok(own)
    }

    /// The rows it locked exclusively on tables with parts tables (`Rare::exclusive_rows`),
    /// shared with its scans of those tables.
    pub(crate) fn noted(&mut self) -> blob::SharedNoted {
        self.note_batch();
        Arc::clone(&self.rare_mut().exclusive_rows)
    }

    /// Sends the operations defined since the last execute (NoCommit, IgnoreError), so that a
    /// scan opened next sees them: their errors are the next AbortOnError execute's, as for a
    /// read of old heads (`Rare::deferred`).
    pub(crate) async fn send_pending<R: RoundTrip>(&mut self, trip: &R) -> Result<(), Error> {
        Box::pin(self.resolve_blob_writes(trip)).await?;
        if self.batch.len() == 0 {
            return Ok(());
        }
        let earlier = self.batch_first()..self.batch_first() + self.batch.len();
        // Noted first: should the execute fail on the way, they still fail the next one.
        self.rare_mut().deferred.extend(earlier.map(OpId));
        (self.execute_inner_via(trip, ExecType::NoCommit, AbortOption::IgnoreError)).await
    }

    /// The rows of a scan of `table` (all of them, as they came: `Scan::drain_own`) made
    /// whole in this transaction, which locked rows of `table` exclusively without naming them
    /// (`OwnScan::Whole`): another transaction would wait for those locks and would not see
    /// their changes. The parts are read here under shared locks (an operation record each
    /// until the transaction ends), once the head is locked: a locked scan's rows are locked
    /// already; a CommittedRead scan's are read again under a shared lock here (a row gone
    /// meanwhile, or changed so that it fails the scan's `check`, is left out).
    pub(crate) async fn complete_scanned<R: RoundTrip>(
        &mut self,
        trip: &R,
        table: &Table,
        locked: bool,
        check: Option<&blob::FreshCheck>,
        rows: Vec<Vec<Value>>,
    ) -> Result<VecDeque<Vec<Value>>, Error> {
        let mut out: Vec<Option<Vec<Value>>> = Vec::with_capacity(rows.len());
        // (place in `out`, row): completed under the lock the row has; read again first.
        let (mut here, mut again) = (Vec::new(), Vec::new());
        for row in rows {
            let row = match blob::whole_or_long(table, row)? {
                Ok(whole) => {
                    out.push(Some(whole));
                    continue;
                }
                Err(long) => long,
            };
            let place = OpId(out.len());
            out.push(None);
            if locked {
                here.push((place, table.clone(), row));
            } else {
                again.push((place, row));
            }
        }
        for chunk in again.chunks(COMPLETE_ROWS_MAX) {
            let keys: Vec<Vec<Value>> = chunk.iter().map(|(_, r)| key_of(table, r)).collect();
            let fresh = (self.read_locked(trip, keys.iter().map(|k| (table, k)))).await?;
            for ((place, met), fresh) in chunk.iter().zip(fresh) {
                match fresh {
                    Some(fresh) if check.is_none_or(|c| c.still_met(met, &fresh)) => {
                        here.push((*place, table.clone(), fresh));
                    }
                    // Gone, or moved off the scan.
                    _ => {}
                }
            }
        }
        for chunk in here.chunks_mut(COMPLETE_ROWS_MAX) {
            self.fill_rows(trip, chunk, ExecType::NoCommit).await?;
        }
        for (place, _, row) in here {
            out[place.0] = Some(row);
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The rows with these keys (each with its table) read under a shared lock in this
    /// transaction, as stored (heads), in one execute (NoCommit) that also sends the
    /// operations defined before, as a read of old heads does (`Rare::deferred`): each row's
    /// version in this transaction, `None` where there is none.
    pub(crate) async fn read_locked<'r, R: RoundTrip>(
        &mut self,
        trip: &R,
        keys: impl Iterator<Item = (&'r Table, &'r Vec<Value>)>,
    ) -> Result<Vec<Option<Vec<Value>>>, Error> {
        // Pending writes may wait past these reads (a prefix's CommittedReads completed while
        // `resolve_blob_writes` sends it), never in the batch sent here: `batch_first` names
        // where it starts.
        let earlier = self.batch_first()..self.batch_first() + self.batch.len();
        let mut reads = Vec::new();
        for (table, key) in keys {
            reads.push(self.read_heads(table, key, LockMode::Read)?);
        }
        // Noted first: should the execute fail on the way, they still fail the next one.
        self.rare_mut().deferred.extend(earlier.map(OpId));
        // Boxed: the execute may be one of blob reads, which read heads again.
        Box::pin(self.execute_inner_via(trip, ExecType::NoCommit, AbortOption::IgnoreError))
            .await?;
        let mut fresh = Vec::with_capacity(reads.len());
        for op in reads {
            fresh.push(match (self.row(op), self.op_error(op)) {
                (Some(row), _) => Some(row.to_vec()),
                (None, Some(e)) if e.code == 626 => None,
                (None, Some(e)) => return Err(Error::Ndb(e.clone())),
                (None, None) => return Err(Error::ndb_detail(4000, "a read answered no row")),
            });
        }
        Ok(fresh)
    }

    /// The first half of a scan: sends SCAN_TABREQ to every live data node, each registered
    /// with `register` under its own request id, and returns the scan waiting for its first
    /// batches.
    pub(crate) fn send_scan(
        &mut self,
        table: &Table,
        index: Option<&Index>,
        options: &ScanOptions,
        register: fn(&Connection, u32),
    ) -> Result<Scan<'c>, Error> {
        self.check_usable()?;
        let (batch_rows, batch_bytes, batch_bytes_total) = batch_sizes(self.cluster, options)?;
        let mut flags = 0;
        if self.state == State::Fresh {
            flags |= SCAN_FLAG_START_TRANSACTION;
        }
        if options.descending {
            flags |= SCAN_FLAG_DESCENDING;
        }
        let req = ScanTabReq {
            flags,
            trans_request_id: self.request_id,
            table_id: table.id(),
            table_version: table.version(),
            index_id: index.map_or(0, Index::id),
            index_version: index.map_or(0, Index::version),
            lock_mode: options.lock,
            parallelism: if options.sorted {
                0
            } else {
                options.parallelism
            },
            batch_rows,
            batch_bytes,
            batch_bytes_total,
            ranges: options.ranges.clone(),
            filter: options.filter.clone(),
            alive: Vec::new(),
        };
        // The TC node runs the transaction; the scan goes to every data node, each over the
        // fragments it holds the primary replica of. Another node attaches the transaction
        // (creating its record there if needed), and hears of its end from `finish_elsewhere`.
        let tc = match &self.tc {
            Some(tc) => Arc::clone(tc),
            None => {
                let tc = self.cluster.scan_coordinator();
                self.tc = Some(Arc::clone(&tc));
                tc
            }
        };
        let tc_node = tc.peer;
        let cluster: &'c Cluster = self.cluster;
        // The link to the TC node failed (with one data node: every link did), and the
        // transaction with it (4010), as for an execute. Without this check the scan went to the
        // live nodes only, and with none left to no node at all: it ended at once without a
        // row and without an error, as if the table were empty.
        if let Some(lost) = tc.failure() {
            return Err(lost);
        }
        // Every data node whose link works: a failed node's fragments are scanned by the backup
        // that took them over.
        let live: Vec<Arc<Connection>> = cluster.linked().filter(|c| !c.is_failed()).collect();
        let mut parts = Vec::with_capacity(live.len());
        let mut req = req;
        req.alive = live.iter().map(|c| c.peer.0).collect();
        for connection in live {
            let mut req = req.clone();
            if connection.peer != tc_node {
                req.flags |= SCAN_FLAG_START_TRANSACTION | SCAN_FLAG_PART;
                let rare = self.rare.get_or_insert_default();
                let scan_nodes = rare.scan_nodes.get_or_insert_default();
                if !scan_nodes.nodes.contains(&connection.peer) {
                    scan_nodes.nodes.push(connection.peer);
                }
                scan_nodes.locked |= options.lock != LockMode::CommittedRead;
            }
            let mut payload = Vec::with_capacity(64);
            req.encode(&mut payload);
            let scan_id = cluster.new_request_id();
            let header = FrameHeader {
                signal: gsn::SCAN_TABREQ,
                receiver_block: block::DBTC,
                sender_block: block::API,
                request_id: scan_id,
            };
            register(&connection, scan_id);
            if let Err(e) = connection.send_batch(&[(header, &payload)]) {
                connection.forget(scan_id);
                // The parts already sent close when their scan is dropped (after their first
                // batches, so that no answer stays registered).
                drop(Scan::open(Scan::new(
                    cluster,
                    table.clone(),
                    parts,
                    None,
                    false,
                )));
                return Err(e);
            }
            parts.push((connection, scan_id));
        }
        let started = if index.is_some() {
            ClientStat::RangeScanCount
        } else {
            ClientStat::TableScanCount
        };
        cluster.counters().with_block(|counts| {
            counts.bump(started, 1);
            // Each part's first batch is waited for.
            counts.bump(ClientStat::WaitScanResultCount, parts.len() as u64);
        });
        let sort = index
            .filter(|_| options.sorted)
            .map(|i| (i.columns().to_vec(), options.descending));
        let locked = options.lock != LockMode::CommittedRead;
        let mut scan = Scan::new(cluster, table.clone(), parts, sort, locked);
        if !locked && table.has_parts() {
            // A row read again to complete its values must still be one this scan returns.
            scan.set_fresh_check(crate::blob::FreshCheck {
                filter: options.filter.clone(),
                index_columns: index.map(|i| i.columns().to_vec()).unwrap_or_default(),
            });
        }
        Ok(scan)
    }

    /// The second half of a scan: its first batches came (or it failed).
    fn scan_opened(&mut self, scan: Result<Scan<'c>, Error>) -> Result<Scan<'c>, Error> {
        self.note_scan_opened(scan.as_ref().err());
        scan
    }

    /// A scan's first batches came, or it failed with `error`: the transaction is open on
    /// the data node unless the scan could not attach it.
    pub(crate) fn note_scan_opened(&mut self, error: Option<&Error>) {
        // The data node attaches the transaction before anything else can fail, so it exists
        // now unless no transaction record was free (233) or it had timed out (237).
        let attached = !matches!(error.and_then(Error::code), Some(233 | 237));
        if self.state == State::Fresh && attached {
            self.state = State::Open;
        }
    }

    /// The cluster this transaction belongs to.
    #[cfg(feature = "tokio")]
    pub(crate) fn cluster(&self) -> &'c Cluster {
        self.cluster
    }

    /// Sends every operation defined since the last execute in one round trip. With
    /// AbortOnError the first failed operation aborts the transaction and is returned. Rows
    /// are filed as they arrive: an execute that fails on the way (4010, 4012) may leave some
    /// of its operations answered and the rest not.
    pub fn execute(&mut self, exec: ExecType) -> Result<(), Error> {
        self.execute_with(exec, AbortOption::AbortOnError)
    }

    /// As `execute`, choosing what a failed operation does. With IgnoreError, failed operations
    /// report through [`Transaction::op_error`] and the rest go on.
    pub fn execute_with(&mut self, exec: ExecType, abort: AbortOption) -> Result<(), Error> {
        if self.one_round_trip() {
            return self.execute_now(exec, abort);
        }
        now(self.execute_via(&Blocking, exec, abort))
    }

    /// Its next execute is one round trip: no reads or writes of BLOB or TEXT values, no
    /// operations sent ahead (the usual execute).
    pub(crate) fn one_round_trip(&self) -> bool {
        self.rare.as_ref().is_none_or(|r| {
            r.blob_reads.is_empty()
                && r.blob_writes.is_empty()
                && r.deferred.is_empty()
                && r.pending_writes.is_empty()
        })
    }

    /// `execute_with` made of `trip`'s round trips: the blocking API's ([`Blocking`]) or the
    /// tokio interface's. An execute with reads or writes of BLOB or TEXT values takes more
    /// than one (`crate::blob`).
    pub(crate) async fn execute_via<R: RoundTrip>(
        &mut self,
        trip: &R,
        exec: ExecType,
        abort: AbortOption,
    ) -> Result<(), Error> {
        if exec == ExecType::Rollback {
            // Whatever the pending writes would have done is undone: only their reads go.
            if let Some(rare) = self.rare.as_mut() {
                rare.pending_writes.clear();
            }
        } else {
            self.resolve_blob_writes(trip).await?;
        }
        let deferred =
            (self.rare.as_mut()).map_or_else(Vec::new, |r| std::mem::take(&mut r.deferred));
        if abort == AbortOption::AbortOnError && exec != ExecType::Rollback {
            if let Some(e) = deferred.iter().find_map(|&op| self.op_error(op)).cloned() {
                self.roll_back_now();
                return Err(Error::Ndb(e));
            }
        }
        self.execute_inner_via(trip, exec, abort).await
    }

    async fn execute_inner_via<R: RoundTrip>(
        &mut self,
        trip: &R,
        exec: ExecType,
        abort: AbortOption,
    ) -> Result<(), Error> {
        if self.rare.as_ref().is_some_and(|r| !r.blob_reads.is_empty()) {
            return self.execute_blob_reads(trip, exec, abort).await;
        }
        self.execute_writes(trip, exec, abort).await
    }

    /// An execute whose reads of BLOB or TEXT values were taken care of: its writes of parts
    /// (`Rare::blob_writes`), if any, succeed or fail together.
    async fn execute_writes<R: RoundTrip>(
        &mut self,
        trip: &R,
        exec: ExecType,
        abort: AbortOption,
    ) -> Result<(), Error> {
        let writes =
            (self.rare.as_mut()).map_or_else(Vec::new, |r| std::mem::take(&mut r.blob_writes));
        // A rollback undoes the writes whatever failed: it is not an error.
        if abort == AbortOption::IgnoreError && !writes.is_empty() && exec != ExecType::Rollback {
            return self.execute_blob_writes(trip, exec, writes).await;
        }
        trip.round_trip(self, exec, abort).await
    }

    /// One round trip of the blocking API: the operations defined since the last execute
    /// sent with `exec`, and their answers filed.
    fn execute_now(&mut self, exec: ExecType, abort: AbortOption) -> Result<(), Error> {
        self.confirm_scan_locks(exec)?;
        match self.begin_execute_now(exec, abort) {
            Begun::Done(result) => result,
            Begun::Send {
                connection,
                frames,
                sent,
            } => {
                connection.register_request(self.request_id);
                let sent_frames = connection.send_frames_awaited(frames.iter());
                frames.recycle();
                if let Err(e) = sent_frames {
                    connection.forget(self.request_id);
                    return Err(self.send_failed(e));
                }
                // Rows are filed as they arrive, while the data node works on the rest.
                let mut ended = None;
                let mut rows = 0;
                let waited = connection.wait_streaming(
                    self.request_id,
                    self.cluster.deadline(),
                    &mut |answers| {
                        if ended.is_none() {
                            ended = self.file_answers(&sent, answers, &mut rows);
                        }
                    },
                );
                if let Err(e) = waited {
                    self.count_execute(&sent, rows, None);
                    self.state = State::Abandoned;
                    // A malformed answer gave the link up while more answers were due, which
                    // ended the wait: report the violation, not the lost link it caused.
                    if let Some(Ended::Malformed(violation)) = ended {
                        return Err(violation);
                    }
                    return Err(e);
                }
                self.conclude(&sent, ended, rows)
            }
        }
    }

    /// The first half of an execute: takes the operations defined since the last one and
    /// encodes them, the last one carrying the execute (`FLAG_EXECUTE`; a TC_EXECUTE_REQ when
    /// there are none), for the TC node's connection. An execute that
    /// needs no round trip (nothing was ever sent, or the transaction cannot be used) is done
    /// at once.
    pub(crate) fn begin_execute(&mut self, exec: ExecType, abort: AbortOption) -> Begun {
        if let Err(e) = self.check_usable() {
            return Begun::Done(Err(e));
        }
        if let Some(BlobRead { table, .. }) = self.rare.as_ref().and_then(|r| r.blob_reads.first())
        {
            // The asynchronous executes: the blocking execute took its reads before.
            let e = blob::unsupported(
                table,
                "a read of BLOB or TEXT columns outside `Transaction::execute`",
            );
            return Begun::Done(Err(e));
        }
        if let Some(rare) = self.rare.as_mut() {
            // Writes of parts and operations sent ahead: only the blocking execute checks
            // them (see `Rare::blob_writes`, `Rare::deferred`).
            if !rare.deferred.is_empty()
                || !rare.pending_writes.is_empty()
                || (abort == AbortOption::IgnoreError && !rare.blob_writes.is_empty())
            {
                let e = NdbError::with_detail(
                    4264,
                    "writes of BLOB or TEXT columns outside \
                     `Transaction::execute`",
                );
                return Begun::Done(Err(Error::Ndb(e)));
            }
            rare.blob_writes.clear();
        }
        self.begin_execute_now(exec, abort)
    }

    pub(crate) fn begin_execute_now(&mut self, exec: ExecType, abort: AbortOption) -> Begun {
        if let Err(e) = self.check_usable() {
            return Begun::Done(Err(e));
        }
        if exec == ExecType::NoCommit {
            // The transaction goes on: what its operations lock is noted for its scans.
            self.note_batch();
        }
        if self.state == State::Fresh && self.batch.len() == 0 {
            // Nothing was ever sent: there is nothing to commit or roll back on a data node.
            if exec != ExecType::NoCommit {
                self.state = State::Finished;
            }
            return Begun::Done(Ok(()));
        }
        let mut frames = std::mem::take(&mut self.batch);
        let count = frames.len();
        // One result slot per operation of the batch, made in one go: pushed one by one as
        // operations were defined, each was built on the stack and copied in by loads wider
        // than its stores (a stall per operation). Exactly as many as needed for the first
        // execute: most transactions have one operation, and with thousands in flight spare
        // slots crowd the cache. Later executes grow the slots as a vector does (doubling):
        // grown exactly, a transaction executing one read at a time (serial_pk) moved all its
        // results to a new allocation on every execute, before the send.
        let first =
            (self.rare.as_mut().and_then(|r| r.batch_first.take())).unwrap_or(self.results.len());
        if first == 0 {
            self.results.reserve_exact(count);
        } else {
            self.results.reserve(count);
        }
        if self.results.len() < first + count {
            self.results.resize_with(first + count, OpResult::default);
        }
        let mut unique_ops = 0;
        for (result, frame) in self.results[first..].iter_mut().zip(&frames.frames) {
            result.table = frame.3;
            unique_ops += u32::from(frame.0.signal == gsn::TCINDXREQ);
        }
        let mut flags = if self.state == State::Fresh {
            FLAG_START_TRANSACTION
        } else {
            0
        };
        if self.durable_commit && exec == ExecType::Commit {
            flags |= FLAG_DURABLE_COMMIT;
        }
        let execute = TcExecuteReq {
            flags,
            exec_type: exec,
            abort_option: abort,
            op_count: count as u32,
        };
        // The last operation carries the execute (NDB's execute flag on TCKEYREQ), one frame
        // fewer; an execute without operations of its own is a TC_EXECUTE_REQ.
        match frames.frames.last_mut() {
            Some((header, start, end, ..))
                if matches!(header.signal, gsn::TCKEYREQ | gsn::TCINDXREQ)
                    && *end as usize == frames.bytes.len() =>
            {
                execute.append_to_key_req(&mut frames.bytes, *start as usize);
                *end = frames.bytes.len() as u32;
            }
            _ => frames.push(self.header(gsn::TC_EXECUTE_REQ), NO_TABLE, |b| {
                execute.encode(b)
            }),
        }
        Begun::Send {
            connection: self.connection(),
            frames,
            sent: Sent {
                first,
                count: count as u32,
                unique_ops,
                exec,
            },
        }
    }

    /// The execute's frames could not be sent: the transaction ends (see the type's docs).
    pub(crate) fn send_failed(&mut self, e: Error) -> Error {
        // send_batch appends all or nothing; a failure after appending fails the link, and then
        // what went out no longer matters: the data node aborts on the close.
        let refused_whole = matches!(e.code(), Some(4021 | 4010))
            || matches!(
                e,
                Error::Transport {
                    source: TransportError::FrameTooLarge { .. },
                    ..
                }
            );
        // Nothing of a Fresh transaction reached the data node only if the batch was refused
        // whole; otherwise it may hold a record that drop must roll back.
        self.state = if self.state == State::Fresh && refused_whole {
            State::Finished
        } else {
            State::Abandoned
        };
        e
    }

    /// The second half of an execute: files its answers (or fails with the wait's error).
    pub(crate) fn complete_execute(
        &mut self,
        sent: Sent,
        answers: Result<Answers, Error>,
    ) -> Result<(), Error> {
        match answers {
            Ok(answers) => {
                let mut rows = 0;
                let ended = self.file_answers(&sent, &answers, &mut rows);
                self.conclude(&sent, ended, rows)
            }
            Err(e) => {
                self.count_execute(&sent, 0, None);
                self.state = State::Abandoned;
                Err(e)
            }
        }
    }

    /// Ends an execute whose answers were all filed: `ended` is what its last answer said
    /// (`None`: the answers ended without one); `rows` were read.
    fn conclude(&mut self, sent: &Sent, ended: Option<Ended>, rows: u64) -> Result<(), Error> {
        let exec = sent.exec;
        self.state = if exec == ExecType::NoCommit {
            State::Open
        } else {
            State::Finished
        };
        let result = match ended {
            Some(Ended::Conf(gci)) => {
                if exec == ExecType::Commit {
                    self.gci = gci.and_then(NonZeroU64::new);
                }
                Ok(())
            }
            Some(Ended::Refused(e)) => {
                if e.code() == Some(280) {
                    // Its TC's node stops gracefully: the next transactions go elsewhere.
                    self.connection().note_stopping();
                }
                self.state = State::Finished;
                Err(e)
            }
            Some(Ended::Malformed(e)) => Err(e),
            None => Err(Error::Protocol {
                node: self.connection().peer,
                reason: "an execute's answer ended without TC_EXECUTE_CONF or TC_EXECUTE_REF"
                    .into(),
            }),
        };
        if self.state == State::Finished {
            let end = if exec == ExecType::Commit && result.is_ok() {
                ExecType::Commit
            } else {
                ExecType::Rollback
            };
            let counted = if end == ExecType::Commit {
                ClientStat::TransCommitCount
            } else {
                ClientStat::TransAbortCount
            };
            self.count_execute(sent, rows, Some(counted));
            self.finish_elsewhere(end);
        } else {
            self.count_execute(sent, rows, None);
        }
        result
    }

    /// Its execute was sent and will never be waited for: dropping it rolls it back.
    pub(crate) fn abandon(&mut self) {
        if self.state != State::Finished {
            self.state = State::Abandoned;
        }
    }

    /// Its execute was sent and will never be waited for (the future awaiting it was
    /// dropped), or a lock check failed: rolls it back now, without waiting, so that the data
    /// node frees its records and locks at once rather than when the transaction is dropped.
    /// Every later use fails with 4114.
    pub(crate) fn roll_back_now(&mut self) {
        self.abandon();
        if self.state == State::Abandoned {
            self.cluster.counters().add(ClientStat::TransAbortCount, 1);
            self.finish_elsewhere(ExecType::Rollback);
            let (header, payload) = self.end_frame(ExecType::Rollback);
            // A failure means the link is gone, and the data node aborts the transaction itself.
            let _ = self.connection().send_batch(&[(header, &payload)]);
            self.state = State::Finished;
        }
    }

    /// The request id that names this transaction on the wire.
    pub(crate) fn request_id(&self) -> u32 {
        self.request_id
    }

    /// The header of a frame of this transaction to its TC.
    fn header(&self, signal: u16) -> FrameHeader {
        FrameHeader {
            signal,
            receiver_block: block::DBTC,
            sender_block: block::API,
            request_id: self.request_id,
        }
    }

    /// A TC_EXECUTE_REQ with no operations that ends the transaction with `exec`.
    fn end_frame(&self, exec: ExecType) -> (FrameHeader, Vec<u8>) {
        let execute = TcExecuteReq {
            flags: 0,
            exec_type: exec,
            abort_option: AbortOption::AbortOnError,
            op_count: 0,
        };
        let mut payload = Vec::with_capacity(8);
        execute.encode(&mut payload);
        (self.header(gsn::TC_EXECUTE_REQ), payload)
    }

    /// Before a commit, the links to the data nodes other than the TC where a scan of this
    /// transaction locked rows (empty when `exec` does not commit, or there are none).
    ///
    /// Such a node runs its part of the transaction on its own, and rolls it back, freeing its
    /// locks, when its link to this API node fails. The API may hear of that failure only
    /// after the TC's commit answered, and a change may have committed meanwhile between the
    /// rows that node's part read and those a later part read: the scan's rows would not be
    /// one snapshot. So before the commit each such node is asked, with an empty NoCommit
    /// execute, whether it still holds the transaction; every part then held its locks at
    /// once, after the last row was read. One that does not, or whose link failed, fails the
    /// commit with 4010 and the transaction rolls back. (NDB's scans run under the TC, which
    /// loses them with the node; here the API scans each node itself.)
    pub(crate) fn scan_locks_to_confirm(&self, exec: ExecType) -> Vec<Arc<Connection>> {
        match self.rare.as_ref().and_then(|rare| rare.scan_nodes.as_ref()) {
            Some(scan_nodes)
                if scan_nodes.locked && exec == ExecType::Commit && self.check_usable().is_ok() =>
            {
                let cluster: &'c Cluster = self.cluster;
                scan_nodes
                    .nodes
                    .iter()
                    .map(|&node| cluster.connection_of(node))
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// Sends each of `connections` the empty NoCommit execute of [`scan_locks_to_confirm`],
    /// registered under this transaction's request id with `register`: the connections that
    /// wait for an answer, and the first error (then the rest were not sent).
    ///
    /// [`scan_locks_to_confirm`]: Transaction::scan_locks_to_confirm
    pub(crate) fn send_lock_checks(
        &self,
        connections: &[Arc<Connection>],
        register: fn(&Connection, u32),
    ) -> (Vec<Arc<Connection>>, Option<Error>) {
        let (header, payload) = self.end_frame(ExecType::NoCommit);
        let mut sent = Vec::with_capacity(connections.len());
        for connection in connections {
            if let Some(lost) = connection.failure() {
                return (sent, Some(scan_locks_lost(connection, &lost)));
            }
            register(connection, self.request_id);
            if let Err(e) = connection.send_batch(&[(header, &payload)]) {
                connection.forget(self.request_id);
                return (sent, Some(scan_locks_lost(connection, &e)));
            }
            if sent.is_empty() {
                // The checks go out together: one round trip.
                self.cluster
                    .counters()
                    .add(ClientStat::WaitExecCompleteCount, 1);
            }
            sent.push(Arc::clone(connection));
        }
        (sent, None)
    }

    /// A lock check's answer: `Ok` when that node still holds the transaction (CONF).
    pub(crate) fn lock_check_answer(
        connection: &Connection,
        answers: Result<Answers, Error>,
    ) -> Result<(), Error> {
        let answers = answers.map_err(|e| scan_locks_lost(connection, &e))?;
        match crate::single_answer(&answers, connection)? {
            (gsn::TC_EXECUTE_CONF, _) => Ok(()),
            (gsn::TC_EXECUTE_REF, payload) => {
                let refused = TcExecuteRef::decode(payload)
                    .map_err(|e| connection.protocol_violation(e.to_string()))?;
                let detail = format!("code {}: {}", refused.code, refused.detail);
                Err(scan_locks_lost(connection, &detail))
            }
            (signal, _) => Err(connection
                .protocol_violation(format!("answer {signal} to an empty TC_EXECUTE_REQ"))),
        }
    }

    /// A lock check failed with `e`: the transaction rolls back everywhere, now.
    pub(crate) fn lock_check_failed(&mut self, e: Error) -> Error {
        self.roll_back_now();
        e
    }

    /// The blocking lock checks of a commit (see [`Transaction::scan_locks_to_confirm`]).
    pub(crate) fn confirm_scan_locks(&mut self, exec: ExecType) -> Result<(), Error> {
        let connections = self.scan_locks_to_confirm(exec);
        if connections.is_empty() {
            return Ok(());
        }
        let (sent, mut first_error) =
            self.send_lock_checks(&connections, Connection::register_request);
        // Every check sent is waited for, so that no answer stays registered.
        for connection in sent {
            let answers = connection.wait(self.request_id, self.cluster.deadline());
            if let Err(e) = Self::lock_check_answer(&connection, answers) {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(self.lock_check_failed(e)),
            None => Ok(()),
        }
    }

    /// Passes the transaction's end to the other data nodes its scans attached it on, once
    /// its TC has ended it (a commit there releases the scan's locks; nothing else of the
    /// transaction is there). Nobody waits for their answers.
    fn finish_elsewhere(&mut self, exec: ExecType) {
        let Some(scan_nodes) = self.rare.as_mut().and_then(|rare| rare.scan_nodes.take()) else {
            return;
        };
        let (header, payload) = self.end_frame(exec);
        for node in scan_nodes.nodes {
            // A failure means the link is gone, and that node aborts the transaction itself.
            let _ = self
                .cluster
                .connection_of(node)
                .send_batch(&[(header, &payload)]);
        }
    }

    /// The row a read found, once executed.
    pub fn row(&self, op: OpId) -> Option<&[Value]> {
        self.results.get(self.slot_of(op))?.row.as_deref()
    }

    /// The error an operation got, once executed.
    pub fn op_error(&self, op: OpId) -> Option<&NdbError> {
        self.results.get(self.slot_of(op))?.error.as_ref()
    }

    /// The result slot of `op`: its own, or its row operation's for a write of a row with
    /// parts resolved at execute (`Rare::aliases`).
    fn slot_of(&self, op: OpId) -> usize {
        match &self.rare {
            Some(rare) if !rare.aliases.is_empty() => {
                rare.aliases.get(&op.0).copied().unwrap_or(op.0)
            }
            _ => op.0,
        }
    }

    /// The data node coordinating this transaction (NDB's `getConnectedNodeId`): chosen by the
    /// first operation's key, `None` until an operation is defined.
    pub fn connected_node_id(&self) -> Option<NodeId> {
        self.tc_node()
    }

    fn tc_node(&self) -> Option<NodeId> {
        self.tc.as_ref().map(|tc| tc.peer)
    }

    /// The GCI of this transaction's commit (NDB's `NdbTransaction::getGCI`): its global
    /// checkpoint in the high 32 bits, the epoch within it in the low. `None` until an execute
    /// with [`ExecType::Commit`] succeeded, and `None` after the commit of a transaction that
    /// only read (as in NDB: it changed nothing for a checkpoint to hold). A commit becomes
    /// durable on disk when its global checkpoint is saved (every
    /// TimeBetweenGlobalCheckpoints); GCIs of writing transactions that depend on each other
    /// (one read or overwrote what the other wrote) never go backwards.
    pub fn gci(&self) -> Option<u64> {
        self.gci.map(NonZeroU64::get)
    }

    /// Asks for a durable commit (beyond NDB, whose commit returns once it is on every replica
    /// in memory and reaches the disk at the next global checkpoint): from now on an execute
    /// with [`ExecType::Commit`] returns only once the global checkpoint holding the commit is
    /// saved on every data node's disk, so that even the loss of every data node at once (a
    /// system restart) keeps it. That waits up to TimeBetweenGlobalCheckpoints plus the save;
    /// with many such commits in flight one save serves them all (a group commit), so it
    /// costs mostly latency: throughput needs as many commits in flight as commit in one
    /// TimeBetweenGlobalCheckpoints. If the coordinating data node fails meanwhile, the
    /// execute fails as any other does when its node is lost (4010), and whether the commit
    /// survives is then unknown. If the checkpoint is still not saved twice
    /// TimeBetweenGlobalCheckpointsTimeout after the commit ended (a node group whose every
    /// live node runs on a failed disk can save nothing), the data node gives up waiting: the
    /// execute fails with 4012 (unknown result: committed in memory, its durability unknown).
    /// A Diskless cluster answers at the next global checkpoint, which saves nothing.
    pub fn set_durable_commit(&mut self, durable: bool) {
        self.durable_commit = durable;
    }

    /// True when a commit waits for its global checkpoint ([`Self::set_durable_commit`]).
    pub fn durable_commit(&self) -> bool {
        self.durable_commit
    }

    /// Ends the transaction; an open one is rolled back.
    pub fn close(self) {}

    /// The link to this transaction's TC node (a scan that starts a transaction makes the
    /// first data node its TC).
    fn connection(&self) -> Arc<Connection> {
        match &self.tc {
            // Once chosen, the TC never changes: if its link fails, so does the transaction
            // (4010), rather than go on at a node that does not know what it did.
            Some(tc) => Arc::clone(tc),
            None => self.cluster.coordinator(),
        }
    }

    /// 4114 once the transaction has ended (committed, rolled back, aborted or abandoned).
    fn check_usable(&self) -> Result<(), Error> {
        match self.state {
            State::Fresh | State::Open => Ok(()),
            State::Finished | State::Abandoned => Err(Error::Ndb(NdbError::new(4114))),
        }
    }

    fn define(
        &mut self,
        target: Target,
        op_type: OperationType,
        lock_mode: LockMode,
        key: &[Value],
        attrs: &[(u16, Value)],
    ) -> Result<OpId, Error> {
        self.define_at(
            target,
            op_type,
            lock_mode,
            key,
            attrs,
            Extras {
                replica: REPLICA_PRIMARY,
                program: None,
            },
        )
    }

    fn define_at(
        &mut self,
        target: Target,
        op_type: OperationType,
        lock_mode: LockMode,
        key: &[Value],
        attrs: &[(u16, Value)],
        Extras { replica, program }: Extras<'_>,
    ) -> Result<OpId, Error> {
        self.check_usable()?;
        if self.tc.is_none() {
            // Any replica may serve a committed read of a READ_BACKUP table: coordinate it on
            // the nearest, whose TC then reads its own replica.
            let near = target.signal == gsn::TCKEYREQ
                && op_type == OperationType::Read
                && lock_mode == LockMode::CommittedRead
                && target.table.def().read_backup;
            let node = self.cluster.tc_of_key(key, near);
            self.tc = Some(self.cluster.connection_of(node));
        }
        let op_index = self.batch.len() as u32;
        let starts = self.state == State::Fresh && op_index == 0;
        let req = TcKeyReqRef {
            flags: if starts { FLAG_START_TRANSACTION } else { 0 },
            op_index,
            op_type,
            lock_mode,
            table_id: target.id,
            table_version: target.version,
            replica,
            key,
            attrs,
            program,
        };
        let header = self.header(target.signal);
        let table = self.tables.index_of(target.table, &mut self.rare);
        self.batch.push(header, table, |b| req.encode(b));
        if (op_type != OperationType::Read || lock_mode == LockMode::Exclusive)
            && target.table.locks_rows_of().is_some()
            && !target.part
        {
            self.note_exclusive();
        }
        // Its result slot is made when the execute is sent, with the batch's others.
        Ok(OpId(self.batch_first() + op_index as usize))
    }

    /// The result slot of the batch's first operation (see `Rare::batch_first`).
    fn batch_first(&self) -> usize {
        match &self.rare {
            Some(rare) => rare.batch_first.unwrap_or(self.results.len()),
            None => self.results.len(),
        }
    }

    /// Marks the operation just defined, which locks a row of a table with parts tables
    /// exclusively, to be noted in `Rare::exclusive_rows` (`note_batch`). It is noted when its
    /// execute leaves without committing, before anything looks at the note, or at once while
    /// a scan shares the note: a transaction that commits in the execute that sends it (an
    /// autocommitted write) makes neither the note nor `Rare`.
    fn note_exclusive(&mut self) {
        self.batch.mark_unnoted();
        if (self.rare.as_ref()).is_some_and(|r| Arc::strong_count(&r.exclusive_rows) > 1) {
            self.note_batch();
        }
    }

    /// Notes in `Rare::exclusive_rows` the locks of the batch's operations marked by
    /// `note_exclusive`: by its key an operation on a row through a handle of its table (the
    /// key decoded from its frame); as rows it cannot name one through a unique index or a
    /// parts table.
    fn note_batch(&mut self) {
        let Transaction {
            batch,
            tables,
            rare,
            ..
        } = self;
        for (header, start, end, table, unnoted) in batch.frames.iter_mut() {
            if !std::mem::take(unnoted) {
                continue;
            }
            let Some(table) = tables.get(*table, rare).cloned() else {
                continue;
            };
            let Some(locked) = table.locks_rows_of() else {
                continue;
            };
            let payload = &batch.bytes[*start as usize..*end as usize];
            let key = (header.signal == gsn::TCKEYREQ && locked == table.id())
                .then(|| frame_key(payload))
                .flatten();
            let mut noted = blob::lock_noted(&rare.get_or_insert_default().exclusive_rows);
            match key {
                Some(key) => noted.note(&table, &key),
                // Its own frame cannot fail to decode; were it to, the scans that would
                // take the row from the note read every row of the table in the
                // transaction instead, which is slower, never wrong.
                None => noted.note_table(locked),
            }
        }
    }

    /// Files rows and errors under their operations, for answers that may be only part of an
    /// execute's. Returns how the execute ended once its last answer is among them. An answer
    /// that breaks the protocol gives the link up (see `Connection::protocol_violation`).
    /// Files answers until the execute's last one, adding the rows they carry to `rows`.
    fn file_answers(&mut self, sent: &Sent, answers: &Answers, rows: &mut u64) -> Option<Ended> {
        for (signal, payload) in answers.iter() {
            *rows += u64::from(matches!(signal, gsn::TCKEY_ROW | gsn::TCKEY_ROW_CONF));
            match self.file_answer(sent, signal, payload) {
                Ok(None) => {}
                Ok(Some(ended)) => return Some(ended),
                Err(reason) => {
                    let violation = self.connection().protocol_violation(reason);
                    return Some(Ended::Malformed(violation));
                }
            }
        }
        None
    }

    /// Counts the operations of an execute that was sent and will never be waited for (its
    /// future or executor was dropped): they went out all the same.
    pub(crate) fn count_unanswered(&self, sent: &Sent) {
        self.cluster.counters().with_block(|counts| {
            counts.bump(
                ClientStat::PkOpCount,
                u64::from(sent.count - sent.unique_ops),
            );
            counts.bump(ClientStat::UkOpCount, u64::from(sent.unique_ops));
        });
    }

    /// Counts an execute that was sent and waited for in the client statistics, with the rows
    /// its answers carried and how it ended the transaction (`ended`: TransCommitCount,
    /// TransAbortCount, or `None` while it goes on): one look-up of the thread's counts.
    fn count_execute(&self, sent: &Sent, rows: u64, ended: Option<ClientStat>) {
        self.cluster.counters().with_block(|counts| {
            counts.bump(ClientStat::WaitExecCompleteCount, 1);
            counts.bump(
                ClientStat::PkOpCount,
                u64::from(sent.count - sent.unique_ops),
            );
            counts.bump(ClientStat::UkOpCount, u64::from(sent.unique_ops));
            counts.bump(ClientStat::ReadRowCount, rows);
            if let Some(ended) = ended {
                counts.bump(ended, 1);
            }
        });
    }

    /// Files one answer. `Ok(Some)` for the execute's last answer; `Err` names a protocol
    /// violation.
    fn file_answer(
        &mut self,
        sent: &Sent,
        signal: u16,
        payload: &[u8],
    ) -> Result<Option<Ended>, String> {
        let op_slot = |op_index: u32| {
            if op_index < sent.count {
                Ok(sent.first + op_index as usize)
            } else {
                Err(format!(
                    "answer names operation {op_index} of a batch of {}",
                    sent.count
                ))
            }
        };
        match signal {
            gsn::TCKEY_ROW | gsn::TCKEY_ROW_CONF => {
                let op_index = TcKeyRow::op_index_of(payload).map_err(|e| e.to_string())?;
                let slot = op_slot(op_index)?;
                let conf = signal == gsn::TCKEY_ROW_CONF;
                let gci = self.file_row(slot, op_index, payload, conf)?;
                // A TCKEY_ROW_CONF is also the execute's confirmation.
                Ok(conf.then_some(Ended::Conf(gci)))
            }
            gsn::TCKEYREF => {
                let r = TcKeyRef::decode(payload).map_err(|e| e.to_string())?;
                self.results[op_slot(r.op_index)?].error = Some(NdbError::new(r.code));
                Ok(None)
            }
            gsn::TC_EXECUTE_CONF => {
                let conf = TcExecuteConf::decode(payload).map_err(|e| e.to_string())?;
                Ok(Some(Ended::Conf(conf.gci)))
            }
            gsn::TC_EXECUTE_REF => {
                let r = TcExecuteRef::decode(payload).map_err(|e| e.to_string())?;
                let error = NdbError::from_wire(r.code, &r.detail);
                if r.op_index != OP_INDEX_NONE {
                    match op_slot(r.op_index) {
                        Ok(slot) => {
                            self.results[slot].error.get_or_insert(error.clone());
                        }
                        // The transaction is aborted all the same; the answer broke the
                        // protocol, and that is the error to report.
                        Err(reason) => {
                            let violation = self.connection().protocol_violation(reason);
                            return Ok(Some(Ended::Refused(violation)));
                        }
                    }
                }
                Ok(Some(Ended::Refused(Error::Ndb(error))))
            }
            other => Err(format!("unexpected signal {other} in an execute's answer")),
        }
    }
}

/// Each parted BLOB or TEXT column of a row, and how many parts its value has.
type PartCounts = Vec<(usize, u64)>;

/// Bytes a part's operation takes in a batch besides its row's values: its frame's header and
/// the request's fields (a bound for sizing, `Transaction::write_blobs`).
const PART_FRAME_BYTES: usize = 64;

/// Takes from the front of `pending` a write and those defined right after it, each the next
/// operation (`PendingWrite::anchor`), up to one on a row already in the run: that one's read
/// of old heads must see the writes before it.
fn take_run(pending: &mut Vec<PendingWrite>) -> Option<Vec<PendingWrite>> {
    let first = pending.first()?;
    // By table id: two handles of one table are two `Table`s.
    let mut rows = vec![(first.table.id(), blob::key_bytes(&first.table, &first.key))];
    let mut len = 1;
    for (next, before) in pending[1..].iter().zip(pending.iter()) {
        let row = (next.table.id(), blob::key_bytes(&next.table, &next.key));
        let repeated = rows.contains(&row);
        if next.anchor.0 != before.anchor.0 + 1 || repeated {
            break;
        }
        rows.push(row);
        len += 1;
    }
    Some(pending.drain(..len).collect())
}

/// The key of a TCKEYREQ frame's payload (`None` if it does not decode).
fn frame_key(payload: &[u8]) -> Option<Vec<Value>> {
    let view = TcKeyReqView::decode(payload).ok()?;
    let mut reader = rndb_protocol::Reader::new(view.key, "key");
    rndb_protocol::schema::decode_values(&mut reader, rndb_protocol::schema::COLUMNS_MAX).ok()
}

/// The items of `items` that `later` picks, taken out, in order.
fn take_after<T>(items: &mut Vec<T>, later: impl Fn(&T) -> bool) -> Vec<T> {
    let (later, earlier): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(later);
    *items = earlier;
    later
}

/// BLOB and TEXT columns (see `crate::blob`).
impl Transaction<'_> {
    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_default()
    }

    /// An insert or write of a whole row of a table with BLOB or TEXT columns: the row with
    /// heads, then each value's parts. A write reads the old heads first, at its execute
    /// (`PendingKind::Write`), to delete the parts the new values no longer have; an insert
    /// whose parts would outgrow one batch sends them at its execute (`PendingKind::Insert`).
    fn write_blobs(
        &mut self,
        table: &Table,
        row: &[Value],
        op_type: OperationType,
    ) -> Result<OpId, Error> {
        let columns = table.def().columns.len();
        if row.len() != columns {
            return Err(Error::ndb_detail(
                4116,
                format!(
                    "table {} has {columns} columns, got {} values",
                    table.name(),
                    row.len()
                ),
            ));
        }
        let key = key_of(table, row);
        check_key(table, &key)?;
        blob::check_parts(table)?;
        let pairs: Vec<(usize, Value)> = row.iter().cloned().enumerate().collect();
        let (heads, writes) = blob::to_heads(table, &key, &pairs)?;
        let heads: Vec<Value> = heads.into_iter().map(|(_, v)| v).collect();
        let (key, attrs) = split_row(table, &heads)?;
        if op_type == OperationType::Write && table.has_parts() {
            let read = self.read_heads(table, &key, LockMode::Exclusive)?;
            let kind = PendingKind::Write(attrs);
            self.pend(read, table, key, kind, writes);
            return Ok(read);
        }
        // An insert, or a write of TINY values only: there are no old parts to delete.
        let op = self.define(
            Target::table(table),
            op_type,
            LockMode::Exclusive,
            &key,
            &attrs,
        )?;
        let part_bytes: usize = (writes.iter().flat_map(|w| &w.rows))
            .map(|row| PART_FRAME_BYTES + row.iter().map(Value::stored_bytes).sum::<usize>())
            .sum();
        if self.batch.size_bytes() + part_bytes < blob::PARTS_BATCH_BYTES {
            let define = self.define_parts_via::<Blocking>(None, op, &key, writes, &[], op_type);
            let parts = now(define)?;
            self.rare_mut().blob_writes.push((op, parts));
        } else {
            self.pend(op, table, key, PendingKind::Insert, writes);
        }
        Ok(op)
    }

    /// An update that sets BLOB or TEXT columns: the old heads are read first, at its execute
    /// (nothing more is sent when the row is missing: the read's 626 is the update's).
    fn update_blobs(
        &mut self,
        table: &Table,
        key: &[Value],
        set: &[(usize, Value)],
    ) -> Result<OpId, Error> {
        blob::check_parts(table)?;
        let (heads, writes) = blob::to_heads(table, key, set)?;
        let attrs = check_set(table, &heads)?;
        let read = self.read_heads(table, key, LockMode::Exclusive)?;
        let kind = PendingKind::Update(attrs);
        self.pend(read, table, key.to_vec(), kind, writes);
        Ok(read)
    }

    /// A delete of a row with parts: its heads are read first, at its execute, then the row
    /// and every part go.
    fn delete_blobs(&mut self, table: &Table, key: &[Value]) -> Result<OpId, Error> {
        blob::check_parts(table)?;
        let read = self.read_heads(table, key, LockMode::Exclusive)?;
        // Every value written as none: each of its old parts deleted.
        let writes = (table.blobs().iter())
            .filter_map(|bc| {
                bc.parts.clone().map(|parts| blob::PartWrites {
                    parts,
                    rows: Vec::new(),
                    column: bc.column,
                })
            })
            .collect();
        self.pend(read, table, key.to_vec(), PendingKind::Delete, writes);
        Ok(read)
    }

    /// Notes a write of a row with parts for its execute to resolve (`Rare::pending_writes`).
    fn pend(
        &mut self,
        anchor: OpId,
        table: &Table,
        key: Vec<Value>,
        kind: PendingKind,
        writes: Vec<blob::PartWrites>,
    ) {
        let rare = self.rare_mut();
        // Its parts tables count as written from now on, whatever the execute finds: a
        // CommittedRead of the table defined later takes a shared lock (`Transaction::blob_read`).
        for write in &writes {
            if !rare.wrote_parts.contains(&write.parts.id()) {
                rare.wrote_parts.push(write.parts.id());
            }
        }
        rare.pending_writes.push(PendingWrite {
            anchor,
            table: table.clone(),
            key,
            kind,
            writes,
        });
    }

    /// Resolves the pending writes of rows with parts (`Rare::pending_writes`), in the order
    /// defined, as NDB's blob handles do at execute (`NdbBlob::preExecute`): for each, the
    /// operations defined up to its anchor go (NoCommit, IgnoreError: their errors are the
    /// execute's as `Rare::deferred`), then the row's operation, as the old heads found make
    /// it, and its parts are defined and sent; the operations defined after it wait, in the
    /// result slots their `OpId`s named (`Rare::batch_first`). The last write's row and parts
    /// stay in the batch, for the execute's own round trip. Should a round trip fail on the
    /// way, the transaction is rolled back (4114 from then on): what was defined after the
    /// write was not sent, and no later execute may commit without it.
    async fn resolve_blob_writes<R: RoundTrip>(&mut self, trip: &R) -> Result<(), Error> {
        if !self.has_pending_writes() {
            return Ok(());
        }
        let resolved = match self.check_usable() {
            Ok(()) => self.resolve_each(trip).await,
            Err(e) => Err(e),
        };
        if resolved.is_err() {
            if let Some(rare) = self.rare.as_mut() {
                rare.pending_writes.clear();
                rare.batch_first = None;
            }
            self.batch = Encoded::default();
            self.roll_back_now();
        }
        resolved
    }

    /// True when writes of rows with parts wait for the next execute (`Rare::pending_writes`).
    pub(crate) fn has_pending_writes(&self) -> bool {
        self.rare
            .as_ref()
            .is_some_and(|r| !r.pending_writes.is_empty())
    }

    /// `resolve_blob_writes`' work, one run of pending writes after another: a write and those
    /// defined right after it (each the next operation), on rows of their own, whose reads of
    /// old heads go in one round trip and their rows and parts in the next (a batch of N
    /// writes of long values took 2N round trips).
    async fn resolve_each<R: RoundTrip>(&mut self, trip: &R) -> Result<(), Error> {
        loop {
            let Some(run) = self
                .rare
                .as_mut()
                .and_then(|r| take_run(&mut r.pending_writes))
            else {
                return Ok(());
            };
            let first = self.batch_first();
            let first_anchor = run[0].anchor.0;
            let anchor = run[run.len() - 1].anchor.0;
            let rest_first = anchor + 1;
            let rest = self.batch.split_off(rest_first - first);
            if self.results.len() < rest_first + rest.len() {
                (self.results).resize_with(rest_first + rest.len(), OpResult::default);
            }
            let rare = self.rare_mut();
            rare.batch_first = Some(first);
            // Noted first: should the execute fail on the way, they still fail the next one.
            rare.deferred.extend((first..first_anchor).map(OpId));
            // The reads and writes of long values defined after the anchor wait with it.
            let later_reads = take_after(&mut rare.blob_reads, |r| r.op.0 > anchor);
            let later_writes = take_after(&mut rare.blob_writes, |(op, _)| op.0 > anchor);
            let sent = Box::pin(self.execute_inner_via(
                trip,
                ExecType::NoCommit,
                AbortOption::IgnoreError,
            ))
            .await;
            let last = rest.len() == 0;
            let resolved = match sent {
                Ok(()) => self.resolve_run(trip, run, last).await,
                Err(e) => Err(e),
            };
            let rare = self.rare_mut();
            rare.blob_reads.extend(later_reads);
            rare.blob_writes.extend(later_writes);
            resolved?;
            if !last {
                self.batch = rest;
                self.rare_mut().batch_first = Some(rest_first);
            }
        }
    }

    /// Defines (and, unless they are the batch's `last`, sends) the row and part operations of
    /// the writes of `run`, whose anchors were answered.
    async fn resolve_run<R: RoundTrip>(
        &mut self,
        trip: &R,
        run: Vec<PendingWrite>,
        last: bool,
    ) -> Result<(), Error> {
        let mut defined: Vec<(OpId, Vec<OpId>)> = Vec::with_capacity(run.len());
        for write in run {
            defined.extend(self.resolve_blob_write(trip, write).await?);
            // The rows and parts a write's own batches of parts took along are checked now.
            let unsent = self.batch_first();
            let (sent, rest): (Vec<_>, Vec<_>) = (defined.into_iter())
                .partition(|(row_op, parts)| parts.last().unwrap_or(row_op).0 < unsent);
            self.check_resolved(sent)?;
            defined = rest;
            // Many rows' operations go in batches that fit a link's send buffer, as parts do.
            if self.batch.size_bytes() >= blob::PARTS_BATCH_BYTES {
                self.send_resolved(trip, std::mem::take(&mut defined))
                    .await?;
            }
        }
        if last {
            // Sent with the execute's own round trip, and checked as any write of parts there
            // (`Transaction::execute_writes`).
            self.rare_mut().blob_writes.extend(defined);
            return Ok(());
        }
        self.send_resolved(trip, defined).await
    }

    /// Sends what the batch holds (NoCommit, IgnoreError) and checks the writes `defined`
    /// (`check_resolved`).
    async fn send_resolved<R: RoundTrip>(
        &mut self,
        trip: &R,
        defined: Vec<(OpId, Vec<OpId>)>,
    ) -> Result<(), Error> {
        if self.batch.len() > 0 {
            let send = self.execute_inner_via(trip, ExecType::NoCommit, AbortOption::IgnoreError);
            Box::pin(send).await?;
        }
        self.check_resolved(defined)
    }

    /// Checks the row and part operations of the writes `defined`, answered
    /// (`check_blob_write`); a row's failure is the next AbortOnError execute's
    /// (`Rare::deferred`).
    fn check_resolved(&mut self, defined: Vec<(OpId, Vec<OpId>)>) -> Result<(), Error> {
        for (row_op, parts) in defined {
            self.check_blob_write(row_op, &parts)?;
            if self.op_error(row_op).is_some() {
                self.rare_mut().deferred.push(row_op);
            }
        }
        Ok(())
    }

    /// Defines the row and part operations of `write`, whose anchor was answered: the row's
    /// operation and its parts', or nothing to send (a missing row's update or delete, or a
    /// failed read).
    async fn resolve_blob_write<R: RoundTrip>(
        &mut self,
        trip: &R,
        write: PendingWrite,
    ) -> Result<Option<(OpId, Vec<OpId>)>, Error> {
        let PendingWrite {
            anchor,
            table,
            key,
            kind,
            writes,
        } = write;
        let (row_op, parts_type, old) = match kind {
            PendingKind::Insert => {
                // Parts of a row that failed would be orphans: the transaction is rolled back.
                if let Some(e) = self.op_error(anchor).cloned() {
                    self.roll_back_now();
                    return Err(Error::Ndb(e));
                }
                (anchor, OperationType::Insert, Vec::new())
            }
            PendingKind::Write(attrs) => {
                let (op_type, old) = match self.old_heads(anchor, &table)? {
                    Ok(old) => (OperationType::Write, old),
                    // A write that found no row is an insert: a row inserted since by another
                    // transaction fails it (630) rather than keeping that row's parts past the
                    // new value's, which nothing would delete (orphans, on which a later
                    // insert fails).
                    Err(e) if e.code == 626 => (OperationType::Insert, Vec::new()),
                    Err(_) => {
                        self.rare_mut().deferred.push(anchor);
                        return Ok(None);
                    }
                };
                let op = self.define_resolved(anchor, &table, op_type, &key, &attrs)?;
                (op, op_type, old)
            }
            PendingKind::Update(attrs) => {
                // A missing row is not locked: another transaction may insert it before this
                // one's update executes, which would then leave a head naming parts it never
                // wrote. Nothing is sent: the read's 626 is the update's, as if the other
                // transaction came later.
                let Ok(old) = self.old_heads(anchor, &table)? else {
                    self.rare_mut().deferred.push(anchor);
                    return Ok(None);
                };
                let update = OperationType::Update;
                let op = self.define_resolved(anchor, &table, update, &key, &attrs)?;
                (op, OperationType::Write, old)
            }
            PendingKind::Delete => {
                // As for an update: a delete sent for a missing row would delete the parts of
                // a row inserted meanwhile.
                let Ok(old) = self.old_heads(anchor, &table)? else {
                    self.rare_mut().deferred.push(anchor);
                    return Ok(None);
                };
                let delete = OperationType::Delete;
                let op = self.define_resolved(anchor, &table, delete, &key, &[])?;
                (op, delete, old)
            }
        };
        let define = self.define_parts_via(Some(trip), row_op, &key, writes, &old, parts_type);
        let parts = Box::pin(define).await?;
        Ok(Some((row_op, parts)))
    }

    /// The parts each parted column of `table`'s row has now, from the read of its heads
    /// (`read`, answered), or the read's error (626: no such row). The read's slot then holds
    /// no row: its `OpId` names the write.
    fn old_heads(
        &mut self,
        read: OpId,
        table: &Table,
    ) -> Result<Result<PartCounts, NdbError>, Error> {
        let result = &mut self.results[read.0];
        let row = match (result.row.take(), &result.error) {
            (Some(row), _) => row,
            (None, Some(e)) => return Ok(Err(e.clone())),
            (None, None) => return Err(Error::ndb_detail(4000, "a read answered no row")),
        };
        let mut counts = Vec::new();
        for bc in table.blobs().iter().filter(|bc| bc.parts.is_some()) {
            let length = blob::head_length(table, bc, &row[bc.column])?;
            counts.push((bc.column, blob::parts_of(bc, length)));
        }
        Ok(Ok(counts))
    }

    /// The row operation of a pending write, defined once its old heads were read; the
    /// write's `OpId` (`anchor`, its read's) names it from now on (`Rare::aliases`).
    fn define_resolved(
        &mut self,
        anchor: OpId,
        table: &Table,
        op_type: OperationType,
        key: &[Value],
        attrs: &[(u16, Value)],
    ) -> Result<OpId, Error> {
        let target = Target::table(table);
        let op = self.define(target, op_type, LockMode::Exclusive, key, attrs)?;
        self.rare_mut().aliases.insert(anchor.0, op.0);
        Ok(op)
    }

    /// Each value's parts written (`op_type`: Insert for a new row), and the old parts past
    /// the new value's deleted (`old`: each column's old count), after row operation
    /// `row_op`: their operations. With a `trip`, a batch past `blob::PARTS_BATCH_BYTES` goes
    /// out on the way (`flush_parts_via`); without, the caller made sure it stays below.
    async fn define_parts_via<R: RoundTrip>(
        &mut self,
        trip: Option<&R>,
        row_op: OpId,
        key: &[Value],
        writes: Vec<blob::PartWrites>,
        old: &[(usize, u64)],
        op_type: OperationType,
    ) -> Result<Vec<OpId>, Error> {
        let mut ops = Vec::new();
        let data = key.len() + 1;
        let mut written = Vec::new();
        for write in writes {
            let new = write.rows.len() as u64;
            for row in &write.rows {
                if let Some(trip) = trip {
                    self.flush_parts_via(trip, row_op, &ops).await?;
                }
                let attrs = [(data as u16, row[data].clone())];
                ops.push(self.define(
                    Target::part(&write.parts),
                    op_type,
                    LockMode::Exclusive,
                    &row[..data],
                    &attrs,
                )?);
            }
            let had = old
                .iter()
                .find(|(c, _)| *c == write.column)
                .map_or(0, |(_, n)| *n);
            if new > 0 || had > new {
                written.push(write.parts.id());
            }
            for part in new..had {
                if let Some(trip) = trip {
                    self.flush_parts_via(trip, row_op, &ops).await?;
                }
                let part_key = blob::part_key(key, part);
                ops.push(self.define(
                    Target::part(&write.parts),
                    OperationType::Delete,
                    LockMode::Exclusive,
                    &part_key,
                    &[],
                )?);
            }
        }
        let rare = self.rare_mut();
        for write in &written {
            if !rare.wrote_parts.contains(write) {
                rare.wrote_parts.push(*write);
            }
        }
        Ok(ops)
    }

    /// Before a part operation of row operation `row_op` (whose parts so far are `parts`):
    /// a batch past `blob::PARTS_BATCH_BYTES` goes out now (NoCommit), so that no execute
    /// outgrows the link's send buffer (4021). Should the row or a part sent fail, the
    /// transaction is rolled back and that is the error.
    async fn flush_parts_via<R: RoundTrip>(
        &mut self,
        trip: &R,
        row_op: OpId,
        parts: &[OpId],
    ) -> Result<(), Error> {
        if self.batch.size_bytes() < blob::PARTS_BATCH_BYTES {
            return Ok(());
        }
        let first = self.batch_first();
        // Noted first: should the execute fail on the way, they still fail the next one.
        let earlier = first..row_op.0.max(first);
        self.rare_mut().deferred.extend(earlier.map(OpId));
        Box::pin(self.execute_inner_via(trip, ExecType::NoCommit, AbortOption::IgnoreError))
            .await?;
        let ops = std::iter::once(row_op).chain(parts.iter().copied());
        if let Some(e) = ops.filter_map(|op| self.op_error(op)).next().cloned() {
            self.roll_back_now();
            return Err(Error::Ndb(e));
        }
        Ok(())
    }

    /// A write of a row with parts that failed with parts (`parts`, answered), or one of whose
    /// parts failed, rolls the transaction back, and that is the error (parts of a failed row
    /// would be orphans; NDB defines part operations AbortOnError).
    fn check_blob_write(&mut self, row_op: OpId, parts: &[OpId]) -> Result<(), Error> {
        let row_failed = self.op_error(row_op).filter(|_| !parts.is_empty());
        let failed = row_failed.or_else(|| parts.iter().find_map(|&p| self.op_error(p)));
        if let Some(e) = failed.cloned() {
            self.roll_back_now();
            return Err(Error::Ndb(e));
        }
        Ok(())
    }

    /// An execute IgnoreError of a batch with writes of parts: the batch (NoCommit), then,
    /// unless a row with parts or one of its parts failed (which rolls the transaction back
    /// and is the execute's error), `exec` with nothing more.
    async fn execute_blob_writes<R: RoundTrip>(
        &mut self,
        trip: &R,
        exec: ExecType,
        writes: Vec<(OpId, Vec<OpId>)>,
    ) -> Result<(), Error> {
        trip.round_trip(self, ExecType::NoCommit, AbortOption::IgnoreError)
            .await?;
        for (op, parts) in &writes {
            self.check_blob_write(*op, parts)?;
        }
        match exec {
            ExecType::NoCommit => Ok(()),
            exec => trip.round_trip(self, exec, AbortOption::IgnoreError).await,
        }
    }

    /// An execute of a batch with reads of rows with BLOB or TEXT columns. When each of them
    /// is a CommittedRead and `exec` commits: the batch with `exec` (one round trip, values
    /// whole in their heads need no more), then the rows whose values have parts read whole
    /// again by a transaction of their own (`blob::complete_apart`). Else the batch
    /// (NoCommit); the CommittedRead rows with parts read again under a shared lock, and every
    /// value's parts read: in this transaction for the rows it locked exclusively, by
    /// transactions of their own for the others (`Transaction::owns`); then `exec` with
    /// nothing more.
    async fn execute_blob_reads<R: RoundTrip>(
        &mut self,
        trip: &R,
        exec: ExecType,
        abort: AbortOption,
    ) -> Result<(), Error> {
        let reads = std::mem::take(&mut self.rare_mut().blob_reads);
        // A read-only transaction of CommittedReads only: nothing sent before, nothing else in
        // the batch (a commit with writes must not be followed by a read that may fail).
        let commit_first = exec == ExecType::Commit
            && self.state == State::Fresh
            && reads.len() == self.batch.len()
            && reads.iter().all(|r| r.committed);
        let first = if commit_first {
            exec
        } else {
            ExecType::NoCommit
        };
        self.execute_writes(trip, first, abort).await?;
        let mut rows = Vec::new();
        // CommittedRead rows with parts: read again under a lock first.
        let mut again = Vec::new();
        for read in reads {
            let op = read.op;
            let Some(row) = self.results.get_mut(op.0).and_then(|r| r.row.take()) else {
                continue;
            };
            match blob::whole_or_long(&read.table, row) {
                Ok(Ok(whole)) => self.results[op.0].row = Some(whole),
                Ok(Err(long)) if read.committed => again.push((op, read.table, long)),
                Ok(Err(long)) => rows.push((op, read.table, long)),
                Err(e) => return Err(e),
            }
        }
        if commit_first {
            let cluster = self.cluster;
            let gone = blob::complete_apart(trip, cluster, &mut again, None).await?;
            self.file_completed(again);
            for &op in &gone {
                self.results[op.0].error = Some(blob::gone());
            }
            return match gone.first() {
                Some(_) if abort == AbortOption::AbortOnError => Err(Error::Ndb(blob::gone())),
                _ => Ok(()),
            };
        }
        // Rows this transaction locked exclusively are completed in it (another transaction
        // would wait for its locks); the others by transactions of their own, whose shared
        // locks on the parts end with their commits, not this transaction's.
        self.note_batch();
        let (again, mut again_apart): (Vec<_>, Vec<_>) =
            again.into_iter().partition(|(_, t, r)| self.owns(t, r));
        let (mut rows, mut rows_apart): (Vec<_>, Vec<_>) =
            rows.into_iter().partition(|(_, t, r)| self.owns(t, r));
        let cluster = self.cluster;
        let mut gone = blob::complete_apart(trip, cluster, &mut again_apart, None).await?;
        blob::fill_apart(trip, cluster, &mut rows_apart).await?;
        // Read again under a shared lock, so that their parts are of the version read.
        if !again.is_empty() {
            let keys: Vec<Vec<Value>> = again.iter().map(|(_, t, r)| key_of(t, r)).collect();
            let tables = again.iter().map(|(_, t, _)| t);
            let fresh = (self.read_locked(trip, tables.zip(&keys))).await?;
            for ((op, table, _), fresh) in again.into_iter().zip(fresh) {
                match fresh {
                    Some(row) => rows.push((op, table, row)),
                    None => gone.push(op),
                }
            }
        }
        (self.fill_rows(trip, &mut rows, ExecType::NoCommit)).await?;
        self.file_completed(rows);
        self.file_completed(rows_apart);
        self.file_completed(again_apart);
        for &op in &gone {
            self.results[op.0].error = Some(blob::gone());
        }
        let any_gone = !gone.is_empty();
        if any_gone && abort == AbortOption::AbortOnError && exec != ExecType::Rollback {
            // As a read of a missing row fails an execute that aborts on errors.
            self.roll_back_now();
            return Err(Error::Ndb(blob::gone()));
        }
        match exec {
            ExecType::NoCommit => Ok(()),
            exec => self.execute_writes(trip, exec, abort).await,
        }
    }

    /// Puts rows made whole back in their operations' results.
    pub(crate) fn file_completed(&mut self, rows: Vec<(OpId, Table, Vec<Value>)>) {
        for (op, _, row) in rows {
            if let Some(result) = self.results.get_mut(op.0) {
                result.row = Some(row);
            }
        }
    }

    /// The rows made whole: every part of every long value read, in executes of at most
    /// `blob::PARTS_BATCH_BYTES` of answers, the last one `last`.
    pub(crate) async fn fill_rows<R: RoundTrip>(
        &mut self,
        trip: &R,
        rows: &mut [(OpId, Table, Vec<Value>)],
        last: ExecType,
    ) -> Result<(), Error> {
        // Under a shared lock, though the rows' heads are locked: a writer's commit reaches
        // each row's primary on its own, so one that released the head may not have
        // committed a part yet (NDB reads parts so, LM_SimpleRead, for the same reason).
        // The locks go with the transaction; the transaction's own parts are its own.
        let lock = LockMode::Read;
        // (row, column, the part reads' ids)
        let mut wanted: Vec<(usize, usize, Vec<OpId>)> = Vec::new();
        let mut answer_bytes = 0;
        for (i, (_, table, row)) in rows.iter().enumerate() {
            let key = key_of(table, row);
            for bc in table.blobs() {
                let count = blob::parts_of(bc, blob::head_length(table, bc, &row[bc.column])?);
                let Some(parts) = bc.parts.clone().filter(|_| count > 0) else {
                    continue;
                };
                let mut ops = Vec::with_capacity(count as usize);
                for part in 0..count {
                    // The answers of one execute stay within a batch's bytes too.
                    if answer_bytes >= blob::PARTS_BATCH_BYTES {
                        (self.execute_writes(trip, ExecType::NoCommit, AbortOption::IgnoreError))
                            .await?;
                        answer_bytes = 0;
                    }
                    let part_key = blob::part_key(&key, part);
                    ops.push(self.read_heads(&parts, &part_key, lock)?);
                    answer_bytes += usize::from(bc.size.part_bytes());
                }
                wanted.push((i, bc.column, ops));
            }
        }
        if self.batch.len() > 0 || last != ExecType::NoCommit {
            (self.execute_writes(trip, last, AbortOption::IgnoreError)).await?;
        }
        for (i, (_, table, row)) in rows.iter_mut().enumerate() {
            for bc in table.blobs() {
                let mut data = Vec::new();
                if let Some((_, _, ops)) =
                    wanted.iter().find(|(r, c, _)| *r == i && *c == bc.column)
                {
                    for (part, &op) in ops.iter().enumerate() {
                        match (self.row(op), self.op_error(op)) {
                            (Some(part_row), _) => match part_row.last() {
                                Some(Value::Varbinary(b)) => data.push(b.clone()),
                                other => {
                                    return Err(Error::ndb_detail(
                                        4267,
                                        format!(
                                            "part {part} of table {} column {} holds {other:?}",
                                            table.name(),
                                            table.def().columns[bc.column].name
                                        ),
                                    ))
                                }
                            },
                            (None, Some(e)) if e.code == 626 => {
                                return Err(Error::ndb_detail(
                                    4267,
                                    format!(
                                        "part {part} of table {} column {} is missing",
                                        table.name(),
                                        table.def().columns[bc.column].name
                                    ),
                                ))
                            }
                            (None, Some(e)) => return Err(blob::part_error(e)),
                            (None, None) => {
                                return Err(Error::ndb_detail(4000, "a part read answered no row"))
                            }
                        }
                    }
                }
                row[bc.column] = blob::whole_value(table, bc, &row[bc.column], &data)?;
            }
        }
        Ok(())
    }
}

impl Transaction<'_> {
    /// Files the row of a TCKEY_ROW (or of a TCKEY_ROW_CONF, `conf`: then returns the commit's
    /// GCI it names) for operation `op_index` in its result `slot`. `Err` names a protocol
    /// violation.
    fn file_row(
        &mut self,
        slot: usize,
        op_index: u32,
        payload: &[u8],
        conf: bool,
    ) -> Result<Option<u64>, String> {
        let result = &mut self.results[slot];
        if result.row.is_some() {
            // A data node answers an operation once: replacing the row would let a flood of
            // them run until the request times out.
            return Err(format!("a second TCKEY_ROW for operation {op_index}"));
        }
        // Decoded into its slot: a row returned by value was copied in by loads wider than the
        // stores that had just written it (a stall per row).
        let values = result.row.insert(spare_row());
        // Checked against the operation's table as it is decoded.
        let decoded = match self.tables.get(result.table, &self.rare) {
            Some(table) if conf => TcKeyRow::decode_row_conf_into(payload, table.def(), values)
                .map_err(|e| format!("{e} (operation {op_index})")),
            Some(table) => TcKeyRow::decode_row_into(payload, table.def(), values)
                .map(|()| None)
                .map_err(|e| format!("{e} (operation {op_index})")),
            None => Err(format!(
                "TCKEY_ROW for operation {op_index}, which reads no row"
            )),
        };
        if decoded.is_err() {
            // No half-decoded or misshapen row stays behind.
            result.row = None;
        }
        decoded
    }
}

/// How an execute's answers ended.
enum Ended {
    /// TC_EXECUTE_CONF: every operation ran (some may have failed under IgnoreError), and
    /// a commit's GCI.
    Conf(Option<u64>),
    /// TC_EXECUTE_REF: the transaction was aborted with this error.
    Refused(Error),
    /// An answer broke the protocol.
    Malformed(Error),
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        recycle_rows(&mut self.results);
        let open = matches!(self.state, State::Open | State::Abandoned);
        self.cluster.counters().with_block(|counts| {
            counts.bump(ClientStat::TransCloseCount, 1);
            counts.bump(ClientStat::TransAbortCount, u64::from(open));
        });
        if !open {
            self.finish_elsewhere(ExecType::Rollback);
            return;
        }
        self.finish_elsewhere(ExecType::Rollback);
        // Roll back without waiting: the answer, when it comes, is dropped because nobody
        // expects this request id any more.
        let connection = self.connection();
        let (header, payload) = self.end_frame(ExecType::Rollback);
        // A failure here means the link is gone, and the data node aborts the transaction
        // itself when the link closes.
        let _ = connection.send_batch(&[(header, &payload)]);
    }
}

fn check_value(table: &Table, column: usize, value: &Value) -> Result<(), Error> {
    let Some(def) = table.def().columns.get(column) else {
        return Err(Error::ndb_detail(
            4004,
            format!("table {} has no column {column}", table.name()),
        ));
    };
    if *value == Value::Null && !def.nullable {
        return Err(Error::ndb_detail(840, format!("column {}", def.name)));
    }
    if !value.fits(def.column_type) {
        return Err(Error::ndb_detail(
            4209,
            format!("column {} is {}, got {value:?}", def.name, def.column_type),
        ));
    }
    Ok(())
}

/// Checks (column, value) pairs for an update: existing non-key columns, fitting values.
fn check_set(table: &Table, set: &[(usize, Value)]) -> Result<Attrs, Error> {
    let mut attrs = Vec::with_capacity(set.len());
    for (column, value) in set {
        check_value(table, *column, value)?;
        if table.def().columns[*column].primary_key {
            return Err(Error::ndb_detail(
                4004,
                format!(
                    "column {} is part of the primary key and cannot be updated",
                    table.def().columns[*column].name
                ),
            ));
        }
        attrs.push((*column as u16, value.clone()));
    }
    Ok(attrs)
}

/// The target of an operation through a unique index, after checking its key: one non-NULL
/// value per index column, each fitting its column.
fn unique_target<'i>(index: &'i Index, key: &[Value]) -> Result<Target<'i>, Error> {
    if index.kind() != IndexKind::Unique {
        return Err(Error::ndb_detail(
            4243,
            format!("{} is not a unique index", index.name()),
        ));
    }
    let columns = index.columns();
    if key.len() != columns.len() {
        return Err(Error::ndb_detail(
            4116,
            format!(
                "index {} has {} columns, got {} values",
                index.name(),
                columns.len(),
                key.len()
            ),
        ));
    }
    for (value, &column) in key.iter().zip(columns) {
        if *value == Value::Null {
            return Err(Error::ndb_detail(
                4116,
                format!("NULL never matches unique index {}", index.name()),
            ));
        }
        check_value(index.table(), column, value)?;
    }
    Ok(Target {
        signal: gsn::TCINDXREQ,
        id: index.id(),
        version: index.version(),
        table: index.table(),
        part: false,
    })
}

fn check_key(table: &Table, key: &[Value]) -> Result<(), Error> {
    let key_columns = table.key_columns();
    if key.len() != key_columns.len() {
        return Err(Error::ndb_detail(
            4116,
            format!(
                "table {} has {} key columns, got {} values",
                table.name(),
                key_columns.len(),
                key.len()
            ),
        ));
    }
    for (value, &column) in key.iter().zip(key_columns) {
        if *value == Value::Null {
            return Err(Error::ndb_detail(
                839,
                format!("key column {}", table.def().columns[column].name),
            ));
        }
        check_value(table, column, value)?;
    }
    Ok(())
}

/// (column position, value) pairs to set.
type Attrs = Vec<(u16, Value)>;

/// Splits a whole row into key values and (column, value) pairs for the other columns.
fn split_row(table: &Table, row: &[Value]) -> Result<(Vec<Value>, Attrs), Error> {
    let columns = &table.def().columns;
    if row.len() != columns.len() {
        return Err(Error::ndb_detail(
            4116,
            format!(
                "table {} has {} columns, got {} values",
                table.name(),
                columns.len(),
                row.len()
            ),
        ));
    }
    let bytes: usize = row.iter().map(Value::stored_bytes).sum();
    if bytes > ROW_BYTES_MAX {
        return Err(Error::ndb_detail(
            738,
            format!("row of {bytes} bytes, limit {ROW_BYTES_MAX}"),
        ));
    }
    let mut key = Vec::with_capacity(table.key_columns().len());
    let mut attrs = Vec::with_capacity(columns.len());
    for (column, value) in row.iter().enumerate() {
        check_value(table, column, value)?;
        if columns[column].primary_key {
            key.push(value.clone());
        } else {
            attrs.push((column as u16, value.clone()));
        }
    }
    check_key(table, &key)?;
    Ok((key, attrs))
}

/// 4010 for a lock check that found node `connection.peer`'s part of a locked scan gone.
fn scan_locks_lost(connection: &Connection, why: &dyn std::fmt::Display) -> Error {
    Error::ndb_detail(
        4010,
        format!(
            "node {} no longer holds the locks this transaction's scan took there ({why})",
            connection.peer
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock noted after its operation was encoded (`Transaction::note_batch`) is noted by
    /// the key the caller gave: the frame's key decodes to it.
    #[test]
    fn a_frame_gives_back_its_key() {
        let key = [Value::UInt32(7), Value::Varbinary(b"ab".to_vec())];
        let mut payload = Vec::new();
        TcKeyReqRef {
            flags: 0,
            op_index: 3,
            op_type: OperationType::Write,
            lock_mode: LockMode::Exclusive,
            table_id: 9,
            table_version: 1,
            replica: REPLICA_PRIMARY,
            key: &key,
            attrs: &[(2, Value::Varbinary(vec![5; 100]))],
            program: None,
        }
        .encode(&mut payload);
        assert_eq!(frame_key(&payload), Some(key.to_vec()));
        assert_eq!(frame_key(&payload[..5]), None);
    }

    /// The encoding buffers an execute gives back come back empty (and as large) for the
    /// thread's next execute.
    #[test]
    fn kept_encoding_buffers_come_back_empty() {
        let mut sent = Encoded::default();
        sent.push(FrameHeader::default(), 3, |b| {
            b.extend_from_slice(&[1; 300])
        });
        let capacity = sent.bytes.capacity();
        sent.recycle();
        let mut next = Encoded::default();
        next.push(FrameHeader::default(), 1, |b| b.push(9));
        assert_eq!(next.bytes, vec![9]);
        assert_eq!(next.len(), 1);
        assert!(
            next.bytes.capacity() >= capacity,
            "the kept buffers are reused"
        );
    }

    /// A transaction stays as small as it was before it kept its tables: the asynchronous
    /// API keeps thousands in flight, and 8 bytes more (128 instead of 120) cost 10-15 % of the
    /// throughput at 4096 in flight (three alternated rounds of the sweep, 2026-11-30).
    #[test]
    fn a_transaction_stays_small() {
        let size = std::mem::size_of::<Transaction>();
        assert!(size <= 120, "{size} bytes");
    }
}
