//! The typed result of parsing a config.ini: what every other crate reads.
//!
//! Everything here is plain data, resolved and validated: defaults applied, node groups formed,
//! every API slot given a node id, every link between two nodes that talk chosen.

use std::fmt;
use std::path::PathBuf;

/// A node id as NDB numbers them: data nodes 1..=144, other nodes 1..=255.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u16);

impl NodeId {
    /// Highest node id a data node may have (NDB's MAX_NDB_NODES - 1).
    pub const DATA_MAX: u16 = 144;
    /// Highest node id any node may have.
    pub const MAX: u16 = 255;
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The kind of a node, from the section that declared it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// `[ndbd]` / `[db]`.
    Data,
    /// `[ndb_mgmd]` / `[mgm]`.
    Mgm,
    /// `[mysqld]` / `[api]`.
    Api,
}

/// Which transporter a link uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransporterKind {
    Tcp,
    Shm,
    /// TCP on the wire, with the bytes moved by io_uring (`UseIoUring=1` on a TCP link; an
    /// rndb extension, not in NDB).
    Uring,
}

impl fmt::Display for TransporterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransporterKind::Tcp => "TCP",
            TransporterKind::Shm => "SHM",
            TransporterKind::Uring => "URING",
        })
    }
}

/// The base of the derived data-node port: a data node without `ServerPort` listens on
/// `DATA_NODE_PORT_BASE + NodeId` (node 1 → 11861), so every process that reads the same file
/// agrees on it without a management server.
pub const DATA_NODE_PORT_BASE: u16 = 11860;

/// The smallest ShmSize rndb accepts: a 4 KiB segment header and two rings of 128 KiB
/// (the shared-memory transporter checks that its layout agrees).
pub const SHM_SIZE_BYTES_MIN: u64 = 4096 + 2 * 128 * 1024;

/// A whole cluster, as one config.ini describes it.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The file this was read from (used in messages).
    pub source: PathBuf,
    /// NoOfReplicas, the same for every data node (from `[ndbd default]` or the nodes).
    pub no_of_replicas: u32,
    /// Data nodes in file order.
    pub data_nodes: Vec<DataNodeConfig>,
    /// Management nodes in file order.
    pub mgm_nodes: Vec<MgmNodeConfig>,
    /// API slots in file order; each has a node id (explicit, or the lowest id left free).
    pub api_slots: Vec<ApiSlotConfig>,
    /// Node groups, in group-id order; each holds exactly NoOfReplicas data nodes.
    pub node_groups: Vec<NodeGroup>,
    /// One link per pair of nodes that talk (data↔data, api↔data, mgm↔data), node1 < node2.
    pub links: Vec<LinkConfig>,
    /// Parameters rndb recognises but does not implement yet, and other non-fatal remarks.
    pub warnings: Vec<ConfigWarning>,
}

