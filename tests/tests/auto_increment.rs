//! Proves that auto-increment values (NDB's getAutoIncrementValue over SYSTAB_0) are unique
//! across API nodes and threads taking ranges at once, start at 1, move as
//! set_auto_increment_value says (only up with increase_only), stop at the column's type and
//! below u64::MAX, are never 0, are not handed out again after a system restart rolls the
//! counter back, and that a CREATE TABLE's AUTO_INCREMENT column keeps its flag in the data
//! node's dictionary.

use std::collections::BTreeSet;
use std::time::Duration;

use rndb_api::ddl::parse_create_table;
use rndb_api::{Cluster, ConnectOptions, ExecType, NodeId, Table, Value};
use rndb_tests::ops::recreate_table;
use rndb_tests::{assert_ndb_code, wait_until, ClusterSpec, TestCluster};

/// API nodes taking values at once, threads on each, values each thread takes.
const API_NODES: u16 = 2;
const THREADS: usize = 3;
const VALUES_PER_THREAD: usize = 200;
/// A system restart of one data node, and an API node's links coming back after it.
const RESTART_TIMEOUT: Duration = Duration::from_secs(120);

fn connect(cluster: &TestCluster, prefetch: u32) -> Cluster {
    cluster
        .connect_with(ConnectOptions {
            auto_increment_prefetch: prefetch,
            ..ConnectOptions::default()
        })
        .expect("connect")
}

#[test]
fn auto_increment_values_are_unique_and_move_as_set() {
    let cluster =
        TestCluster::start(ClusterSpec::new().api_slots(API_NODES + 1)).expect("start a node");
    // Ranges of 7 on one API node and of 1 on the other: both take from the same counter.
    let apis = [connect(&cluster, 7), connect(&cluster, 1)];
    let statement = parse_create_table(
        "CREATE TABLE orders (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, n INT, PRIMARY KEY (id))",
    )
    .expect("parse");
    let table = recreate_table(&apis[0], &statement.table).expect("create orders");
    let seen_by_dict = apis[1].get_table("orders").expect("look it up");
    assert!(
        seen_by_dict.def().columns[0].auto_increment
            && !seen_by_dict.def().columns[1].auto_increment,
        "the dictionary keeps the flag: {:?}",
        seen_by_dict.def()
    );
    assert_eq!(apis[1].read_auto_increment_value(&table).expect("read"), 1);

    // Every thread of both API nodes takes values and inserts a row with each.
    let taken: Vec<u64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS * apis.len())
            .map(|i| {
                let (api, table) = (&apis[i % apis.len()], &table);
                scope.spawn(move || take_and_insert(api, table, i as i32))
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker panicked"))
            .collect()
    });
    let unique: BTreeSet<u64> = taken.iter().copied().collect();
    assert_eq!(unique.len(), taken.len(), "a value was handed out twice");
    assert_eq!(unique.first(), Some(&1), "the counter starts at 1");
    // Gaps come only from the ranges of 7 not used up: at most one per thread's last range.
    let span = unique.last().copied().unwrap_or(0);
    assert!(
        span <= taken.len() as u64 + 7 * THREADS as u64,
        "values up to {span} for {} taken",
        taken.len()
    );

    // Moved up: the next value of an API node without a range is where it was set.
    let fresh = connect(&cluster, 5);
    fresh
        .set_auto_increment_value(&table, 10_000, true)
        .expect("move up");
    assert_eq!(
        fresh.read_auto_increment_value(&table).expect("read"),
        10_000
    );
    assert_eq!(fresh.auto_increment_value(&table).expect("take"), 10_000);
    // increase_only leaves it where it is; without it, it moves down.
    fresh
        .set_auto_increment_value(&table, 500, true)
        .expect("not down");
    assert_eq!(apis[1].auto_increment_value(&table).expect("take"), 10_005);
    fresh
        .set_auto_increment_value(&table, 20, false)
        .expect("down");
    assert_eq!(apis[1].auto_increment_value(&table).expect("take"), 20);

    // An INT column stops at i32::MAX.
    let small =
        parse_create_table("CREATE TABLE small (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY)")
            .expect("parse");
    let small = recreate_table(&apis[1], &small.table).expect("create small");
    apis[1]
        .set_auto_increment_value(&small, i32::MAX as u64, false)
        .expect("to the top");
    assert_eq!(
        apis[1].auto_increment_value(&small).expect("the last one"),
        i32::MAX as u64
    );
    assert_ndb_code(apis[1].auto_increment_value(&small), 4209, "past INT");
}

