//! An API node that connected while only data node 2 of two was up links to data node 1 once it
//! starts, and its dictionary sends schema requests to the master (node 1) rather than failing
//! for good with 702 at node 2: the start-up race where the API node reached node 2 before node 1
//! listened and could not create a table until the process exited.

use std::thread;
use std::time::Duration;

use rndb_api::{ColumnDef, ColumnType, ConnectOptions, ExecType, NodeId, TableDef, Value};
use rndb_tests::ops::{insert_committed, read_committed};
use rndb_tests::{wait_until, ClusterSpec, TestCluster, API_NODE_ID_FIRST};

/// The API slot the test connects with, so that data node 2's log names it.
const API_NODE: NodeId = NodeId(API_NODE_ID_FIRST);
/// The DICT master: the lowest data node id.
const MASTER: NodeId = NodeId(1);
const OTHER: NodeId = NodeId(2);
/// How long the API node may wait for the cluster to start, and the test for each step.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// True once data node `id` has logged that it admitted the API node (listener.rs: "node
/// connected" with the peer's id).
fn admitted_api_node(cluster: &TestCluster, id: NodeId) -> bool {
    cluster
        .log(id)
        .lines()
        .any(|line| line.contains("node connected") && line.contains(&format!("node={API_NODE}")))
}

/// A key of `table` whose primary replica is data node `node`.
fn key_on(api: &rndb_api::Cluster, table: &rndb_api::Table, node: NodeId) -> u32 {
    (0..1000)
        .find(|&id| {
            let replicas = api
                .replicas_of(table, &[Value::UInt32(id)])
                .expect("replicas of a key");
            replicas.first() == Some(&node)
        })
        .unwrap_or_else(|| panic!("no key of the first 1000 has its primary on node {node}"))
}

#[test]
fn an_api_node_that_connected_before_the_master_started_uses_it_once_it_does() {
    let spec = ClusterSpec::new().data_nodes(2).replicas(2).api_slots(1);
    let mut cluster = TestCluster::start_without(spec, &[MASTER]).expect("start data node 2 alone");
    let config_path = cluster.config_path().to_path_buf();
    // `connect` returns once the data nodes it reached say the cluster has started, which node
    // 2 says once node 1 has joined it: so it runs on a thread while node 1 is started.
    let connecting = thread::spawn(move || {
        rndb_api::Cluster::connect(
            &config_path,
            ConnectOptions {
                node_id: Some(API_NODE),
                connect_timeout: STEP_TIMEOUT,
                ..ConnectOptions::default()
            },
        )
    });
    // The API node tries the data nodes in config order: once node 2 has admitted it, its
    // attempt at node 1 has failed (nothing listened there), which is the race's losing order.
    wait_until("data node 2 to admit the API node", STEP_TIMEOUT, || {
        Ok(admitted_api_node(&cluster, OTHER).then_some(()))
    })
    .expect("the API node connects to data node 2");
    assert!(
        !admitted_api_node(&cluster, MASTER),
        "data node 1 is not running yet"
    );
    cluster.start_node(MASTER).expect("start data node 1");
    let api = connecting
        .join()
        .expect("the connecting thread does not panic")
        .expect("the API node connects once the cluster has started");

    // The dictionary's request reaches the master: at once if the background connect has
    // linked node 1 already, else after node 2's 702 and a bounded wait for that link.
    let def = TableDef::new(
        "late_master",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("balance", ColumnType::Int64),
        ],
    );
    let table = api
        .create_table(&def)
        .expect("create a table: the request goes to the master, node 1");
    assert!(
        admitted_api_node(&cluster, MASTER),
        "the API node linked to data node 1 after it started"
    );

    // Both data nodes coordinate transactions of this API node: node 1 for a key whose primary
    // replica it holds, over the link made in the background.
    for node in [MASTER, OTHER] {
        let id = key_on(&api, &table, node);
        let mut transaction = api.start_transaction().expect("start a transaction");
        transaction
            .insert(&table, &[Value::UInt32(id), Value::Int64(i64::from(id))])
            .expect("define an insert");
        assert_eq!(
            transaction.connected_node_id(),
            Some(node),
            "the transaction on key {id} is coordinated by its primary replica's node"
        );
        transaction
            .execute(ExecType::Commit)
            .unwrap_or_else(|e| panic!("insert key {id} through node {node}: {e}"));
        let row = read_committed(&api, &table, &[Value::UInt32(id)])
            .unwrap_or_else(|e| panic!("read key {id} back: {e}"));
        assert_eq!(row, vec![Value::UInt32(id), Value::Int64(i64::from(id))]);
    }
    insert_committed(&api, &table, &[vec![Value::UInt32(5000), Value::Int64(1)]])
        .expect("a later insert");
    api.drop_table("late_master")
        .expect("drop the table: the request goes to the master");
}
