//! Proves the tokio interface of rndb-api: thousands of tasks on one current-thread runtime keep
//! their transactions in flight at once (all held at a locked row until every one was sent, on
//! one thread: the runtime's) and each completes with its own rows; a future dropped while its
//! execute waits rolls the transaction back at once, so another transaction locks its rows long
//! before the deadlock timeout; scans read as streams batch by batch; the dictionary calls
//! (tables, indexes, the list of tables) are awaited; errors carry the same NDB codes as
//! the blocking API's; and event operations, plain, merged and of a named event, are awaited
//! in spawned tasks.

use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rndb_api::{
    AbortOption, Cluster, ColumnDef, ColumnType, EventDef, EventType, ExecType, IndexDef, LockMode,
    ScanOptions, Table, TableDef, TableEvents, TokioScan, Value,
};
use rndb_tests::ops::{insert_committed, read_with, recreate_table};
use rndb_tests::{assert_ndb_code, ClusterSpec, TestCluster};

/// TransactionDeadlockDetectionTimeout for these tests: far longer than any wait they allow, so
/// a lock left behind shows as a wait this long (and 266), never as success.
const DEADLOCK_TIMEOUT_MS: u32 = 20_000;
/// Tasks started at once by `thousands_of_tasks_share_one_thread`.
const TASK_COUNT: u32 = 4000;
/// A row apart from the ids the tests insert, locked by a second API node to hold executes.
const GATE_ID: u32 = u32::MAX;

fn items_def() -> TableDef {
    TableDef::new(
        "items",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Int64),
        ],
    )
}

fn row(id: u32, v: i64) -> Vec<Value> {
    vec![Value::UInt32(id), Value::Int64(v)]
}

/// A current-thread runtime with timers, as the tokio interface needs.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build a current-thread runtime")
}

/// Starts the cluster, connects two API nodes (the second one leaked, so that spawned tasks
/// may share it) and creates `items`.
fn start(spec: ClusterSpec) -> (TestCluster, &'static Cluster, Cluster, Table) {
    let cluster = TestCluster::start(spec.deadlock_timeout_ms(DEADLOCK_TIMEOUT_MS))
        .expect("start the cluster");
    let gatekeeper = cluster.connect().expect("connect the gatekeeper");
    let table = recreate_table(&gatekeeper, &items_def()).expect("create items");
    let api: &'static Cluster = Box::leak(Box::new(cluster.connect().expect("connect")));
    (cluster, api, gatekeeper, table)
}

#[test]
fn thousands_of_tasks_share_one_thread() {
    let spec = ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .data_node_param("MaxNoOfConcurrentTransactions", "8192");
    let (_cluster, api, gatekeeper, table) = start(spec);
    insert_committed(&gatekeeper, &table, &[row(GATE_ID, 0)]).expect("insert the gate row");
    let mut gate = gatekeeper.start_transaction().expect("start the gate");
    gate.read(&table, &[Value::UInt32(GATE_ID)], LockMode::Exclusive)
        .expect("define the gate read");
    gate.execute(ExecType::NoCommit).expect("close the gate");

    runtime().block_on(async {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let sent = Rc::new(Cell::new(0u32));
                let done = Rc::new(Cell::new(0u32));
                let mut tasks = Vec::new();
                for id in 0..TASK_COUNT {
                    let (sent, done, table) = (sent.clone(), done.clone(), table.clone());
                    tasks.push(tokio::task::spawn_local(async move {
                        let mut tx = api.tokio().start_transaction();
                        tx.read(&table, &[Value::UInt32(GATE_ID)], LockMode::Read)?;
                        tx.insert(&table, &row(id, i64::from(id) * 3))?;
                        sent.set(sent.get() + 1);
                        let executed = tx.execute(ExecType::Commit).await;
                        done.set(done.get() + 1);
                        executed
                    }));
                }
                while sent.get() < TASK_COUNT {
                    tokio::task::yield_now().await;
                }
                // Every execute is on the wire, and none can complete while the gate is shut.
                tokio::time::sleep(Duration::from_millis(200)).await;
                assert_eq!(done.get(), 0, "executes completed past a locked row");
                gate.execute(ExecType::Commit).expect("open the gate");
                for task in tasks {
                    task.await.expect("task").expect("insert behind the gate");
                }
                assert_eq!(done.get(), TASK_COUNT);
            })
            .await;
    });
    // Each reads its own row back, again all at once.
    runtime().block_on(async {
        let reads = (0..TASK_COUNT).map(|id| {
            let table = table.clone();
            async move {
                let mut tx = api.tokio().start_transaction();
                let op = tx.read(&table, &[Value::UInt32(id)], LockMode::CommittedRead)?;
                tx.execute(ExecType::Commit).await?;
                Ok::<_, rndb_api::Error>(tx.row(op).map(<[Value]>::to_vec))
            }
        });
        let local = tokio::task::LocalSet::new();
        let handles: Vec<_> = reads.map(|read| local.spawn_local(read)).collect();
        local.await;
        for (id, handle) in (0..TASK_COUNT).zip(handles) {
            let found = handle.await.expect("task").expect("read");
            assert_eq!(found, Some(row(id, i64::from(id) * 3)), "row {id}");
        }
    });
}

