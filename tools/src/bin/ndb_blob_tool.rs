//! `ndb_blob_tool`: checks and repairs the parts of a table's BLOB and TEXT columns, like
//! MySQL Cluster's ndb_blob_tool.
//!
//! `ndb_blob_tool -f config.ini ACTION... TABLE [COLUMN...]`, the actions NDB's:
//!
//! - `--check-orphans`: counts the parts (rows of a column's parts table, `NDB$BLOB_<t>_<c>`)
//!   that no value needs: their row is gone, or its value is shorter than the part's place.
//!   `--dump-file FILE` writes each one to FILE (column, key values, part number, tab
//!   separated); `--delete-orphans` deletes them.
//! - `--check-missing`: counts the parts a value's head names and its parts table lacks;
//!   `--add-missing` writes each one, of spaces, at its length (NDB's repair: the value's
//!   length is right again, its bytes there are lost).
//!
//! With no COLUMN, every BLOB and TEXT column of TABLE (a TINYBLOB or TINYTEXT has no parts).
//! The tables are read committed, by scans and key reads, 256 rows a round trip. A repair
//! checks again, in the transaction that deletes or writes a part, with the row read under a
//! shared lock, so that a value written meanwhile keeps its parts. Prints per column the totals
//! (`total parts`, `orphan parts`, `missing parts`, and what was deleted or added);
//! `--verbose` also its progress. Exits 1 on an error, 0 otherwise (orphans or missing parts
//! found included, as NDB's).

#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use rndb_api::{AbortOption, Cluster, ExecType, LockMode, ScanOptions, Table, Value};
use rndb_protocol::blob::{self, BlobSize};
use rndb_tools::values::{format_value, IntegerFormat};
use rndb_tools::{run_main, ConnectArgs};

/// Rows read or written in one round trip.
const BATCH: usize = 256;

/// Check and repair the parts of an rndb table's BLOB and TEXT columns, like NDB's
/// ndb_blob_tool.
#[derive(Debug, Parser)]
#[command(name = "ndb_blob_tool", version)]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Count parts that no value needs (their row is gone, or its value is shorter).
    #[arg(long)]
    check_orphans: bool,
    /// Delete the parts that no value needs.
    #[arg(long)]
    delete_orphans: bool,
    /// Write each part that no value needs to this file: column, key values, part number.
    #[arg(long, value_name = "FILE")]
    dump_file: Option<PathBuf>,
    /// Count the parts values' heads name and their parts tables lack.
    #[arg(long)]
    check_missing: bool,
    /// Write each missing part, of spaces.
    #[arg(long)]
    add_missing: bool,
    /// Print progress.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// The table.
    #[arg(value_name = "TABLE")]
    table: String,
    /// Its BLOB and TEXT columns to work on (all when none is named).
    #[arg(value_name = "COLUMN")]
    columns: Vec<String>,
}

impl Args {
    fn orphans(&self) -> bool {
        self.check_orphans || self.delete_orphans || self.dump_file.is_some()
    }

    fn missing(&self) -> bool {
        self.check_missing || self.add_missing
    }
}

/// A BLOB or TEXT column with a parts table.
struct Column {
    index: usize,
    name: String,
    size: BlobSize,
    parts: Table,
}

