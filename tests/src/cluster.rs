//! [`TestCluster`]: the data nodes of a [`ClusterSpec`] as real child processes, stopped when the
//! guard drops, even when the test panics.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rndb_api::ConnectOptions;
use rndb_config::{ClusterConfig, NodeId};
use tempfile::TempDir;

use crate::spec::{ClusterSpec, WrittenConfig};
use crate::{binaries, wait_until};

/// How long a data node may take from spawn until it accepts TCP connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a data node may take to exit after SIGTERM before it gets SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(3);
/// How many times `start` picks new ports when a data node finds its port taken (free ports are
/// picked by binding port 0, so another process may take one before the node binds it).
const START_ATTEMPTS: u32 = 3;
/// Lines of each node's log printed when a test fails with a cluster running.
const LOG_TAIL_LINES: usize = 40;
/// How long one readiness probe waits for a TCP connect.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// A running test cluster. Dropping it stops every data node (SIGTERM, then SIGKILL after
/// [`STOP_GRACE`]) and removes its directory, unless the thread is panicking: then it prints the
/// end of every node's log and keeps the directory for a post-mortem.
#[derive(Debug)]
pub struct TestCluster {
    /// The data node processes by node id; a killed or stopped node keeps its entry.
    nodes: BTreeMap<NodeId, NodeProcess>,
    /// The config every process of the cluster reads, parsed.
    config: ClusterConfig,
    /// The config.ini inside `dir`.
    config_path: PathBuf,
    /// The ServerPort of every data node.
    ports: BTreeMap<NodeId, u16>,
    /// The network namespace each data node placed on a host runs in
    /// ([`ClusterSpec::on_hosts`]); the others run in the test's own.
    namespaces: BTreeMap<NodeId, String>,
    /// Holds the config, the data directories and the logs.
    dir: TempDir,
}

/// One data node process and its log.
#[derive(Debug)]
struct NodeProcess {
    /// The child; `None` once it has been reaped.
    child: Option<Child>,
    /// The file its stdout and stderr go to.
    log_path: PathBuf,
}

