//! The command line: what to measure, over which transporters, against which cluster.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Parser, ValueEnum};
use rndb_api::{LockMode, TransporterKind};

/// NDB's testReadPerf for rndb: loads a table, then measures serial versus batched access for
/// each access type over each transporter, and prints µs per row, rows per second and the p50
/// and p99 latency of one execute.
#[derive(Parser, Debug, Clone)]
#[command(name = "testread-perf", version, after_help = AFTER_HELP)]
pub struct Args {
    /// The cluster's config.ini [default: config/examples/single.ini, looked up in the current
    /// directory, then in the rndb workspace this binary was built from]
    #[arg(long = "config-file", value_name = "FILE")]
    pub config_file: Option<PathBuf>,

    /// Start the config's data nodes as child processes (with --initial, in a temporary
    /// directory), run, and stop them on exit, on error and on Ctrl-C
    #[arg(long)]
    pub local: bool,

    /// The ndbd executable --local starts [default: ndbd next to this executable, first
    /// (re)built with cargo when this binary runs from its workspace's target directory]
    #[arg(long, value_name = "PATH")]
    pub ndbd: Option<PathBuf>,

    /// Rows to load (NDB's default is 1000000; 100000 loads in a few seconds)
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub size: u32,

    /// Bytes of column data per row: NDB testReadPerf's five columns hold 24; more adds a
    /// Varbinary column `e` with the rest (e.g. 100 for the bytes-on-the-wire goal of a
    /// 100-byte row)
    #[arg(long, default_value_t = crate::bench::ROW_DATA_BYTES_MIN, value_name = "N")]
    pub row_bytes: u32,

    /// Consecutive rows read per measurement (NDB's published figures use 20; its default is 1000)
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub range: u32,

    /// Measurements per access type and transporter (NDB's default is 3; more gives stable
    /// percentiles)
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: u32,

    /// Access types to measure, comma-separated, in this order
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "ping,serial_pk,batch_pk"
    )]
    pub access: Vec<Access>,

    /// Directories (colon-separated) holding the cluster CA and an API key and certificate, for
    /// `--transporter tls` without --local (NDB's --ndb-tls-search-path)
    #[arg(long = "ndb-tls-search-path", value_name = "PATH")]
    pub ndb_tls_search_path: Option<String>,

    /// Transporters to measure, comma-separated: each gets its own API connection that forces
    /// that link kind [default: tcp, plus shm when the config gives API nodes SHM links]
    #[arg(long, value_enum, value_delimiter = ',')]
    pub transporter: Vec<Transporter>,

    /// Output: a table, or one JSON document on stdout (each result with µs per row, rows per
    /// second, and the p50, p90, p99 and p99.9 of one execute in µs)
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// µs the API's waiting thread spins before it sleeps [default: the API's default]
    #[arg(long, value_name = "N")]
    pub spin_us: Option<u32>,

    /// Seed for the random start row of each measurement [default: random, printed in the output]
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,

    /// Lock mode of the reads (read, the default of NDB's readTuple(), takes a shared lock that
    /// the rollback at the end of each measurement releases)
    #[arg(long, value_enum, default_value_t = Lock::Read)]
    pub lock: Lock,

    /// serial_pk and serial_unique start a new transaction for every row, placed on the node
    /// holding the row's primary replica (NDB's startTransaction(table, key) hint) and
    /// committed, instead of NDB testReadPerf's one never-committed transaction per measurement
    /// (whose coordinator, placed by the first row, forwards reads of other nodes' rows)
    #[arg(long)]
    pub transaction_per_row: bool,

    /// Measure only rows whose primary replica is on data node N: each measurement takes
    /// `range` consecutive rows of that node's, from a random one. With a transaction per row,
    /// every read and write then goes to that one data node: on a cluster, this shows what the
    /// other nodes cost when the requests do not move among them. For serial_pk, batch_pk and
    /// serial_write; ping runs as without it (to the API's first data node)
    #[arg(long, value_name = "N")]
    pub primary_node: Option<u16>,

    /// Run the concurrency sweep instead of the access types: at each level (comma-separated,
    /// e.g. 1,2,4,...,4096) that many client threads share one API connection, each with one
    /// primary-key transaction in flight; prints throughput and p50/p99/p99.9 latency per level
    #[arg(long, value_delimiter = ',', value_name = "LEVELS",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: Vec<u32>,

    /// How long each sweep level runs, in milliseconds
    #[arg(long, default_value_t = 1000, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub duration_ms: u64,

    /// Fraction of sweep transactions that update their row instead of reading it (0..=1)
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub write_ratio: f64,

    /// How the sweep and the tpcc workload keep transactions in flight: `threads` (one client
    /// thread per transaction, each executing synchronously) or `async` (one thread: the sweep
    /// with NDB's asynchronous API, prepare, send together, poll completions; tpcc with a tokio
    /// task per transaction on one current-thread runtime)
    #[arg(long, value_enum, default_value_t = InFlight::Threads)]
    pub in_flight: InFlight,

    /// What to run: the access types (NDB's testReadPerf), or the order-entry workload after
    /// TPC-C (New-Order and Payment at each `--concurrency` level, default 1,2,4,...,1024 in
    /// flight, under each `--consistency` setting, with its consistency checks after each)
    #[arg(long, value_enum, default_value_t = WorkloadKind::Access)]
    pub workload: WorkloadKind,

    /// tpcc: warehouses (each 10 districts, `--tpcc-customers` customers per district and a
    /// stock row per item)
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub warehouses: u32,

    /// tpcc: items (TPC-C's 100000)
    #[arg(long, default_value_t = rndb_testread_perf::tpcc::ITEMS_DEFAULT, value_name = "N",
          value_parser = clap::value_parser!(u32).range(15..))]
    pub tpcc_items: u32,

    /// tpcc: customers per district (TPC-C's 3000)
    #[arg(long, default_value_t = rndb_testread_perf::tpcc::CUSTOMERS_PER_DISTRICT_DEFAULT,
          value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub tpcc_customers: u32,

    /// tpcc: consistency settings to run, comma-separated: committed (rows only read are read
    /// committed), shared / exclusive (they take that lock), read_backup (tables with
    /// READ_BACKUP, committed reads from any replica), durable (as committed, each commit
    /// waits for its global checkpoint's save), interpreted (as committed, the counters
    /// changed in the data node by interpreted updates: Payment in one round trip)
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "committed,shared,exclusive,read_backup,durable,interpreted"
    )]
    pub consistency: Vec<Consistency>,

    /// Sweep commits are durable (rndb-api's `Transaction::set_durable_commit`): each returns
    /// only once the global checkpoint holding it is saved on every data node, so a level needs
    /// about as many in flight as commit in one TimeBetweenGlobalCheckpoints
    #[arg(long)]
    pub durable_commit: bool,
}

