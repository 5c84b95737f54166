//! `ndb_restore`: restores an online backup (ndb_mgm's START BACKUP), like MySQL Cluster's
//! `ndb_restore`.
//!
//! `ndb_restore -c HOST:PORT -n NODE -b ID [-m] [-r] [--rebuild-indexes] --backup-path DIR`
//! reads data node NODE's files of backup ID in DIR (the backup's `BACKUP-<ID>` directory):
//! with `-m` it creates the backup's tables and ordered indexes (once, from any node's files),
//! with `-r` it writes the node's rows and then applies its log up to the backup's stop GCI
//! (a SNAPSHOTSTART backup's: back to its snapshot GCI, `layout::LogReplay`),
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
//! file is an error naming the file (and the offset). Files are read a record at a time, so a
//! restore takes a megabyte or so of memory for files of any size (and, for a SNAPSHOTSTART
//! backup, the key of each row changed past its snapshot GCI); rows go in transactions of
//! 128, `--parallelism` (NDB's `-p`, 128) of them in flight at once, a row's changes in file
//! order.
//! Rows go in with NDB's write (insert or overwrite), so that a restore run twice ends the
//! same; a logged delete of a row already gone is not an error.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use rndb_api::{
    AbortOption, AsyncExecutor, Cluster, ExecType, IndexDef, OpId, Table, Transaction, Value,
    NDB_EVENTS_0, SYSTAB_0,
};
use rndb_ndbd::ndbfs::backup::{self as layout, BackupCtl, BackupRow, LogReplay};
use rndb_ndbd::ndbfs::format::kind;
use rndb_protocol::codec::Writer;
use rndb_protocol::schema::encode_values;
use rndb_protocol::signals::{IndexInfo, TableInfo};
use rndb_protocol::IndexKind;
use rndb_tools::values::{format_value, IntegerFormat};
use rndb_tools::{run_main, ConnectArgs};

/// Rows written by one transaction.
const ROWS_PER_TRANSACTION: usize = 128;
/// How long a poll for batches' answers waits at most (each transaction also has the
/// cluster's request timeout, after which it is answered 4012).
const ANSWER_WAIT: Duration = Duration::from_secs(60);
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
    /// GCP, or back to a SNAPSHOTSTART backup's snapshot GCP), tab-separated, table by table;
    /// needs no cluster.
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
    /// Transactions of restored rows in flight at once (NDB's default, 128).
    #[arg(short = 'p', long, default_value_t = 128, value_name = "N")]
    parallelism: usize,
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

/// A backup's data or log file, read a record at a time (`layout::scan_rows`), so that a
/// file of any size takes a chunk of memory.
struct RowFile {
    path: PathBuf,
    magic: [u8; 8],
    id: u32,
    node: u32,
}

impl RowFile {
    fn open(dir: &Path, name: &str, magic: [u8; 8], id: u32, node: u32) -> RowFile {
        let path = dir.join(name);
        println!("Opening file '{}'", path.display());
        RowFile {
            path,
            magic,
            id,
            node,
        }
    }

    /// The file's size in bytes.
    fn len(&self) -> anyhow::Result<u64> {
        let meta = std::fs::metadata(&self.path);
        Ok(meta
            .with_context(|| format!("read {}", self.path.display()))?
            .len())
    }

