//! `ndbd`: starts one data node of a cluster described by a config.ini.
//!
//! As NDB's, `ndbd` is an angel process ([`angel`]) that runs the data node in a child process
//! and starts it again when it stops asking to be restarted; `--foreground` runs the data node
//! in this process, without an angel.

mod angel;
mod data_memory;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use rndb_config::NodeId;

/// mimalloc: the data node allocates and frees small objects (operation records, row images,
/// signals) at a high rate, where it is markedly faster than the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The rndb data node.
#[derive(Parser, Debug)]
#[command(name = "ndbd", version, about = "rndb data node")]
struct Args {
    /// The cluster's config.ini (or fetch it from ndb_mgmd with --ndb-connectstring).
    #[arg(
        long = "config-file",
        visible_alias = "config_file",
        short = 'f',
        required_unless_present = "connectstring",
        conflicts_with = "connectstring"
    )]
    config_file: Option<PathBuf>,
    /// Fetch the config from ndb_mgmd (`host[:port][,host[:port]]`, port 1186 by default, NDB's
    /// `nodeid=N,` prefix accepted) and report this node's state to it.
    #[arg(short = 'c', long = "ndb-connectstring",
          visible_aliases = ["connect-string", "ndb_connectstring"])]
    connectstring: Option<String>,
    /// This node's NodeId (a `[ndbd]` section of the config). With a connectstring and no id,
    /// ndb_mgmd gives the lowest free data node id.
    #[arg(
        long = "ndb-nodeid",
        visible_alias = "ndb_nodeid",
        required_unless_present = "connectstring"
    )]
    ndb_nodeid: Option<u16>,
    /// How many more times to try an unreachable ndb_mgmd (NDB's default is 12).
    #[arg(long = "connect-retries", default_value_t = 12)]
    connect_retries: u32,
    /// Seconds between tries.
    #[arg(long = "connect-retry-delay", default_value_t = 5)]
    connect_retry_delay: u64,
    /// Start from empty: remove everything in the node's file system (`ndb_<NodeId>_fs/`
    /// under FileSystemPath or DataDir; the directory stays, so it may be a mount point)
    /// first. Without it, the node restores what its files hold.
    #[arg(long)]
    initial: bool,
    /// Do not wait for these data nodes (comma-separated node ids) when the cluster starts:
    /// start without them at once, even when they hold a node of every node group (they must
    /// then hold no global checkpoint newer than the nodes that start: they were down, or
    /// their files are lost). They join by node restart later.
    #[arg(
        long = "nowait-nodes",
        visible_alias = "nowait_nodes",
        value_delimiter = ','
    )]
    nowait_nodes: Vec<u16>,
    /// Do not start the data node: connect to ndb_mgmd and wait in NOT_STARTED until
    /// `ndb_mgm -e "N START"` (needs --ndb-connectstring).
    #[arg(short = 'n', long = "nostart", visible_alias = "no-start")]
    nostart: bool,
    /// Do not daemonize (rndb never daemonizes; accepted for compatibility). The angel still
    /// runs, as NDB's does.
    #[arg(long)]
    nodaemon: bool,
    /// Run the data node in this process, without an angel (NDB's debugging mode): `N RESTART`
    /// is refused for it, since nothing would start it again.
    #[arg(long)]
    foreground: bool,
    /// The angel's pid, given by the angel to the data node process it starts.
    #[arg(long = "angel-pid", hide = true)]
    angel_pid: Option<u32>,
    /// The node id the angel was given, given to the data node process it starts.
    #[arg(long = "allocated-nodeid", hide = true)]
    allocated_nodeid: Option<u16>,
    /// How the angel starts the data node process again after a restart (overrides
    /// --initial and --nostart).
    #[arg(long = "angel-start", hide = true, value_parser = angel::START_KINDS)]
    angel_start: Option<String>,
    /// The pipe the data node process tells its angel it started through (NDB's
    /// `--report-fd`), given by the angel.
    #[arg(long = "report-fd", hide = true)]
    report_fd: Option<i32>,
    /// Directories (colon-separated) to search for the cluster CA (NDB-Cluster-cert) and this
    /// node's key and certificate (ndb-data-node-private-key, ndb-data-node-cert), as NDB 8.3.
    /// With them, links to peers that have keys too are TLS, and so is the connection to
    /// ndb_mgmd (`-c`); RequireTls=1 makes TLS mandatory.
    #[arg(long = "ndb-tls-search-path", visible_alias = "ndb_tls_search_path")]
    ndb_tls_search_path: Option<String>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RNDB_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    match run() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("ndbd: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Runs the angel, or the data node process; returns the exit code.
fn run() -> anyhow::Result<i32> {
    let mut args = Args::parse();
    if let Some(angel_pid) = args.angel_pid {
        angel::watch_angel(angel_pid)?;
    }
    if let Some(kind) = &args.angel_start {
        let start = angel::parse_start_kind(kind).context("--angel-start")?;
        args.initial = start.initial;
        args.nostart = start.no_start;
    }
    if args.nostart && args.connectstring.is_none() {
        anyhow::bail!("--nostart needs --ndb-connectstring: only ndb_mgmd can start the node");
    }
    let under_angel = args.angel_pid.is_some();
    if !under_angel && !args.foreground {
        // The angel fetches the config (and, from ndb_mgmd, takes a node id) first, as NDB's:
        // a bad config or an unreachable ndb_mgmd fails here, once.
        let (config, me, _) = load_config(&args)?;
        nowait_nodes(&args.nowait_nodes, &config)?;
        let node = config.data_node(me).with_context(|| {
            format!(
                "--ndb-nodeid={me} is not a data node ([ndbd] NodeId) in {}",
                config.source.display()
            )
        })?;
        return angel::run(me.0, angel::OnError::of(node));
    }
    let (config, me, mgm) = load_config(&args)?;
    let nowait = nowait_nodes(&args.nowait_nodes, &config)?;
    for warning in &config.warnings {
        tracing::warn!("{}: {warning}", config.source.display());
    }
    if let Some(node) = config.data_nodes.iter().find(|n| n.node_id == me) {
        let lock = node.lock_pages_in_main_memory;
        if lock == 2 {
            data_memory::lock(me.0, lock, true);
        }
        let began = std::time::Instant::now();
        let bytes = data_memory::page_in(me.0, node.data_memory_bytes)?;
        tracing::info!(
            bytes,
            ms = began.elapsed().as_millis() as u64,
            "DataMemory paged in"
        );
        if lock == 1 {
            data_memory::lock(me.0, lock, false);
        }
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, shutdown.clone()).context("install signal handler")?;
    }
    let (require_tls, require_certificate) = config.tls_required(me);
    let search_path = args
        .ndb_tls_search_path
        .as_deref()
        .map(rndb_transporter::tls::SearchPath::parse);
    let tls = rndb_transporter::tls::TlsSetup::for_node(
        search_path.as_ref(),
        rndb_config::NodeKind::Data,
        require_tls,
        require_certificate,
    )
    .with_context(|| format!("node {me}: TLS"))?;
    match &tls.keys {
        Some(keys) => tracing::info!(
            require_tls,
            "NDB TLS 1.3 available using certificate file '{}'",
            keys.cert_path.display()
        ),
        None => tracing::info!("no TLS search path: links are plain TCP"),
    }
    let mut mgm = mgm.map(|mut setup| {
        setup.restartable = under_angel;
        // The report link to ndb_mgmd uses the node's own keys (TLS after `start tls`).
        setup.tls = rndb_mgm::tls::ClientTls::with_keys(tls.keys.clone(), tls.require_tls);
        setup
    });
    let restart = mgm.as_ref().map(|setup| setup.restart.clone());
    let restart_requested = || {
        restart
            .as_ref()
            .and_then(|r| *r.lock().unwrap_or_else(|e| e.into_inner()))
    };
    let mut start = true;
    if let (true, Some(setup)) = (args.nostart, mgm.as_mut()) {
        start = rndb_mgm::node_report::wait_for_start(setup, me.0, &shutdown)
            .context("start the threads reporting to ndb_mgmd")?;
    }
    if start {
        let on_started = args
            .report_fd
            .map(|fd| Box::new(move || angel::report_started(fd)) as Box<dyn FnOnce() + Send>);
        let start = rndb_ndbd::Start {
            initial: args.initial,
            nowait: &nowait,
            on_started,
        };
        match rndb_ndbd::run(config, me, start, shutdown, tls, mgm) {
            Ok(()) => {}
            // The angel starts it again: it joins by node restart once the others serve.
            Err(e) if under_angel && e.downcast_ref::<rndb_ndbd::RejoinNeeded>().is_some() => {
                eprintln!("ndbd: error: {e:#}");
                tracing::warn!("the angel starts this data node again: it joins by node restart");
                return Ok(angel::REJOIN_EXIT_CODE);
            }
            Err(e) => return Err(e),
        }
    }
    match restart_requested() {
        Some(request) if under_angel => Ok(angel::restart_exit_code(request)),
        Some(_) => {
            tracing::warn!("asked to restart, but no angel runs (--foreground): stopped");
            Ok(0)
        }
        None => Ok(0),
    }
}

