//! `ndb_mgmd`: the management server. Serves the cluster's config to nodes started with
//! `--ndb-connectstring`, tracks their states, writes the cluster log, and carries out
//! `ndb_mgm`'s commands.

use std::net::{TcpListener, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{ArgAction, Parser};
use rndb_config::{ClusterConfig, NodeId};
use rndb_mgm::server::log::{Category, ClusterLog, Event, Severity};
use rndb_mgm::server::{cache, Server, ServerSetup};
use rndb_mgm::tls::ServerTls;

/// The rndb management server.
#[derive(Parser, Debug)]
#[command(name = "ndb_mgmd", version, about = "rndb management server")]
struct Args {
    /// The cluster's config.ini. Without it, the cached config of an earlier start is served.
    #[arg(short = 'f', long = "config-file", visible_alias = "config_file")]
    config_file: Option<PathBuf>,
    /// Keep the config served in a cache (`ndb_<NodeId>_config.ini.1` in --configdir), and serve
    /// the cache on the next start rather than config.ini (NDB's default). `--config-cache=0`
    /// reads config.ini every time and keeps no cache.
    #[arg(long = "config-cache", visible_alias = "config_cache", default_value_t = true,
          num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set,
          value_parser = parse_bool)]
    config_cache: bool,
    /// Remove the config cache and read config.ini.
    #[arg(long)]
    initial: bool,
    /// Read config.ini even when a cache exists, and replace the cache when they differ.
    #[arg(long)]
    reload: bool,
    /// Where the config cache is kept: by default the management node's DataDir.
    #[arg(long = "configdir", visible_alias = "config-dir")]
    configdir: Option<PathBuf>,
    /// This management node's NodeId (an `[ndb_mgmd]` section); needed when there are several.
    #[arg(long = "ndb-nodeid", visible_alias = "ndb_nodeid")]
    ndb_nodeid: Option<u16>,
    /// Directories (colon-separated) holding the cluster CA (NDB-Cluster-cert) and this
    /// management node's key and certificate (ndb-mgm-server-private-key, ndb-mgm-server-cert,
    /// made by `ndb_sign_keys --node-type=mgmd`): with them clients may upgrade to TLS with
    /// `start tls`; RequireTls=1 in the `[ndb_mgmd]` section refuses those that do not.
    #[arg(long = "ndb-tls-search-path", visible_alias = "ndb_tls_search_path")]
    ndb_tls_search_path: Option<String>,
    /// Stay in the foreground (rndb never daemonizes; accepted for compatibility).
    #[arg(long)]
    nodaemon: bool,
    /// Stay in the foreground (rndb never daemonizes; accepted for compatibility).
    #[arg(long)]
    foreground: bool,
    /// Serve every data node's figures (memory, records, locks, transporter counters,
    /// checkpoints) as Prometheus/OpenMetrics text at `http://<HostName>:<port>/metrics`
    /// (rndb's; NDB has ndbinfo instead). Off without it.
    #[arg(long = "metrics-port")]
    metrics_port: Option<u16>,
}

/// NDB's boolean option values.
fn parse_bool(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(format!(
            "{text:?} is not a boolean (1/0, true/false, on/off)"
        )),
    }
}

