//! The tokio interface: the same transactions, executes, scans and dictionary calls as the
//! blocking API, as futures that an `async fn` awaits (feature `tokio`).
//!
//! ```text
//! cluster.tokio() ──► TokioCluster          get_table / create_table / … .await
//!   start_transaction ──► TokioTransaction  read / insert / … (defined locally, as today:
//!                                            it derefs to Transaction)
//!        execute(Commit).await ──► encode, send (one flush per execute), register a waker
//!        scan_table(..).await  ──► TokioScan: a Stream of rows, batch by batch
//!
//! each link's reader ──► files answers by request id ──► wakes the waiting task
//! ```
//!
//! No thread per transaction: a task that awaits an execute holds only its request id
//! registered on the link, with its waker. Each link has a reader, started with its first
//! awaited request: over TCP and SHM a receive task on the runtime, woken by the runtime's
//! reactor when the socket is readable (over SHM the wake-up socket the data node writes to
//! once the task announced its sleep, after looking at the ring on every turn of the runtime
//! for ShmSpintime), so answers are read and tasks woken on the runtime's own thread; over
//! io_uring the connection's receive thread. Whoever files the
//! last answer of a request wakes its task (a blocking caller that owns the poller meanwhile
//! does too). Executes that tasks append in one turn of the runtime leave in one flush. Thousands
//! of executes can so be in flight from one runtime thread, as with [`crate::AsyncExecutor`].
//!
//! Cancellation: dropping an execute's future before its answers came (a `select!`, a timeout,
//! an aborted task) forgets the request and rolls the transaction back at once, without
//! waiting, so the data node frees its records and locks; the transaction is then finished
//! (4114 on any further use). Dropping a scan's stream closes the scan on the data nodes. The
//! data node's TC answers a rollback that comes while an execute is running when that execute
//! ends: an execute waiting for a lock held elsewhere keeps its locks until it gets the lock or
//! TransactionDeadlockDetectionTimeout ends the wait.
//!
//! Spawn the tasks with `tokio::spawn`: a task of a `LocalSet` is woken by the link's reader
//! from outside the set, through the runtime's remote queue and a write to its eventfd, a
//! system call per wake-up (at 1024 reads in flight over TCP that cost four fifths of the
//! throughput).
//!
//! BLOB and TEXT values are read, written and scanned whole, as in the blocking API: an
//! execute's extra round trips (the parts of the rows it read, an IgnoreError batch of part
//! writes before its commit) are awaited, and so is a scanned row's completion by a
//! transaction of its own (`crate::blob`). A write, update or delete of a row with parts is
//! defined without a round trip (through the `Transaction` this derefs to): its execute reads
//! the old heads and sends the row's parts, awaited (one more round trip per 256 KiB of
//! parts past the first). A scan that completes rows its transaction locked
//! (`blob::OwnRows`) makes its round trips while its future is awaited: dropped then, it rolls
//! the transaction back.
//!
//! Event operations (`create_event_operation`, `create_event_operation_merged`,
//! `create_event_operation_for` a named event) are made and
//! polled as futures: [`TokioEventOperation::poll_events`] looks at the streams when one of
//! them completes an epoch (its report wakes the task; an epoch is 100 ms by default), and at
//! least every 50 ms, the operation's pump thread keeping them flowing meanwhile; a look
//! decodes all that came, at once. Dropping an operation (or
//! its creation's future) unsubscribes on the runtime's thread: a send each data node, which
//! waits up to a second for a full send buffer, and the pump thread's join.
//!
//! The futures need a runtime with its time driver (`enable_time` or `enable_all`): each wait
//! ends with 4012 after the API's request timeout, as in the blocking API.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rndb_protocol::signals::{self, block, gsn, CreateIndexReq};
use rndb_protocol::{AbortOption, ExecType, TableDef, Value};
use rndb_transporter::FrameHeader;

use crate::connection::{Answers, Connection};
use crate::event::EventOperation;
use crate::scan::{Scan, ScanOptions};
use crate::transaction::{Begun, OwnScan, Sent};
use crate::{
    index_answer, index_name, list_tables_page, list_tables_payload, refusal, refused_not_master,
    single_answer, table_answer, Cluster, Error, Index, IndexDef, ListedObject, Table, Transaction,
    MASTER_LINK_WAIT_MAX,
};

/// How often a dictionary request refused by a data node that is not the DICT master looks
/// for a link to a lower node again (the blocking API waits on the connector instead).
const MASTER_LINK_POLL: Duration = Duration::from_millis(20);