    /// Hands each row record to `each`, in file order, checking the file as it goes (its
    /// header, every record's CRC, its END record); returns the rows read. An error of the
    /// file names it and the offset; one of `each` stops the scan and is returned as is.
    fn scan(
        &self,
        each: &mut dyn FnMut(BackupRow<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        let mut file = std::fs::File::open(&self.path)
            .with_context(|| format!("read {}", self.path.display()))?;
        let mut failed: Option<anyhow::Error> = None;
        let scanned = layout::scan_rows(&mut file, self.magic, self.id, self.node, &mut |row| {
            each(row).map_err(|e| {
                let text = format!("{e:#}");
                failed = Some(e);
                text
            })
        });
        scanned.map_err(|why| match failed.take() {
            Some(e) => e,
            None => anyhow!("{}: {why}", self.path.display()),
        })
    }
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let (id, node) = (args.backupid, args.nodeid);
    let dir = &args.backup_path;
    println!("Nodeid = {node}");
    println!("Backup Id = {id}");
    println!("backup path = {}", dir.display());
    let ctl_path = dir.join(layout::ctl_file(id, node));
    println!("Opening file '{}'", ctl_path.display());
    let ctl_bytes =
        std::fs::read(&ctl_path).with_context(|| format!("read {}", ctl_path.display()))?;
    let mut ctl = BackupCtl::from_file(&ctl_bytes, id, node)
        .map_err(|why| anyhow!("{}: {why}", ctl_path.display()))?;
    println!("Stop GCP of Backup: {}", ctl.stop_gci);
    if let Some(gci) = ctl.snapshot_gci {
        println!("Backup taken SNAPSHOTSTART: restored as of the end of GCP {gci}");
    }
    // Both row files are read and checked whole before anything is written, then read again
    // to print or restore them.
    let data_file = RowFile::open(
        dir,
        &layout::data_file(id, node),
        layout::DATA_MAGIC,
        id,
        node,
    );
    let log_file = RowFile::open(
        dir,
        &layout::log_file(id, node),
        layout::LOG_MAGIC,
        id,
        node,
    );
    for (file, (said_rows, said_bytes)) in [
        (&data_file, (ctl.records, ctl.data_bytes)),
        (&log_file, (ctl.log_records, ctl.log_bytes)),
    ] {
        let bytes = file.len()?;
        let rows = file.scan(&mut |_| Ok(()))?;
        if (rows, bytes) != (said_rows, said_bytes) {
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
    // SYSTAB_0's counters are keyed by the backed-up cluster's table ids: each restored
    // table's counter is set from its rows instead, as NDB's ndb_restore does. Named events
    // (NDB$EVENTS_0) are not restored either, as NDB's are not.
    let asked = |name: &String| {
        (include.is_empty() || include.contains(name))
            && !exclude.contains(name)
            && name != SYSTAB_0
            && name != NDB_EVENTS_0
    };
    // A blob parts table goes with its table.
    let parts_of = |name: &str| {
        let rest = name.strip_prefix(rndb_protocol::blob::PARTS_PREFIX)?;
        rest.split_once('_')?.0.parse::<u32>().ok()
    };
    let main_kept: HashSet<u32> = (ctl.tables.iter())
        .filter(|t| parts_of(&t.def.name).is_none() && asked(&t.def.name))
        .map(|t| t.table_id)
        .collect();
    ctl.tables.retain(|t| match parts_of(&t.def.name) {
        Some(main) => main_kept.contains(&main),
        None => main_kept.contains(&t.table_id),
    });
    let kept: HashSet<u32> = ctl.tables.iter().map(|t| t.table_id).collect();
    ctl.indexes.retain(|i| kept.contains(&i.table_id));
    // A data row of a table asked for; a log record of one as `LogPlan` takes it.
    let mut data_plan = DataPlan {
        kept: &kept,
        path: &data_file.path,
    };
    if args.print_meta {
        print_meta(&ctl);
    }
    if args.print_data {
        let mut plan = LogPlan::new(&ctl, &kept, &log_file.path);
        print_data(&ctl, [(&data_file, &mut data_plan), (&log_file, &mut plan)])?;
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
        let mut restore = Restore::new(&cluster, args.parallelism);
        data_file.scan(&mut |row| match data_plan.take(row)? {
            Some(row) => restore.apply(&tables, &row, &data_file.path),
            None => Ok(()),
        })?;
        restore.finish()?;
        let tuples = restore.applied;
        let mut plan = LogPlan::new(&ctl, &kept, &log_file.path);
        log_file.scan(&mut |row| match plan.take(row)? {
            Some(row) => restore.apply(&tables, &row, &log_file.path),
            None => Ok(()),
        })?;
        restore.finish()?;
        let log_entries = restore.applied - tuples;
        for (table, rows) in &restore.per_table {
            println!("_____________________________________________________");
            println!("Processing data in table: {table}: {rows} records");
        }
        // Each auto-increment counter past the largest value restored (only ever raised).
        for (table_id, max) in &restore.auto_max {
            if let Some((info, table)) = tables.get(table_id) {
                let next = max.saturating_add(1);
                cluster
                    .set_auto_increment_value(table, next, true)
                    .with_context(|| {
                        format!("set the auto-increment value of `{}`", info.def.name)
                    })?;
                println!(
                    "Restored auto-increment value of table {}: {next}",
                    info.def.name
                );
            }
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
                if c.auto_increment {
                    text.push_str(" AUTO_INCREMENT");
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

/// Which records of a file a restore takes, and as what.
trait Plan {
    /// The record to apply for record `row` of the file, if any.
    fn take<'r>(&mut self, row: BackupRow<'r>) -> anyhow::Result<Option<BackupRow<'r>>>;
}

/// The data file's rows of the tables asked for (it holds PUT records only).
struct DataPlan<'a> {
    kept: &'a HashSet<u32>,
    path: &'a Path,
}

impl Plan for DataPlan<'_> {
    fn take<'r>(&mut self, row: BackupRow<'r>) -> anyhow::Result<Option<BackupRow<'r>>> {
        if row.kind != kind::PUT {
            bail!(
                "{} at offset {}: a record of kind {} in a data file (PUT only)",
                self.path.display(),
                row.offset,
                row.kind
            );
        }
        Ok(self.kept.contains(&row.table_id).then_some(row))
    }
}

/// The log records of the tables asked for, as `layout::LogReplay` takes them.
struct LogPlan<'a> {
    ctl: &'a BackupCtl,
    kept: &'a HashSet<u32>,
    path: &'a Path,
    replay: LogReplay,
}

impl<'a> LogPlan<'a> {
    fn new(ctl: &'a BackupCtl, kept: &'a HashSet<u32>, path: &'a Path) -> LogPlan<'a> {
        LogPlan {
            ctl,
            kept,
            path,
            replay: LogReplay::new(ctl),
        }
    }
}

impl Plan for LogPlan<'_> {
    fn take<'r>(&mut self, row: BackupRow<'r>) -> anyhow::Result<Option<BackupRow<'r>>> {
        if !self.kept.contains(&row.table_id) {
            return Ok(None);
        }
        let (ctl, path) = (self.ctl, self.path);
        self.replay.take(row, |row| {
            let at = || format!("{} at offset {}", path.display(), row.offset);
            let Some(info) = ctl.tables.iter().find(|t| t.table_id == row.table_id) else {
                bail!(
                    "{}: a row of table id {}, which the backup does not hold",
                    at(),
                    row.table_id
                );
            };
            let values = (row.values(&info.def)).map_err(|e| anyhow!("{}: {e}", at()))?;
            Ok(key_of(&info.def.key_columns(), &values).1)
        })
    }
}

