//! `ndbd`: starts one data node of a cluster described by a config.ini.

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
    /// The cluster's config.ini.
    #[arg(long = "config-file", visible_alias = "config_file", short = 'f')]
    config_file: PathBuf,
    /// This node's NodeId (a [ndbd] section of the config).
    #[arg(long = "ndb-nodeid", visible_alias = "ndb_nodeid")]
    ndb_nodeid: u16,
    /// Start from empty: remove the node's file system (`ndb_<NodeId>_fs/` under
    /// FileSystemPath or DataDir) first. Without it, the node restores what its files hold.
    #[arg(long)]
    initial: bool,
    /// Stay in the foreground (rndb never daemonizes; accepted for compatibility).
    #[arg(long)]
    nodaemon: bool,
    /// Stay in the foreground (rndb never daemonizes; accepted for compatibility).
    #[arg(long)]
    foreground: bool,
    /// Directories (colon-separated) to search for the cluster CA (NDB-Cluster-cert) and this
    /// node's key and certificate (ndb-data-node-private-key, ndb-data-node-cert), as NDB 8.3.
    /// With them, links to peers that have keys too are TLS; RequireTls=1 makes TLS mandatory.
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
    if let Err(e) = run() {
        eprintln!("ndbd: error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = match rndb_config::parse_file(&args.config_file) {
        Ok(config) => config,
        // A file that cannot be read is one error that names the file itself.
        Err(errors) if errors.errors.iter().all(|e| e.line == 0) => {
            anyhow::bail!("read the config file: {errors}")
        }
        Err(errors) => anyhow::bail!("{} has errors:\n{errors}", args.config_file.display()),
    };
    for warning in &config.warnings {
        tracing::warn!("{}: {warning}", args.config_file.display());
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, shutdown.clone()).context("install signal handler")?;
    }
    let me = NodeId(args.ndb_nodeid);
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
    rndb_ndbd::run(config, me, args.initial, shutdown, tls)
}
