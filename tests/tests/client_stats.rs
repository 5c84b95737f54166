//! Proves that the API's client statistics (NDB's `Ndb::getClientStat`) count what the API did:
//! one WaitExecCompleteCount per execute whatever its batch holds, primary-key and unique-index
//! operations, rows read by key and by scans, transactions started, committed, aborted and
//! closed, scans and their batches, dictionary requests, and bytes equal to what the links
//! counted; counts from several threads add up; the tokio interface counts its requests and
//! executes as the blocking API does, and an execute dropped in flight (a tokio future, an
//! asynchronous executor) still counts the operations it sent; and that writes of many long
//! values in one execute take a few round trips, not two per row.

use std::future::Future;
use std::task::Poll;

use rndb_api::{
    AbortOption, BlobSize, ClientStat, ClientStats, Cluster, ColumnDef, ColumnType, ExecType,
    IndexDef, LockMode, ScanOptions, TableDef, Value,
};
use rndb_tests::ops::recreate_table;
use rndb_tests::{ClusterSpec, TestCluster};

fn start() -> (TestCluster, Cluster) {
    let spec = ClusterSpec::new().data_nodes(2).replicas(2);
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    (cluster, api)
}

fn kv_def() -> TableDef {
    TableDef::new(
        "kv",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("code", ColumnType::Varchar(16)),
            ColumnDef::new("v", ColumnType::Varchar(100)),
        ],
    )
}

fn row(id: u32) -> Vec<Value> {
    vec![
        Value::UInt32(id),
        Value::Varchar(format!("c{id}")),
        Value::Varchar("x".repeat(100)),
    ]
}

/// The counts of `stats` named, in order (for a readable failure).
fn counts(stats: &ClientStats, named: &[ClientStat]) -> Vec<(&'static str, u64)> {
    named.iter().map(|&s| (s.name(), stats[s])).collect()
}

