//! Regressions in the API library's send path, against a real data node.
//!
//! A batch that does not fit in the link's send buffer is refused whole with 4021 (nothing of
//! it is sent, so nothing goes out later with another request's flush), and the transaction it
//! belonged to is aborted as in NDB: a retried execute fails with 4114 instead of answering Ok
//! without sending anything, and dropping an open one rolls back what the data node holds.

use rndb_api::{ColumnDef, ColumnType, ExecType, LockMode, Table, TableDef, Value};
use rndb_tests::ops::{read_committed, recreate_table};
use rndb_tests::{assert_ndb_code, ClusterSpec, TestCluster, API_NODE_ID_FIRST};

/// The API slot whose link has the smallest send buffer the config allows.
const SMALL_BUFFER_SLOT: u16 = API_NODE_ID_FIRST;
/// Bytes of each row's blob: 60 such inserts (~420 kB) exceed the 80% of 256 kB a batch may use.
const BLOB_BYTES: usize = 7000;
const ROWS_IN_A_TOO_BIG_BATCH: u32 = 60;

fn row(id: u32) -> Vec<Value> {
    vec![
        Value::UInt32(id),
        Value::Varbinary(vec![id as u8; BLOB_BYTES]),
    ]
}

fn start() -> (TestCluster, rndb_api::Cluster, Table) {
    let small_link =
        format!("[tcp]\nNodeId1=1\nNodeId2={SMALL_BUFFER_SLOT}\nSendBufferMemory=256K");
    let spec = ClusterSpec::new()
        .deadlock_timeout_ms(2000)
        .extra(&small_link);
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster
        .connect_as(rndb_api::NodeId(SMALL_BUFFER_SLOT))
        .expect("connect");
    let def = TableDef::new(
        "blobs",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("data", ColumnType::Varbinary(8000)),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");
    (cluster, api, table)
}

#[test]
fn a_batch_refused_for_send_buffer_space_sends_nothing_and_aborts_the_transaction() {
    let (_cluster, api, table) = start();

    // A fresh transaction: the refused batch is not retried by a second execute.
    let mut tx = api.start_transaction().expect("start");
    for id in 1..=ROWS_IN_A_TOO_BIG_BATCH {
        tx.insert(&table, &row(id)).expect("define");
    }
    let refused = tx.execute(ExecType::Commit);
    assert_ndb_code(refused, 4021, "a batch larger than the send buffer");
    assert_ndb_code(
        tx.execute(ExecType::Commit),
        4114,
        "an execute after the refused one",
    );
    assert_ndb_code(
        tx.insert(&table, &row(1)),
        4114,
        "defining after the refusal",
    );
    drop(tx);

    // Nothing of the refused batch reached the node, now or with a later flush: the rows are
    // absent, and a new transaction inserts the same keys without waiting for any lock.
    let mut tx = api.start_transaction().expect("start");
    tx.insert(&table, &row(1)).expect("define");
    tx.insert(&table, &row(2)).expect("define");
    tx.execute(ExecType::Commit)
        .expect("the keys of the refused batch are free");
    assert_ndb_code(
        read_committed(&api, &table, &[Value::UInt32(3)]),
        626,
        "a row of the refused batch",
    );

    // An open transaction whose next batch is refused is aborted: its earlier NoCommit change
    // is rolled back when it is dropped, and its lock is free again.
    let mut tx = api.start_transaction().expect("start");
    tx.update(
        &table,
        &[Value::UInt32(1)],
        &[(1, Value::Varbinary(vec![9; 10]))],
    )
    .expect("define");
    tx.execute(ExecType::NoCommit)
        .expect("the small batch goes");
    for id in 100..100 + ROWS_IN_A_TOO_BIG_BATCH {
        tx.insert(&table, &row(id)).expect("define");
    }
    assert_ndb_code(
        tx.execute(ExecType::Commit),
        4021,
        "a too-big batch of an open transaction",
    );
    assert_ndb_code(
        tx.execute(ExecType::Commit),
        4114,
        "a commit after the refused batch",
    );
    drop(tx);
    let mut reader = api.start_transaction().expect("start");
    let op = reader
        .read(&table, &[Value::UInt32(1)], LockMode::Exclusive)
        .expect("define");
    reader
        .execute(ExecType::Commit)
        .expect("the aborted transaction's lock is free");
    assert_eq!(
        reader.row(op).expect("the row")[1],
        Value::Varbinary(vec![1; BLOB_BYTES]),
        "the aborted transaction's change was rolled back"
    );
    assert_ndb_code(
        read_committed(&api, &table, &[Value::UInt32(100)]),
        626,
        "a row of the refused batch of the open transaction",
    );
}
