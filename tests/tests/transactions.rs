//! Proves NDB's transaction semantics on a real data node: NoCommit changes are private to their
//! transaction while CommittedRead sees the last committed value without waiting, Commit
//! publishes at once, Rollback (explicit or by dropping) undoes, lock waits end in error 266
//! after TransactionDeadlockDetectionTimeout, an idle transaction is aborted after
//! TransactionInactiveTimeout and frees its locks, duplicate inserts get 630, missing rows 626,
//! IgnoreError reports errors per operation, and a transaction defining more writes than
//! MaxDMLOperationsPerTransaction is aborted with 261, and a row locked or written past the data
//! node's MaxNoOfLocalOperations is refused with 1217.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use rndb_api::{
    AbortOption, Cluster, ColumnDef, ColumnType, ExecType, LockMode, Table, TableDef, Value,
};
use rndb_config::{DataNodeConfig, NodeId};
use rndb_tests::ops::{insert_committed, read_committed, read_with, recreate_table};
use rndb_tests::{assert_ndb_code, wait_until, ClusterSpec, TestCluster};

/// A lock wait short enough that 266 tests finish quickly.
const SHORT_DEADLOCK_TIMEOUT_MS: u32 = 200;
/// A lock wait far longer than any test step, so a read that waits shows up as a failure.
const LONG_DEADLOCK_TIMEOUT_MS: u32 = 20_000;
/// How much earlier than the test's clock the data node may date a request: a turn of its loop
/// that did not sleep takes its time from the start of its wait, a spin of a few microseconds
/// before the request arrived. Lower bounds on a timeout allow this much.
const NODE_CLOCK_SLACK: Duration = Duration::from_millis(1);

