//! An order-entry workload after TPC-C (not a certified TPC-C): its New-Order and Payment
//! transactions on the warehouse, district, customer, item, stock, orders, new_order,
//! order_line and history tables, scaled by warehouses, under each consistency setting rndb
//! offers ([`Setting`]), and the checks that the data left behind is consistent ([`check`]).
//!
//! What differs from TPC-C: only New-Order and Payment run (45:43, their share of the mix);
//! customers are picked uniformly, not by NURand or by last name; no order is loaded up front
//! (each district's next order id starts at 1); New-Order never rolls back on an unused item;
//! there is no keying or think time. Every transaction takes two executes: the reads (rows it
//! will change read with an exclusive lock), then the writes and the commit; under the
//! `interpreted` setting a Payment takes one, its sums changed in the data node.
//!
//! The checks are TPC-C's consistency conditions 1–4 plus this client's own ledger of what
//! committed: W_YTD = Σ D_YTD = the payments; D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID) = the
//! new orders; the order lines = Σ O_OL_CNT; the stock's S_YTD and S_ORDER_CNT = the order
//! lines'; the customers' C_YTD_PAYMENT and the history = the payments.

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rndb_api::{
    Cluster, ColumnDef, ColumnType, ErrorClass, ExecType, InterpretedCode, LockMode, ScanOptions,
    Table, TableDef, TokioCluster, TokioTransaction, Transaction, Value,
};

/// Districts per warehouse (TPC-C's 10).
pub const DISTRICTS_PER_WAREHOUSE: u32 = 10;
/// TPC-C's items and customers per district, the defaults of [`Scale`].
pub const ITEMS_DEFAULT: u32 = 100_000;
pub const CUSTOMERS_PER_DISTRICT_DEFAULT: u32 = 3000;
/// Order lines of one New-Order (TPC-C: uniform in 5..=15).
const ORDER_LINES_MIN: u32 = 5;
const ORDER_LINES_MAX: u32 = 15;
/// New-Orders per 88 transactions (TPC-C's 45 New-Order to 43 Payment).
const NEW_ORDER_SHARE: (u32, u32) = (45, 88);
/// Starting balances, in cents: W_YTD, D_YTD (TPC-C's 300 000.00 and 30 000.00), C_YTD_PAYMENT.
const WAREHOUSE_YTD_START: i64 = 30_000_000;
const DISTRICT_YTD_START: i64 = 3_000_000;
const CUSTOMER_YTD_START: i64 = 1_000;
/// Stock on hand at load time, and TPC-C's refill rule's threshold and amount.
const STOCK_QUANTITY_START: i32 = 50;
const STOCK_REFILL_BELOW: i32 = 10;
const STOCK_REFILL: i32 = 91;
/// Rows inserted per load transaction.
const LOAD_BATCH_ROWS: usize = 500;
/// Times a load batch is tried again after a temporary error.
const LOAD_RETRIES_MAX: u32 = 40;
/// Stack of a client thread: short transactions only, and 1024 of them must fit.
const THREAD_STACK_BYTES: usize = 256 * 1024;
/// The most transactions in flight at one level.
pub const IN_FLIGHT_MAX: u32 = 1024;

/// How large the database is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub warehouses: u32,
    pub items: u32,
    pub customers_per_district: u32,
}

/// A consistency setting: how the transactions read, where, and what a commit waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Setting {
    /// Rows only read (warehouse and customer of a New-Order, the items) are read committed:
    /// no lock, the last committed value, from the primary replica.
    Committed,
    /// Those reads take a shared lock (NDB's LM_Read), held to commit.
    Shared,
    /// Those reads take an exclusive lock (LM_Exclusive), held to commit.
    Exclusive,
    /// Committed reads of tables created with READ_BACKUP: any replica may serve them.
    ReadBackup,
    /// As `Committed`, and each commit returns only once its global checkpoint is saved on
    /// every data node (`Transaction::set_durable_commit`); the others return once every
    /// replica committed in memory.
    Durable,
    /// As `Committed`, and the counters are changed in the data node by interpreted updates
    /// (NDB's interpretedUpdateTuple) instead of read under a lock and written back: Payment
    /// takes one execute, New-Order's district takes its next order id in its first.
    Interpreted,
}

impl Setting {
    pub const EVERY: [Setting; 6] = [
        Setting::Committed,
        Setting::Shared,
        Setting::Exclusive,
        Setting::ReadBackup,
        Setting::Durable,
        Setting::Interpreted,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Setting::Committed => "committed",
            Setting::Shared => "shared",
            Setting::Exclusive => "exclusive",
            Setting::ReadBackup => "read_backup",
            Setting::Durable => "durable",
            Setting::Interpreted => "interpreted",
        }
    }

    /// The lock mode of rows read and not changed.
    fn read_lock(self) -> LockMode {
        match self {
            Setting::Committed | Setting::ReadBackup | Setting::Durable | Setting::Interpreted => {
                LockMode::CommittedRead
            }
            Setting::Shared => LockMode::Read,
            Setting::Exclusive => LockMode::Exclusive,
        }
    }

    /// Tables are created with the READ_BACKUP option.
    pub fn read_backup(self) -> bool {
        self == Setting::ReadBackup
    }
}

/// The workload's tables.
#[derive(Clone, Debug)]
pub struct Tables {
    pub warehouse: Table,
    pub district: Table,
    pub customer: Table,
    pub item: Table,
    pub stock: Table,
    pub orders: Table,
    pub new_order: Table,
    pub order_line: Table,
    pub history: Table,
}

fn u32c(name: &str) -> ColumnDef {
    ColumnDef::new(name, ColumnType::UInt32)
}

fn i64c(name: &str) -> ColumnDef {
    ColumnDef::new(name, ColumnType::Int64)
}

fn text(name: &str, bytes: u16) -> ColumnDef {
    ColumnDef::new(name, ColumnType::Varchar(bytes))
}

fn key(name: &str) -> ColumnDef {
    ColumnDef::key(name, ColumnType::UInt32)
}

