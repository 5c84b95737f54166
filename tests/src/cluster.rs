//! [`TestCluster`]: the data nodes of a [`ClusterSpec`] as real child processes, stopped when the
//! guard drops, even when the test panics.

use std::collections::BTreeMap;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use rndb_api::ConnectOptions;
use rndb_config::{ClusterConfig, NodeId};
use rndb_testread_perf::data_nodes::{DataNodes, Readiness};
use tempfile::TempDir;

use crate::binaries;
use crate::spec::{ClusterSpec, WrittenConfig};

pub use rndb_testread_perf::data_nodes::{START_TIMEOUT, STOP_GRACE};
/// How many times `start` picks new ports when a data node finds its port taken (free ports are
/// picked by binding port 0, so another process may take one before the node binds it).
const START_ATTEMPTS: u32 = 3;
/// Lines of each node's log printed when a test fails with a cluster running.
const LOG_TAIL_LINES: usize = 40;

/// A running test cluster. Dropping it stops every data node (SIGTERM, then SIGKILL after
/// [`STOP_GRACE`]) and removes its directory, unless the thread is panicking: then it prints the
/// end of every node's log and keeps the directory for a post-mortem.
#[derive(Debug)]
pub struct TestCluster {
    /// The data node processes (the shared harness of `testread-perf --local`); a killed or
    /// stopped node keeps its entry. Declared before `dir`, which holds their logs.
    nodes: DataNodes,
    /// The config every process of the cluster reads, parsed.
    config: ClusterConfig,
    /// The config.ini inside `dir`.
    config_path: PathBuf,
    /// The ServerPort of every data node.
    ports: BTreeMap<NodeId, u16>,
    /// Holds the config, the data directories and the logs.
    dir: TempDir,
}

impl TestCluster {
    /// Writes the spec's config into a new temporary directory, starts every data node with
    /// `--initial`, and waits until each accepts TCP connections.
    pub fn start(spec: ClusterSpec) -> Result<TestCluster> {
        TestCluster::start_without(spec, &[])
    }

    /// As [`TestCluster::start`], but data nodes `missing` are not started (see
    /// [`TestCluster::start_node`]): the cluster waits for them.
    pub fn start_without(spec: ClusterSpec, missing: &[NodeId]) -> Result<TestCluster> {
        let ndbd = binaries::ndbd_path()?;
        let mut attempt = 1;
        loop {
            let mut cluster = TestCluster::prepare(&spec, &ndbd)?;
            let started = cluster
                .spawn_all(missing)
                .and_then(|()| cluster.wait_serving());
            match started {
                Ok(()) => return Ok(cluster),
                Err(e) if attempt < START_ATTEMPTS && cluster.port_was_taken() => {
                    eprintln!("rndb-tests: a data node port was taken, retrying: {e:#}");
                    attempt += 1;
                }
                Err(e) => return Err(e.context(cluster.log_tails())),
            }
        }
    }

    /// The config.ini every process of this cluster reads.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The parsed config.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The temporary directory holding config, data directories and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The port data node `id` listens on.
    pub fn port(&self, id: NodeId) -> u16 {
        self.ports[&id]
    }