impl Cluster {
    /// The tokio interface of this cluster (see the module docs). Cheap: a reference.
    pub fn tokio(&self) -> TokioCluster<'_> {
        TokioCluster { cluster: self }
    }
}

/// A [`Cluster`] seen through its tokio interface: dictionary calls and transactions whose
/// waits are futures. Copy it freely between tasks (a `&'static Cluster`, e.g. leaked or in a
/// `OnceLock`, lets `tokio::spawn`ed tasks share one).
#[derive(Clone, Copy, Debug)]
pub struct TokioCluster<'c> {
    cluster: &'c Cluster,
}

impl<'c> TokioCluster<'c> {
    /// The blocking interface of the same cluster.
    pub fn cluster(&self) -> &'c Cluster {
        self.cluster
    }

    /// Starts a transaction. Nothing is sent until its first `execute`.
    pub fn start_transaction(&self) -> TokioTransaction<'c> {
        TokioTransaction {
            transaction: Transaction::new(self.cluster, self.cluster.new_request_id()),
        }
    }

    /// As [`Cluster::ping`].
    pub async fn ping(&self) -> Result<(), Error> {
        let connection = self.cluster.coordinator();
        let answers = self
            .request(&connection, gsn::PING_REQ, block::QMGR, &[])
            .await?;
        match single_answer(&answers, &connection)? {
            (gsn::PING_CONF, _) => Ok(()),
            (signal, _) => {
                Err(connection.protocol_violation(format!("answer {signal} to PING_REQ")))
            }
        }
    }

    /// As [`Cluster::create_table`].
    pub async fn create_table(&self, def: &TableDef) -> Result<Table, Error> {
        def.validate()
            .map_err(|(code, detail)| Error::ndb_detail(code, detail))?;
        let mut payload = Vec::new();
        signals::encode_table_def(&mut payload, def);
        let conf = gsn::CREATE_TABLE_CONF;
        let (connection, answers) = self
            .dict_request(gsn::CREATE_TABLE_REQ, &payload, conf)
            .await?;
        self.with_parts(table_answer(&connection, &answers, conf)?)
            .await
    }

    /// As [`Cluster::get_table`].
    pub async fn get_table(&self, name: &str) -> Result<Table, Error> {
        let table = self.get_table_alone(name).await?;
        self.with_parts(table).await
    }

    /// The table `name`, without the parts tables of its BLOB and TEXT columns.
    async fn get_table_alone(&self, name: &str) -> Result<Table, Error> {
        let mut payload = Vec::new();
        signals::encode_name(&mut payload, name);
        let conf = gsn::GET_TABINFO_CONF;
        let (connection, answers) = self
            .dict_request(gsn::GET_TABINFO_REQ, &payload, conf)
            .await?;
        table_answer(&connection, &answers, conf)
    }

    /// `table` with the parts tables of its BLOB and TEXT columns, looked up (4263 when one is
    /// missing), as the blocking API's handles have them.
    async fn with_parts(&self, table: Table) -> Result<Table, Error> {
        let mut parts = Vec::new();
        for name in table.parts_table_names() {
            let found = self.get_table_alone(&name).await;
            parts.push(found.map_err(|e| crate::missing_parts(&name, e))?);
        }
        Ok(table.with_parts_tables(parts))
    }

    /// As [`Cluster::list_tables`].
    pub async fn list_tables(&self) -> Result<Vec<ListedObject>, Error> {
        let mut objects = Vec::new();
        let mut from_id = 0;
        loop {
            let payload = list_tables_payload(from_id);
            let (connection, answers) = self
                .dict_request(gsn::LIST_TABLES_REQ, &payload, gsn::LIST_TABLES_CONF)
                .await?;
            match list_tables_page(&connection, &answers, from_id, &mut objects)? {
                Some(next) => from_id = next,
                None => return Ok(objects),
            }
        }
    }

    /// As [`Cluster::drop_table`].
    pub async fn drop_table(&self, name: &str) -> Result<(), Error> {
        let mut payload = Vec::new();
        signals::encode_name(&mut payload, name);
        let conf = gsn::DROP_TABLE_CONF;
        let (connection, answers) = self
            .dict_request(gsn::DROP_TABLE_REQ, &payload, conf)
            .await?;
        match single_answer(&answers, &connection)? {
            (signal, _) if signal == conf => Ok(()),
            (signal, payload) => Err(refusal(&connection, signal, payload)),
        }
    }

    /// As [`Cluster::create_index`].
    pub async fn create_index(&self, table: &Table, def: &IndexDef) -> Result<Index, Error> {
        let mut payload = Vec::new();
        CreateIndexReq {
            table: table.name().to_string(),
            index: def.name.clone(),
            kind: def.kind,
            columns: def.columns.clone(),
        }
        .encode(&mut payload);
        let conf = gsn::CREATE_INDEX_CONF;
        let (connection, answers) = self
            .dict_request(gsn::CREATE_INDEX_REQ, &payload, conf)
            .await?;
        index_answer(&connection, table, &answers, conf)
    }

    /// As [`Cluster::get_index`].
    pub async fn get_index(&self, table: &Table, name: &str) -> Result<Index, Error> {
        let payload = index_name(table, name);
        let conf = gsn::GET_INDEX_CONF;
        let (connection, answers) = self
            .dict_request(gsn::GET_INDEX_REQ, &payload, conf)
            .await?;
        index_answer(&connection, table, &answers, conf)
    }

    /// As [`Cluster::drop_index`].
    pub async fn drop_index(&self, table: &Table, name: &str) -> Result<(), Error> {
        let payload = index_name(table, name);
        let conf = gsn::DROP_INDEX_CONF;
        let (connection, answers) = self
            .dict_request(gsn::DROP_INDEX_REQ, &payload, conf)
            .await?;
        match single_answer(&answers, &connection)? {
            (signal, _) if signal == conf => Ok(()),
            (signal, payload) => Err(refusal(&connection, signal, payload)),
        }
    }

    /// As the blocking API's dictionary request: to the lowest live link, again to a lower
    /// one while the answer is 702 (not the DICT master), waiting up to
    /// [`MASTER_LINK_WAIT_MAX`] for the background connector to link one.
    async fn dict_request(
        &self,
        signal: u16,
        payload: &[u8],
        conf: u16,
    ) -> Result<(Arc<Connection>, Answers), Error> {
        let cluster = self.cluster;
        let mut connection = cluster.coordinator();
        loop {
            let answers = self
                .request(&connection, signal, block::DBDICT, payload)
                .await?;
            if !refused_not_master(&answers, conf) {
                return Ok((connection, answers));
            }
            let peer = connection.peer;
            let lowest_below = || {
                cluster
                    .linked()
                    .filter(|c| c.peer < peer && !c.is_failed())
                    .min_by_key(|c| c.peer)
            };
            let deadline = Instant::now() + MASTER_LINK_WAIT_MAX.min(cluster.request_timeout);
            while lowest_below().is_none() && cluster.connector.is_some() {
                if Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(MASTER_LINK_POLL).await;
            }
            match lowest_below() {
                Some(lower) => connection = lower,
                None => return Ok((connection, answers)),
            }
        }
    }

    /// Sends one signal to `connection`'s data node and awaits its answer.
    async fn request(
        &self,
        connection: &Arc<Connection>,
        signal: u16,
        receiver_block: u16,
        payload: &[u8],
    ) -> Result<Answers, Error> {
        let request_id = self.cluster.new_request_id();
        let header = FrameHeader {
            signal,
            receiver_block,
            sender_block: block::API,
            request_id,
        };
        connection.register_task_request(request_id);
        if let Err(e) = connection.send_batch(&[(header, payload)]) {
            connection.forget(request_id);
            return Err(e);
        }
        (connection.stats()).add(crate::ClientStat::WaitMetaRequestCount, 1);
        Reply::new(Arc::clone(connection), request_id)
            .within(self.cluster.request_timeout)
            .await
    }
}

