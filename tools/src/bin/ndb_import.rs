//! `ndb_import`: loads CSV files into tables, like MySQL Cluster's `ndb_import`.
//!
//! `ndb_import -f config.ini [options] DB_NAME FILE...` loads each file into the table named
//! by the file without its extension (`t1.csv` → `t1`), or by `--table`. `--create` first
//! creates the table from a `CREATE TABLE` statement. The fields are read as LOAD DATA reads
//! them, with NDB's options (`--fields-terminated-by` and the others, `--csvopt`); the rows go
//! in with many transactions in flight (`--opbatch` rows each, `--in-flight` of them).
//!
//! A row that cannot be loaded (a wrong field count or type, bytes that are not UTF-8, a
//! duplicate key) is rejected: named on stderr as `FILE:LINE: reason` and written to
//! `<state-dir>/<table>.rej` (replaced by each run, and only made when a row is rejected). Up
//! to `--rejects` of them are tolerated (NDB's default, 0, stops at the first); past that the
//! import stops, waits for its transactions in flight, and says how many rows were committed.
//! SIGINT or SIGTERM stops it the same way (a second one exits at once). A progress bar shows on
//! a terminal.

#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use rndb_api::{ddl, Cluster, Table};
use rndb_tools::csv::{unescape_option, CsvFormat, CsvReader};
use rndb_tools::import::{import, rows_per_second, ImportConfig, Outcome, Reject, Stats};
use rndb_tools::{run_main, ConnectArgs, NO_SUCH_TABLE};

/// Rejected rows named on stderr one by one; the rest are only in the .rej file.
const REJECTS_SHOWN_MAX: u64 = 20;