#[test]
fn each_execute_is_one_round_trip_and_each_operation_is_counted() {
    use ClientStat::*;
    let (_cluster, api) = start();
    let before_ddl = api.client_stats();
    let table = recreate_table(&api, &kv_def()).expect("create table");
    let index = api
        .create_index(&table, &IndexDef::unique("code_u", &["code"]))
        .expect("create index");
    assert!(
        api.client_stats().since(&before_ddl)[WaitMetaRequestCount] >= 2,
        "a table and an index made through the dictionary"
    );

    // Twenty inserts and their commit: one round trip.
    let start = api.client_stats();
    let mut tx = api.start_transaction().unwrap();
    for id in 0..20 {
        tx.insert(&table, &row(id)).unwrap();
    }
    tx.execute(ExecType::Commit).unwrap();
    drop(tx);
    let inserted = api.client_stats().since(&start);
    let wanted = [
        WaitExecCompleteCount,
        PkOpCount,
        UkOpCount,
        ReadRowCount,
        TransStartCount,
        TransCommitCount,
        TransAbortCount,
        TransCloseCount,
    ];
    assert_eq!(
        counts(&inserted, &wanted),
        counts_of(&[1, 20, 0, 0, 1, 1, 0, 1], &wanted)
    );

    // A read by key, then twenty in one batch with two through the unique index: two round
    // trips, 22 rows.
    let start = api.client_stats();
    let mut tx = api.start_transaction().unwrap();
    tx.read(&table, &[Value::UInt32(3)], LockMode::CommittedRead)
        .unwrap();
    tx.execute(ExecType::NoCommit).unwrap();
    for id in 0..18 {
        tx.read(&table, &[Value::UInt32(id)], LockMode::Read)
            .unwrap();
    }
    for id in [18, 19] {
        let code = [Value::Varchar(format!("c{id}"))];
        tx.read_unique(&index, &code, LockMode::Read).unwrap();
    }
    tx.execute(ExecType::Commit).unwrap();
    drop(tx);
    let read = api.client_stats().since(&start);
    assert_eq!(
        counts(&read, &wanted),
        counts_of(&[2, 19, 2, 21, 1, 1, 0, 1], &wanted)
    );

    // An insert left open and dropped is rolled back: an abort. A read of a missing row
    // reads none.
    let start = api.client_stats();
    let mut tx = api.start_transaction().unwrap();
    tx.insert(&table, &row(100)).unwrap();
    tx.execute(ExecType::NoCommit).unwrap();
    drop(tx);
    let mut tx = api.start_transaction().unwrap();
    tx.read(&table, &[Value::UInt32(999)], LockMode::CommittedRead)
        .unwrap();
    assert!(tx.execute(ExecType::Commit).is_err(), "626: no such row");
    drop(tx);
    let aborted = api.client_stats().since(&start);
    assert_eq!(
        counts(&aborted, &wanted),
        counts_of(&[2, 2, 0, 0, 2, 0, 2, 2], &wanted)
    );

    // A table scan reads every row, in batches of at most 4 rows per fragment.
    let start = api.client_stats();
    let mut tx = api.start_transaction().unwrap();
    let options = ScanOptions {
        batch_rows: Some(4),
        ..ScanOptions::default()
    };
    let rows = tx
        .scan_table(&table, &options)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert_eq!(rows.len(), 20);
    drop(tx);
    let scanned = api.client_stats().since(&start);
    assert_eq!(scanned[TableScanCount], 1);
    assert_eq!(scanned[RangeScanCount], 0);
    assert_eq!(scanned[ReadRowCount], 20);
    assert_eq!(scanned[WaitExecCompleteCount], 0);
    assert!(
        scanned[ScanBatchCount] >= 5,
        "20 rows, 4 a batch: {scanned:?}"
    );
    assert!(
        scanned[WaitScanResultCount] >= 2,
        "a first batch from each of two data nodes: {scanned:?}"
    );

    // The bytes are what the links counted.
    let traffic = api.link_traffic();
    let stats = api.client_stats();
    assert_eq!(stats[BytesSentCount], traffic.bytes_sent);
    assert_eq!(stats[BytesRecvdCount], traffic.bytes_received);
    assert!(stats[BytesSentCount] > 0 && stats[BytesRecvdCount] > 0);
}

fn counts_of(values: &[u64], named: &[ClientStat]) -> Vec<(&'static str, u64)> {
    named
        .iter()
        .zip(values)
        .map(|(s, &v)| (s.name(), v))
        .collect()
}

#[test]
fn counts_of_several_threads_add_up() {
    let (_cluster, api) = start();
    let table = recreate_table(&api, &kv_def()).expect("create table");
    let start = api.client_stats();
    std::thread::scope(|scope| {
        for t in 0..4u32 {
            let (api, table) = (&api, &table);
            scope.spawn(move || {
                for i in 0..25 {
                    let mut tx = api.start_transaction().unwrap();
                    tx.insert(table, &row(t * 100 + i)).unwrap();
                    tx.execute(ExecType::Commit).unwrap();
                }
            });
        }
    });
    let done = api.client_stats().since(&start);
    assert_eq!(done[ClientStat::TransCommitCount], 100);
    assert_eq!(done[ClientStat::TransCloseCount], 100);
    assert_eq!(done[ClientStat::WaitExecCompleteCount], 100);
    assert_eq!(done[ClientStat::PkOpCount], 100);
}