/// The table definitions, in creation order. Column positions are those the transactions use.
pub fn table_defs(read_backup: bool) -> Vec<TableDef> {
    let defs = vec![
        // 0 w_id, 1 w_name, 2 w_address, 3 w_tax (basis points), 4 w_ytd (cents)
        TableDef::new(
            "tpcc_warehouse",
            vec![
                key("w_id"),
                text("w_name", 10),
                text("w_address", 60),
                u32c("w_tax"),
                i64c("w_ytd"),
            ],
        ),
        // 0 d_w_id, 1 d_id, 2 d_name, 3 d_tax, 4 d_ytd, 5 d_next_o_id
        TableDef::new(
            "tpcc_district",
            vec![
                key("d_w_id"),
                key("d_id"),
                text("d_name", 10),
                u32c("d_tax"),
                i64c("d_ytd"),
                u32c("d_next_o_id"),
            ],
        ),
        // 0 c_w_id, 1 c_d_id, 2 c_id, 3 c_last, 4 c_credit, 5 c_discount, 6 c_balance,
        // 7 c_ytd_payment, 8 c_payment_cnt, 9 c_data
        TableDef::new(
            "tpcc_customer",
            vec![
                key("c_w_id"),
                key("c_d_id"),
                key("c_id"),
                text("c_last", 16),
                text("c_credit", 2),
                u32c("c_discount"),
                i64c("c_balance"),
                i64c("c_ytd_payment"),
                u32c("c_payment_cnt"),
                text("c_data", 200),
            ],
        ),
        // 0 i_id, 1 i_name, 2 i_price (cents), 3 i_data
        TableDef::new(
            "tpcc_item",
            vec![
                key("i_id"),
                text("i_name", 24),
                i64c("i_price"),
                text("i_data", 50),
            ],
        ),
        // 0 s_w_id, 1 s_i_id, 2 s_quantity, 3 s_ytd, 4 s_order_cnt, 5 s_remote_cnt, 6 s_dist,
        // 7 s_data
        TableDef::new(
            "tpcc_stock",
            vec![
                key("s_w_id"),
                key("s_i_id"),
                ColumnDef::new("s_quantity", ColumnType::Int32),
                i64c("s_ytd"),
                u32c("s_order_cnt"),
                u32c("s_remote_cnt"),
                text("s_dist", 24),
                text("s_data", 50),
            ],
        ),
        // 0 o_w_id, 1 o_d_id, 2 o_id, 3 o_c_id, 4 o_entry_d, 5 o_ol_cnt, 6 o_all_local
        TableDef::new(
            "tpcc_orders",
            vec![
                key("o_w_id"),
                key("o_d_id"),
                key("o_id"),
                u32c("o_c_id"),
                ColumnDef::new("o_entry_d", ColumnType::UInt64),
                u32c("o_ol_cnt"),
                u32c("o_all_local"),
            ],
        ),
        TableDef::new(
            "tpcc_new_order",
            vec![key("no_w_id"), key("no_d_id"), key("no_o_id")],
        ),
        // 0 ol_w_id, 1 ol_d_id, 2 ol_o_id, 3 ol_number, 4 ol_i_id, 5 ol_supply_w_id,
        // 6 ol_quantity, 7 ol_amount, 8 ol_dist_info
        TableDef::new(
            "tpcc_order_line",
            vec![
                key("ol_w_id"),
                key("ol_d_id"),
                key("ol_o_id"),
                key("ol_number"),
                u32c("ol_i_id"),
                u32c("ol_supply_w_id"),
                u32c("ol_quantity"),
                i64c("ol_amount"),
                text("ol_dist_info", 24),
            ],
        ),
        // TPC-C's history has no key: h_id is this client's unique number for the row.
        // 0 h_w_id, 1 h_id, 2 h_d_id, 3 h_c_id, 4 h_amount, 5 h_data
        TableDef::new(
            "tpcc_history",
            vec![
                key("h_w_id"),
                ColumnDef::key("h_id", ColumnType::UInt64),
                u32c("h_d_id"),
                u32c("h_c_id"),
                i64c("h_amount"),
                text("h_data", 24),
            ],
        ),
    ];
    defs.into_iter()
        .map(|d| d.with_read_backup(read_backup))
        .collect()
}

/// Drops the workload's tables if they exist, creates them (READ_BACKUP when `read_backup`)
/// and loads `scale`'s warehouses, districts, customers, items and stock.
pub fn create_and_load(cluster: &Cluster, scale: Scale, read_backup: bool) -> Result<Tables> {
    let mut tables = Vec::new();
    for def in table_defs(read_backup) {
        match cluster.drop_table(&def.name) {
            Ok(()) => {}
            Err(e) if e.code() == Some(709) => {}
            Err(e) => return Err(e).with_context(|| format!("drop {}", def.name)),
        }
        let table = cluster
            .create_table(&def)
            .with_context(|| format!("create {}", def.name))?;
        tables.push(table);
    }
    let mut it = tables.into_iter();
    let mut next = || it.next().context("a table definition is missing");
    let tables = Tables {
        warehouse: next()?,
        district: next()?,
        customer: next()?,
        item: next()?,
        stock: next()?,
        orders: next()?,
        new_order: next()?,
        order_line: next()?,
        history: next()?,
    };
    let mut rng = StdRng::seed_from_u64(0x7C7C);
    let items = (1..=scale.items).map(|i| {
        vec![
            Value::UInt32(i),
            Value::Varchar(format!("item {i}")),
            Value::Int64(100 + i64::from(i % 9901)),
            Value::Varchar(filler(i, 26)),
        ]
    });
    load(cluster, &tables.item, items).context("load items")?;
    for w in 1..=scale.warehouses {
        let tax = rng.gen_range(0..=2000);
        let warehouse = [vec![
            Value::UInt32(w),
            Value::Varchar(format!("wh {w}")),
            Value::Varchar(filler(w, 40)),
            Value::UInt32(tax),
            Value::Int64(WAREHOUSE_YTD_START),
        ]];
        load(cluster, &tables.warehouse, warehouse.into_iter()).context("load warehouses")?;
        let districts: Vec<_> = (1..=DISTRICTS_PER_WAREHOUSE)
            .map(|d| {
                vec![
                    Value::UInt32(w),
                    Value::UInt32(d),
                    Value::Varchar(format!("d {d}")),
                    Value::UInt32(rng.gen_range(0..=2000)),
                    Value::Int64(DISTRICT_YTD_START),
                    Value::UInt32(1),
                ]
            })
            .collect();
        load(cluster, &tables.district, districts.into_iter()).context("load districts")?;
        let customers = (1..=DISTRICTS_PER_WAREHOUSE).flat_map(|d| {
            (1..=scale.customers_per_district).map(move |c| {
                vec![
                    Value::UInt32(w),
                    Value::UInt32(d),
                    Value::UInt32(c),
                    Value::Varchar(format!("LAST{}", c % 1000)),
                    Value::Varchar(if c % 10 == 0 { "BC" } else { "GC" }.into()),
                    Value::UInt32(c % 5000),
                    Value::Int64(-CUSTOMER_YTD_START),
                    Value::Int64(CUSTOMER_YTD_START),
                    Value::UInt32(1),
                    Value::Varchar(filler(c, 100)),
                ]
            })
        });
        load(cluster, &tables.customer, customers).context("load customers")?;
        let stock = (1..=scale.items).map(|i| {
            vec![
                Value::UInt32(w),
                Value::UInt32(i),
                Value::Int32(STOCK_QUANTITY_START),
                Value::Int64(0),
                Value::UInt32(0),
                Value::UInt32(0),
                Value::Varchar(filler(i ^ w, 24)),
                Value::Varchar(filler(i, 30)),
            ]
        });
        load(cluster, &tables.stock, stock).context("load stock")?;
    }
    Ok(tables)
}

