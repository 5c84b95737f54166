//! The parameter table: the one place that says which parameters exist, in which sections, of
//! which type, with which default and range, and whether rndb implements them.
//!
//! Parsing, defaults, range checks and `ndb_config --configinfo` all read this table; nothing
//! else in the crate repeats a default or a range.

use std::fmt;

use crate::model::NodeKind;

/// The kind of a config.ini section, with aliases folded (`[db]` is `Ndbd`, and so on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SectionKind {
    /// `[ndbd]` / `[db]`: a data node.
    Ndbd,
    /// `[ndb_mgmd]` / `[mgm]`: a management node.
    Mgm,
    /// `[mysqld]` / `[api]`: an API slot.
    Api,
    /// `[tcp]`: a TCP link between two nodes.
    Tcp,
    /// `[shm]`: a shared-memory link between two nodes.
    Shm,
}

impl SectionKind {
    /// Every section kind, in the order `--configinfo` prints them.
    pub const ALL: [SectionKind; 5] = [
        SectionKind::Ndbd,
        SectionKind::Mgm,
        SectionKind::Api,
        SectionKind::Tcp,
        SectionKind::Shm,
    ];

    /// NDB's main spelling of the section.
    pub fn name(self) -> &'static str {
        match self {
            SectionKind::Ndbd => "ndbd",
            SectionKind::Mgm => "ndb_mgmd",
            SectionKind::Api => "api",
            SectionKind::Tcp => "tcp",
            SectionKind::Shm => "shm",
        }
    }

    /// The section kind a header names (`ndbd`, `db`, `mysqld`, …), lower-case, without
    /// `default`.
    pub fn from_name(name: &str) -> Option<SectionKind> {
        match name {
            "ndbd" | "db" => Some(SectionKind::Ndbd),
            "ndb_mgmd" | "mgm" => Some(SectionKind::Mgm),
            "mysqld" | "api" => Some(SectionKind::Api),
            "tcp" => Some(SectionKind::Tcp),
            "shm" => Some(SectionKind::Shm),
            _ => None,
        }
    }

    /// The node kind this section declares, or `None` for link sections.
    pub fn node_kind(self) -> Option<NodeKind> {
        match self {
            SectionKind::Ndbd => Some(NodeKind::Data),
            SectionKind::Mgm => Some(NodeKind::Mgm),
            SectionKind::Api => Some(NodeKind::Api),
            SectionKind::Tcp | SectionKind::Shm => None,
        }
    }
}

impl fmt::Display for SectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a parameter's value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// A whole number; K/M/G suffixes (1024-based) are accepted as NDB accepts them.
    Int,
    /// A number of bytes; K/M/G suffixes (1024-based).
    Size,
    /// true/false, yes/no, y/n, on/off, 1/0 (any case).
    Bool,
    /// Free text (host names).
    String,
    /// A file-system path; must not be empty.
    Path,
}

impl ParamType {
    /// The name `--configinfo` prints.
    pub fn name(self) -> &'static str {
        match self {
            ParamType::Int => "int",
            ParamType::Size => "size",
            ParamType::Bool => "bool",
            ParamType::String => "string",
            ParamType::Path => "path",
        }
    }

    /// True for the types whose values are numbers with a range.
    pub fn is_numeric(self) -> bool {
        matches!(self, ParamType::Int | ParamType::Size)
    }
}

/// What a parameter is when the file does not give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamDefault {
    /// The section is an error without it.
    Required,
    /// It stays unset (an optional value, or one rndb derives: NodeId, ServerPort, Nodegroup).
    Unset,
    /// A number (Int and Size parameters).
    Int(u64),
    /// A boolean.
    Bool(bool),
    /// Text (String and Path parameters).
    Text(&'static str),
}

/// One row of the parameter table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    /// The sections the parameter may appear in (and their `default` forms).
    pub sections: &'static [SectionKind],
    /// NDB's spelling; matched case-insensitively.
    pub name: &'static str,
    /// How the value is written.
    pub ty: ParamType,
    /// The value when the file does not give one.
    pub default: ParamDefault,
    /// Smallest allowed value (numeric types only).
    pub min: u64,
    /// Largest allowed value (numeric types only).
    pub max: u64,
    /// True when rndb acts on the value; false when it only recognises the name, warns, and
    /// ignores the value.
    pub implemented: bool,
    /// What the parameter means, in one line.
    pub meaning: &'static str,
}