#[test]
fn writes_of_many_long_values_take_a_few_round_trips() {
    let (_cluster, api) = start();
    let def = TableDef::new(
        "docs",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::nullable("body", ColumnType::Blob(BlobSize::Blob)),
        ],
    );
    let table = recreate_table(&api, &def).expect("create table");
    let body = |seed: u32| Value::Varbinary((0..13_000).map(|i| (i + seed) as u8).collect());
    let start = api.client_stats();
    let mut tx = api.start_transaction().unwrap();
    for id in 0..20 {
        tx.write(&table, &[Value::UInt32(id), body(id)]).unwrap();
    }
    tx.execute(ExecType::Commit).unwrap();
    drop(tx);
    let written = api.client_stats().since(&start);
    // The old heads of all 20 rows in one round trip, then their rows and parts (260 kB)
    // in batches of 256 KiB: two or three more. Row by row it was 40.
    let trips = written[ClientStat::WaitExecCompleteCount];
    assert!((2..=4).contains(&trips), "{trips} round trips: {written:?}");
    assert_eq!(written[ClientStat::TransCommitCount], 1);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn the_tokio_interface_counts_as_the_blocking_api() {
    use ClientStat::*;
    let (_cluster, api) = start();
    let start = api.client_stats();
    let table = runtime().block_on(async {
        let tokio = api.tokio();
        tokio.ping().await.expect("ping");
        tokio.list_tables().await.expect("list tables");
        let table = tokio.create_table(&kv_def()).await.expect("create table");
        let mut tx = tokio.start_transaction();
        for id in 0..10 {
            tx.insert(&table, &row(id)).unwrap();
        }
        tx.execute(ExecType::Commit).await.unwrap();
        drop(tx);
        let mut tx = tokio.start_transaction();
        let options = ScanOptions {
            batch_rows: Some(4),
            ..ScanOptions::default()
        };
        let mut scan = tx.scan_table(&table, &options).await.unwrap();
        let mut rows = 0;
        while let Some(row) = scan.next_row().await {
            row.unwrap();
            rows += 1;
        }
        assert_eq!(rows, 10);
        table
    });
    let done = api.client_stats().since(&start);
    assert!(
        done[WaitMetaRequestCount] >= 3,
        "ping, list, create: {done:?}"
    );
    assert_eq!(done[WaitExecCompleteCount], 1, "{done:?}");
    assert_eq!(done[PkOpCount], 10, "{done:?}");
    assert_eq!(done[TransCommitCount], 1, "{done:?}");
    assert_eq!(done[TableScanCount], 1, "{done:?}");
    assert_eq!(done[ReadRowCount], 10, "{done:?}");
    assert_eq!(table.name(), "kv");
}

#[test]
fn executes_dropped_in_flight_count_the_operations_they_sent() {
    use ClientStat::*;
    let (_cluster, api) = start();
    let table = recreate_table(&api, &kv_def()).expect("create table");
    // A tokio execute whose future is dropped after its first poll.
    let start = api.client_stats();
    runtime().block_on(async {
        let mut tx = api.tokio().start_transaction();
        for id in 0..3 {
            tx.insert(&table, &row(id)).unwrap();
        }
        {
            let mut execute = Box::pin(tx.execute(ExecType::NoCommit));
            let first = std::future::poll_fn(|cx| Poll::Ready(execute.as_mut().poll(cx))).await;
            assert!(
                first.is_pending(),
                "the execute waits for its answer: {first:?}"
            );
        }
        drop(tx);
    });
    let dropped = api.client_stats().since(&start);
    assert_eq!(dropped[PkOpCount], 3, "{dropped:?}");
    assert_eq!(dropped[TransAbortCount], 1, "{dropped:?}");
    // An asynchronous executor dropped with an execute in flight.
    let start = api.client_stats();
    {
        let mut executor = api.async_executor();
        let mut tx = api.start_transaction().unwrap();
        for id in 10..13 {
            tx.insert(&table, &row(id)).unwrap();
        }
        (executor.prepare(tx, ExecType::NoCommit, AbortOption::AbortOnError, 1)).unwrap();
        executor.send();
    }
    let dropped = api.client_stats().since(&start);
    assert_eq!(dropped[PkOpCount], 3, "{dropped:?}");
    assert_eq!(dropped[TransAbortCount], 1, "{dropped:?}");
    assert_eq!(dropped[TransCloseCount], 1, "{dropped:?}");
}