/// A part, by its row's key and its number.
type Part = (Vec<Value>, u32);

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("ndb_blob_tool", || run(&args))
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if !args.orphans() && !args.missing() {
        bail!(
            "nothing to do: give --check-orphans, --delete-orphans, --dump-file, \
             --check-missing or --add-missing"
        );
    }
    let mut dump = match &args.dump_file {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?,
        )),
        None => None,
    };
    let cluster = args.connect.connect()?;
    if args.verbose {
        println!("connected");
    }
    let table =
        (cluster.get_table(&args.table)).with_context(|| format!("table {}", args.table))?;
    let columns = blob_columns(&table, &args.columns)?;
    if args.verbose {
        println!("processing {} blobs", columns.len());
    }
    for (i, column) in columns.iter().enumerate() {
        if args.verbose {
            println!(
                "processing blob #{i} {} {}",
                column.name,
                column.parts.name()
            );
        }
        if args.orphans() {
            let (total, orphans) = find_orphans(&cluster, &table, column)?;
            println!("{}: total parts: {total}", column.name);
            println!("{}: orphan parts: {}", column.name, orphans.len());
            if let Some(dump) = dump.as_mut() {
                for (key, part) in &orphans {
                    writeln!(dump, "{}", dump_line(&table, column, key, *part))
                        .context("write the dump file")?;
                }
            }
            if args.delete_orphans {
                let deleted = delete_orphans(&cluster, &table, column, &orphans)?;
                println!("{}: deleted orphan parts: {deleted}", column.name);
            }
        }
        if args.missing() {
            let missing = find_missing(&cluster, &table, column)?;
            println!("{}: missing parts: {}", column.name, missing.len());
            if args.add_missing {
                let added = add_missing(&cluster, &table, column, &missing)?;
                println!("{}: added missing parts: {added}", column.name);
            }
        }
    }
    if let Some(mut dump) = dump {
        dump.flush().context("write the dump file")?;
    }
    if args.verbose {
        println!("disconnected");
    }
    Ok(ExitCode::SUCCESS)
}

/// The BLOB and TEXT columns of `table` named in `names` (all when empty) that have parts
/// tables; a name that is no such column is an error.
fn blob_columns(table: &Table, names: &[String]) -> anyhow::Result<Vec<Column>> {
    let parts_tables = table.blob_parts_tables();
    let def = table.def();
    let mut columns = Vec::new();
    for (index, c) in def.columns.iter().enumerate() {
        let Some(size) = blob::size_of(c.column_type) else {
            continue;
        };
        if !names.is_empty() && !names.contains(&c.name) {
            continue;
        }
        // A TINYBLOB or TINYTEXT holds its whole value in the row: nothing to check.
        if let Some((_, parts)) = parts_tables.iter().find(|(i, _)| *i == index) {
            let (name, parts) = (c.name.clone(), parts.clone());
            columns.push(Column {
                index,
                name,
                size,
                parts,
            });
        }
    }
    for name in names {
        let found = def.columns.iter().find(|c| &c.name == name);
        if found.is_none_or(|c| blob::size_of(c.column_type).is_none()) {
            bail!(
                "{name} is not a BLOB or TEXT column of table {}",
                table.name()
            );
        }
    }
    Ok(columns)
}

/// The parts `column`'s value in `row` (as stored: a head) has; 0 for NULL.
fn parts_of(table: &Table, column: &Column, row: &[Value]) -> anyhow::Result<u64> {
    match &row[column.index] {
        Value::Null => Ok(0),
        Value::Varbinary(head) => blob::head_length(head, column.size)
            .map(|length| column.size.parts(length))
            .ok_or_else(|| anyhow!("{}.{}: a head that is not one", table.name(), column.name)),
        other => bail!("{}.{}: a head that is {other:?}", table.name(), column.name),
    }
}

/// The bytes of part `part` of a value of `length` bytes.
fn part_length(size: BlobSize, length: u64, part: u64) -> usize {
    let start = blob::INLINE_BYTES as u64 + part * u64::from(size.part_bytes());
    let end = (start + u64::from(size.part_bytes())).min(length);
    end.saturating_sub(start) as usize
}