/// One `[ndbd]` section with its defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct DataNodeConfig {
    pub node_id: NodeId,
    pub host_name: String,
    /// ServerPort when given; see [`ClusterConfig::data_node_port`] for the derived port.
    pub server_port: Option<u16>,
    pub data_dir: PathBuf,
    /// The node group this node belongs to (explicit `Nodegroup` or formed in file order).
    pub node_group: u32,
    pub data_memory_bytes: u64,
    /// MinFreePct: the share of DataMemory (percent) key operations may not use, kept for
    /// restores and node restart copies.
    pub min_free_pct: u8,
    pub max_no_of_concurrent_operations: u32,
    /// MaxNoOfLocalOperations: LQH's operation records (1.1 × MaxNoOfConcurrentOperations
    /// when absent, as in NDB).
    pub max_no_of_local_operations: u32,
    /// MaxDMLOperationsPerTransaction: inserts, updates, writes and deletes one transaction
    /// may define at a TC before it is aborted with 261.
    pub max_dml_operations_per_transaction: u32,
    /// MaxNoOfConcurrentIndexOperations: unique index operations TC holds records for (288
    /// past it).
    pub max_no_of_concurrent_index_operations: u32,
    /// MaxNoOfFiredTriggers: unique index maintenance operations TC runs at once.
    pub max_no_of_fired_triggers: u32,
    /// StopOnError: the angel stops after the data node process fails (true, the default), or
    /// starts it again (false).
    pub stop_on_error: bool,
    /// MaxStartFailRetries: with StopOnError=0, the angel gives up after this many failed
    /// starts in a row (0: never).
    pub max_start_fail_retries: u32,
    /// StartFailRetryDelay, in seconds: the angel's wait before it starts again a data node
    /// process whose start failed.
    pub start_fail_retry_delay_s: u32,
    /// TimeBetweenWatchDogCheck, ms: the execution thread stuck this long is warned of, and
    /// three times as long stops the node (6050).
    pub time_between_watchdog_check_ms: u32,
    /// StartFailureTimeout, ms: a data node not started this long after it began stops (6100);
    /// 0: no limit.
    pub start_failure_timeout_ms: u32,
    /// MaxNoOfSavedMessages: entries `ndb_<NodeId>_error.log` keeps.
    pub max_no_of_saved_messages: u32,
    /// MemReportFrequency, s: ndb_mgmd logs the node's memory usage this often (0: never),
    /// besides each crossing of 80, 90, 99 or 100 %.
    pub mem_report_frequency_s: u32,
    /// BackupReportFrequency, s: ndb_mgmd logs a running backup's status this often (0:
    /// never).
    pub backup_report_frequency_s: u32,
    /// MaxNoOfSubscriptions: tables with event subscribers at once (0: MaxNoOfTables); one
    /// more is refused with 1422.
    pub max_no_of_subscriptions: u32,
    /// MaxNoOfSubscribers: event subscriptions of API nodes at once (0: twice
    /// MaxNoOfTables); one more is refused with 1422.
    pub max_no_of_subscribers: u32,
    /// MaxBufferedEpochs: completed epochs a subscriber's unsent events may span before the
    /// node closes its link (NDB disconnects a lagging subscriber likewise).
    pub max_buffered_epochs: u32,
    /// MaxBufferedEpochBytes: events held for subscribers at most, per node (changes of
    /// epochs not complete) and per subscriber (unsent); past it the changes are dropped (the
    /// epochs' report says so) or the lagging subscriber's link is closed.
    pub max_buffered_epoch_bytes: u64,
    pub max_no_of_concurrent_transactions: u32,
    pub max_no_of_concurrent_scans: u32,
    /// MaxNoOfLocalScans: fragment scans running at once on the node (NDB's scanfrag
    /// records); 4 × MaxNoOfConcurrentScans × data nodes + 2 when absent, as in NDB.
    pub max_no_of_local_scans: u32,
    pub batch_size_per_local_scan: u32,
    pub max_no_of_tables: u32,
    /// MaxNoOfAttributes: columns of every table, unique index table and ordered index.
    pub max_no_of_attributes: u32,
    pub max_no_of_ordered_indexes: u32,
    pub max_no_of_unique_hash_indexes: u32,
    pub transaction_deadlock_detection_timeout_ms: u32,
    /// 0 means "never time out" is *not* NDB's meaning: NDB's default is effectively unlimited
    /// (4294967039); we keep the raw value, and treat values ≥ 2^31 as unlimited.
    pub transaction_inactive_timeout_ms: u32,
    /// HeartbeatIntervalDbDb: QMGR's heartbeats between data nodes.
    pub heartbeat_interval_db_db_ms: u32,
    /// HeartbeatIntervalDbApi: heartbeats between this data node and API nodes.
    pub heartbeat_interval_db_api_ms: u32,
    /// StartPartialTimeout: how long a start waits for every data node before it goes on
    /// without those missing (0: it waits for all).
    pub start_partial_timeout_ms: u32,
    /// LockPagesInMainMemory: 0 leaves the node's memory swappable; 1 locks it (mlockall)
    /// once DataMemory is paged in; 2 locks it before, and every page mapped later too.
    pub lock_pages_in_main_memory: u8,
    /// TcpBind_INADDR_ANY: the data node listens on every address of its host (ServerPort on
    /// 0.0.0.0), not only on HostName's.
    pub tcp_bind_inaddr_any: bool,
    /// Arbitration: how a side of a split that keeps exactly half the data nodes decides.
    pub arbitration: Arbitration,
    /// ArbitrationTimeout: how long such a side waits for the arbitrator's answer.
    pub arbitration_timeout_ms: u32,
    /// The redo log, global checkpoints and where the node keeps its files.
    pub durability: Durability,
    pub use_shm: bool,
    pub max_no_of_execution_threads: u32,
    /// SchedulerSpinTimer: µs the execution loop spins (polls without sleeping) after its last
    /// piece of work before it sleeps. NDB default 0.
    pub scheduler_spin_timer_us: u32,
    /// LockExecuteThreadToCPU: the CPUs the execution thread is bound to (empty: not bound).
    pub lock_execute_thread_to_cpu: Vec<usize>,
    /// RequireTls: every link of this node must be TLS; a plain peer is refused.
    pub require_tls: bool,
    /// RequireCertificate: the node does not start without its TLS key and certificate.
    pub require_certificate: bool,
    /// Line of the section header, for messages.
    pub line: usize,
}

