//! Proves that DROP TABLE waits for the transactions holding the table's rows, as NDB's does:
//! while one holds rows (on the DICT master's node group, or only on another one), new
//! operations on the table fail with 283 on every data node and the drop does not return; the
//! holder's commit is acknowledged, and the drop then completes. And that when the DICT master
//! fails during that wait, the drop is called off and the table serves again on the survivor.

use std::thread;
use std::time::{Duration, Instant};

use rndb_api::{Cluster, ColumnDef, ColumnType, ExecType, Table, TableDef, Value};
use rndb_config::NodeId;
use rndb_tests::ops::{insert_committed, read_committed, recreate_table};
use rndb_tests::{assert_ndb_code, wait_until, ClusterSpec, TestCluster};

/// How long each step may take on a loaded 2-core machine.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// The DICT master (the lowest data node id) and the other data node.
const MASTER: NodeId = NodeId(1);
const OTHER: NodeId = NodeId(2);
/// Keys the holding transaction writes: enough that both data nodes are primary for some.
const KEYS: u32 = 16;

fn def(name: &str) -> TableDef {
    TableDef::new(
        name,
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Int64),
        ],
    )
}

fn row(id: u32, v: i64) -> Vec<Value> {
    vec![Value::UInt32(id), Value::Int64(v)]
}

/// Two data nodes in one node group, and room for three API nodes.
fn start() -> TestCluster {
    TestCluster::start(ClusterSpec::new().data_nodes(2).replicas(2).api_slots(3))
        .expect("start the data nodes")
}

/// How long a drop that must wait is watched not to return: one that did not wait returns
/// within milliseconds once its table is marked everywhere.
const NOT_RETURNING_WATCH: Duration = Duration::from_secs(2);