/// Every part of `column` (the total) and those no value needs: the parts table scanned, and
/// each part's row read, a batch at a time.
fn find_orphans(
    cluster: &Cluster,
    table: &Table,
    column: &Column,
) -> anyhow::Result<(u64, Vec<Part>)> {
    let keys = table.key_columns().len();
    let mut all: Vec<Part> = Vec::new();
    let mut tx = cluster.start_transaction()?;
    for row in tx.scan_table(&column.parts, &ScanOptions::default())? {
        let row = row.with_context(|| format!("scan {}", column.parts.name()))?;
        let Some(Value::UInt32(part)) = row.get(keys) else {
            bail!("{}: a row without its part number", column.parts.name());
        };
        all.push((row[..keys].to_vec(), *part));
    }
    drop(tx);
    let total = all.len() as u64;
    let mut orphans = Vec::new();
    for batch in all.chunks(BATCH) {
        let counts = part_counts(cluster, table, column, batch, LockMode::CommittedRead)?;
        for ((key, part), count) in batch.iter().zip(counts) {
            if count.is_none_or(|n| u64::from(*part) >= n) {
                orphans.push((key.clone(), *part));
            }
        }
    }
    Ok((total, orphans))
}

/// For each part of `batch`, the parts its row's value has now (`None`: no such row), its
/// row read `lock` in a transaction of its own, committed.
fn part_counts(
    cluster: &Cluster,
    table: &Table,
    column: &Column,
    batch: &[Part],
    lock: LockMode,
) -> anyhow::Result<Vec<Option<u64>>> {
    let mut tx = cluster.start_transaction()?;
    let counts = read_counts(&mut tx, table, column, batch, lock)?;
    tx.execute(ExecType::Commit)?;
    Ok(counts)
}

/// `part_counts` in `tx`, left open.
fn read_counts(
    tx: &mut rndb_api::Transaction<'_>,
    table: &Table,
    column: &Column,
    batch: &[Part],
    lock: LockMode,
) -> anyhow::Result<Vec<Option<u64>>> {
    let raw = table.raw();
    let mut ops = Vec::with_capacity(batch.len());
    for (key, _) in batch {
        ops.push(tx.read(&raw, key, lock)?);
    }
    tx.execute_with(ExecType::NoCommit, AbortOption::IgnoreError)?;
    let mut counts = Vec::with_capacity(batch.len());
    for op in ops {
        counts.push(match (tx.row(op), tx.op_error(op)) {
            (Some(row), _) => Some(parts_of(table, column, row)?),
            (None, Some(e)) if e.code == 626 => None,
            (None, Some(e)) => bail!("read a row of {}: {e}", table.name()),
            (None, None) => bail!("read a row of {}: no answer", table.name()),
        });
    }
    Ok(counts)
}

/// Deletes the `orphans` that are orphans still: each batch's rows read again under a shared
/// lock in the transaction that deletes its parts. Returns how many were deleted.
fn delete_orphans(
    cluster: &Cluster,
    table: &Table,
    column: &Column,
    orphans: &[Part],
) -> anyhow::Result<u64> {
    let mut deleted = 0;
    for batch in orphans.chunks(BATCH) {
        let mut tx = cluster.start_transaction()?;
        let counts = read_counts(&mut tx, table, column, batch, LockMode::Read)?;
        let mut ops = Vec::new();
        for ((key, part), count) in batch.iter().zip(counts) {
            if count.is_none_or(|n| u64::from(*part) >= n) {
                ops.push(tx.delete(&column.parts, &part_key(key, *part))?);
            }
        }
        tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)?;
        for op in ops {
            match tx.op_error(op) {
                None => deleted += 1,
                // Deleted meanwhile (by another run, or a delete of its row).
                Some(e) if e.code == 626 => {}
                Some(e) => bail!("delete a part of {}: {e}", column.parts.name()),
            }
        }
    }
    Ok(deleted)
}

