//! `ndb_restore`: restores an online backup (ndb_mgm's START BACKUP), like MySQL Cluster's
//! `ndb_restore`.
//!
//! `ndb_restore -c HOST:PORT -n NODE -b ID [-m] [-r] [--rebuild-indexes] --backup-path DIR`
//! reads data node NODE's files of backup ID in DIR (the backup's `BACKUP-<ID>` directory):
//! with `-m` it creates the backup's tables and ordered indexes (once, from any node's files),
//! with `-r` it writes the node's rows and then applies its log up to the backup's stop GCI,
//! with `--rebuild-indexes` it creates the indexes not yet there, the unique ones among them.
//! Run `-r` once per data node of the backup, as with NDB (the nodes' files hold disjoint
//! fragments), and `--rebuild-indexes` after the last: a unique index must wait for every
//! row, since a backup's fuzzy scan may hold two rows with one unique value between the data
//! and the log, and the nodes' files are restored one after another. `--disable-indexes` makes
//! `-m` create no index at all. `--print-data` and `--print-meta` print the node's rows (as a
//! restore leaves them) and the schema without a cluster; `--include-tables` and
//! `--exclude-tables` choose tables.
//!
//! Every file is checked before anything is written: its header, every record's CRC, its END
//! record's count, and the counts and sizes the control file gives; a damaged or incomplete
//! file is an error naming the file (and the offset).
//! Rows go in with NDB's write (insert or overwrite), so that a restore run twice ends the
//! same; a logged delete of a row already gone is not an error.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use rndb_api::{AbortOption, Cluster, ExecType, IndexDef, OpId, Table, Transaction, Value};
use rndb_ndbd::ndbfs::backup::{self as layout, BackupCtl, BackupRow};
use rndb_ndbd::ndbfs::format::kind;
use rndb_protocol::codec::Writer;
use rndb_protocol::schema::encode_values;
use rndb_protocol::signals::{IndexInfo, TableInfo};
use rndb_protocol::IndexKind;
use rndb_tools::values::{format_value, IntegerFormat};
use rndb_tools::{run_main, ConnectArgs};

/// Rows written by one transaction.
const ROWS_PER_TRANSACTION: usize = 128;
/// NDB's "Tuple did not exist": a logged delete of a row that is already gone.
const NO_SUCH_ROW: u32 = 626;

/// Restore an rndb online backup, like NDB's ndb_restore.
#[derive(Debug, Parser)]
#[command(name = "ndb_restore", version)]
struct Args {
    /// The cluster's config.ini (needed with -m, -r, --rebuild-indexes).
    #[arg(
        short = 'f',
        long = "config-file",
        visible_alias = "config_file",
        value_name = "FILE"
    )]
    config_file: Option<PathBuf>,
    /// Fetch the config from ndb_mgmd: `host[:port][,host[:port]]` (port 1186 by default).
    #[arg(
        short = 'c',
        long = "ndb-connectstring",
        visible_aliases = ["connect-string", "ndb_connectstring"],
        value_name = "CONNECTSTRING",
        conflicts_with = "config_file"
    )]
    connectstring: Option<String>,
    /// Connect in this API slot; by default the first free slot that admits this host.
    #[arg(long = "ndb-nodeid", visible_alias = "ndb_nodeid", value_name = "N")]
    ndb_nodeid: Option<u16>,
    /// The data node whose backup files to restore.
    #[arg(short = 'n', long = "nodeid", value_name = "ID")]
    nodeid: u32,
    /// The backup to restore.
    #[arg(short = 'b', long = "backupid", value_name = "ID")]
    backupid: u32,
    /// Create the backup's tables and indexes.
    #[arg(short = 'm', long = "restore-meta", visible_alias = "restore_meta")]
    restore_meta: bool,
    /// Write the node's rows and apply its log.
    #[arg(short = 'r', long = "restore-data", visible_alias = "restore_data")]
    restore_data: bool,
    /// Create the backup's indexes that are not there yet (unique indexes: after every
    /// node's data is restored).
    #[arg(long = "rebuild-indexes", visible_alias = "rebuild_indexes")]
    rebuild_indexes: bool,
    /// With -m, create no index at all (create them later with --rebuild-indexes).
    #[arg(long = "disable-indexes", visible_alias = "disable_indexes")]
    disable_indexes: bool,
    /// Print the node's rows as a restore leaves them (its data, then its log up to the stop
    /// GCP), tab-separated, table by table; needs no cluster.
    #[arg(long = "print-data", visible_alias = "print_data")]
    print_data: bool,
    /// Print the backup's tables and indexes; needs no cluster.
    #[arg(long = "print-meta", visible_alias = "print_meta")]
    print_meta: bool,
    /// Only these tables (comma-separated; NDB's `db.table` form is read as `table`).
    #[arg(
        long = "include-tables",
        visible_alias = "include_tables",
        value_name = "TABLES",
        value_delimiter = ','
    )]
    include_tables: Vec<String>,
    /// All tables but these (comma-separated).
    #[arg(
        long = "exclude-tables",
        visible_alias = "exclude_tables",
        value_name = "TABLES",
        value_delimiter = ','
    )]
    exclude_tables: Vec<String>,
    /// The backup's directory (`BACKUP-<ID>` under BackupDataDir/BACKUP).
    #[arg(
        long = "backup-path",
        visible_alias = "backup_path",
        value_name = "DIR",
        default_value = "."
    )]
    backup_path: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("ndb_restore", || run(&args))
}

