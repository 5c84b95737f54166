//! rndb-ndbd: the data node.
//!
//! ```text
//!  acceptor thread ── handshake threads ──(new links)──┐
//!  connector thread (to data nodes with lower ids) ────┤
//!                                                      ▼
//!  execution thread: ExecLoop ── poll links ── Kernel { TC, LQH, ACC, TUP, TUX, DIH, DICT, QMGR } ── flush
//! ```
//!
//! - [`listener`]: binds the node's port and admits connections (handshake, registry rules).
//! - [`limits`]: what a connection that is not yet a node may cost (handshakes in progress,
//!   their timeout, the backlog).
//! - [`exec`]: the execution loop: spin-then-sleep polling, dispatch, timers, flushing.
//! - [`blocks`]: NDB's blocks and the job queue they signal through.
//!
//! **Architecture Invariant:** only the execution thread touches the kernel; there is no lock on
//! the data path.

// One `unsafe` block, allowed where it is: the prefetch hint of `SlotIndex::prefetch`.
#![deny(unsafe_code)]

pub mod blocks;
pub mod error_log;
pub mod exec;
pub mod limits;
pub mod listener;
pub mod mgm_report;
pub mod ndbfs;
pub mod watchdog;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::Context;
use rndb_config::{ClusterConfig, NodeId};

/// Removes everything inside `dir`, which stays.
fn remove_contents(dir: &std::path::Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))? {
        let path = entry?.path();
        let removed = if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.with_context(|| format!("remove {}", path.display()))?;
    }
    Ok(())
}

/// Says at start-up, not at the first checkpoint, that the node's file system cannot be
/// written (a read-only or full disk).
fn check_writable(root: &std::path::Path) -> anyhow::Result<()> {
    let probe = root.join(".rndb-write-check");
    std::fs::write(&probe, b"rndb")
        .and_then(|()| std::fs::remove_file(&probe))
        .with_context(|| format!("the node's file system {} is not writable", root.display()))
}

/// How a data node starts.
pub struct Start<'a> {
    /// Remove the node's files first (`--initial`); without, it restores what they hold.
    pub initial: bool,
    /// `--nowait-nodes`: data nodes a system restart does not wait for.
    pub nowait: &'a [NodeId],
    /// Called once, when the node first serves (the angel's report, see `angel.rs`).
    pub on_started: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for Start<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Start")
            .field("initial", &self.initial)
            .field("nowait", &self.nowait)
            .field("on_started", &self.on_started.is_some())
            .finish()
    }
}

/// The error of a data node that stopped because its files cannot restore the GCI of the
/// system restart the other data nodes run: started again, it joins by node restart once they
/// serve (an angel does so at once; see `angel::REJOIN_EXIT_CODE`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RejoinNeeded(pub String);