/// What a data node logs once it has bound its port (`rndb_ndbd::run`).
const STARTED_LOG_LINE: &str = "data node started";

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
            let mut cluster = TestCluster::prepare(&spec)?;
            let started = cluster
                .spawn_all(&ndbd, missing)
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
        let host = self
            .config
            .data_node(id)
            .and_then(|node| node.host_name.parse::<IpAddr>().ok())
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        SocketAddr::new(host, self.port(id))
    }

    /// The data node ids, in file order.
    pub fn data_node_ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
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
        self.nodes.get(&id)?.child.as_ref().map(Child::id)
    }

    /// True while data node `id` has not exited.
    pub fn is_running(&mut self, id: NodeId) -> bool {
        let Some(child) = self.nodes.get_mut(&id).and_then(|n| n.child.as_mut()) else {
            return false;
        };
        matches!(child.try_wait(), Ok(None))
    }

    /// Kills data node `id` with SIGKILL and reaps it.
    pub fn kill_node(&mut self, id: NodeId) -> Result<()> {
        let node = self.node_mut(id)?;
        if let Some(mut child) = node.child.take() {
            child
                .kill()
                .with_context(|| format!("kill data node {id}"))?;
            child
                .wait()
                .with_context(|| format!("reap data node {id}"))?;
        }
        Ok(())
    }

    /// Stops data node `id` with SIGTERM (SIGKILL after [`STOP_GRACE`]) and returns how it
    /// exited.
    pub fn stop_node(&mut self, id: NodeId) -> Result<ExitStatus> {
        let node = self.node_mut(id)?;
        let child = node
            .child
            .take()
            .ok_or_else(|| anyhow!("data node {id} was already stopped"))?;
        stop_child(child, id)
    }

    /// Everything data node `id` has written to stdout and stderr so far.
    pub fn log(&self, id: NodeId) -> String {
        match self.nodes.get(&id) {
            Some(node) => fs::read_to_string(&node.log_path).unwrap_or_default(),
            None => String::new(),
        }
    }

    /// Writes the config into a new directory; no process runs yet.
    fn prepare(spec: &ClusterSpec) -> Result<TestCluster> {
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
        let nodes = spec
            .data_node_ids()
            .into_iter()
            .map(|id| {
                let log_path = dir.path().join(format!("ndbd-{id}.log"));
                (
                    id,
                    NodeProcess {
                        child: None,
                        log_path,
                    },
                )
            })
            .collect();
        Ok(TestCluster {
            nodes,
            config,
            config_path: path,
            ports,
            namespaces: spec.namespaces(),
            dir,
        })
    }

    /// Spawns every data node with `--initial`, its output going to its log file.
    fn spawn_all(&mut self, ndbd: &Path, missing: &[NodeId]) -> Result<()> {
        for id in self.data_node_ids() {
            if !missing.contains(&id) {
                self.spawn(ndbd, id)?;
            }
        }
        Ok(())
    }

    /// Starts data node `id` (left out by [`TestCluster::start_without`]) and waits until it
    /// accepts TCP connections.
    pub fn start_node(&mut self, id: NodeId) -> Result<()> {
        let ndbd = binaries::ndbd_path()?;
        self.spawn(&ndbd, id)?;
        self.wait_serving()
    }

    fn spawn(&mut self, ndbd: &Path, id: NodeId) -> Result<()> {
        let (config_path, dir) = (self.config_path.clone(), self.dir.path().to_path_buf());
        // `ip netns exec` enters the namespace and executes ndbd in its own place, so the
        // child is the data node itself and killing it works as for the others.
        let mut command = match self.namespaces.get(&id) {
            Some(namespace) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", namespace]).arg(ndbd);
                command
            }
            None => Command::new(ndbd),
        };
        let node = self.node_mut(id)?;
        if node.child.is_some() {
            bail!("data node {id} is already running");
        }
        let log = File::create(&node.log_path)
            .with_context(|| format!("create {}", node.log_path.display()))?;
        let log_err = log.try_clone().context("duplicate the log file handle")?;
        let child = command
            .arg("--config-file")
            .arg(&config_path)
            .arg("--ndb-nodeid")
            .arg(id.to_string())
            .arg("--initial")
            .current_dir(&dir)
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .with_context(|| format!("spawn {} for data node {id}", ndbd.display()))?;
        node.child = Some(child);
        Ok(())
    }

    /// Waits until every running data node accepts a TCP connection on its port, failing at
    /// once when one exits.
    fn wait_serving(&mut self) -> Result<()> {
        let running: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, node)| node.child.is_some())
            .map(|(&id, _)| id)
            .collect();
        for id in running {
            let addr = self.addr(id);
            wait_until(
                &format!("data node {id} to listen on {addr}"),
                START_TIMEOUT,
                || {
                    if let Some(status) = self.exit_status(id)? {
                        bail!("data node {id} exited with {status} before serving");
                    }
                    // Its own log first: the port answering could be another test's node
                    // that took the port before this one could bind it (this one then exits).
                    if !self.log(id).contains(STARTED_LOG_LINE) {
                        return Ok(None);
                    }
                    Ok(TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)
                        .ok()
                        .map(drop))
                },
            )?;
        }
        Ok(())
    }

    /// How data node `id` exited, or `None` while it runs.
    fn exit_status(&mut self, id: NodeId) -> Result<Option<ExitStatus>> {
        let node = self.node_mut(id)?;
        match node.child.as_mut() {
            Some(child) => child
                .try_wait()
                .with_context(|| format!("poll data node {id}")),
            None => bail!("data node {id} is not running"),
        }
    }

    /// True when some node's log says its address was in use.
    fn port_was_taken(&self) -> bool {
        self.nodes.keys().any(|&id| {
            let log = self.log(id).to_ascii_lowercase();
            log.contains("address already in use") || log.contains("addrinuse")
        })
    }

    /// The last lines of every node's log, for an error or a failed test.
    fn log_tails(&self) -> String {
        let mut out = format!("test directory {}", self.dir.path().display());
        for &id in self.nodes.keys() {
            let log = self.log(id);
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            out.push_str(&format!(
                "\n--- data node {id} log (last {} lines) ---\n",
                tail.len()
            ));
            out.push_str(&tail.join("\n"));
        }
        out
    }

    fn node_mut(&mut self, id: NodeId) -> Result<&mut NodeProcess> {
        self.nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("node {id} is not a data node of this cluster"))
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in &ids {
            if let Some(child) = self.nodes.get(id).and_then(|n| n.child.as_ref()) {
                send_sigterm(child);
            }
        }
        for id in ids {
            if let Some(child) = self.nodes.get_mut(&id).and_then(|n| n.child.take()) {
                if let Err(e) = stop_child(child, id) {
                    eprintln!("rndb-tests: {e:#}");
                }
            }
        }
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!("rndb-tests: the test failed; kept {}", self.log_tails());
        }
    }
}

/// Sends SIGTERM, waits up to [`STOP_GRACE`] for the child to exit, then kills it.
fn stop_child(mut child: Child, id: NodeId) -> Result<ExitStatus> {
    send_sigterm(&child);
    let exited = wait_until(&format!("data node {id} to exit"), STOP_GRACE, || {
        Ok(child.try_wait()?)
    });
    match exited {
        Ok(status) => Ok(status),
        Err(_) => {
            child
                .kill()
                .with_context(|| format!("kill data node {id}"))?;
            child.wait().with_context(|| format!("reap data node {id}"))
        }
    }
}

/// Sends SIGTERM through kill(1), since this crate has no unsafe code to call kill(2).
fn send_sigterm(child: &Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
