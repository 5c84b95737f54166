//! rndb-api: the library an application links to become an API node of an rndb cluster.
//!
//! ```text
//! Cluster::connect(config.ini) ──► one Connection per data node (TCP or SHM link); those not
//!   │                                reachable yet are linked in the background as they start
//!   ├─ create_table / get_table / drop_table    (DICT requests, sent to the DICT master)
//!   ├─ create_index / get_index / drop_index    (unique hash and ordered indexes)
//!   ├─ list_tables                              (every table and index, NDB's listObjects)
//!   └─ start_transaction ──► Transaction
//!          read / insert / update / write / delete   (defined locally, nothing sent)
//!          read_unique / update_unique / delete_unique (through a unique index)
//!          execute(NoCommit | Commit | Rollback)     (all defined operations in one flush,
//!                                                     answers gathered in one round trip)
//!          scan_table / scan_index ──► Scan          (an iterator; batches fetched on demand)
//!   async_executor ──► AsyncExecutor               (many transactions in flight from one
//!          prepare / send / poll                    thread: NDB's executeAsynchPrepare and
//!                                                   sendPollNdb)
//! ```
//!
//! Modules (private ones named in code font):
//!
//! - `connection`: one link to one data node, shared by threads (NDB's poll-owner design).
//! - `reconnect`: the background connector, which links the data nodes not reached at connect.
//! - `transaction`: operations, execute, results ([`Transaction`]).
//! - `scan`: scans read as iterators, with filters, ranges, order and lock modes ([`Scan`]).
//! - `asynch`: the asynchronous executor ([`AsyncExecutor`]).
//! - `tokio_api` (feature `tokio`): the same calls as futures for tokio
//!   (`Cluster::tokio`), woken by each link's reader (a task on the runtime for TCP).
//! - `blob`: BLOB, TEXT and JSON values whole over heads and parts tables.
//! - [`ddl`]: a `CREATE TABLE` subset read with `sqlparser`, for tools and applications.
//! - [`event`]: subscriptions to a table's committed changes (NDB's event API).
//! - `error`: [`Error`], which keeps NDB's code and temporary/permanent class.
//! - `stats`: NDB's client statistics ([`Cluster::client_stats`]), counted per thread.
//! - `futex_hash`: grows the kernel's futex hash for thousands of parked client threads; the
//!   crate's only `unsafe` (two `prctl` calls).
//!
//! Nothing here panics on what a data node or the network sends: a malformed answer closes the
//! link and fails the waiting request with an error.

#![deny(unsafe_code)]

mod arbiter;
mod asynch;
mod auto_increment;
mod blob;
mod connect;
mod connection;
pub mod ddl;
mod error;
pub mod event;
mod event_def;
mod event_merge;
mod futex_hash;
mod heartbeat;
mod interpreted;
pub mod ndbinfo;
pub mod placement;
mod reconnect;
mod scan;
mod stats;
#[cfg(feature = "tokio")]
mod tokio_api;
mod transaction;

pub use asynch::{AsyncExecutor, Completion};
pub use auto_increment::SYSTAB_0;
pub use blob::check_json;
pub use connection::LinkTraffic;
pub use error::Error;
pub use event::{EventData, EventOperation, EventType};
pub use event_def::{EventDef, TableEvents, EVENT_NAME_BYTES_MAX, NDB_EVENTS_0};
pub use interpreted::InterpretedCode;
pub use ndbinfo::NdbinfoRows;
pub use rndb_config::{NodeId, TransporterKind};
pub use rndb_protocol::filter::{CmpOp, Filter, GroupOp};
pub use rndb_protocol::scan::{BoundType, KeyRange as IndexRange, RangeEnd};
pub use rndb_protocol::schema::COLUMN_BYTES_MAX;
pub use rndb_protocol::signals::{ListedObject, ObjectKind};
pub use rndb_protocol::{
    AbortOption, BlobSize, ColumnDef, ColumnType, ErrorClass, ExecType, IndexKind, LockMode,
    NdbError, TableDef, Value,
};
pub use rndb_transporter::connect::is_this_host;
pub use rndb_transporter::socket_link::KernelTcpBytes;
pub use scan::{Scan, ScanOptions, OWN_PARTS_SCAN_BYTES_MAX};
pub use stats::{ClientStat, ClientStats};
#[cfg(feature = "tokio")]
pub use tokio_api::{TokioCluster, TokioEventOperation, TokioScan, TokioTransaction};
pub use transaction::{OpId, Transaction};

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rndb_config::{key_hash, ClusterConfig, PartitionMap};
use rndb_protocol::lqh::{self, ApiRegConf};
use rndb_protocol::signals::{
    self, block, gsn, CreateIndexReq, IndexInfo, IndexName, Refusal, TableInfo,
};
use rndb_transporter::{FrameHeader, Transporter};

use arbiter::Arbiter;
use connection::{Answers, Connection, Declared, LinksShared};
use reconnect::{Connector, OwnId, Slot, SlotReport, Slots};

thread_local! {
    /// The buffer [`Cluster::tc_of_key`] encodes keys in, kept for this thread's next key.
    static KEY_SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The longest a dictionary request refused by a data node that is not the DICT master (702)
/// waits for a link to a data node of lower id (the master is the live data node of lowest id)
/// before the 702 goes to the caller: several rounds of the background connector.
const MASTER_LINK_WAIT_MAX: Duration = Duration::from_secs(10);

const _: () =
    assert!(MASTER_LINK_WAIT_MAX.as_millis() >= 4 * reconnect::RECONNECT_INTERVAL_MAX.as_millis());

/// How an API node connects.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Take this API slot; `None` takes the first free slot that admits this host.
    pub node_id: Option<NodeId>,
    /// µs the waiting thread polls without sleeping after the last input (lower latency, one
    /// busy core). 0 sleeps at once.
    pub spin_us: u32,
    /// How long connecting and the handshake may take, per data node.
    pub connect_timeout: Duration,
    /// Force this transporter instead of the config's choice (SHM is set up over TCP, so a link
    /// the config makes SHM may also run as plain TCP).
    pub transporter: Option<TransporterKind>,
    /// How long a request may wait for its answer before it fails with error 4012.
    pub request_timeout: Duration,
    /// NDB's `--ndb-tls-search-path`: directories (colon-separated) holding the cluster CA
    /// (NDB-Cluster-cert) and this API node's key and certificate (ndb-api-private-key,
    /// ndb-api-cert). With them, links to data nodes with keys are TLS; `None` connects in
    /// plain text, which a data node with RequireTls=1 refuses (error 1718).
    pub tls_search_path: Option<String>,
    /// Auto-increment values taken from a table's counter at a time
    /// ([`Cluster::auto_increment_value`]; MySQL's `ndb_autoincrement_prefetch_sz`, 512).
    pub auto_increment_prefetch: u32,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            node_id: None,
            spin_us: 0,
            connect_timeout: Duration::from_secs(5),
            transporter: None,
            request_timeout: Duration::from_secs(60),
            tls_search_path: None,
            auto_increment_prefetch: 512,
        }
    }
}