/// A transaction whose executes and scans are awaited. It derefs to [`Transaction`], so
/// operations are defined and results read exactly as there (the commit's
/// [`Transaction::gci`], a [`Transaction::set_durable_commit`] awaited until its global
/// checkpoint is saved); `execute`, `execute_with`, `scan_table` and `scan_index` are the
/// awaited ones. Dropping an open transaction rolls it
/// back.
#[derive(Debug)]
pub struct TokioTransaction<'c> {
    transaction: Transaction<'c>,
}

impl<'c> Deref for TokioTransaction<'c> {
    type Target = Transaction<'c>;
    fn deref(&self) -> &Transaction<'c> {
        &self.transaction
    }
}

impl<'c> DerefMut for TokioTransaction<'c> {
    fn deref_mut(&mut self) -> &mut Transaction<'c> {
        &mut self.transaction
    }
}

impl<'c> TokioTransaction<'c> {
    /// As [`Transaction::execute`]: every operation defined since the last execute, in one
    /// round trip to the transaction's TC node.
    pub async fn execute(&mut self, exec: ExecType) -> Result<(), Error> {
        self.execute_with(exec, AbortOption::AbortOnError).await
    }

    /// As [`Transaction::execute_with`]. Dropping the future before it completes rolls the
    /// transaction back (see the module docs).
    pub async fn execute_with(&mut self, exec: ExecType, abort: AbortOption) -> Result<(), Error> {
        if self.transaction.one_round_trip() {
            return awaited_round_trip(&mut self.transaction, exec, abort).await;
        }
        // Reads or writes of BLOB and TEXT values, or errors of operations sent ahead: more
        // than one round trip. Boxed, so that the usual execute's future stays small.
        Box::pin(self.transaction.execute_via(&Awaited, exec, abort)).await
    }

