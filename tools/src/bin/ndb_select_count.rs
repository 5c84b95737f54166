//! `ndb_select_count`: counts the rows of tables, like MySQL Cluster's `ndb_select_count`.
//!
//! `ndb_select_count -f config.ini TABLE...` prints `N records in table T` for each, counted
//! by a full-table scan (`--lock`, `--parallelism` as NDB's). A table that does not exist
//! prints NDB's error 709, the others are still counted, and the exit status is 1.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use rndb_api::{Cluster, ScanOptions};
use rndb_tools::{lock_mode, run_main, ConnectArgs, NO_SUCH_TABLE};

/// Count the rows of rndb tables, like NDB's ndb_select_count.
#[derive(Debug, Parser)]
#[command(name = "ndb_select_count", version)]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Lock taken on each row read: 0 none (committed read), 1 shared, 2 exclusive.
    #[arg(short = 'l', long, default_value_t = 0, value_name = "N")]
    lock: u8,
    /// Fragments scanned at once (0: all).
    #[arg(short = 'p', long, default_value_t = 0, value_name = "N")]
    parallelism: u16,
    /// The tables to count.
    #[arg(value_name = "TABLE", required = true)]
    tables: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("ndb_select_count", || run(&args))
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let options = ScanOptions {
        lock: lock_mode(args.lock)?,
        parallelism: args.parallelism,
        ..ScanOptions::default()
    };
    let cluster = args.connect.connect()?;
    let mut code = ExitCode::SUCCESS;
    for name in &args.tables {
        match count(&cluster, name, &options) {
            Ok(rows) => println!("{rows} records in table {name}"),
            Err(err) if err.code() == Some(NO_SUCH_TABLE) => {
                eprintln!("ndb_select_count: table {name}: {err}");
                code = ExitCode::FAILURE;
            }
            Err(err) => return Err(err).with_context(|| format!("count table {name}")),
        }
    }
    Ok(code)
}

/// Rows of `name`, by a full-table scan in a transaction of its own.
fn count(cluster: &Cluster, name: &str, options: &ScanOptions) -> Result<u64, rndb_api::Error> {
    let table = cluster.get_table(name)?;
    let mut tx = cluster.start_transaction()?;
    let mut rows = 0;
    for row in tx.scan_table(&table, options)? {
        row?;
        rows += 1;
    }
    Ok(rows)
}