/// `--print-data`: the node's rows as a restore leaves them, table by table: a header of the
/// column names, then one tab-separated line per row, in key order.
fn print_data(ctl: &BackupCtl, files: [(&RowFile, &mut dyn Plan); 2]) -> anyhow::Result<()> {
    let mut tables: BTreeMap<u32, BTreeMap<Vec<u8>, Vec<Value>>> = BTreeMap::new();
    for (file, wanted) in files {
        file.scan(&mut |row| {
            let Some(row) = wanted.take(row)? else {
                return Ok(());
            };
            let Some(info) = ctl.tables.iter().find(|t| t.table_id == row.table_id) else {
                bail!(
                    "{}: a row of table id {}, which the backup does not hold",
                    file.path.display(),
                    row.table_id
                );
            };
            let values = (row.values(&info.def))
                .map_err(|e| anyhow!("{} at offset {}: {e}", file.path.display(), row.offset))?;
            let (_, key_bytes) = key_of(&info.def.key_columns(), &values);
            let rows = tables.entry(row.table_id).or_default();
            match row.kind {
                kind::DELETE => rows.remove(&key_bytes),
                _ => rows.insert(key_bytes, values),
            };
            Ok(())
        })?;
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
            for (i, (value, column)) in values.iter().zip(&info.def.columns).enumerate() {
                if i > 0 {
                    out.push('\t');
                }
                format_value(&mut out, value, column, IntegerFormat::Decimal);
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
    // A blob parts table comes with its table.
    let parts = |name: &str| name.starts_with(rndb_protocol::blob::PARTS_PREFIX);
    for info in ctl.tables.iter().filter(|t| !parts(&t.def.name)) {
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

/// The cluster's table for each of the backup's, by backup table id: same name and columns
/// (a blob parts table: the one of the same column of the same table), each a handle that
/// writes BLOB and TEXT columns as the backup holds them, heads in the row and parts in the
/// parts tables (`Table::raw`).
fn target_tables<'b>(
    cluster: &Cluster,
    ctl: &'b BackupCtl,
) -> anyhow::Result<BTreeMap<u32, (&'b TableInfo, Table)>> {
    let mut tables = BTreeMap::new();
    let by_id: BTreeMap<u32, &TableInfo> = ctl.tables.iter().map(|t| (t.table_id, t)).collect();
    for info in &ctl.tables {
        let name = parts_target(cluster, &by_id, &info.def.name)?;
        let name = &name;
        let table = cluster
            .get_table(name)
            .with_context(|| format!("table `{name}` (create it first, or restore with -m)"))?
            .raw();
        if table.def().columns != info.def.columns {
            bail!("table `{name}` in the cluster has other columns than in the backup");
        }
        tables.insert(info.table_id, (info, table));
    }
    Ok(tables)
}

/// The name in the cluster of the backup's table `name`: itself, or for a blob parts table
/// (`NDB$BLOB_<table id>_<column>`) the parts table of the same column of the cluster's table
/// of the same name as the backup's table of that id.
fn parts_target(
    cluster: &Cluster,
    by_id: &BTreeMap<u32, &TableInfo>,
    name: &str,
) -> anyhow::Result<String> {
    let Some(rest) = name.strip_prefix(rndb_protocol::blob::PARTS_PREFIX) else {
        return Ok(name.to_string());
    };
    let parsed = rest
        .split_once('_')
        .and_then(|(t, c)| Some((t.parse::<u32>().ok()?, c.parse::<usize>().ok()?)));
    let Some((main_id, column)) = parsed else {
        bail!("table `{name}`: not a blob parts table's name");
    };
    let Some(main) = by_id.get(&main_id) else {
        bail!("blob parts table `{name}` names table id {main_id}, which the backup does not hold");
    };
    let target = cluster.get_table(&main.def.name).with_context(|| {
        format!(
            "table `{}` (create it first, or restore with -m)",
            main.def.name
        )
    })?;
    Ok(rndb_protocol::blob::parts_table_name(target.id(), column))
}

/// An auto-increment column's value as its counter counts (negative values do not count).
fn as_counter(value: &Value) -> Option<u64> {
    match *value {
        Value::Int32(v) => u64::try_from(v).ok(),
        Value::UInt32(v) => Some(v.into()),
        Value::Int64(v) => u64::try_from(v).ok(),
        Value::UInt64(v) => Some(v),
        _ => None,
    }
}

/// A row's key values (the columns at `key_columns`) and their encoding, which names the row.
fn key_of(key_columns: &[usize], values: &[Value]) -> (Vec<Value>, Vec<u8>) {
    let key: Vec<Value> = key_columns.iter().map(|&i| values[i].clone()).collect();
    let mut bytes = Vec::new();
    encode_values(&mut Writer::new(&mut bytes), &key);
    (key, bytes)
}

/// A row of a table, by table id and key encoding.
type RowKey = (u32, Vec<u8>);

/// One operation of a batch: a delete or not, and where its record is.
struct BatchOp {
    op: OpId,
    delete: bool,
    at: String,
}

/// The operations of one transaction of rows, and the keys they touch.
#[derive(Default)]
struct Batch {
    ops: Vec<BatchOp>,
    keys: HashSet<RowKey>,
}

/// Row writes and deletes, a transaction of [`ROWS_PER_TRANSACTION`] at a time, up to
/// `--parallelism` transactions in flight. A row's changes apply in file order: a key already
/// in the batch being filled sends that batch, and a key in a batch in flight waits for its
/// answer.
struct Restore<'c> {
    cluster: &'c Cluster,
    executor: AsyncExecutor<'c>,
    parallelism: usize,
    /// The transaction being filled, and its operations and keys.
    batch: Option<Transaction<'c>>,
    filling: Batch,
    /// The batches in flight, by tag.
    in_flight: HashMap<u64, Batch>,
    /// The keys of the batches in flight.
    busy: HashSet<RowKey>,
    next_tag: u64,
    applied: u64,
    per_table: BTreeMap<String, u64>,
    /// The largest auto-increment column value written, by table id.
    auto_max: BTreeMap<u32, u64>,
}

impl<'c> Restore<'c> {
    fn new(cluster: &'c Cluster, parallelism: usize) -> Restore<'c> {
        let executor = cluster.async_executor();
        let parallelism = parallelism.clamp(1, executor.limit().max(1));
        Restore {
            cluster,
            executor,
            parallelism,
            batch: None,
            filling: Batch::default(),
            in_flight: HashMap::new(),
            busy: HashSet::new(),
            next_tag: 0,
            applied: 0,
            per_table: BTreeMap::new(),
            auto_max: BTreeMap::new(),
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
        let named = (row.table_id, key_bytes);
        if self.filling.keys.contains(&named) {
            self.send()?;
        }
        while self.busy.contains(&named) {
            self.collect()?;
        }
        self.filling.keys.insert(named);
        let tx = match &mut self.batch {
            Some(tx) => tx,
            None => self.batch.insert(self.cluster.start_transaction()?),
        };
        let delete = row.kind == kind::DELETE;
        let auto = info.def.columns.iter().position(|c| c.auto_increment);
        if let Some(value) = auto
            .filter(|_| !delete)
            .and_then(|i| as_counter(&values[i]))
        {
            let max = self.auto_max.entry(row.table_id).or_default();
            *max = value.max(*max);
        }
        let op = if delete {
            tx.delete(table, &key)?
        } else {
            tx.write(table, &values)?
        };
        self.filling.ops.push(BatchOp {
            op,
            delete,
            at: at(),
        });
        *self.per_table.entry(info.def.name.clone()).or_default() += 1;
        self.applied += 1;
        if self.filling.ops.len() >= ROWS_PER_TRANSACTION {
            self.send()?;
        }
        Ok(())
    }

    /// Sends the batch being filled to commit, first waiting for one in flight when
    /// `--parallelism` are.
    fn send(&mut self) -> anyhow::Result<()> {
        let Some(tx) = self.batch.take() else {
            return Ok(());
        };
        while self.executor.len() >= self.parallelism {
            self.collect()?;
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        self.executor
            .prepare(tx, ExecType::Commit, AbortOption::IgnoreError, tag)?;
        let batch = std::mem::take(&mut self.filling);
        self.busy.extend(batch.keys.iter().cloned());
        self.in_flight.insert(tag, batch);
        self.executor.send();
        Ok(())
    }

    /// Waits for at least one batch in flight to be answered; an operation's error (but a
    /// delete's 626) stops the restore.
    fn collect(&mut self) -> anyhow::Result<()> {
        for done in self.executor.poll(1, ANSWER_WAIT) {
            let Some(batch) = self.in_flight.remove(&done.tag) else {
                continue;
            };
            for key in &batch.keys {
                self.busy.remove(key);
            }
            let last = batch.ops.last().map_or("", |o| o.at.as_str());
            done.result
                .with_context(|| format!("commit rows up to {last}"))?;
            for op in &batch.ops {
                match done.transaction.op_error(op.op) {
                    None => {}
                    Some(e) if op.delete && e.code == NO_SUCH_ROW => {}
                    Some(e) => bail!("{}: {e}", op.at),
                }
            }
        }
        Ok(())
    }

    /// Sends the batch being filled and waits until every batch is answered.
    fn finish(&mut self) -> anyhow::Result<()> {
        self.send()?;
        while !self.executor.is_empty() {
            self.collect()?;
        }
        Ok(())
    }
}