    /// As [`Transaction::scan_table`]: the stream of rows, once every data node's first
    /// batch came.
    pub async fn scan_table(
        &mut self,
        table: &Table,
        options: &ScanOptions,
    ) -> Result<TokioScan<'c>, Error> {
        if !options.ranges.is_empty() || options.sorted || options.descending {
            return Err(Error::ndb_detail(
                4259,
                "ranges and order need an ordered index scan",
            ));
        }
        self.start_scan(table, None, options).await
    }

    /// As [`Transaction::scan_index`].
    pub async fn scan_index(
        &mut self,
        index: &Index,
        options: &ScanOptions,
    ) -> Result<TokioScan<'c>, Error> {
        if index.kind() != rndb_protocol::IndexKind::Ordered {
            return Err(Error::ndb_detail(
                4243,
                format!("{} is not an ordered index", index.name()),
            ));
        }
        self.start_scan(index.table(), Some(index), options).await
    }

    async fn start_scan(
        &mut self,
        table: &Table,
        index: Option<&Index>,
        options: &ScanOptions,
    ) -> Result<TokioScan<'c>, Error> {
        let transaction = &mut self.transaction;
        if transaction.has_pending_writes() {
            // Their rows' locks are noted as they are resolved: before the scan takes note.
            Box::pin(transaction.send_pending(&Awaited)).await?;
        }
        let own = transaction.own_scan(table);
        let whole = own == OwnScan::Whole;
        let own_rows = match own {
            OwnScan::No if table.has_parts() => Some(Arc::new(crate::blob::OwnRows::new(
                table,
                transaction.noted(),
            ))),
            OwnScan::No => None,
            OwnScan::Rows(keys) => {
                Box::pin(transaction.send_pending(&Awaited)).await?;
                let read = transaction.own_rows(&Awaited, table, keys);
                Some(Box::pin(read).await?)
            }
            OwnScan::Whole => {
                Box::pin(transaction.send_pending(&Awaited)).await?;
                None
            }
        };
        let scan =
            transaction.send_scan(table, index, options, Connection::register_task_request)?;
        let waits = scan.first_waits();
        let mut stream = TokioScan::new(scan, waits);
        let opened = std::future::poll_fn(|cx| stream.poll_waits(cx)).await;
        transaction.note_scan_opened(opened.as_ref().err());
        opened?;
        // An Exclusive scan's own rows are its to complete: noted before its snapshot.
        transaction.note_exclusive_scan(table, options);
        if let Some(own_rows) = own_rows {
            stream
                .scan
                .set_own_rows(own_rows, transaction.unnamed_locks(table));
        }
        if whole {
            let rows = stream.drain_own().await?;
            let (locked, check) = stream.scan.completion();
            let check = check.as_deref();
            let complete = transaction.complete_scanned(&Awaited, table, locked, check, rows);
            let rows = Box::pin(complete).await?;
            stream.scan.set_completed(rows);
        }
        Ok(stream)
    }

    /// Ends the transaction; an open one is rolled back.
    pub fn close(self) {}
}

/// The tokio interface's round trip (see `crate::transaction::RoundTrip`).
pub(crate) struct Awaited;

impl crate::transaction::RoundTrip for Awaited {
    fn round_trip<'a>(
        &'a self,
        transaction: &'a mut Transaction<'_>,
        exec: ExecType,
        abort: AbortOption,
    ) -> impl Future<Output = Result<(), Error>> {
        awaited_round_trip(transaction, exec, abort)
    }
}