/// Import CSV files into rndb tables, like NDB's ndb_import.
#[derive(Debug, Parser)]
#[command(name = "ndb_import", version)]
struct Args {
    #[command(flatten)]
    connect: ConnectArgs,
    /// The table to load; by default each file's name without its extension.
    #[arg(short = 't', long, value_name = "NAME")]
    table: Option<String>,
    /// Create the table first, from this CREATE TABLE statement (`@FILE` reads it from FILE);
    /// with several files, the first creates it and the others load into it.
    #[arg(long, value_name = "SQL")]
    create: Option<String>,
    /// The field separator (C escapes such as \t are read) [default: \t].
    #[arg(long, value_name = "STRING")]
    fields_terminated_by: Option<String>,
    /// The quote every field is enclosed in (a field may also come without it).
    #[arg(long, value_name = "CHAR")]
    fields_enclosed_by: Option<String>,
    /// The quote string fields may be enclosed in (read as --fields-enclosed-by).
    #[arg(long, value_name = "CHAR")]
    fields_optionally_enclosed_by: Option<String>,
    /// The escape character; an empty string turns escapes off [default: \\].
    #[arg(long, value_name = "CHAR")]
    fields_escaped_by: Option<String>,
    /// The line terminator [default: \n].
    #[arg(long, value_name = "STRING")]
    lines_terminated_by: Option<String>,
    /// NDB's shorthand, letters applied in order: c fields terminated by comma, d the defaults,
    /// n lines terminated by \n, q fields optionally enclosed by double quotes, r lines
    /// terminated by \r. Options given by name win.
    #[arg(long, value_name = "LETTERS")]
    csvopt: Option<String>,
    /// Skip this many lines at the start of each file (a header).
    #[arg(long, default_value_t = 0, value_name = "N")]
    ignore_lines: u64,
    /// Rejected rows tolerated per file; one more stops the import.
    #[arg(long, default_value_t = 0, value_name = "N")]
    rejects: u64,
    /// Times a transaction failing with a temporary error is tried again before its rows are
    /// rejected.
    #[arg(long, default_value_t = 10, value_name = "N")]
    temperrors: u32,
    /// Rows inserted per transaction.
    #[arg(long, default_value_t = 64, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    opbatch: u32,
    /// Transactions kept in flight at once (rndb's; at most MaxNoOfConcurrentTransactions).
    #[arg(long, default_value_t = 64, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    in_flight: u32,
    /// Where the rejected rows' file `<table>.rej` goes.
    #[arg(long, default_value = ".", value_name = "DIR")]
    state_dir: PathBuf,
    /// Print statistics (transactions, temporary errors, rows per second) after each file.
    #[arg(long)]
    stats: bool,
    /// NDB's database name (rndb has one namespace; accepted, and ignored).
    #[arg(value_name = "DB_NAME")]
    db_name: String,
    /// The CSV files, loaded one after the other.
    #[arg(value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("ndb_import", || run(&args))
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let format = csv_format(args)?;
    let interrupt = install_interrupt()?;
    // Taken by the first job that creates the table; later jobs load into it.
    let mut create = match &args.create {
        Some(sql) => Some(create_statement(sql)?),
        None => None,
    };
    let cluster = args.connect.connect()?;
    let mut failed = 0;
    for (index, file) in args.files.iter().enumerate() {
        let job = Job {
            number: index + 1,
            file,
            table: table_name(args, file)?,
        };
        if interrupt.load(Ordering::Relaxed) {
            eprintln!("ndb_import: job-{}: not started: interrupted", job.number);
            failed += 1;
            continue;
        }
        match job.run(&cluster, args, &format, &mut create, &interrupt) {
            Ok(true) => {}
            Ok(false) => failed += 1,
            Err(e) => {
                eprintln!("ndb_import: job-{}: {e:#}", job.number);
                failed += 1;
            }
        }
    }
    let count = args.files.len();
    println!(
        "jobs summary: defined: {count} run: {count} with success: {} with failure: {failed}",
        count - failed
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The CSV format from NDB's options: the defaults, then `--csvopt`, then the named options.
fn csv_format(args: &Args) -> anyhow::Result<CsvFormat> {
    let mut format = CsvFormat::default();
    for letter in args.csvopt.as_deref().unwrap_or("").chars() {
        match letter {
            'c' => format.fields_terminated_by = b",".to_vec(),
            'd' => format = CsvFormat::default(),
            'n' => format.lines_terminated_by = b"\n".to_vec(),
            'q' => format.fields_enclosed_by = Some(b'"'),
            'r' => format.lines_terminated_by = b"\r".to_vec(),
            other => bail!("--csvopt: unknown letter {other:?} (c, d, n, q, r)"),
        }
    }
    let string = |name: &str, value: &str| -> anyhow::Result<Vec<u8>> {
        let bytes = unescape_option(value).map_err(|e| anyhow::anyhow!("--{name}: {e}"))?;
        if bytes.is_empty() {
            bail!("--{name} may not be empty");
        }
        Ok(bytes)
    };
    let one_byte = |name: &str, value: &str| -> anyhow::Result<Option<u8>> {
        let bytes = unescape_option(value).map_err(|e| anyhow::anyhow!("--{name}: {e}"))?;
        match bytes.as_slice() {
            [] => Ok(None),
            [byte] => Ok(Some(*byte)),
            _ => bail!("--{name}={value:?}: one character, or none"),
        }
    };
    if let Some(value) = &args.fields_terminated_by {
        format.fields_terminated_by = string("fields-terminated-by", value)?;
    }
    if let Some(value) = &args.lines_terminated_by {
        format.lines_terminated_by = string("lines-terminated-by", value)?;
    }
    if let Some(value) = &args.fields_optionally_enclosed_by {
        format.fields_enclosed_by = one_byte("fields-optionally-enclosed-by", value)?;
    }
    if let Some(value) = &args.fields_enclosed_by {
        format.fields_enclosed_by = one_byte("fields-enclosed-by", value)?;
    }
    if let Some(value) = &args.fields_escaped_by {
        format.fields_escaped_by = one_byte("fields-escaped-by", value)?;
    }
    if format.fields_terminated_by == format.lines_terminated_by {
        bail!("the field and line terminators are the same");
    }
    Ok(format)
}

/// Parses `--create`'s statement (or the file named by `@FILE`).
fn create_statement(sql: &str) -> anyhow::Result<ddl::CreateTableStatement> {
    let text = match sql.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("read {path}"))?,
        None => sql.to_string(),
    };
    ddl::parse_create_table(&text).context("--create")
}

/// The table a file goes to: `--table`, or the file's name without its extension.
fn table_name(args: &Args, file: &Path) -> anyhow::Result<String> {
    if let Some(table) = &args.table {
        return Ok(table.clone());
    }
    match file.file_stem().and_then(|s| s.to_str()) {
        Some(stem) if !stem.is_empty() => Ok(stem.to_string()),
        _ => bail!(
            "{}: no table name in the file's name (give --table)",
            file.display()
        ),
    }
}

