//! The benchmark proper: the table, the load, and one measurement loop per access type.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::Rng;
use rndb_api::{
    BoundType, Cluster, CmpOp, ColumnDef, ColumnType, ExecType, Filter, Index, IndexDef,
    IndexRange, LinkTraffic, LockMode, NodeId, ScanOptions, Table, TableDef, Transaction, Value,
};

use crate::args::Access;
use crate::local::Shutdown;

/// The benchmark table's name.
pub const TABLE_NAME: &str = "testread_perf";
/// The ordered index on the primary key, as NDB's testReadPerf creates it.
pub const ORDERED_INDEX_NAME: &str = "testread_perf_ordered";
/// The unique hash index on the primary key, as NDB's testReadPerf creates it.
pub const UNIQUE_INDEX_NAME: &str = "testread_perf_unique";
/// Rows inserted per transaction while loading (each transaction commits).
pub const LOAD_BATCH_ROWS: u32 = 1000;
/// Times one load batch is tried again after a temporary error, and the pause before the
/// first retry (each next pause is one longer: at most 2 s, 41 s in all).
const LOAD_RETRIES_MAX: u32 = 40;
const LOAD_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);
/// The largest latency the histograms hold (one minute, in ns); longer ones are clamped.
const LATENCY_NS_MAX: u64 = 60_000_000_000;
/// Significant decimal digits the histograms keep.
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;

/// The bytes of column data in a row of NDB testReadPerf's shape: the `UInt32` key, three
/// `UInt32` and one `UInt64` attribute.
pub const ROW_DATA_BYTES_MIN: u32 = 24;

/// The benchmark row's shape: NDB testReadPerf's columns and, for `--row-bytes` over
/// [`ROW_DATA_BYTES_MIN`], a `Varbinary` column `e` holding the rest of the row's data bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowShape {
    /// Bytes in column `e`; 0 leaves the column out.
    pub pad_bytes: u16,
}

/// Byte `i` of row `pk`'s column `e`: the key's bytes, then a fixed pattern (cheap to check).
fn pad_byte(pk: u32, i: usize) -> u8 {
    match i {
        0..=3 => pk.to_le_bytes()[i],
        _ => (i as u8).wrapping_mul(31),
    }
}

impl RowShape {
    /// The shape whose column data adds up to `row_bytes` (at least [`ROW_DATA_BYTES_MIN`],
    /// and a `Varbinary` can hold the rest).
    pub fn with_row_bytes(row_bytes: u32) -> Result<RowShape> {
        let pad = row_bytes.checked_sub(ROW_DATA_BYTES_MIN).with_context(|| {
            format!("--row-bytes {row_bytes} is below the {ROW_DATA_BYTES_MIN} bytes of the key and attributes")
        })?;
        let limit = u32::from(rndb_api::COLUMN_BYTES_MAX);
        if pad > limit {
            bail!("--row-bytes {row_bytes} leaves {pad} bytes for column e, over the {limit} a Varbinary holds");
        }
        Ok(RowShape {
            pad_bytes: pad as u16,
        })
    }

    /// The benchmark table, as NDB's testReadPerf shapes it: a `UInt32` primary key and a few
    /// attribute columns, plus `e` for a larger row.
    pub fn table_def(&self) -> TableDef {
        let mut columns = vec![
            ColumnDef::key("pk", ColumnType::UInt32),
            ColumnDef::new("a", ColumnType::UInt32),
            ColumnDef::new("b", ColumnType::UInt32),
            ColumnDef::new("c", ColumnType::UInt32),
            ColumnDef::new("d", ColumnType::UInt64),
        ];
        if self.pad_bytes > 0 {
            columns.push(ColumnDef::new("e", ColumnType::Varbinary(self.pad_bytes)));
        }
        TableDef::new(TABLE_NAME, columns)
    }