/// A data node's files and checkpoints, with NDB's parameter names and defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Durability {
    /// Diskless: no files at all; every start is an initial start.
    pub diskless: bool,
    /// FileSystemPath (DataDir when unset): where `ndb_<NodeId>_fs/` is.
    pub file_system_path: Option<PathBuf>,
    /// TimeBetweenGlobalCheckpoints, ms: how often the redo log is made durable.
    pub time_between_global_checkpoints_ms: u32,
    /// TimeBetweenGlobalCheckpointsTimeout, ms: how long this node's part in a save (its
    /// redo and sysfile written and synced) may take before it asks to be stopped (GCP stop).
    pub time_between_global_checkpoints_timeout_ms: u32,
    /// TimeBetweenEpochs, ms: how often a new epoch (GCI low word) starts; 0 = one per
    /// global checkpoint.
    pub time_between_epochs_ms: u32,
    /// NoOfFragmentLogParts.
    pub no_of_fragment_log_parts: u32,
    /// NoOfFragmentLogFiles (per part).
    pub no_of_fragment_log_files: u32,
    /// FragmentLogFileSize, bytes.
    pub fragment_log_file_size: u64,
    /// RedoBuffer, bytes.
    pub redo_buffer: u64,
    /// TimeBetweenLocalCheckpoints: a local checkpoint starts once 4 × 2^this bytes of redo
    /// were written since the last one started.
    pub time_between_local_checkpoints: u32,
    /// BackupDataDir (FileSystemPath, then DataDir, when unset): where `BACKUP/` is.
    pub backup_data_dir: Option<PathBuf>,
    /// BackupLogBufferSize, bytes: a backup's logged changes not yet written, at most.
    pub backup_log_buffer_size: u64,
    /// BackupDataBufferSize, bytes: a backup's scanned rows not yet written, at most.
    pub backup_data_buffer_size: u64,
    /// BackupWriteSize, bytes: what a backup's scan writes at a time, at most
    /// BackupMaxWriteSize.
    pub backup_write_size: u64,
    pub backup_max_write_size: u64,
}

impl Durability {
    /// BackupDataDir: FileSystemPath when unset, and `data_dir` (DataDir) when that is unset
    /// too, as NDB's.
    pub fn backup_dir(&self, data_dir: &std::path::Path) -> PathBuf {
        self.backup_data_dir
            .clone()
            .or_else(|| self.file_system_path.clone())
            .unwrap_or_else(|| data_dir.to_path_buf())
    }
}

impl Default for Durability {
    /// NDB's defaults.
    fn default() -> Self {
        Durability {
            diskless: false,
            file_system_path: None,
            time_between_global_checkpoints_ms: 2000,
            time_between_global_checkpoints_timeout_ms: 120_000,
            time_between_epochs_ms: 100,
            no_of_fragment_log_parts: 4,
            no_of_fragment_log_files: 16,
            fragment_log_file_size: 16 << 20,
            redo_buffer: 32 << 20,
            time_between_local_checkpoints: 20,
            backup_data_dir: None,
            backup_log_buffer_size: 16 << 20,
            backup_data_buffer_size: 16 << 20,
            backup_write_size: 256 << 10,
            backup_max_write_size: 1 << 20,
        }
    }
}

/// One `[ndb_mgmd]` section.
#[derive(Clone, Debug, PartialEq)]
pub struct MgmNodeConfig {
    pub node_id: NodeId,
    pub host_name: String,
    pub port_number: u16,
    /// DataDir: where `ndb_mgmd` writes the cluster log (`ndb_<NodeId>_cluster.log`) and keeps
    /// its config cache.
    pub data_dir: PathBuf,
    /// ArbitrationRank: 0 never arbitrates; 1 (the default) and 2 may, 1 before 2, a
    /// management node before an API node of the same rank.
    pub arbitration_rank: u32,
    /// ArbitrationDelay (ms): how long the arbitrator waits before it answers a side.
    pub arbitration_delay_ms: u32,
    /// RequireTls (plain clients are refused) and RequireCertificate (ndb_mgmd must have keys).
    pub require_tls: bool,
    pub require_certificate: bool,
    pub line: usize,
}