/// One file into one table.
#[derive(Debug)]
struct Job<'a> {
    number: usize,
    file: &'a Path,
    table: String,
}

impl Job<'_> {
    /// Loads the file; `Ok(false)` when it stopped early or rejected rows past the limit.
    fn run(
        &self,
        cluster: &Cluster,
        args: &Args,
        format: &CsvFormat,
        create: &mut Option<ddl::CreateTableStatement>,
        interrupt: &AtomicBool,
    ) -> anyhow::Result<bool> {
        let input =
            File::open(self.file).with_context(|| format!("open {}", self.file.display()))?;
        let size = input.metadata().map(|m| m.len()).unwrap_or(0);
        let table = self.table(cluster, create)?;
        println!(
            "job-{} import {}.{} from {}",
            self.number,
            args.db_name,
            self.table,
            self.file.display()
        );
        let config = ImportConfig {
            rows_per_transaction: args.opbatch as usize,
            in_flight: args.in_flight as usize,
            rejects_max: args.rejects,
            ignore_lines: args.ignore_lines,
            temporary_errors_max: args.temperrors,
        };
        let rejects_path = args.state_dir.join(format!("{}.rej", self.table));
        // A .rej file left by an earlier run would read as this run's rejects.
        match std::fs::remove_file(&rejects_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("remove {}", rejects_path.display()));
            }
            _ => {}
        }
        let mut rejects = RejectLog::new(self.file, rejects_path);
        let progress = progress_bar(size);
        let started = Instant::now();
        let mut reader = CsvReader::new(std::io::BufReader::new(input), format.clone());
        let (stats, outcome) = import(
            cluster,
            &table,
            &mut reader,
            &config,
            interrupt,
            &mut |reject| rejects.record(reject),
            &mut |stats| show_progress(&progress, stats, started),
        );
        progress.finish_and_clear();
        let elapsed = started.elapsed();
        rejects.finish()?;
        self.report(&stats, &outcome, elapsed, &rejects, args)
    }

    /// The table to load, created first with `--create` (once: `create` is taken when it
    /// succeeds).
    fn table(
        &self,
        cluster: &Cluster,
        create: &mut Option<ddl::CreateTableStatement>,
    ) -> anyhow::Result<Table> {
        if let Some(statement) = create.as_ref() {
            if statement.table.name != self.table {
                bail!(
                    "--create makes table {}, and {} goes to table {} (give --table {})",
                    statement.table.name,
                    self.file.display(),
                    self.table,
                    statement.table.name
                );
            }
            let table = statement
                .create(cluster)
                .with_context(|| format!("create table {}", self.table))?;
            *create = None;
            return Ok(table);
        }
        cluster.get_table(&self.table).map_err(|e| {
            let hint = if e.code() == Some(NO_SUCH_TABLE) {
                " (create it with --create or ndb_create_table)"
            } else {
                ""
            };
            anyhow::anyhow!("table {}: {e}{hint}", self.table)
        })
    }

    /// Prints the job's outcome; `Ok(false)` when it failed.
    fn report(
        &self,
        stats: &Stats,
        outcome: &Outcome,
        elapsed: Duration,
        rejects: &RejectLog,
        args: &Args,
    ) -> anyhow::Result<bool> {
        let n = self.number;
        println!(
            "job-{n} imported {} rows in {:.3}s at {:.0} rows/s",
            stats.rows_committed,
            elapsed.as_secs_f64(),
            rows_per_second(stats.rows_committed, elapsed)
        );
        if stats.rows_rejected > 0 {
            println!(
                "job-{n} rejected {} rows: see {}",
                stats.rows_rejected,
                rejects.path.display()
            );
        }
        if stats.rows_unknown > 0 {
            println!(
                "job-{n} {} rows may or may not have been committed (their answers were lost)",
                stats.rows_unknown
            );
        }
        if args.stats {
            println!(
                "job-{n} stats: rows read {} committed {} rejected {} transactions {} \
                 temporary errors {} bytes {}",
                stats.rows_read,
                stats.rows_committed,
                stats.rows_rejected,
                stats.transactions_committed,
                stats.temporary_errors,
                stats.bytes_read
            );
        }
        let file = self.file.display();
        match outcome {
            Outcome::Complete => Ok(true),
            Outcome::TooManyRejects { line } => {
                eprintln!(
                    "ndb_import: job-{n} stopped at {file}:{line}: {} rejected rows, more than \
                     --rejects={} allows; the {} rows committed before the stop stay in table {}",
                    stats.rows_rejected, args.rejects, stats.rows_committed, self.table
                );
                Ok(false)
            }
            Outcome::Interrupted { line } => {
                eprintln!(
                    "ndb_import: job-{n} interrupted after {file}:{line}; the {} rows committed \
                     before the stop stay in table {}",
                    stats.rows_committed, self.table
                );
                Ok(false)
            }
            Outcome::Failed(reason) => {
                eprintln!(
                    "ndb_import: job-{n} stopped: {file}: {reason}; the {} rows committed before \
                     the stop stay in table {}",
                    stats.rows_committed, self.table
                );
                Ok(false)
            }
        }
    }
}