/// What testread-perf runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WorkloadKind {
    /// The access types of NDB's testReadPerf (`--access`), or the sweep (`--concurrency`).
    Access,
    /// The order-entry workload after TPC-C.
    Tpcc,
}

/// A consistency setting of the tpcc workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
pub enum Consistency {
    Committed,
    Shared,
    Exclusive,
    #[value(name = "read_backup")]
    ReadBackup,
    Durable,
    Interpreted,
}

impl Consistency {
    pub fn setting(self) -> rndb_testread_perf::tpcc::Setting {
        use rndb_testread_perf::tpcc::Setting;
        match self {
            Consistency::Committed => Setting::Committed,
            Consistency::Shared => Setting::Shared,
            Consistency::Exclusive => Setting::Exclusive,
            Consistency::ReadBackup => Setting::ReadBackup,
            Consistency::Durable => Setting::Durable,
            Consistency::Interpreted => Setting::Interpreted,
        }
    }
}

/// How the sweep and the tpcc workload keep transactions in flight (the library's, so that
/// both share it).
pub use rndb_testread_perf::tpcc::InFlight;

const AFTER_HELP: &str = "\
One measurement reads `range` consecutive rows from a random start row in one transaction that \
is never committed (executed with NoCommit, then rolled back), as NDB's testReadPerf does. \
serial_pk and serial_unique execute once per row, batch_pk and batch_unique once per \
measurement; index_eq runs one ordered-index scan with an equality bound per row; index_range \
and index_ordered run one ordered-index scan over the range (index_ordered merged in index \
order); scan_filter runs one full-table scan whose pushed-down filter selects the range; ping \
sends `range` empty signals (the transporter and execution-loop floor). `--access all` runs \
every type. Each access type first runs one untimed warm-up measurement. The table shows NDB's \
published 2005 figures (µs per row; 2 data nodes, dual AMD MP1900+, 20 records per access) \
beside ours where NDB has them.

Example: testread-perf --local --config-file config/examples/local.ini --transporter tcp,shm";

/// An access type: one way of reading rows that NDB's testReadPerf measures, by testread-perf's
/// own name for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
pub enum Access {
    /// `range` empty round trips: the floor under every other access type.
    #[value(name = "ping")]
    Ping,
    /// `range` primary-key reads, one execute each.
    #[value(name = "serial_pk")]
    SerialPk,
    /// `range` primary-key reads in one execute.
    #[value(name = "batch_pk")]
    BatchPk,
    /// As serial_pk, through the unique hash index.
    #[value(name = "serial_unique")]
    SerialUnique,
    /// As batch_pk, through the unique hash index.
    #[value(name = "batch_unique")]
    BatchUnique,
    /// One ordered-index scan with an equality bound per row.
    #[value(name = "index_eq")]
    IndexEq,
    /// One ordered-index scan over the range.
    #[value(name = "index_range")]
    IndexRange,
    /// index_range with sorted output.
    #[value(name = "index_ordered")]
    IndexOrdered,
    /// A full table scan with a pushed-down filter.
    #[value(name = "scan_filter")]
    ScanFilter,
    /// `range` primary-key updates, each its own committed transaction (coordinated on the
    /// row's primary replica): the cost of a synchronously replicated commit.
    #[value(name = "serial_write")]
    SerialWrite,
    /// Every access type above, in this order.
    #[value(name = "all")]
    All,
}