    /// The address data node `id` listens on: its HostName (an address in the configs the
    /// harness writes) and its port.
    pub fn addr(&self, id: NodeId) -> SocketAddr {
        self.nodes
            .addr(id)
            .unwrap_or_else(|| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.port(id)))
    }

    /// The data node ids, in id order.
    pub fn data_node_ids(&self) -> Vec<NodeId> {
        self.nodes.ids()
    }

    /// The API slot ids, in file order.
    pub fn api_node_ids(&self) -> Vec<NodeId> {
        self.config.api_slots.iter().map(|s| s.node_id).collect()
    }

    /// Connects an API node (any free slot) and checks that it can ping the cluster.
    pub fn connect(&self) -> Result<rndb_api::Cluster> {
        self.connect_with(ConnectOptions::default())
    }

    /// Connects an API node in API slot `id`.
    pub fn connect_as(&self, id: NodeId) -> Result<rndb_api::Cluster> {
        self.connect_with(ConnectOptions {
            node_id: Some(id),
            ..ConnectOptions::default()
        })
    }

    /// Connects an API node that forces `kind` on its links (e.g. TCP on links the config
    /// makes SHM) and checks that it got it.
    pub fn connect_over(&self, kind: rndb_api::TransporterKind) -> Result<rndb_api::Cluster> {
        let cluster = self.connect_with(ConnectOptions {
            transporter: Some(kind),
            ..ConnectOptions::default()
        })?;
        anyhow::ensure!(
            cluster.transporter_kind() == kind,
            "asked for {kind} links, got {}",
            cluster.transporter_kind()
        );
        Ok(cluster)
    }

    /// Connects an API node with `options` and pings the cluster once.
    pub fn connect_with(&self, options: ConnectOptions) -> Result<rndb_api::Cluster> {
        let cluster = rndb_api::Cluster::connect(&self.config_path, options)
            .with_context(|| format!("connect to the cluster of {}", self.config_path.display()))?;
        cluster
            .ping()
            .context("ping the cluster after connecting")?;
        Ok(cluster)
    }

    /// The process id of data node `id`, while it runs.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        self.nodes.pid(id)
    }

    /// True while data node `id` has not exited.
    pub fn is_running(&mut self, id: NodeId) -> bool {
        self.nodes.is_running(id)
    }

    /// Kills data node `id` with SIGKILL and reaps it.
    pub fn kill_node(&mut self, id: NodeId) -> Result<()> {
        self.nodes.kill(id)
    }

    /// The arguments every `ndbd` started from now on gets after the usual ones (instead of
    /// the spec's).
    pub fn set_ndbd_args(&mut self, args: &[&str]) {
        self.nodes
            .set_extra_args(args.iter().map(|a| a.to_string()).collect());
    }

    /// Kills every data node with SIGKILL at once (see `DataNodes::kill_all`).
    pub fn kill_all_nodes(&mut self) -> Result<()> {
        self.nodes.kill_all()
    }

    /// Stops data node `id` with SIGTERM (SIGKILL after [`STOP_GRACE`]) and returns how it
    /// exited.
    pub fn stop_node(&mut self, id: NodeId) -> Result<ExitStatus> {
        self.nodes.stop(id)
    }

    /// Sends data node `id` SIGTERM (a graceful stop) and returns at once; `stop_node`
    /// waits for its exit.
    pub fn terminate_node(&mut self, id: NodeId) -> Result<()> {
        self.nodes.terminate(id)
    }

    /// Everything data node `id` has written to stdout and stderr so far.
    pub fn log(&self, id: NodeId) -> String {
        self.nodes.log(id)
    }

    /// Writes the config into a new directory; no process runs yet.
    fn prepare(spec: &ClusterSpec, ndbd: &Path) -> Result<TestCluster> {
        let dir = tempfile::Builder::new()
            .prefix("rndb-test-")
            .tempdir()
            .context("create the test directory")?;
        let WrittenConfig { path, ports } = spec.write(dir.path())?;
        let config = rndb_config::parse_file(&path).map_err(|e| {
            let text = fs::read_to_string(&path).unwrap_or_default();
            anyhow!(
                "the harness wrote a config the parser rejects:\n{e}\n--- config.ini ---\n{text}"
            )
        })?;
        // Another test's node may take a port between the harness picking it and this node
        // binding it: only a node that logged its start and then accepts is this one.
        let readiness = Readiness::LoggedAndPortAccepts;
        let mut nodes = DataNodes::new(ndbd, &config, &path, dir.path(), readiness)?;
        nodes.set_extra_args(spec.extra_ndbd_args().to_vec());
        for (id, namespace) in spec.namespaces() {
            nodes.set_namespace(id, &namespace)?;
        }
        Ok(TestCluster {
            nodes,
            config,
            config_path: path,
            ports,
            dir,
        })
    }

    /// Spawns every data node but `missing` with `--initial`, its output going to its log.
    fn spawn_all(&mut self, missing: &[NodeId]) -> Result<()> {
        for id in self.data_node_ids() {
            if !missing.contains(&id) {
                self.nodes.spawn(id)?;
            }
        }
        Ok(())
    }

    /// Starts data node `id` (left out by [`TestCluster::start_without`]) and waits until it
    /// accepts TCP connections.
    pub fn start_node(&mut self, id: NodeId) -> Result<()> {
        self.nodes.spawn(id)?;
        self.wait_serving()
    }

    /// Starts data node `id` again without `--initial` (a node restart when the others run)
    /// and waits until it accepts TCP connections.
    pub fn restart_node(&mut self, id: NodeId) -> Result<()> {
        self.nodes.spawn_restart(id)?;
        self.wait_serving()
    }

    /// Starts every data node that is not running without `--initial` (a system restart when
    /// none runs) and waits until each accepts TCP connections.
    pub fn restart_stopped_nodes(&mut self) -> Result<()> {
        for id in self.data_node_ids() {
            if self.nodes.pid(id).is_none() {
                self.nodes.spawn_restart(id)?;
            }
        }
        self.wait_serving()
    }

    /// The directory of data node `id`'s files (`ndb_<id>_fs` in its DataDir).
    pub fn file_system(&self, id: NodeId) -> std::path::PathBuf {
        crate::spec::data_dir(self.dir.path(), id).join(format!("ndb_{id}_fs"))
    }

    /// Waits until data node `id`'s sysfile names `count` more global checkpoints than now:
    /// everything committed before the call is then saved on disk.
    pub fn wait_for_saved_checkpoints(&self, id: NodeId, count: u32) -> Result<()> {
        let fs = self.file_system(id);
        let before = restorable_gci(&fs);
        crate::wait_until("global checkpoints saved", Duration::from_secs(30), || {
            Ok((restorable_gci(&fs) >= before + count).then_some(()))
        })
    }

    /// Waits until every running data node serves, failing at once when one exits.
    fn wait_serving(&mut self) -> Result<()> {
        let running: Vec<NodeId> = self
            .data_node_ids()
            .into_iter()
            .filter(|&id| self.nodes.pid(id).is_some())
            .collect();
        let started = std::time::Instant::now();
        for id in &running {
            self.nodes.wait_serving(*id, &|| Ok(()))?;
        }
        crate::report_slow_wait(
            &format!("data nodes {running:?} to serve"),
            started.elapsed(),
        );
        Ok(())
    }

    /// True when some node's log says its address was in use.
    fn port_was_taken(&self) -> bool {
        self.data_node_ids().into_iter().any(|id| {
            let log = self.log(id).to_ascii_lowercase();
            // ndbd's own check says "port N (ServerPort of node ...) is already in use".
            ["address already in use", "addrinuse", "is already in use"]
                .iter()
                .any(|text| log.contains(text))
        })
    }

    /// The last lines of every node's log, for an error or a failed test.
    fn log_tails(&self) -> String {
        let mut out = format!("test directory {}", self.dir.path().display());
        for id in self.data_node_ids() {
            out.push('\n');
            out.push_str(&self.nodes.log_tail(id, LOG_TAIL_LINES));
        }
        out
    }
}

/// The newest restorable GCI (its checkpoint word) that the first sysfile copy in the node file
/// system `fs` names: 0 before the first save, or while the copy cannot be read.
pub fn restorable_gci(fs: &Path) -> u32 {
    use rndb_ndbd::ndbfs::format::{FileHeader, Sysfile, SYSFILE_MAGIC};
    let Ok(bytes) = fs::read(fs.join("D1/DBDIH/P0.sysfile")) else {
        return 0;
    };
    FileHeader::decode(&bytes, SYSFILE_MAGIC)
        .and_then(|header| Sysfile::from_file(&bytes, header.node))
        .map_or(0, |sysfile| sysfile.restorable_gci)
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.nodes.stop_all();
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!("rndb-tests: the test failed; kept {}", self.log_tails());
        }
    }
}