impl ParamInfo {
    /// True when the parameter may appear in `kind` sections.
    pub fn applies_to(&self, kind: SectionKind) -> bool {
        self.sections.contains(&kind)
    }

    /// The default as `--configinfo` prints it.
    pub fn default_text(&self) -> String {
        match self.default {
            ParamDefault::Required => "(required)".to_string(),
            ParamDefault::Unset => "(none)".to_string(),
            ParamDefault::Int(n) => format_number(self.ty, n),
            ParamDefault::Bool(b) => b.to_string(),
            ParamDefault::Text(t) => format!("\"{t}\""),
        }
    }

    /// The range as `--configinfo` and range errors print it (`1..4`, `1M..16T`), or an empty
    /// string for types without a range.
    pub fn range_text(&self) -> String {
        match self.ty {
            ParamType::Int | ParamType::Size => {
                format!(
                    "{}..{}",
                    format_number(self.ty, self.min),
                    format_number(self.ty, self.max)
                )
            }
            ParamType::Bool | ParamType::String | ParamType::Path => String::new(),
        }
    }
}

/// Writes a size with the largest exact 1024-based suffix (`98M`, `16K`) and an int plainly.
pub fn format_number(ty: ParamType, n: u64) -> String {
    if ty != ParamType::Size || n == 0 {
        return n.to_string();
    }
    for (suffix, unit) in [("T", T), ("G", G), ("M", M), ("K", K)] {
        if n.checked_rem(unit) == Some(0) {
            return format!("{}{suffix}", n / unit);
        }
    }
    n.to_string()
}

/// The parameter table.
pub fn param_table() -> &'static [ParamInfo] {
    PARAMS
}

/// The row for `name` (any case) in `kind` sections.
pub fn find_param(kind: SectionKind, name: &str) -> Option<&'static ParamInfo> {
    PARAMS
        .iter()
        .find(|p| p.applies_to(kind) && p.name.eq_ignore_ascii_case(name))
}

/// The sections in which `name` (any case) is a parameter.
pub(crate) fn sections_of(name: &str) -> Vec<SectionKind> {
    let mut kinds: Vec<SectionKind> = PARAMS
        .iter()
        .filter(|p| p.name.eq_ignore_ascii_case(name))
        .flat_map(|p| p.sections.iter().copied())
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// The known parameter of `kind` sections whose name is closest to `name` (edit distance,
/// ignoring case).
pub(crate) fn closest_param(kind: SectionKind, name: &str) -> Option<&'static str> {
    let wanted = name.to_ascii_lowercase();
    PARAMS
        .iter()
        .filter(|p| p.applies_to(kind))
        .min_by_key(|p| edit_distance(&wanted, &p.name.to_ascii_lowercase()))
        .map(|p| p.name)
}

/// Levenshtein distance between two strings, by characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

const K: u64 = 1024;
const M: u64 = 1024 * K;
const G: u64 = 1024 * M;
const T: u64 = 1024 * G;
/// NDB's MAX_INT_RNIL: the largest value most 32-bit parameters take (0xFFFFFEFF).
pub const MAX_INT_RNIL: u64 = 4_294_967_039;

const DB: &[SectionKind] = &[SectionKind::Ndbd];
const MGM: &[SectionKind] = &[SectionKind::Mgm];
const API: &[SectionKind] = &[SectionKind::Api];
const TCP: &[SectionKind] = &[SectionKind::Tcp];
const SHM: &[SectionKind] = &[SectionKind::Shm];
const LINKS: &[SectionKind] = &[SectionKind::Tcp, SectionKind::Shm];
const DB_LINKS: &[SectionKind] = &[SectionKind::Ndbd, SectionKind::Tcp, SectionKind::Shm];
const NODES: &[SectionKind] = &[SectionKind::Ndbd, SectionKind::Mgm, SectionKind::Api];
const DB_MGM: &[SectionKind] = &[SectionKind::Ndbd, SectionKind::Mgm];