    /// The row with primary key `pk`: every column derived from the key, so a read can be
    /// checked.
    fn row(&self, pk: u32) -> Vec<Value> {
        let mut values = vec![
            Value::UInt32(pk),
            Value::UInt32(pk.wrapping_mul(3)),
            Value::UInt32(pk ^ 0x5555_5555),
            Value::UInt32(!pk),
            Value::UInt64(u64::from(pk) << 20),
        ];
        if self.pad_bytes > 0 {
            values.push(Value::Varbinary(
                (0..usize::from(self.pad_bytes))
                    .map(|i| pad_byte(pk, i))
                    .collect(),
            ));
        }
        values
    }

    /// A read must return the loaded row; anything else means the figures would be
    /// meaningless. Compared in place: the check runs inside the timed loop, so it allocates
    /// nothing unless it fails.
    fn check_row(&self, found: Option<&[Value]>, pk: u32) -> Result<()> {
        let Some(values) = found else {
            bail!("the read of row {pk} returned no row");
        };
        let pad_matches = |pad: &[u8]| {
            pad.len() == usize::from(self.pad_bytes)
                && pad.iter().enumerate().all(|(i, &b)| b == pad_byte(pk, i))
        };
        let matches = match values {
            [Value::UInt32(k), Value::UInt32(a), Value::UInt32(b), Value::UInt32(c), Value::UInt64(d), rest @ ..] => {
                (*k, *a, *b, *c, *d)
                    == (
                        pk,
                        pk.wrapping_mul(3),
                        pk ^ 0x5555_5555,
                        !pk,
                        u64::from(pk) << 20,
                    )
                    && match rest {
                        [] => self.pad_bytes == 0,
                        [Value::Varbinary(pad)] => self.pad_bytes > 0 && pad_matches(pad),
                        _ => false,
                    }
            }
            _ => false,
        };
        if !matches {
            bail!(
                "row {pk} reads back as {values:?}, expected {:?}",
                self.row(pk)
            );
        }
        Ok(())
    }

    fn check_rows(&self, rows: &[Vec<Value>], first: u32, count: u32) -> Result<()> {
        if rows.len() != count as usize {
            bail!(
                "the scan for rows {first}..{} returned {} rows",
                first + count,
                rows.len()
            );
        }
        for (pk, found) in (first..).zip(rows) {
            self.check_row(Some(found), pk)?;
        }
        Ok(())
    }
}

/// Drops the table if it exists, creates it with an ordered index and a unique hash index on
/// the primary key (NDB's testReadPerf `--create_drop`), and loads rows `0..size`.
pub fn create_and_load(
    cluster: &Cluster,
    size: u32,
    shape: RowShape,
    shutdown: &Shutdown,
) -> Result<Table> {
    match cluster.drop_table(TABLE_NAME) {
        Ok(()) => {}
        Err(e) if e.code() == Some(709) => {}
        Err(e) => return Err(e).context("drop the old benchmark table"),
    }
    let table = cluster
        .create_table(&shape.table_def())
        .context("create the benchmark table")?;
    cluster
        .create_index(&table, &IndexDef::ordered(ORDERED_INDEX_NAME, &["pk"]))
        .context("create the ordered index")?;
    cluster
        .create_index(&table, &IndexDef::unique(UNIQUE_INDEX_NAME, &["pk"]))
        .context("create the unique hash index")?;
    let progress = progress_bar(u64::from(size));
    let started = Instant::now();
    let mut first = 0;
    while first < size {
        shutdown.check()?;
        let count = LOAD_BATCH_ROWS.min(size - first);
        let mut retries = 0;
        loop {
            let mut transaction = cluster
                .start_transaction()
                .context("start a load transaction")?;
            for pk in first..first + count {
                transaction
                    .insert(&table, &shape.row(pk))
                    .context("define an insert")?;
            }
            match transaction.execute(ExecType::Commit) {
                Ok(()) => break,
                // A temporary error (a full send buffer while checkpoints run, say) rolled the
                // batch back: it is loaded again after a pause, as an application would.
                Err(e) if e.is_temporary() && retries < LOAD_RETRIES_MAX => {
                    retries += 1;
                    std::thread::sleep(LOAD_RETRY_PAUSE * retries);
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("load rows {first}..{} ({retries} retries)", first + count)
                    })
                }
            }
        }
        first += count;
        progress.set_position(u64::from(first));
    }
    progress.finish_and_clear();
    eprintln!(
        "testread-perf: loaded {size} rows in {:.2?}",
        started.elapsed()
    );
    Ok(table)
}

