//! testread-perf: NDB's testReadPerf for rndb.
//!
//! It connects to a cluster (or, with `--local`, starts the config's data nodes first), creates
//! and loads its table, then for each transporter connects an API node that forces that link
//! kind and, for each access type, runs `--iterations` measurements of `--range` rows. It prints
//! µs per row, rows per second and the p50/p99 latency of one execute, as a table or as one
//! JSON document on stdout; every diagnostic goes to stderr.
//!
//! - `args`: the command line.
//! - `local`: `--local` data nodes as child processes, Ctrl-C handling.
//! - `bench`: the table, the load, the measurement loops.
//! - `report`: figures, table and JSON output.
#![forbid(unsafe_code)]

mod args;
mod bench;
mod local;
mod report;
mod sweep;
mod tpcc_run;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rndb_api::{Cluster, ConnectOptions, LockMode, NodeId, Table, TransporterKind};

use args::{Args, Format, Transporter};
use bench::Workload;
use local::{Interrupted, LocalCluster, Shutdown};
use report::{Figures, Params, Report};

/// The same allocator as the data node's (mimalloc): with thousands of transactions in flight
/// the client allocates as fast as the data node does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The config used without `--config-file`, relative to the current directory or the workspace.
const DEFAULT_CONFIG: &str = "config/examples/single.ini";

