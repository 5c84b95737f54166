//! Proves that a SIGTERM to every data node at once, of one node group or of two, loses no
//! commit acknowledged before it, though commits are acknowledged in memory and global
//! checkpoints are 20 s apart: the nodes find that no member of a group serves on and stop
//! as ndb_mgm's SHUTDOWN does, each saving every commit it answered before any leaves, and a
//! system restart brings every acknowledged row back (`mgm_restart.rs` and the simulator for
//! SHUTDOWN itself). And that a
//! stopping node refuses new transactions with 280 and waits for a scan already running, then
//! stops once it ends, and that a scan left open and unread holds it only `STOP_DRAIN_MAX`;
//! and that a node stopping alone first tells its API nodes, which send their new
//! transactions and scans to another replica's TC, so that none is refused.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rndb_api::{Cluster, ColumnDef, ColumnType, ExecType, LockMode, ScanOptions, TableDef, Value};
use rndb_config::NodeId;
use rndb_tests::ops::recreate_table;
use rndb_tests::{assert_ndb_code, wait_until, ClusterSpec, TestCluster};

fn items_def() -> TableDef {
    TableDef::new(
        "items",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Int64),
        ],
    )
}

fn insert(api: &Cluster, table: &rndb_api::Table, id: u32) -> Result<(), rndb_api::Error> {
    let mut tx = api.start_transaction()?;
    tx.insert(table, &[Value::UInt32(id), Value::Int64(i64::from(id) * 3)])?;
    tx.execute(ExecType::Commit)
}

#[test]
fn stopping_every_node_gracefully_keeps_every_acknowledged_commit() {
    sigterm_to_every_node_keeps_every_acknowledged_commit(2);
}

/// Two node groups: before, a group whose nodes had saved left while a node of the other group
/// still waited for its save, which then never came (that node left without it, or stopped
/// with 2305), and its last commits were lost.
#[test]
fn stopping_every_node_of_two_node_groups_keeps_every_acknowledged_commit() {
    sigterm_to_every_node_keeps_every_acknowledged_commit(4);
}

/// `data_nodes` data nodes, two replicas each, under inserts; then a SIGTERM to each at once.
fn sigterm_to_every_node_keeps_every_acknowledged_commit(data_nodes: u16) {
    let spec = ClusterSpec::new()
        .data_nodes(data_nodes)
        .replicas(2)
        // No checkpoint of its own comes while the test runs: only the stop's saves them.
        .data_node_param("TimeBetweenGlobalCheckpoints", "20000");
    let mut cluster = TestCluster::start(spec).expect("start the cluster");
    let acknowledged = Mutex::new(BTreeSet::new());
    {
        let api = cluster.connect().expect("connect");
        let table = recreate_table(&api, &items_def()).expect("create table");
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let writer = scope.spawn(|| {
                let mut id = 0;
                // Writes on through the stop, until the nodes are gone.
                let mut failures = 0;
                while failures < 50 {
                    match insert(&api, &table, id) {
                        Ok(()) => {
                            acknowledged.lock().unwrap().insert(id);
                        }
                        Err(_) if stop.load(Ordering::Relaxed) => failures += 1,
                        Err(e) => panic!("insert {id} before the stop: {e}"),
                    }
                    id += 1;
                }
            });
            wait_until("300 inserts acknowledged", Duration::from_secs(30), || {
                Ok((acknowledged.lock().unwrap().len() >= 300).then_some(()))
            })
            .unwrap();
            stop.store(true, Ordering::Relaxed);
            for id in cluster.data_node_ids() {
                cluster.terminate_node(id).expect("SIGTERM");
            }
            for id in cluster.data_node_ids() {
                let status = cluster.stop_node(id).expect("stop");
                assert!(
                    status.success(),
                    "data node {id} stops by itself, gracefully: {status:?}\n{}",
                    cluster.log(id)
                );
                assert!(
                    cluster
                        .log(id)
                        .contains("every commit this node answered is durable"),
                    "data node {id} saved its last commits:\n{}",
                    cluster.log(id)
                );
            }
            writer.join().expect("the writer");
        });
    }
    cluster
        .restart_stopped_nodes()
        .expect("a system restart, without --initial");
    let api = cluster.connect().expect("connect after the restart");
    let table = api.get_table("items").expect("the table is back");
    let acknowledged = acknowledged.into_inner().unwrap();
    let mut missing = Vec::new();
    for &id in &acknowledged {
        let mut tx = api.start_transaction().unwrap();
        let op = tx
            .read(&table, &[Value::UInt32(id)], LockMode::CommittedRead)
            .unwrap();
        if tx.execute(ExecType::Commit).is_err() || tx.row(op).is_none() {
            missing.push(id);
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged inserts lost, e.g. {:?}",
        missing.len(),
        acknowledged.len(),
        &missing[..missing.len().min(10)]
    );
}

