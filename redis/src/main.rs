//! rndb-redis: joins an rndb cluster as an API node and serves the Redis protocol.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use rndb_api::{Cluster, ConnectOptions, NodeId, TransporterKind};
use rndb_redis::commands::Context;
use rndb_redis::store::Tables;

/// mimalloc: each command allocates and frees small buffers (keys, values, operations) on the
/// runtime's thread, where it is markedly faster than the system allocator
/// (`docs/redis-gateway.md`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(about = "An rndb API node that serves the Redis protocol (RESP2/RESP3)")]
struct Args {
    /// The cluster's config.ini.
    #[arg(long)]
    config_file: PathBuf,
    /// The port to serve Redis clients on (0: any free port, printed at start-up). Overrides
    /// the RondisServerPort of the API slot taken; 6379 when neither gives one.
    #[arg(long)]
    port: Option<u16>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// Take this API slot (the first free one that admits this host otherwise).
    #[arg(long)]
    ndb_nodeid: Option<u16>,
    /// Link to the data nodes over TCP even where the config makes the link SHM.
    #[arg(long)]
    tcp: bool,
    /// Directories (colon-separated) with the cluster CA and an API key and certificate: links
    /// to data nodes with keys are then TLS (NDB's --ndb-tls-search-path).
    #[arg(long = "ndb-tls-search-path", value_name = "PATH")]
    ndb_tls_search_path: Option<String>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let options = ConnectOptions {
        node_id: args.ndb_nodeid.map(NodeId),
        transporter: args.tcp.then_some(TransporterKind::Tcp),
        tls_search_path: args.ndb_tls_search_path.clone(),
        ..ConnectOptions::default()
    };
    let cluster = Cluster::connect(&args.config_file, options)
        .with_context(|| format!("connect to the cluster of {}", args.config_file.display()))?;
    // The runtime spins on its shared-memory links while it awaits answers: it runs beside the
    // data nodes' CPUs, never on them.
    if let Some(cpus) = cluster.cpus_beside_spinning_data_nodes() {
        rndb_api::placement::bind_this_thread(&cpus)
            .with_context(|| format!("bind the gateway to CPUs {cpus:?}"))?;
        tracing::info!(
            ?cpus,
            "serving from the CPUs the local data nodes leave free"
        );
    }
    // The gateway serves until it is killed: its cluster lives as long as the process, which
    // lets every connection's task share it.
    let cluster: &'static Cluster = Box::leak(Box::new(cluster));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the runtime")?;
    runtime.block_on(async move {
        let db = cluster.tokio();
        let tables = Tables::open(db)
            .await
            .context("open the gateway's tables")?;
        let no_rest = rndb_redis::commands::no_rest_condition(&tables)
            .context("the conditions of a blind SET and HDEL")?;
        let ctx = Context {
            db,
            tables: Box::leak(Box::new(tables)),
            no_rest: Box::leak(Box::new(no_rest)),
        };
        let port = rndb_redis::serving_port(args.port, cluster);
        let addr = rndb_redis::listen_addr(&args.bind, port).context("resolve --bind")?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listen on {addr}"))?;
        let local_addr = listener.local_addr()?;
        // Tests and scripts read this line to learn the port.
        println!(
            "rndb-redis listening on {local_addr} as API node {}",
            cluster.node_id().0
        );
        rndb_redis::serve(ctx, listener)
            .await
            .context("accept clients")
    })
}