/// The parts that values of `column` need and its parts table lacks: `table` scanned, and
/// each needed part read, a batch at a time. Each with its value's length.
fn find_missing(
    cluster: &Cluster,
    table: &Table,
    column: &Column,
) -> anyhow::Result<Vec<(Vec<Value>, u32, u64)>> {
    let mut needed: Vec<(Vec<Value>, u32, u64)> = Vec::new();
    let mut tx = cluster.start_transaction()?;
    for row in tx.scan_table(&table.raw(), &ScanOptions::default())? {
        let row = row.with_context(|| format!("scan {}", table.name()))?;
        let count = parts_of(table, column, &row)?;
        let Value::Varbinary(head) = &row[column.index] else {
            continue;
        };
        let length = blob::head_length(head, column.size).unwrap_or(0);
        let key: Vec<Value> = table
            .key_columns()
            .iter()
            .map(|&c| row[c].clone())
            .collect();
        for part in 0..count {
            let part = u32::try_from(part).context("a part number past u32")?;
            needed.push((key.clone(), part, length));
        }
    }
    drop(tx);
    let mut missing = Vec::new();
    for batch in needed.chunks(BATCH) {
        let mut tx = cluster.start_transaction()?;
        let mut ops = Vec::with_capacity(batch.len());
        for (key, part, _) in batch {
            let op = tx.read(
                &column.parts,
                &part_key(key, *part),
                LockMode::CommittedRead,
            )?;
            ops.push(op);
        }
        tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)?;
        for (needed, op) in batch.iter().zip(ops) {
            match tx.op_error(op) {
                None => {}
                Some(e) if e.code == 626 => missing.push(needed.clone()),
                Some(e) => bail!("read a part of {}: {e}", column.parts.name()),
            }
        }
    }
    Ok(missing)
}

/// Writes each of `missing` still missing, of spaces, at its length: each batch's rows read
/// again under a shared lock in the transaction that inserts the parts (a value changed
/// meanwhile is left alone). Returns how many were written.
fn add_missing(
    cluster: &Cluster,
    table: &Table,
    column: &Column,
    missing: &[(Vec<Value>, u32, u64)],
) -> anyhow::Result<u64> {
    let raw = table.raw();
    let mut added = 0;
    for batch in missing.chunks(BATCH) {
        let mut tx = cluster.start_transaction()?;
        let mut reads = Vec::with_capacity(batch.len());
        for (key, _, _) in batch {
            reads.push(tx.read(&raw, key, LockMode::Read)?);
        }
        tx.execute_with(ExecType::NoCommit, AbortOption::IgnoreError)?;
        let mut inserts = Vec::new();
        for ((key, part, length), read) in batch.iter().zip(reads) {
            let Some(row) = tx.row(read) else { continue };
            let same = match &row[column.index] {
                Value::Varbinary(head) => blob::head_length(head, column.size) == Some(*length),
                _ => false,
            };
            if !same {
                continue;
            }
            let data = vec![b' '; part_length(column.size, *length, u64::from(*part))];
            let mut part_row = part_key(key, *part);
            part_row.push(Value::Varbinary(data));
            inserts.push(tx.insert(&column.parts, &part_row)?);
        }
        tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)?;
        for op in inserts {
            match tx.op_error(op) {
                None => added += 1,
                // Written meanwhile.
                Some(e) if e.code == 630 => {}
                Some(e) => bail!("write a part of {}: {e}", column.parts.name()),
            }
        }
    }
    Ok(added)
}

/// A parts table's key: the row's key, then the part number.
fn part_key(key: &[Value], part: u32) -> Vec<Value> {
    let mut part_key = key.to_vec();
    part_key.push(Value::UInt32(part));
    part_key
}

/// A line of the dump file: the column, each key value as `ndb_select_all` prints it, the part
/// number, tab separated.
fn dump_line(table: &Table, column: &Column, key: &[Value], part: u32) -> String {
    let mut line = column.name.clone();
    let def = table.def();
    for (&c, value) in table.key_columns().iter().zip(key) {
        line.push('\t');
        format_value(&mut line, value, &def.columns[c], IntegerFormat::Decimal);
    }
    let _ = write!(line, "\t{part}");
    line
}
