//! Throughput of the tokio interface on one runtime thread against the NDB-style
//! `AsyncExecutor` on one thread, at the same numbers of primary-key reads in flight, side by
//! side in one run (levels alternated, each measured `--rounds` times, medians printed).
//!
//! Start a cluster first (for example `ndbd --config-file config/examples/single.ini
//! --ndb-nodeid 1 --initial`), then:
//!
//! ```text
//! cargo run --release --features rndb-api/tokio --example tokio_sweep -- \
//!     --config-file config/examples/single.ini --levels 1,64,1024,4096
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rndb_api::{
    AbortOption, Cluster, ColumnDef, ColumnType, ConnectOptions, ExecType, LockMode, Table,
    TableDef, TransporterKind, Value,
};

#[derive(Debug, Parser)]
struct Args {
    #[arg(long)]
    config_file: std::path::PathBuf,
    /// Transactions in flight, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,64,1024,4096")]
    levels: Vec<u32>,
    /// Rows loaded and read.
    #[arg(long, default_value_t = 100_000)]
    size: u32,
    /// How long each measurement lasts.
    #[arg(long, default_value_t = 1000)]
    duration_ms: u64,
    /// Measurements per level and interface.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Force TCP (the config's choice otherwise: SHM for single.ini).
    #[arg(long)]
    tcp: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let options = ConnectOptions {
        transporter: args.tcp.then_some(TransporterKind::Tcp),
        ..ConnectOptions::default()
    };
    let cluster: &'static Cluster =
        Box::leak(Box::new(Cluster::connect(&args.config_file, options)?));
    let table = load(cluster, args.size)?;
    let duration = Duration::from_millis(args.duration_ms);
    println!(
        "transporter {:?}, {} rows, {} ms per measurement, median of {}",
        cluster.transporter_kind(),
        args.size,
        args.duration_ms,
        args.rounds
    );
    println!("| in flight | AsyncExecutor tx/s | tokio tx/s | tokio / executor |");
    println!("|---|---|---|---|");
    for &level in &args.levels {
        let mut executor = Vec::new();
        let mut tokio = Vec::new();
        for _ in 0..args.rounds {
            executor.push(executor_level(cluster, &table, args.size, level, duration)?);
            tokio.push(tokio_level(cluster, &table, args.size, level, duration)?);
        }
        let (e, t) = (median(executor), median(tokio));
        println!("| {level} | {e:.0} | {t:.0} | {:.2} |", t / e);
    }
    Ok(())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn load(cluster: &Cluster, size: u32) -> anyhow::Result<Table> {
    let def = TableDef::new(
        "tokio_sweep",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::UInt64),
        ],
    );
    let _ = cluster.drop_table(&def.name);
    let table = cluster.create_table(&def)?;
    for start in (0..size).step_by(1000) {
        let mut tx = cluster.start_transaction()?;
        for id in start..(start + 1000).min(size) {
            tx.insert(&table, &[Value::UInt32(id), Value::UInt64(u64::from(id))])?;
        }
        tx.execute(ExecType::Commit)?;
    }
    Ok(table)
}

/// A small xorshift generator: the keys need only spread.
fn next_key(state: &mut u64, size: u32) -> Value {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    Value::UInt32((*state % u64::from(size)) as u32)
}

/// Transactions per second with the AsyncExecutor keeping `level` in flight, as testread-perf's
/// asynchronous sweep does (poll for an eighth of those in flight, then refill).
fn executor_level(
    cluster: &Cluster,
    table: &Table,
    size: u32,
    level: u32,
    duration: Duration,
) -> anyhow::Result<f64> {
    let mut executor = cluster.async_executor();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let begun = Instant::now();
    let deadline = begun + duration;
    let mut committed = 0u64;
    for _ in 0..level {
        prepare_read(cluster, table, size, &mut executor, &mut state)?;
    }
    while !executor.is_empty() {
        let min = (executor.len() / 8).max(1);
        let completions = executor.send_poll(min, Duration::from_millis(100));
        let refill = Instant::now() < deadline;
        for done in &completions {
            done.result.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
            committed += 1;
        }
        let replace = if refill { completions.len() } else { 0 };
        drop(completions);
        for _ in 0..replace {
            prepare_read(cluster, table, size, &mut executor, &mut state)?;
        }
    }
    Ok(committed as f64 / begun.elapsed().as_secs_f64())
}

fn prepare_read<'c>(
    cluster: &'c Cluster,
    table: &Table,
    size: u32,
    executor: &mut rndb_api::AsyncExecutor<'c>,
    state: &mut u64,
) -> Result<(), rndb_api::Error> {
    let mut tx = cluster.start_transaction()?;
    tx.read(table, &[next_key(state, size)], LockMode::CommittedRead)?;
    executor.prepare(tx, ExecType::Commit, AbortOption::AbortOnError, 0)
}

/// Transactions per second with `level` tasks on one current-thread runtime, each running one
/// read transaction after another. The tasks are `tokio::spawn`ed, as an application's are (a
/// `LocalSet` would cost a write to the runtime's eventfd for each task the link's reader
/// wakes).
fn tokio_level(
    cluster: &'static Cluster,
    table: &Table,
    size: u32,
    level: u32,
    duration: Duration,
) -> anyhow::Result<f64> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let committed = Arc::new(AtomicU64::new(0));
    let begun = Instant::now();
    let deadline = begun + duration;
    let db = cluster.tokio();
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for task in 0..level {
            let (committed, table) = (committed.clone(), table.clone());
            tasks.push(tokio::spawn(async move {
                let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ (u64::from(task) << 20 | 1);
                while Instant::now() < deadline {
                    let mut tx = db.start_transaction();
                    tx.read(
                        &table,
                        &[next_key(&mut state, size)],
                        LockMode::CommittedRead,
                    )?;
                    tx.execute(ExecType::Commit).await?;
                    committed.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<_, rndb_api::Error>(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(committed.load(Ordering::Relaxed) as f64 / begun.elapsed().as_secs_f64())
}
