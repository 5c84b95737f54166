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
    /// Directories to search for the cluster CA and this node's TLS key and certificate (NDB
    /// 8.3). Not implemented yet: given, it is an error, so that no one believes links are
    /// encrypted while they are plain TCP.
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
    if let Some(path) = &args.ndb_tls_search_path {
        anyhow::bail!(
            "--ndb-tls-search-path={path}: TLS between nodes is not implemented yet (issue 25); \
             every link is plain TCP. Start ndbd without it"
        );
    }
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
    rndb_ndbd::run(config, NodeId(args.ndb_nodeid), args.initial, shutdown)
}