/// One awaited round trip of `transaction`'s execute: the lock checks of a commit after
/// locked scans, then the operations defined since the last execute.
async fn awaited_round_trip(
    transaction: &mut Transaction<'_>,
    exec: ExecType,
    abort: AbortOption,
) -> Result<(), Error> {
    confirm_scan_locks(transaction, exec).await?;
    let (connection, frames, sent) = match transaction.begin_execute_now(exec, abort) {
        Begun::Done(result) => return result,
        Begun::Send {
            connection,
            frames,
            sent,
        } => (connection, frames, sent),
    };
    let request_id = transaction.request_id();
    let cluster = transaction.cluster();
    // Given up by the link's reader after the request timeout (4012): no timer per execute.
    connection.register_task_request_until(request_id, cluster.deadline());
    let appended = connection.append_frames_deferred(frames.iter());
    frames.recycle();
    let owes_flush = match appended {
        Ok(made_owed) => made_owed,
        Err(e) => {
            connection.forget(request_id);
            return Err(transaction.send_failed(e));
        }
    };
    let mut guard = RollBackOnDrop {
        transaction: Some(transaction),
        sent: Some(sent),
        connection: Arc::clone(&connection),
        owes_flush,
    };
    // The frames wait in the send buffer while every other task the runtime has ready
    // appends its own. The task whose append made the flush owed flushes them all when it
    // is back, after one turn of the run queue (one write for many executes, NDB's adaptive
    // send); the others leave it to that task. Were it the first task back that flushed,
    // then once every task waited behind a yield each would flush the single execute
    // appended just before it (issue 27: 3.5 executes a write at 4096 in flight over TCP).
    // A task dropped meanwhile flushes as it goes (see `RollBackOnDrop`).
    if owes_flush {
        yield_once().await;
        guard.owes_flush = false;
        if let Err(e) = connection.flush_owed() {
            connection.forget(request_id);
            let transaction = guard.transaction.take().expect("taken only here");
            return Err(transaction.send_failed(e));
        }
    }
    let answers = Reply::new(connection, request_id).await;
    let transaction = guard.transaction.take().expect("taken only here");
    let sent = guard.sent.take().expect("taken only here");
    transaction.complete_execute(sent, answers)
}

/// Before a commit, the data nodes other than the TC where a scan locked rows confirm
/// that they still hold them, as in the blocking API (`Transaction::scan_locks_to_confirm`).
/// Dropped while it waits, the transaction rolls back.
async fn confirm_scan_locks(
    transaction: &mut Transaction<'_>,
    exec: ExecType,
) -> Result<(), Error> {
    let connections = transaction.scan_locks_to_confirm(exec);
    if connections.is_empty() {
        return Ok(());
    }
    let request_id = transaction.request_id();
    let timeout = transaction.cluster().request_timeout;
    let (sent, mut first_error) =
        transaction.send_lock_checks(&connections, Connection::register_task_request);
    let mut guard = LockChecks {
        transaction: Some(transaction),
        waiting: sent,
        request_id,
    };
    // Every check sent is awaited, so that no answer stays registered.
    while let Some(connection) = guard.waiting.first().cloned() {
        let answers = Reply::new(Arc::clone(&connection), request_id)
            .within(timeout)
            .await;
        guard.waiting.remove(0);
        if let Err(e) = Transaction::lock_check_answer(&connection, answers) {
            first_error.get_or_insert(e);
        }
    }
    let transaction = guard.transaction.take().expect("taken only here");
    match first_error {
        Some(e) => Err(transaction.lock_check_failed(e)),
        None => Ok(()),
    }
}

/// Returns `Pending` once (waking its task at once), so that every task the runtime has ready
/// runs before this one goes on.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// Forgets the transaction's execute and rolls it back when the future awaiting it is dropped
/// before its answers came.
struct RollBackOnDrop<'t, 'c> {
    /// Taken once the answers came.
    transaction: Option<&'t mut Transaction<'c>>,
    /// The execute's operations, counted as sent when it is dropped (taken with the answers).
    sent: Option<Sent>,
    /// The link the execute went on.
    connection: Arc<Connection>,
    /// The link's owed flush is this execute's to do: other tasks' executes wait for it.
    owes_flush: bool,
}

impl Drop for RollBackOnDrop<'_, '_> {
    fn drop(&mut self) {
        if self.owes_flush {
            // A failure is recorded on the connection, where every waiter sees it.
            let _ = self.connection.flush_owed();
        }
        if let Some(transaction) = self.transaction.take() {
            self.connection.forget(transaction.request_id());
            if let Some(sent) = &self.sent {
                transaction.count_unanswered(sent);
            }
            transaction.roll_back_now();
        }
    }
}

