//! Proves that `ndb_desc` prints the partition map from a config alone (every data node the
//! primary of some partition, each partition's replicas inside one node group), describes a
//! table of a running cluster with its columns and partitions, exits 1 with NDB's error 709 for
//! an unknown table, and explains a refused connection.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use rndb_api::{ColumnDef, ColumnType, TableDef};
use rndb_config::{parse_file, ClusterConfig, NodeId};
use rndb_tests::ops::recreate_table;
use rndb_tests::{binary_path, ClusterSpec, TestCluster};

/// Runs `ndb_desc --config-file <config> <args>`.
fn ndb_desc(config: &Path, args: &[&str]) -> Output {
    let exe = binary_path("ndb_desc").expect("find ndb_desc");
    Command::new(exe)
        .arg("--config-file")
        .arg(config)
        .args(args)
        .output()
        .expect("run ndb_desc")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// One row of the `-- Per partition info --` block.
#[derive(Debug)]
struct PartitionRow {
    partition: u32,
    /// Primary first, then the backups.
    replicas: Vec<NodeId>,
    node_group: u32,
}

/// The rows under the `Partition  Primary  Backups  Nodegroup` header.
fn partition_rows(text: &str) -> Vec<PartitionRow> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("Partition "));
    let header: Vec<&str> = lines
        .next()
        .expect("a partition header")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["Partition", "Primary", "Backups", "Nodegroup"]);
    lines
        .take_while(|l| !l.starts_with("--"))
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cells.len(), 4, "partition row {line:?}");
            let node = |id: &str| NodeId(id.parse().expect("a node id"));
            let mut replicas = vec![node(cells[1])];
            if cells[2] != "-" {
                replicas.extend(cells[2].split(',').map(node));
            }
            PartitionRow {
                partition: cells[0].parse().expect("a partition id"),
                replicas,
                node_group: cells[3].parse().expect("a node group"),
            }
        })
        .collect()
}

/// The value of the first `FragmentCount: N` line.
fn fragment_count(text: &str) -> u32 {
    text.lines()
        .find_map(|l| l.strip_prefix("FragmentCount: "))
        .expect("a FragmentCount line")
        .parse()
        .expect("a number")
}

/// Checks the rows against the config: partitions numbered 0.., NoOfReplicas distinct replicas
/// per partition, all in the printed node group, and every data node the primary of one.
fn check_partitions(text: &str, config: &ClusterConfig) {
    let rows = partition_rows(text);
    assert_eq!(rows.len() as u32, fragment_count(text), "{text}");
    let mut primaries = BTreeSet::new();
    for (index, row) in rows.iter().enumerate() {
        assert_eq!(row.partition, index as u32, "{text}");
        let distinct: BTreeSet<NodeId> = row.replicas.iter().copied().collect();
        assert_eq!(distinct.len(), row.replicas.len(), "{row:?}");
        assert_eq!(row.replicas.len() as u32, config.no_of_replicas, "{row:?}");
        for node in &row.replicas {
            let data_node = config.data_node(*node).expect("a data node of the config");
            assert_eq!(data_node.node_group, row.node_group, "{row:?}");
        }
        primaries.insert(row.replicas[0]);
    }
    let data_nodes: BTreeSet<NodeId> = config.data_nodes.iter().map(|n| n.node_id).collect();
    assert_eq!(
        primaries, data_nodes,
        "every data node is a primary:\n{text}"
    );
}

#[test]
fn partitions_only_reads_the_config_alone() {
    let dir = tempfile::tempdir().expect("create a directory");
    let written = ClusterSpec::new()
        .data_nodes(4)
        .replicas(2)
        .write(dir.path())
        .expect("write the config");
    let config = parse_file(&written.path).expect("parse the written config");
    assert_eq!(config.node_groups.len(), 2);

    // No data node runs: the map comes from the config alone.
    let output = ndb_desc(&written.path, &["--partitions-only"]);
    let text = stdout(&output);
    assert!(output.status.success(), "{output:?}");
    assert!(text.contains("NoOfReplicas: 2\n"), "{text}");
    check_partitions(&text, &config);
}

#[test]
fn describes_a_table_of_a_running_cluster() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start a cluster");
    let api = cluster.connect().expect("connect");
    let def = TableDef::new(
        "desc_people",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("name", ColumnType::Varchar(32)),
            ColumnDef::nullable("note", ColumnType::Int64),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");

    let output = ndb_desc(cluster.config_path(), &["-p", "desc_people"]);
    let text = stdout(&output);
    assert!(output.status.success(), "{output:?}");
    assert!(text.starts_with("-- desc_people --\n"), "{text}");
    assert!(
        text.contains(&format!("TableId: {}\n", table.id())),
        "{text}"
    );
    assert!(
        text.contains(&format!("Version: {}\n", table.version())),
        "{text}"
    );
    for line in [
        "id UInt32 PRIMARY KEY DISTRIBUTION KEY",
        "name Varchar(32) NOT NULL",
        "note Int64 NULL",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in:\n{text}"
        );
    }
    check_partitions(&text, cluster.config());

    // An unknown table fails with 709 and the exit status 1; the known one is still described.
    let output = ndb_desc(
        cluster.config_path(),
        &["desc_people", "desc_no_such_table"],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stdout(&output).starts_with("-- desc_people --\n"),
        "{output:?}"
    );
    let message = stderr(&output);
    assert!(message.contains("desc_no_such_table"), "{message}");
    assert!(message.contains("709"), "{message}");
}

#[test]
fn refused_connection_names_the_node() {
    let dir = tempfile::tempdir().expect("create a directory");
    let written = ClusterSpec::new()
        .write(dir.path())
        .expect("write the config");

    // The config names a data node, but none was started.
    let output = ndb_desc(&written.path, &["t1"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let message = stderr(&output);
    assert!(message.contains("connect to node 1"), "{message}");
    assert!(message.contains("is data node 1 running?"), "{message}");
}