/// Starts data node `me` of `config` as `start` says and serves until `shutdown` is set. `tls`
/// is its TLS keys (if any) and RequireTls, for every link it accepts or opens. With `mgm`
/// (the connectstring it fetched its config with) it reports its state to ndb_mgmd, which may
/// ask it to stop or restart (see `mgm_report`).
pub fn run(
    config: ClusterConfig,
    me: NodeId,
    start: Start<'_>,
    shutdown: Arc<AtomicBool>,
    tls: rndb_transporter::tls::TlsSetup,
    mgm: Option<rndb_mgm::node_report::ReportSetup>,
) -> anyhow::Result<()> {
    let Start {
        initial,
        nowait,
        on_started,
    } = start;
    let tls = Arc::new(tls);
    let node = config
        .data_node(me)
        .with_context(|| {
            format!(
                "--ndb-nodeid={me} is not a data node ([ndbd] NodeId) in {}",
                config.source.display()
            )
        })?
        .clone();
    if node.max_no_of_execution_threads > 1 {
        tracing::warn!(
            "MaxNoOfExecutionThreads={} is not implemented yet: running one execution thread",
            node.max_no_of_execution_threads
        );
    }
    std::fs::create_dir_all(&node.data_dir)
        .with_context(|| format!("create DataDir {}", node.data_dir.display()))?;
    let listener = listener::bind(&config, me)?;
    let stale = rndb_transporter::shm::clean_stale_segments(config.cluster_id());
    if stale > 0 {
        tracing::info!("removed {stale} shared-memory segments left by crashed processes");
    }
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let poll = mio::Poll::new().context("create poller")?;
    let waker =
        Arc::new(mio::Waker::new(poll.registry(), exec::WAKER_TOKEN).context("create waker")?);
    let (links_tx, links_rx) = mpsc::channel();
    let connected = listener::Connected::default();
    let durability = &node.durability;
    let (mut kernel, ndbfs) = if durability.diskless {
        if initial {
            tracing::info!("Diskless=1: no files; every start is an initial start");
        }
        (blocks::Kernel::new(&config, &node), None)
    } else {
        let root = durability
            .file_system_path
            .clone()
            .unwrap_or_else(|| node.data_dir.clone())
            .join(format!("ndb_{me}_fs"));
        if initial && root.exists() {
            // What is inside goes, not the directory: it may be a file system of its own,
            // mounted there (a disk given to the node), which cannot be removed.
            remove_contents(&root).with_context(|| {
                format!(
                    "--initial: remove the node's file system {}",
                    root.display()
                )
            })?;
            tracing::info!(path = %root.display(), "--initial: removed the node's file system");
        }
        std::fs::create_dir_all(&root)
            .with_context(|| format!("create the node's file system {}", root.display()))?;
        check_writable(&root)?;
        let wake = waker.clone();
        let ndbfs = ndbfs::real::spawn(
            ndbfs::real::RealDisk::new(root),
            Arc::new(move || {
                let _ = wake.wake();
            }),
        )
        .context("start the NDBFS thread")?;
        let mut kernel = blocks::Kernel::with_files(&config, &node, initial);
        let backups = durability.backup_dir(&node.data_dir).join("BACKUP");
        let backups = std::path::absolute(&backups)
            .with_context(|| format!("BackupDataDir of node {me}: {}", backups.display()))?;
        let last_id = last_backup_id(&backups);
        kernel.set_backup_dir(
            backups.display().to_string(),
            durability.backup_log_buffer_size,
            last_id,
        );
        (kernel, Some(ndbfs))
    };
    // This run of the node, named in its CM_REGREQ: later runs start later.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    kernel.set_run(run);
    kernel.set_nowait_nodes(nowait);
    let config = Arc::new(config);
    listener::spawn_acceptor(
        listener,
        config.clone(),
        me,
        connected.clone(),
        links_tx.clone(),
        waker.clone(),
        tls.clone(),
    )
    .context("start acceptor thread")?;
    listener::spawn_connector(config.clone(), me, connected.clone(), links_tx, waker, tls)
        .context("start connector thread")?;
    let spin = Duration::from_micros(u64::from(node.scheduler_spin_timer_us));
    tracing::info!(node = %me, port, data_memory = node.data_memory_bytes, spin_us = node.scheduler_spin_timer_us, "data node started");
    bind_to_cpus(&node.lock_execute_thread_to_cpu)
        .with_context(|| format!("LockExecuteThreadToCPU of node {me}"))?;
    let shares_cpu = shares_cpu_with_data_node(&config, me);
    if shares_cpu {
        tracing::info!(node = %me, "execution thread shares its CPU with another data node's: answers are sent with the sleep that follows them, and a spin that finds no input yields the CPU");
    }
    let connected_for_mgm = connected.clone();
    let shutdown_for_mgm = shutdown.clone();
    let exec = exec::ExecLoop::new(
        kernel,
        poll,
        links_rx,
        connected,
        exec::Settings { spin, shares_cpu },
        shutdown,
    );
    let mut exec = match ndbfs {
        Some((requests, confs)) => exec.with_ndbfs(requests, confs),
        None => exec,
    };
    // Replies from ndb_mgmd, and from how many servers (see `stopped_by_itself` below).
    let heard = mgm.as_ref().map(|s| (s.replies.clone(), s.servers.len()));
    if let Some(setup) = mgm {
        let probe = Arc::new(mgm_report::Probe::new(
            setup.single_user.clone(),
            setup.backup.clone(),
            setup.system_stop.clone(),
            setup.stopped_by_itself.clone(),
        ));
        mgm_report::start(
            setup,
            me.0,
            probe.clone(),
            node.data_memory_bytes,
            connected_for_mgm,
            shutdown_for_mgm,
        )
        .context("start the ndb_mgmd reporting thread")?;
        exec = exec.with_probe(probe);
    }
    if let Some(on_started) = on_started {
        exec = exec.with_on_started(on_started);
    }
    let watched = Arc::new(watchdog::Watched::default());
    let watchdog_stop = Arc::new(AtomicBool::new(false));
    let interval = Duration::from_millis(u64::from(node.time_between_watchdog_check_ms));
    let error_log = (node.data_dir.clone(), node.max_no_of_saved_messages);
    let watchdog = watchdog::spawn(
        me,
        watched.clone(),
        interval,
        watchdog_stop.clone(),
        error_log,
    )
    .context("start the watchdog thread")?;
    if node.start_failure_timeout_ms > 0 {
        let limit = Duration::from_millis(u64::from(node.start_failure_timeout_ms));
        exec = exec.with_start_failure_timeout(limit);
    }
    let mut exec = exec.with_watched(watched);
    let result = exec.run();
    watchdog_stop.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    if let Err(reason) = result {
        error_log::record(&node.data_dir, me, &reason, node.max_no_of_saved_messages);
        if exec.rejoin_cures() {
            return Err(anyhow::Error::new(RejoinNeeded(reason)))
                .with_context(|| format!("data node {me} stopped"));
        }
        anyhow::bail!("data node {me} stopped: {reason}");
    }
    if let (true, Some((replies, servers))) = (exec.stopped_by_itself(), heard) {
        // Another data node stopped every data node, and told this one before ndb_mgmd's
        // reply (ALL RESTART) may have: heard out, the restart is recorded for the angel.
        rndb_mgm::node_report::ReportSetup::hear_out(&replies, servers, Duration::from_secs(2));
    }
    tracing::info!(node = %me, "data node stopped");
    Ok(())
}