/// One `[api]` / `[mysqld]` slot.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiSlotConfig {
    pub node_id: NodeId,
    /// True when the file gave the NodeId; false when it was assigned (lowest free id).
    pub node_id_explicit: bool,
    /// Only a process on this host may take the slot; `None` admits any host.
    pub host_name: Option<String>,
    pub batch_size: u32,
    pub batch_byte_size: u32,
    pub max_scan_batch_size: u32,
    /// RondisServerPort (an rndb extension): the port rndb-redis listens on in this slot.
    pub rondis_server_port: Option<u16>,
    /// RequireTls: the API node connects only with TLS, and data nodes refuse it in plain text.
    pub require_tls: bool,
    /// ArbitrationRank: 0 never arbitrates; 1 and 2 may, 1 before 2.
    pub arbitration_rank: u32,
    pub line: usize,
}

/// The `Arbitration` parameter of `[ndbd default]`, as NDB has it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arbitration {
    /// An API node with ArbitrationRank 1 or 2 is the arbitrator; a side of a split that keeps
    /// exactly half the data nodes asks it, and stops without an answer.
    #[default]
    Default,
    /// No arbitration: such a side goes on (two sides of a split may both serve).
    Disabled,
    /// Such a side waits ArbitrationTimeout for an external cluster manager to stop one side,
    /// then goes on.
    WaitExternal,
}

impl Arbitration {
    /// The value as NDB spells it in a config file.
    pub fn as_str(self) -> &'static str {
        match self {
            Arbitration::Default => "Default",
            Arbitration::Disabled => "Disabled",
            Arbitration::WaitExternal => "WaitExternal",
        }
    }

    /// Reads NDB's spelling (case-insensitive, as NDB's config parser).
    pub fn parse(text: &str) -> Option<Arbitration> {
        [
            Arbitration::Default,
            Arbitration::Disabled,
            Arbitration::WaitExternal,
        ]
        .into_iter()
        .find(|a| a.as_str().eq_ignore_ascii_case(text.trim()))
    }
}

/// A node group: NoOfReplicas data nodes that hold the same partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeGroup {
    pub id: u32,
    /// Members in file order.
    pub nodes: Vec<NodeId>,
}

/// The link between two nodes that talk, and its transporter settings.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// Always `node1 < node2`.
    pub node1: NodeId,
    pub node2: NodeId,
    pub kind: TransporterKind,
    /// True when a `[tcp]`/`[shm]` section named this pair.
    pub explicit: bool,
    pub send_buffer_memory_bytes: u64,
    /// TCP only (ReceiveBufferMemory); for SHM the same default applies and is unused.
    pub receive_buffer_memory_bytes: u64,
    pub checksum: bool,
    /// OverloadLimit in bytes as given (0 = 80 % of SendBufferMemory); see `overload_limit`.
    pub overload_limit_bytes: u64,
    /// SHM only: ShmSize.
    pub shm_size_bytes: u64,
    /// SHM only: ShmSpintime in µs.
    pub shm_spintime_us: u32,
    /// SHM only: the settings this pair's link takes when a node asks for TCP or io_uring on
    /// it instead (testread-perf compares both on one link): the `[tcp default]` values, so
    /// that such a link checks frames only when TCP links do (NDB's TCP Checksum default is 0).
    pub over_tcp: Option<Box<LinkConfig>>,
}

impl LinkConfig {
    /// The pending-send bytes above which the link reports overload (error 1218).
    pub fn overload_limit(&self) -> u64 {
        if self.overload_limit_bytes == 0 {
            self.send_buffer_memory_bytes / 10 * 8
        } else {
            self.overload_limit_bytes.min(self.send_buffer_memory_bytes)
        }
    }

    /// The settings of this link when it is opened as `kind`: its own, or [`Self::over_tcp`]
    /// when an SHM link is opened over TCP or io_uring.
    pub fn opened_as(&self, kind: TransporterKind) -> &LinkConfig {
        match (&self.over_tcp, kind) {
            (Some(tcp), TransporterKind::Tcp | TransporterKind::Uring) => tcp,
            _ => self,
        }
    }

    /// The other end of the link, seen from `me`.
    pub fn peer_of(&self, me: NodeId) -> Option<NodeId> {
        if self.node1 == me {
            Some(self.node2)
        } else if self.node2 == me {
            Some(self.node1)
        } else {
            None
        }
    }
}