/// The lock checks of a commit being awaited: dropped before they all came, the checks still
/// registered are forgotten and the transaction rolls back.
struct LockChecks<'t, 'c> {
    /// Taken once every check came.
    transaction: Option<&'t mut Transaction<'c>>,
    /// The links whose check is still registered, the one being awaited first.
    waiting: Vec<Arc<Connection>>,
    request_id: u32,
}

impl Drop for LockChecks<'_, '_> {
    fn drop(&mut self) {
        if let Some(transaction) = self.transaction.take() {
            for connection in &self.waiting {
                connection.forget(self.request_id);
            }
            transaction.roll_back_now();
        }
    }
}

/// The future of one request's answers, registered with [`Connection::register_task_request`]:
/// ready when they are complete or the link fails. Dropped before that, it forgets the request.
struct Reply {
    connection: Arc<Connection>,
    request_id: u32,
    done: bool,
}

impl Reply {
    fn new(connection: Arc<Connection>, request_id: u32) -> Reply {
        Reply {
            connection,
            request_id,
            done: false,
        }
    }

    /// The answers, or 4012 after `timeout` (the request is then forgotten).
    async fn within(self, timeout: Duration) -> Result<Answers, Error> {
        let peer = self.connection.peer;
        match tokio::time::timeout(timeout, self).await {
            Ok(answers) => answers,
            Err(_) => Err(Error::ndb_detail(
                4012,
                format!("no answer from node {peer}"),
            )),
        }
    }
}

impl Future for Reply {
    type Output = Result<Answers, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = self.connection.poll_reply(self.request_id, cx);
        if polled.is_ready() {
            self.done = true;
        }
        polled
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.done {
            self.connection.forget(self.request_id);
        }
    }
}

/// An open scan read as a [`futures_core::Stream`] of rows (every column, in table order), or
/// the error that ended it; batches are fetched as the rows buffered run out, as with
/// [`Scan`]. Dropping it closes the scan on the data nodes without waiting.
#[derive(Debug)]
pub struct TokioScan<'c> {
    scan: Scan<'c>,
    /// Batches asked for and not yet come: (part, request id).
    waits: Vec<(usize, u32)>,
    /// When the batches asked for must have come (4012 after).
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The first error among the batches being waited for.
    error: Option<Error>,
    /// Ended (the last row or an error was handed out).
    ended: bool,
    /// A row with BLOB or TEXT values past their heads, being completed (`blob::fill_long`).
    filling: Option<Filling<'c>>,
}

/// The completion of a scanned row with values past their heads, by a transaction of its
/// own: the row, or `None` when it is passed over (see `blob::fill_long`).
struct Filling<'c>(Pin<Box<dyn Future<Output = Filled> + Send + 'c>>);

/// What [`Filling`] ends with.
type Filled = Result<Option<Vec<Value>>, Error>;

impl std::fmt::Debug for Filling<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Filling")
    }
}