/// `range` keys from `start`: consecutive keys, or with `primary_keys` (at least `range` of
/// them) consecutive ones of those from index `start`, wrapping around to the first.
fn measurement_keys(
    primary_keys: Option<&[u32]>,
    range: u32,
    start: u32,
) -> impl Iterator<Item = u32> + '_ {
    (0..range).map(move |i| match primary_keys {
        None => start + i,
        Some(keys) => keys[(start as usize + i as usize) % keys.len()],
    })
}

/// The keys of rows `0..size` whose primary replica is on data node `node`, ascending (for
/// `--primary-node`). Fails when there are fewer than `range`: a measurement reads `range`
/// different rows.
pub fn keys_with_primary_on(
    cluster: &Cluster,
    table: &Table,
    size: u32,
    range: u32,
    node: NodeId,
) -> Result<Vec<u32>> {
    let mut keys = Vec::new();
    for pk in 0..size {
        let replicas = cluster
            .replicas_of(table, &[Value::UInt32(pk)])
            .with_context(|| format!("place row {pk}"))?;
        if replicas.first() == Some(&node) {
            keys.push(pk);
        }
    }
    if keys.len() < range as usize {
        bail!(
            "--range {range} is larger than the {} of the {size} rows whose primary replica is \
             on node {node} (--primary-node {node})",
            keys.len()
        );
    }
    Ok(keys)
}

/// A bar on stderr when stderr is a terminal; hidden otherwise (logs and pipes stay clean).
fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("loading {bar:40} {pos}/{len} rows {per_sec}") {
        bar.set_style(style);
    }
    bar
}

/// What one access type over one transporter measured.
#[derive(Debug)]
pub struct Measured {
    /// Rows read (pings sent, for `ping`).
    pub rows: u64,
    /// Executes (round trips) made.
    pub executes: u64,
    /// Wall time of all timed measurements, transaction start and rollback included.
    pub elapsed: Duration,
    /// The latency of each execute, in ns.
    pub execute_ns: Histogram<u64>,
    /// Table rows the measured scans covered (scan_filter: the whole table per scan, as this
    /// client asked; the data node does not report a count), when that differs from the rows
    /// returned.
    pub scanned_table_rows: u64,
    /// Frames and bytes the API's links carried during the timed measurements (transaction
    /// starts and rollbacks included, and the odd heartbeat), with the kernel's socket counts.
    pub traffic: LinkTraffic,
}

/// The indexes an access type reads through.
#[derive(Debug)]
struct Indexes {
    unique: Index,
    ordered: Index,
}

/// What every measurement needs.
#[derive(Debug)]
pub struct Workload<'a> {
    pub cluster: &'a Cluster,
    pub table: &'a Table,
    pub size: u32,
    pub range: u32,
    pub iterations: u32,
    pub lock: LockMode,
    /// Serial reads use one committed transaction per row (see `Args::transaction_per_row`).
    pub transaction_per_row: bool,
    /// With `--primary-node`, the keys whose primary replica is on that node, ascending: a
    /// measurement then takes `range` consecutive ones of these (see [`Workload::keys`]).
    pub primary_keys: Option<&'a [u32]>,
    /// The rows' columns, to check what each read returns.
    pub shape: RowShape,
    pub shutdown: &'a Shutdown,
}