/// A backup file read whole.
struct File {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl File {
    fn read(dir: &Path, name: &str) -> anyhow::Result<File> {
        let path = dir.join(name);
        println!("Opening file '{}'", path.display());
        let bytes = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
        Ok(File { path, bytes })
    }

    fn rows(&self, magic: [u8; 8], id: u32, node: u32) -> anyhow::Result<Vec<BackupRow<'_>>> {
        layout::read_rows(&self.bytes, magic, id, node)
            .map_err(|why| anyhow!("{}: {why}", self.path.display()))
    }
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let (id, node) = (args.backupid, args.nodeid);
    let dir = &args.backup_path;
    println!("Nodeid = {node}");
    println!("Backup Id = {id}");
    println!("backup path = {}", dir.display());
    let ctl_file = File::read(dir, &layout::ctl_file(id, node))?;
    let mut ctl = BackupCtl::from_file(&ctl_file.bytes, id, node)
        .map_err(|why| anyhow!("{}: {why}", ctl_file.path.display()))?;
    println!("Stop GCP of Backup: {}", ctl.stop_gci);
    // Both row files are read and checked whole before anything is written.
    let data_file = File::read(dir, &layout::data_file(id, node))?;
    let data = data_file.rows(layout::DATA_MAGIC, id, node)?;
    let log_file = File::read(dir, &layout::log_file(id, node))?;
    let log = log_file.rows(layout::LOG_MAGIC, id, node)?;
    for (file, (rows, bytes), (said_rows, said_bytes)) in [
        (
            &data_file,
            (data.len(), data_file.bytes.len()),
            (ctl.records, ctl.data_bytes),
        ),
        (
            &log_file,
            (log.len(), log_file.bytes.len()),
            (ctl.log_records, ctl.log_bytes),
        ),
    ] {
        if (rows as u64, bytes as u64) != (said_rows, said_bytes) {
            bail!(
                "{}: {rows} records in {bytes} bytes, the control file says {said_rows} in \
                 {said_bytes}",
                file.path.display()
            );
        }
    }
    // The tables asked for, and their rows and indexes only.
    let name_of = |t: &String| t.rsplit('.').next().unwrap_or(t).to_string();
    let (include, exclude): (Vec<String>, Vec<String>) = (
        args.include_tables.iter().map(name_of).collect(),
        args.exclude_tables.iter().map(name_of).collect(),
    );
    ctl.tables.retain(|t| {
        (include.is_empty() || include.contains(&t.def.name)) && !exclude.contains(&t.def.name)
    });
    let kept: HashSet<u32> = ctl.tables.iter().map(|t| t.table_id).collect();
    ctl.indexes.retain(|i| kept.contains(&i.table_id));
    let data: Vec<_> = data
        .into_iter()
        .filter(|r| kept.contains(&r.table_id))
        .collect();
    let log: Vec<_> = (log.into_iter())
        .filter(|r| kept.contains(&r.table_id) && (r.gci >> 32) as u32 <= ctl.stop_gci)
        .collect();
    if args.print_meta {
        print_meta(&ctl);
    }
    if args.print_data {
        print_data(&ctl, &data, &log)?;
    }
    if !args.restore_meta && !args.restore_data && !args.rebuild_indexes {
        if !args.print_meta && !args.print_data {
            println!(
                "Nothing asked: give -m to create the tables, -r to restore the rows, \
                 --rebuild-indexes to create the indexes, --print-data or --print-meta"
            );
        }
        println!("\nNDBT_ProgramExit: 0 - OK");
        return Ok(ExitCode::SUCCESS);
    }
    let connect = ConnectArgs {
        config_file: args.config_file.clone(),
        connectstring: args.connectstring.clone(),
        ndb_nodeid: args.ndb_nodeid,
        database: String::new(),
    };
    let cluster = connect.connect()?;
    println!("Connected to ndb!!");
    if args.restore_meta {
        restore_meta(&cluster, &ctl, !args.disable_indexes)?;
    }
    if args.restore_data {
        let tables = target_tables(&cluster, &ctl)?;
        let mut restore = Restore::new(&cluster);
        for row in &data {
            restore.apply(&tables, row, &data_file.path)?;
        }
        restore.flush()?;
        let (tuples, mut log_entries) = (restore.applied, 0);
        for row in &log {
            restore.apply(&tables, row, &log_file.path)?;
            log_entries += 1;
        }
        restore.flush()?;
        for (table, rows) in &restore.per_table {
            println!("_____________________________________________________");
            println!("Processing data in table: {table}: {rows} records");
        }
        println!("Restored {tuples} tuples and {log_entries} log entries");
    }
    if args.rebuild_indexes {
        rebuild_indexes(&cluster, &ctl)?;
    }
    println!("\nNDBT_ProgramExit: 0 - OK");
    Ok(ExitCode::SUCCESS)
}