impl<'c> TokioScan<'c> {
    fn new(scan: Scan<'c>, waits: Vec<(usize, u32)>) -> TokioScan<'c> {
        TokioScan {
            scan,
            waits,
            deadline: None,
            error: None,
            ended: false,
            filling: None,
        }
    }

    /// The table the rows come from.
    pub fn table(&self) -> &Table {
        self.scan.table()
    }

    /// The next row, `None` at the end (the same as the stream's `next`).
    pub async fn next_row(&mut self) -> Option<Result<Vec<Value>, Error>> {
        std::future::poll_fn(|cx| self.poll_row(cx)).await
    }

    /// Ready once every batch asked for came (or its wait failed), with the first error.
    fn poll_waits(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let mut index = 0;
        while index < self.waits.len() {
            let (part, request_id) = self.waits[index];
            let connection = self.scan.part_connection(part);
            match connection.poll_reply(request_id, cx) {
                Poll::Pending => index += 1,
                Poll::Ready(answers) => {
                    self.waits.swap_remove(index);
                    if let Err(e) = self.scan.take_answers(part, answers) {
                        self.error.get_or_insert(e);
                    }
                }
            }
        }
        if !self.waits.is_empty() {
            let timeout = self.scan.cluster().request_timeout;
            let deadline = self
                .deadline
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
            if deadline.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            for (part, request_id) in std::mem::take(&mut self.waits) {
                let connection = self.scan.part_connection(part);
                connection.forget(request_id);
                let error =
                    Error::ndb_detail(4012, format!("no answer from node {}", connection.peer));
                let _ = self.scan.take_answers(part, Err(error));
            }
            self.error
                .get_or_insert_with(|| Error::ndb_detail(4012, "no scan batch in time"));
        }
        self.deadline = None;
        match self.error.take() {
            Some(e) => Poll::Ready(Err(e)),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_row(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Vec<Value>, Error>>> {
        if let Some(row) = self.scan.next_completed() {
            return Poll::Ready(row.map(Ok));
        }
        loop {
            if let Some(filling) = &mut self.filling {
                let filled = std::task::ready!(filling.0.as_mut().poll(cx));
                self.filling = None;
                match filled {
                    Ok(Some(row)) => return Poll::Ready(Some(Ok(row))),
                    // Deleted or changed since the scan met it: passed over.
                    Ok(None) => {}
                    Err(e) => return Poll::Ready(Some(Err(self.end(e)))),
                }
            }
            let row = match std::task::ready!(self.poll_raw(cx)) {
                Some(Ok(row)) if !self.scan.table().blobs().is_empty() => row,
                other => return Poll::Ready(other),
            };
            match crate::blob::whole_or_long(self.scan.table(), row) {
                Ok(Ok(whole)) => return Poll::Ready(Some(Ok(whole))),
                Ok(Err(long)) => {
                    let own = self.scan.own_rows();
                    let taken = own.and_then(|(own, unnamed)| {
                        own.take(self.scan.table(), &long, unnamed, self.scan.completion().0)
                    });
                    match taken {
                        Some(Ok(whole)) => return Poll::Ready(Some(Ok(whole))),
                        Some(Err(e)) => return Poll::Ready(Some(Err(self.end(e)))),
                        None => self.filling = Some(self.fill(long)),
                    }
                }
                Err(e) => return Poll::Ready(Some(Err(self.end(e)))),
            }
        }
    }

    /// The next row as the data nodes sent it (BLOB and TEXT values as heads), fetching
    /// batches as needed.
    fn poll_raw(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Vec<Value>, Error>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        loop {
            if !self.waits.is_empty() {
                match self.poll_waits(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(self.end(e)))),
                }
            }
            let requests = self.scan.wanted();
            if requests.is_empty() {
                return match self.scan.row_or_end() {
                    Ok(row) => {
                        self.ended = row.is_none();
                        Poll::Ready(row.map(Ok))
                    }
                    Err(e) => Poll::Ready(Some(Err(self.end(e)))),
                };
            }
            if let Err(e) = self.scan.check_parts() {
                return Poll::Ready(Some(Err(self.end(e))));
            }
            let (waits, error) = self
                .scan
                .send_fetch(&requests, Connection::register_task_request);
            self.waits = waits;
            if let Some(e) = error {
                // The batches sent are still waited for, so none stays registered.
                self.error = Some(e);
            }
        }
    }

    /// Every row still to come as the data nodes sent them, as `Scan::drain_own`.
    async fn drain_own(&mut self) -> Result<Vec<Vec<Value>>, Error> {
        let mut rows = Vec::new();
        let mut bytes = 0;
        while let Some(row) = std::future::poll_fn(|cx| self.poll_raw(cx)).await {
            let row = row?;
            if let Err(e) = self.scan.hold_own(&mut bytes, &row) {
                return Err(self.end(e));
            }
            rows.push(row);
        }
        Ok(rows)
    }

    /// The completion of `row`, whose values have parts, as the blocking scan's
    /// (`blob::fill_scanned`) but awaited.
    fn fill(&self, row: Vec<Value>) -> Filling<'c> {
        let cluster = self.scan.cluster();
        let table = self.scan.table().clone();
        let (locked, check) = self.scan.completion();
        Filling(Box::pin(async move {
            let check = check.as_deref();
            crate::blob::fill_long(&Awaited, cluster, &table, row, locked, check).await
        }))
    }

    /// The scan cannot go on after an error: its records are closed.
    fn end(&mut self, e: Error) -> Error {
        self.ended = true;
        self.scan.abandon();
        e
    }
}

impl futures_core::Stream for TokioScan<'_> {
    type Item = Result<Vec<Value>, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_row(cx)
    }
}

impl Drop for TokioScan<'_> {
    /// Batches still awaited are forgotten; the scan then closes on the data nodes.
    fn drop(&mut self) {
        for &(part, request_id) in &self.waits {
            self.scan.part_connection(part).forget(request_id);
        }
    }
}