fn main() {
    // The local time zone must be read while this is the only thread (see `time`'s
    // `current_local_offset`): the cluster log's timestamps are local time, as NDB's.
    let offset = time::UtcOffset::current_local_offset().unwrap_or(time::UtcOffset::UTC);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RNDB_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    if let Err(e) = run(offset) {
        eprintln!("ndb_mgmd: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(offset: time::UtcOffset) -> anyhow::Result<()> {
    let args = Args::parse();
    let (config_text, config, me) = load_config(&args)?;
    let node = config
        .mgm_node(me)
        .context("the management node is in the config")?
        .clone();
    std::fs::create_dir_all(&node.data_dir)
        .with_context(|| format!("create DataDir {}", node.data_dir.display()))?;
    let log = ClusterLog::open(&node.data_dir, me.0, offset).with_context(|| {
        format!(
            "open the cluster log in DataDir {}",
            node.data_dir.display()
        )
    })?;
    let (tls, link_tls) = server_tls(&args, &node, me)?;
    let listener = bind(&config, me)?;
    let address = listener.local_addr().context("read the bound address")?;
    tracing::info!(node = %me, %address, cluster_log = %log.path().display(), "ndb_mgmd started");
    let arbitrator_config = config.clone();
    let server = Arc::new(
        Server::new(ServerSetup {
            config_text,
            config,
            me,
            log,
        })
        .with_tls(tls),
    );
    server.log(Event::new(
        me.0,
        Category::Connection,
        8,
        Severity::Info,
        format!("Node {me} Connected"),
    ));
    let signalled = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, signalled.clone()).context("install signal handler")?;
    }
    if let Some(port) = args.metrics_port {
        let ip = address.ip();
        let metrics = TcpListener::bind((ip, port))
            .with_context(|| format!("bind the metrics endpoint {ip}:{port} (--metrics-port)"))?;
        let bound = metrics.local_addr().context("read the metrics address")?;
        rndb_mgm::server::metrics::spawn(server.clone(), metrics)
            .context("start the metrics thread")?;
        tracing::info!(%bound, "metrics at http://{bound}/metrics");
    }
    rndb_mgm::server::arbitrator::spawn(server.clone(), arbitrator_config, me, link_tls)
        .context("start the arbitrator's link threads")?;
    let acceptor = server.clone();
    std::thread::Builder::new()
        .name("mgm-accept".into())
        .spawn(move || acceptor.serve(listener))
        .context("start the acceptor thread")?;
    // The other [ndb_mgmd] of the config: this server reports to each (see `server::peers`).
    rndb_mgm::server::peers::spawn(&server)
        .context("start the threads reporting to the other management servers")?;
    while !signalled.load(Ordering::Relaxed) && !server.shutdown.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // The SHUTDOWN reply is on its way: give its thread a moment to write it.
    std::thread::sleep(Duration::from_millis(100));
    server.log(Event::new(
        me.0,
        Category::Shutdown,
        1,
        Severity::Info,
        "Node shutdown completed",
    ));
    tracing::info!(node = %me, "ndb_mgmd stopped");
    Ok(())
}

/// This server's TLS keys (from --ndb-tls-search-path) and its section's RequireTls: for the
/// protocol's clients, and for the arbitrator's links to the data nodes.
fn server_tls(
    args: &Args,
    node: &rndb_config::MgmNodeConfig,
    me: NodeId,
) -> anyhow::Result<(ServerTls, rndb_transporter::tls::TlsSetup)> {
    let search_path = args
        .ndb_tls_search_path
        .as_deref()
        .map(rndb_transporter::tls::SearchPath::parse);
    let setup = rndb_transporter::tls::TlsSetup::for_node(
        search_path.as_ref(),
        rndb_config::NodeKind::Mgm,
        node.require_tls,
        node.require_certificate,
    )
    .with_context(|| format!("management node {me}: TLS"))?;
    match &setup.keys {
        Some(keys) => tracing::info!(
            require_tls = node.require_tls,
            "NDB TLS 1.3 available using certificate file '{}'",
            keys.cert_path.display()
        ),
        None => tracing::info!("no TLS search path: clients connect in plain text"),
    }
    let server = ServerTls {
        keys: setup.keys.clone(),
        require_tls: node.require_tls,
        me,
    };
    Ok((server, setup))
}

/// The config to serve: the cache of an earlier start, or config.ini (see `server::cache`).
fn load_config(args: &Args) -> anyhow::Result<(String, ClusterConfig, NodeId)> {
    let Some(file) = &args.config_file else {
        return load_cached(args);
    };
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("read the config file {}", file.display()))?;
    let config = parse(&text, file)?;
    let me = my_node_id(&config, args.ndb_nodeid)?;
    for warning in &config.warnings {
        tracing::warn!("{}: {warning}", file.display());
    }
    if !args.config_cache {
        return Ok((text, config, me));
    }
    let dir = match &args.configdir {
        Some(dir) => dir.clone(),
        None => config
            .mgm_node(me)
            .map(|n| n.data_dir.clone())
            .unwrap_or_default(),
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("create the config directory {}", dir.display()))?;
    let path = cache::cache_path(&dir, me.0);
    if args.initial {
        cache::remove(&path)?;
    }
    match cache::read(&path)? {
        Some(cached) if !args.reload => {
            if cached != text {
                tracing::warn!(
                    "{} differs from the cached config {}: serving the cached one (start with --reload or --initial to serve {})",
                    file.display(),
                    path.display(),
                    file.display()
                );
            }
            let config = parse(&cached, &path)?;
            let me = my_node_id(&config, args.ndb_nodeid)?;
            tracing::info!("serving the cached config {}", path.display());
            Ok((cached, config, me))
        }
        cached => {
            if cached.as_deref() != Some(text.as_str()) {
                cache::write(&path, &text)?;
                tracing::info!("config cached in {}", path.display());
            }
            Ok((text, config, me))
        }
    }
}