/// `bytes` ASCII letters that vary with `seed`.
fn filler(seed: u32, bytes: usize) -> String {
    (0..bytes)
        .map(|i| char::from(b'a' + ((seed as usize + i * 7) % 26) as u8))
        .collect()
}

/// Inserts `rows` in committed batches, each tried again after a temporary error.
fn load(cluster: &Cluster, table: &Table, rows: impl Iterator<Item = Vec<Value>>) -> Result<()> {
    let mut rows = rows.peekable();
    while rows.peek().is_some() {
        let batch: Vec<Vec<Value>> = rows.by_ref().take(LOAD_BATCH_ROWS).collect();
        let mut retries = 0;
        loop {
            let mut tx = cluster.start_transaction()?;
            for row in &batch {
                tx.insert(table, row)?;
            }
            match tx.execute(ExecType::Commit) {
                Ok(()) => break,
                Err(e) if e.is_temporary() && retries < LOAD_RETRIES_MAX => {
                    retries += 1;
                    std::thread::sleep(Duration::from_millis(20) * retries);
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("insert into {}", table.def().name))
                }
            }
        }
    }
    Ok(())
}

/// What committed, by this client's count: what [`check`] expects the tables to hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Per (warehouse, district): New-Orders committed, their order lines, their quantities.
    pub new_orders: BTreeMap<(u32, u32), u64>,
    pub order_lines: BTreeMap<(u32, u32), u64>,
    /// Per supplying warehouse: units ordered (Σ ol_quantity) and order lines.
    pub quantity_by_supplier: BTreeMap<u32, u64>,
    pub lines_by_supplier: BTreeMap<u32, u64>,
    /// Per (warehouse, district): payments committed and their amount in cents.
    pub payments: BTreeMap<(u32, u32), u64>,
    pub paid_cents: BTreeMap<(u32, u32), i64>,
}

impl Ledger {
    fn merge(&mut self, other: &Ledger) {
        fn add<K: Ord + Copy, V: Copy + std::ops::AddAssign + Default>(
            into: &mut BTreeMap<K, V>,
            from: &BTreeMap<K, V>,
        ) {
            for (k, v) in from {
                *into.entry(*k).or_default() += *v;
            }
        }
        add(&mut self.new_orders, &other.new_orders);
        add(&mut self.order_lines, &other.order_lines);
        add(&mut self.quantity_by_supplier, &other.quantity_by_supplier);
        add(&mut self.lines_by_supplier, &other.lines_by_supplier);
        add(&mut self.payments, &other.payments);
        add(&mut self.paid_cents, &other.paid_cents);
    }
}

/// What one level (a number of transactions in flight under one setting) measured.
#[derive(Debug)]
pub struct Level {
    pub in_flight: u32,
    pub new_orders: u64,
    pub payments: u64,
    /// Attempts that failed with a temporary error (deadlock timeout 266, overload 1218, ...)
    /// and were rolled back; the client then starts a new transaction.
    pub temporary_errors: u64,
    pub elapsed: Duration,
    /// Latency of each committed transaction (its successful attempt), in ns.
    pub latency_ns: Histogram<u64>,
    pub new_order_ns: Histogram<u64>,
    pub payment_ns: Histogram<u64>,
}

/// The parameters every client of a level shares. It owns what it names (counted references),
/// so that the tasks of an asynchronous level, which must not borrow, can each hold it.
#[derive(Clone)]
pub struct Run {
    pub cluster: Arc<Cluster>,
    pub tables: Tables,
    pub scale: Scale,
    pub setting: Setting,
    pub duration: Duration,
    pub seed: u64,
    /// Polled between transactions: true stops the level early (Ctrl-C).
    pub stop: Arc<dyn Fn() -> bool + Send + Sync>,
    /// Unique keys for history rows.
    pub history_ids: Arc<AtomicU64>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("scale", &self.scale)
            .field("setting", &self.setting)
            .field("duration", &self.duration)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

/// How a level keeps its transactions in flight (testread-perf's `--in-flight`). Either way
/// each tpcc client runs the same transactions (`Run::client`); only who waits for an execute
/// differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InFlight {
    /// A client thread per transaction in flight; each execute blocks its thread.
    Threads,
    /// One thread: the sweep with the asynchronous executor, tpcc with a tokio task per
    /// transaction on one current-thread runtime (each execute awaited).
    Async,
}