/// Takes values of `table` and inserts a row with each; returns the values.
fn take_and_insert(api: &Cluster, table: &Table, thread: i32) -> Vec<u64> {
    (0..VALUES_PER_THREAD)
        .map(|_| {
            let id = api.auto_increment_value(table).expect("take a value");
            assert!(id > 0, "auto-increment values are never 0");
            let mut tx = api.start_transaction().expect("start");
            tx.insert(table, &[Value::UInt64(id), Value::Int32(thread)])
                .expect("define");
            tx.execute(ExecType::Commit)
                .unwrap_or_else(|e| panic!("insert id {id}: {e} (a value handed out twice?)"));
            id
        })
        .collect()
}

/// 0 is never handed out (a counter set to 0 starts at 1), and the last values below u64::MAX
/// are taken one at a time until the counter is used up (4209), not lost to a range's overflow.
#[test]
fn auto_increment_edges() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start a node");
    let api = connect(&cluster, 512);
    let def =
        parse_create_table("CREATE TABLE edges (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY)")
            .expect("parse");
    let table = recreate_table(&api, &def.table).expect("create edges");
    api.set_auto_increment_value(&table, 0, false)
        .expect("set 0");
    assert_eq!(api.auto_increment_value(&table).expect("take"), 1);
    api.set_auto_increment_value(&table, u64::MAX - 2, false)
        .expect("near the top");
    assert_eq!(
        api.auto_increment_value(&table).expect("take"),
        u64::MAX - 2
    );
    assert_eq!(
        api.auto_increment_value(&table).expect("take"),
        u64::MAX - 1
    );
    assert_ndb_code(api.auto_increment_value(&table), 4209, "used up");

    // A TINYINT UNSIGNED counter ends at 255.
    let def =
        parse_create_table("CREATE TABLE tiny (id TINYINT UNSIGNED AUTO_INCREMENT PRIMARY KEY)")
            .expect("parse");
    let table = recreate_table(&api, &def.table).expect("create tiny");
    api.set_auto_increment_value(&table, 255, false)
        .expect("set 255");
    assert_eq!(api.auto_increment_value(&table).expect("take"), 255);
    assert_ndb_code(
        api.auto_increment_value(&table),
        4209,
        "past TINYINT UNSIGNED",
    );
}

/// A range taken just before a system restart that rolls the counter back (its commit was in
/// no saved global checkpoint) is dropped by the API node that held it once it sees its link
/// fail: the values another API node takes after the restart are not handed out again.
#[test]
fn a_range_lost_to_a_system_restart_is_not_handed_out_again() {
    let spec = ClusterSpec::new()
        .api_slots(4)
        .data_node_param("TimeBetweenGlobalCheckpoints", "5000");
    let mut cluster = TestCluster::start(spec).expect("start a node");
    let a = connect(&cluster, 512);
    let def =
        parse_create_table("CREATE TABLE lost (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY)")
            .expect("parse");
    let table = recreate_table(&a, &def.table).expect("create lost");
    // The table and SYSTAB_0 saved; the range taken after is not.
    a.read_auto_increment_value(&table)
        .expect("create SYSTAB_0");
    cluster
        .wait_for_saved_checkpoints(NodeId(1), 2)
        .expect("a saved checkpoint");
    assert_eq!(a.auto_increment_value(&table).expect("take"), 1);
    cluster.kill_all_nodes().expect("kill the data node");
    // A sees its link fail (as NDB's API drops its caches when it sees the cluster fail).
    wait_until("API node A to see its link fail", RESTART_TIMEOUT, || {
        Ok(a.ping().is_err().then_some(()))
    })
    .expect("A sees the failure");
    cluster
        .restart_stopped_nodes()
        .expect("start it from its files");
    let b = connect(&cluster, 512);
    let table_b = b.get_table("lost").expect("the table survived");
    let taken_by_b: Vec<u64> = (0..3)
        .map(|_| b.auto_increment_value(&table_b).expect("take"))
        .collect();
    assert_eq!(
        taken_by_b,
        [1, 2, 3],
        "the counter went back with the restart"
    );
    // A's range is gone: it takes from the counter (or cannot reach it), never from the range.
    if let Ok(taken_by_a) = a.auto_increment_value(&table) {
        assert!(
            !taken_by_b.contains(&taken_by_a),
            "A handed out {taken_by_a} again after the restart; B took {taken_by_b:?}"
        );
    }
}