/// Polls `future` once (which sends an execute) and drops it: `true` when it was still
/// waiting for its answer then, `false` when the answer had already come.
fn poll_once_and_drop<F: std::future::Future>(future: F) -> bool {
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    future.as_mut().poll(&mut cx).is_pending()
}

#[test]
fn a_dropped_execute_rolls_back_and_frees_its_locks() {
    let (_cluster, api, gatekeeper, table) = start(ClusterSpec::new());
    insert_committed(&gatekeeper, &table, &[row(1, 10), row(2, 20)]).expect("insert");
    runtime().block_on(async {
        // The answer may in principle come before the first poll returns; try until the
        // future is dropped while its execute is in flight.
        let mut dropped_in_flight = false;
        for _ in 0..100 {
            let mut tx = api.tokio().start_transaction();
            tx.update(&table, &[Value::UInt32(1)], &[(1, Value::Int64(11))])
                .expect("define the update");
            tx.execute(ExecType::NoCommit).await.expect("lock row 1");
            tx.read(&table, &[Value::UInt32(2)], LockMode::Exclusive)
                .expect("define the second read");
            dropped_in_flight = poll_once_and_drop(tx.execute(ExecType::NoCommit));
            assert_ndb_code(
                tx.execute(ExecType::Commit).await,
                4114,
                "execute after the dropped one",
            );
            // The transaction object still lives: its records on the data node must not.
            let started = Instant::now();
            let locked = read_with(
                &gatekeeper,
                &table,
                &[Value::UInt32(1)],
                LockMode::Exclusive,
            )
            .expect("lock row 1 after the drop");
            assert_eq!(locked, row(1, 10), "the update was rolled back");
            read_with(
                &gatekeeper,
                &table,
                &[Value::UInt32(2)],
                LockMode::Exclusive,
            )
            .expect("lock row 2 after the drop");
            let waited = started.elapsed();
            assert!(
                waited < Duration::from_millis(u64::from(DEADLOCK_TIMEOUT_MS / 2)),
                "the rows stayed locked for {waited:?}"
            );
            drop(tx);
            if dropped_in_flight {
                break;
            }
        }
        assert!(
            dropped_in_flight,
            "every answer came before the first poll returned"
        );
    });

    // A whole task aborted while its transaction is open between executes (it awaits
    // something else): dropping the transaction rolls it back.
    runtime().block_on(async {
        let table2 = table.clone();
        let (locked_tx, locked_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut tx = api.tokio().start_transaction();
            tx.update(&table2, &[Value::UInt32(1)], &[(1, Value::Int64(12))])?;
            tx.execute(ExecType::NoCommit).await?;
            let _ = locked_tx.send(());
            std::future::pending::<()>().await;
            tx.execute(ExecType::Commit).await
        });
        locked_rx.await.expect("the task locked row 1");
        task.abort();
        assert!(task.await.expect_err("aborted").is_cancelled());
    });
    let started = Instant::now();
    let locked = read_with(
        &gatekeeper,
        &table,
        &[Value::UInt32(1)],
        LockMode::Exclusive,
    )
    .expect("lock row 1 after the aborted task");
    assert_eq!(locked, row(1, 10));
    assert!(started.elapsed() < Duration::from_millis(u64::from(DEADLOCK_TIMEOUT_MS / 2)));
}