impl InFlight {
    pub fn name(self) -> &'static str {
        match self {
            InFlight::Threads => "threads",
            InFlight::Async => "async",
        }
    }
}

/// How a transaction attempt ended.
enum Attempt {
    Committed,
    /// Rolled back by a temporary error: try a new transaction.
    Temporary,
}

/// A New-Order's input.
struct NewOrder {
    w: u32,
    d: u32,
    c: u32,
    /// (item, supplying warehouse, quantity), sorted by (supplier, item) so that New-Orders lock
    /// stock rows in one order.
    lines: Vec<(u32, u32, u32)>,
}

/// What one client did: its figures and what it committed.
type ClientResult = Result<(Level, Ledger)>;

/// Where a client runs its transactions.
#[derive(Clone, Copy)]
enum On<'c> {
    /// On a thread of its own, which each execute blocks.
    Thread(&'c Cluster),
    /// As a task of a tokio runtime, which awaits each execute.
    Task(TokioCluster<'c>),
}

impl<'c> On<'c> {
    fn start(self, setting: Setting) -> Result<Tx<'c>> {
        let mut tx = match self {
            On::Thread(cluster) => Tx::Blocking(cluster.start_transaction()?),
            On::Task(cluster) => Tx::Awaited(cluster.start_transaction()),
        };
        tx.set_durable_commit(setting == Setting::Durable);
        Ok(tx)
    }
}

/// A transaction of either kind. Operations are defined and rows read on the [`Transaction`]
/// it derefs to, the same for both; only [`Tx::execute`] differs.
enum Tx<'c> {
    Blocking(Transaction<'c>),
    Awaited(TokioTransaction<'c>),
}

impl<'c> Tx<'c> {
    /// Every operation defined since the last execute, in one round trip: the blocking one
    /// returns only once its answers came (its future is ready at its first poll), the
    /// awaited one lets the runtime run other tasks meanwhile.
    async fn execute(&mut self, exec: ExecType) -> Result<(), rndb_api::Error> {
        match self {
            Tx::Blocking(tx) => tx.execute(exec),
            Tx::Awaited(tx) => tx.execute(exec).await,
        }
    }
}

impl<'c> Deref for Tx<'c> {
    type Target = Transaction<'c>;
    fn deref(&self) -> &Transaction<'c> {
        match self {
            Tx::Blocking(tx) => tx,
            Tx::Awaited(tx) => tx,
        }
    }
}

impl<'c> DerefMut for Tx<'c> {
    fn deref_mut(&mut self) -> &mut Transaction<'c> {
        match self {
            Tx::Blocking(tx) => tx,
            Tx::Awaited(tx) => tx,
        }
    }
}

/// Runs a client thread's future to its end. It never waits (its executes block the thread
/// instead), so one poll ends it, and no runtime is needed.
fn run_on_thread<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(result) => result,
        Poll::Pending => bail!("a client thread's transaction waited for a runtime"),
    }
}

impl Run {
    /// Runs `in_flight` clients for the run's duration, started together, as threads or as
    /// tasks (`mode`); adds what committed to `ledger`.
    pub fn level(&self, in_flight: u32, mode: InFlight, ledger: &mut Ledger) -> Result<Level> {
        if in_flight == 0 || in_flight > IN_FLIGHT_MAX {
            bail!("{in_flight} in flight is outside 1..={IN_FLIGHT_MAX}");
        }
        let clients = match mode {
            InFlight::Threads => self.threads(in_flight),
            InFlight::Async => self.tasks(in_flight)?,
        };
        let mut level = empty_level(in_flight)?;
        for client in clients {
            let (mine, own) = client?;
            level.new_orders += mine.new_orders;
            level.payments += mine.payments;
            level.temporary_errors += mine.temporary_errors;
            level.elapsed = level.elapsed.max(mine.elapsed);
            level.latency_ns.add(&mine.latency_ns)?;
            level.new_order_ns.add(&mine.new_order_ns)?;
            level.payment_ns.add(&mine.payment_ns)?;
            ledger.merge(&own);
        }
        Ok(level)
    }

