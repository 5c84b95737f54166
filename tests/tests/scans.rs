//! Proves that scans on a real data node return exactly the rows a model says: 100 000 rows
//! through small batches, early closes that free the node's scan records (MaxNoOfConcurrentScans
//! is enforced with 245, MaxNoOfLocalScans with 291), pushed-down filters equal to a client-side
//! filter of a full scan (a property test), CommittedRead scans that never wait for writers, and
//! locking scans whose rows stay locked until the transaction ends and can be updated in it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use rndb_api::{
    Cluster, CmpOp, ColumnDef, ColumnType, ExecType, Filter, LockMode, ScanOptions, Table,
    TableDef, Value,
};
use rndb_tests::ops::{insert_committed, read_committed, recreate_table};
use rndb_tests::{assert_ndb_code, ClusterSpec, TestCluster};

/// `items(id key, n Int64, s Varchar nullable, f Float64, m UInt32 nullable)`.
fn items_def() -> TableDef {
    TableDef::new(
        "items",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("n", ColumnType::Int64),
            ColumnDef::nullable("s", ColumnType::Varchar(8)),
            ColumnDef::new("f", ColumnType::Float64),
            ColumnDef::nullable("m", ColumnType::UInt32),
        ],
    )
}

fn item(id: u32) -> Vec<Value> {
    vec![
        Value::UInt32(id),
        Value::Int64(i64::from(id % 50) - 25),
        match id % 6 {
            0 => Value::Null,
            k => Value::Varchar(format!("s{}", (id * k) % 9)),
        },
        Value::Float64(f64::from(id % 13) / 4.0 - 1.0),
        match id % 4 {
            0 => Value::Null,
            _ => Value::UInt32(id % 10),
        },
    ]
}

/// Loads rows `0..count` in transactions of 1000.
fn load(api: &Cluster, table: &Table, count: u32) {
    let mut first = 0;
    while first < count {
        let rows: Vec<_> = (first..(first + 1000).min(count)).map(item).collect();
        insert_committed(api, table, &rows).expect("load rows");
        first += 1000;
    }
}

/// Runs a full-table scan in a transaction of its own and returns its rows sorted by id.
fn scan_all(api: &Cluster, table: &Table, options: &ScanOptions) -> Vec<Vec<Value>> {
    let mut tx = api.start_transaction().unwrap();
    let rows: Vec<_> = tx
        .scan_table(table, options)
        .expect("start the scan")
        .collect::<Result<_, _>>()
        .expect("scan the table");
    tx.execute(ExecType::Commit).unwrap();
    sorted_by_id(rows)
}

fn sorted_by_id(mut rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
    rows.sort_by_key(|r| match r[0] {
        Value::UInt32(id) => id,
        _ => u32::MAX,
    });
    rows
}

#[test]
fn a_hundred_thousand_rows_in_small_batches() {
    let spec = ClusterSpec::new().data_memory("64M");
    let cluster = TestCluster::start(spec).unwrap();
    let api = cluster.connect().unwrap();
    let table = recreate_table(&api, &items_def()).unwrap();
    load(&api, &table, 100_000);
    for (batch_rows, parallelism) in [(16, 0), (100, 1)] {
        let options = ScanOptions {
            batch_rows: Some(batch_rows),
            batch_bytes: Some(2048),
            parallelism,
            ..ScanOptions::default()
        };
        let rows = scan_all(&api, &table, &options);
        assert_eq!(
            rows.len(),
            100_000,
            "batch {batch_rows}, parallelism {parallelism}"
        );
        for (i, row) in rows.iter().enumerate().step_by(997) {
            assert_eq!(row, &item(i as u32));
        }
        assert!(rows.windows(2).all(|w| w[0][0] != w[1][0]), "no row twice");
    }
}