/// A non-fatal remark about the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// True when two HostNames name one host: equal but for case, or both loopback
/// (`localhost`, `127.x.y.z`, `::1`). Names are not resolved: the config crate does no IO.
pub fn same_host(a: &str, b: &str) -> bool {
    let loopback = |name: &str| {
        name.eq_ignore_ascii_case("localhost")
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    };
    a.eq_ignore_ascii_case(b) || (loopback(a) && loopback(b))
}

impl ClusterConfig {
    /// The data node with this id.
    pub fn data_node(&self, id: NodeId) -> Option<&DataNodeConfig> {
        self.data_nodes.iter().find(|n| n.node_id == id)
    }

    /// The management node with this id.
    pub fn mgm_node(&self, id: NodeId) -> Option<&MgmNodeConfig> {
        self.mgm_nodes.iter().find(|n| n.node_id == id)
    }

    /// The API slot with this id.
    pub fn api_slot(&self, id: NodeId) -> Option<&ApiSlotConfig> {
        self.api_slots.iter().find(|n| n.node_id == id)
    }

    /// The HostName of node `id` (of any kind), when it has a non-empty one.
    pub fn host_name(&self, id: NodeId) -> Option<&str> {
        let name = match self.node_kind(id)? {
            NodeKind::Data => self.data_node(id)?.host_name.as_str(),
            NodeKind::Api => self.api_slot(id)?.host_name.as_deref()?,
            NodeKind::Mgm => self
                .mgm_nodes
                .iter()
                .find(|n| n.node_id == id)?
                .host_name
                .as_str(),
        };
        (!name.is_empty()).then_some(name)
    }

    /// RequireTls and RequireCertificate of node `id` (false for a node not in the file; an API
    /// node has no RequireCertificate).
    pub fn tls_required(&self, id: NodeId) -> (bool, bool) {
        if let Some(n) = self.data_node(id) {
            (n.require_tls, n.require_certificate)
        } else if let Some(n) = self.api_slot(id) {
            (n.require_tls, false)
        } else if let Some(n) = self.mgm_nodes.iter().find(|n| n.node_id == id) {
            (n.require_tls, n.require_certificate)
        } else {
            (false, false)
        }
    }

    /// What kind of node `id` is, if it is in the file.
    pub fn node_kind(&self, id: NodeId) -> Option<NodeKind> {
        if self.data_node(id).is_some() {
            Some(NodeKind::Data)
        } else if self.api_slot(id).is_some() {
            Some(NodeKind::Api)
        } else if self.mgm_nodes.iter().any(|n| n.node_id == id) {
            Some(NodeKind::Mgm)
        } else {
            None
        }
    }

    /// The link between `a` and `b`, in either order.
    pub fn link(&self, a: NodeId, b: NodeId) -> Option<&LinkConfig> {
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        self.links.iter().find(|l| l.node1 == lo && l.node2 == hi)
    }

    /// The TCP port data node `id` listens on: ServerPort, or `DATA_NODE_PORT_BASE + id`.
    pub fn data_node_port(&self, id: NodeId) -> Option<u16> {
        let node = self.data_node(id)?;
        Some(node.server_port.unwrap_or(DATA_NODE_PORT_BASE + id.0))
    }

    /// A 64-bit identity of the cluster: a stable hash (xxh3) of every node's id, kind, host and
    /// port and every link's pair and kind. Two processes that read files describing the same
    /// cluster agree on it; a process reading another cluster's file does not.
    pub fn cluster_id(&self) -> u64 {
        let mut canon = String::new();
        for n in &self.data_nodes {
            let port = self.data_node_port(n.node_id).unwrap_or(0);
            canon.push_str(&format!("D{}@{}:{};", n.node_id, n.host_name, port));
        }
        for n in &self.mgm_nodes {
            canon.push_str(&format!(
                "M{}@{}:{};",
                n.node_id, n.host_name, n.port_number
            ));
        }
        for n in &self.api_slots {
            canon.push_str(&format!(
                "A{}@{};",
                n.node_id,
                n.host_name.as_deref().unwrap_or("")
            ));
        }
        for l in &self.links {
            canon.push_str(&format!("L{}-{}:{};", l.node1, l.node2, l.kind));
        }
        xxhash_rust::xxh3::xxh3_64(canon.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::same_host;

    #[test]
    fn host_names_are_one_host_when_equal_or_both_loopback() {
        assert!(same_host("db1.example", "DB1.example"));
        assert!(same_host("localhost", "127.0.0.1"));
        assert!(same_host("127.0.0.2", "::1"));
        assert!(!same_host("localhost", "10.0.0.1"));
        assert!(!same_host("10.0.0.1", "10.0.0.2"));
    }
}