/// Fails if `drop` returns within [`NOT_RETURNING_WATCH`].
fn assert_still_waiting<T>(drop: &thread::ScopedJoinHandle<'_, T>) {
    let until = Instant::now() + NOT_RETURNING_WATCH;
    while Instant::now() < until {
        assert!(
            !drop.is_finished(),
            "the drop waits while a transaction holds the table's rows"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// A key past those the tests write whose primary replica is data node `node`.
fn key_on(api: &Cluster, table: &Table, node: NodeId) -> Value {
    (KEYS + 2..KEYS + 1000)
        .map(Value::UInt32)
        .find(|key| {
            let replicas = api.replicas_of(table, std::slice::from_ref(key));
            replicas.expect("replicas of a key").first() == Some(&node)
        })
        .unwrap_or_else(|| panic!("no key has its primary replica on data node {node}"))
}

/// Waits until a new operation on `table` (from `api`, not the holder) fails with 283:
/// the drop has begun.
fn wait_for_283(api: &Cluster, table: &Table) {
    wait_until("new operations refused with 283", STEP_TIMEOUT, || {
        Ok((read_committed(api, table, &[Value::UInt32(KEYS + 1)])
            .is_err_and(|e| e.code() == Some(283)))
        .then_some(()))
    })
    .expect("the drop refuses new operations while it waits");
}

/// Drops `table` from `dropper` while `t` (of `holder`) holds rows of it: new operations fail
/// with 283, then `while_waiting` runs, the drop does not return until `t` commits (which is
/// acknowledged), and then the table is gone.
fn drop_while_held(
    holder: &Cluster,
    dropper: &Cluster,
    table: &Table,
    mut t: rndb_api::Transaction<'_>,
    while_waiting: impl FnOnce(),
) {
    let name = table.name().to_string();
    thread::scope(|scope| {
        let drop = scope.spawn(|| dropper.drop_table(&name));
        wait_for_283(holder, table);
        while_waiting();
        assert_still_waiting(&drop);
        t.execute(ExecType::Commit)
            .expect("the holder's commit is acknowledged");
        drop.join()
            .expect("the dropping thread")
            .expect("the drop completes once the rows are free");
    });
    assert_ndb_code(holder.get_table(&name), 709, "the dropped table");
}

#[test]
fn a_drop_waits_for_the_transactions_holding_the_tables_rows() {
    let cluster = start();
    let holder = cluster.connect().expect("connect the holder");
    let dropper = cluster.connect().expect("connect the dropper");
    let table = recreate_table(&holder, &def("held")).expect("create the table");
    insert_committed(&holder, &table, &[row(KEYS + 1, 0)]).expect("a committed row");

    let mut t = holder.start_transaction().expect("start");
    for id in 0..KEYS {
        t.insert(&table, &row(id, i64::from(id))).expect("define");
    }
    t.execute(ExecType::NoCommit)
        .expect("the inserts hold their rows");

    drop_while_held(&holder, &dropper, &table, t, || {
        // Both nodes refuse: each marked the table when the drop began there.
        for node in [MASTER, OTHER] {
            let key = key_on(&holder, &table, node);
            let mut on_node = holder.start_transaction().expect("start");
            on_node
                .insert(&table, &[key.clone(), Value::Int64(1)])
                .expect("define");
            assert_ndb_code(
                on_node.execute(ExecType::Commit),
                283,
                &format!("an insert whose primary is data node {node}, during the drop"),
            );
        }
    });
}

#[test]
fn a_drop_waits_for_rows_held_only_in_another_node_group() {
    // Node groups {1, 2} and {3, 4}: the DICT master (node 1) holds none of the rows.
    let cluster = TestCluster::start(ClusterSpec::new().data_nodes(4).replicas(2).api_slots(3))
        .expect("start the data nodes");
    let holder = cluster.connect().expect("connect the holder");
    let dropper = cluster.connect().expect("connect the dropper");
    let table = recreate_table(&holder, &def("held_apart")).expect("create the table");
    insert_committed(&holder, &table, &[row(KEYS + 1, 0)]).expect("a committed row");
    let mut t = holder.start_transaction().expect("start");
    let mut held = 0;
    for id in 0..1000 {
        let key = [Value::UInt32(id)];
        let replicas = holder.replicas_of(&table, &key).expect("replicas of a key");
        if replicas.contains(&MASTER) || id == KEYS + 1 {
            continue;
        }
        t.insert(&table, &row(id, 1)).expect("define");
        held += 1;
        if held == KEYS {
            break;
        }
    }
    assert_eq!(held, KEYS, "keys of the other node group");
    t.execute(ExecType::NoCommit)
        .expect("the inserts hold their rows");
    drop_while_held(&holder, &dropper, &table, t, || {});
}

#[test]
fn a_drop_waiting_when_its_master_fails_is_called_off() {
    let mut cluster = start();
    let holder = cluster.connect().expect("connect the holder");
    let dropper = cluster.connect().expect("connect the dropper");
    let table = recreate_table(&holder, &def("kept")).expect("create the table");
    insert_committed(&holder, &table, &[row(KEYS + 1, 7)]).expect("a committed row");

    let mut t = holder.start_transaction().expect("start");
    for id in 0..KEYS {
        t.insert(&table, &row(id, 0)).expect("define");
    }
    t.execute(ExecType::NoCommit)
        .expect("the inserts hold their rows");
    thread::scope(|scope| {
        let drop = scope.spawn(|| dropper.drop_table("kept"));
        wait_for_283(&holder, &table);
        // Both nodes have marked the table once the survivor refuses too.
        let key = key_on(&holder, &table, OTHER);
        wait_until("node 2 to refuse too", STEP_TIMEOUT, || {
            let mut on_node = holder.start_transaction()?;
            on_node.insert(&table, &[key.clone(), Value::Int64(1)])?;
            Ok(on_node
                .execute(ExecType::Commit)
                .is_err_and(|e| e.code() == Some(283))
                .then_some(()))
        })
        .expect("node 2 refuses during the drop");
        cluster.kill_node(MASTER).expect("kill the DICT master");
        assert!(
            drop.join().expect("the dropping thread").is_err(),
            "the drop fails with its master"
        );
    });
    drop(t);
    // The survivor took its mark off: the table is there, old rows read, new ones commit.
    wait_until("the table to serve again on node 2", STEP_TIMEOUT, || {
        Ok(insert_committed(&holder, &table, &[row(KEYS + 3, 3)])
            .ok()
            .map(|_| ()))
    })
    .expect("writes after the master's failure");
    let kept = holder.get_table("kept").expect("the table was not dropped");
    assert_eq!(
        read_committed(&holder, &kept, &[Value::UInt32(KEYS + 1)]).expect("read"),
        row(KEYS + 1, 7),
        "the committed row is there"
    );
}