/// True when another data node of `config` on the same host binds its execution thread to one of
/// the CPUs `me` binds to (LockExecuteThreadToCPU): then their clients share that CPU too.
pub fn shares_cpu_with_data_node(config: &ClusterConfig, me: NodeId) -> bool {
    let Some(node) = config.data_node(me) else {
        return false;
    };
    config.data_nodes.iter().any(|other| {
        other.node_id != me
            && rndb_config::same_host(&other.host_name, &node.host_name)
            && other
                .lock_execute_thread_to_cpu
                .iter()
                .any(|cpu| node.lock_execute_thread_to_cpu.contains(cpu))
    })
}

/// Binds the calling thread (the execution thread; the acceptor was started before, so it is
/// not bound) to `cpus`, as NDB's LockExecuteThreadToCPU does. An empty list leaves it free.
fn bind_to_cpus(cpus: &[usize]) -> anyhow::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    let mut set = nix::sched::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu)
            .with_context(|| format!("CPU {cpu} is beyond what this system supports"))?;
    }
    let available = std::thread::available_parallelism().map_or(0, usize::from);
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).with_context(|| {
        format!("bind the execution thread to CPUs {cpus:?} (this machine has {available} CPUs)")
    })?;
    tracing::info!(?cpus, "execution thread bound to CPUs");
    Ok(())
}

/// The highest id among the `BACKUP-<id>` directories in `dir` (0 when there are none): the
/// next START BACKUP without an id takes one more.
fn last_backup_id(dir: &std::path::Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("BACKUP-")?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}
