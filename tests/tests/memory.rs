//! Proves that a data node with little DataMemory refuses inserts with error 827 when full
//! instead of growing or crashing, keeps serving reads and deletes, and accepts inserts again
//! once deletes have freed memory, key operations leaving MinFreePct of it for restarts; and
//! that a data node holds its whole DataMemory in memory
//! once it serves (paged in at start, as NDB's), locked in RAM with LockPagesInMainMemory
//! (root only).

use rndb_api::{Cluster, ColumnDef, ColumnType, ExecType, NodeId, Table, TableDef, Value};
use rndb_tests::ops::{read_committed, recreate_table};
use rndb_tests::{assert_ndb_code, ClusterSpec, TestCluster};

/// Bytes of payload per row: big, so that 1M of DataMemory fills after a few hundred rows.
const PAYLOAD_BYTES: usize = 2000;
/// Rows inserted per transaction while filling.
const ROWS_PER_EXECUTE: u32 = 10;
/// An upper bound on rows that can fit in 1M with this payload, so filling always ends.
const ROWS_MAX: u32 = 1024 * 1024 / PAYLOAD_BYTES as u32 + 1000;

fn row(id: u32) -> Vec<Value> {
    let byte = (id % 251) as u8;
    vec![
        Value::UInt32(id),
        Value::Varbinary(vec![byte; PAYLOAD_BYTES]),
    ]
}

/// Inserts rows `first..first + count` in one transaction and commits.
fn insert_range(
    api: &Cluster,
    table: &Table,
    first: u32,
    count: u32,
) -> Result<(), rndb_api::Error> {
    let mut transaction = api.start_transaction()?;
    for id in first..first + count {
        transaction.insert(table, &row(id))?;
    }
    transaction.execute(ExecType::Commit)
}

/// Inserts until the node answers 827; returns how many rows went in.
fn fill(api: &Cluster, table: &Table) -> u32 {
    let mut inserted = 0;
    loop {
        assert!(
            inserted < ROWS_MAX,
            "{inserted} rows of {PAYLOAD_BYTES} bytes fit in 1M of DataMemory"
        );
        match insert_range(api, table, inserted, ROWS_PER_EXECUTE) {
            Ok(()) => inserted += ROWS_PER_EXECUTE,
            Err(e) if e.code() == Some(827) => break,
            Err(e) => panic!("insert rows {inserted}.. failed with {e}, expected success or 827"),
        }
    }
    // The batch that failed was aborted as a whole; fill the last rows one at a time.
    while insert_range(api, table, inserted, 1).is_ok() {
        inserted += 1;
    }
    assert_ndb_code(
        insert_range(api, table, inserted, 1),
        827,
        "insert into a full node",
    );
    inserted
}

fn blobs_def() -> TableDef {
    TableDef::new(
        "blobs",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("payload", ColumnType::Varbinary(PAYLOAD_BYTES as u16)),
        ],
    )
}

/// Rows a node with 1M of DataMemory and MinFreePct=`pct` takes before it answers 827, and
/// that answer.
fn rows_until_full(min_free_pct: u32) -> (u32, rndb_api::Error) {
    let spec = ClusterSpec::new()
        .data_memory("1M")
        .data_node_param("MinFreePct", &min_free_pct.to_string());
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &blobs_def()).expect("create the table");
    let inserted = fill(&api, &table);
    let refused = insert_range(&api, &table, inserted, 1).expect_err("full");
    (inserted, refused)
}

#[test]
fn key_operations_leave_min_free_pct_of_data_memory_for_restarts() {
    let (all, _) = rows_until_full(0);
    let (half, refused) = rows_until_full(50);
    assert!(
        (all * 4 / 10..=all * 6 / 10).contains(&half),
        "MinFreePct=50: {half} rows, MinFreePct=0: {all}"
    );
    assert!(
        refused
            .to_string()
            .contains("less MinFreePct=50 % kept for restarts"),
        "{refused}"
    );
}

#[test]
fn a_full_node_refuses_inserts_with_827_and_recovers_after_deletes() {
    let cluster =
        TestCluster::start(ClusterSpec::new().data_memory("1M")).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &blobs_def()).expect("create the table");
    let inserted = fill(&api, &table);
    eprintln!("{inserted} rows of {PAYLOAD_BYTES} bytes filled 1M of DataMemory");
    assert!(inserted > 0, "some rows fit before the node is full");

    for id in [0, inserted / 2, inserted - 1] {
        let found = read_committed(&api, &table, &[Value::UInt32(id)]).expect("read when full");
        assert_eq!(found, row(id), "row {id} is intact");
    }
    assert_ndb_code(
        read_committed(&api, &table, &[Value::UInt32(inserted)]),
        626,
        "the refused row is not there",
    );

    let freed = inserted / 2;
    let mut transaction = api.start_transaction().expect("start");
    for id in 0..freed {
        transaction
            .delete(&table, &[Value::UInt32(id)])
            .expect("define a delete");
    }
    transaction
        .execute(ExecType::Commit)
        .expect("delete half the rows of a full node");

    insert_range(&api, &table, inserted, ROWS_PER_EXECUTE).expect("insert after the deletes");
    let found = read_committed(&api, &table, &[Value::UInt32(inserted)]).expect("read it back");
    assert_eq!(found, row(inserted));
}

/// The cluster's first data node, and a line of its `/proc/<pid>/status` in KiB (`VmRSS`,
/// `VmLck`).
fn data_node_status_kib(cluster: &TestCluster, field: &str) -> (NodeId, u64) {
    let id = cluster.data_node_ids()[0];
    let pid = cluster.pid(id).expect("the data node runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in the status of process {pid}"));
    (id, kib)
}

#[test]
fn a_serving_data_node_holds_its_data_memory_paged_in() {
    const DATA_MEMORY_MIB: u64 = 384;
    let cluster =
        TestCluster::start(ClusterSpec::new().data_memory(&format!("{DATA_MEMORY_MIB}M")))
            .expect("start the cluster");
    let (id, resident_kib) = data_node_status_kib(&cluster, "VmRSS");
    assert!(
        resident_kib >= DATA_MEMORY_MIB * 1024,
        "{resident_kib} KiB resident, less than DataMemory={DATA_MEMORY_MIB}M"
    );
    assert!(
        cluster.log(id).contains("DataMemory paged in"),
        "{}",
        cluster.log(id)
    );
}

#[test]
#[ignore = "needs root: locks memory (scripts/test runs it as root)"]
fn lock_pages_in_main_memory_locks_the_data_memory() {
    const DATA_MEMORY_MIB: u64 = 64;
    for mode in ["1", "2"] {
        let cluster = TestCluster::start(
            ClusterSpec::new()
                .data_memory(&format!("{DATA_MEMORY_MIB}M"))
                .data_node_param("LockPagesInMainMemory", mode),
        )
        .expect("start the cluster");
        let (id, locked_kib) = data_node_status_kib(&cluster, "VmLck");
        assert!(
            locked_kib >= DATA_MEMORY_MIB * 1024,
            "LockPagesInMainMemory={mode}: {locked_kib} KiB locked, less than \
             DataMemory={DATA_MEMORY_MIB}M\n{}",
            cluster.log(id)
        );
    }
}