impl Workload<'_> {
    /// One untimed warm-up measurement, then `iterations` timed ones from random start rows.
    pub fn measure(&self, access: Access, rng: &mut StdRng) -> Result<Measured> {
        let indexes = Indexes {
            unique: self
                .cluster
                .get_index(self.table, UNIQUE_INDEX_NAME)
                .context("look up the unique hash index")?,
            ordered: self
                .cluster
                .get_index(self.table, ORDERED_INDEX_NAME)
                .context("look up the ordered index")?,
        };
        let mut measured = Measured::new()?;
        let start = self.random_start(rng);
        self.measure_once(access, &indexes, start, &mut Measured::new()?)?;
        let traffic_before = self.cluster.link_traffic();
        for _ in 0..self.iterations {
            self.shutdown.check()?;
            let start = self.random_start(rng);
            let began = Instant::now();
            self.measure_once(access, &indexes, start, &mut measured)?;
            measured.elapsed += began.elapsed();
        }
        measured.traffic = self.cluster.link_traffic().since(&traffic_before);
        Ok(measured)
    }

    /// Where a measurement starts: a key, or with `primary_keys` an index into them.
    fn random_start(&self, rng: &mut StdRng) -> u32 {
        match self.primary_keys {
            None => rng.gen_range(0..=self.size - self.range),
            Some(keys) => rng.gen_range(0..keys.len()) as u32,
        }
    }

    /// The `range` keys of the measurement that starts at `start`: consecutive keys from
    /// `start`, or with `primary_keys` consecutive ones of those from index `start` (wrapping
    /// around to the first).
    fn keys(&self, start: u32) -> impl Iterator<Item = u32> + '_ {
        measurement_keys(self.primary_keys, self.range, start)
    }

    fn measure_once(
        &self,
        access: Access,
        indexes: &Indexes,
        start: u32,
        into: &mut Measured,
    ) -> Result<()> {
        match access {
            Access::Ping => self.ping(into),
            Access::SerialPk => self.serial_reads(None, start, into),
            Access::BatchPk => self.batch_reads(None, start, into),
            Access::SerialUnique => self.serial_reads(Some(&indexes.unique), start, into),
            Access::BatchUnique => self.batch_reads(Some(&indexes.unique), start, into),
            Access::IndexEq => self.index_eq(&indexes.ordered, start, into),
            Access::IndexRange => self.index_range(&indexes.ordered, false, start, into),
            Access::IndexOrdered => self.index_range(&indexes.ordered, true, start, into),
            Access::ScanFilter => self.scan_filter(start, into),
            Access::SerialWrite => self.serial_writes(start, into),
            // `Args::validate` expands `all` before anything is measured.
            Access::All => bail!("`all` names every access type; it is not one to measure"),
        }
    }

    /// Defines a read of row `pk` by primary key or, with `unique`, through the unique index.
    fn define_read(
        &self,
        transaction: &mut Transaction<'_>,
        unique: Option<&Index>,
        pk: u32,
    ) -> Result<rndb_api::OpId> {
        let key = [Value::UInt32(pk)];
        Ok(match unique {
            None => transaction.read(self.table, &key, self.lock)?,
            Some(index) => transaction.read_unique(index, &key, self.lock)?,
        })
    }

    /// `range` empty round trips.
    fn ping(&self, into: &mut Measured) -> Result<()> {
        for _ in 0..self.range {
            let began = Instant::now();
            self.cluster.ping().context("ping")?;
            into.record_execute(began.elapsed(), 1);
        }
        Ok(())
    }

    /// `range` reads (by primary key, or through the unique index) in one transaction, one
    /// execute each, then a rollback.
    fn serial_reads(&self, unique: Option<&Index>, start: u32, into: &mut Measured) -> Result<()> {
        if self.transaction_per_row {
            return self.serial_read_transactions(unique, start, into);
        }
        let mut transaction = self
            .cluster
            .start_transaction()
            .context("start a transaction")?;
        for pk in self.keys(start) {
            let op = self.define_read(&mut transaction, unique, pk)?;
            let began = Instant::now();
            transaction
                .execute(ExecType::NoCommit)
                .with_context(|| format!("read row {pk}"))?;
            into.record_execute(began.elapsed(), 1);
            self.shape.check_row(transaction.row(op), pk)?;
        }
        transaction.close();
        Ok(())
    }

    /// `range` reads, each in its own transaction (placed by its key) committed in the same
    /// execute.
    fn serial_read_transactions(
        &self,
        unique: Option<&Index>,
        start: u32,
        into: &mut Measured,
    ) -> Result<()> {
        for pk in self.keys(start) {
            let mut transaction = self
                .cluster
                .start_transaction()
                .context("start a transaction")?;
            let op = self.define_read(&mut transaction, unique, pk)?;
            let began = Instant::now();
            transaction
                .execute(ExecType::Commit)
                .with_context(|| format!("read row {pk}"))?;
            into.record_execute(began.elapsed(), 1);
            self.shape.check_row(transaction.row(op), pk)?;
        }
        Ok(())
    }

    /// `range` updates, each its own transaction committed in one execute. The row keeps its
    /// values (every replica still writes, logs nothing yet, and commits), so reads stay
    /// checkable.
    fn serial_writes(&self, start: u32, into: &mut Measured) -> Result<()> {
        for pk in self.keys(start) {
            let mut transaction = self
                .cluster
                .start_transaction()
                .context("start a transaction")?;
            let values = self.shape.row(pk);
            transaction
                .update(self.table, &values[..1], &[(1, values[1].clone())])
                .context("define an update")?;
            let began = Instant::now();
            transaction
                .execute(ExecType::Commit)
                .with_context(|| format!("update row {pk}"))?;
            into.record_execute(began.elapsed(), 1);
        }
        Ok(())
    }

    /// `range` reads (by primary key, or through the unique index) in one execute, then a
    /// rollback.
    fn batch_reads(&self, unique: Option<&Index>, start: u32, into: &mut Measured) -> Result<()> {
        let mut transaction = self
            .cluster
            .start_transaction()
            .context("start a transaction")?;
        let mut ops = Vec::with_capacity(self.range as usize);
        for pk in self.keys(start) {
            ops.push((pk, self.define_read(&mut transaction, unique, pk)?));
        }
        let began = Instant::now();
        transaction
            .execute(ExecType::NoCommit)
            .with_context(|| format!("read {} rows from row {}", self.range, ops[0].0))?;
        into.record_execute(began.elapsed(), u64::from(self.range));
        for (pk, op) in ops {
            self.shape.check_row(transaction.row(op), pk)?;
        }
        transaction.close();
        Ok(())
    }
}

