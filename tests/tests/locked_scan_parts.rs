//! Proves that a locked scan's transaction does not commit once the link to a data node that
//! held part of the scan failed after that part had read its rows: that node rolled its part
//! back and freed the locks, so the rows are no longer one snapshot, and the commit fails with
//! 4010 (through the blocking API and the tokio interface) instead of answering as the TC's
//! commit alone would; the TC's locks are freed too.

use std::time::Duration;

use rndb_api::{
    Cluster, ColumnDef, ColumnType, ExecType, LockMode, NodeId, ScanOptions, Table, TableDef, Value,
};
use rndb_tests::ops::{insert_committed, recreate_table};
use rndb_tests::{assert_ndb_code, wait_until, ClusterSpec, TestCluster};

/// Rows of the table: enough that every data node is primary of some.
const ROW_COUNT: u32 = 200;
/// How long the API may take to hear that a killed data node failed.
const FAILURE_NOTICED_TIMEOUT: Duration = Duration::from_secs(30);

fn accounts_def() -> TableDef {
    TableDef::new(
        "accounts",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("balance", ColumnType::Int64),
        ],
    )
}

fn locked_scan() -> ScanOptions {
    ScanOptions {
        lock: LockMode::Read,
        batch_rows: Some(16),
        ..ScanOptions::default()
    }
}

/// Waits until `api` routes around `victim`: a fresh committed-read scan then goes to the live
/// data nodes only and finds every row (one sent to the dead node fails, and is tried again).
fn wait_for_failure_noticed(api: &Cluster, table: &Table, victim: NodeId) {
    wait_until(
        &format!("the API to hear that node {victim} failed"),
        FAILURE_NOTICED_TIMEOUT,
        || {
            let mut tx = api.start_transaction()?;
            let rows: Result<Vec<_>, _> = match tx.scan_table(table, &ScanOptions::default()) {
                Ok(scan) => scan.collect(),
                Err(e) => Err(e),
            };
            match rows {
                Ok(rows) if rows.len() == ROW_COUNT as usize => Ok(Some(())),
                Ok(_) => Ok(None),
                Err(e) if e.is_temporary() => Ok(None),
                Err(e) => Err(anyhow::anyhow!("scan after node {victim} died: {e}")),
            }
        },
    )
    .expect("the failure noticed");
}

/// Every row is free to lock again: an exclusive scan reads them all (a lock left behind
/// would end it with 266 after the deadlock timeout).
fn assert_rows_unlocked(api: &Cluster, table: &Table) {
    let mut tx = api.start_transaction().expect("start");
    let options = ScanOptions {
        lock: LockMode::Exclusive,
        ..ScanOptions::default()
    };
    let rows: Vec<Vec<Value>> = tx
        .scan_table(table, &options)
        .expect("exclusive scan")
        .collect::<Result<_, _>>()
        .expect("every row locks");
    assert_eq!(rows.len(), ROW_COUNT as usize);
    tx.execute(ExecType::Commit)
        .expect("commit the exclusive scan");
}

/// A data node of the other node group than `tc` when `other_group`, else `tc`'s partner.
fn victim_for(tc: NodeId, other_group: bool) -> NodeId {
    // Node groups form in id order, two nodes each: {1, 2}, {3, 4}.
    let partner = NodeId(if tc.0 % 2 == 1 { tc.0 + 1 } else { tc.0 - 1 });
    if !other_group {
        return partner;
    }
    NodeId(if tc.0 <= 2 { 3 } else { 1 })
}

#[test]
fn a_locked_scan_whose_part_node_failed_does_not_commit() {
    let spec = ClusterSpec::new().data_nodes(4).replicas(2);
    let mut cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &accounts_def()).expect("create accounts");
    let rows: Vec<Vec<Value>> = (0..ROW_COUNT)
        .map(|id| vec![Value::UInt32(id), Value::Int64(100)])
        .collect();
    insert_committed(&api, &table, &rows).expect("insert");

    // The blocking API: the scan reads every part to its end, then a part's node dies.
    let mut tx = api.start_transaction().expect("start");
    let read: Vec<Vec<Value>> = tx
        .scan_table(&table, &locked_scan())
        .expect("locked scan")
        .collect::<Result<_, _>>()
        .expect("every row");
    assert_eq!(read.len(), ROW_COUNT as usize);
    let tc = tx.connected_node_id().expect("the scan chose a TC");
    let victim = victim_for(tc, false);
    cluster.kill_node(victim).expect("kill the part's node");
    wait_for_failure_noticed(&api, &table, victim);
    assert_ndb_code(
        tx.execute(ExecType::Commit),
        4010,
        "commit a locked scan whose part's node failed",
    );
    drop(tx);
    assert_rows_unlocked(&api, &table);

    // The tokio interface, with a node of the other node group.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut tx = api.tokio().start_transaction();
    let count = runtime.block_on(async {
        let mut scan = tx.scan_table(&table, &locked_scan()).await.expect("scan");
        let mut count = 0;
        while let Some(row) = scan.next_row().await {
            row.expect("a row");
            count += 1;
        }
        count
    });
    assert_eq!(count, ROW_COUNT);
    let victim = victim_for(tx.connected_node_id().expect("TC"), true);
    cluster.kill_node(victim).expect("kill the part's node");
    wait_for_failure_noticed(&api, &table, victim);
    assert_ndb_code(
        runtime.block_on(tx.execute(ExecType::Commit)),
        4010,
        "commit (tokio) a locked scan whose part's node failed",
    );
    drop(tx);
    assert_rows_unlocked(&api, &table);
}
