//! `ndb_delete_all`: deletes every row of tables, like MySQL Cluster's `ndb_delete_all`.
//!
//! `ndb_delete_all -f config.ini TABLE...` prints `Deleting all from T...OK (N rows deleted)`
//! for each (NDB prints no count). The
//! rows are read by a committed-read scan and deleted by primary key, many transactions in
//! flight, [`DELETES_PER_TRANSACTION`] rows each; a row inserted meanwhile may stay. With
//! `-t/--transactional`, one transaction scans with exclusive locks and deletes every row
//! (all or nothing; a large table may exceed the data node's MaxNoOfConcurrentOperations).

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::Parser;
use rndb_api::{
    AbortOption, Cluster, Error, ExecType, LockMode, OpId, ScanOptions, Table, Transaction, Value,
};
use rndb_tools::{run_main, ConnectArgs};

/// Rows deleted by one transaction of the non-transactional delete.
const DELETES_PER_TRANSACTION: usize = 128;
/// Delete transactions kept in flight.
const DELETES_IN_FLIGHT: usize = 32;
/// NDB's "Tuple did not exist": a row deleted by someone else since the scan saw it.
const NO_SUCH_ROW: u32 = 626;

/// Delete every row of rndb tables, like NDB's ndb_delete_all.
#[derive(Debug, Parser)]
#[command(name = "ndb_delete_all", version)]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Delete in one transaction: every row or none.
    #[arg(short = 't', long)]
    transactional: bool,
    /// The tables to empty.
    #[arg(value_name = "TABLE", required = true)]
    tables: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("ndb_delete_all", || run(&args))
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let cluster = args.connect.connect()?;
    let mut code = ExitCode::SUCCESS;
    for name in &args.tables {
        print!("Deleting all from {name}...");
        let _ = std::io::stdout().flush();
        let result = cluster
            .get_table(name)
            .map_err(|e| anyhow!("table {name}: {e}"))
            .and_then(|table| {
                if args.transactional {
                    delete_in_one_transaction(&cluster, &table)
                } else {
                    delete_in_batches(&cluster, &table)
                }
            });
        match result {
            Ok(rows) => println!("OK ({rows} rows deleted)"),
            Err(err) => {
                println!();
                eprintln!("ndb_delete_all: {err:#}");
                code = ExitCode::FAILURE;
            }
        }
    }
    Ok(code)
}

/// The primary key of a row the scan returned.
fn key_of(table: &Table, row: &[Value]) -> Vec<Value> {
    table
        .key_columns()
        .iter()
        .map(|&i| row[i].clone())
        .collect()
}

fn delete_in_one_transaction(cluster: &Cluster, table: &Table) -> anyhow::Result<u64> {
    let mut tx = cluster.start_transaction()?;
    let options = ScanOptions {
        lock: LockMode::Exclusive,
        ..ScanOptions::default()
    };
    let mut keys = Vec::new();
    for row in tx.scan_table(table, &options).context("scan")? {
        keys.push(key_of(table, &row.context("scan")?));
    }
    for key in &keys {
        tx.delete(table, key)?;
    }
    tx.execute(ExecType::Commit)
        .context("commit the deletes (nothing was deleted)")?;
    Ok(keys.len() as u64)
}

/// Scans with committed reads and deletes what it sees, many transactions in flight. Returns
/// the rows deleted; the first error stops it, naming how many were deleted before.
fn delete_in_batches(cluster: &Cluster, table: &Table) -> anyhow::Result<u64> {
    let mut scan_tx = cluster.start_transaction()?;
    let scan = scan_tx
        .scan_table(table, &ScanOptions::default())
        .context("scan")?;
    let mut executor = cluster.async_executor();
    let in_flight = DELETES_IN_FLIGHT.min(executor.limit()).max(1);
    let mut deleted = 0u64;
    let mut first_error: Option<Error> = None;
    // The open batch, and the ops of each batch in flight by its tag.
    let mut batch: Option<(Transaction<'_>, Vec<OpId>)> = None;
    let mut ops_in_flight: HashMap<u64, Vec<OpId>> = HashMap::new();
    let mut next_tag = 0u64;
    let mut rows = scan;
    loop {
        let row = if first_error.is_none() {
            rows.next()
        } else {
            None
        };
        let at_end = row.is_none();
        if let Some(row) = row {
            let row = match row {
                Ok(row) => row,
                Err(e) => {
                    first_error = Some(e);
                    continue;
                }
            };
            let (tx, ops) = match batch.as_mut() {
                Some(batch) => batch,
                None => batch.insert((cluster.start_transaction()?, Vec::new())),
            };
            ops.push(tx.delete(table, &key_of(table, &row))?);
        }
        let full = batch
            .as_ref()
            .is_some_and(|(_, ops)| ops.len() >= DELETES_PER_TRANSACTION);
        if full || at_end {
            if let Some((tx, ops)) = batch.take() {
                next_tag += 1;
                ops_in_flight.insert(next_tag, ops);
                executor.prepare(tx, ExecType::Commit, AbortOption::IgnoreError, next_tag)?;
            }
        }
        while executor.len() >= in_flight || (at_end && !executor.is_empty()) {
            for done in executor.send_poll(1, Duration::from_secs(1)) {
                let ops = ops_in_flight.remove(&done.tag).unwrap_or_default();
                match done.result {
                    Ok(()) => deleted += count_deleted(&done.transaction, &ops, &mut first_error),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        if at_end {
            break;
        }
    }
    match first_error {
        None => Ok(deleted),
        Some(e) => Err(anyhow!("{e} ({deleted} rows were deleted before it)")),
    }
}

/// Rows a completed delete transaction deleted (a row already gone is not an error).
fn count_deleted(tx: &Transaction<'_>, ops: &[OpId], first_error: &mut Option<Error>) -> u64 {
    let mut deleted = 0;
    for &op in ops {
        match tx.op_error(op) {
            None => deleted += 1,
            Some(e) if e.code == NO_SUCH_ROW => {}
            Some(e) => {
                first_error.get_or_insert(Error::Ndb(e.clone()));
            }
        }
    }
    deleted
}