impl Workload<'_> {
    /// `range` ordered-index scans, each with an equality bound on one primary key (one round
    /// trip each: the scan's first batch is its last), in one transaction.
    fn index_eq(&self, index: &Index, start: u32, into: &mut Measured) -> Result<()> {
        let mut transaction = self
            .cluster
            .start_transaction()
            .context("start a transaction")?;
        for pk in start..start + self.range {
            let options = ScanOptions {
                lock: self.lock,
                ranges: vec![IndexRange::eq(vec![Value::UInt32(pk)])],
                ..ScanOptions::default()
            };
            let began = Instant::now();
            let rows = collect(transaction.scan_index(index, &options)?)
                .with_context(|| format!("scan for row {pk}"))?;
            into.record_execute(began.elapsed(), rows.len() as u64);
            self.shape.check_rows(&rows, pk, 1)?;
        }
        transaction.close();
        Ok(())
    }

    /// One ordered-index scan over `start <= pk < start + range`, sorted (merged over the
    /// fragments) or not.
    fn index_range(
        &self,
        index: &Index,
        sorted: bool,
        start: u32,
        into: &mut Measured,
    ) -> Result<()> {
        let range = IndexRange::all()
            .bound(BoundType::LE, vec![Value::UInt32(start)])
            .bound(BoundType::GT, vec![Value::UInt32(start + self.range)]);
        let options = ScanOptions {
            lock: self.lock,
            ranges: vec![range],
            sorted,
            ..ScanOptions::default()
        };
        let mut transaction = self
            .cluster
            .start_transaction()
            .context("start a transaction")?;
        let began = Instant::now();
        let mut rows = collect(transaction.scan_index(index, &options)?)
            .with_context(|| format!("scan rows {start}..{}", start + self.range))?;
        into.record_execute(began.elapsed(), rows.len() as u64);
        if !sorted {
            rows.sort_by_key(|r| match r[0] {
                Value::UInt32(pk) => pk,
                _ => u32::MAX,
            });
        }
        self.shape.check_rows(&rows, start, self.range)?;
        transaction.close();
        Ok(())
    }

    /// One full-table scan whose pushed-down filter selects `start <= pk < start + range`:
    /// the data node examines every row.
    fn scan_filter(&self, start: u32, into: &mut Measured) -> Result<()> {
        let filter = Filter::and(vec![
            Filter::cmp(0, CmpOp::Ge, Value::UInt32(start)),
            Filter::cmp(0, CmpOp::Lt, Value::UInt32(start + self.range)),
        ]);
        let options = ScanOptions {
            lock: self.lock,
            filter: Some(filter),
            ..ScanOptions::default()
        };
        let mut transaction = self
            .cluster
            .start_transaction()
            .context("start a transaction")?;
        let began = Instant::now();
        let mut rows = collect(transaction.scan_table(self.table, &options)?)
            .with_context(|| format!("scan for rows {start}..{}", start + self.range))?;
        into.record_execute(began.elapsed(), rows.len() as u64);
        into.scanned_table_rows += u64::from(self.size);
        rows.sort_by_key(|r| match r[0] {
            Value::UInt32(pk) => pk,
            _ => u32::MAX,
        });
        self.shape.check_rows(&rows, start, self.range)?;
        transaction.close();
        Ok(())
    }
}