    /// `in_flight` client threads.
    fn threads(&self, in_flight: u32) -> Vec<ClientResult> {
        // Held while the threads start: each waits for it to go before its first transaction,
        // so all begin together; if one cannot be started, `abort` sends the others home.
        let gate = RwLock::new(());
        let abort = AtomicBool::new(false);
        let held = gate.write().unwrap_or_else(|p| p.into_inner());
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            let mut failed = None;
            for index in 0..in_flight {
                let (gate, abort) = (&gate, &abort);
                let spawned = std::thread::Builder::new()
                    .name(format!("tpcc-{index}"))
                    .stack_size(THREAD_STACK_BYTES)
                    .spawn_scoped(scope, move || {
                        drop(gate.read().unwrap_or_else(|p| p.into_inner()));
                        if abort.load(Ordering::Acquire) {
                            return Ok((empty_level(in_flight)?, Ledger::default()));
                        }
                        let on = On::Thread(&self.cluster);
                        run_on_thread(self.client(on, index, in_flight))
                    });
                match spawned {
                    Ok(handle) => handles.push(handle),
                    Err(e) => {
                        abort.store(true, Ordering::Release);
                        failed = Some(anyhow::anyhow!("start client thread {index}: {e}"));
                        break;
                    }
                }
            }
            drop(held);
            let mut results: Vec<ClientResult> = handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| bail!("a client thread panicked"))
                })
                .collect();
            results.extend(failed.map(Err));
            results
        })
    }

    /// `in_flight` client tasks, `tokio::spawn`ed on one current-thread runtime made for the
    /// level (a task of a `LocalSet` would cost a system call for each wake-up: see
    /// `rndb_api::tokio_api`). The runtime is dropped with the level, and the links' receive
    /// tasks with it; the blocking API reads the links again after.
    fn tasks(&self, in_flight: u32) -> Result<Vec<ClientResult>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("build the tokio runtime")?;
        let run = Arc::new(self.clone());
        Ok(runtime.block_on(async {
            // None runs before this future awaits the first, so all begin together.
            let tasks: Vec<_> = (0..in_flight)
                .map(|index| {
                    let run = Arc::clone(&run);
                    tokio::spawn(async move {
                        let on = On::Task(run.cluster.tokio());
                        run.client(on, index, in_flight).await
                    })
                })
                .collect();
            let mut results = Vec::with_capacity(tasks.len());
            for task in tasks {
                let result = task.await;
                results.push(result.unwrap_or_else(|e| bail!("client task: {e}")));
            }
            results
        }))
    }

    /// One client: transactions back to back until the deadline. Its home warehouse is fixed
    /// (TPC-C's terminal), its district picked per transaction.
    async fn client(&self, on: On<'_>, index: u32, in_flight: u32) -> ClientResult {
        let seed =
            self.seed ^ (u64::from(in_flight) << 32) ^ u64::from(index).wrapping_mul(0x9E37_79B9);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut mine = empty_level(in_flight)?;
        let mut own = Ledger::default();
        let home = 1 + index % self.scale.warehouses;
        let begun = Instant::now();
        let deadline = begun + self.duration;
        while Instant::now() < deadline && !(self.stop)() {
            let t0 = Instant::now();
            let new_order = rng.gen_range(0..NEW_ORDER_SHARE.1) < NEW_ORDER_SHARE.0;
            let attempt = if new_order {
                let input = self.new_order_input(home, &mut rng);
                self.new_order(on, &input, &mut own).await
            } else {
                self.payment(on, home, &mut rng, &mut own).await
            };
            match attempt.with_context(|| format!("client {index}"))? {
                Attempt::Committed => {
                    let ns = t0.elapsed().as_nanos() as u64;
                    mine.latency_ns.saturating_record(ns);
                    if new_order {
                        mine.new_orders += 1;
                        mine.new_order_ns.saturating_record(ns);
                    } else {
                        mine.payments += 1;
                        mine.payment_ns.saturating_record(ns);
                    }
                }
                Attempt::Temporary => mine.temporary_errors += 1,
            }
        }
        mine.elapsed = begun.elapsed();
        Ok((mine, own))
    }

    fn new_order_input(&self, home: u32, rng: &mut StdRng) -> NewOrder {
        let count = rng.gen_range(ORDER_LINES_MIN..=ORDER_LINES_MAX);
        let mut lines: Vec<(u32, u32, u32)> = Vec::with_capacity(count as usize);
        while lines.len() < count as usize {
            let item = rng.gen_range(1..=self.scale.items);
            // TPC-C: 1 % of lines are supplied by another warehouse.
            let supplier = if self.scale.warehouses > 1 && rng.gen_range(0..100) == 0 {
                let other = rng.gen_range(1..self.scale.warehouses);
                if other >= home {
                    other + 1
                } else {
                    other
                }
            } else {
                home
            };
            // One line per item and supplier: two would lock the same stock row twice.
            if !lines.iter().any(|l| (l.0, l.1) == (item, supplier)) {
                lines.push((item, supplier, rng.gen_range(1..=10)));
            }
        }
        lines.sort_by_key(|l| (l.1, l.0));
        NewOrder {
            w: home,
            d: rng.gen_range(1..=DISTRICTS_PER_WAREHOUSE),
            c: rng.gen_range(1..=self.scale.customers_per_district),
            lines,
        }
    }

    /// TPC-C New-Order: read the warehouse's tax, the district's tax and next order id
    /// (exclusive), the customer's discount, each item's price and each stock row
    /// (exclusive); then take the order id, insert the order, its new_order row and its lines,
    /// and update the stock.
    async fn new_order(
        &self,
        on: On<'_>,
        input: &NewOrder,
        ledger: &mut Ledger,
    ) -> Result<Attempt> {
        let t = &self.tables;
        let read = self.setting.read_lock();
        let (w, d) = (Value::UInt32(input.w), Value::UInt32(input.d));
        let mut tx = on.start(self.setting)?;
        let interpreted = self.setting == Setting::Interpreted;
        // The district first: the transaction is coordinated where its row is. Interpreted,
        // its next order id is taken in the data node, and the read after sees it taken.
        if interpreted {
            let next_order = add_to(&t.district, &[(5, 1)])?;
            tx.interpreted_update(&t.district, &[w.clone(), d.clone()], &[], &next_order)?;
        }
        let district = tx.read(&t.district, &[w.clone(), d.clone()], LockMode::Exclusive)?;
        let warehouse = tx.read(&t.warehouse, std::slice::from_ref(&w), read)?;
        let customer = tx.read(
            &t.customer,
            &[w.clone(), d.clone(), Value::UInt32(input.c)],
            read,
        )?;
        let mut items = Vec::with_capacity(input.lines.len());
        for &(item, supplier, _) in &input.lines {
            let i = tx.read(&t.item, &[Value::UInt32(item)], read)?;
            let s = tx.read(
                &t.stock,
                &[Value::UInt32(supplier), Value::UInt32(item)],
                LockMode::Exclusive,
            )?;
            items.push((i, s));
        }
        if let Some(temporary) = temporary(tx.execute(ExecType::NoCommit).await)? {
            return Ok(temporary);
        }
        let next_o_id = u32_at(tx.row(district), 5, "d_next_o_id")?;
        let w_tax = u32_at(tx.row(warehouse), 3, "w_tax")?;
        let d_tax = u32_at(tx.row(district), 3, "d_tax")?;
        let discount = u32_at(tx.row(customer), 5, "c_discount")?;
        let o_id = if interpreted {
            next_o_id - 1
        } else {
            tx.update(
                &t.district,
                &[w.clone(), d.clone()],
                &[(5, Value::UInt32(next_o_id + 1))],
            )?;
            next_o_id
        };
        let all_local = input.lines.iter().all(|l| l.1 == input.w);
        tx.insert(
            &t.orders,
            &[
                w.clone(),
                d.clone(),
                Value::UInt32(o_id),
                Value::UInt32(input.c),
                Value::UInt64(o_id.into()),
                Value::UInt32(input.lines.len() as u32),
                Value::UInt32(all_local.into()),
            ],
        )?;
        tx.insert(&t.new_order, &[w.clone(), d.clone(), Value::UInt32(o_id)])?;
        let mut total: i64 = 0;
        for (number, (&(item, supplier, quantity), &(i, s))) in
            input.lines.iter().zip(&items).enumerate()
        {
            let price = i64_at(tx.row(i), 2, "i_price")?;
            let stock = tx.row(s).context("the stock row was not found")?;
            let on_hand = match stock.get(2) {
                Some(Value::Int32(q)) => *q,
                other => bail!("s_quantity reads as {other:?}"),
            };
            let ytd = i64_at(Some(stock), 3, "s_ytd")?;
            let orders = u32_at(Some(stock), 4, "s_order_cnt")?;
            let remote = u32_at(Some(stock), 5, "s_remote_cnt")?;
            let quantity_i32 = quantity as i32;
            let left = if on_hand - quantity_i32 >= STOCK_REFILL_BELOW {
                on_hand - quantity_i32
            } else {
                on_hand - quantity_i32 + STOCK_REFILL
            };
            tx.update(
                &t.stock,
                &[Value::UInt32(supplier), Value::UInt32(item)],
                &[
                    (2, Value::Int32(left)),
                    (3, Value::Int64(ytd + i64::from(quantity))),
                    (4, Value::UInt32(orders + 1)),
                    (5, Value::UInt32(remote + u32::from(supplier != input.w))),
                ],
            )?;
            let amount = price * i64::from(quantity);
            total += amount;
            tx.insert(
                &t.order_line,
                &[
                    w.clone(),
                    d.clone(),
                    Value::UInt32(o_id),
                    Value::UInt32(number as u32 + 1),
                    Value::UInt32(item),
                    Value::UInt32(supplier),
                    Value::UInt32(quantity),
                    Value::Int64(amount),
                    Value::Varchar(filler(item, 24)),
                ],
            )?;
        }
        // The order's total, as TPC-C computes it (shown to the terminal, not stored).
        let _total = total * (10_000 - i64::from(discount)) / 10_000
            * (10_000 + i64::from(w_tax) + i64::from(d_tax))
            / 10_000;
        if let Some(temporary) = temporary(tx.execute(ExecType::Commit).await)? {
            return Ok(temporary);
        }
        let key = (input.w, input.d);
        *ledger.new_orders.entry(key).or_default() += 1;
        *ledger.order_lines.entry(key).or_default() += input.lines.len() as u64;
        for &(_, supplier, quantity) in &input.lines {
            *ledger.quantity_by_supplier.entry(supplier).or_default() += u64::from(quantity);
            *ledger.lines_by_supplier.entry(supplier).or_default() += 1;
        }
        Ok(Attempt::Committed)
    }

    /// Payment's history row of `amount` paid by customer (w, d, c).
    fn insert_history(
        &self,
        tx: &mut Transaction<'_>,
        (w, d, c): (Value, Value, Value),
        amount: i64,
        customer: u32,
    ) -> Result<()> {
        let h_id = self.history_ids.fetch_add(1, Ordering::Relaxed);
        let row = [
            w,
            Value::UInt64(h_id),
            d,
            c,
            Value::Int64(amount),
            Value::Varchar(filler(customer, 24)),
        ];
        tx.insert(&self.tables.history, &row)?;
        Ok(())
    }

    /// TPC-C Payment (by customer number, the home warehouse's customer): read the warehouse,
    /// district and customer (exclusive), add the amount to W_YTD, D_YTD and the customer's
    /// payments, and insert a history row.
    async fn payment(
        &self,
        on: On<'_>,
        home: u32,
        rng: &mut StdRng,
        ledger: &mut Ledger,
    ) -> Result<Attempt> {
        let t = &self.tables;
        let d = rng.gen_range(1..=DISTRICTS_PER_WAREHOUSE);
        let c = rng.gen_range(1..=self.scale.customers_per_district);
        let amount: i64 = rng.gen_range(100..=500_000);
        let (wv, dv, cv) = (Value::UInt32(home), Value::UInt32(d), Value::UInt32(c));
        let mut tx = on.start(self.setting)?;
        if self.setting == Setting::Interpreted {
            // The sums change in the data node, and the rows are read after (TPC-C shows
            // them): one execute.
            let (w_key, d_key) = (std::slice::from_ref(&wv), [wv.clone(), dv.clone()]);
            let c_key = [wv.clone(), dv.clone(), cv.clone()];
            tx.interpreted_update(
                &t.warehouse,
                w_key,
                &[],
                &add_to(&t.warehouse, &[(4, amount)])?,
            )?;
            tx.interpreted_update(
                &t.district,
                &d_key,
                &[],
                &add_to(&t.district, &[(4, amount)])?,
            )?;
            let paid = add_to(&t.customer, &[(6, -amount), (7, amount), (8, 1)])?;
            tx.interpreted_update(&t.customer, &c_key, &[], &paid)?;
            for (table, key) in [
                (&t.warehouse, w_key),
                (&t.district, &d_key[..]),
                (&t.customer, &c_key[..]),
            ] {
                tx.read(table, key, LockMode::Read)?;
            }
            self.insert_history(&mut tx, (wv, dv, cv), amount, c)?;
            if let Some(temporary) = temporary(tx.execute(ExecType::Commit).await)? {
                return Ok(temporary);
            }
            *ledger.payments.entry((home, d)).or_default() += 1;
            *ledger.paid_cents.entry((home, d)).or_default() += amount;
            return Ok(Attempt::Committed);
        }
        let warehouse = tx.read(&t.warehouse, std::slice::from_ref(&wv), LockMode::Exclusive)?;
        let district = tx.read(&t.district, &[wv.clone(), dv.clone()], LockMode::Exclusive)?;
        let customer = tx.read(
            &t.customer,
            &[wv.clone(), dv.clone(), cv.clone()],
            LockMode::Exclusive,
        )?;
        if let Some(temporary) = temporary(tx.execute(ExecType::NoCommit).await)? {
            return Ok(temporary);
        }
        let w_ytd = i64_at(tx.row(warehouse), 4, "w_ytd")?;
        let d_ytd = i64_at(tx.row(district), 4, "d_ytd")?;
        let balance = i64_at(tx.row(customer), 6, "c_balance")?;
        let c_ytd = i64_at(tx.row(customer), 7, "c_ytd_payment")?;
        let count = u32_at(tx.row(customer), 8, "c_payment_cnt")?;
        tx.update(
            &t.warehouse,
            std::slice::from_ref(&wv),
            &[(4, Value::Int64(w_ytd + amount))],
        )?;
        tx.update(
            &t.district,
            &[wv.clone(), dv.clone()],
            &[(4, Value::Int64(d_ytd + amount))],
        )?;
        tx.update(
            &t.customer,
            &[wv.clone(), dv.clone(), cv.clone()],
            &[
                (6, Value::Int64(balance - amount)),
                (7, Value::Int64(c_ytd + amount)),
                (8, Value::UInt32(count + 1)),
            ],
        )?;
        self.insert_history(&mut tx, (wv, dv, cv), amount, c)?;
        if let Some(temporary) = temporary(tx.execute(ExecType::Commit).await)? {
            return Ok(temporary);
        }
        *ledger.payments.entry((home, d)).or_default() += 1;
        *ledger.paid_cents.entry((home, d)).or_default() += amount;
        Ok(Attempt::Committed)
    }
}

