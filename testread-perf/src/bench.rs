//! The benchmark proper: the table, the load, and one measurement loop per access type.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::Rng;
use rndb_api::{Cluster, ColumnDef, ColumnType, ExecType, LockMode, Table, TableDef, Value};

use crate::args::Access;
use crate::local::Shutdown;

/// The benchmark table's name.
pub const TABLE_NAME: &str = "testread_perf";
/// Rows inserted per transaction while loading (each transaction commits).
pub const LOAD_BATCH_ROWS: u32 = 1000;
/// The largest latency the histograms hold (one minute, in ns); longer ones are clamped.
const LATENCY_NS_MAX: u64 = 60_000_000_000;
/// Significant decimal digits the histograms keep.
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;

/// The benchmark table, as NDB's testReadPerf shapes it: a `UInt32` primary key and a few
/// attribute columns.
pub fn table_def() -> TableDef {
    TableDef::new(
        TABLE_NAME,
        vec![
            ColumnDef::key("pk", ColumnType::UInt32),
            ColumnDef::new("a", ColumnType::UInt32),
            ColumnDef::new("b", ColumnType::UInt32),
            ColumnDef::new("c", ColumnType::UInt32),
            ColumnDef::new("d", ColumnType::UInt64),
        ],
    )
}

/// The row with primary key `pk`: every column derived from the key, so a read can be checked.
fn row(pk: u32) -> [Value; 5] {
    [
        Value::UInt32(pk),
        Value::UInt32(pk.wrapping_mul(3)),
        Value::UInt32(pk ^ 0x5555_5555),
        Value::UInt32(!pk),
        Value::UInt64(u64::from(pk) << 20),
    ]
}

/// Drops the table if it exists, creates it, and loads rows `0..size`.
pub fn create_and_load(cluster: &Cluster, size: u32, shutdown: &Shutdown) -> Result<Table> {
    match cluster.drop_table(TABLE_NAME) {
        Ok(()) => {}
        Err(e) if e.code() == Some(709) => {}
        Err(e) => return Err(e).context("drop the old benchmark table"),
    }
    let table = cluster
        .create_table(&table_def())
        .context("create the benchmark table")?;
    let progress = progress_bar(u64::from(size));
    let started = Instant::now();
    let mut first = 0;
    while first < size {
        shutdown.check()?;
        let count = LOAD_BATCH_ROWS.min(size - first);
        let mut transaction = cluster
            .start_transaction()
            .context("start a load transaction")?;
        for pk in first..first + count {
            transaction
                .insert(&table, &row(pk))
                .context("define an insert")?;
        }
        transaction
            .execute(ExecType::Commit)
            .with_context(|| format!("load rows {first}..{}", first + count))?;
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
    pub shutdown: &'a Shutdown,
}

impl Workload<'_> {
    /// One untimed warm-up measurement, then `iterations` timed ones from random start rows.
    pub fn measure(&self, access: Access, rng: &mut StdRng) -> Result<Measured> {
        let mut measured = Measured::new()?;
        self.measure_once(access, self.random_start(rng), &mut Measured::new()?)?;
        for _ in 0..self.iterations {
            self.shutdown.check()?;
            let start = self.random_start(rng);
            let began = Instant::now();
            self.measure_once(access, start, &mut measured)?;
            measured.elapsed += began.elapsed();
        }
        Ok(measured)
    }

    fn random_start(&self, rng: &mut StdRng) -> u32 {
        rng.gen_range(0..=self.size - self.range)
    }

    fn measure_once(&self, access: Access, start: u32, into: &mut Measured) -> Result<()> {
        match access {
            Access::Ping => self.ping(into),
            Access::SerialPk => self.serial_pk(start, into),
            Access::BatchPk => self.batch_pk(start, into),
            other => bail!("access type {} is not implemented yet", other.name()),
        }
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

    /// `range` primary-key reads in one transaction, one execute each, then a rollback.
    fn serial_pk(&self, start: u32, into: &mut Measured) -> Result<()> {
        let mut transaction = self
            .cluster
            .start_transaction()
            .context("start a transaction")?;
        for pk in start..start + self.range {
            let op = transaction.read(self.table, &[Value::UInt32(pk)], self.lock)?;
            let began = Instant::now();
            transaction
                .execute(ExecType::NoCommit)
                .with_context(|| format!("read row {pk}"))?;
            into.record_execute(began.elapsed(), 1);
            check_row(transaction.row(op), pk)?;
        }
        transaction.close();
        Ok(())
    }

    /// `range` primary-key reads in one execute, then a rollback.
    fn batch_pk(&self, start: u32, into: &mut Measured) -> Result<()> {
        let mut transaction = self
            .cluster
            .start_transaction()
            .context("start a transaction")?;
        let mut ops = Vec::with_capacity(self.range as usize);
        for pk in start..start + self.range {
            ops.push((
                pk,
                transaction.read(self.table, &[Value::UInt32(pk)], self.lock)?,
            ));
        }
        let began = Instant::now();
        transaction
            .execute(ExecType::NoCommit)
            .with_context(|| format!("read rows {start}..{}", start + self.range))?;
        into.record_execute(began.elapsed(), u64::from(self.range));
        for (pk, op) in ops {
            check_row(transaction.row(op), pk)?;
        }
        transaction.close();
        Ok(())
    }
}

impl Measured {
    fn new() -> Result<Measured> {
        Ok(Measured {
            rows: 0,
            executes: 0,
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
fn check_row(found: Option<&[Value]>, pk: u32) -> Result<()> {
    match found {
        Some(values) if values == row(pk) => Ok(()),
        Some(values) => bail!("row {pk} reads back as {values:?}, expected {:?}", row(pk)),
        None => bail!("the read of row {pk} returned no row"),
    }
}
