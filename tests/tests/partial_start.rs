//! Proves StartPartialTimeout: a cluster whose data node does not come starts without it once
//! the timeout has passed and every node group has a live node, with and without files (API
//! nodes are served every row; the node that comes later joins by node restart and serves the
//! rows written without it); that a cluster missing a whole node group does not start, and its
//! log names the group; and that a system restart without nodes holding a node of every node
//! group waits for them (they may alone hold newer global checkpoints), unless `--nowait-nodes`
//! names them: then it starts without them, with every row, and they join by node restart.

use std::time::Duration;

use rndb_api::{ColumnDef, ColumnType, ConnectOptions, LockMode, TableDef, Value};
use rndb_config::NodeId;
use rndb_tests::ops::{insert_committed, read_when_served, read_with, recreate_table};
use rndb_tests::{wait_until, ClusterSpec, TestCluster, START_TIMEOUT};

/// StartPartialTimeout of these tests.
const PARTIAL_MS: &str = "1000";
/// Rows written and read back through the partially started cluster.
const ROWS: u32 = 200;

fn spec() -> ClusterSpec {
    ClusterSpec::new()
        .data_nodes(4)
        .replicas(2)
        .api_slots(2)
        .data_node_param("StartPartialTimeout", PARTIAL_MS)
}

