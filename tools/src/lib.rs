//! rndb-tools: NDB's table tools, each an API node that does one thing and exits.
//!
//! - `ndb_show_tables`: the dictionary's tables and indexes.
//! - `ndb_select_all`, `ndb_select_count`: a table's rows, or how many there are.
//! - `ndb_delete_all`, `ndb_drop_table`: empty a table, or drop it.
//! - `ndb_create_table`: a table from one `CREATE TABLE` statement (`rndb_api::ddl`).
//! - `ndb_import`: a CSV file into a table, with many transactions in flight ([`csv`],
//!   [`import`]).
//! - `ndb_blob_tool`: finds and repairs the parts of BLOB and TEXT values that no value needs
//!   (orphans) or that a value needs and lacks.
//!
//! This library holds what they share: the connect options ([`ConnectArgs`], as `ndb_desc`
//! takes them), the text form of values ([`values`]) and NDB's lock-mode numbers. Every tool
//! prints `name: error` on stderr and exits 1 on failure; nothing here panics on bad input.

#![forbid(unsafe_code)]

pub mod csv;
pub mod import;
pub mod values;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use rndb_api::{Cluster, ConnectOptions, Error, LockMode, NodeId};
use rndb_config::{parse_file, ClusterConfig};

/// NDB's "No such table existed".
pub const NO_SUCH_TABLE: u32 = 709;

/// How a tool reaches the cluster: ndb_mgmd (`-c`, NDB's way), or its config.ini (`-f`, as
/// `ndbd` and `ndb_desc` take it).
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// The cluster's config.ini.
    #[arg(
        short = 'f',
        long = "config-file",
        visible_alias = "config_file",
        value_name = "FILE",
        required_unless_present = "connectstring",
        conflicts_with = "connectstring"
    )]
    pub config_file: Option<PathBuf>,
    /// Fetch the config from ndb_mgmd: `host[:port][,host[:port]]` (port 1186 by default).
    #[arg(
        short = 'c',
        long = "ndb-connectstring",
        visible_aliases = ["connect-string", "ndb_connectstring"],
        value_name = "CONNECTSTRING"
    )]
    pub connectstring: Option<String>,
    /// Connect in this API slot; by default the first free slot that admits this host.
    #[arg(long = "ndb-nodeid", visible_alias = "ndb_nodeid", value_name = "N")]
    pub ndb_nodeid: Option<u16>,
    /// NDB's database name. rndb has one namespace: accepted for NDB's command lines, and
    /// ignored.
    #[arg(
        short = 'd',
        long = "database",
        value_name = "NAME",
        default_value = "TEST_DB"
    )]
    pub database: String,
}

impl ConnectArgs {
    /// Reads the config (or fetches it from ndb_mgmd) and connects as an API node.
    pub fn connect(&self) -> anyhow::Result<Cluster> {
        let node_id = self.ndb_nodeid.map(NodeId);
        match (&self.connectstring, &self.config_file) {
            (Some(connectstring), _) => {
                let options = ConnectOptions {
                    node_id,
                    ..ConnectOptions::default()
                };
                Cluster::connect_mgm(connectstring, options).map_err(|err| {
                    anyhow!("connect to the cluster of ndb_mgmd {connectstring}: {err}")
                })
            }
            (None, Some(file)) => connect(load_config(file)?, node_id),
            (None, None) => Err(anyhow!("give -c CONNECTSTRING or -f config.ini")),
        }
    }
}

/// Runs a tool's body: an error is printed as `name: error` (with its causes) and exits 1. A
/// reader that closed the pipe (`ndb_select_all ... | head`) ends the tool quietly.
pub fn run_main(name: &str, body: impl FnOnce() -> anyhow::Result<ExitCode>) -> ExitCode {
    match body() {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{name}: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Parses the config, printing its warnings; a broken file fails with every error in it.
pub fn load_config(path: &Path) -> anyhow::Result<ClusterConfig> {
    // Each error names the file and line already; several go one to a line.
    let config = parse_file(path).map_err(|errors| {
        let separator = if errors.len() > 1 { "\n" } else { " " };
        anyhow!("read config:{separator}{errors}")
    })?;
    for warning in &config.warnings {
        eprintln!("warning: {}: {warning}", path.display());
    }
    Ok(config)
}

/// Connects as an API node; a data node that is not there gets a hint on how to start it.
pub fn connect(config: ClusterConfig, node_id: Option<NodeId>) -> anyhow::Result<Cluster> {
    let source = config.source.clone();
    let options = ConnectOptions {
        node_id,
        ..ConnectOptions::default()
    };
    Cluster::connect_config(config, options).map_err(|err| {
        let hint = match &err {
            Error::Connect { node, .. } => format!(
                "\nhint: is data node {node} running? (`ndbd --config-file {} --ndb-nodeid {node}`)",
                source.display()
            ),
            _ => String::new(),
        };
        anyhow!(
            "connect to the cluster of {}: {err}{hint}",
            source.display()
        )
    })
}

/// NDB's `--lock` numbers for scans: 0 reads committed rows without locking, 1 takes shared
/// locks held until the end, 2 exclusive ones.
pub fn lock_mode(number: u8) -> anyhow::Result<LockMode> {
    match number {
        0 => Ok(LockMode::CommittedRead),
        1 => Ok(LockMode::Read),
        2 => Ok(LockMode::Exclusive),
        other => Err(anyhow!(
            "--lock={other}: 0 (committed read), 1 (shared lock) or 2 (exclusive lock)"
        )),
    }
}

/// Parses NDB's boolean option values: 1/0, true/false, on/off (any case).
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(format!("{text:?} is not a boolean (1/0, TRUE/FALSE)")),
    }
}