/// A connected API node. Cheap to share between threads (`&Cluster` is `Send + Sync`).
#[derive(Debug)]
pub struct Cluster {
    config: ClusterConfig,
    /// The `[api]` slot this API node holds; the background connector takes another when
    /// another API node took this one while this one had no link (see `reconnect.rs`).
    node_id: Arc<OwnId>,
    /// One slot per data node, in config order, holding its link. A slot is empty while its
    /// data node has none: it could not be reached at connect and the background connector has
    /// not linked it yet, or it never joined the started cluster. A filled slot stays filled
    /// (a failed link stays, failed). At least one slot is filled.
    connections: Slots,
    /// Links to the data nodes not reached at connect, in the background; `None` when every
    /// data node was reached.
    connector: Option<Connector>,
    /// The heartbeat thread (see `heartbeat.rs`).
    heartbeat: Option<heartbeat::Heartbeat>,
    /// Where every key lives: the same map the data nodes build from the same config.
    partitions: PartitionMap,
    /// The next request id (starting at a random value); 0 is never used, nor ids from
    /// [`STREAM_REQUEST_IDS_FIRST`] up (event streams', which live for hours: a request that
    /// wrapped around onto one would take its frames).
    next_request_id: AtomicU32,
    /// The next event stream's request id, counted from [`STREAM_REQUEST_IDS_FIRST`].
    next_stream_id: AtomicU32,
    request_timeout: Duration,
    /// The data nodes on this host (their HostName is one of its addresses): the nearest
    /// replicas for reads that any replica may serve.
    near: Vec<NodeId>,
    /// Auto-increment ranges this API node took and has not used up.
    auto_increment: std::sync::Mutex<auto_increment::Ranges>,
    auto_increment_prefetch: u32,
    /// NDB's client statistics (`Cluster::client_stats`), shared with the links.
    stats: Arc<stats::Counters>,
}

/// A table as the dictionary knows it: its id, version and definition.
#[derive(Clone, Debug)]
pub struct Table(Arc<TableInner>);

#[derive(Debug)]
struct TableInner {
    info: TableInfo,
    key_columns: Vec<usize>,
    /// Its BLOB and TEXT columns, with their parts tables (`blob.rs`).
    blobs: Vec<blob::BlobColumn>,
    /// The table with parts tables whose rows an exclusive operation through this handle
    /// locks (`Table::locks_rows_of`).
    locks_rows_of: Option<u32>,
}

impl Table {
    fn new(info: TableInfo) -> Table {
        let key_columns = info.def.key_columns();
        let blobs = blob::BlobColumn::of(&info.def);
        let locks_rows_of = if rndb_protocol::blob::parted_columns(&info.def)
            .next()
            .is_some()
        {
            Some(info.table_id)
        } else {
            // A parts table, `NDB$BLOB_<table id>_<column>`: its rows are its table's.
            (info
                .def
                .name
                .strip_prefix(rndb_protocol::blob::PARTS_PREFIX))
            .and_then(|rest| rest.split('_').next()?.parse().ok())
        };
        Table(Arc::new(TableInner {
            info,
            key_columns,
            blobs,
            locks_rows_of,
        }))
    }

    /// The table with parts tables whose rows an exclusive operation through this handle
    /// locks: its own when it has BLOB or TEXT columns with parts (any handle of it, `raw`
    /// too), its table's when it is a parts table. A transaction notes such locks for its
    /// scans and reads of values with parts (`blob::Noted`).
    pub(crate) fn locks_rows_of(&self) -> Option<u32> {
        self.0.locks_rows_of
    }

    /// This table's handle with the parts tables of its BLOB and TEXT columns, looked up by
    /// name (4263 when one is missing).
    fn with_parts(self, cluster: &Cluster) -> Result<Table, Error> {
        let mut parts = Vec::new();
        for name in self.parts_table_names() {
            parts.push(
                cluster
                    .get_table(&name)
                    .map_err(|e| missing_parts(&name, e))?,
            );
        }
        Ok(self.with_parts_tables(parts))
    }

    /// The names of its parts tables, in the order of its parted columns.
    pub(crate) fn parts_table_names(&self) -> Vec<String> {
        (self.0.blobs.iter())
            .filter(|b| b.size.part_bytes() > 0)
            .map(|b| rndb_protocol::blob::parts_table_name(self.id(), b.column))
            .collect()
    }

    /// This handle with `parts`, the tables `parts_table_names` names.
    pub(crate) fn with_parts_tables(self, parts: Vec<Table>) -> Table {
        if parts.is_empty() {
            return self;
        }
        let mut blobs = self.0.blobs.clone();
        let parted = blobs.iter_mut().filter(|b| b.size.part_bytes() > 0);
        for (b, parts) in parted.zip(parts) {
            b.parts = Some(parts);
        }
        Table(Arc::new(TableInner {
            info: self.0.info.clone(),
            key_columns: self.0.key_columns.clone(),
            blobs,
            locks_rows_of: self.0.locks_rows_of,
        }))
    }

    /// A handle to this table that reads and writes BLOB and TEXT columns as the data node
    /// holds them: heads in the row, parts as rows of the parts tables (`ndb_restore` copies
    /// both so).
    pub fn raw(&self) -> Table {
        Table(Arc::new(TableInner {
            info: self.0.info.clone(),
            key_columns: self.0.key_columns.clone(),
            blobs: Vec::new(),
            locks_rows_of: self.0.locks_rows_of,
        }))
    }