/// A program adding each (column, delta) to a row of `table`.
fn add_to(table: &Table, changes: &[(usize, i64)]) -> Result<InterpretedCode> {
    let mut code = InterpretedCode::new(table);
    for &(column, delta) in changes {
        code.add_value(column, delta)?;
    }
    Ok(code)
}

/// An execute's result: `Some(Temporary)` when it failed with a temporary error (the
/// transaction rolled back), an error when it failed otherwise. An unknown outcome (a commit
/// whose answer was lost) fails the run: the ledger could no longer be checked.
fn temporary(result: Result<(), rndb_api::Error>) -> Result<Option<Attempt>> {
    match result {
        Ok(()) => Ok(None),
        Err(rndb_api::Error::Ndb(e)) if e.class == ErrorClass::UnknownResult => {
            Err(rndb_api::Error::Ndb(e)).context("a commit's outcome is unknown")
        }
        Err(e) if e.is_temporary() && !matches!(e, rndb_api::Error::Transport { .. }) => {
            Ok(Some(Attempt::Temporary))
        }
        Err(e) => Err(e.into()),
    }
}

fn u32_at(row: Option<&[Value]>, column: usize, name: &str) -> Result<u32> {
    match row.and_then(|r| r.get(column)) {
        Some(Value::UInt32(v)) => Ok(*v),
        other => bail!("{name} reads as {other:?}"),
    }
}