/// The config, this node's id, and, when the config came from ndb_mgmd, where to report.
fn load_config(
    args: &Args,
) -> anyhow::Result<(
    rndb_config::ClusterConfig,
    NodeId,
    Option<rndb_mgm::node_report::ReportSetup>,
)> {
    if let Some(text) = &args.connectstring {
        let connectstring = rndb_mgm::ConnectString::parse(text).map_err(anyhow::Error::msg)?;
        // With a TLS search path the fetch is over TLS, with this node's data node keys
        // (RequireTls is in the config, not known yet: ndb_mgmd refuses plain text if it must).
        let tls = rndb_mgm::tls::ClientTls::load(
            args.ndb_tls_search_path.as_deref(),
            rndb_config::NodeKind::Data,
            false,
        )
        .context("TLS to ndb_mgmd")?;
        let fetched = rndb_mgm::client::fetch_config_tls(
            text,
            rndb_mgm::Requester::Ndbd,
            args.allocated_nodeid.or(args.ndb_nodeid),
            args.connect_retries,
            std::time::Duration::from_secs(args.connect_retry_delay),
            &tls,
        )
        .with_context(|| format!("fetch the config from ndb_mgmd ({connectstring})"))?;
        let id = args
            .allocated_nodeid
            .or(args.ndb_nodeid)
            .or(connectstring.node_id)
            .or(fetched.node_id)
            .context("ndb_mgmd gave no node id")?;
        tracing::info!(node = id, source = %fetched.config.source.display(), "config fetched from ndb_mgmd");
        let setup = rndb_mgm::node_report::ReportSetup::new(connectstring, &fetched);
        return Ok((fetched.config, NodeId(id), Some(setup)));
    }
    let (Some(file), Some(id)) = (&args.config_file, args.allocated_nodeid.or(args.ndb_nodeid))
    else {
        anyhow::bail!("give --config-file and --ndb-nodeid, or --ndb-connectstring");
    };
    match rndb_config::parse_file(file) {
        Ok(config) => Ok((config, NodeId(id), None)),
        // A file that cannot be read is one error that names the file itself.
        Err(errors) if errors.errors.iter().all(|e| e.line == 0) => {
            anyhow::bail!("read the config file: {errors}")
        }
        Err(errors) => anyhow::bail!("{} has errors:\n{errors}", file.display()),
    }
}

/// `--nowait-nodes`: each id must name a data node of the config.
fn nowait_nodes(ids: &[u16], config: &rndb_config::ClusterConfig) -> anyhow::Result<Vec<NodeId>> {
    ids.iter()
        .map(|&id| {
            let node = NodeId(id);
            match config.data_node(node) {
                Some(_) => Ok(node),
                None => anyhow::bail!(
                    "--nowait-nodes: node {id} is not a data node ([ndbd] NodeId) in {}",
                    config.source.display()
                ),
            }
        })
        .collect()
}
