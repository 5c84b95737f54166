//! [`DataNodes`]: the data nodes of one config.ini as child processes of this one.
//!
//! Each node runs `ndbd --config-file <ini> --ndb-nodeid <id> --initial` in one working
//! directory (a relative DataDir lands there), writes its stdout and stderr to its own log file
//! there, is awaited with a bounded poll until it serves, and is stopped (SIGTERM, then SIGKILL
//! after [`STOP_GRACE`]) when [`DataNodes`] drops, however the caller ends. `testread-perf
//! --local` and the integration tests' `TestCluster` (crate `rndb-tests`) both start their data
//! nodes through it.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rndb_config::{ClusterConfig, NodeId};

/// How long a data node may take from spawn until it serves.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a data node may take to exit after SIGTERM before it gets SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(3);
/// How often start-up and shut-down are polled.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long one readiness probe waits for a TCP connect.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// What a data node logs (at ndbd's default level, `info`) once it has bound its port.
pub const STARTED_LOG_LINE: &str = "data node started";

/// How [`DataNodes::wait_serving`] decides that a node serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Its port accepts a TCP connection. Enough when the caller made sure nothing else listens
    /// there, and it works whatever level `RNDB_LOG` sets.
    PortAccepts,
    /// Its log says it started ([`STARTED_LOG_LINE`]) and then its port accepts: a process that
    /// took the port first (another test's node) cannot pass for it.
    LoggedAndPortAccepts,
}

/// The data nodes of one config as child processes; dropping it stops them.
#[derive(Debug)]
pub struct DataNodes {
    /// The ndbd executable every node runs (absolute).
    ndbd: PathBuf,
    /// The config.ini every node reads (absolute, since the nodes run in `dir`).
    config_path: PathBuf,
    /// The nodes' working directory and the home of their logs; owned by the caller.
    dir: PathBuf,
    /// How `wait_serving` recognises a node that serves.
    readiness: Readiness,
    /// Every data node of the config by id; a stopped or killed node keeps its entry.
    nodes: BTreeMap<NodeId, NodeProcess>,
    /// Arguments every node gets after the usual ones (e.g. `--ndb-tls-search-path`).
    extra_args: Vec<String>,
}

/// One data node: its process while it runs, its log and its address.
#[derive(Debug)]
struct NodeProcess {
    /// The child; `None` before it is spawned and once it has been reaped.
    child: Option<Child>,
    /// The file its stdout and stderr go to (truncated at each spawn).
    log_path: PathBuf,
    /// The address it listens on (its HostName and port).
    addr: SocketAddr,
    /// The network namespace it runs in (`ip netns exec`); `None`: this process's own.
    namespace: Option<String>,
}

impl DataNodes {
    /// Every data node of `config` (read from `config_path`), none started yet; they will run
    /// `ndbd` in `dir`, which must outlive this value.
    pub fn new(
        ndbd: &Path,
        config: &ClusterConfig,
        config_path: &Path,
        dir: &Path,
        readiness: Readiness,
    ) -> Result<DataNodes> {
        let config_path = fs::canonicalize(config_path)
            .with_context(|| format!("resolve {}", config_path.display()))?;
        // Absolute, since the nodes start in `dir`: a relative path would be looked up there.
        let ndbd = fs::canonicalize(ndbd).with_context(|| format!("resolve {}", ndbd.display()))?;
        let mut nodes = BTreeMap::new();
        for node in &config.data_nodes {
            let id = node.node_id;
            let process = NodeProcess {
                child: None,
                log_path: dir.join(format!("ndbd-{id}.log")),
                addr: node_addr(config, id)?,
                namespace: None,
            };
            nodes.insert(id, process);
        }
        Ok(DataNodes {
            ndbd,
            config_path,
            dir: dir.to_path_buf(),
            readiness,
            nodes,
            extra_args: Vec::new(),
        })
    }

    /// Gives every node `args` after the usual ones from its next spawn on.
    pub fn set_extra_args(&mut self, args: Vec<String>) {
        self.extra_args = args;
    }

