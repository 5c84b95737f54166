//! `ndb_create_table`: creates a table and its indexes from one MySQL `CREATE TABLE`
//! statement (the subset `rndb_api::ddl` reads). NDB creates tables through a MySQL server;
//! rndb has none, so this tool takes the statement itself.
//!
//! `ndb_create_table -f config.ini "CREATE TABLE t (id INT UNSIGNED NOT NULL PRIMARY KEY, ...)"`,
//! or `-` to read the statement from stdin. It prints the table and indexes it created; a
//! statement outside the subset is refused naming what is not supported, and nothing is
//! created.

#![forbid(unsafe_code)]

use std::io::Read;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use rndb_api::ddl;
use rndb_tools::{run_main, ConnectArgs};

/// Create an rndb table from a CREATE TABLE statement.
#[derive(Debug, Parser)]
#[command(name = "ndb_create_table", version)]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// The CREATE TABLE statement, or `-` to read it from stdin.
    #[arg(value_name = "SQL")]
    statement: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("ndb_create_table", || run(&args))
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let text = if args.statement == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("read the statement from stdin")?;
        text
    } else {
        args.statement.clone()
    };
    // Parsed before connecting: a statement outside the subset needs no cluster to be refused.
    let statement = ddl::parse_create_table(&text)?;
    let cluster = args.connect.connect()?;
    let table = statement
        .create(&cluster)
        .with_context(|| format!("create table {}", statement.table.name))?;
    println!(
        "Created table {} (id {}, {} columns)",
        table.name(),
        table.id(),
        table.def().columns.len()
    );
    for index in &statement.indexes {
        println!(
            "Created {} index {} ({})",
            match index.kind {
                rndb_api::IndexKind::Unique => "unique hash",
                _ => "ordered",
            },
            index.name,
            index.columns.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