#[test]
fn closing_early_frees_the_scan_and_the_limit_holds() {
    let spec = ClusterSpec::new().data_node_param("MaxNoOfConcurrentScans", "2");
    let cluster = TestCluster::start(spec).unwrap();
    let api = cluster.connect().unwrap();
    let table = recreate_table(&api, &items_def()).unwrap();
    load(&api, &table, 2000);
    let small = ScanOptions {
        batch_rows: Some(10),
        ..ScanOptions::default()
    };
    // Twenty scans closed after a few rows, explicitly or by dropping: none stays open.
    for i in 0..20 {
        let mut tx = api.start_transaction().unwrap();
        let mut scan = tx.scan_table(&table, &small).unwrap();
        for _ in 0..15 {
            scan.next().expect("a row").expect("no error");
        }
        if i % 2 == 0 {
            scan.close().expect("close the scan");
        } else {
            drop(scan);
        }
        tx.execute(ExecType::Commit).unwrap();
    }
    let mut tx = api.start_transaction().unwrap();
    let first = tx.scan_table(&table, &small).unwrap();
    let second = tx.scan_table(&table, &small).unwrap();
    assert_ndb_code(
        tx.scan_table(&table, &small).map(|_| ()),
        245,
        "a third concurrent scan",
    );
    first.close().unwrap();
    let third = tx.scan_table(&table, &small).expect("room after a close");
    assert_eq!(third.count(), 2000);
    drop(second);
    tx.execute(ExecType::Commit).unwrap();
}

#[test]
fn max_no_of_local_scans_bounds_the_fragment_scans_open_scans_hold_with_291() {
    let spec = ClusterSpec::new()
        .data_node_param("MaxNoOfLocalScans", "32")
        .data_node_param("MaxNoOfConcurrentScans", "100");
    let cluster = TestCluster::start(spec).unwrap();
    let api = cluster.connect().unwrap();
    let table = recreate_table(&api, &items_def()).unwrap();
    load(&api, &table, 500);
    let one_at_a_time = ScanOptions {
        batch_rows: Some(1),
        parallelism: 1,
        ..ScanOptions::default()
    };
    // Each open scan of parallelism 1 holds one fragment scan: 32 fit, the 33rd does not.
    let mut tx = api.start_transaction().unwrap();
    let mut open = Vec::new();
    for _ in 0..32 {
        let mut scan = tx.scan_table(&table, &one_at_a_time).unwrap();
        scan.next().expect("a row").expect("no error");
        open.push(scan);
    }
    let refused = tx.scan_table(&table, &one_at_a_time).map(|_| ());
    let detail = format!("{refused:?}");
    assert_ndb_code(refused, 291, "a 33rd fragment scan");
    assert!(detail.contains("MaxNoOfLocalScans=32"), "{detail}");
    // A closed scan gives its fragment scan back.
    open.pop().expect("an open scan").close().unwrap();
    let last = tx
        .scan_table(&table, &one_at_a_time)
        .expect("room after a close");
    assert_eq!(last.count(), 500);
    drop(open);
    tx.execute(ExecType::Commit).unwrap();
}

/// A client-side model of the filter semantics: a comparison with NULL is false.
fn model_matches(filter: &Filter, row: &[Value]) -> bool {
    match filter {
        Filter::Cmp { column, op, value } => {
            let v = &row[usize::from(*column)];
            let ordering = match (v, value) {
                (Value::Int64(a), Value::Int64(b)) => a.partial_cmp(b),
                (Value::UInt32(a), Value::UInt32(b)) => a.partial_cmp(b),
                (Value::Float64(a), Value::Float64(b)) => a.partial_cmp(b),
                (Value::Varchar(a), Value::Varchar(b)) => a.as_bytes().partial_cmp(b.as_bytes()),
                _ => None,
            };
            let Some(o) = ordering else { return false };
            match op {
                CmpOp::Eq => o.is_eq(),
                CmpOp::Ne => o.is_ne(),
                CmpOp::Lt => o.is_lt(),
                CmpOp::Le => o.is_le(),
                CmpOp::Gt => o.is_gt(),
                CmpOp::Ge => o.is_ge(),
            }
        }
        Filter::IsNull(c) => row[usize::from(*c)] == Value::Null,
        Filter::IsNotNull(c) => row[usize::from(*c)] != Value::Null,
        Filter::Group { op, children } => {
            let mut values = children.iter().map(|c| model_matches(c, row));
            match op {
                rndb_api::GroupOp::And => values.all(|v| v),
                rndb_api::GroupOp::Or => values.any(|v| v),
                rndb_api::GroupOp::Nand => !values.all(|v| v),
                rndb_api::GroupOp::Nor => !values.any(|v| v),
            }
        }
    }
}

