//! `ndb_drop_table`: drops tables, like MySQL Cluster's `ndb_drop_table`.
//!
//! `ndb_drop_table -f config.ini TABLE...` prints `Dropping table T...OK` for each; a table
//! that does not exist prints NDB's error 709, the others are still dropped, and the exit
//! status is 1.

#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use rndb_tools::{run_main, ConnectArgs};

/// Drop rndb tables (and their indexes and rows), like NDB's ndb_drop_table.
#[derive(Debug, Parser)]
#[command(name = "ndb_drop_table", version)]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// The tables to drop.
    #[arg(value_name = "TABLE", required = true)]
    tables: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("ndb_drop_table", || run(&args))
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let cluster = args.connect.connect()?;
    let mut code = ExitCode::SUCCESS;
    for name in &args.tables {
        print!("Dropping table {name}...");
        let _ = std::io::stdout().flush();
        match cluster.drop_table(name) {
            Ok(()) => println!("OK"),
            Err(err) => {
                println!();
                eprintln!("ndb_drop_table: drop table {name}: {err}");
                code = ExitCode::FAILURE;
            }
        }
    }
    Ok(code)
}
