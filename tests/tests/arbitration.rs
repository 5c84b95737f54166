//! Proves NDB's arbitration with real processes: in a two-data-node cluster whose config names
//! an arbitrator (an API slot with ArbitrationRank=1), the survivor of a SIGKILLed data node
//! keeps exactly half the data nodes, asks the arbitrator, and goes on serving every row once
//! it says so; with the arbitrator gone the survivor cannot know it is not one side of a split,
//! and stops (2305) instead of serving alone; and with `Arbitration=Disabled` it goes on without
//! asking anyone. On two hosts (network namespaces) whose link is cut both ways, each data
//! node takes the other for failed and asks the arbitrator: exactly one side goes on, the other
//! stops (2305), every write acknowledged meanwhile is on the side that went on, and once the
//! link heals the loser rejoins by node restart with replicas equal to the winner's. The
//! hosts need root: that test is `#[ignore]`d, and `scripts/test` runs it as root, as CI does.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rndb_api::{ColumnDef, ColumnType, ConnectOptions, ExecType, NodeId, TableDef, Value};
use rndb_tests::ops::{insert_committed, insert_when_served, read_committed, recreate_table};
use rndb_tests::{wait_until, ClusterSpec, Hosts, TestCluster};

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

/// Inserts row `id` once the data nodes serve again (286 while arbitration holds commits).
fn insert_once_served(api: &rndb_api::Cluster, table: &rndb_api::Table, id: u32) -> Result<()> {
    insert_when_served(api, table, row(id), STEP_TIMEOUT)
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
                .contains(&format!("Started arbitrator node {ARBITRATOR} "))
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
    insert_once_served(&api, &table, ROWS).expect("the survivor commits");
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
                .contains(&format!("the arbitrator, node {ARBITRATOR}, is gone"))
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

/// Adds (or, with `add` false, removes) a route on `from` that drops every packet to `to`.
fn blackhole(hosts: &Hosts, from: u8, to: u8, add: bool) -> Result<()> {
    let verb = if add { "add" } else { "del" };
    let target = format!("{}/32", hosts.address(to));
    let status = Command::new("ip")
        .args([
            "-n",
            &hosts.namespace(from),
            "route",
            verb,
            "blackhole",
            &target,
        ])
        .status()
        .context("run ip route")?;
    if !status.success() {
        bail!(
            "ip -n {} route {verb} blackhole {target}: {status}",
            hosts.namespace(from)
        );
    }
    Ok(())
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test runs it as root)"]
fn a_split_between_two_hosts_leaves_one_side_serving_and_the_loser_rejoins() {
    // Declared first, dropped last: the data nodes are stopped before their hosts go.
    let hosts = Hosts::new(2).expect("make two hosts (needs root and iproute2)");
    let mut cluster = TestCluster::start(spec("Default").on_hosts(&hosts).extra(&format!(
        "[api]\nNodeId={}\nHostName={}\nArbitrationRank=1",
        NodeId(61),
        hosts.bridge_address()
    )))
    .expect("start a data node on each host");
    let _arbitrator = cluster
        .connect_with(ConnectOptions {
            node_id: Some(NodeId(61)),
            ..ConnectOptions::default()
        })
        .expect("connect the arbitrator's API node");
    wait_until(
        "the president to choose the arbitrator",
        STEP_TIMEOUT,
        || {
            Ok(cluster
                .log(SURVIVOR)
                .contains("Started arbitrator node 61 ")
                .then_some(()))
        },
    )
    .expect("the arbitrator is chosen");
    let api = Arc::new(cluster.connect().expect("connect a client"));
    let table = recreate_table(&api, &table_def()).expect("create the table");
    let rows: Vec<Vec<Value>> = (0..ROWS).map(row).collect();
    insert_committed(&api, &table, &rows).expect("insert the rows");

    // A writer inserts one row a transaction through the split and notes what was
    // acknowledged; temporary errors (286 while a side waits for arbitration, 4010) are
    // retried with the next id.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (api, table, stop) = (Arc::clone(&api), table.clone(), Arc::clone(&stop));
        std::thread::spawn(move || -> Result<Vec<u32>> {
            let mut acknowledged = Vec::new();
            let mut id = 1000;
            while !stop.load(Ordering::Relaxed) {
                match insert_committed(&api, &table, &[row(id)]) {
                    Ok(()) => acknowledged.push(id),
                    Err(e) if e.is_temporary() => std::thread::sleep(Duration::from_millis(5)),
                    Err(e) => return Err(e).context(format!("insert row {id}")),
                }
                id += 1;
            }
            Ok(acknowledged)
        })
    };

    blackhole(&hosts, 1, 2, true).expect("cut host 1 from host 2");
    blackhole(&hosts, 2, 1, true).expect("cut host 2 from host 1");
    wait_until("one side to stop", STEP_TIMEOUT, || {
        let running: Vec<bool> = [SURVIVOR, VICTIM]
            .iter()
            .map(|&id| cluster.is_running(id))
            .collect();
        Ok((running.iter().filter(|&&r| r).count() == 1).then_some(()))
    })
    .expect("exactly one data node stops");
    let (winner, loser) = if cluster.is_running(SURVIVOR) {
        (SURVIVOR, VICTIM)
    } else {
        (VICTIM, SURVIVOR)
    };
    let log = cluster.log(loser);
    assert!(
        log.contains("error 2305") && log.contains("the arbitrator, node 61"),
        "the loser says why it stopped:\n{log}"
    );
    assert!(
        cluster.log(winner).contains("chose this side: it goes on"),
        "the winner went on by the arbitrator"
    );
    // The winner serves writes again.
    insert_once_served(&api, &table, ROWS).expect("the winner commits");
    stop.store(true, Ordering::Relaxed);
    let acknowledged = writer
        .join()
        .expect("the writer thread")
        .expect("the writer");

    // The link heals; the loser rejoins and copies every row from the winner.
    blackhole(&hosts, 1, 2, false).expect("heal host 1 to host 2");
    blackhole(&hosts, 2, 1, false).expect("heal host 2 to host 1");
    let status = cluster.stop_node(loser).expect("reap the loser");
    assert!(!status.success(), "the loser exits with an error: {status}");
    cluster.restart_node(loser).expect("start the loser again");
    wait_until("the loser to serve again", STEP_TIMEOUT, || {
        Ok(cluster
            .log(winner)
            .contains(&format!("data node {loser} started (node restart)"))
            .then_some(()))
    })
    .expect("the loser rejoins");
    let ids: Vec<u32> = (0..=ROWS).chain(acknowledged.iter().copied()).collect();
    for id in ids {
        let key = [Value::UInt32(id)];
        for replica in 0..2 {
            let found = wait_until("a replica's row", STEP_TIMEOUT, || {
                let mut transaction = api.start_transaction()?;
                let op = transaction.read_from_replica(&table, &key, replica)?;
                match transaction.execute(ExecType::Commit) {
                    Ok(()) => Ok(transaction.row(op).map(<[Value]>::to_vec)),
                    Err(e) if e.is_temporary() => Ok(None),
                    Err(e) => Err(e.into()),
                }
            })
            .unwrap_or_else(|e| panic!("row {id} on replica {replica}: {e:#}"));
            assert_eq!(found, row(id), "row {id} on replica {replica}");
        }
    }
}