/// No config.ini: the cache in --configdir (or the current directory).
fn load_cached(args: &Args) -> anyhow::Result<(String, ClusterConfig, NodeId)> {
    let dir = args.configdir.clone().unwrap_or_else(|| PathBuf::from("."));
    if !args.config_cache || args.initial {
        bail!("no config: give the cluster's config.ini with -f (--initial and --config-cache=0 do not read the cache)");
    }
    let path = match args.ndb_nodeid {
        Some(id) => cache::cache_path(&dir, id),
        None => {
            let found = cache_files(&dir);
            match found.as_slice() {
                [one] => one.clone(),
                [] => bail!(
                    "no config: give the cluster's config.ini with -f (no cached config in {})",
                    dir.display()
                ),
                _ => bail!(
                    "{} holds the config caches of several management nodes: give --ndb-nodeid",
                    dir.display()
                ),
            }
        }
    };
    let text = cache::read(&path)?.with_context(|| {
        format!(
            "no config: give the cluster's config.ini with -f ({} does not exist)",
            path.display()
        )
    })?;
    let config = parse(&text, &path)?;
    let me = my_node_id(&config, args.ndb_nodeid)?;
    tracing::info!("serving the cached config {}", path.display());
    Ok((text, config, me))
}

fn cache_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ndb_") && n.ends_with("_config.ini.1"))
        })
        .collect()
}

fn parse(text: &str, source: &Path) -> anyhow::Result<ClusterConfig> {
    rndb_config::parse_str(text, source)
        .map_err(|errors| anyhow::anyhow!("{} has errors:\n{errors}", source.display()))
}

/// This server's node id: `--ndb-nodeid`, or the config's only `[ndb_mgmd]` section.
fn my_node_id(config: &ClusterConfig, wanted: Option<u16>) -> anyhow::Result<NodeId> {
    let source = config.source.display();
    match (wanted, config.mgm_nodes.as_slice()) {
        (Some(id), _) => {
            if config.mgm_node(NodeId(id)).is_none() {
                bail!("--ndb-nodeid={id} is not a management node ([ndb_mgmd] NodeId) in {source}");
            }
            Ok(NodeId(id))
        }
        (None, [one]) => Ok(one.node_id),
        (None, []) => bail!(
            "{source} has no [ndb_mgmd] section: ndb_mgmd needs one (NodeId, HostName, PortNumber)"
        ),
        (None, several) => {
            let ids: Vec<String> = several.iter().map(|n| n.node_id.to_string()).collect();
            bail!(
                "{source} has {} [ndb_mgmd] sections (node ids {}): give --ndb-nodeid",
                several.len(),
                ids.join(", ")
            )
        }
    }
}

/// Binds PortNumber on the address HostName resolves to (every address when HostName is empty).
fn bind(config: &ClusterConfig, me: NodeId) -> anyhow::Result<TcpListener> {
    let node = config
        .mgm_node(me)
        .context("the management node is in the config")?;
    let host = if node.host_name.is_empty() {
        "0.0.0.0"
    } else {
        node.host_name.as_str()
    };
    let what = format!(
        "PortNumber {} of [ndb_mgmd] NodeId={me} ({}:{})",
        node.port_number,
        config.source.display(),
        node.line
    );
    let addrs: Vec<_> = (host, node.port_number)
        .to_socket_addrs()
        .with_context(|| format!("resolve HostName {host} for {what}"))?
        .collect();
    TcpListener::bind(addrs.as_slice())
        .with_context(|| format!("bind {host}:{} ({what})", node.port_number))
}
