//! Proves that ndb_mgmd arbitrates, as NDB's does by default (ArbitrationRank=1): in a
//! two-data-node cluster started from ndb_mgmd, with no API node that may arbitrate, the
//! president makes ndb_mgmd the arbitrator; the survivor of a SIGKILLed data node keeps
//! exactly half the data nodes, asks ndb_mgmd, goes on serving every row, and the cluster log
//! says who won; once ndb_mgmd is gone the next failure stops the survivor (2305) instead of
//! leaving it to serve alone.

use std::fs;
use std::time::Duration;

use rndb_api::{Cluster, ColumnDef, ColumnType, ConnectOptions, TableDef, Value};
use rndb_tests::ops::{insert_committed, insert_when_served, read_committed, recreate_table};
use rndb_tests::processes::{run, text, write_mgm_config, Processes};
use rndb_tests::wait_until;

/// How long a start may take (debug builds on a shared 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long each step after the start may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
const ROWS: u32 = 40;

fn row(id: u32) -> Vec<Value> {
    vec![Value::UInt32(id), Value::Int64(i64::from(id) * 3)]
}

fn wait_started(cs: &str, nodes: &str) {
    let timeout = START_TIMEOUT.as_secs().to_string();
    let out = run(
        "ndb_waiter",
        &["-c", cs, "--timeout", &timeout, "--wait-nodes", nodes],
    );
    assert!(
        out.status.success(),
        "ndb_waiter: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Waits until process `name`'s log contains `needle`; panics with the log otherwise.
fn wait_log(procs: &Processes, name: &str, needle: &str) {
    wait_until(&format!("{name} to log {needle:?}"), STEP_TIMEOUT, || {
        Ok(procs.log(name).contains(needle).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}; {name}'s log:\n{}", procs.log(name)));
}

#[test]
fn ndb_mgmd_arbitrates_a_node_failure_and_without_it_the_survivor_stops() {
    let mut procs = Processes::new();
    let defaults =
        "HeartbeatIntervalDbDb=200\nHeartbeatIntervalDbApi=200\nArbitrationTimeout=3000\n";
    let (config, port) = write_mgm_config(procs.dir.path(), defaults, 2);
    let cs = format!("127.0.0.1:{port}");
    procs.spawn(
        "ndb_mgmd",
        "ndb_mgmd",
        &["-f", &config.display().to_string()],
    );
    procs.spawn("ndbd-1", "ndbd", &["-c", &cs, "--ndb-nodeid", "1"]);
    procs.spawn("ndbd-2", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_started(&cs, "1,2");
    // The president (node 1) makes the management node (49) the arbitrator.
    wait_log(&procs, "ndbd-1", "Started arbitrator node 49 [ticket=");
    let cluster_log_path = procs.path("mgm/ndb_49_cluster.log");
    let cluster_log = || fs::read_to_string(&cluster_log_path).unwrap_or_default();
    assert!(
        cluster_log().contains("-- Node 1: Started arbitrator node 49 [ticket="),
        "the cluster log names the arbitrator:\n{}",
        cluster_log()
    );

    let api = Cluster::connect_mgm(&cs, ConnectOptions::default()).expect("connect");
    let def = TableDef::new(
        "arbitrated",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("value", ColumnType::Int64),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");
    let rows: Vec<Vec<Value>> = (0..ROWS).map(row).collect();
    insert_committed(&api, &table, &rows).expect("insert the rows");

    // Node 2 killed: node 1 holds half the data nodes and asks ndb_mgmd, which says it goes on.
    procs.child("ndbd-2").kill().expect("kill -9 node 2");
    procs.child("ndbd-2").wait().expect("reap node 2");
    wait_log(
        &procs,
        "ndbd-1",
        "the arbitrator, node 49, chose this side: it goes on",
    );
    assert!(
        !procs.log("ndbd-1").contains("error 2305"),
        "{}",
        procs.log("ndbd-1")
    );
    insert_when_served(&api, &table, row(ROWS), STEP_TIMEOUT).expect("the survivor commits");
    for id in 0..=ROWS {
        let found = read_committed(&api, &table, &[Value::UInt32(id)]).expect("read a row");
        assert_eq!(found, row(id), "row {id} on the survivor");
    }
    wait_until("the cluster log to record the win", STEP_TIMEOUT, || {
        Ok(cluster_log()
            .contains("-- Node 1: Arbitration won - positive reply from node 49")
            .then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}:\n{}", cluster_log()));

    // Node 2 rejoins; then ndb_mgmd goes, and the president sees no arbitrator left.
    drop(api);
    procs.spawn("ndbd-2b", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_started(&cs, "1,2");
    procs.child("ndb_mgmd").kill().expect("kill -9 ndb_mgmd");
    procs.child("ndb_mgmd").wait().expect("reap ndb_mgmd");
    wait_log(&procs, "ndbd-1", "the arbitrator, node 49, is gone");
    procs.child("ndbd-2b").kill().expect("kill -9 node 2 again");
    procs.child("ndbd-2b").wait().expect("reap node 2");
    procs.wait_exit("ndbd-1", STEP_TIMEOUT);
    let log = procs.log("ndbd-1");
    assert!(
        log.contains("error 2305") && log.contains("no arbitrator was running"),
        "the survivor says why it stopped:\n{log}"
    );
}