    /// The parts tables of its BLOB and TEXT columns (none for a TINY one), by column.
    pub fn blob_parts_tables(&self) -> Vec<(usize, Table)> {
        (self.0.blobs.iter())
            .filter_map(|b| b.parts.clone().map(|p| (b.column, p)))
            .collect()
    }

    pub(crate) fn blobs(&self) -> &[blob::BlobColumn] {
        &self.0.blobs
    }

    pub(crate) fn blob_column(&self, column: usize) -> Option<&blob::BlobColumn> {
        self.0.blobs.iter().find(|b| b.column == column)
    }

    /// True when a BLOB or TEXT column has a parts table.
    pub(crate) fn has_parts(&self) -> bool {
        self.0.blobs.iter().any(|b| b.size.part_bytes() > 0)
    }
    pub fn name(&self) -> &str {
        &self.0.info.def.name
    }
    pub fn def(&self) -> &TableDef {
        &self.0.info.def
    }
    pub fn id(&self) -> u32 {
        self.0.info.table_id
    }
    pub fn version(&self) -> u32 {
        self.0.info.table_version
    }
    /// The position of the column called `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.def().column_index(name)
    }
    /// Positions of the primary-key columns.
    pub fn key_columns(&self) -> &[usize] {
        &self.0.key_columns
    }
    /// The same handle (a clone of this one), not merely an equal definition.
    pub(crate) fn same(&self, other: &Table) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// An index to create: a unique hash index or an ordered index on columns of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexDef {
    pub name: String,
    pub kind: IndexKind,
    /// Column names, in index order.
    pub columns: Vec<String>,
}

impl IndexDef {
    /// A unique hash index on `columns`.
    pub fn unique(name: &str, columns: &[&str]) -> IndexDef {
        IndexDef::new(name, IndexKind::Unique, columns)
    }
    /// An ordered index on `columns`.
    pub fn ordered(name: &str, columns: &[&str]) -> IndexDef {
        IndexDef::new(name, IndexKind::Ordered, columns)
    }
    fn new(name: &str, kind: IndexKind, columns: &[&str]) -> IndexDef {
        IndexDef {
            name: name.to_string(),
            kind,
            columns: columns.iter().map(|c| c.to_string()).collect(),
        }
    }
}

/// An index as the dictionary knows it, with its table.
#[derive(Clone, Debug)]
pub struct Index(Arc<IndexInner>);

#[derive(Debug)]
struct IndexInner {
    info: IndexInfo,
    columns: Vec<usize>,
    table: Table,
}

impl Index {
    /// This index with its table's raw handle ([`Table::raw`]): a scan through it returns
    /// BLOB and TEXT columns as the data node holds them (heads), reading no parts.
    pub fn raw(&self) -> Index {
        Index(Arc::new(IndexInner {
            info: self.0.info.clone(),
            columns: self.0.columns.clone(),
            table: self.0.table.raw(),
        }))
    }

    pub fn name(&self) -> &str {
        &self.0.info.name
    }
    pub fn kind(&self) -> IndexKind {
        self.0.info.kind
    }
    pub fn id(&self) -> u32 {
        self.0.info.index_id
    }
    pub fn version(&self) -> u32 {
        self.0.info.index_version
    }
    /// The indexed table.
    pub fn table(&self) -> &Table {
        &self.0.table
    }
    /// Positions of the indexed columns in the table, in index order.
    pub fn columns(&self) -> &[usize] {
        &self.0.columns
    }
}

impl Cluster {
    /// Reads the config file and connects to every data node that can be reached (at least
    /// one), then waits until those say the cluster has started. The data nodes not reached
    /// are linked in the background once they listen and say the cluster has started (NDB's
    /// API keeps connecting in the same way).
    pub fn connect(
        config_path: impl AsRef<Path>,
        options: ConnectOptions,
    ) -> Result<Cluster, Error> {
        let config = rndb_config::parse_file(config_path.as_ref())?;
        Cluster::connect_config(config, options)
    }

    /// Fetches the config from ndb_mgmd and connects as [`Cluster::connect`] does, as NDB's
    /// `Ndb_cluster_connection(connectstring)`: `connectstring` is `host[:port][,host[:port]]`
    /// (port 1186 by default; `nodeid=N,` asks for that API slot, as
    /// [`ConnectOptions::node_id`] does). Once connected, it tells ndb_mgmd which slot it took
    /// (a failure to is logged, not returned: the cluster is usable without ndb_mgmd).
    pub fn connect_mgm(connectstring: &str, options: ConnectOptions) -> Result<Cluster, Error> {
        // With a TLS search path, ndb_mgmd is talked to over TLS with this node's API keys.
        let tls = rndb_mgm::tls::ClientTls::load(
            options.tls_search_path.as_deref(),
            rndb_config::NodeKind::Api,
            false,
        )
        .map_err(|e| Error::Mgm(e.to_string()))?;
        let fetched = rndb_mgm::client::fetch_config_tls(
            connectstring,
            rndb_mgm::Requester::Api,
            options.node_id.map(|n| n.0),
            0,
            Duration::ZERO,
            &tls,
        )
        .map_err(|e| Error::Mgm(e.to_string()))?;
        let parsed = rndb_mgm::ConnectString::parse(connectstring).ok();
        let mut options = options;
        if options.node_id.is_none() {
            options.node_id = parsed.as_ref().and_then(|cs| cs.node_id).map(NodeId);
        }
        // Every management server of the config hears of this API node, each tracking it,
        // and again of each slot it takes later.
        let servers = parsed.map_or_else(Vec::new, |cs| cs.servers_of(&fetched.config));
        let identity = fetched.identity();
        let report: SlotReport = Arc::new(move |me: NodeId| {
            for (server, e) in
                rndb_mgm::client::report_api_connected(&servers, me.0, &identity, &tls)
            {
                tracing::warn!("could not tell {server} that API node {me} connected: {e}");
            }
        });
        let cluster = Cluster::connect_reporting(fetched.config, options, Some(report.clone()))?;
        report(cluster.node_id());
        Ok(cluster)
    }

    /// Connects with an already parsed config.
    pub fn connect_config(
        config: ClusterConfig,
        options: ConnectOptions,
    ) -> Result<Cluster, Error> {
        Cluster::connect_reporting(config, options, None)
    }