fn leaf() -> impl Strategy<Value = Filter> {
    let op = prop_oneof![
        Just(CmpOp::Eq),
        Just(CmpOp::Ne),
        Just(CmpOp::Lt),
        Just(CmpOp::Le),
        Just(CmpOp::Gt),
        Just(CmpOp::Ge)
    ];
    prop_oneof![
        (op.clone(), -26i64..26).prop_map(|(op, v)| Filter::cmp(1, op, Value::Int64(v))),
        (op.clone(), 0u32..9).prop_map(|(op, v)| Filter::cmp(
            2,
            op,
            Value::Varchar(format!("s{v}"))
        )),
        (op.clone(), -4i32..12).prop_map(|(op, v)| Filter::cmp(
            3,
            op,
            Value::Float64(f64::from(v) / 4.0)
        )),
        (op, 0u32..11).prop_map(|(op, v)| Filter::cmp(4, op, Value::UInt32(v))),
        (2u16..5).prop_map(Filter::IsNull),
        (2u16..5).prop_map(Filter::IsNotNull),
    ]
}

fn filter() -> impl Strategy<Value = Filter> {
    let group = prop_oneof![
        Just(rndb_api::GroupOp::And),
        Just(rndb_api::GroupOp::Or),
        Just(rndb_api::GroupOp::Nand),
        Just(rndb_api::GroupOp::Nor)
    ];
    leaf().prop_recursive(3, 16, 4, move |inner| {
        (group.clone(), proptest::collection::vec(inner, 0..4))
            .prop_map(|(op, children)| Filter::Group { op, children })
    })
}

#[test]
fn filters_equal_a_client_side_filter_of_a_full_scan() {
    let cluster = TestCluster::start(ClusterSpec::new()).unwrap();
    let api = cluster.connect().unwrap();
    let table = recreate_table(&api, &items_def()).unwrap();
    load(&api, &table, 400);
    let all = scan_all(&api, &table, &ScanOptions::default());
    assert_eq!(all.len(), 400);
    let config = ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest::test_runner::TestRunner::new(config)
        .run(&(filter(), 1u32..50), |(filter, batch_rows)| {
            let options = ScanOptions {
                filter: Some(filter.clone()),
                batch_rows: Some(batch_rows),
                ..ScanOptions::default()
            };
            let got = scan_all(&api, &table, &options);
            let expected: Vec<_> = all
                .iter()
                .filter(|r| model_matches(&filter, r))
                .cloned()
                .collect();
            prop_assert_eq!(got, expected);
            Ok(())
        })
        .expect("filtered scans match the model");
    // A filter that names a missing column or compares with the wrong type is refused.
    let bad = ScanOptions {
        filter: Some(Filter::cmp(1, CmpOp::Eq, Value::UInt32(1))),
        ..ScanOptions::default()
    };
    assert_ndb_code(
        api.start_transaction()
            .unwrap()
            .scan_table(&table, &bad)
            .map(|_| ()),
        4209,
        "type mismatch",
    );
}

#[test]
fn committed_read_scans_never_wait_for_writers() {
    let cluster = TestCluster::start(ClusterSpec::new().deadlock_timeout_ms(2000)).unwrap();
    let api = cluster.connect().unwrap();
    let table = recreate_table(&api, &items_def()).unwrap();
    load(&api, &table, 3000);
    // A writer holds exclusive locks on a third of the rows, uncommitted, for the whole test.
    let mut holder = api.start_transaction().unwrap();
    for id in (0..3000).step_by(3) {
        holder
            .update(&table, &[Value::UInt32(id)], &[(1, Value::Int64(999))])
            .unwrap();
    }
    holder.delete(&table, &[Value::UInt32(1)]).unwrap();
    holder.execute(ExecType::NoCommit).unwrap();
    // Other writers keep committing changes to other rows while the scans run.
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let writer = cluster.connect().unwrap();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let id = 3 * (n % 999) + 2;
                let mut tx = writer.start_transaction().unwrap();
                tx.update(&table, &[Value::UInt32(id)], &[(4, Value::UInt32(n))])
                    .unwrap();
                tx.execute(ExecType::Commit).unwrap();
                n += 1;
            }
        });
        for _ in 0..5 {
            let options = ScanOptions {
                batch_rows: Some(64),
                ..ScanOptions::default()
            };
            let rows = scan_all(&api, &table, &options);
            assert_eq!(
                rows.len(),
                3000,
                "every committed row once, the uncommitted delete unseen"
            );
            assert!(
                rows.iter().all(|r| r[1] != Value::Int64(999)),
                "no uncommitted value seen"
            );
        }
        stop.store(true, Ordering::Relaxed);
    });
    holder.execute(ExecType::Rollback).unwrap();
}