/// Waits until data node `node`'s log holds `needle`; panics with the log after `timeout`.
fn wait_for_log(cluster: &TestCluster, node: NodeId, needle: &str, timeout: Duration) {
    wait_until(&format!("node {node} to log {needle:?}"), timeout, || {
        Ok(cluster.log(node).contains(needle).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n--- node {node} ---\n{}", cluster.log(node)));
}

fn table_def() -> TableDef {
    TableDef::new(
        "partial",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::UInt32),
        ],
    )
}

/// Starts four data nodes but node 4, checks that the other three serve every row once
/// StartPartialTimeout has passed, then starts node 4 and checks that it joins by node restart
/// with every row of its node group.
fn starts_without_node_4(spec: ClusterSpec) {
    let missing = NodeId(4);
    let mut cluster = TestCluster::start_without(spec, &[missing]).expect("start nodes 1-3");
    let api = cluster
        .connect_with(ConnectOptions {
            connect_timeout: START_TIMEOUT,
            ..ConnectOptions::default()
        })
        .expect("connect once the partial start is done");
    let table = recreate_table(&api, &table_def()).expect("create the table");
    let rows: Vec<Vec<Value>> = (0..ROWS)
        .map(|id| vec![Value::UInt32(id), Value::UInt32(id * 2)])
        .collect();
    insert_committed(&api, &table, &rows).expect("insert every row");
    for id in 0..ROWS {
        let row = read_with(&api, &table, &[Value::UInt32(id)], LockMode::Read)
            .unwrap_or_else(|e| panic!("read row {id}: {e}"));
        assert_eq!(row[1], Value::UInt32(id * 2), "row {id}");
    }
    let log = cluster.log(NodeId(1));
    assert!(
        log.contains("without"),
        "node 1 says it started without node 4:\n{log}"
    );
    // Node 4, started late, joins the running cluster by node restart.
    cluster.start_node(missing).expect("start node 4");
    wait_for_log(
        &cluster,
        missing,
        "node restart complete",
        Duration::from_secs(60),
    );
    // With node 3 gone, node 4 alone serves its node group's rows.
    cluster.kill_node(NodeId(3)).expect("kill node 3");
    let fresh = cluster
        .connect_with(ConnectOptions {
            connect_timeout: START_TIMEOUT,
            ..ConnectOptions::default()
        })
        .expect("connect an API node that uses node 4");
    for id in 0..ROWS {
        let row = read_when_served(
            &fresh,
            &table,
            &[Value::UInt32(id)],
            Duration::from_secs(20),
        )
        .unwrap_or_else(|e| panic!("read row {id} after node 3's failure: {e:#}"));
        assert_eq!(
            row[1],
            Value::UInt32(id * 2),
            "row {id}, with node 4 serving"
        );
    }
}

#[test]
fn a_missing_data_node_is_left_out_after_start_partial_timeout() {
    starts_without_node_4(spec());
}

#[test]
fn a_diskless_cluster_starts_without_a_missing_data_node_too() {
    starts_without_node_4(spec().data_node_param("Diskless", "1"));
}

#[test]
fn a_cluster_missing_a_whole_node_group_does_not_start_and_names_it() {
    // Node groups form in file order: {1, 2} and {3, 4}.
    let cluster =
        TestCluster::start_without(spec(), &[NodeId(3), NodeId(4)]).expect("start nodes 1-2");
    wait_for_log(
        &cluster,
        NodeId(1),
        "node group 1 has no live data node",
        Duration::from_secs(30),
    );
    let refused = cluster.connect_with(ConnectOptions {
        connect_timeout: Duration::from_secs(1),
        ..ConnectOptions::default()
    });
    assert!(
        refused.is_err(),
        "an API node is served by a cluster missing a node group"
    );
}

#[test]
fn a_restart_without_a_node_of_every_node_group_waits_for_it() {
    // One node group, {1, 2}: node 1 alone covers it.
    let spec = ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .api_slots(2)
        .data_node_param("StartPartialTimeout", PARTIAL_MS);
    let mut cluster = TestCluster::start(spec).expect("start both data nodes");
    let connect = |cluster: &TestCluster, timeout: Duration| {
        cluster.connect_with(ConnectOptions {
            connect_timeout: timeout,
            ..ConnectOptions::default()
        })
    };
    let api = connect(&cluster, START_TIMEOUT).expect("connect");
    let table = recreate_table(&api, &table_def()).expect("create the table");
    let rows: Vec<Vec<Value>> = (0..ROWS)
        .map(|id| vec![Value::UInt32(id), Value::UInt32(id * 3)])
        .collect();
    insert_committed(&api, &table, &rows).expect("insert every row");
    cluster
        .wait_for_saved_checkpoints(NodeId(1), 2)
        .expect("the rows' global checkpoint is saved");
    drop(api);
    cluster.kill_all_nodes().expect("kill both data nodes");
    cluster.restart_node(NodeId(2)).expect("start node 2 alone");
    wait_for_log(
        &cluster,
        NodeId(2),
        "cannot start without data nodes [NodeId(1)]",
        Duration::from_secs(30),
    );
    assert!(
        connect(&cluster, Duration::from_secs(1)).is_err(),
        "node 2 served without node 1 past StartPartialTimeout"
    );
    // The operator vouches for node 1 (NDB's --nowait-nodes): node 2 starts alone at once.
    cluster.kill_node(NodeId(2)).expect("kill node 2");
    cluster.set_ndbd_args(&["--nowait-nodes=1"]);
    cluster
        .restart_node(NodeId(2))
        .expect("start node 2 alone again");
    let check_rows = |api: &rndb_api::Cluster, what: &str| {
        let table = api.get_table("partial").expect("the table survives");
        for id in 0..ROWS {
            let row = read_when_served(api, &table, &[Value::UInt32(id)], Duration::from_secs(20))
                .unwrap_or_else(|e| panic!("{what}: read row {id}: {e:#}"));
            assert_eq!(row[1], Value::UInt32(id * 3), "{what}: row {id}");
        }
    };
    let api = connect(&cluster, START_TIMEOUT).expect("connect to node 2 alone");
    check_rows(&api, "node 2 started with --nowait-nodes=1");
    // Node 1 then joins by node restart.
    cluster.set_ndbd_args(&[]);
    cluster.restart_node(NodeId(1)).expect("start node 1");
    wait_for_log(
        &cluster,
        NodeId(1),
        "node restart complete",
        Duration::from_secs(60),
    );
    cluster.kill_node(NodeId(2)).expect("kill node 2");
    let api = connect(&cluster, START_TIMEOUT).expect("connect to node 1 alone");
    check_rows(&api, "node 1 after its node restart, node 2 killed");
}