/// The rejected rows: the first few on stderr, all in the .rej file (created at the first).
struct RejectLog<'a> {
    file: &'a Path,
    path: PathBuf,
    out: Option<BufWriter<File>>,
    count: u64,
    /// The first error writing the .rej file.
    error: Option<std::io::Error>,
}

impl<'a> RejectLog<'a> {
    fn new(file: &'a Path, path: PathBuf) -> Self {
        RejectLog {
            file,
            path,
            out: None,
            count: 0,
            error: None,
        }
    }

    fn record(&mut self, reject: &Reject) {
        self.count += 1;
        let file = self.file.display();
        if self.count <= REJECTS_SHOWN_MAX {
            eprintln!("ndb_import: {file}:{}: {}", reject.line, reject.reason);
        } else if self.count == REJECTS_SHOWN_MAX + 1 {
            eprintln!(
                "ndb_import: more rejected rows are only in {}",
                self.path.display()
            );
        }
        if self.error.is_some() {
            return;
        }
        if self.out.is_none() {
            match File::create(&self.path) {
                Ok(f) => {
                    let mut out = BufWriter::new(f);
                    let header = "file\tline\terrorcode\tmessage\n";
                    if let Err(e) = out.write_all(header.as_bytes()) {
                        self.error = Some(e);
                        return;
                    }
                    self.out = Some(out);
                }
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            }
        }
        if let Some(out) = &mut self.out {
            let message = reject.reason.replace(['\t', '\n'], " ");
            if let Err(e) = writeln!(out, "{file}\t{}\t{}\t{message}", reject.line, reject.code) {
                self.error = Some(e);
            }
        }
    }

    /// Flushes the file; an error writing it is an error of the job.
    fn finish(&mut self) -> anyhow::Result<()> {
        if let Some(out) = &mut self.out {
            if let Err(e) = out.flush() {
                self.error.get_or_insert(e);
            }
        }
        match self.error.take() {
            Some(e) => Err(e).with_context(|| format!("write {}", self.path.display())),
            None => Ok(()),
        }
    }
}

/// Routes SIGINT and SIGTERM to a flag the import checks: it stops reading, waits for its
/// transactions in flight and reports what was committed. A second signal exits at once
/// (status 130).
fn install_interrupt() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&flag))
            .context("install the signal handler")?;
        signal_hook::flag::register(signal, Arc::clone(&flag))
            .context("install the signal handler")?;
    }
    Ok(flag)
}

/// A bar over the file's bytes, drawn on stderr when it is a terminal.
fn progress_bar(size: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(size);
    if let Ok(style) = ProgressStyle::with_template("{bar:24} {percent:>3}% {msg}, {eta} left") {
        bar.set_style(style);
    }
    bar.set_message("0 rows");
    bar
}

fn show_progress(bar: &ProgressBar, stats: &Stats, started: Instant) {
    if bar.is_hidden() {
        return;
    }
    bar.set_position(stats.bytes_read);
    bar.set_message(format!(
        "{} rows {:.0}/s {} rejected",
        stats.rows_committed,
        rows_per_second(stats.rows_committed, started.elapsed()),
        stats.rows_rejected
    ));
}
