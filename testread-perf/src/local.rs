//! `--local`: the config's data nodes as child processes for the length of one run, started
//! with the library's `data_nodes::DataNodes` (the harness the integration tests share).
//!
//! The children are stopped when [`LocalCluster`] drops, which happens on success, on error and
//! after Ctrl-C (SIGINT and SIGTERM only set [`Shutdown`]'s flag, which every loop checks, so
//! the run unwinds normally). A second Ctrl-C exits at once.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rndb_config::ClusterConfig;
use rndb_testread_perf::data_nodes::{node_addr, DataNodes, Readiness};
use tempfile::TempDir;

/// How long one probe for something already listening waits for a TCP connect.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// Lines of a node's log shown when it fails to start.
const LOG_TAIL_LINES: usize = 30;

/// Set by SIGINT or SIGTERM; loops check it and return an "interrupted" error.
#[derive(Clone, Debug)]
pub struct Shutdown(Arc<AtomicBool>);

impl Shutdown {
    /// Routes SIGINT and SIGTERM to the flag; a second signal exits at once with status 130.
    pub fn install() -> Result<Shutdown> {
        let flag = Arc::new(AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&flag))
                .context("install the signal handler")?;
            signal_hook::flag::register(signal, Arc::clone(&flag))
                .context("install the signal handler")?;
        }
        Ok(Shutdown(flag))
    }

    /// True once SIGINT or SIGTERM has arrived.
    pub fn requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Returns an error once a signal has arrived.
    pub fn check(&self) -> Result<()> {
        if self.requested() {
            bail!(Interrupted);
        }
        Ok(())
    }
}

/// The error a run ends with after Ctrl-C.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// The data nodes this run started; dropping it stops them.
#[derive(Debug)]
pub struct LocalCluster {
    /// The data node processes; declared first so that they stop before `dir` is removed.
    nodes: DataNodes,
    /// The children's working directory (a relative DataDir lands here) and their logs,
    /// removed when the run ends.
    _dir: TempDir,
    /// With TLS: the search path (`ca:keys` inside the directory) of the CA and of the data
    /// and API nodes' keys this run made; the data nodes run with it.
    pub tls_search_path: Option<String>,
}

impl LocalCluster {
    /// Starts every data node of `config` with `--initial` and waits until each serves. With
    /// `with_tls`, first makes a CA and data node and API keys, and starts the nodes with them.
    pub fn start(
        config: &ClusterConfig,
        config_path: &Path,
        ndbd: &Path,
        with_tls: bool,
        shutdown: &Shutdown,
    ) -> Result<LocalCluster> {
        if let Some(node) = config
            .data_nodes
            .iter()
            .find(|node| !rndb_api::is_this_host(&node.host_name))
        {
            bail!(
                "--local starts every data node on this host, but data node {}'s HostName={} in \
                 {} is not an address of this host: start the data nodes on their hosts and run \
                 without --local",
                node.node_id,
                node.host_name,
                config_path.display()
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("testread-perf-")
            .tempdir()
            .context("create a directory for the data nodes")?;
        // Nothing else may listen on a node's port, so that a port that accepts is the node's
        // (and the nodes are awaited by their port alone, whatever RNDB_LOG says).
        let mut nodes = DataNodes::new(
            ndbd,
            config,
            config_path,
            dir.path(),
            Readiness::PortAccepts,
        )?;
        let tls_search_path = if with_tls {
            let path = make_keys(dir.path())?;
            nodes.set_extra_args(vec!["--ndb-tls-search-path".to_string(), path.clone()]);
            Some(path)
        } else {
            None
        };
        let mut cluster = LocalCluster {
            nodes,
            _dir: dir,
            tls_search_path,
        };
        for id in cluster.nodes.ids() {
            let addr = node_addr(config, id)?;
            if TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).is_ok() {
                bail!(
                    "something already listens on {addr}, data node {id}'s port: is a cluster \
                     running? Stop it, or run without --local"
                );
            }
            cluster.nodes.spawn(id)?;
        }
        for id in cluster.nodes.ids() {
            let interrupted = || shutdown.check();
            if let Err(e) = cluster.nodes.wait_serving(id, &interrupted) {
                if e.is::<Interrupted>() {
                    return Err(e);
                }
                return Err(e.context(cluster.nodes.log_tail(id, LOG_TAIL_LINES)));
            }
            eprintln!(
                "testread-perf: data node {id} serves on {}",
                node_addr(config, id)?
            );
        }
        Ok(cluster)
    }
}

/// Makes a CA in `dir/ca` and data node and API keys and certificates in `dir/keys`, as
/// `ndb_sign_keys` does; returns the search path `ca:keys`.
fn make_keys(dir: &Path) -> Result<String> {
    use rndb_config::NodeKind;
    use rndb_transporter::tls::{self, pki};
    let (ca_dir, keys_dir) = (dir.join("ca"), dir.join("keys"));
    for d in [&ca_dir, &keys_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
    }
    let day = 86_400;
    pki::create_ca(&ca_dir, pki::Lifetime::from_now(day)?)?;
    let ca = pki::Ca::load(&tls::SearchPath {
        dirs: vec![ca_dir.clone()],
    })?;
    for kind in [NodeKind::Data, NodeKind::Api] {
        let key = pki::generate_key()?;
        let chain = ca.sign(&key, kind, &[], pki::Lifetime::from_now(day)?)?;
        pki::write_new(
            &keys_dir,
            tls::key_file(kind),
            pki::key_pem(&key).as_bytes(),
            0o400,
        )?;
        pki::write_new(&keys_dir, tls::cert_file(kind), chain.as_bytes(), 0o644)?;
    }
    Ok(format!("{}:{}", ca_dir.display(), keys_dir.display()))
}

/// Finds the ndbd executable: `explicit`, else `ndbd` next to this executable. When this
/// executable sits in a cargo profile directory of the workspace it was built from, cargo first
/// builds ndbd there with the same profile (a no-op when it is fresh), because `cargo run -p
/// rndb-testread-perf` does not build other packages' binaries.
pub fn find_ndbd(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        if !path.is_file() {
            bail!("--ndbd {} does not exist", path.display());
        }
        return Ok(path.to_path_buf());
    }
    let exe = std::env::current_exe().context("find this executable")?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow!("{} has no directory", exe.display()))?;
    let candidate = dir.join("ndbd");
    if let Err(e) = build_ndbd(dir) {
        if !candidate.is_file() {
            return Err(e);
        }
        eprintln!(
            "testread-perf: warning: {e:#}; using the existing {}",
            candidate.display()
        );
    }
    if !candidate.is_file() {
        bail!(
            "no ndbd next to {}: build it (`cargo build --release --bin ndbd`) or pass --ndbd",
            exe.display()
        );
    }
    Ok(candidate)
}