/// The longest an awaited event operation waits between looks at its streams when no epoch
/// completes (a resubscription's delay, as the blocking poll's). The operation's pump thread
/// (one for the table, one for each parts table of a merged one) reads the links no one else
/// reads, and files each completed epoch, which wakes the task.
const EVENT_LOOK_MAX: Duration = Duration::from_millis(50);

impl<'c> TokioCluster<'c> {
    /// As [`Cluster::create_event_operation`], awaited: subscribed on every data node linked,
    /// once each has confirmed and reported the epoch it subscribed in.
    pub async fn create_event_operation(
        &self,
        table: &Table,
    ) -> Result<TokioEventOperation<'c>, Error> {
        let op = self.cluster.start_event_operation(table)?;
        self.begin_event_operation(op).await
    }

    /// As [`Cluster::create_event_operation_merged`], awaited.
    pub async fn create_event_operation_merged(
        &self,
        table: &Table,
    ) -> Result<TokioEventOperation<'c>, Error> {
        let op = self.cluster.start_event_operation_merged(table)?;
        self.begin_event_operation(op).await
    }

    /// As [`Cluster::create_event_operation_for`], awaited: the named event read, then its
    /// operation made.
    pub async fn create_event_operation_for(
        &self,
        name: &str,
    ) -> Result<TokioEventOperation<'c>, Error> {
        let def = self.get_event(name).await?;
        let table = self.get_table(&def.table).await?;
        let op = self.cluster.start_event_operation_of(&def, &table)?;
        self.begin_event_operation(op).await
    }

    /// As [`Cluster::get_event`], awaited.
    pub async fn get_event(&self, name: &str) -> Result<crate::EventDef, Error> {
        use crate::event_def::{event_of, key_of, not_found};
        let key = key_of(name)?;
        let events = match self.get_table(crate::NDB_EVENTS_0).await {
            Err(e) if e.code() == Some(709) => return Err(not_found(name)),
            found => found?,
        };
        let mut tx = self.start_transaction();
        let op = tx.read(&events, &key, rndb_protocol::LockMode::CommittedRead)?;
        match tx.execute(ExecType::Commit).await {
            Ok(()) => event_of(tx.row(op)),
            Err(e) if e.code() == Some(626) => Err(not_found(name)),
            Err(e) => Err(e),
        }
    }

    async fn begin_event_operation(
        &self,
        mut op: EventOperation<'c>,
    ) -> Result<TokioEventOperation<'c>, Error> {
        let deadline = self.cluster.deadline();
        while !op.begun(deadline)? {
            tokio::time::sleep(crate::event::BEGIN_POLL).await;
        }
        Ok(TokioEventOperation { op })
    }
}

/// An [`EventOperation`] whose wait for the next epoch is a future; it derefs to the
/// operation for the rest (`next_event`, `data_nodes`, `set_buffer_max`). Dropped, it
/// unsubscribes.
#[derive(Debug)]
pub struct TokioEventOperation<'c> {
    op: EventOperation<'c>,
}

impl<'c> Deref for TokioEventOperation<'c> {
    type Target = EventOperation<'c>;
    fn deref(&self) -> &EventOperation<'c> {
        &self.op
    }
}

impl<'c> DerefMut for TokioEventOperation<'c> {
    fn deref_mut(&mut self) -> &mut EventOperation<'c> {
        &mut self.op
    }
}

impl TokioEventOperation<'_> {
    /// As [`EventOperation::poll_events`], awaited: the newest epoch whose events
    /// `next_event` now hands out, or `None` after `timeout`. Looks when a stream's epoch
    /// completes (its report wakes the task), ends or its link fails, and at least every
    /// `EVENT_LOOK_MAX` (a resubscription's time), sleeping on the runtime's timer.
    pub async fn poll_events(&mut self, timeout: Duration) -> Result<Option<u64>, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if tokio::time::Instant::now() >= deadline {
                // At the deadline (at once for a zero timeout), one last look, without the
                // timer.
                return self.op.poll_events(Duration::ZERO);
            }
            let op = &mut self.op;
            let looked = std::future::poll_fn(|cx| match op.look_for(cx.waker()) {
                Ok(None) => Poll::Pending,
                done => Poll::Ready(done),
            });
            let backstop = deadline.min(tokio::time::Instant::now() + EVENT_LOOK_MAX);
            tokio::select! {
                done = looked => return done,
                () = tokio::time::sleep_until(backstop) => {}
            }
        }
    }
}