/// `--print-meta`: each table's columns, then each index.
fn print_meta(ctl: &BackupCtl) {
    for info in &ctl.tables {
        let columns: Vec<String> = (info.def.columns.iter())
            .map(|c| {
                let mut text = format!("{} {}", c.name, c.column_type);
                if !c.nullable {
                    text.push_str(" NOT NULL");
                }
                if c.primary_key {
                    text.push_str(" PRIMARY KEY");
                }
                text
            })
            .collect();
        println!("Table `{}`: {}", info.def.name, columns.join(", "));
    }
    for index in &ctl.indexes {
        let table = ctl.tables.iter().find(|t| t.table_id == index.table_id);
        let Some(table) = table else { continue };
        let columns: Vec<&str> = (index.columns.iter())
            .filter_map(|&c| table.def.columns.get(usize::from(c)))
            .map(|c| c.name.as_str())
            .collect();
        let kind = match index.kind {
            IndexKind::Unique => "unique",
            IndexKind::Ordered => "ordered",
        };
        println!(
            "Index `{}` on `{}`: {kind} ({})",
            index.name,
            table.def.name,
            columns.join(", ")
        );
    }
}

/// `--print-data`: the node's rows as a restore leaves them, table by table: a header of the
/// column names, then one tab-separated line per row, in key order.
fn print_data(
    ctl: &BackupCtl,
    data: &[BackupRow<'_>],
    log: &[BackupRow<'_>],
) -> anyhow::Result<()> {
    let mut tables: BTreeMap<u32, BTreeMap<Vec<u8>, Vec<Value>>> = BTreeMap::new();
    for row in data.iter().chain(log) {
        let Some(info) = ctl.tables.iter().find(|t| t.table_id == row.table_id) else {
            bail!(
                "a row of table id {}, which the backup does not hold",
                row.table_id
            );
        };
        let values =
            (row.values(&info.def)).map_err(|e| anyhow!("a row at offset {}: {e}", row.offset))?;
        let (_, key_bytes) = key_of(&info.def.key_columns(), &values);
        let rows = tables.entry(row.table_id).or_default();
        match row.kind {
            kind::DELETE => rows.remove(&key_bytes),
            _ => rows.insert(key_bytes, values),
        };
    }
    let mut out = String::new();
    for info in &ctl.tables {
        let names: Vec<&str> = info.def.columns.iter().map(|c| c.name.as_str()).collect();
        out.push_str(&format!("-- {} --\n{}\n", info.def.name, names.join("\t")));
        for values in tables
            .get(&info.table_id)
            .into_iter()
            .flat_map(|t| t.values())
        {
            for (i, value) in values.iter().enumerate() {
                if i > 0 {
                    out.push('\t');
                }
                format_value(&mut out, value, IntegerFormat::Decimal);
            }
            out.push('\n');
        }
    }
    print!("{out}");
    Ok(())
}

/// Creates the backup's tables, then (with `indexes`) their ordered indexes; a unique index
/// waits for `--rebuild-indexes`.
fn restore_meta(cluster: &Cluster, ctl: &BackupCtl, indexes: bool) -> anyhow::Result<()> {
    for info in &ctl.tables {
        cluster
            .create_table(&info.def)
            .with_context(|| format!("create table `{}`", info.def.name))?;
        println!("Successfully restored table `{}`", info.def.name);
    }
    let tables = target_tables(cluster, ctl)?;
    for index in &ctl.indexes {
        let table = tables.get(&index.table_id).map(|(info, _)| &info.def.name);
        let table = table.map_or("?", String::as_str);
        if !indexes {
            println!(
                "Index `{}` on `{table}` not created (--disable-indexes)",
                index.name
            );
        } else if index.kind == IndexKind::Unique {
            println!(
                "Unique index `{}` on `{table}` waits for --rebuild-indexes, after every \
                 node's data is restored",
                index.name
            );
        } else {
            create_index(cluster, &tables, index)?;
        }
    }
    Ok(())
}

/// Creates the backup's indexes the cluster does not have yet.
fn rebuild_indexes(cluster: &Cluster, ctl: &BackupCtl) -> anyhow::Result<()> {
    let tables = target_tables(cluster, ctl)?;
    for index in &ctl.indexes {
        let there = (tables.get(&index.table_id))
            .is_some_and(|(_, table)| cluster.get_index(table, &index.name).is_ok());
        if !there {
            create_index(cluster, &tables, index)?;
        }
    }
    Ok(())
}

/// Creates one of the backup's indexes on its table in the cluster.
fn create_index(
    cluster: &Cluster,
    tables: &BTreeMap<u32, (&TableInfo, Table)>,
    index: &IndexInfo,
) -> anyhow::Result<()> {
    let Some((info, table)) = tables.get(&index.table_id) else {
        bail!(
            "index `{}` names table id {}, which the backup does not hold",
            index.name,
            index.table_id
        );
    };
    let columns = (index.columns.iter())
        .map(|&c| {
            (info.def.columns.get(usize::from(c)))
                .map(|c| c.name.clone())
                .ok_or_else(|| anyhow!("index `{}` names column {c}", index.name))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let def = IndexDef {
        name: index.name.clone(),
        kind: index.kind,
        columns,
    };
    cluster
        .create_index(table, &def)
        .with_context(|| format!("create index `{}` on `{}`", index.name, info.def.name))?;
    println!(
        "Successfully created index `{}` on `{}`",
        index.name, info.def.name
    );
    Ok(())
}

/// The cluster's table for each of the backup's, by backup table id: same name and columns.
fn target_tables<'b>(
    cluster: &Cluster,
    ctl: &'b BackupCtl,
) -> anyhow::Result<BTreeMap<u32, (&'b TableInfo, Table)>> {
    let mut tables = BTreeMap::new();
    for info in &ctl.tables {
        let name = &info.def.name;
        let table = cluster
            .get_table(name)
            .with_context(|| format!("table `{name}` (create it first, or restore with -m)"))?;
        if table.def().columns != info.def.columns {
            bail!("table `{name}` in the cluster has other columns than in the backup");
        }
        tables.insert(info.table_id, (info, table));
    }
    Ok(tables)
}

/// A row's key values (the columns at `key_columns`) and their encoding, which names the row.
fn key_of(key_columns: &[usize], values: &[Value]) -> (Vec<Value>, Vec<u8>) {
    let key: Vec<Value> = key_columns.iter().map(|&i| values[i].clone()).collect();
    let mut bytes = Vec::new();
    encode_values(&mut Writer::new(&mut bytes), &key);
    (key, bytes)
}

/// Row writes and deletes, a transaction of [`ROWS_PER_TRANSACTION`] at a time, in order.
struct Restore<'c> {
    cluster: &'c Cluster,
    batch: Option<Transaction<'c>>,
    /// The batch's operations: each a delete or not, and where its record is.
    ops: Vec<(OpId, bool, String)>,
    /// The keys the batch touches (a second change of one goes in the next batch, after it).
    keys: HashSet<(u32, Vec<u8>)>,
    applied: u64,
    per_table: BTreeMap<String, u64>,
}

impl<'c> Restore<'c> {
    fn new(cluster: &'c Cluster) -> Restore<'c> {
        Restore {
            cluster,
            batch: None,
            ops: Vec::new(),
            keys: HashSet::new(),
            applied: 0,
            per_table: BTreeMap::new(),
        }
    }

    /// Writes (or deletes) one record's row.
    fn apply(
        &mut self,
        tables: &BTreeMap<u32, (&TableInfo, Table)>,
        row: &BackupRow<'_>,
        file: &Path,
    ) -> anyhow::Result<()> {
        let at = || format!("{} at offset {}", file.display(), row.offset);
        let Some((info, table)) = tables.get(&row.table_id) else {
            bail!(
                "{}: a row of table id {}, which the backup does not hold",
                at(),
                row.table_id
            );
        };
        let values = row
            .values(&info.def)
            .map_err(|e| anyhow!("{}: {e}", at()))?;
        let (key, key_bytes) = key_of(table.key_columns(), &values);
        if !self.keys.insert((row.table_id, key_bytes.clone())) {
            self.flush()?;
            self.keys.insert((row.table_id, key_bytes));
        }
        let tx = match &mut self.batch {
            Some(tx) => tx,
            None => self.batch.insert(self.cluster.start_transaction()?),
        };
        let delete = row.kind == kind::DELETE;
        let op = if delete {
            tx.delete(table, &key)?
        } else {
            tx.write(table, &values)?
        };
        self.ops.push((op, delete, at()));
        *self.per_table.entry(info.def.name.clone()).or_default() += 1;
        self.applied += 1;
        if self.ops.len() >= ROWS_PER_TRANSACTION {
            self.flush()?;
        }
        Ok(())
    }

    /// Commits the open batch; an operation's error (but a delete's 626) stops the restore.
    fn flush(&mut self) -> anyhow::Result<()> {
        self.keys.clear();
        let Some(mut tx) = self.batch.take() else {
            return Ok(());
        };
        let ops = std::mem::take(&mut self.ops);
        tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)
            .with_context(|| format!("commit rows up to {}", ops.last().map_or("", |o| &o.2)))?;
        for (op, delete, at) in &ops {
            match tx.op_error(*op) {
                None => {}
                Some(e) if *delete && e.code == NO_SUCH_ROW => {}
                Some(e) => bail!("{at}: {e}"),
            }
        }
        Ok(())
    }
}