fn i64_at(row: Option<&[Value]>, column: usize, name: &str) -> Result<i64> {
    match row.and_then(|r| r.get(column)) {
        Some(Value::Int64(v)) => Ok(*v),
        other => bail!("{name} reads as {other:?}"),
    }
}

fn empty_level(in_flight: u32) -> Result<Level> {
    let histogram = || Histogram::new_with_bounds(1, 60_000_000_000, 3);
    Ok(Level {
        in_flight,
        new_orders: 0,
        payments: 0,
        temporary_errors: 0,
        elapsed: Duration::ZERO,
        latency_ns: histogram()?,
        new_order_ns: histogram()?,
        payment_ns: histogram()?,
    })
}

/// What [`check`] verified.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Checked {
    pub orders: u64,
    pub order_lines: u64,
    pub payments: u64,
}

/// Every row of `table`, read committed by a full scan.
fn scan_all(cluster: &Cluster, table: &Table) -> Result<Vec<Vec<Value>>> {
    let mut tx = cluster.start_transaction()?;
    let rows = tx
        .scan_table(table, &ScanOptions::default())?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("scan {}", table.def().name))?;
    Ok(rows)
}

fn col_u32(row: &[Value], column: usize) -> Result<u32> {
    u32_at(Some(row), column, "a u32 column")
}

fn col_i64(row: &[Value], column: usize) -> Result<i64> {
    i64_at(Some(row), column, "an i64 column")
}

