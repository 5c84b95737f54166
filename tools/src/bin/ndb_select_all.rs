//! `ndb_select_all`: prints every row of a table, like MySQL Cluster's `ndb_select_all`.
//!
//! `ndb_select_all -f config.ini TABLE` prints a header of column names, one line per row
//! (columns separated by `--delimiter`, a tab by default; NULL as `[NULL]`, Varbinary as `0x`
//! and hex digits), then `N rows returned`. NDB's options where they map:
//!
//! - `-l/--lock=N`: 0 committed read (no lock, the default), 1 shared locks, 2 exclusive ones.
//! - `-o/--order=INDEX`: read through that ordered index, in its order; `-z/--descending`
//!   reverses it.
//! - `-h/--header=0|1`, `-D/--delimiter=STRING`, `-x/--useHexFormat` (integers as `H'...`),
//!   `--nodata` (count only), `-p/--parallelism=N`.
//!
//! Help is `-?` or `--help`, since `-h` is NDB's `--header`.

#![forbid(unsafe_code)]

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{ArgAction, Parser};
use rndb_api::{Cluster, Scan, ScanOptions, Transaction};
use rndb_tools::csv::unescape_option;
use rndb_tools::values::{format_value, IntegerFormat};
use rndb_tools::{lock_mode, parse_bool, run_main, ConnectArgs};

/// Print the rows of an rndb table, like NDB's ndb_select_all.
#[derive(Debug, Parser)]
#[command(name = "ndb_select_all", version, disable_help_flag = true)]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Lock taken on each row read: 0 none (committed read), 1 shared, 2 exclusive.
    #[arg(short = 'l', long, default_value_t = 0, value_name = "N")]
    lock: u8,
    /// Read through this ordered index, in its order.
    #[arg(short = 'o', long, value_name = "INDEX")]
    order: Option<String>,
    /// With --order: from the highest key to the lowest.
    #[arg(short = 'z', long, requires = "order")]
    descending: bool,
    /// Print the header line of column names (0 or FALSE: no header).
    #[arg(short = 'h', long, default_value = "1", num_args = 0..=1,
          default_missing_value = "1", value_parser = parse_bool, value_name = "0|1")]
    header: bool,
    /// Column separator (C escapes such as \t are read).
    #[arg(short = 'D', long, default_value = "\\t", value_name = "STRING")]
    delimiter: String,
    /// Print integers in hexadecimal (H'...).
    #[arg(short = 'x', long = "useHexFormat", visible_alias = "use-hex-format")]
    use_hex_format: bool,
    /// Print no rows, only how many there are.
    #[arg(long)]
    nodata: bool,
    /// Fragments scanned at once (0: all).
    #[arg(short = 'p', long, default_value_t = 0, value_name = "N")]
    parallelism: u16,
    /// Print help.
    #[arg(short = '?', long, action = ArgAction::Help)]
    help: Option<bool>,
    /// The table to print.
    #[arg(value_name = "TABLE")]
    table: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("ndb_select_all", || run(&args))
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let delimiter =
        String::from_utf8(unescape_option(&args.delimiter).map_err(anyhow::Error::msg)?)
            .context("--delimiter is not UTF-8")?;
    let options = ScanOptions {
        lock: lock_mode(args.lock)?,
        parallelism: args.parallelism,
        sorted: args.order.is_some(),
        descending: args.descending,
        ..ScanOptions::default()
    };
    let cluster = args.connect.connect()?;
    let table = cluster
        .get_table(&args.table)
        .with_context(|| format!("table {}", args.table))?;
    let mut tx = cluster.start_transaction()?;
    let scan = open_scan(&cluster, &mut tx, &table, args.order.as_deref(), &options)?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if args.header && !args.nodata {
        let names: Vec<&str> = table
            .def()
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        writeln!(out, "{}", names.join(&delimiter))?;
    }
    let integers = if args.use_hex_format {
        IntegerFormat::Hex
    } else {
        IntegerFormat::Decimal
    };
    let mut rows = 0u64;
    let mut line = String::new();
    for row in scan {
        let row = row.with_context(|| format!("scan table {} after {rows} rows", args.table))?;
        rows += 1;
        if args.nodata {
            continue;
        }
        line.clear();
        for (i, (value, column)) in row.iter().zip(&table.def().columns).enumerate() {
            if i > 0 {
                line.push_str(&delimiter);
            }
            format_value(&mut line, value, column, integers);
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
    }
    writeln!(out, "\n{rows} rows returned")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// A full-table scan, or with `order` a sorted scan of that ordered index.
fn open_scan<'c>(
    cluster: &'c Cluster,
    tx: &mut Transaction<'c>,
    table: &rndb_api::Table,
    order: Option<&str>,
    options: &ScanOptions,
) -> anyhow::Result<Scan<'c>> {
    let Some(index_name) = order else {
        return tx.scan_table(table, options).context("scan");
    };
    let index = cluster
        .get_index(table, index_name)
        .with_context(|| format!("--order={index_name}"))?;
    if index.kind() != rndb_api::IndexKind::Ordered {
        bail!("--order={index_name}: a unique hash index has no order; name an ordered index");
    }
    tx.scan_index(&index, options).context("scan")
}