#[test]
fn locking_scans_hold_their_locks_and_rows_can_be_updated() {
    let cluster = TestCluster::start(ClusterSpec::new().deadlock_timeout_ms(400)).unwrap();
    let api = cluster.connect().unwrap();
    let table = recreate_table(&api, &items_def()).unwrap();
    load(&api, &table, 100);
    let only_small = Filter::cmp(0, CmpOp::Lt, Value::UInt32(10));
    let options = ScanOptions {
        lock: LockMode::Exclusive,
        filter: Some(only_small.clone()),
        batch_rows: Some(3),
        ..ScanOptions::default()
    };
    let mut tx = api.start_transaction().unwrap();
    let rows: Vec<_> = tx
        .scan_table(&table, &options)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 10);
    // The scanned rows are locked; rows the filter refused are not.
    let mut other = api.start_transaction().unwrap();
    other
        .update(&table, &[Value::UInt32(50)], &[(1, Value::Int64(7))])
        .unwrap();
    other
        .execute(ExecType::Commit)
        .expect("an unscanned row is free");
    let mut other = api.start_transaction().unwrap();
    other
        .read(&table, &[Value::UInt32(5)], LockMode::Read)
        .unwrap();
    assert_ndb_code(
        other.execute(ExecType::Commit),
        266,
        "read of a row locked by the scan",
    );
    // The scanning transaction updates and deletes what it read, then commits.
    for row in &rows {
        tx.update(&table, &row[..1], &[(1, Value::Int64(-100))])
            .unwrap();
    }
    tx.delete(&table, &[Value::UInt32(9)]).unwrap();
    tx.execute(ExecType::Commit).unwrap();
    assert_eq!(
        read_committed(&api, &table, &[Value::UInt32(3)]).unwrap()[1],
        Value::Int64(-100)
    );
    assert_ndb_code(
        read_committed(&api, &table, &[Value::UInt32(9)]),
        626,
        "deleted row",
    );

    // A Read scan waits for a row another transaction has locked, and goes on once it commits.
    let mut holder = api.start_transaction().unwrap();
    holder
        .update(&table, &[Value::UInt32(4)], &[(1, Value::Int64(44))])
        .unwrap();
    holder.execute(ExecType::NoCommit).unwrap();
    // The holder's lock is confirmed (its NoCommit execute returned). The scan runs on its own
    // thread and reports its outcome on a channel: it must not return while the lock is held
    // (a bounded check, well inside the 400 ms lock-wait timeout, so the wait cannot turn into
    // 266), and must return the committed value once the holder commits.
    let (started_tx, started_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut tx = api.start_transaction().unwrap();
            let read = ScanOptions {
                lock: LockMode::Read,
                ..options.clone()
            };
            started_tx.send(()).unwrap();
            let rows = tx
                .scan_table(&table, &read)
                .and_then(|scan| scan.collect::<Result<Vec<_>, _>>());
            if rows.is_ok() {
                tx.execute(ExecType::Commit).unwrap();
            }
            done_tx.send(rows).unwrap();
        });
        started_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the scanning thread starts");
        match done_rx.recv_timeout(Duration::from_millis(100)) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            other => {
                panic!("the Read scan returned while a row it must read was locked: {other:?}")
            }
        }
        holder.execute(ExecType::Commit).unwrap();
        let rows = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the scan goes on once the holder commits")
            .expect("the scan succeeds");
        let rows = sorted_by_id(rows);
        assert_eq!(rows.len(), 9);
        assert_eq!(
            rows[4][1],
            Value::Int64(44),
            "the scan read the committed value"
        );
    });

    // A scan that waits longer than TransactionDeadlockDetectionTimeout fails with 266.
    let mut holder = api.start_transaction().unwrap();
    holder
        .update(&table, &[Value::UInt32(2)], &[(1, Value::Int64(2))])
        .unwrap();
    holder.execute(ExecType::NoCommit).unwrap();
    let mut tx = api.start_transaction().unwrap();
    let result: Result<Vec<_>, _> = match tx.scan_table(&table, &options) {
        Ok(scan) => scan.collect(),
        Err(e) => Err(e),
    };
    assert_ndb_code(result, 266, "a scan waiting on a held lock");
    holder.execute(ExecType::Rollback).unwrap();
}
