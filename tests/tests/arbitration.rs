//! Proves NDB's arbitration with real processes: in a two-data-node cluster whose config names
//! an arbitrator (an API slot with ArbitrationRank=1), the survivor of a SIGKILLed data node
//! keeps exactly half the data nodes, asks the arbitrator, and goes on serving every row once
//! it says so; with the arbitrator gone the survivor cannot know it is not one side of a split,
//! and stops (2305) instead of serving alone; and with `Arbitration=Disabled` it goes on without
//! asking anyone.

use std::time::Duration;

use rndb_api::{ColumnDef, ColumnType, ConnectOptions, NodeId, TableDef, Value};
use rndb_tests::ops::{insert_committed, read_committed, recreate_table};
use rndb_tests::{wait_until, ClusterSpec, TestCluster};

/// The API slot that may arbitrate.
const ARBITRATOR: NodeId = NodeId(60);
const SURVIVOR: NodeId = NodeId(1);
const VICTIM: NodeId = NodeId(2);
/// How long each step may take: a heartbeat interval of settling, then the arbitrator's answer
/// (read by its heartbeat thread within HeartbeatIntervalDbApi).
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
const ROWS: u32 = 50;

/// Two data nodes in one node group, short heartbeats, and an arbitrator slot.
fn spec(arbitration: &str) -> ClusterSpec {
    ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .api_slots(2)
        .data_node_param("HeartbeatIntervalDbDb", "200")
        .data_node_param("HeartbeatIntervalDbApi", "200")
        .data_node_param("ArbitrationTimeout", "3000")
        .data_node_param("Arbitration", arbitration)
        .extra(&format!(
            "[api]\nNodeId={ARBITRATOR}\nHostName=127.0.0.1\nArbitrationRank=1"
        ))
}

fn table_def() -> TableDef {
    TableDef::new(
        "arbitrated",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("value", ColumnType::Int64),
        ],
    )
}

fn row(id: u32) -> Vec<Value> {
    vec![Value::UInt32(id), Value::Int64(i64::from(id) * 7)]
}

/// Connects the arbitrator's API node and waits until the president names it.
fn connect_arbitrator(cluster: &TestCluster) -> rndb_api::Cluster {
    let arbitrator = cluster
        .connect_with(ConnectOptions {
            node_id: Some(ARBITRATOR),
            ..ConnectOptions::default()
        })
        .expect("connect the arbitrator's API node");
    wait_until(
        "the president to choose the arbitrator",
        STEP_TIMEOUT,
        || {
            Ok(cluster
                .log(SURVIVOR)
                .contains(&format!("API node {ARBITRATOR} is the arbitrator"))
                .then_some(()))
        },
    )
    .expect("the arbitrator is chosen");
    arbitrator
}

#[test]
fn the_survivor_of_half_the_data_nodes_goes_on_when_the_arbitrator_says_so() {
    let mut cluster = TestCluster::start(spec("Default")).expect("start two data nodes");
    let _arbitrator = connect_arbitrator(&cluster);
    let api = cluster.connect().expect("connect a client");
    let table = recreate_table(&api, &table_def()).expect("create the table");
    let rows: Vec<Vec<Value>> = (0..ROWS).map(row).collect();
    insert_committed(&api, &table, &rows).expect("insert the rows");
    cluster.kill_node(VICTIM).expect("kill data node 2");
    wait_until(
        "the arbitrator to choose the survivor",
        STEP_TIMEOUT,
        || {
            let log = cluster.log(SURVIVOR);
            if log.contains("error 2305") {
                anyhow::bail!("the survivor stopped:\n{log}");
            }
            Ok(log.contains("chose this side: it goes on").then_some(()))
        },
    )
    .expect("the survivor goes on");
    assert!(cluster.is_running(SURVIVOR), "the survivor runs");
    // Every row is served, and a write commits, once commits are no longer held.
    wait_until(
        "a write on the survivor",
        STEP_TIMEOUT,
        || match insert_committed(&api, &table, &[row(ROWS)]) {
            Ok(()) => Ok(Some(())),
            Err(e) if e.is_temporary() => Ok(None),
            Err(e) => Err(e.into()),
        },
    )
    .expect("the survivor commits");
    for id in 0..=ROWS {
        let found = read_committed(&api, &table, &[Value::UInt32(id)]).expect("read a row");
        assert_eq!(found, row(id), "row {id} on the survivor");
    }
}

#[test]
fn the_survivor_of_half_the_data_nodes_stops_without_an_arbitrator() {
    let mut cluster = TestCluster::start(spec("Default")).expect("start two data nodes");
    let arbitrator = connect_arbitrator(&cluster);
    drop(arbitrator);
    wait_until(
        "the president to see the arbitrator go",
        STEP_TIMEOUT,
        || {
            Ok(cluster
                .log(SURVIVOR)
                .contains(&format!("the arbitrator, API node {ARBITRATOR}, is gone"))
                .then_some(()))
        },
    )
    .expect("the arbitrator is gone");
    cluster.kill_node(VICTIM).expect("kill data node 2");
    wait_until("the survivor to stop", STEP_TIMEOUT, || {
        Ok((!cluster.is_running(SURVIVOR)).then_some(()))
    })
    .expect("the survivor stops");
    let log = cluster.log(SURVIVOR);
    assert!(
        log.contains("error 2305") && log.contains("no arbitrator was running"),
        "the survivor says why it stopped:\n{log}"
    );
}

#[test]
fn with_arbitration_disabled_the_survivor_goes_on_without_asking() {
    let mut cluster = TestCluster::start(spec("Disabled")).expect("start two data nodes");
    let api = cluster.connect().expect("connect a client");
    let table = recreate_table(&api, &table_def()).expect("create the table");
    insert_committed(&api, &table, &[row(1)]).expect("insert a row");
    cluster.kill_node(VICTIM).expect("kill data node 2");
    wait_until(
        "a write on the survivor",
        STEP_TIMEOUT,
        || match insert_committed(&api, &table, &[row(2)]) {
            Ok(()) => Ok(Some(())),
            Err(e) if e.is_temporary() => Ok(None),
            Err(e) => Err(e.into()),
        },
    )
    .expect("the survivor commits");
    let log = cluster.log(SURVIVOR);
    assert!(
        log.contains("arbitration is off"),
        "the survivor says arbitration is off:\n{log}"
    );
    assert!(cluster.is_running(SURVIVOR));
}