    /// [`Cluster::connect_config`], calling `report` with each slot the API node takes after
    /// this one.
    fn connect_reporting(
        config: ClusterConfig,
        options: ConnectOptions,
        report: Option<SlotReport>,
    ) -> Result<Cluster, Error> {
        // This connection's HELLO token: a process may hold several API slots, each its own.
        let token = rndb_transporter::handshake::fresh_token();
        let (node_id, links) = connect::connect_all(&config, &options, token)?;
        // What every link of this cluster shares; this API node arbitrates only if its slot's
        // ArbitrationRank is 1 or 2.
        let rank = config
            .api_slots
            .iter()
            .find(|slot| slot.node_id == node_id)
            .map_or(0, |slot| slot.arbitration_rank);
        let shared = LinksShared {
            declared: Arc::new(Declared::default()),
            arbiter: Arc::new(Arbiter::new(rank)),
            stats: Arc::default(),
        };
        let slots: Vec<Slot> = config.data_nodes.iter().map(|_| Slot::default()).collect();
        for link in links {
            let index = config
                .data_nodes
                .iter()
                .position(|data| data.node_id == link.peer())
                .ok_or_else(|| Error::Connect {
                    node: link.peer(),
                    reason: "linked to a data node the config does not name".into(),
                })?;
            slots[index].set(open_connection(link, options.spin_us, &shared)?);
        }
        let partitions = PartitionMap::new(&config);
        let near = config
            .data_nodes
            .iter()
            .filter(|data| is_this_host(&data.host_name))
            .map(|data| data.node_id)
            .collect();
        let mut cluster = Cluster {
            config,
            node_id: Arc::new(OwnId::new(node_id)),
            connections: slots.into(),
            connector: None,
            heartbeat: None,
            partitions,
            next_request_id: AtomicU32::new(first_request_id()),
            next_stream_id: AtomicU32::new(0),
            request_timeout: options.request_timeout,
            near,
            auto_increment: Default::default(),
            auto_increment_prefetch: options.auto_increment_prefetch,
            stats: Arc::clone(&shared.stats),
        };
        cluster.wait_until_started(options.connect_timeout)?;
        // The shortest HeartbeatIntervalDbApi of the data nodes (each normally has the same).
        let interval = cluster
            .config
            .data_nodes
            .iter()
            .map(|data| data.heartbeat_interval_db_api_ms)
            .min()
            .unwrap_or(1500);
        cluster.heartbeat = heartbeat::Heartbeat::start(
            Arc::clone(&cluster.connections),
            Duration::from_millis(u64::from(interval)),
        );
        // The data nodes not reached now, those that do not join the started cluster, and
        // those that fail later: the background connector links them once they serve.
        cluster.connector = Connector::start(
            cluster.config.clone(),
            Arc::clone(&cluster.node_id),
            token,
            options,
            Arc::clone(&cluster.connections),
            shared,
            report,
        );
        Ok(cluster)
    }

    /// Waits until every data node says the cluster has started (all data nodes connected to
    /// each other), as NDB's `wait_until_ready`; 4009 Cluster Failure after `timeout`.
    fn wait_until_started(&mut self, timeout: Duration) -> Result<(), Error> {
        let not_started = self.find_not_started(timeout)?;
        if not_started.is_empty() {
            return Ok(());
        }
        // Some data nodes serve, others have not started yet or left meanwhile (a node
        // restarting; `find_not_started` logged those): go on with those that serve, as NDB's
        // API does; the background connector links the others once they serve.
        for peer in not_started
            .iter()
            .filter(|&&p| self.linked().any(|c| c.peer == p && !c.is_failed()))
        {
            tracing::warn!(
                "data node {peer} has not joined the started cluster; going on without it \
                 until it does"
            );
        }
        for slot in self.connections.iter() {
            if slot.get().is_some_and(|c| not_started.contains(&c.peer)) {
                if let Some(connection) = slot.take() {
                    connection.give_up("its data node had not started when this API connected");
                }
            }
        }
        Ok(())
    }