use ParamDefault::{Bool as B, Int as I, Required, Text as S, Unset};
use ParamType::{Bool, Int, Path, Size, String as Str};

/// Builds an implemented row.
const fn p(
    sections: &'static [SectionKind],
    name: &'static str,
    ty: ParamType,
    default: ParamDefault,
    min: u64,
    max: u64,
    meaning: &'static str,
) -> ParamInfo {
    ParamInfo {
        sections,
        name,
        ty,
        default,
        min,
        max,
        implemented: true,
        meaning,
    }
}

/// Builds a row rndb only recognises.
const fn later(
    sections: &'static [SectionKind],
    name: &'static str,
    ty: ParamType,
    default: ParamDefault,
    min: u64,
    max: u64,
    meaning: &'static str,
) -> ParamInfo {
    ParamInfo {
        sections,
        name,
        ty,
        default,
        min,
        max,
        implemented: false,
        meaning,
    }
}

/// Bounds for a boolean row.
const BOOL: (u64, u64) = (0, 1);
/// Bounds for text rows (unused).
const TEXT: (u64, u64) = (0, 0);

// One row per line reads as a table; rustfmt would break the rows apart.
#[rustfmt::skip]
static PARAMS: &[ParamInfo] = &[
    // [ndbd]: implemented.
    p(DB, "NodeId", Int, Unset, 1, 144, "Node id of the data node; the lowest free id when absent"),
    p(DB, "HostName", Str, S("localhost"), TEXT.0, TEXT.1, "Host the data node runs on"),
    p(DB, "ServerPort", Int, Unset, 1, 65535, "Port the data node listens on; 11860+NodeId when absent"),
    p(DB, "DataDir", Path, S("."), TEXT.0, TEXT.1, "Directory the node creates for its files; ndbd logs to stderr"),
    p(DB, "NoOfReplicas", Int, I(2), 1, 4, "Copies of each partition; the same for every data node"),
    p(DB, "DataMemory", Size, I(98 * M), M, 16 * T, "Memory for rows and ordered indexes"),
    p(DB, "MaxNoOfConcurrentOperations", Int, I(32 * K), 32, MAX_INT_RNIL, "Operation records in TC and LQH"),
    p(DB, "MaxDMLOperationsPerTransaction", Int, I(4_294_967_295), 32, 4_294_967_295, "DML operations one transaction may define (261 past it)"),
    p(DB, "MaxNoOfConcurrentIndexOperations", Int, I(8 * K), 0, MAX_INT_RNIL, "Unique index operations TC holds records for, until their transaction ends (288 past it)"),
    p(DB, "StopOnError", Bool, B(true), BOOL.0, BOOL.1, "Stop after an error (1), or have the angel start the data node again (0)"),
    p(DB, "MaxStartFailRetries", Int, I(3), 0, MAX_INT_RNIL, "Failed starts in a row after which the angel gives up (StopOnError=0; 0: never)"),
    p(DB, "StartFailRetryDelay", Int, I(0), 0, MAX_INT_RNIL, "Seconds the angel waits before starting again after a failed start"),
    p(DB, "TimeBetweenWatchDogCheck", Int, I(6000), 70, MAX_INT_RNIL, "Execution thread stuck this many ms: warned of; three times as long: stopped (6050)"),
    p(DB, "MaxNoOfConcurrentTransactions", Int, I(4096), 32, MAX_INT_RNIL, "Transaction records in TC"),
    p(DB, "MaxNoOfConcurrentScans", Int, I(256), 2, 500, "Scans running at once in TC"),
    p(DB, "BatchSizePerLocalScan", Int, I(256), 1, 992, "Lock records per local scan batch"),
    p(DB, "MaxNoOfTables", Int, I(128), 8, 20320, "Tables the dictionary holds"),
    p(DB, "MaxNoOfOrderedIndexes", Int, I(128), 0, MAX_INT_RNIL, "Ordered indexes the dictionary holds"),
    p(DB, "MaxNoOfUniqueHashIndexes", Int, I(64), 0, MAX_INT_RNIL, "Unique hash indexes the dictionary holds"),
    p(DB, "TransactionDeadlockDetectionTimeout", Int, I(1200), 50, MAX_INT_RNIL, "Lock wait in ms before abort (error 266)"),
    p(DB, "TransactionInactiveTimeout", Int, I(MAX_INT_RNIL), 0, MAX_INT_RNIL, "Idle ms before an open transaction aborts; >= 2^31 is unlimited"),
    p(DB, "Nodegroup", Int, Unset, 0, 65535, "Node group; formed in file order when absent"),
    p(DB, "UseShm", Bool, B(false), BOOL.0, BOOL.1, "Use shared memory to API nodes on the same host"),
    p(DB, "MaxNoOfExecutionThreads", Int, I(0), 0, 72, "Execution threads; 0 or 1 = one thread (single-threaded ndbd)"),
    p(DB, "SchedulerSpinTimer", Int, I(0), 0, 500, "Microseconds the execution loop spins before it sleeps"),
    // [ndbd]: recognised only.
    p(DB, "HeartbeatIntervalDbDb", Int, I(5000), 10, MAX_INT_RNIL, "Heartbeat ms between data nodes; silent for 4 of them, a node is declared failed"),
    p(DB, "HeartbeatIntervalDbApi", Int, I(1500), 100, MAX_INT_RNIL, "Heartbeat ms between data and API nodes; silent for 4 of them, the link is closed"),
    p(DB, "TimeBetweenGlobalCheckpoints", Int, I(2000), 20, 32000, "Global checkpoint (group commit) interval in ms"),
    p(DB, "TimeBetweenGlobalCheckpointsTimeout", Int, I(120000), 10, MAX_INT_RNIL, "ms a node's part in a global checkpoint's save may take; past it the node asks to be stopped (GCP stop, 2303)"),
    p(DB, "MaxNoOfAttributes", Int, I(1000), 32, MAX_INT_RNIL, "Attributes of every table and index the dictionary holds"),
    later(DB, "MaxNoOfTriggers", Int, I(768), 0, MAX_INT_RNIL, "Trigger records"),
    p(DB, "MaxNoOfFiredTriggers", Int, I(4000), 0, MAX_INT_RNIL, "Index maintenance operations (fired triggers) TC runs at once"),
    p(DB, "MaxNoOfLocalOperations", Int, Unset, 32, MAX_INT_RNIL, "Operation records in LQH: rows its transactions lock or write; 1.1 × MaxNoOfConcurrentOperations when absent"),
    p(DB, "MaxNoOfLocalScans", Int, Unset, 32, MAX_INT_RNIL, "Fragment scans a data node runs at once; 4 × MaxNoOfConcurrentScans × data nodes + 2 when absent"),
    later(DB, "MaxParallelScansPerFragment", Int, I(256), 1, 1024, "Parallel scans per fragment"),
    later(DB, "LongMessageBuffer", Size, I(64 * M), 512 * K, MAX_INT_RNIL, "Internal long-signal buffer"),
    p(DB, "TimeBetweenLocalCheckpoints", Int, I(20), 0, 31, "Local checkpoint trigger (log2 of words written)"),
    p(DB, "TimeBetweenEpochs", Int, I(100), 0, 32000, "Epoch interval in ms"),
    later(DB, "TimeBetweenEpochsTimeout", Int, I(0), 0, 256000, "Epoch timeout in ms"),
    later(DB, "TimeBetweenInactiveTransactionAbortCheck", Int, I(1000), 1000, MAX_INT_RNIL, "Interval of the inactive transaction check in ms"),
    p(DB, "NoOfFragmentLogParts", Int, I(4), 4, 32, "Redo log parts"),
    p(DB, "NoOfFragmentLogFiles", Int, I(16), 3, MAX_INT_RNIL, "Redo log files per part"),
    p(DB, "FragmentLogFileSize", Size, I(16 * M), 4 * M, G, "Size of one redo log file"),
    later(DB, "InitFragmentLogFiles", Str, S("SPARSE"), TEXT.0, TEXT.1, "How redo log files are created"),
    p(DB, "RedoBuffer", Size, I(32 * M), M, MAX_INT_RNIL, "Redo log buffer"),
    p(DB, "ArbitrationTimeout", Int, I(7500), 10, MAX_INT_RNIL, "How long a side of a split waits for the arbitrator's answer (or, with WaitExternal, for an external manager), in ms"),
    p(DB, "Arbitration", Str, S("Default"), TEXT.0, TEXT.1, "Default: a management or API node with ArbitrationRank 1 or 2 arbitrates splits; Disabled: no arbitration (a split may leave two sides serving); WaitExternal: wait ArbitrationTimeout for an external manager"),
    p(DB, "Diskless", Bool, B(false), BOOL.0, BOOL.1, "Run without disk"),
    later(DB, "IndexMemory", Size, I(0), 0, 1 << 40, "Deprecated hash index memory"),
    p(DB, "LockPagesInMainMemory", Int, I(0), 0, 2, "Lock the data node's memory in RAM: 1 after DataMemory is paged in at start, 2 before (and all it maps later)"),
    later(DB, "ODirect", Bool, B(false), BOOL.0, BOOL.1, "Use O_DIRECT for files"),
    p(DB, "StartPartialTimeout", Int, I(30000), 0, MAX_INT_RNIL, "Wait in ms for every data node before starting without some (every node group needs one); 0 waits for all"),
    later(DB, "StartPartitionedTimeout", Int, I(60000), 0, MAX_INT_RNIL, "Wait in ms before a partitioned start"),
    p(DB, "StartFailureTimeout", Int, I(0), 0, MAX_INT_RNIL, "A data node not started this many ms after it began stops (6100); 0: no limit"),
    p(DB, "BackupDataDir", Path, Unset, TEXT.0, TEXT.1, "Directory for backups"),
    p(DB, "BackupLogBufferSize", Size, I(16 * M), 2 * M, MAX_INT_RNIL, "Buffer for a backup's log of changes"),
    p(DB, "BackupDataBufferSize", Size, I(16 * M), 512 * K, MAX_INT_RNIL, "A backup's scanned rows not yet written, at most"),
    p(DB, "BackupWriteSize", Size, I(256 * K), 32 * K, MAX_INT_RNIL, "Bytes a backup's scan writes at a time"),
    p(DB, "BackupMaxWriteSize", Size, I(M), 256 * K, MAX_INT_RNIL, "Most bytes a backup's scan writes at a time"),
    later(DB, "BackupMemory", Size, I(32 * M), 0, MAX_INT_RNIL, "Deprecated: the backup's buffers"),
    p(DB, "BackupReportFrequency", Int, I(0), 0, MAX_INT_RNIL, "Seconds between a running backup's status reports in the cluster log; 0: none"),
    later(DB, "BackupDiskWriteSpeedPct", Int, I(50), 0, 90, "Share of the disk write speed kept for backups"),
    p(DB, "FileSystemPath", Path, Unset, TEXT.0, TEXT.1, "Directory for checkpoints and redo logs"),
    later(DB, "DiskPageBufferMemory", Size, I(64 * M), 4 * M, 1 << 40, "Page cache for disk data"),
    later(DB, "SharedGlobalMemory", Size, I(128 * M), 0, 1 << 40, "Shared memory pool"),
    later(DB, "TotalSendBufferMemory", Size, I(0), 0, MAX_INT_RNIL, "Send buffer memory for all links"),
    later(DB, "ExtraSendBufferMemory", Size, I(0), 0, MAX_INT_RNIL, "Extra send buffer memory"),
    later(DB, "RealtimeScheduler", Bool, B(false), BOOL.0, BOOL.1, "Real-time scheduling of threads"),
    p(DB, "LockExecuteThreadToCPU", Str, Unset, TEXT.0, TEXT.1, "CPUs the execution thread is bound to, e.g. 1 or 0-1 or 0,2"),
    // TLS (NDB 8.3): keys and certificates come from --ndb-tls-search-path.
    p(NODES, "RequireTls", Bool, B(false), BOOL.0, BOOL.1, "Refuse links without TLS"),
    p(DB_MGM, "RequireCertificate", Bool, B(false), BOOL.0, BOOL.1, "Refuse to start without a TLS key and certificate"),
    later(DB, "LockMaintThreadsToCPU", Int, Unset, 0, 65535, "CPU for maintenance threads"),
    later(DB, "ThreadConfig", Str, Unset, TEXT.0, TEXT.1, "Thread layout of ndbmtd"),
    later(DB, "SchedulerExecutionTimer", Int, I(50), 0, 11000, "Microseconds of execution before sending"),
    later(DB, "SchedulerResponsiveness", Int, I(5), 0, 10, "Latency versus throughput preference"),
    p(DB, "MaxNoOfSavedMessages", Int, I(25), 0, MAX_INT_RNIL, "Entries ndb_<NodeId>_error.log in DataDir keeps"),
    p(DB, "MemReportFrequency", Int, I(0), 0, MAX_INT_RNIL, "Seconds between memory usage reports in the cluster log (0: none); crossing 80, 90, 99 or 100 % is reported at once"),
    later(DB, "CompressedLCP", Bool, B(false), BOOL.0, BOOL.1, "Compress local checkpoints"),
    later(DB, "CompressedBackup", Bool, B(false), BOOL.0, BOOL.1, "Compress backups"),
    later(DB, "BuildIndexThreads", Int, I(128), 0, 128, "Threads building ordered indexes"),
    p(DB, "MinFreePct", Int, I(5), 0, 100, "Percent of DataMemory key operations leave free for restarts (827 past the rest)"),
    later(DB, "MaxNoOfOpenFiles", Int, I(0), 0, MAX_INT_RNIL, "Open file limit"),
    later(DB, "InitialNoOfOpenFiles", Int, I(27), 20, MAX_INT_RNIL, "Open files at start"),
    later(DB, "HeartbeatOrder", Int, I(0), 0, 65535, "Order of the heartbeat ring"),
    later(DB, "ConnectCheckIntervalDelay", Int, I(0), 0, MAX_INT_RNIL, "Connectivity check delay in ms"),
    later(DB, "RestartOnErrorInsert", Int, I(2), 0, 4, "Restart type after error insert"),
    p(DB, "TcpBind_INADDR_ANY", Bool, B(false), BOOL.0, BOOL.1, "Listen on every address of the host (0.0.0.0), not only HostName's"),
    p(DB, "MaxNoOfSubscriptions", Int, I(0), 0, MAX_INT_RNIL, "Tables with event subscribers at once (0: MaxNoOfTables); 1422 past it"),
    p(DB, "MaxNoOfSubscribers", Int, I(0), 0, MAX_INT_RNIL, "Event subscriptions of API nodes at once (0: twice MaxNoOfTables); 1422 past it"),
    p(DB, "MaxBufferedEpochs", Int, I(100), 0, 100_000, "Completed epochs a subscriber's unsent events may span before its link is closed"),
    p(DB, "MaxBufferedEpochBytes", Size, I(26_214_400), 26_214_400, MAX_INT_RNIL, "Bytes of events held for subscribers: changes of epochs not complete (past it dropped, and the epochs reported incomplete), and unsent per subscriber (past it its link is closed)"),
    later(DB, "ExecuteOnComputer", Str, Unset, TEXT.0, TEXT.1, "Deprecated [computer] reference"),
    later(DB_LINKS, "SendSignalId", Bool, B(true), BOOL.0, BOOL.1, "Send a signal id with each signal"),
    later(DB_LINKS, "Group", Int, I(55), 0, 200, "Transporter group"),
    // [ndb_mgmd].
    p(MGM, "NodeId", Int, Unset, 1, 255, "Node id of the management node; the lowest free id when absent"),
    p(MGM, "HostName", Str, S("localhost"), TEXT.0, TEXT.1, "Host the management node runs on"),
    p(MGM, "PortNumber", Int, I(1186), 1, 65535, "Port the management node listens on"),
    // Recognised only until arbitration lands (nothing reads it yet).
    p(MGM, "ArbitrationRank", Int, I(1), 0, 2, "0 never arbitrates, 1 high priority, 2 low priority: the data nodes' president picks the arbitrator among management and API nodes by rank"),
    p(MGM, "DataDir", Path, S("."), TEXT.0, TEXT.1, "Directory for the cluster log (ndb_<NodeId>_cluster.log) and the config cache"),
    later(MGM, "LogDestination", Str, Unset, TEXT.0, TEXT.1, "Where the cluster log goes"),
    p(MGM, "ArbitrationDelay", Int, I(0), 0, MAX_INT_RNIL, "Delay in ms before the arbitrator answers a side's request"),
    later(MGM, "HeartbeatIntervalMgmdMgmd", Int, I(1500), 100, MAX_INT_RNIL, "Heartbeat ms between management nodes"),
    later(MGM, "TotalSendBufferMemory", Size, I(0), 0, MAX_INT_RNIL, "Send buffer memory for all links"),
    later(MGM, "ExecuteOnComputer", Str, Unset, TEXT.0, TEXT.1, "Deprecated [computer] reference"),
    // [api] / [mysqld].
    p(API, "NodeId", Int, Unset, 1, 255, "Node id of the slot; the lowest free id when absent"),
    p(API, "HostName", Str, Unset, TEXT.0, TEXT.1, "Only this host may take the slot; any host when absent"),
    p(API, "BatchSize", Int, I(256), 1, 992, "Rows per scan batch per partition"),
    p(API, "BatchByteSize", Size, I(16 * K), K, M, "Bytes per scan batch per partition"),
    p(API, "MaxScanBatchSize", Size, I(256 * K), 32 * K, 16 * M, "Bytes per scan batch over all partitions"),
    p(API, "ArbitrationRank", Int, I(0), 0, 2, "0 never arbitrates, 1 high priority, 2 low priority"),
    // Not in NDB: RonDB configures its Redis gateway (Rondis) with `Rondis.ServerPort` in the REST
    // server's JSON; rndb-redis is an API node, so its port lives in its slot.
    p(API, "RondisServerPort", Int, Unset, 0, 65535, "rndb extension, not in NDB: the port rndb-redis serves Redis clients on when it takes this slot (0: any free port); 6379 when absent"),
    later(API, "ArbitrationDelay", Int, I(0), 0, MAX_INT_RNIL, "Delay in ms before answering arbitration"),
    later(API, "AutoReconnect", Bool, B(true), BOOL.0, BOOL.1, "Reconnect after losing the cluster"),
    later(API, "TotalSendBufferMemory", Size, I(0), 0, MAX_INT_RNIL, "Send buffer memory for all links"),
    later(API, "DefaultOperationRedoProblemAction", Str, S("QUEUE"), TEXT.0, TEXT.1, "What to do when the redo log is full"),
    later(API, "DefaultHashMapSize", Int, I(3840), 0, 3840, "Hash map buckets of new tables"),
    later(API, "Wan", Bool, B(false), BOOL.0, BOOL.1, "Use WAN TCP settings"),
    later(API, "ConnectBackoffMaxTime", Int, I(0), 0, MAX_INT_RNIL, "Longest ms between connect attempts"),
    later(API, "StartConnectBackoffMaxTime", Int, I(0), 0, MAX_INT_RNIL, "Longest ms between connect attempts at start"),
    later(API, "HeartbeatThreadPriority", Str, Unset, TEXT.0, TEXT.1, "Priority of the heartbeat thread"),
    later(API, "ApiVerbose", Int, I(0), 0, 100, "NDB API debug output"),
    later(API, "ExecuteOnComputer", Str, Unset, TEXT.0, TEXT.1, "Deprecated [computer] reference"),
    // [tcp] and [shm].
    p(LINKS, "NodeId1", Int, Required, 1, 255, "One end of the link"),
    p(LINKS, "NodeId2", Int, Required, 1, 255, "The other end of the link"),
    p(LINKS, "SendBufferMemory", Size, I(2 * M), 256 * K, MAX_INT_RNIL, "Send buffer of the link"),
    p(TCP, "ReceiveBufferMemory", Size, I(2 * M), 16 * K, MAX_INT_RNIL, "Receive buffer of the link"),
    p(TCP, "Checksum", Bool, B(false), BOOL.0, BOOL.1, "Check every frame with a CRC-32"),
    p(SHM, "Checksum", Bool, B(true), BOOL.0, BOOL.1, "Check every frame with a CRC-32"),
    p(TCP, "UseIoUring", Bool, B(false), BOOL.0, BOOL.1, "rndb extension, not in NDB: move this TCP link's bytes with io_uring"),
    p(LINKS, "OverloadLimit", Size, I(0), 0, MAX_INT_RNIL, "Pending send bytes that mean overload; 0 = 80% of SendBufferMemory"),
    // NDB's minimum is 64K; rndb's segment needs a 4K header and two rings of at least 128K.
    p(SHM, "ShmSize", Size, I(4 * M), crate::model::SHM_SIZE_BYTES_MIN, MAX_INT_RNIL, "Size of the shared memory segment"),
    p(SHM, "ShmSpintime", Int, I(0), 0, 2000, "Microseconds a receiver spins before it sleeps"),
    later(SHM, "ShmKey", Int, Unset, 0, MAX_INT_RNIL, "Key of the segment; rndb names segments itself"),
    later(SHM, "Signum", Int, Unset, 0, 65535, "Deprecated wake-up signal"),
    later(LINKS, "HostName1", Str, Unset, TEXT.0, TEXT.1, "Host of NodeId1; rndb uses the node's HostName"),
    later(LINKS, "HostName2", Str, Unset, TEXT.0, TEXT.1, "Host of NodeId2; rndb uses the node's HostName"),
    later(LINKS, "NodeIdServer", Int, Unset, 1, 255, "Which end accepts the connection"),
    later(LINKS, "PreSendChecksum", Bool, B(false), BOOL.0, BOOL.1, "Check signals before sending"),
    later(TCP, "PortNumber", Int, Unset, 0, 65535, "Deprecated port of the link"),
    later(TCP, "TCP_RCV_BUF_SIZE", Size, I(0), 0, 2 * G, "SO_RCVBUF of the socket"),
    later(TCP, "TCP_SND_BUF_SIZE", Size, I(0), 0, 2 * G, "SO_SNDBUF of the socket"),
    later(TCP, "TCP_MAXSEG_SIZE", Size, I(0), 0, 2 * G, "TCP_MAXSEG of the socket"),
    later(TCP, "Proxy", Str, Unset, TEXT.0, TEXT.1, "Proxy for the link"),
];

