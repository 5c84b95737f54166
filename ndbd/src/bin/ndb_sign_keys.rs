//! `ndb_sign_keys`: creates the cluster CA, creates and signs node keys, and lists and checks
//! the keys and certificates on a TLS search path, with NDB 8.3's flags and file names.
//!
//! ```text
//! ndb_sign_keys --create-CA --to-dir=CA
//! ndb_sign_keys --CA-search-path=CA --create-key -c config.ini --to-dir=keys
//! ndb_sign_keys --CA-search-path=CA --create-key --node-type=api --to-dir=keys
//! ndb_sign_keys --ndb-tls-search-path=CA:keys --list
//! ndb_sign_keys --ndb-tls-search-path=CA:keys --check
//! ```
//!
//! Differences from NDB: no pass phrase (the CA key is written unencrypted, mode 0400); no
//! signing by a remote CA, no pending or retired files; `-c` names a config file, not a
//! management server (there is none yet).
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Parser;
use rndb_config::{ClusterConfig, NodeId, NodeKind};
use rndb_transporter::tls::pki::{self, Lifetime};
use rndb_transporter::tls::{self, SearchPath, CA_CERT_FILE, CA_KEY_FILE};

/// Create, sign, list and check TLS keys and certificates of an rndb (NDB) cluster.
#[derive(Parser, Debug)]
#[command(name = "ndb_sign_keys", version)]
struct Args {
    /// Create the cluster CA (NDB-Cluster-private-key, NDB-Cluster-cert) in --to-dir.
    #[arg(long = "create-CA")]
    create_ca: bool,
    /// Where to find the CA's certificate and key for signing (default: --ndb-tls-search-path).
    #[arg(long = "CA-search-path")]
    ca_search_path: Option<String>,
    /// Directories (colon-separated) searched for keys and certificates.
    #[arg(long = "ndb-tls-search-path", default_value = ".")]
    ndb_tls_search_path: String,
    /// Directory new files are written to (default: the first of --ndb-tls-search-path).
    #[arg(long = "to-dir")]
    to_dir: Option<PathBuf>,
    /// Create a new private key for each node signed (otherwise its key must exist).
    #[arg(long = "create-key")]
    create_key: bool,
    /// A cluster config (config.ini): sign for every node of it that runs on this host.
    #[arg(short = 'c', long = "config-file")]
    config_file: Option<PathBuf>,
    /// Sign for this node only (of --config-file, whose section gives its type and HostName).
    #[arg(long = "node-id")]
    node_id: Option<u16>,
    /// Sign for a node of this type, without a config: db, api or mgmd.
    #[arg(long = "node-type")]
    node_type: Option<String>,
    /// Bind the certificate to this host name: a peer accepts it only from that host.
    #[arg(long = "bound-hostname")]
    bound_hostname: Option<String>,
    /// Lifetime of new certificates in seconds (default: 90 days for nodes, 4 years for the
    /// CA). A negative value makes a certificate that has already expired (for tests).
    #[arg(long, allow_hyphen_values = true)]
    duration: Option<i64>,
    /// List the CA and node certificates and keys found on --ndb-tls-search-path.
    #[arg(long)]
    list: bool,
    /// Check each node certificate found: signed by the CA found, valid now, for its node
    /// type, matching its key. Exits 1 when one fails.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ndb_sign_keys: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let search_path = SearchPath::parse(&args.ndb_tls_search_path);
    let to_dir = args
        .to_dir
        .clone()
        .or_else(|| search_path.dirs.first().cloned())
        .unwrap_or_else(|| PathBuf::from("."));
    if args.create_ca {
        create_ca(&to_dir, args.duration)?;
    }
    if args.config_file.is_some() || args.node_type.is_some() {
        sign(args, &search_path, &to_dir)?;
    } else if args.create_key || args.node_id.is_some() || args.bound_hostname.is_some() {
        bail!("say which nodes to sign for: --config-file (with --node-id for one) or --node-type");
    }
    if args.list {
        list(&search_path)?;
    }
    if args.check {
        return check(&search_path);
    }
    if !(args.create_ca || args.list || args.config_file.is_some() || args.node_type.is_some()) {
        bail!(
            "nothing to do: give --create-CA, --create-key with nodes to sign, --list or --check"
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn create_ca(to_dir: &Path, duration: Option<i64>) -> anyhow::Result<()> {
    std::fs::create_dir_all(to_dir)
        .with_context(|| format!("create directory {}", to_dir.display()))?;
    let seconds = duration.unwrap_or(pki::CA_LIFETIME_DAYS * 86_400);
    println!(
        "Creating CA key file {CA_KEY_FILE} in directory {}.",
        to_dir.display()
    );
    println!(
        "Creating CA certificate {CA_CERT_FILE} in directory {}.",
        to_dir.display()
    );
    pki::create_ca(to_dir, Lifetime::from_now(seconds)?)?;
    Ok(())
}

/// One certificate to make: a node type, the node ids it serves (for messages) and its hosts.
#[derive(Debug)]
struct Target {
    kind: NodeKind,
    nodes: Vec<NodeId>,
    hostnames: Vec<String>,
}

fn sign(args: &Args, search_path: &SearchPath, to_dir: &Path) -> anyhow::Result<()> {
    let targets = targets(args)?;
    let ca_path = SearchPath::parse(
        args.ca_search_path
            .as_deref()
            .unwrap_or(&args.ndb_tls_search_path),
    );
    let ca = pki::Ca::load(&ca_path)?;
    std::fs::create_dir_all(to_dir)
        .with_context(|| format!("create directory {}", to_dir.display()))?;
    let seconds = args.duration.unwrap_or(pki::NODE_LIFETIME_DAYS * 86_400);
    for target in targets {
        let key_name = tls::key_file(target.kind);
        let key = if args.create_key {
            println!(
                "Creating private key {key_name} in directory {}.",
                to_dir.display()
            );
            let key = pki::generate_key()?;
            pki::write_new(to_dir, key_name, pki::key_pem(&key).as_bytes(), 0o400)?;
            key
        } else {
            let path = search_path.find(key_name).with_context(|| {
                format!("no {key_name} in {search_path}: create one with --create-key")
            })?;
            pki::read_key(&path)?
        };
        let chain = ca.sign(
            &key,
            target.kind,
            &target.hostnames,
            Lifetime::from_now(seconds)?,
        )?;
        let cert_name = tls::cert_file(target.kind);
        println!(
            "Creating certificate {cert_name} in directory {} for {} (node ids {}){}.",
            to_dir.display(),
            tls::kind_name(target.kind),
            join(&target.nodes),
            bound_text(&target.hostnames)
        );
        replace_file(&to_dir.join(cert_name), chain.as_bytes())?;
    }
    Ok(())
}

/// The certificates to make: one per node type among the chosen nodes (NDB's file names hold
/// the node type, not the node id, so the nodes of one type on a host share them).
fn targets(args: &Args) -> anyhow::Result<Vec<Target>> {
    let bound: Vec<String> = args.bound_hostname.iter().cloned().collect();
    let Some(path) = &args.config_file else {
        let name = args.node_type.as_deref().unwrap_or_default();
        let kind = parse_node_type(name)?;
        return Ok(vec![Target {
            kind,
            nodes: args.node_id.map(NodeId).into_iter().collect(),
            hostnames: bound,
        }]);
    };
    let config = read_config(path)?;
    let mut targets: Vec<Target> = Vec::new();
    for (id, kind, host) in nodes_of(&config) {
        let chosen = match args.node_id {
            Some(wanted) => wanted == id.0,
            None => host.is_none_or(rndb_transporter::connect::is_this_host),
        };
        if !chosen {
            continue;
        }
        match targets.iter_mut().find(|t| t.kind == kind) {
            Some(target) => target.nodes.push(id),
            None => targets.push(Target {
                kind,
                nodes: vec![id],
                hostnames: bound.clone(),
            }),
        }
    }
    if targets.is_empty() {
        match args.node_id {
            Some(id) => bail!("node {id} is not in {}", path.display()),
            None => bail!("no node of {} runs on this host", path.display()),
        }
    }
    println!(
        "Read {} nodes from cluster configuration.",
        nodes_of(&config).len()
    );
    Ok(targets)
}

fn nodes_of(config: &ClusterConfig) -> Vec<(NodeId, NodeKind, Option<&str>)> {
    let data = config
        .data_nodes
        .iter()
        .map(|n| (n.node_id, NodeKind::Data, Some(n.host_name.as_str())));
    let mgm = config
        .mgm_nodes
        .iter()
        .map(|n| (n.node_id, NodeKind::Mgm, Some(n.host_name.as_str())));
    let api = config
        .api_slots
        .iter()
        .map(|n| (n.node_id, NodeKind::Api, n.host_name.as_deref()));
    data.chain(mgm)
        .chain(api)
        .map(|(id, kind, host)| (id, kind, host.filter(|h| !h.is_empty())))
        .collect()
}

fn read_config(path: &Path) -> anyhow::Result<ClusterConfig> {
    match rndb_config::parse_file(path) {
        Ok(config) => Ok(config),
        Err(errors) if errors.errors.iter().all(|e| e.line == 0) => {
            bail!("read the config file: {errors}")
        }
        Err(errors) => bail!("{} has errors:\n{errors}", path.display()),
    }
}

fn parse_node_type(name: &str) -> anyhow::Result<NodeKind> {
    match name {
        "db" | "ndbd" => Ok(NodeKind::Data),
        "api" | "mysqld" => Ok(NodeKind::Api),
        "mgmd" | "mgm" => Ok(NodeKind::Mgm),
        other => bail!("--node-type={other}: expected db, api or mgmd"),
    }
}

/// Every file of NDB's names found on the search path, with what its certificate says.
fn list(search_path: &SearchPath) -> anyhow::Result<()> {
    println!("TLS search path: {search_path}");
    let mut names = vec![CA_CERT_FILE, CA_KEY_FILE];
    for kind in [NodeKind::Data, NodeKind::Api, NodeKind::Mgm] {
        names.push(tls::cert_file(kind));
        names.push(tls::key_file(kind));
    }
    for name in names {
        let Some(path) = search_path.find(name) else {
            continue;
        };
        if !name.ends_with("cert") {
            println!("{}", path.display());
            continue;
        }
        let certs = tls::read_certs(&path)?;
        let facts =
            pki::facts(&certs[0]).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        println!(
            "{}: \"{}\", serial {}, expires {} ({}){}",
            path.display(),
            facts.common_name,
            facts.serial_hex,
            facts.not_after,
            expiry_text(facts.expires_in_seconds),
            bound_text(&facts.bound_hostnames)
        );
    }
    Ok(())
}

/// Checks every node certificate found; prints one line each.
fn check(search_path: &SearchPath) -> anyhow::Result<ExitCode> {
    let ca_path = search_path
        .find(CA_CERT_FILE)
        .with_context(|| format!("no {CA_CERT_FILE} in {search_path}"))?;
    let mut checked = 0;
    let mut failed = 0;
    for kind in [NodeKind::Data, NodeKind::Api, NodeKind::Mgm] {
        let Some(cert_path) = search_path.find(tls::cert_file(kind)) else {
            continue;
        };
        checked += 1;
        let key_path = search_path
            .find(tls::key_file(kind))
            .unwrap_or_else(|| PathBuf::from(tls::key_file(kind)));
        match pki::check(&ca_path, &cert_path, &key_path, kind) {
            Ok(facts) => println!(
                "{}: OK, {} ({})",
                cert_path.display(),
                facts.common_name,
                expiry_text(facts.expires_in_seconds)
            ),
            Err(e) => {
                failed += 1;
                println!("{e}");
            }
        }
    }
    if checked == 0 {
        bail!("no node certificate in {search_path}");
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Writes `bytes` to `path`, replacing it atomically (a temporary file renamed over it).
fn replace_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let temporary = path.with_extension("new");
    let _ = std::fs::remove_file(&temporary);
    std::fs::write(&temporary, bytes).with_context(|| format!("write {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("replace {}", path.display()))
}

fn expiry_text(seconds: i64) -> String {
    if seconds < 0 {
        format!("EXPIRED {} days ago", -seconds / 86_400)
    } else {
        format!("expires in {} days", seconds / 86_400)
    }
}

fn bound_text(hostnames: &[String]) -> String {
    if hostnames.is_empty() {
        String::new()
    } else {
        format!(", bound to {}", hostnames.join(", "))
    }
}

fn join(nodes: &[NodeId]) -> String {
    let ids: Vec<String> = nodes.iter().map(ToString::to_string).collect();
    if ids.is_empty() {
        "any".to_string()
    } else {
        ids.join(", ")
    }
}