#[test]
fn scans_read_as_streams() {
    let (_cluster, api, gatekeeper, table) = start(ClusterSpec::new().data_nodes(2));
    let rows: Vec<Vec<Value>> = (0..1000).map(|id| row(id, i64::from(id) % 7)).collect();
    insert_committed(&gatekeeper, &table, &rows).expect("insert");
    runtime().block_on(async {
        let db = api.tokio();
        let index = db
            .create_index(&table, &IndexDef::ordered("items_v", &["v"]))
            .await
            .expect("create the index");
        assert_eq!(
            db.get_index(&table, "items_v").await.expect("get").id(),
            index.id()
        );
        // The dictionary's list, awaited, is the blocking API's.
        let listed = db.list_tables().await.expect("list tables");
        assert!(listed.iter().any(|o| o.name == "items"), "{listed:?}");
        assert_eq!(listed, gatekeeper.list_tables().expect("list (blocking)"));

        // A table scan in batches of 16 rows per fragment: every row once.
        let mut tx = db.start_transaction();
        let options = ScanOptions {
            batch_rows: Some(16),
            ..ScanOptions::default()
        };
        let scan = tx.scan_table(&table, &options).await.expect("scan");
        let mut ids: Vec<u32> = collect(scan)
            .await
            .into_iter()
            .map(|r| match r[0] {
                Value::UInt32(id) => id,
                ref other => panic!("id {other:?}"),
            })
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..1000).collect::<Vec<u32>>());

        // A sorted index scan: v in order across both data nodes' fragments.
        let options = ScanOptions {
            batch_rows: Some(8),
            sorted: true,
            ..ScanOptions::default()
        };
        let scan = tx.scan_index(&index, &options).await.expect("index scan");
        let values: Vec<i64> = collect(scan)
            .await
            .into_iter()
            .map(|r| match r[1] {
                Value::Int64(v) => v,
                ref other => panic!("v {other:?}"),
            })
            .collect();
        assert_eq!(values.len(), 1000);
        assert!(
            values.windows(2).all(|w| w[0] <= w[1]),
            "not in index order"
        );

        // A stream dropped half way closes its scan; the transaction goes on.
        let mut scan = tx.scan_table(&table, &options_rows(4)).await.expect("scan");
        assert!(scan.next_row().await.expect("a row").is_ok());
        drop(scan);
        tx.execute(ExecType::Commit)
            .await
            .expect("commit after the scans");
    });
}

fn options_rows(batch_rows: u32) -> ScanOptions {
    ScanOptions {
        batch_rows: Some(batch_rows),
        ..ScanOptions::default()
    }
}

/// Every row of `scan`, read through its `Stream` implementation.
async fn collect(mut scan: TokioScan<'_>) -> Vec<Vec<Value>> {
    use futures_core::Stream;
    let mut rows = Vec::new();
    while let Some(row) = std::future::poll_fn(|cx| Pin::new(&mut scan).poll_next(cx)).await {
        rows.push(row.expect("scan row"));
    }
    rows
}