#[cfg(test)]
mod tests {
    //! Checks that the table is consistent with itself: one row per name and section, defaults
    //! of the right type and inside their ranges.

    use super::*;

    #[test]
    fn names_are_unique_per_section() {
        for kind in SectionKind::ALL {
            let mut names: Vec<String> = param_table()
                .iter()
                .filter(|p| p.applies_to(kind))
                .map(|p| p.name.to_ascii_lowercase())
                .collect();
            let count = names.len();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), count, "a name repeats in [{kind}]");
        }
    }

    #[test]
    fn defaults_fit_their_type_and_range() {
        for p in param_table() {
            assert!(p.min <= p.max, "{}", p.name);
            let fits = match (p.ty, p.default) {
                (_, ParamDefault::Required | ParamDefault::Unset) => true,
                (ParamType::Int | ParamType::Size, ParamDefault::Int(n)) => {
                    (p.min..=p.max).contains(&n)
                }
                (ParamType::Bool, ParamDefault::Bool(_)) => true,
                (ParamType::String | ParamType::Path, ParamDefault::Text(_)) => true,
                _ => false,
            };
            assert!(fits, "{} has a default that does not fit", p.name);
        }
    }

    #[test]
    fn every_section_kind_has_implemented_parameters() {
        for kind in SectionKind::ALL {
            assert!(param_table()
                .iter()
                .any(|p| p.applies_to(kind) && p.implemented));
        }
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("datamemroy", "datamemory"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("nodeid", "nodeid"), 0);
    }

    #[test]
    fn sizes_print_with_the_largest_exact_suffix() {
        assert_eq!(format_number(ParamType::Size, 98 * M), "98M");
        assert_eq!(format_number(ParamType::Size, 1536), "1536");
        assert_eq!(format_number(ParamType::Int, 2048), "2048");
    }
}