fn start(spec: ClusterSpec) -> (TestCluster, Cluster, Table) {
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let def = TableDef::new(
        "accounts",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("balance", ColumnType::Int64),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");
    let rows: Vec<Vec<Value>> = (1..=3).map(|id| row(id, 10 * i64::from(id))).collect();
    insert_committed(&api, &table, &rows).expect("insert the first rows");
    (cluster, api, table)
}

fn row(id: u32, balance: i64) -> Vec<Value> {
    vec![Value::UInt32(id), Value::Int64(balance)]
}

fn key(id: u32) -> [Value; 1] {
    [Value::UInt32(id)]
}

/// The one data node's config, as the cluster runs it.
fn data_node(cluster: &TestCluster) -> &DataNodeConfig {
    cluster
        .config()
        .data_node(NodeId(1))
        .expect("the cluster has data node 1")
}

/// TransactionDeadlockDetectionTimeout as the data node reads it from the config.
fn deadlock_timeout(cluster: &TestCluster) -> Duration {
    Duration::from_millis(u64::from(
        data_node(cluster).transaction_deadlock_detection_timeout_ms,
    ))
}

/// Asserts that a request that took `elapsed` waited at least `timeout` (less the data node's
/// clock slack) before it failed: proof that a wait happened, not an error at once.
#[track_caller]
fn assert_waited(elapsed: Duration, timeout: Duration, what: &str) {
    assert!(
        elapsed + NODE_CLOCK_SLACK >= timeout,
        "{what} ended after {elapsed:?}, before the timeout of {timeout:?}"
    );
}

/// The balance column of a committed row.
#[track_caller]
fn committed_balance(api: &Cluster, table: &Table, id: u32) -> Value {
    read_committed(api, table, &key(id)).expect("read the committed row")[1].clone()
}

#[test]
fn no_commit_changes_are_private_and_commit_publishes_them() {
    let spec = ClusterSpec::new().deadlock_timeout_ms(LONG_DEADLOCK_TIMEOUT_MS);
    let (_cluster, api, table) = start(spec);
    let mut writer = api.start_transaction().expect("start");
    writer
        .update(&table, &key(1), &[(1, Value::Int64(11))])
        .expect("define");
    writer
        .execute(ExecType::NoCommit)
        .expect("update without commit");

    let own = writer
        .read(&table, &key(1), LockMode::Exclusive)
        .expect("define");
    writer
        .execute(ExecType::NoCommit)
        .expect("read inside the transaction");
    assert_eq!(
        writer.row(own).expect("row")[1],
        Value::Int64(11),
        "a transaction sees itself"
    );

    // A CommittedRead that waited for the lock would fail with 266 after 20 s instead.
    assert_eq!(
        committed_balance(&api, &table, 1),
        Value::Int64(10),
        "others see the old value"
    );

    writer.execute(ExecType::Commit).expect("commit");
    assert_eq!(
        committed_balance(&api, &table, 1),
        Value::Int64(11),
        "commit publishes at once"
    );
}

#[test]
fn rollback_undoes_every_change() {
    let (_cluster, api, table) = start(ClusterSpec::new());
    let mut transaction = api.start_transaction().expect("start");
    transaction
        .update(&table, &key(1), &[(1, Value::Int64(-1))])
        .expect("define");
    transaction.insert(&table, &row(4, 40)).expect("define");
    transaction.delete(&table, &key(2)).expect("define");
    transaction
        .execute(ExecType::NoCommit)
        .expect("change without commit");
    transaction.execute(ExecType::Rollback).expect("roll back");
    assert_ndb_code(
        transaction.execute(ExecType::Commit),
        4114,
        "execute after rollback",
    );

    assert_eq!(committed_balance(&api, &table, 1), Value::Int64(10));
    assert_eq!(committed_balance(&api, &table, 2), Value::Int64(20));
    assert_ndb_code(
        read_committed(&api, &table, &key(4)),
        626,
        "the insert was undone",
    );
    read_with(&api, &table, &key(1), LockMode::Exclusive).expect("the locks were released");
}

#[test]
fn dropping_an_open_transaction_rolls_it_back_and_frees_its_locks() {
    let spec = ClusterSpec::new().deadlock_timeout_ms(SHORT_DEADLOCK_TIMEOUT_MS);
    let (_cluster, api, table) = start(spec);
    let mut transaction = api.start_transaction().expect("start");
    transaction
        .update(&table, &key(3), &[(1, Value::Int64(0))])
        .expect("define");
    transaction
        .execute(ExecType::NoCommit)
        .expect("update without commit");
    drop(transaction);
    let locked = read_with(&api, &table, &key(3), LockMode::Exclusive).expect("lock after drop");
    assert_eq!(locked[1], Value::Int64(30), "the update was rolled back");
}

#[test]
fn reading_a_missing_row_is_626() {
    let (_cluster, api, table) = start(ClusterSpec::new());
    for lock in [LockMode::CommittedRead, LockMode::Read, LockMode::Exclusive] {
        assert_ndb_code(
            read_with(&api, &table, &key(999), lock),
            626,
            "read a missing row",
        );
    }
}

#[test]
fn a_lock_wait_ends_in_266_after_the_deadlock_timeout() {
    let spec = ClusterSpec::new().deadlock_timeout_ms(SHORT_DEADLOCK_TIMEOUT_MS);
    let (cluster, api, table) = start(spec);
    let timeout = deadlock_timeout(&cluster);
    assert_eq!(
        timeout,
        Duration::from_millis(SHORT_DEADLOCK_TIMEOUT_MS.into())
    );
    let mut holder = api.start_transaction().expect("start");
    holder
        .update(&table, &key(2), &[(1, Value::Int64(21))])
        .expect("define");
    holder
        .execute(ExecType::NoCommit)
        .expect("take the exclusive lock");

    for lock in [LockMode::Exclusive, LockMode::Read] {
        let began = Instant::now();
        let result = read_with(&api, &table, &key(2), lock);
        let waited = began.elapsed();
        let error = result.expect_err("a locked row cannot be read with a lock");
        assert_waited(waited, timeout, &format!("a {lock:?} read of a locked row"));
        assert_eq!(
            error.code(),
            Some(266),
            "{lock:?} read of a locked row: {error}"
        );
        assert!(error.is_temporary(), "266 is temporary: {error}");
    }
    assert_eq!(
        committed_balance(&api, &table, 2),
        Value::Int64(20),
        "CommittedRead never waits"
    );

    holder
        .execute(ExecType::Rollback)
        .expect("release the lock");
    read_with(&api, &table, &key(2), LockMode::Exclusive).expect("lock the released row");
}

#[test]
fn inserting_a_key_another_transaction_inserted_waits_then_266() {
    let spec = ClusterSpec::new().deadlock_timeout_ms(SHORT_DEADLOCK_TIMEOUT_MS);
    let (cluster, api, table) = start(spec);
    let mut first = api.start_transaction().expect("start");
    first.insert(&table, &row(7, 70)).expect("define");
    first
        .execute(ExecType::NoCommit)
        .expect("insert without commit");

    let began = Instant::now();
    let second = insert_committed(&api, &table, &[row(7, 71)]);
    assert_waited(
        began.elapsed(),
        deadlock_timeout(&cluster),
        "an insert of a locked key",
    );
    assert_ndb_code(second, 266, "insert while locked");
    first
        .execute(ExecType::Commit)
        .expect("commit the first insert");
    assert_eq!(committed_balance(&api, &table, 7), Value::Int64(70));
}

#[test]
fn inserting_a_key_another_transaction_commits_is_630() {
    let (_cluster, api, table) = start(ClusterSpec::new());
    assert_ndb_code(
        insert_committed(&api, &table, &[row(1, 0)]),
        630,
        "insert an existing key",
    );

    let mut first = api.start_transaction().expect("start");
    first.insert(&table, &row(8, 80)).expect("define");
    first
        .execute(ExecType::NoCommit)
        .expect("insert without commit");
    let (ready_tx, ready_rx) = mpsc::channel();
    let second = std::thread::scope(|scope| {
        let second = scope.spawn(|| {
            ready_tx.send(()).expect("signal the main thread");
            insert_committed(&api, &table, &[row(8, 81)])
        });
        ready_rx.recv().expect("the second inserter started");
        // Whether the second insert arrives before or after this commit, it must get 630:
        // either it waited for the lock and then found the row, or it found the row at once.
        first
            .execute(ExecType::Commit)
            .expect("commit the first insert");
        second.join().expect("the second inserter did not panic")
    });
    assert_ndb_code(second, 630, "insert a key another transaction committed");
    assert_eq!(committed_balance(&api, &table, 8), Value::Int64(80));
}

#[test]
fn an_idle_transaction_is_aborted_and_its_locks_released() {
    let spec = ClusterSpec::new()
        .deadlock_timeout_ms(SHORT_DEADLOCK_TIMEOUT_MS)
        .inactive_timeout_ms(500);
    let (cluster, api, table) = start(spec);
    let inactive =
        Duration::from_millis(data_node(&cluster).transaction_inactive_timeout_ms.into());
    assert_eq!(inactive, Duration::from_millis(500));
    let mut idle = api.start_transaction().expect("start");
    idle.update(&table, &key(1), &[(1, Value::Int64(-100))])
        .expect("define");
    // The data node counts idleness from the last signal of the transaction, which it receives
    // after this instant.
    let last_activity = Instant::now();
    idle.execute(ExecType::NoCommit)
        .expect("take the lock and go idle");

    // Each try waits in the lock queue until the lock is released or its own wait times out
    // (266): a try that gets the lock got it when the abort released it, so the time it
    // succeeds is (within one lock grant) the time of the abort.
    let mut waits_timed_out = 0;
    let locked = wait_until(
        "the idle transaction's lock to be released",
        Duration::from_secs(20),
        || match read_with(&api, &table, &key(1), LockMode::Exclusive) {
            Ok(row) => Ok(Some(row)),
            Err(e) if e.code() == Some(266) => {
                waits_timed_out += 1;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        },
    )
    .expect("the data node aborts the idle transaction");
    assert_waited(
        last_activity.elapsed(),
        inactive,
        "the idle transaction's abort",
    );
    assert!(
        waits_timed_out > 0,
        "the lock was held long enough for a lock wait ({SHORT_DEADLOCK_TIMEOUT_MS} ms) to time out"
    );
    assert_eq!(
        locked[1],
        Value::Int64(10),
        "the idle transaction's update was undone"
    );
    let late = idle.execute(ExecType::Commit);
    assert!(
        late.is_err(),
        "an aborted transaction cannot commit, got {late:?}"
    );
    assert_eq!(committed_balance(&api, &table, 1), Value::Int64(10));
}

#[test]
fn ignore_error_reports_each_operation_and_commits_the_rest() {
    let (_cluster, api, table) = start(ClusterSpec::new());
    let mut transaction = api.start_transaction().expect("start");
    let found = transaction
        .read(&table, &key(1), LockMode::Read)
        .expect("define");
    let missing = transaction
        .read(&table, &key(99), LockMode::Read)
        .expect("define");
    let duplicate = transaction.insert(&table, &row(2, 0)).expect("define");
    let fresh = transaction.insert(&table, &row(5, 50)).expect("define");
    let absent = transaction
        .update(&table, &key(98), &[(1, Value::Int64(1))])
        .expect("define");
    transaction
        .execute_with(ExecType::Commit, AbortOption::IgnoreError)
        .expect("execute");

    assert!(transaction.op_error(found).is_none());
    assert_eq!(transaction.row(found).expect("row")[1], Value::Int64(10));
    assert_eq!(transaction.op_error(missing).map(|e| e.code), Some(626));
    assert_eq!(transaction.op_error(duplicate).map(|e| e.code), Some(630));
    assert!(transaction.op_error(fresh).is_none());
    assert_eq!(transaction.op_error(absent).map(|e| e.code), Some(626));
    assert_eq!(
        committed_balance(&api, &table, 5),
        Value::Int64(50),
        "the good insert committed"
    );
    assert_eq!(
        committed_balance(&api, &table, 2),
        Value::Int64(20),
        "the duplicate changed nothing"
    );
}

#[test]
fn abort_on_error_aborts_the_whole_transaction() {
    let (_cluster, api, table) = start(ClusterSpec::new());
    let mut transaction = api.start_transaction().expect("start");
    transaction.insert(&table, &row(6, 60)).expect("define");
    transaction.insert(&table, &row(2, 0)).expect("define");
    let error = transaction
        .execute(ExecType::Commit)
        .expect_err("the duplicate aborts");
    assert_eq!(error.code(), Some(630), "{error}");
    assert_ndb_code(
        read_committed(&api, &table, &key(6)),
        626,
        "nothing was committed",
    );
}

#[test]
fn max_dml_operations_per_transaction_aborts_the_transaction_past_it_with_261() {
    const LIMIT: u32 = 32;
    let spec = ClusterSpec::new().data_node_param("MaxDMLOperationsPerTransaction", "32");
    let (cluster, api, table) = start(spec);
    assert_eq!(
        data_node(&cluster).max_dml_operations_per_transaction,
        LIMIT
    );
    // Reads do not count: the limit's worth of writes and as many reads commit.
    let mut transaction = api.start_transaction().expect("start");
    for id in 0..LIMIT {
        transaction
            .insert(&table, &row(100 + id, 1))
            .expect("define");
        transaction
            .read(&table, &key(1), LockMode::Read)
            .expect("define");
    }
    transaction.execute(ExecType::Commit).expect("at the limit");
    assert_eq!(committed_balance(&api, &table, 131), Value::Int64(1));

    // Counted over the whole transaction: the first execute's writes are undone with it, and
    // an earlier operation's error (626, ignored) does not hide why it aborted.
    let mut transaction = api.start_transaction().expect("start");
    for id in 0..LIMIT - 1 {
        transaction
            .update(&table, &key(100 + id), &[(1, Value::Int64(2))])
            .expect("define");
    }
    transaction
        .execute(ExecType::NoCommit)
        .expect("below the limit");
    transaction.delete(&table, &key(999)).expect("define");
    transaction.insert(&table, &row(200, 1)).expect("define");
    let error = transaction
        .execute_with(ExecType::Commit, AbortOption::IgnoreError)
        .expect_err("one past the limit");
    assert_eq!(error.code(), Some(261), "{error}");
    assert!(
        error
            .to_string()
            .contains("MaxDMLOperationsPerTransaction=32"),
        "{error}"
    );
    drop(transaction);
    assert_eq!(
        committed_balance(&api, &table, 100),
        Value::Int64(1),
        "updates undone"
    );
    assert_ndb_code(
        read_committed(&api, &table, &key(200)),
        626,
        "insert undone",
    );

    // The next transaction starts from zero.
    let mut transaction = api.start_transaction().expect("start");
    transaction.insert(&table, &row(200, 7)).expect("define");
    transaction.execute(ExecType::Commit).expect("a new count");
    assert_eq!(committed_balance(&api, &table, 200), Value::Int64(7));
}

#[test]
fn max_no_of_local_operations_refuses_a_row_past_it_with_1217_until_records_are_freed() {
    const LIMIT: u32 = 32;
    let spec = ClusterSpec::new().data_node_param("MaxNoOfLocalOperations", "32");
    let (cluster, api, table) = start(spec);
    assert_eq!(data_node(&cluster).max_no_of_local_operations, LIMIT);
    // Committed reads hold no record: many more than the limit in one transaction commit.
    let mut reader = api.start_transaction().expect("start");
    for _ in 0..3 * LIMIT {
        reader
            .read(&table, &key(1), LockMode::CommittedRead)
            .expect("define");
    }
    reader.execute(ExecType::Commit).expect("committed reads");

    // One transaction holds 30 records: 29 rows written, one locked by a read.
    let mut holder = api.start_transaction().expect("start");
    for id in 0..29 {
        holder.insert(&table, &row(100 + id, 1)).expect("define");
    }
    holder
        .read(&table, &key(1), LockMode::Read)
        .expect("define");
    holder.execute(ExecType::NoCommit).expect("30 records");
    // Another takes the last two and is refused the next.
    let second = |api: &Cluster| {
        let mut t = api.start_transaction().expect("start");
        t.update(&table, &key(2), &[(1, Value::Int64(22))])
            .expect("define");
        t.update(&table, &key(3), &[(1, Value::Int64(33))])
            .expect("define");
        t.insert(&table, &row(300, 3)).expect("define");
        t.execute(ExecType::Commit)
    };
    let error = second(&api).expect_err("a 33rd record");
    assert_eq!(error.code(), Some(1217), "{error}");
    assert!(error.is_temporary(), "{error}");
    assert!(
        error.to_string().contains("MaxNoOfLocalOperations=32"),
        "{error}"
    );
    assert_ndb_code(
        read_committed(&api, &table, &key(300)),
        626,
        "the refused transaction's insert",
    );
    assert_eq!(committed_balance(&api, &table, 2), Value::Int64(20));
    // Once the holder commits, its records are free and the retry commits.
    holder.execute(ExecType::Commit).expect("commit the holder");
    second(&api).expect("the retry");
    assert_eq!(committed_balance(&api, &table, 300), Value::Int64(3));
    assert_eq!(committed_balance(&api, &table, 2), Value::Int64(22));
}
