//! `ndb_config`: prints values from a config.ini the way MySQL Cluster's `ndb_config` does.
//!
//! - `ndb_config --config-file F --query=NodeId,HostName,Nodegroup --type=ndbd` prints one
//!   line per matching node (sorted by node id), values separated by `--fields` (default `,`,
//!   as NDB). Rows are separated by `--rows`, which defaults to a newline (NDB's default is a
//!   space; one line per node reads better and is what scripts here expect).
//! - `--connections` prints one line per link: `node1 node2 TCP|SHM`, followed, when `--query`
//!   is given, by a space and the queried link parameters separated by `--fields`.
//! - `--configinfo` prints the parameter table.
//!
//! A file with errors prints every error on stderr and exits with status 1; warnings go to
//! stderr prefixed `warning:`.

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Parser;
use rndb_config::{find_param, param_table, parse_file, ClusterConfig, NodeId, SectionKind};

/// Print values from a MySQL Cluster config.ini, like NDB's ndb_config.
#[derive(Debug, Parser)]
#[command(name = "ndb_config", version)]
struct Args {
    /// The config.ini to read.
    #[arg(long = "config-file", alias = "config_file", value_name = "FILE")]
    config_file: Option<PathBuf>,
    /// Comma-separated parameter names to print (any case); also `type`, `id`, `host`.
    /// Nodes default to `NodeId,type,HostName`; links print only `node1 node2 KIND` without it.
    #[arg(short = 'q', long, value_name = "NAMES")]
    query: Option<String>,
    /// Only nodes of this type: ndbd (db), mgmd (ndb_mgmd, mgm) or api (mysqld); with
    /// --configinfo also tcp or shm.
    #[arg(long = "type", value_name = "TYPE")]
    node_type: Option<String>,
    /// Only the node with this id (with --connections: links of this node).
    #[arg(long, alias = "id", value_name = "N")]
    nodeid: Option<u16>,
    /// Only nodes on this host.
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    /// Separator between the values of one row.
    #[arg(short = 'f', long, default_value = ",", value_name = "SEP")]
    fields: String,
    /// Separator between rows.
    #[arg(short = 'r', long, default_value = "\n", value_name = "SEP")]
    rows: String,
    /// Print nodes (the default).
    #[arg(long, conflicts_with_all = ["connections", "configinfo"])]
    nodes: bool,
    /// Print links instead of nodes.
    #[arg(long)]
    connections: bool,
    /// Print the parameter table (no file needed).
    #[arg(long)]
    configinfo: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("ndb_config: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if args.configinfo {
        let kind = args.node_type.as_deref().map(section_kind).transpose()?;
        print_out(&configinfo(kind))?;
        return Ok(ExitCode::SUCCESS);
    }
    let path = args
        .config_file
        .as_deref()
        .context("read config: --config-file is required")?;
    let Some(config) = load(path) else {
        return Ok(ExitCode::FAILURE);
    };
    for warning in &config.warnings {
        eprintln!(
            "warning: {}:{}: {}",
            path.display(),
            warning.line,
            warning.message
        );
    }
    let names = query_names(args.query.as_deref().unwrap_or(""));
    let rows = if args.connections {
        connection_rows(&config, args, &names)?
    } else {
        node_rows(&config, args, &names)?
    };
    if !rows.is_empty() {
        print_out(&format!("{}{}", rows.join(&args.rows), args.rows))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` to stdout. A reader that closed the pipe early (`ndb_config ... | head -1`)
/// ends the tool quietly, as it would a C tool killed by SIGPIPE; `print!` panicked there.
fn print_out(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written.context("write to stdout"),
    }
}

/// Parses the file, printing every error and warning when it is broken.
fn load(path: &Path) -> Option<ClusterConfig> {
    match parse_file(path) {
        Ok(config) => Some(config),
        Err(errors) => {
            for warning in &errors.warnings {
                eprintln!(
                    "warning: {}:{}: {}",
                    path.display(),
                    warning.line,
                    warning.message
                );
            }
            eprintln!("{errors}");
            eprintln!("{}: {} error(s)", path.display(), errors.len());
            None
        }
    }
}

/// What `--query` is for nodes when it is not given.
const DEFAULT_NODE_QUERY: &str = "NodeId,type,HostName";

fn query_names(query: &str) -> Vec<String> {
    query
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// `--type` (and its aliases) to a section kind.
fn section_kind(name: &str) -> anyhow::Result<SectionKind> {
    let kind = match name.to_ascii_lowercase().as_str() {
        "ndbd" | "db" => SectionKind::Ndbd,
        "mgmd" | "ndb_mgmd" | "mgm" => SectionKind::Mgm,
        "api" | "mysqld" => SectionKind::Api,
        "tcp" => SectionKind::Tcp,
        "shm" => SectionKind::Shm,
        other => bail!("unknown --type `{other}`; use ndbd, mgmd or api"),
    };
    Ok(kind)
}

/// One row per matching node, sorted by node id.
fn node_rows(config: &ClusterConfig, args: &Args, names: &[String]) -> anyhow::Result<Vec<String>> {
    let default_names = query_names(DEFAULT_NODE_QUERY);
    let names = if names.is_empty() {
        &default_names[..]
    } else {
        names
    };
    let kinds: Vec<SectionKind> = match args.node_type.as_deref().map(section_kind).transpose()? {
        Some(kind @ (SectionKind::Tcp | SectionKind::Shm)) => {
            bail!("--type {kind} names links; use --connections")
        }
        Some(kind) => vec![kind],
        None => vec![SectionKind::Ndbd, SectionKind::Mgm, SectionKind::Api],
    };
    for name in names {
        let known = ["type", "id", "host"]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
            || kinds.iter().any(|&k| find_param(k, name).is_some());
        if !known {
            bail!("query: unknown parameter `{name}` for the selected node types");
        }
    }
    let mut ids: Vec<NodeId> = Vec::new();
    ids.extend(config.data_nodes.iter().map(|n| n.node_id));
    ids.extend(config.mgm_nodes.iter().map(|n| n.node_id));
    ids.extend(config.api_slots.iter().map(|n| n.node_id));
    ids.sort_unstable();
    let rows = ids
        .into_iter()
        .filter(|&id| node_matches(config, args, &kinds, id))
        .map(|id| {
            let values: Vec<String> = names
                .iter()
                .map(|n| config.param_value(id, n).unwrap_or_default())
                .collect();
            values.join(&args.fields)
        })
        .collect();
    Ok(rows)
}

fn node_matches(config: &ClusterConfig, args: &Args, kinds: &[SectionKind], id: NodeId) -> bool {
    let kind_ok = config
        .node_kind(id)
        .is_some_and(|k| kinds.iter().any(|s| s.node_kind() == Some(k)));
    let id_ok = args.nodeid.is_none_or(|n| n == id.0);
    let host_ok = args.host.as_deref().is_none_or(|h| {
        config
            .param_value(id, "HostName")
            .is_some_and(|v| v.eq_ignore_ascii_case(h))
    });
    kind_ok && id_ok && host_ok
}

/// One row per link: `node1 node2 KIND`, then the queried values when `--query` was given.
fn connection_rows(
    config: &ClusterConfig,
    args: &Args,
    names: &[String],
) -> anyhow::Result<Vec<String>> {
    for name in names {
        let known = name.eq_ignore_ascii_case("type")
            || [SectionKind::Tcp, SectionKind::Shm]
                .iter()
                .any(|&k| find_param(k, name).is_some());
        if !known {
            bail!("query: unknown link parameter `{name}`");
        }
    }
    let rows = config
        .links
        .iter()
        .filter(|l| args.nodeid.is_none_or(|n| l.peer_of(NodeId(n)).is_some()))
        .map(|l| {
            let mut row = format!("{} {} {}", l.node1, l.node2, l.kind);
            if !names.is_empty() {
                let values: Vec<String> = names
                    .iter()
                    .map(|n| l.param_value(n).unwrap_or_default())
                    .collect();
                row.push(' ');
                row.push_str(&values.join(&args.fields));
            }
            row
        })
        .collect();
    Ok(rows)
}

/// The parameter table as aligned text, optionally for one section kind.
fn configinfo(kind: Option<SectionKind>) -> String {
    let header = [
        "SECTION",
        "NAME",
        "TYPE",
        "DEFAULT",
        "RANGE",
        "IMPLEMENTED",
        "MEANING",
    ];
    let mut rows: Vec<[String; 7]> = vec![header.map(str::to_string)];
    for param in param_table()
        .iter()
        .filter(|p| kind.is_none_or(|k| p.applies_to(k)))
    {
        let sections: Vec<&str> = param.sections.iter().map(|s| s.name()).collect();
        rows.push([
            sections.join(","),
            param.name.to_string(),
            param.ty.name().to_string(),
            param.default_text(),
            param.range_text(),
            if param.implemented {
                "yes"
            } else {
                "no (warns)"
            }
            .to_string(),
            param.meaning.to_string(),
        ]);
    }
    let mut widths = [0usize; 7];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