/// One data node with rows 0..20 in `items`.
fn one_node_with_rows() -> (TestCluster, Cluster, rndb_api::Table) {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &items_def()).expect("create table");
    for id in 0..20 {
        insert(&api, &table, id).expect("insert");
    }
    (cluster, api, table)
}

/// A scan that fetches one row per fragment at a time: it stays open while unread.
fn one_row_a_batch() -> ScanOptions {
    ScanOptions {
        batch_rows: Some(1),
        ..ScanOptions::default()
    }
}

#[test]
fn a_stopping_node_refuses_new_work_and_waits_for_a_running_scan() {
    let (mut cluster, api, table) = one_node_with_rows();
    let node = NodeId(1);
    let mut scanning = api.start_transaction().unwrap();
    let mut scan = scanning.scan_table(&table, &one_row_a_batch()).unwrap();
    assert!(scan.next().is_some(), "the scan's first row");

    cluster.terminate_node(node).expect("SIGTERM");
    // Once its API node knows (it has no other node to go to), new transactions are refused
    // while the scan runs.
    let mut id = 100;
    wait_until("a new transaction refused", Duration::from_secs(10), || {
        id += 1;
        Ok(match insert(&api, &table, id) {
            Ok(()) => None,
            Err(e) if e.code() == Some(280) => Some(()),
            Err(e) => return Err(e.into()),
        })
    })
    .unwrap();
    assert_ndb_code(
        insert(&api, &table, id + 1),
        280,
        "an insert at a stopping node",
    );
    assert!(cluster.is_running(node), "the node waits for the scan");
    // The scan reads on to its end; then the node stops by itself.
    let rest = scan
        .collect::<Result<Vec<_>, _>>()
        .expect("the rest of the scan");
    // And rows inserted before the node refused them, which the scan may see.
    assert!(rest.len() >= 19, "{} rows", rest.len());
    drop(scanning);
    let status = cluster.stop_node(node).expect("stop");
    assert!(status.success(), "{status:?}\n{}", cluster.log(node));
}

#[test]
fn a_scan_left_open_holds_the_stop_only_a_few_seconds() {
    let (mut cluster, api, table) = one_node_with_rows();
    let node = NodeId(1);
    let mut scanning = api.start_transaction().unwrap();
    let mut scan = scanning.scan_table(&table, &one_row_a_batch()).unwrap();
    assert!(scan.next().is_some(), "the scan's first row");
    let began = Instant::now();
    cluster.terminate_node(node).expect("SIGTERM");
    // Nobody reads the scan on: the node aborts its transaction after STOP_DRAIN_MAX (5 s),
    // saves, and stops by itself.
    wait_until("the node stops", Duration::from_secs(20), || {
        Ok((!cluster.is_running(node)).then_some(()))
    })
    .unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "{:?}",
        began.elapsed()
    );
    let log = cluster.log(node);
    assert!(
        log.contains("every commit this node answered is durable"),
        "it saved before it left:\n{log}"
    );
    // Rows already fetched come first; then the scan fails.
    assert!(scan.any(|r| r.is_err()), "the scan was aborted");
}

#[test]
fn api_nodes_move_off_a_stopping_node_before_it_refuses_them() {
    let mut cluster = TestCluster::start(ClusterSpec::new().data_nodes(2).replicas(2))
        .expect("start the cluster");
    let node = NodeId(1);
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &items_def()).expect("create table");
    for id in 0..20 {
        insert(&api, &table, id).expect("insert");
    }
    // A scan left open on node 1 (the lowest node coordinates scans) holds its stop.
    let mut scanning = api.start_transaction().unwrap();
    let mut scan = scanning.scan_table(&table, &one_row_a_batch()).unwrap();
    assert!(scan.next().is_some(), "the scan's first row");
    cluster.terminate_node(node).expect("SIGTERM");
    // Inserts of keys whose primary is either node: node 1 serves them until this API node
    // said it knows (NODE_STOPPING_CONF), and refuses new ones from then on ...
    let mut id = 100;
    wait_until(
        "node 1 refuses new transactions",
        Duration::from_secs(10),
        || {
            id += 1;
            insert(&api, &table, id)?;
            let log = cluster.log(node);
            Ok(log.contains("every API node was told").then_some(()))
        },
    )
    .unwrap();
    // ... but none is refused: whatever their keys, they go to node 2's TC.
    for _ in 0..20 {
        id += 1;
        insert(&api, &table, id).expect("an insert past the stopping node");
    }
    // A new scan is coordinated by node 2, and node 1 still reads its own fragments for it.
    let mut reading = api.start_transaction().unwrap();
    let rows = (reading.scan_table(&table, &ScanOptions::default()).unwrap())
        .collect::<Result<Vec<_>, _>>()
        .expect("a scan while node 1 stops");
    assert_eq!(rows.len(), 20 + (id - 100) as usize);
    drop(reading);
    assert!(cluster.is_running(node), "node 1 still waits for the scan");
    drop(scan);
    drop(scanning);
    let status = cluster.stop_node(node).expect("stop");
    assert!(status.success(), "{status:?}\n{}", cluster.log(node));
}