/// Fails, naming the first difference, unless the tables hold what `ledger` says committed and
/// TPC-C's consistency conditions 1–4 hold.
pub fn check(cluster: &Cluster, tables: &Tables, scale: Scale, ledger: &Ledger) -> Result<Checked> {
    let t = tables;
    // Districts: next order id and year-to-date against the ledger.
    let mut d_ytd_by_w: BTreeMap<u32, i64> = BTreeMap::new();
    let mut next_o_id: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    for row in scan_all(cluster, &t.district)? {
        let key = (col_u32(&row, 0)?, col_u32(&row, 1)?);
        let new_orders = ledger.new_orders.get(&key).copied().unwrap_or(0);
        let next = col_u32(&row, 5)?;
        if u64::from(next) != 1 + new_orders {
            bail!("district {key:?}: d_next_o_id is {next}, but {new_orders} New-Orders committed there (expected {})", 1 + new_orders);
        }
        next_o_id.insert(key, next);
        let paid = ledger.paid_cents.get(&key).copied().unwrap_or(0);
        let ytd = col_i64(&row, 4)?;
        if ytd != DISTRICT_YTD_START + paid {
            bail!(
                "district {key:?}: d_ytd is {ytd}, but {paid} cents were paid there (expected {})",
                DISTRICT_YTD_START + paid
            );
        }
        *d_ytd_by_w.entry(key.0).or_default() += ytd - DISTRICT_YTD_START;
    }
    let expected_districts = scale.warehouses * DISTRICTS_PER_WAREHOUSE;
    if next_o_id.len() != expected_districts as usize {
        bail!(
            "{} districts, expected {expected_districts}",
            next_o_id.len()
        );
    }
    // Condition 1: W_YTD = Σ D_YTD.
    for row in scan_all(cluster, &t.warehouse)? {
        let w = col_u32(&row, 0)?;
        let ytd = col_i64(&row, 4)? - WAREHOUSE_YTD_START;
        let districts = d_ytd_by_w.get(&w).copied().unwrap_or(0);
        if ytd != districts {
            bail!("warehouse {w}: w_ytd grew by {ytd}, its districts' d_ytd by {districts}");
        }
    }
    // Condition 2: D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID); 3: the new_order rows of a
    // district are its orders (none is delivered here); 4: Σ O_OL_CNT = the order lines.
    let mut orders: BTreeMap<(u32, u32), (u64, u32, u64)> = BTreeMap::new();
    for row in scan_all(cluster, &t.orders)? {
        let entry = orders
            .entry((col_u32(&row, 0)?, col_u32(&row, 1)?))
            .or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(col_u32(&row, 2)?);
        entry.2 += u64::from(col_u32(&row, 5)?);
    }
    let mut new_order_rows: BTreeMap<(u32, u32), (u64, u32)> = BTreeMap::new();
    for row in scan_all(cluster, &t.new_order)? {
        let entry = new_order_rows
            .entry((col_u32(&row, 0)?, col_u32(&row, 1)?))
            .or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(col_u32(&row, 2)?);
    }
    let mut lines: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    let mut quantity_by_supplier: BTreeMap<u32, u64> = BTreeMap::new();
    for row in scan_all(cluster, &t.order_line)? {
        *lines
            .entry((col_u32(&row, 0)?, col_u32(&row, 1)?))
            .or_default() += 1;
        *quantity_by_supplier.entry(col_u32(&row, 5)?).or_default() += u64::from(col_u32(&row, 6)?);
    }
    let (mut order_total, mut line_total) = (0, 0);
    for (key, next) in &next_o_id {
        let (count, max_o_id, ol_cnt) = orders.get(key).copied().unwrap_or_default();
        let (no_count, no_max) = new_order_rows.get(key).copied().unwrap_or_default();
        let line_count = lines.get(key).copied().unwrap_or(0);
        let expected_lines = ledger.order_lines.get(key).copied().unwrap_or(0);
        if max_o_id != next - 1 || no_max != next - 1 {
            bail!(
                "district {key:?}: d_next_o_id {next}, max(o_id) {max_o_id}, max(no_o_id) {no_max}"
            );
        }
        if count != u64::from(next - 1) || no_count != count {
            bail!("district {key:?}: {count} orders and {no_count} new_order rows for next order id {next}");
        }
        if line_count != ol_cnt || line_count != expected_lines {
            bail!("district {key:?}: {line_count} order lines, Σ o_ol_cnt {ol_cnt}, committed {expected_lines}");
        }
        order_total += count;
        line_total += line_count;
    }
    if orders.keys().any(|k| !next_o_id.contains_key(k)) {
        bail!("orders of a district that does not exist");
    }
    // Stock: what it gave is what the order lines took.
    let mut stock_ytd: BTreeMap<u32, u64> = BTreeMap::new();
    let mut stock_orders: BTreeMap<u32, u64> = BTreeMap::new();
    for row in scan_all(cluster, &t.stock)? {
        let w = col_u32(&row, 0)?;
        *stock_ytd.entry(w).or_default() +=
            u64::try_from(col_i64(&row, 3)?).context("negative s_ytd")?;
        *stock_orders.entry(w).or_default() += u64::from(col_u32(&row, 4)?);
    }
    for w in 1..=scale.warehouses {
        let (ytd, count) = (
            stock_ytd.get(&w).copied().unwrap_or(0),
            stock_orders.get(&w).copied().unwrap_or(0),
        );
        let lines_quantity = quantity_by_supplier.get(&w).copied().unwrap_or(0);
        let expected_quantity = ledger.quantity_by_supplier.get(&w).copied().unwrap_or(0);
        let expected_lines = ledger.lines_by_supplier.get(&w).copied().unwrap_or(0);
        if ytd != lines_quantity || ytd != expected_quantity || count != expected_lines {
            bail!("warehouse {w}'s stock: Σ s_ytd {ytd}, Σ s_order_cnt {count}; its order lines' quantities {lines_quantity}; committed {expected_quantity} units in {expected_lines} lines");
        }
    }
    // Customers and history: every payment is in both.
    let mut customer_paid: BTreeMap<(u32, u32), (i64, u64)> = BTreeMap::new();
    for row in scan_all(cluster, &t.customer)? {
        let entry = customer_paid
            .entry((col_u32(&row, 0)?, col_u32(&row, 1)?))
            .or_default();
        entry.0 += col_i64(&row, 7)? - CUSTOMER_YTD_START;
        entry.1 += u64::from(col_u32(&row, 8)? - 1);
        if col_i64(&row, 6)? != -col_i64(&row, 7)? {
            bail!(
                "customer {:?}: c_balance {:?} is not −c_ytd_payment {:?}",
                &row[..3],
                row[6],
                row[7]
            );
        }
    }
    let mut history: BTreeMap<(u32, u32), (i64, u64)> = BTreeMap::new();
    for row in scan_all(cluster, &t.history)? {
        let entry = history
            .entry((col_u32(&row, 0)?, col_u32(&row, 2)?))
            .or_default();
        entry.0 += col_i64(&row, 4)?;
        entry.1 += 1;
    }
    let mut payment_total = 0;
    for key in next_o_id.keys() {
        let expected = (
            ledger.paid_cents.get(key).copied().unwrap_or(0),
            ledger.payments.get(key).copied().unwrap_or(0),
        );
        let customers = customer_paid.get(key).copied().unwrap_or_default();
        let logged = history.get(key).copied().unwrap_or_default();
        if customers != expected || logged != expected {
            bail!("district {key:?}: payments (cents, count) committed {expected:?}, customers' {customers:?}, history's {logged:?}");
        }
        payment_total += expected.1;
    }
    Ok(Checked {
        orders: order_total,
        order_lines: line_total,
        payments: payment_total,
    })
}
