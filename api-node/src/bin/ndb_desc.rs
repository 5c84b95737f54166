//! `ndb_desc`: prints a table's definition and its partitions, like MySQL Cluster's `ndb_desc`.
//!
//! - `ndb_desc --config-file F TABLE...` connects as an API node and prints, for each table, its
//!   id, version, columns (type, nullability, primary key) and FragmentCount.
//! - `-p` / `--extra-partition-info` adds one row per partition: its primary node, its backup
//!   nodes and their node group.
//! - `--partitions-only` prints the partition map from the config alone (with `-f`, without
//!   connecting; with `-c`, after connecting as an API node): every table uses the same map
//!   (table fragment i is partition i), so no table is needed.
//!
//! The cluster is named by ndb_mgmd (`-c`, NDB's `--ndb-connectstring`) or by its config.ini
//! (`--config-file`, `-f`, as `ndbd` takes it). A table that does not exist prints NDB's error
//! 709 on stderr and makes the exit status 1; the other tables are still described.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::Parser;
use rndb_api::{Cluster, ColumnDef, ColumnType, ConnectOptions, Error, NodeId, TableDef};
use rndb_config::{parse_file, ClusterConfig, PartitionMap};
use rndb_protocol::blob;

/// NDB's "No such table existed".
const NO_SUCH_TABLE: u32 = 709;

/// Print table definitions and partitions of an rndb cluster, like NDB's ndb_desc.
#[derive(Debug, Parser)]
#[command(name = "ndb_desc", version)]
struct Args {
    /// The cluster's config.ini.
    #[arg(
        short = 'f',
        long = "config-file",
        visible_alias = "config_file",
        value_name = "FILE",
        required_unless_present = "connectstring",
        conflicts_with = "connectstring"
    )]
    config_file: Option<PathBuf>,
    /// Fetch the config from ndb_mgmd: `host[:port][,host[:port]]` (port 1186 by default).
    #[arg(
        short = 'c',
        long = "ndb-connectstring",
        visible_aliases = ["connect-string", "ndb_connectstring"],
        value_name = "CONNECTSTRING"
    )]
    connectstring: Option<String>,
    /// Connect in this API slot; by default the first free slot that admits this host.
    #[arg(long = "ndb-nodeid", visible_alias = "ndb_nodeid", value_name = "N")]
    ndb_nodeid: Option<u16>,
    /// Directories (colon-separated) with the cluster CA and an API key and certificate: links
    /// to data nodes with keys are then TLS.
    #[arg(long = "ndb-tls-search-path", value_name = "PATH")]
    ndb_tls_search_path: Option<String>,
    /// Also print each partition with its primary node, backup nodes and node group.
    #[arg(
        short = 'p',
        long = "extra-partition-info",
        visible_alias = "extra_partition_info"
    )]
    extra_partition_info: bool,
    /// Print only the partition map (the same for every table), read from the config (with
    /// `-f`, without connecting).
    #[arg(long, conflicts_with = "tables")]
    partitions_only: bool,
    /// The tables to describe.
    #[arg(value_name = "TABLE", required_unless_present = "partitions_only")]
    tables: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("ndb_desc: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let (node_id, tls) = (
        args.ndb_nodeid.map(NodeId),
        args.ndb_tls_search_path.clone(),
    );
    let cluster = match (&args.connectstring, &args.config_file) {
        (Some(connectstring), _) => {
            let options = ConnectOptions {
                node_id,
                tls_search_path: tls,
                ..ConnectOptions::default()
            };
            Cluster::connect_mgm(connectstring, options).map_err(|err| {
                anyhow!("connect to the cluster of ndb_mgmd {connectstring}: {err}")
            })?
        }
        (None, Some(file)) => {
            let config = load(file)?;
            if args.partitions_only {
                let map = PartitionMap::new(&config);
                print!("{}", describe_partition_map(&config, &map));
                return Ok(ExitCode::SUCCESS);
            }
            connect(config, node_id, tls)?
        }
        (None, None) => return Err(anyhow!("give -c CONNECTSTRING or -f config.ini")),
    };
    if args.partitions_only {
        let config = cluster.config();
        print!(
            "{}",
            describe_partition_map(config, &PartitionMap::new(config))
        );
        return Ok(ExitCode::SUCCESS);
    }
    // The same map the API library and every data node build from the same config.
    let map = PartitionMap::new(cluster.config());
    let detail = if args.extra_partition_info {
        PartitionDetail::PerPartition
    } else {
        PartitionDetail::Count
    };
    let mut code = ExitCode::SUCCESS;
    for name in &args.tables {
        match cluster.get_table(name) {
            Ok(table) => {
                let head = TableHead {
                    def: table.def(),
                    id: table.id(),
                    version: table.version(),
                };
                print!("{}", describe_table(&head, cluster.config(), &map, detail));
            }
            Err(err) if err.code() == Some(NO_SUCH_TABLE) => {
                eprintln!("ndb_desc: describe table {name}: {err}");
                code = ExitCode::FAILURE;
            }
            Err(err) => return Err(anyhow!("describe table {name}: {err}")),
        }
    }
    Ok(code)
}