impl Access {
    /// Every access type, in the order `all` runs them.
    pub const EVERY: [Access; 10] = [
        Access::Ping,
        Access::SerialPk,
        Access::BatchPk,
        Access::SerialUnique,
        Access::BatchUnique,
        Access::IndexEq,
        Access::IndexRange,
        Access::IndexOrdered,
        Access::ScanFilter,
        Access::SerialWrite,
    ];

    /// True for the access types that read or write rows by primary key, one by one or in a
    /// batch: those `--primary-node` can restrict to one node's rows.
    pub fn reads_rows_by_key(self) -> bool {
        matches!(
            self,
            Access::SerialPk | Access::BatchPk | Access::SerialWrite
        )
    }

    /// The name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            Access::Ping => "ping",
            Access::SerialPk => "serial_pk",
            Access::BatchPk => "batch_pk",
            Access::SerialUnique => "serial_unique",
            Access::BatchUnique => "batch_unique",
            Access::IndexEq => "index_eq",
            Access::IndexRange => "index_range",
            Access::IndexOrdered => "index_ordered",
            Access::ScanFilter => "scan_filter",
            Access::SerialWrite => "serial_write",
            Access::All => "all",
        }
    }
}

/// A transporter to force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
pub enum Transporter {
    Tcp,
    Shm,
    /// TCP bytes moved with io_uring (rndb's UseIoUring links).
    Uring,
    /// TCP inside TLS (keys from --ndb-tls-search-path; --local makes a CA and keys and starts
    /// the data nodes with them).
    Tls,
}

impl Transporter {
    pub fn kind(self) -> TransporterKind {
        match self {
            Transporter::Tcp => TransporterKind::Tcp,
            Transporter::Shm => TransporterKind::Shm,
            Transporter::Uring => TransporterKind::Uring,
            Transporter::Tls => TransporterKind::Tcp,
        }
    }

    /// The lower-case name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Transporter::Tcp => "tcp",
            Transporter::Shm => "shm",
            Transporter::Uring => "uring",
            Transporter::Tls => "tls",
        }
    }
}

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// The lock mode of the measured reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lock {
    /// No lock; reads the last committed value.
    Committed,
    /// A shared lock held until the transaction ends.
    Read,
    /// An exclusive lock held until the transaction ends.
    Exclusive,
}

impl Lock {
    pub fn mode(self) -> LockMode {
        match self {
            Lock::Committed => LockMode::CommittedRead,
            Lock::Read => LockMode::Read,
            Lock::Exclusive => LockMode::Exclusive,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Lock::Committed => "committed",
            Lock::Read => "read",
            Lock::Exclusive => "exclusive",
        }
    }
}

impl Args {
    /// Checks what clap cannot (range within size), expands `all` into every access type, and
    /// removes repeated list entries, keeping the first.
    pub fn validate(&mut self) -> Result<()> {
        self.access = self
            .access
            .iter()
            .flat_map(|&a| match a {
                Access::All => Access::EVERY.to_vec(),
                other => vec![other],
            })
            .collect();
        dedup(&mut self.access);
        dedup(&mut self.transporter);
        if !(0.0..=1.0).contains(&self.write_ratio) {
            bail!("--write-ratio {} is outside 0..=1", self.write_ratio);
        }
        crate::bench::RowShape::with_row_bytes(self.row_bytes)?;
        dedup(&mut self.consistency);
        if self.workload == WorkloadKind::Tpcc {
            let max = rndb_testread_perf::tpcc::IN_FLIGHT_MAX;
            if self.concurrency.is_empty() {
                self.concurrency = (0..=10).map(|p| 1 << p).collect();
            }
            if let Some(level) = self.concurrency.iter().find(|&&l| l > max) {
                bail!("--workload tpcc runs at most {max} transactions in flight; --concurrency has {level}");
            }
            if self.primary_node.is_some() {
                bail!("--primary-node is for the access types, not --workload tpcc");
            }
        }
        if self.range > self.size {
            bail!("--range {} is larger than --size {}", self.range, self.size);
        }
        if let Some(node) = self.primary_node {
            if !self.concurrency.is_empty() {
                bail!("--primary-node {node} is for the access types, not the concurrency sweep");
            }
            let restricted = |a: &Access| a.reads_rows_by_key() || *a == Access::Ping;
            if let Some(access) = self.access.iter().find(|a| !restricted(a)) {
                bail!(
                    "--primary-node {node} applies to serial_pk, batch_pk and serial_write (and \
                     leaves ping as it is); {} does not read rows by primary key",
                    access.name()
                );
            }
        }
        Ok(())
    }
}

/// Removes later repeats from `items`, keeping the order of first appearance.
fn dedup<T: PartialEq + Copy>(items: &mut Vec<T>) {
    let mut kept: Vec<T> = Vec::with_capacity(items.len());
    for item in items.iter() {
        if !kept.contains(item) {
            kept.push(*item);
        }
    }
    *items = kept;
}