    /// Runs data node `id` in network namespace `namespace` from its next spawn on.
    pub fn set_namespace(&mut self, id: NodeId, namespace: &str) -> Result<()> {
        self.node_mut(id)?.namespace = Some(namespace.to_string());
        Ok(())
    }

    /// The data node ids, in id order.
    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// The address data node `id` listens on.
    pub fn addr(&self, id: NodeId) -> Option<SocketAddr> {
        self.nodes.get(&id).map(|node| node.addr)
    }

    /// The file data node `id` logs to.
    pub fn log_path(&self, id: NodeId) -> Option<&Path> {
        self.nodes.get(&id).map(|node| node.log_path.as_path())
    }

    /// Spawns data node `id` with `--initial`; fails when it already runs.
    pub fn spawn(&mut self, id: NodeId) -> Result<()> {
        self.spawn_as(id, true)
    }

    /// Spawns data node `id` without `--initial`: it restores what its files hold.
    pub fn spawn_restart(&mut self, id: NodeId) -> Result<()> {
        self.spawn_as(id, false)
    }

    fn spawn_as(&mut self, id: NodeId, initial: bool) -> Result<()> {
        let (ndbd, config_path, dir) = (&self.ndbd, &self.config_path, &self.dir);
        let extra_args = &self.extra_args;
        let node = self
            .nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("node {id} is not a data node of this cluster"))?;
        if node.child.is_some() {
            bail!("data node {id} is already running");
        }
        // `ip netns exec` enters the namespace and executes ndbd in its own place, so the
        // child is the data node itself and signals reach it as they reach the others.
        let mut command = match &node.namespace {
            Some(namespace) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", namespace]).arg(ndbd);
                command
            }
            None => Command::new(ndbd),
        };
        let log = File::create(&node.log_path)
            .with_context(|| format!("create {}", node.log_path.display()))?;
        let log_err = log.try_clone().context("duplicate the log file handle")?;
        let child = command
            .arg("--config-file")
            .arg(config_path)
            .arg("--ndb-nodeid")
            .arg(id.to_string())
            .args(initial.then_some("--initial"))
            // No angel: this process is the data node, so the signals a test or benchmark
            // sends (SIGKILL, SIGSTOP) reach it, and nothing starts it again behind our back.
            .arg("--foreground")
            .args(extra_args)
            .current_dir(dir)
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .with_context(|| format!("start {} for data node {id}", ndbd.display()))?;
        node.child = Some(child);
        Ok(())
    }

    /// Polls until data node `id` serves (see [`Readiness`]), failing when it exits, when
    /// `interrupted` fails (Ctrl-C), and after [`START_TIMEOUT`].
    pub fn wait_serving(&mut self, id: NodeId, interrupted: &dyn Fn() -> Result<()>) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let addr = self.node_mut(id)?.addr;
        loop {
            interrupted()?;
            if let Some(status) = self.exit_status(id)? {
                bail!("data node {id} exited with {status} while starting");
            }
            let logged =
                self.readiness == Readiness::PortAccepts || self.log(id).contains(STARTED_LOG_LINE);
            if logged && TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("data node {id} did not serve on {addr} within {START_TIMEOUT:?}");
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The process id of data node `id`, while it runs.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        self.nodes.get(&id)?.child.as_ref().map(Child::id)
    }

    /// True while data node `id` has been spawned and has not exited.
    pub fn is_running(&mut self, id: NodeId) -> bool {
        matches!(self.exit_status(id), Ok(None))
    }

    /// How data node `id` exited, or `None` while it runs; an error when it is not running.
    pub fn exit_status(&mut self, id: NodeId) -> Result<Option<ExitStatus>> {
        match self.node_mut(id)?.child.as_mut() {
            Some(child) => child
                .try_wait()
                .with_context(|| format!("poll data node {id}")),
            None => bail!("data node {id} is not running"),
        }
    }

    /// Kills every running data node with SIGKILL, all before reaping any (as a power loss
    /// stops them together: reaped one by one, a node killed later could run on for the time a
    /// reap takes, save global checkpoints alone, and leave the first one's files lagging).
    pub fn kill_all(&mut self) -> Result<()> {
        let mut killed = Vec::new();
        for (&id, node) in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                child
                    .kill()
                    .with_context(|| format!("kill data node {id}"))?;
                killed.push((id, child));
            }
        }
        for (id, mut child) in killed {
            child
                .wait()
                .with_context(|| format!("reap data node {id}"))?;
        }
        Ok(())
    }

    /// Kills data node `id` with SIGKILL and reaps it (nothing when it does not run).
    pub fn kill(&mut self, id: NodeId) -> Result<()> {
        if let Some(mut child) = self.node_mut(id)?.child.take() {
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
    pub fn stop(&mut self, id: NodeId) -> Result<ExitStatus> {
        let child = self
            .node_mut(id)?
            .child
            .take()
            .ok_or_else(|| anyhow!("data node {id} was already stopped"))?;
        stop_child(child, id)
    }

    /// Sends data node `id` SIGTERM (a graceful stop) without waiting for it to exit:
    /// [`DataNodes::stop`] waits.
    pub fn terminate(&mut self, id: NodeId) -> Result<()> {
        let child = (self.node_mut(id)?.child.as_ref())
            .ok_or_else(|| anyhow!("data node {id} was already stopped"))?;
        send_sigterm(child);
        Ok(())
    }

    /// Stops every running data node: SIGTERM to all first, so they stop in parallel, then
    /// each is awaited (SIGKILL after [`STOP_GRACE`]). Failures are printed, not returned,
    /// since this runs on drop.
    pub fn stop_all(&mut self) {
        for node in self.nodes.values() {
            if let Some(child) = &node.child {
                send_sigterm(child);
            }
        }
        for (&id, node) in &mut self.nodes {
            if let Some(child) = node.child.take() {
                if let Err(e) = stop_child(child, id) {
                    eprintln!("{e:#}");
                }
            }
        }
    }

    /// Everything data node `id` has written to stdout and stderr so far.
    pub fn log(&self, id: NodeId) -> String {
        match self.nodes.get(&id) {
            Some(node) => fs::read_to_string(&node.log_path).unwrap_or_default(),
            None => String::new(),
        }
    }

    /// The last `lines` lines data node `id` wrote, under a heading naming the node.
    pub fn log_tail(&self, id: NodeId, lines: usize) -> String {
        let log = self.log(id);
        let all: Vec<&str> = log.lines().collect();
        let tail = &all[all.len().saturating_sub(lines)..];
        format!(
            "--- data node {id} log (last {} lines) ---\n{}",
            tail.len(),
            tail.join("\n")
        )
    }

    fn node_mut(&mut self, id: NodeId) -> Result<&mut NodeProcess> {
        self.nodes
            .get_mut(&id)
            .ok_or_else(|| anyhow!("node {id} is not a data node of this cluster"))
    }
}

impl Drop for DataNodes {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The address data node `id` listens on, from its HostName and port.
pub fn node_addr(config: &ClusterConfig, id: NodeId) -> Result<SocketAddr> {
    let node = config
        .data_node(id)
        .ok_or_else(|| anyhow!("no data node {id}"))?;
    let port = config
        .data_node_port(id)
        .ok_or_else(|| anyhow!("no port for data node {id}"))?;
    (node.host_name.as_str(), port)
        .to_socket_addrs()
        .with_context(|| format!("resolve HostName={} of data node {id}", node.host_name))?
        .next()
        .ok_or_else(|| {
            anyhow!(
                "HostName={} of data node {id} has no address",
                node.host_name
            )
        })
}

/// Sends SIGTERM, waits up to [`STOP_GRACE`] for the child to exit, then kills it.
fn stop_child(mut child: Child, id: NodeId) -> Result<ExitStatus> {
    send_sigterm(&child);
    let deadline = Instant::now() + STOP_GRACE;
    loop {
        if let Some(status) = child
            .try_wait()
            .with_context(|| format!("poll data node {id}"))?
        {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    eprintln!("data node {id} ignored SIGTERM for {STOP_GRACE:?}; killing it");
    child
        .kill()
        .with_context(|| format!("kill data node {id}"))?;
    child.wait().with_context(|| format!("reap data node {id}"))
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