/// Runs cargo to build ndbd into `dir` when `dir` is a debug or release directory and the
/// workspace this binary was built from still exists; does nothing otherwise. The build is
/// `cargo build --workspace --bin ndbd` (`rndb_testread_perf::cargo_build` says why not `-p
/// rndb-ndbd`). Cargo's progress goes to this process's stderr as it comes: the first build of
/// a release ndbd takes about a minute, which must not look like a hang.
fn build_ndbd(dir: &Path) -> Result<()> {
    let profile = dir.file_name().and_then(|n| n.to_str());
    let (Some(profile @ ("debug" | "release")), Some(target_dir)) = (profile, dir.parent()) else {
        return Ok(());
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let Some(mut command) = rndb_testread_perf::cargo_build::workspace_build(
        &cargo,
        target_dir,
        profile,
        &["--bin", "ndbd"],
    ) else {
        return Ok(());
    };
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    eprintln!(
        "testread-perf: building ndbd ({profile} profile) with cargo; the first build takes \
         about a minute, later runs only check that it is fresh"
    );
    let status = command.status().context("run cargo to build ndbd")?;
    if !status.success() {
        bail!("cargo build of ndbd failed ({status}); its errors are above");
    }
    Ok(())
}

/// CPUs of the machine, counted once, before this process binds itself anywhere (afterwards
/// `available_parallelism` counts only the CPUs it is bound to, and the next transporter's
/// placement would find its CPU missing and leave the process where the previous one put it).
fn machine_cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// Where the measuring threads of a run go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// testReadPerf's access types: one thread, one execute at a time.
    Measure,
    /// A concurrency sweep with one thread per transaction in flight.
    SweepThreads,
    /// A concurrency sweep from one thread with the asynchronous API.
    SweepAsync,
}

/// True when every SHM link of the config has ShmSpintime=0: both ends sleep between messages
/// and are woken through their FIFOs, as over TCP (and like TCP they are placed together).
fn shm_links_sleep(config: &rndb_config::ClusterConfig) -> bool {
    config
        .links
        .iter()
        .filter(|l| l.kind == rndb_config::TransporterKind::Shm)
        .all(|l| l.shm_spintime_us == 0)
}

/// Places this process (its measuring thread) for the transporter about to be measured, when
/// the local data nodes' execution threads are bound (LockExecuteThreadToCPU):
///
/// - SHM: on the CPUs the data nodes leave free. Both sides spin on the ring, which pays only
///   when each has a core; sharing one, each spin only delays the other.
/// - SHM links that do not spin (every SHM link has ShmSpintime=0, NDB's default), TCP and
///   io_uring: on the data nodes' CPUs. Both sides sleep in the kernel between
///   messages, and on this kind of VM waking a halted vCPU costs tens of µs per hop (measured:
///   a TCP ping ~7 µs on one core, ~75 µs across two), while a wake-up on the same core is a
///   context switch.
/// - The asynchronous sweep: on the CPUs the data nodes leave free, over every transporter. Its
///   one thread is busy whenever many transactions are in flight, as is the data node, so they
///   need a core each (unplaced, the scheduler could put it on the data node's core, where
///   SHM's spinning on both sides only delays the other).
/// - The threaded sweep: not placed at all. Its client threads range from one (which would want
///   the placement above) to thousands (which must not crowd the data node's core); the
///   scheduler balances them.
///
/// Leaves the process free when the data nodes are not bound or there is no CPU to choose.
pub fn place_for(
    config: &rndb_config::ClusterConfig,
    kind: rndb_config::TransporterKind,
    placement: Placement,
) -> Result<()> {
    let taken: std::collections::BTreeSet<usize> = config
        .data_nodes
        .iter()
        .flat_map(|n| n.lock_execute_thread_to_cpu.iter().copied())
        .collect();
    if taken.is_empty() || placement == Placement::SweepThreads {
        return Ok(());
    }
    let cpus = machine_cpus();
    let free = || (0..cpus).filter(|cpu| !taken.contains(cpu)).collect();
    let spinning_shm = kind == rndb_config::TransporterKind::Shm && !shm_links_sleep(config);
    let chosen: Vec<usize> = match placement {
        Placement::SweepAsync => free(),
        _ if spinning_shm => free(),
        _ => taken.iter().copied().filter(|&cpu| cpu < cpus).collect(),
    };
    if chosen.is_empty() {
        return Ok(());
    }
    rndb_api::placement::bind_this_thread(&chosen)
        .with_context(|| format!("bind testread-perf to CPUs {chosen:?}"))?;
    eprintln!("testread-perf: measuring {kind} from CPUs {chosen:?} (data nodes on {taken:?})");
    Ok(())
}