#[test]
fn errors_carry_the_blocking_api_codes() {
    let (_cluster, api, gatekeeper, table) = start(ClusterSpec::new());
    insert_committed(&gatekeeper, &table, &[row(1, 1)]).expect("insert");
    runtime().block_on(async {
        let db = api.tokio();
        assert_ndb_code(
            db.get_table("no_such_table").await,
            709,
            "get a missing table",
        );
        assert_ndb_code(
            gatekeeper.get_table("no_such_table"),
            709,
            "blocking: get a missing table",
        );
        db.ping().await.expect("ping");

        let mut tx = db.start_transaction();
        tx.insert(&table, &row(1, 2)).expect("define");
        assert_ndb_code(tx.execute(ExecType::Commit).await, 630, "duplicate insert");
        assert_ndb_code(tx.execute(ExecType::Commit).await, 4114, "after the abort");

        let mut tx = db.start_transaction();
        tx.read(&table, &[Value::UInt32(99)], LockMode::Read)
            .expect("define");
        assert_ndb_code(
            tx.execute(ExecType::Commit).await,
            626,
            "read a missing row",
        );

        // IgnoreError: the failed operation reports alone, the rest commit.
        let mut tx = db.start_transaction();
        let missing = tx
            .delete(&table, &[Value::UInt32(98)])
            .expect("define the delete");
        let inserted = tx.insert(&table, &row(2, 2)).expect("define the insert");
        tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)
            .await
            .expect("commit, ignoring the failed delete");
        assert_eq!(tx.op_error(missing).map(|e| e.code), Some(626));
        assert!(tx.op_error(inserted).is_none());

        // Local checks fail before anything is sent, as in the blocking API.
        let mut tx = db.start_transaction();
        assert_ndb_code(
            tx.insert(&table, &[Value::UInt32(3)]),
            4116,
            "a row missing a column",
        );
        let dropped = db.drop_table("no_such_table").await;
        assert_ndb_code(dropped, 709, "drop a missing table");
    });
    let found = read_with(&gatekeeper, &table, &[Value::UInt32(2)], LockMode::Read).expect("read");
    assert_eq!(found, row(2, 2));
}

#[test]
fn event_operations_are_awaited_in_spawned_tasks() {
    let (_cluster, api, _gatekeeper, table) = start(ClusterSpec::new());
    let inserts = EventDef {
        events: TableEvents::INSERT,
        ..EventDef::new("items_inserts", "items")
    };
    api.create_event(&inserts).expect("create a named event");
    let rt = runtime();
    rt.block_on(async {
        let tokio = api.tokio();
        assert_eq!(
            tokio.get_event("items_inserts").await.expect("get"),
            inserts
        );
        let missing = tokio.get_event("nope").await.map(|_| ());
        assert_ndb_code(missing, 4710, "no such event");
        let mut named = tokio
            .create_event_operation_for("items_inserts")
            .await
            .expect("subscribe to the named event, awaited");
        let mut op = tokio
            .create_event_operation(&table)
            .await
            .expect("subscribe, awaited");
        let mut merged = tokio
            .create_event_operation_merged(&table)
            .await
            .expect("subscribe, merged and awaited");
        // Waiting for an epoch is a future: another task commits meanwhile.
        let writer = tokio::spawn(async move {
            let mut tx = api.tokio().start_transaction();
            tx.insert(&table, &row(7, 70)).expect("define");
            tx.execute(ExecType::Commit).await.expect("commit");
            tx.gci().expect("a writing commit's GCI")
        });
        let subscriber = tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..600 {
                if op
                    .poll_events(Duration::from_millis(100))
                    .await
                    .expect("poll")
                    .is_some()
                {
                    while let Some(event) = op.next_event() {
                        got.push(event);
                    }
                    break;
                }
            }
            got
        });
        let gci = writer.await.expect("the writer");
        let got = subscriber.await.expect("the subscriber");
        assert_eq!(got.len(), 1, "{got:#?}");
        assert_eq!(
            (got[0].epoch, got[0].values.clone()),
            (gci, Some(row(7, 70)))
        );
        let epoch = merged
            .poll_events(Duration::from_secs(60))
            .await
            .expect("poll the merged operation");
        assert_eq!(epoch, Some(gci));
        assert_eq!(
            merged.next_event().map(|e| e.values),
            Some(Some(row(7, 70)))
        );
        let epoch = named
            .poll_events(Duration::from_secs(60))
            .await
            .expect("poll");
        assert_eq!(epoch, Some(gci));
        assert_eq!(
            named.next_event().map(|e| e.event_type),
            Some(EventType::Insert)
        );
        // Nothing more comes: the timeout ends the wait.
        let before = Instant::now();
        assert_eq!(
            merged
                .poll_events(Duration::from_millis(300))
                .await
                .expect("poll"),
            None
        );
        assert!(before.elapsed() >= Duration::from_millis(300));
    });
}