/// Reads a scan to its end.
fn collect(scan: rndb_api::Scan<'_>) -> Result<Vec<Vec<Value>>> {
    Ok(scan.collect::<Result<Vec<_>, _>>()?)
}

/// A scan must return exactly rows `first..first + count`, in that order.
impl Measured {
    fn new() -> Result<Measured> {
        Ok(Measured {
            rows: 0,
            executes: 0,
            scanned_table_rows: 0,
            traffic: LinkTraffic::default(),
            elapsed: Duration::ZERO,
            execute_ns: Histogram::new_with_bounds(1, LATENCY_NS_MAX, LATENCY_SIGNIFICANT_DIGITS)
                .context("create a latency histogram")?,
        })
    }

    fn record_execute(&mut self, latency: Duration, rows: u64) {
        let ns = u64::try_from(latency.as_nanos())
            .unwrap_or(u64::MAX)
            .clamp(1, LATENCY_NS_MAX);
        self.execute_ns.saturating_record(ns);
        self.executes += 1;
        self.rows += rows;
    }
}

/// A read must return the loaded row; anything else means the figures would be meaningless.
#[cfg(test)]
mod tests {
    use super::measurement_keys;

    #[test]
    fn a_row_is_checked_column_by_column() {
        use super::{RowShape, Value};
        for row_bytes in [24, 100] {
            let shape = RowShape::with_row_bytes(row_bytes).unwrap();
            let row = shape.row(77);
            shape.check_row(Some(&row), 77).unwrap();
            assert!(shape.check_row(Some(&row), 78).is_err());
            assert!(shape.check_row(None, 77).is_err());
            assert!(shape.check_row(Some(&row[..4]), 77).is_err());
            let mut wrong = row.clone();
            match wrong.last_mut() {
                Some(Value::Varbinary(pad)) => pad[2] ^= 1,
                Some(last) => *last = Value::UInt64(0),
                None => unreachable!(),
            }
            assert!(shape.check_row(Some(&wrong), 77).is_err());
        }
        assert!(RowShape::with_row_bytes(23).is_err());
        assert!(RowShape::with_row_bytes(24 + 8001).is_err());
    }

    #[test]
    fn a_measurement_reads_consecutive_keys() {
        let keys: Vec<u32> = measurement_keys(None, 4, 10).collect();
        assert_eq!(keys, [10, 11, 12, 13]);
    }

    #[test]
    fn one_nodes_keys_are_taken_in_order_and_wrap_around() {
        let on_node = [2, 5, 9];
        let keys: Vec<u32> = measurement_keys(Some(&on_node), 4, 2).collect();
        assert_eq!(keys, [9, 2, 5, 9]);
        let keys: Vec<u32> = measurement_keys(Some(&on_node), 2, 0).collect();
        assert_eq!(keys, [2, 5]);
    }
}