/// Parses the config, printing its warnings; a broken file fails with every error in it.
fn load(path: &Path) -> anyhow::Result<ClusterConfig> {
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
fn connect(
    config: ClusterConfig,
    node_id: Option<NodeId>,
    tls_search_path: Option<String>,
) -> anyhow::Result<Cluster> {
    let source = config.source.clone();
    let options = ConnectOptions {
        node_id,
        tls_search_path,
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

/// What the dictionary says of one table, besides its columns' definitions.
#[derive(Debug)]
struct TableHead<'a> {
    def: &'a TableDef,
    id: u32,
    version: u32,
}

/// How much of the partition layout a table's description shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PartitionDetail {
    /// The FragmentCount line only.
    Count,
    /// Also one row per partition with its nodes (`-p`).
    PerPartition,
}

/// A table's description, in NDB's `ndb_desc` layout: a `-- name --` header, `Key: value`
/// lines, the attributes, then (with [`PartitionDetail::PerPartition`]) the partitions.
fn describe_table(
    table: &TableHead,
    config: &ClusterConfig,
    map: &PartitionMap,
    detail: PartitionDetail,
) -> String {
    let def = table.def;
    let key_count = def.columns.iter().filter(|c| c.primary_key).count();
    let mut out = format!("-- {} --\n", def.name);
    out.push_str(&format!("TableId: {}\n", table.id));
    out.push_str(&format!("Version: {}\n", table.version));
    out.push_str(&format!("Number of attributes: {}\n", def.columns.len()));
    out.push_str(&format!("Number of primary keys: {key_count}\n"));
    if def.read_backup {
        out.push_str("Table options: readbackup\n");
    }
    out.push_str(&format!("FragmentCount: {}\n", map.partition_count()));
    out.push_str("-- Attributes --\n");
    for (i, column) in def.columns.iter().enumerate() {
        out.push_str(&column_line(column));
        // As NDB's: a BLOB's or TEXT's parts table (none for the TINY ones).
        if blob::size_of(column.column_type).is_some_and(|s| s.part_bytes() > 0) {
            out.push_str(&format!(" BT={}", blob::parts_table_name(table.id, i)));
        }
        out.push('\n');
    }
    if detail == PartitionDetail::PerPartition {
        out.push_str(&partition_rows(config, map));
    }
    out
}

/// The partition map alone: what every table's `-p` rows are, with the replica count.
fn describe_partition_map(config: &ClusterConfig, map: &PartitionMap) -> String {
    let mut out = String::from("-- Partition map --\n");
    out.push_str(&format!("NoOfReplicas: {}\n", config.no_of_replicas));
    out.push_str(&format!("Node groups: {}\n", config.node_groups.len()));
    out.push_str(&format!("FragmentCount: {}\n", map.partition_count()));
    out.push_str(&partition_rows(config, map));
    out
}

/// One attribute as NDB prints it: name, type, then `PRIMARY KEY DISTRIBUTION KEY` (a row's
/// partition is the hash of its whole primary key), `NULL` or `NOT NULL`, and `AUTO_INCR` for
/// an auto-increment column.
fn column_line(column: &ColumnDef) -> String {
    let mark = if column.primary_key {
        "PRIMARY KEY DISTRIBUTION KEY"
    } else if column.nullable {
        "NULL"
    } else {
        "NOT NULL"
    };
    let auto = if column.auto_increment {
        " AUTO_INCR"
    } else {
        ""
    };
    format!("{} {} {mark}{auto}", column.name, type_text(column))
}

/// A column's type; an ENUM's or SET's with its names, quoted as SQL quotes them.
fn type_text(column: &ColumnDef) -> String {
    let kind = match column.column_type {
        ColumnType::Enum(_) => "Enum",
        ColumnType::Set(_) => "Set",
        t => return t.to_string(),
    };
    let names: Vec<String> = (column.elements.iter())
        .map(|e| format!("'{}'", e.replace('\'', "''")))
        .collect();
    format!("{kind}({})", names.join(","))
}

/// The `-- Per partition info --` block: one aligned row per partition. The node group is the
/// primary's; backups are listed in replica order, `-` when there are none.
fn partition_rows(config: &ClusterConfig, map: &PartitionMap) -> String {
    let mut rows = vec![["Partition", "Primary", "Backups", "Nodegroup"].map(String::from)];
    for partition in 0..map.partition_count() {
        let replicas = map.replicas(partition);
        let (primary, backups) = match replicas.split_first() {
            Some((primary, backups)) => (primary.to_string(), node_list(backups)),
            None => ("-".to_string(), "-".to_string()),
        };
        let group = map
            .primary(partition)
            .and_then(|node| config.data_node(node))
            .map_or_else(|| "-".to_string(), |node| node.node_group.to_string());
        rows.push([partition.to_string(), primary, backups, group]);
    }
    let mut out = String::from("-- Per partition info --\n");
    out.push_str(&aligned(&rows));
    out
}

/// Node ids joined by commas, or `-` for none.
fn node_list(nodes: &[NodeId]) -> String {
    if nodes.is_empty() {
        return "-".to_string();
    }
    let ids: Vec<String> = nodes.iter().map(NodeId::to_string).collect();
    ids.join(",")
}

/// Rows as left-aligned columns two spaces apart, without trailing spaces.
fn aligned<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in rows {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rndb_config::parse_str;

    /// One data node, one replica.
    const SINGLE: &str = "[ndbd default]\nNoOfReplicas=1\nDataDir=.\nHostName=127.0.0.1\n\
                          [ndbd]\nNodeId=1\n[api]\nNodeId=50\n";
    /// Four data nodes, two replicas: node groups {1,2} and {3,4}.
    const FOUR_NODES: &str = "[ndbd default]\nNoOfReplicas=2\nDataDir=.\nHostName=127.0.0.1\n\
                              [ndbd]\nNodeId=1\n[ndbd]\nNodeId=2\n\
                              [ndbd]\nNodeId=3\n[ndbd]\nNodeId=4\n[api]\nNodeId=50\n";

    fn config(text: &str) -> ClusterConfig {
        parse_str(text, Path::new("test.ini")).expect("a valid test config")
    }

    fn people() -> TableDef {
        TableDef::new(
            "people",
            vec![
                ColumnDef::key("id", ColumnType::UInt32).with_auto_increment(),
                ColumnDef::new("name", ColumnType::Varchar(32)),
                ColumnDef::nullable("note", ColumnType::Varbinary(8)),
            ],
        )
    }

    /// Describes `people` (id 7, version 2) on the cluster of `ini` and compares exactly.
    fn check(ini: &str, detail: PartitionDetail, expected: &str) {
        let config = config(ini);
        let def = people();
        let head = TableHead {
            def: &def,
            id: 7,
            version: 2,
        };
        let text = describe_table(&head, &config, &PartitionMap::new(&config), detail);
        assert_eq!(text, expected, "got:\n{text}");
    }

    const PEOPLE_HEAD: &str = "\
-- people --
TableId: 7
Version: 2
Number of attributes: 3
Number of primary keys: 1
";
    const PEOPLE_ATTRIBUTES: &str = "\
-- Attributes --
id UInt32 PRIMARY KEY DISTRIBUTION KEY AUTO_INCR
name Varchar(32) NOT NULL
note Varbinary(8) NULL
";

    #[test]
    fn a_read_backup_table_says_so() {
        let config = config(SINGLE);
        let def = people().with_read_backup(true);
        let head = TableHead {
            def: &def,
            id: 7,
            version: 2,
        };
        let text = describe_table(
            &head,
            &config,
            &PartitionMap::new(&config),
            PartitionDetail::Count,
        );
        let expected = format!(
            "{PEOPLE_HEAD}Table options: readbackup\nFragmentCount: 2\n{PEOPLE_ATTRIBUTES}"
        );
        assert_eq!(text, expected, "got:\n{text}");
    }

    /// A BLOB or TEXT column names its parts table (BT=), as NDB's ndb_desc does; a TINY one
    /// has none.
    #[test]
    fn blob_columns_name_their_parts_tables() {
        let config = config(SINGLE);
        let def = TableDef::new(
            "docs",
            vec![
                ColumnDef::key("id", ColumnType::UInt32),
                ColumnDef::nullable("body", ColumnType::Blob(rndb_api::BlobSize::Medium)),
                ColumnDef::new("tag", ColumnType::Text(rndb_api::BlobSize::Tiny)),
            ],
        );
        let head = TableHead {
            def: &def,
            id: 9,
            version: 1,
        };
        let text = describe_table(
            &head,
            &config,
            &PartitionMap::new(&config),
            PartitionDetail::Count,
        );
        assert!(
            text.ends_with(
                "-- Attributes --\n\
                 id UInt32 PRIMARY KEY DISTRIBUTION KEY\n\
                 body Blob(256,4000,0) NULL BT=NDB$BLOB_9_1\n\
                 tag Text(256,0,0) NOT NULL\n"
            ),
            "got:\n{text}"
        );
    }

    /// An ENUM's and a SET's names are printed with their type, quoted as SQL quotes them.
    #[test]
    fn enum_and_set_columns_show_their_names() {
        let columns = [
            ColumnDef::enumeration("size", &["small", "it's big"]),
            ColumnDef::set("tags", &["a", "b"]).or_null(),
        ];
        let lines: Vec<String> = columns.iter().map(column_line).collect();
        assert_eq!(
            lines,
            [
                "size Enum('small','it''s big') NOT NULL",
                "tags Set('a','b') NULL"
            ]
        );
    }

    #[test]
    fn table_without_partition_rows() {
        let expected = format!("{PEOPLE_HEAD}FragmentCount: 2\n{PEOPLE_ATTRIBUTES}");
        check(SINGLE, PartitionDetail::Count, &expected);
    }

    #[test]
    fn table_on_one_node_has_no_backups() {
        let expected = format!(
            "{PEOPLE_HEAD}FragmentCount: 2\n{PEOPLE_ATTRIBUTES}\
-- Per partition info --
Partition  Primary  Backups  Nodegroup
0          1        -        0
1          1        -        0
"
        );
        check(SINGLE, PartitionDetail::PerPartition, &expected);
    }

    #[test]
    fn table_on_two_groups_rotates_primaries() {
        let expected = format!(
            "{PEOPLE_HEAD}FragmentCount: 8\n{PEOPLE_ATTRIBUTES}\
-- Per partition info --
Partition  Primary  Backups  Nodegroup
0          1        2        0
1          3        4        1
2          2        1        0
3          4        3        1
4          1        2        0
5          3        4        1
6          2        1        0
7          4        3        1
"
        );
        check(FOUR_NODES, PartitionDetail::PerPartition, &expected);
    }

    #[test]
    fn partition_map_alone() {
        let config = config(FOUR_NODES);
        let text = describe_partition_map(&config, &PartitionMap::new(&config));
        let expected = "\
-- Partition map --
NoOfReplicas: 2
Node groups: 2
FragmentCount: 8
-- Per partition info --
Partition  Primary  Backups  Nodegroup
0          1        2        0
1          3        4        1
2          2        1        0
3          4        3        1
4          1        2        0
5          3        4        1
6          2        1        0
7          4        3        1
";
        assert_eq!(text, expected, "got:\n{text}");
    }

    #[test]
    fn arguments() {
        let parse = |args: &[&str]| Args::try_parse_from([&["ndb_desc"], args].concat());
        let args = parse(&["-f", "c.ini", "-p", "t1", "t2"]).expect("table arguments");
        assert!(args.extra_partition_info);
        assert_eq!(args.tables, ["t1", "t2"]);
        let args = parse(&["--config-file", "c.ini", "--partitions-only"]).expect("no table");
        assert!(args.partitions_only);
        assert!(parse(&["-f", "c.ini"]).is_err(), "a table is required");
        assert!(
            parse(&["-f", "c.ini", "--partitions-only", "t1"]).is_err(),
            "--partitions-only takes no table"
        );
    }
}
