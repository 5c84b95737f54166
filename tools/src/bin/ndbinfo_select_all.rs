//! `ndbinfo_select_all`: prints ndbinfo tables, like MySQL Cluster's `ndbinfo_select_all`.
//!
//! `ndbinfo_select_all -c host:1186 memoryusage counters` prints, for each table, a line of
//! its column names, then one line per row, values separated by tabs: every live data node's
//! rows (node by node), or one data node's for the tables of the whole cluster (`tables`,
//! `columns`, `backup_id`, `error_messages`). `--loops N --delay S` prints them N times, S
//! seconds apart. A table that does not exist prints NDB's error 709 and the list of tables;
//! the others are still printed, and the exit status is 1.

#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use rndb_api::Cluster;
use rndb_tools::{run_main, ConnectArgs, NO_SUCH_TABLE};

/// Print the rows of ndbinfo tables, like NDB's ndbinfo_select_all.
#[derive(Debug, Parser)]
#[command(name = "ndbinfo_select_all", version)]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Times to print the tables.
    #[arg(short = 'l', long, default_value_t = 1, value_name = "N")]
    loops: u32,
    /// Seconds between two loops.
    #[arg(long, default_value_t = 5, value_name = "S")]
    delay: u64,
    /// The tables to print (`ndbinfo_select_all ... tables` lists them).
    #[arg(value_name = "TABLE", required = true)]
    tables: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("ndbinfo_select_all", || run(&args))
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let cluster = args.connect.connect()?;
    let mut code = ExitCode::SUCCESS;
    let stdout = std::io::stdout();
    for round in 0..args.loops {
        if round > 0 {
            std::thread::sleep(Duration::from_secs(args.delay));
        }
        for name in &args.tables {
            let mut out = stdout.lock();
            match print_table(&cluster, name, &mut out) {
                Ok(()) => {}
                Err(PrintError::Cluster(err)) if err.code() == Some(NO_SUCH_TABLE) => {
                    eprintln!("ndbinfo_select_all: {err}");
                    code = ExitCode::FAILURE;
                }
                Err(PrintError::Cluster(err)) => {
                    return Err(err).with_context(|| format!("read ndbinfo table {name}"))
                }
                Err(PrintError::Output(err)) => return Err(err).context("write to stdout"),
            }
            out.flush().context("write to stdout")?;
        }
    }
    Ok(code)
}

enum PrintError {
    Cluster(rndb_api::Error),
    Output(std::io::Error),
}

/// Prints table `name`: its column names, then its rows, tab-separated.
fn print_table(cluster: &Cluster, name: &str, out: &mut dyn Write) -> Result<(), PrintError> {
    let table = cluster.ndbinfo(name).map_err(PrintError::Cluster)?;
    let header: Vec<&str> = table.table.columns.iter().map(|c| c.name).collect();
    writeln!(out, "{}", header.join("\t")).map_err(PrintError::Output)?;
    for row in &table.rows {
        let values: Vec<String> = row.iter().map(|v| v.to_string()).collect();
        writeln!(out, "{}", values.join("\t")).map_err(PrintError::Output)?;
    }
    Ok(())
}