fn main() -> ExitCode {
    let mut args = Args::parse();
    let shutdown = match Shutdown::install() {
        Ok(shutdown) => shutdown,
        Err(e) => {
            eprintln!("testread-perf: error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    match args.validate().and_then(|()| run(&args, &shutdown)) {
        Ok(()) => ExitCode::SUCCESS,
        // A Ctrl-C in a terminal also reaches --local data nodes (same process group), so the
        // run may fail on a closed link before it sees the flag: that is still an interruption.
        Err(e) if e.is::<Interrupted>() || shutdown.requested() => {
            eprintln!("testread-perf: interrupted");
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("testread-perf: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args, shutdown: &Shutdown) -> Result<()> {
    let config_path = resolve_config(args.config_file.as_deref())?;
    // Every line of a config error names the file already.
    let config = rndb_config::parse_file(&config_path)
        .map_err(|e| anyhow!("{e}"))
        .context("read the config file")?;
    for warning in &config.warnings {
        eprintln!("testread-perf: {}: {warning}", config_path.display());
    }
    let mut resolved = args.clone();
    if resolved.transporter.is_empty() {
        resolved.transporter = default_transporters(&config);
    }
    let args = &resolved;
    let transporters = &args.transporter;
    if transporters.contains(&Transporter::Shm) {
        check_shm_links(&config, &config_path)?;
    }
    if let Some(node) = args.primary_node {
        if config.data_node(NodeId(node)).is_none() {
            bail!(
                "--primary-node {node}: {} has no data node {node}",
                config_path.display()
            );
        }
    }
    // Held until `run` returns, however it returns: dropping it stops the data nodes.
    let with_tls = transporters.contains(&Transporter::Tls);
    let local = if args.local {
        let ndbd = local::find_ndbd(args.ndbd.as_deref())?;
        let local = LocalCluster::start(&config, &config_path, &ndbd, with_tls, shutdown)?;
        Some(local)
    } else {
        None
    };
    let tls_search_path = local
        .as_ref()
        .and_then(|l| l.tls_search_path.clone())
        .or_else(|| args.ndb_tls_search_path.clone());
    if with_tls && tls_search_path.is_none() {
        bail!("--transporter tls needs keys: give --ndb-tls-search-path, or --local to make them");
    }
    let connect = |transporter: Transporter| {
        let tls = (transporter == Transporter::Tls)
            .then_some(tls_search_path.as_deref())
            .flatten();
        connect(&config_path, transporter, args.spin_us, tls)
    };
    // Connect over every transporter but the first once before the load and the measurements,
    // so a transporter the cluster refuses fails the run at once, not after minutes.
    for &transporter in transporters.iter().skip(1) {
        drop(connect(transporter)?);
    }
    let shape = bench::RowShape::with_row_bytes(args.row_bytes)?;
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut results = Vec::new();
    let mut table: Option<Table> = None;
    let mut tpcc_report = (args.workload == args::WorkloadKind::Tpcc)
        .then(|| tpcc_run::TpccReport::new(args, config_path.display().to_string(), seed));
    for &transporter in transporters {
        shutdown.check()?;
        if args.local {
            let tpcc = args.workload == args::WorkloadKind::Tpcc;
            let placement = match (args.concurrency.is_empty(), args.in_flight) {
                (_, args::InFlight::Threads) if tpcc => local::Placement::SweepThreads,
                (_, args::InFlight::Async) if tpcc => local::Placement::SweepAsync,
                (true, _) => local::Placement::Measure,
                (false, args::InFlight::Threads) => local::Placement::SweepThreads,
                (false, args::InFlight::Async) => local::Placement::SweepAsync,
            };
            local::place_for(&config, transporter.kind(), placement)?;
        }
        // Shared with the tokio tasks of an asynchronous tpcc level, which cannot borrow it.
        let cluster = Arc::new(connect(transporter)?);
        let link = match link_name(cluster.transporter_kind()) {
            // A TLS link is a TCP link whose bytes are TLS records.
            "tcp" if transporter == Transporter::Tls => "tls",
            link => link,
        };
        if link != transporter.name() {
            eprintln!(
                "testread-perf: warning: {} was asked for, but the API's links fell back to \
                 {link}; its figures are labelled {}→{}",
                transporter.name(),
                transporter.name().to_uppercase(),
                link.to_uppercase()
            );
        }
        if let Some(report) = tpcc_report.as_mut() {
            let first = report.results.len();
            tpcc_run::run_transporter(args, &cluster, transporter, seed, shutdown, report)?;
            for figures in &mut report.results[first..] {
                figures.link = link;
            }
            continue;
        }
        let first_result = results.len();
        let table = match &table {
            Some(t) => t.clone(),
            None => table
                .insert(bench::create_and_load(
                    &cluster, args.size, shape, shutdown,
                )?)
                .clone(),
        };
        if args.concurrency.is_empty() {
            results.extend(measure_transporter(
                args,
                &cluster,
                &table,
                transporter,
                shape,
                &mut rng,
                shutdown,
            )?);
        } else {
            results.extend(sweep_transporter(
                args,
                &cluster,
                &table,
                transporter,
                seed,
                shutdown,
            )?);
        }
        for figures in &mut results[first_result..] {
            figures.link = link;
        }
    }
    if let Some(report) = tpcc_report {
        match args.format {
            Format::Table => println!("{}", report.to_table()),
            Format::Json => println!("{}", report.to_json()),
        }
        return Ok(());
    }
    let report = Report {
        tool: "testread-perf",
        version: 1,
        params: Params::new(args, config_path.display().to_string(), seed),
        results,
        seed_single_row_read_bytes: report::SeedBytes::published(),
    };
    match args.format {
        Format::Table if !args.concurrency.is_empty() => println!("{}", report.to_sweep_table()),
        Format::Table => println!("{}", report.to_table()),
        Format::Json => println!("{}", report.to_json()),
    }
    Ok(())
}

/// TCP, and SHM when the config gives API nodes SHM links to data nodes, so that one run shows
/// the config's interconnects side by side (io_uring is asked for with `--transporter`).
fn default_transporters(config: &rndb_config::ClusterConfig) -> Vec<Transporter> {
    let mut transporters = vec![Transporter::Tcp];
    let api_link_is_shm = config.links.iter().any(|link| {
        let api_end = [link.node1, link.node2]
            .into_iter()
            .any(|n| config.api_slot(n).is_some());
        api_end && link.kind == rndb_config::TransporterKind::Shm
    });
    if api_link_is_shm {
        transporters.push(Transporter::Shm);
    }
    transporters
}

/// The name `--transporter` and the report give a link kind.
fn link_name(kind: TransporterKind) -> &'static str {
    match kind {
        TransporterKind::Tcp => Transporter::Tcp.name(),
        TransporterKind::Shm => Transporter::Shm.name(),
        TransporterKind::Uring => Transporter::Uring.name(),
    }
}

/// `--transporter shm` needs an API slot whose link to every data node the config makes SHM: a
/// data node refuses to turn a TCP link into SHM (1715). The config alone answers that, so the
/// run fails here, before `--local` starts any data node.
fn check_shm_links(config: &rndb_config::ClusterConfig, config_path: &Path) -> Result<()> {
    let shm_to_every_data_node = |slot: NodeId| {
        config.data_nodes.iter().all(|data| {
            config
                .link(slot, data.node_id)
                .is_some_and(|link| link.kind == TransporterKind::Shm)
        })
    };
    if config
        .api_slots
        .iter()
        .any(|slot| shm_to_every_data_node(slot.node_id))
    {
        return Ok(());
    }
    bail!(
        "--transporter shm: {} gives no API slot a shared-memory link to every data node, so \
         no API node can connect over SHM; set UseShm=1 in [ndbd default] (API and data nodes on \
         one host) or add [shm] sections",
        config_path.display()
    )
}

/// Runs every access type over one connected transporter.
fn measure_transporter(
    args: &Args,
    cluster: &Cluster,
    table: &Table,
    transporter: Transporter,
    shape: bench::RowShape,
    rng: &mut StdRng,
    shutdown: &Shutdown,
) -> Result<Vec<Figures>> {
    let lock: LockMode = args.lock.mode();
    let primary_keys = args
        .primary_node
        .map(|node| {
            bench::keys_with_primary_on(cluster, table, args.size, args.range, NodeId(node))
        })
        .transpose()?;
    let workload = Workload {
        cluster,
        table,
        size: args.size,
        range: args.range,
        iterations: args.iterations,
        lock,
        transaction_per_row: args.transaction_per_row,
        primary_keys: primary_keys.as_deref(),
        shape,
        shutdown,
    };
    let mut figures = Vec::new();
    for &access in &args.access {
        eprintln!(
            "testread-perf: measuring {} over {}",
            access.name(),
            transporter.name()
        );
        let measured = workload
            .measure(access, rng)
            .with_context(|| format!("measure {} over {}", access.name(), transporter.name()))?;
        figures.push(Figures::new(transporter, access, &measured));
    }
    Ok(figures)
}

/// Runs every level of the concurrency sweep over one connected transporter.
fn sweep_transporter(
    args: &Args,
    cluster: &Cluster,
    table: &Table,
    transporter: Transporter,
    seed: u64,
    shutdown: &Shutdown,
) -> Result<Vec<Figures>> {
    let sweep = sweep::Sweep {
        cluster,
        table,
        size: args.size,
        lock: args.lock.mode(),
        write_ratio: args.write_ratio,
        durable_commit: args.durable_commit,
        duration: std::time::Duration::from_millis(args.duration_ms),
        seed,
        shutdown,
    };
    let mut figures = Vec::new();
    for &level in &args.concurrency {
        shutdown.check()?;
        eprintln!(
            "testread-perf: {level} in flight over {}",
            transporter.name()
        );
        let measured = match args.in_flight {
            args::InFlight::Threads => sweep.level(level),
            args::InFlight::Async => sweep.level_async(level),
        }
        .with_context(|| format!("sweep level {level} over {}", transporter.name()))?;
        figures.push(Figures::from_level(transporter, &measured));
    }
    Ok(figures)
}

/// Connects an API node that forces `transporter` on its links, with the TLS keys on
/// `tls_search_path` when given.
fn connect(
    config_path: &Path,
    transporter: Transporter,
    spin_us: Option<u32>,
    tls_search_path: Option<&str>,
) -> Result<Cluster> {
    let defaults = ConnectOptions::default();
    let options = ConnectOptions {
        transporter: Some(transporter.kind()),
        spin_us: spin_us.unwrap_or(defaults.spin_us),
        tls_search_path: tls_search_path.map(str::to_string),
        ..defaults
    };
    let cluster = Cluster::connect(config_path, options).with_context(|| {
        let hint = match transporter.kind() {
            TransporterKind::Shm => {
                " (SHM needs UseShm=1 on the data node and the same HostName on both nodes)"
            }
            TransporterKind::Tcp | TransporterKind::Uring => "",
        };
        format!("connect over {}{hint}", transporter.kind())
    })?;
    cluster
        .ping()
        .with_context(|| format!("ping over {}", transporter.kind()))?;
    eprintln!(
        "testread-perf: connected as API node {} over {}",
        cluster.node_id(),
        cluster.transporter_kind()
    );
    Ok(cluster)
}

/// The config file: the one given, else [`DEFAULT_CONFIG`] in the current directory, else in
/// the workspace this binary was built from.
fn resolve_config(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = given {
        return Ok(path.to_path_buf());
    }
    let here = PathBuf::from(DEFAULT_CONFIG);
    if here.is_file() {
        return Ok(here);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(DEFAULT_CONFIG);
    if workspace.is_file() {
        return Ok(workspace);
    }
    Err(anyhow!(
        "no --config-file given and no {DEFAULT_CONFIG} here or in {}",
        workspace.display()
    ))
}