    /// Waits until every connected data node says the cluster has started; after `timeout`,
    /// returns those that do not when some do, or fails with 4009 when none does. A data node
    /// whose link fails meanwhile (it stops or restarts while this API connects) is returned
    /// with them while another one is left; with none left, its error is.
    fn find_not_started(&self, timeout: Duration) -> Result<Vec<NodeId>, Error> {
        let deadline = Instant::now() + timeout;
        let mut pending: Vec<Arc<Connection>> = self.linked().collect();
        let linked_count = pending.len();
        let mut last = String::new();
        let mut lost: Vec<NodeId> = Vec::new();
        while !pending.is_empty() {
            let mut still = Vec::new();
            for connection in pending {
                let asked = api_reg_conf(&connection, self.new_request_id(), self.request_timeout);
                let conf = match asked {
                    Ok(conf) => conf,
                    Err(e) if connection.is_failed() && lost.len() + 1 < linked_count => {
                        tracing::warn!(
                            "data node {} left while this API node connected ({e}); going on \
                             without it until it serves again",
                            connection.peer
                        );
                        lost.push(connection.peer);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if !conf.started {
                    last = format!(
                        "data node {} sees {} of {} data nodes",
                        connection.peer, conf.data_nodes_up, conf.data_nodes
                    );
                    still.push(connection);
                }
            }
            pending = still;
            if pending.is_empty() {
                break;
            }
            if Instant::now() >= deadline && pending.len() + lost.len() < linked_count {
                return Ok(pending.iter().map(|c| c.peer).chain(lost).collect());
            }
            if Instant::now() >= deadline {
                let missing: Vec<String> = self
                    .config
                    .data_nodes
                    .iter()
                    .map(|d| d.node_id)
                    .filter(|&n| !self.linked().any(|c| c.peer == n))
                    .map(|n| format!("node {n}"))
                    .collect();
                if !missing.is_empty() {
                    last.push_str(&format!(
                        "; not reachable from this API node: {}",
                        missing.join(", ")
                    ));
                }
                return Err(Error::ndb_detail(
                    4009,
                    format!("the cluster did not start within {timeout:?}: {last}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(lost)
    }

    /// The partition map: which partition each key belongs to and the nodes of each.
    pub fn partition_map(&self) -> &PartitionMap {
        &self.partitions
    }

    /// The nodes holding the row with primary key `key` of `table`, primary replica first.
    pub fn replicas_of(&self, table: &Table, key: &[Value]) -> Result<Vec<NodeId>, Error> {
        let mut bytes = Vec::new();
        rndb_protocol::schema::encode_key(table.def(), table.key_columns(), key, &mut bytes)
            .map_err(Error::Ndb)?;
        let partition = self.partitions.partition_of(key_hash(&bytes));
        Ok(self.partitions.replicas(partition).to_vec())
    }

    /// The node that coordinates a transaction whose first operation has the key `key`
    /// (values in key order): NDB's transaction hint. That is the partition's first replica
    /// with a live link (the primary, or the backup that took over from a failed one); with
    /// `near` (a committed read of a READ_BACKUP table, which any replica may serve), the
    /// first such replica on this host if there is one. A replica whose node said it stops
    /// (280) is passed over while another is linked, as NDB's API avoids a stopping node. Key
    /// values are encoded as the data node encodes them; a key the node will refuse still gets
    /// a node.
    pub(crate) fn tc_of_key(&self, key: &[Value], near: bool) -> NodeId {
        // Encoded in this thread's scratch buffer: an allocation per transaction cost a cache
        // miss or two in each of thousands of client threads' heaps (issue 26).
        let mut bytes = KEY_SCRATCH.take();
        bytes.clear();
        let mut w = rndb_protocol::Writer::new(&mut bytes);
        for value in key {
            value.encode(&mut w);
        }
        let hash = key_hash(&bytes);
        KEY_SCRATCH.set(bytes);
        let partition = self.partitions.partition_of(hash);
        let replicas = self.partitions.replicas(partition);
        let pick = |serves: &dyn Fn(&Connection) -> bool| {
            let mut live = (replicas.iter().copied())
                .filter(|&n| self.live_connection(n).is_some_and(|c| serves(&c)));
            let nearest = if near {
                live.clone().find(|n| self.near.contains(n))
            } else {
                None
            };
            nearest.or_else(|| live.next())
        };
        pick(&|c| !c.is_stopping())
            .or_else(|| pick(&|_| true))
            .unwrap_or_else(|| self.coordinator().peer)
    }

    /// The link to data node `node` while it works.
    fn live_connection(&self, node: NodeId) -> Option<Arc<Connection>> {
        self.linked().find(|c| c.peer == node && !c.is_failed())
    }

    /// The link to data node `node`, failed or not (the coordinator's when there is none).
    pub(crate) fn connection_of(&self, node: NodeId) -> Arc<Connection> {
        match self.linked().find(|c| c.peer == node) {
            Some(connection) => connection,
            None => self.coordinator(),
        }
    }

    /// The links to data nodes, in config order (a data node without one is left out). A
    /// data node's link is replaced when it restarts, so each is taken as it is now.
    pub(crate) fn linked(&self) -> impl Iterator<Item = Arc<Connection>> + Clone + '_ {
        self.connections.iter().filter_map(Slot::get)
    }

    /// The frames and bytes this API node's links to data nodes carried so far, summed over
    /// the links it has now (a link replaced after a node restart starts from zero), with the
    /// kernel's counts for their TCP sockets. Two snapshots' [`LinkTraffic::since`] is what
    /// the work between them cost on the wire.
    pub fn link_traffic(&self) -> LinkTraffic {
        let mut total = LinkTraffic {
            kernel_tcp: Some(KernelTcpBytes::default()),
            ..LinkTraffic::default()
        };
        for connection in self.linked() {
            total.add(&connection.traffic());
        }
        total
    }

    /// NDB's client statistics of this API node since it connected (`Ndb::getClientStat`,
    /// summed over threads as `Ndb_cluster_connection::collect_client_stats` sums `Ndb`
    /// objects): round trips waited for, operations, transactions, scans, rows and bytes (see
    /// [`ClientStat`] for what each counts). A thread's counts show at once; the bytes of a
    /// link that was replaced stay counted.
    pub fn client_stats(&self) -> ClientStats {
        let _held = self.stats.links_held();
        let mut stats = self.stats.snapshot();
        let traffic = self.link_traffic();
        stats.add(ClientStat::BytesSentCount, traffic.bytes_sent);
        stats.add(ClientStat::BytesRecvdCount, traffic.bytes_received);
        stats
    }

    /// The client statistics' counters, for the modules that count.
    pub(crate) fn counters(&self) -> &stats::Counters {
        &self.stats
    }

    /// This API node's id: the `[api]` slot it holds. It changes only when another API node
    /// took the slot while this one had no link to any data node (a system restart), and this
    /// one then took another free slot (unless [`ConnectOptions::node_id`] chose it).
    pub fn node_id(&self) -> NodeId {
        self.node_id.get()
    }

    /// The config this node connected with.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The transporter of the link to the first data node.
    pub fn transporter_kind(&self) -> TransporterKind {
        self.coordinator().kind
    }

    /// Sends one empty signal that the data node's execution loop answers without touching
    /// storage: the transporter and loop cost, the baseline for everything else.
    pub fn ping(&self) -> Result<(), Error> {
        let connection = self.coordinator();
        let answer = ping_on(&connection, self.new_request_id(), self.request_timeout)?;
        match answer {
            gsn::PING_CONF => Ok(()),
            // Any signal completes a request; only PING_CONF answers a ping.
            signal => Err(connection.protocol_violation(format!("answer {signal} to PING_REQ"))),
        }
    }

    /// Creates a table on the data nodes. When the DICT master fails before it answers, the
    /// call fails and the new master makes the data nodes agree (NDB's DICT takeover): a create
    /// some data node lacks is taken back where it was applied, so a retry creates the table,
    /// or gets 721 when every data node had it.
    pub fn create_table(&self, def: &TableDef) -> Result<Table, Error> {
        def.validate()
            .map_err(|(code, detail)| Error::ndb_detail(code, detail))?;
        let mut payload = Vec::new();
        signals::encode_table_def(&mut payload, def);
        let (connection, answers) =
            self.dict_request(gsn::CREATE_TABLE_REQ, &payload, gsn::CREATE_TABLE_CONF)?;
        table_answer(&connection, &answers, gsn::CREATE_TABLE_CONF)?.with_parts(self)
    }

    /// Looks a table up by name (error 709 when there is none).
    pub fn get_table(&self, name: &str) -> Result<Table, Error> {
        let mut payload = Vec::new();
        signals::encode_name(&mut payload, name);
        let (connection, answers) =
            self.dict_request(gsn::GET_TABINFO_REQ, &payload, gsn::GET_TABINFO_CONF)?;
        table_answer(&connection, &answers, gsn::GET_TABINFO_CONF)?.with_parts(self)
    }

    /// Every table and index the dictionary holds, in id order (NDB's listObjects), read a
    /// page of LIST_TABLES_CONF at a time.
    pub fn list_tables(&self) -> Result<Vec<ListedObject>, Error> {
        let mut objects: Vec<ListedObject> = Vec::new();
        let mut from_id = 0;
        loop {
            let payload = list_tables_payload(from_id);
            let (connection, answers) =
                self.dict_request(gsn::LIST_TABLES_REQ, &payload, gsn::LIST_TABLES_CONF)?;
            match list_tables_page(&connection, &answers, from_id, &mut objects)? {
                Some(next) => from_id = next,
                None => return Ok(objects),
            }
        }
    }

    /// Drops a table and its rows (error 709 when there is none). As NDB's, the drop first
    /// waits for the transactions holding the table's rows to commit or abort; meanwhile new
    /// operations on the table fail with 283 (Table is being dropped), other schema changes
    /// queue (701 past 64) and no data node can restart (it is let in after the drop). A
    /// transaction left open holds the drop up: this call then fails with 4012 after the
    /// request timeout, while the drop goes on and happens once that transaction ends (a
    /// retry then gets 709). With files, the answer waits for the global checkpoint that
    /// makes the drop durable (4012 when none is saved within twice
    /// TimeBetweenGlobalCheckpointsTimeout: dropped, durability unknown). When the DICT master
    /// fails before it answers, a drop that reached some surviving data node is finished on the
    /// others by the new master (a retry gets 709); one that reached none never happens.
    pub fn drop_table(&self, name: &str) -> Result<(), Error> {
        let mut payload = Vec::new();
        signals::encode_name(&mut payload, name);
        let (connection, answers) =
            self.dict_request(gsn::DROP_TABLE_REQ, &payload, gsn::DROP_TABLE_CONF)?;
        match single_answer(&answers, &connection)? {
            (gsn::DROP_TABLE_CONF, _) => Ok(()),
            (signal, payload) => Err(refusal(&connection, signal, payload)),
        }
    }

    /// Creates a unique hash index or an ordered index on `table`. An index on a table that
    /// holds rows is built from them (a unique index refuses duplicates with 893).
    pub fn create_index(&self, table: &Table, def: &IndexDef) -> Result<Index, Error> {
        let mut payload = Vec::new();
        CreateIndexReq {
            table: table.name().to_string(),
            index: def.name.clone(),
            kind: def.kind,
            columns: def.columns.clone(),
        }
        .encode(&mut payload);
        let (connection, answers) =
            self.dict_request(gsn::CREATE_INDEX_REQ, &payload, gsn::CREATE_INDEX_CONF)?;
        index_answer(&connection, table, &answers, gsn::CREATE_INDEX_CONF)
    }

    /// Looks up index `name` of `table` (4243 when there is none).
    pub fn get_index(&self, table: &Table, name: &str) -> Result<Index, Error> {
        let payload = index_name(table, name);
        let (connection, answers) =
            self.dict_request(gsn::GET_INDEX_REQ, &payload, gsn::GET_INDEX_CONF)?;
        index_answer(&connection, table, &answers, gsn::GET_INDEX_CONF)
    }

    /// Drops index `name` of `table` (4243 when there is none).
    pub fn drop_index(&self, table: &Table, name: &str) -> Result<(), Error> {
        let payload = index_name(table, name);
        let (connection, answers) =
            self.dict_request(gsn::DROP_INDEX_REQ, &payload, gsn::DROP_INDEX_CONF)?;
        match single_answer(&answers, &connection)? {
            (gsn::DROP_INDEX_CONF, _) => Ok(()),
            (signal, payload) => Err(refusal(&connection, signal, payload)),
        }
    }

    /// This API node's scan batch sizes: BatchSize, BatchByteSize, MaxScanBatchSize of its
    /// `[api]` slot (NDB's defaults when the slot is not found).
    pub(crate) fn scan_batch_defaults(&self) -> (u32, u32, u32) {
        self.config
            .api_slots
            .iter()
            .find(|s| s.node_id == self.node_id())
            .map_or((256, 16 * 1024, 256 * 1024), |s| {
                (s.batch_size, s.batch_byte_size, s.max_scan_batch_size)
            })
    }

    /// An executor that keeps many transactions in flight from one thread (NDB's
    /// asynchronous API), holding at most MaxNoOfConcurrentTransactions (the smallest of the
    /// data nodes') at once.
    pub fn async_executor(&self) -> AsyncExecutor<'_> {
        let limit = self
            .config
            .data_nodes
            .iter()
            .map(|n| n.max_no_of_concurrent_transactions)
            .min()
            .unwrap_or(4096);
        AsyncExecutor::new(self, limit as usize)
    }

    /// Starts a transaction. Nothing is sent until its first `execute`.
    pub fn start_transaction(&self) -> Result<Transaction<'_>, Error> {
        Ok(Transaction::new(self, self.new_request_id()))
    }

    /// Sends one signal to `connection`'s data node and waits for its answer.
    fn request_to(
        &self,
        connection: &Connection,
        signal: u16,
        receiver_block: u16,
        payload: &[u8],
    ) -> Result<Answers, Error> {
        request(
            connection,
            self.new_request_id(),
            (signal, receiver_block, payload),
            self.request_timeout,
        )
    }

    /// Sends a dictionary request to the DICT master and waits for the answer, with the link it
    /// came on. The master is the live data node of lowest id (ndbd's `master()`); the request
    /// goes to the lowest linked one, and a node that is not the master refuses it with 702 (an
    /// API node may not have linked the master yet, or a node may have failed): then it goes
    /// again to the lowest live link below the refusing node, waiting up to
    /// [`MASTER_LINK_WAIT_MAX`] for the background connector to make one, as NDB's dictionary
    /// retries at the master the refusal names. Each try goes to a lower node id, so there are
    /// at most as many as data nodes. `conf` is the signal that accepts the request.
    fn dict_request(
        &self,
        signal: u16,
        payload: &[u8],
        conf: u16,
    ) -> Result<(Arc<Connection>, Answers), Error> {
        let mut connection = self.coordinator();
        loop {
            let answers = self.request_to(&connection, signal, block::DBDICT, payload)?;
            if !refused_not_master(&answers, conf) {
                return Ok((connection, answers));
            }
            match self.await_link_below(connection.peer) {
                Some(lower) => connection = lower,
                None => return Ok((connection, answers)),
            }
        }
    }

    /// The live link of lowest node id below `node`, waiting up to [`MASTER_LINK_WAIT_MAX`]
    /// (and the request timeout) for the background connector to make one.
    fn await_link_below(&self, node: NodeId) -> Option<Arc<Connection>> {
        let lowest_below = || {
            self.linked()
                .filter(|c| c.peer < node && !c.is_failed())
                .min_by_key(|c| c.peer)
        };
        if let Some(connection) = lowest_below() {
            return Some(connection);
        }
        let connector = self.connector.as_ref()?;
        let deadline = Instant::now() + MASTER_LINK_WAIT_MAX.min(self.request_timeout);
        connector.wait_until(deadline, || lowest_below().is_some());
        lowest_below()
    }

    pub(crate) fn new_request_id(&self) -> u32 {
        loop {
            let id =
                self.next_request_id.fetch_add(1, Ordering::Relaxed) % STREAM_REQUEST_IDS_FIRST;
            if id != 0 {
                return id;
            }
        }
    }

    /// A request id for an event stream, apart from every other request's.
    pub(crate) fn new_stream_request_id(&self) -> u32 {
        let n = self.next_stream_id.fetch_add(1, Ordering::Relaxed);
        STREAM_REQUEST_IDS_FIRST | (n & !STREAM_REQUEST_IDS_FIRST)
    }

    pub(crate) fn deadline(&self) -> Instant {
        Instant::now() + self.request_timeout
    }

    /// The data node that coordinates a transaction that starts with a scan: the live one
    /// with the lowest node id, passing over one that said it stops while another is linked
    /// (a stopping node refuses to coordinate new scans).
    pub(crate) fn scan_coordinator(&self) -> Arc<Connection> {
        self.linked()
            .filter(|c| !c.is_failed() && !c.is_stopping())
            .min_by_key(|c| c.peer)
            .unwrap_or_else(|| self.coordinator())
    }

    /// The data node that takes dictionary requests: the live one with the lowest node id (NDB's
    /// DICT master), which passes schema changes to every other data node.
    pub(crate) fn coordinator(&self) -> Arc<Connection> {
        self.linked()
            .filter(|c| !c.is_failed())
            .min_by_key(|c| c.peer)
            .or_else(|| self.linked().next())
            .expect("a connected Cluster holds at least one link")
    }
}

impl Drop for Cluster {
    /// Stops the background connector (waiting for it), then the connections' receive threads;
    /// each link closes when its last user lets go.
    fn drop(&mut self) {
        self.heartbeat = None;
        self.connector = None;
        for connection in self.linked() {
            connection.close();
        }
    }
}

/// A connection on a new link to a data node. An SHM link asks for its ShmSpintime; `spin_us`
/// (the option) may ask for more.
fn open_connection(
    link: Box<dyn Transporter>,
    spin_us: u32,
    shared: &LinksShared,
) -> Result<Arc<Connection>, Error> {
    let spin = link
        .spin_time()
        .max(Duration::from_micros(u64::from(spin_us)));
    Connection::new(link, spin, shared)
}

/// Sends PING_REQ on `connection` as request `request_id` and returns the signal of its one
/// answer.
fn ping_on(connection: &Connection, request_id: u32, timeout: Duration) -> Result<u16, Error> {
    let answers = request(
        connection,
        request_id,
        (gsn::PING_REQ, block::QMGR, &[]),
        timeout,
    )?;
    single_answer(&answers, connection).map(|(signal, _)| signal)
}

/// [`Cluster::ping`]'s path through the library (register the request, send it, spin for
/// the answer, take it) over one link with no cluster behind it, for benchmarks that put it
/// beside the bare link: `cargo bench -p rndb-transporter --bench shm_floor` answers each
/// frame with itself from a process that only echoes, so the difference from its `link` cell
/// is what the library adds to a round trip, and the rest of testread-perf's ping is the data
/// node's. Not for applications.
#[doc(hidden)]
#[derive(Debug)]
pub struct LinkPinger {
    connection: Arc<Connection>,
    next_request_id: u32,
}

impl LinkPinger {
    /// Wraps `link` as a cluster wraps each of its links; its poll owner spins `spin` after
    /// the last input before it sleeps.
    pub fn new(
        link: Box<dyn rndb_transporter::Transporter>,
        spin: Duration,
    ) -> Result<LinkPinger, Error> {
        Ok(LinkPinger {
            connection: Connection::new(link, spin, &connection::LinksShared::default())?,
            next_request_id: 0,
        })
    }

    /// One ping, as [`Cluster::ping`] sends it; any answer to its request id ends it.
    pub fn ping(&mut self, timeout: Duration) -> Result<(), Error> {
        self.next_request_id = self.next_request_id.wrapping_add(1).max(1);
        ping_on(&self.connection, self.next_request_id, timeout).map(|_| ())
    }
}

impl Drop for LinkPinger {
    fn drop(&mut self) {
        self.connection.close();
    }
}

/// Sends one signal `(signal, receiver block, payload)` on `connection` as request
/// `request_id` and waits up to `timeout` for its answer. The clock is read once the request
/// is on its way, while the data node works on it.
fn request(
    connection: &Connection,
    request_id: u32,
    (signal, receiver_block, payload): (u16, u16, &[u8]),
    timeout: Duration,
) -> Result<Answers, Error> {
    let header = FrameHeader {
        signal,
        receiver_block,
        sender_block: block::API,
        request_id,
    };
    connection.register_request(request_id);
    if let Err(e) = connection.send_batch(&[(header, payload)]) {
        connection.forget(request_id);
        return Err(e);
    }
    connection.stats().add(ClientStat::WaitMetaRequestCount, 1);
    connection.wait(request_id, Instant::now() + timeout)
}

/// Asks the data node of `connection` whether the cluster has started (API_REGREQ as request
/// `request_id`, waiting up to `timeout`).
fn api_reg_conf(
    connection: &Connection,
    request_id: u32,
    timeout: Duration,
) -> Result<ApiRegConf, Error> {
    let signal = (lqh::gsn::API_REGREQ, block::QMGR, &[][..]);
    let answers = request(connection, request_id, signal, timeout)?;
    let (signal, payload) = single_answer(&answers, connection)?;
    (signal == lqh::gsn::API_REGCONF)
        .then(|| ApiRegConf::decode(payload).ok())
        .flatten()
        .ok_or_else(|| connection.protocol_violation(format!("answer {signal} to API_REGREQ")))
}

/// True when a dictionary request's answer is a refusal (anything but `conf`) with 702: the
/// data node is not the DICT master.
fn refused_not_master(answers: &Answers, conf: u16) -> bool {
    let mut iter = answers.iter();
    match (iter.next(), iter.next()) {
        (Some((signal, payload)), None) if signal != conf => {
            Refusal::decode(payload).is_ok_and(|r| r.code == NOT_MASTER)
        }
        _ => false,
    }
}

/// NDB's "Request to non-master": a schema request reached a data node that is not the DICT
/// master.
const NOT_MASTER: u32 = 702;

/// Where this process's request ids start: random, so that an application restarted on the same
/// API slot does not reuse the transaction ids its previous run had (data nodes remember ended
/// transactions for a while and refuse work of them).
/// Request ids from here up are event streams' (2^28 of them, reused after as many
/// subscriptions).
const STREAM_REQUEST_IDS_FIRST: u32 = 0xF000_0000;

fn first_request_id() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    (hasher.finish() as u32).max(1)
}

fn index_name(table: &Table, name: &str) -> Vec<u8> {
    let mut payload = Vec::new();
    IndexName {
        table: table.name().to_string(),
        index: name.to_string(),
    }
    .encode(&mut payload);
    payload
}

/// The one (signal, payload) a dictionary request gets back.
fn single_answer<'a>(
    answers: &'a Answers,
    connection: &Connection,
) -> Result<(u16, &'a [u8]), Error> {
    let mut iter = answers.iter();
    match (iter.next(), iter.next()) {
        (Some(answer), None) => Ok(answer),
        _ => Err(connection.protocol_violation("expected exactly one answer")),
    }
}

/// A LIST_TABLES_REQ for the objects from id `from_id` on.
fn list_tables_payload(from_id: u32) -> Vec<u8> {
    let mut payload = Vec::new();
    signals::ListTablesReq { from_id }.encode(&mut payload);
    payload
}

/// Adds one LIST_TABLES_CONF page (asked from `from_id`) to `objects`: the id to ask from
/// next, `None` after the last page.
fn list_tables_page(
    connection: &Connection,
    answers: &Answers,
    from_id: u32,
    objects: &mut Vec<ListedObject>,
) -> Result<Option<u32>, Error> {
    let page = match single_answer(answers, connection)? {
        (gsn::LIST_TABLES_CONF, payload) => signals::ListTablesConf::decode(payload)
            .map_err(|e| connection.protocol_violation(e.to_string()))?,
        (signal, payload) => return Err(refusal(connection, signal, payload)),
    };
    let last = page.objects.last().map(|o| o.id);
    if page.objects.iter().any(|o| o.id < from_id) {
        return Err(connection.protocol_violation("LIST_TABLES_CONF went backwards"));
    }
    objects.extend(page.objects);
    match (page.more, last) {
        (true, Some(id)) if id < u32::MAX => Ok(Some(id + 1)),
        (true, _) => {
            Err(connection
                .protocol_violation("LIST_TABLES_CONF says there is more after no object"))
        }
        (false, _) => Ok(None),
    }
}

/// 4263 for a parts table `name` that is not there (709, 723); another error of its lookup
/// (a lost link, a timeout) as it is, so that a temporary one stays temporary.
fn missing_parts(name: &str, e: Error) -> Error {
    match e.code() {
        Some(709 | 723) => Error::ndb_detail(4263, format!("{name}: {e}")),
        _ => e,
    }
}

/// The table a CREATE_TABLE_CONF or GET_TABINFO_CONF (`conf`) describes, or the refusal.
fn table_answer(connection: &Connection, answers: &Answers, conf: u16) -> Result<Table, Error> {
    match single_answer(answers, connection)? {
        (signal, payload) if signal == conf => TableInfo::decode(payload)
            .map(Table::new)
            .map_err(|e| connection.protocol_violation(e.to_string())),
        (signal, payload) => Err(refusal(connection, signal, payload)),
    }
}

/// The index of `table` a CREATE_INDEX_CONF or GET_INDEX_CONF (`conf`) describes, or the
/// refusal.
fn index_answer(
    connection: &Connection,
    table: &Table,
    answers: &Answers,
    conf: u16,
) -> Result<Index, Error> {
    let malformed = |reason: String| connection.protocol_violation(reason);
    match single_answer(answers, connection)? {
        (signal, payload) if signal == conf => {
            let info = IndexInfo::decode(payload).map_err(|e| malformed(e.to_string()))?;
            if info.table_id != table.id() {
                return Err(Error::ndb_detail(
                    241,
                    format!("table {} was dropped and created again", table.name()),
                ));
            }
            let columns: Vec<usize> = info.columns.iter().map(|&c| usize::from(c)).collect();
            if columns.iter().any(|&c| c >= table.def().columns.len()) {
                return Err(malformed("index names a column the table lacks".into()));
            }
            Ok(Index(Arc::new(IndexInner {
                info,
                columns,
                table: table.clone(),
            })))
        }
        (signal, payload) => Err(refusal(connection, signal, payload)),
    }
}

/// The NDB error a refusal (any answer but the expected CONF) carries.
fn refusal(connection: &Connection, signal: u16, payload: &[u8]) -> Error {
    match Refusal::decode(payload) {
        Ok(r) => Error::Ndb(NdbError::from_wire(r.code, &r.detail)),
        Err(e) => connection.protocol_violation(format!("answer with signal {signal}: {e}")),
    }
}
