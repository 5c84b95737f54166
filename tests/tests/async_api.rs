//! Proves that one thread keeps many transactions in flight with the asynchronous executor
//! (NDB's executeAsynchPrepare / sendPollNdb) on one data node and on four: every execute
//! completes with its own rows and errors, the executor refuses more than
//! MaxNoOfConcurrentTransactions with 4006, and dropping it rolls back what was in flight.

use std::collections::BTreeMap;
use std::time::Duration;

use rndb_api::{
    AbortOption, AsyncExecutor, Cluster, ColumnDef, ColumnType, Completion, ExecType, LockMode,
    Table, TableDef, Value,
};
use rndb_tests::ops::recreate_table;
use rndb_tests::{assert_ndb_code, ClusterSpec, TestCluster};

/// How long a poll may wait for the completions it asks for.
const POLL_TIMEOUT: Duration = Duration::from_secs(10);

fn items_def() -> TableDef {
    TableDef::new(
        "items",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Int64),
        ],
    )
}

fn start(spec: ClusterSpec) -> (TestCluster, Cluster, Table) {
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &items_def()).expect("create items");
    (cluster, api, table)
}

/// Polls until every held execute completed; returns the completions by tag.
fn drain<'c>(executor: &mut AsyncExecutor<'c>) -> BTreeMap<u64, Completion<'c>> {
    let mut done = BTreeMap::new();
    while !executor.is_empty() {
        let batch = executor.send_poll(executor.len(), POLL_TIMEOUT);
        assert!(
            !batch.is_empty(),
            "a poll of {POLL_TIMEOUT:?} completed nothing"
        );
        for completion in batch {
            assert!(
                done.insert(completion.tag, completion).is_none(),
                "a tag completed twice"
            );
        }
    }
    done
}

/// Inserts `ids` (one transaction each, all in flight at once) and reads them back the same
/// way; a duplicate insert among them fails alone.
fn many_in_flight(api: &Cluster, table: &Table, count: u32) {
    let mut executor = api.async_executor();
    for id in 0..count {
        let mut tx = api.start_transaction().expect("start");
        tx.insert(table, &[Value::UInt32(id), Value::Int64(i64::from(id) * 3)])
            .expect("define");
        executor
            .prepare(
                tx,
                ExecType::Commit,
                AbortOption::AbortOnError,
                u64::from(id),
            )
            .expect("prepare");
    }
    // One more insert of an existing key, in flight with the rest once they are committed.
    let done = drain(&mut executor);
    assert_eq!(done.len(), count as usize);
    for (tag, completion) in &done {
        assert!(
            completion.result.is_ok(),
            "insert {tag}: {:?}",
            completion.result
        );
    }
    let mut reads = BTreeMap::new();
    for id in 0..count {
        let mut tx = api.start_transaction().expect("start");
        let op = tx
            .read(table, &[Value::UInt32(id)], LockMode::CommittedRead)
            .expect("define");
        reads.insert(u64::from(id), op);
        executor
            .prepare(
                tx,
                ExecType::Commit,
                AbortOption::AbortOnError,
                u64::from(id),
            )
            .expect("prepare");
    }
    let mut duplicate = api.start_transaction().expect("start");
    duplicate
        .insert(table, &[Value::UInt32(0), Value::Int64(-1)])
        .expect("define");
    executor
        .prepare(
            duplicate,
            ExecType::Commit,
            AbortOption::AbortOnError,
            u64::MAX,
        )
        .expect("prepare");
    let done = drain(&mut executor);
    assert_eq!(done.len(), count as usize + 1);
    for (tag, completion) in done {
        if tag == u64::MAX {
            assert_ndb_code(completion.result, 630, "the duplicate insert");
            continue;
        }
        assert!(
            completion.result.is_ok(),
            "read {tag}: {:?}",
            completion.result
        );
        let row = completion.transaction.row(reads[&tag]).expect("a row");
        assert_eq!(row[1], Value::Int64(tag as i64 * 3), "row {tag}");
    }
}

#[test]
fn one_thread_keeps_hundreds_of_transactions_in_flight() {
    let (_cluster, api, table) = start(ClusterSpec::new());
    many_in_flight(&api, &table, 500);
}

#[test]
fn in_flight_transactions_spread_over_four_data_nodes() {
    let spec = ClusterSpec::new().data_nodes(4).replicas(2);
    let (_cluster, api, table) = start(spec);
    many_in_flight(&api, &table, 300);
}

#[test]
fn more_than_max_no_of_concurrent_transactions_is_refused_with_4006() {
    let spec = ClusterSpec::new().data_node_param("MaxNoOfConcurrentTransactions", "32");
    let (_cluster, api, table) = start(spec);
    let mut executor = api.async_executor();
    assert_eq!(executor.limit(), 32);
    for id in 0..32u32 {
        let mut tx = api.start_transaction().expect("start");
        tx.insert(&table, &[Value::UInt32(id), Value::Int64(0)])
            .expect("define");
        executor
            .prepare(
                tx,
                ExecType::Commit,
                AbortOption::AbortOnError,
                u64::from(id),
            )
            .expect("within the limit");
    }
    let mut one_more = api.start_transaction().expect("start");
    one_more
        .insert(&table, &[Value::UInt32(99), Value::Int64(0)])
        .expect("define");
    assert_ndb_code(
        executor.prepare(one_more, ExecType::Commit, AbortOption::AbortOnError, 99),
        4006,
        "the 33rd transaction",
    );
    let done = drain(&mut executor);
    assert_eq!(done.len(), 32);
    assert!(done.values().all(|c| c.result.is_ok()));
}

#[test]
fn dropping_the_executor_rolls_back_what_was_in_flight() {
    let (_cluster, api, table) = start(ClusterSpec::new());
    {
        let mut executor = api.async_executor();
        for id in 0..50u32 {
            let mut tx = api.start_transaction().expect("start");
            tx.insert(&table, &[Value::UInt32(id), Value::Int64(0)])
                .expect("define");
            executor
                .prepare(
                    tx,
                    ExecType::NoCommit,
                    AbortOption::AbortOnError,
                    u64::from(id),
                )
                .expect("prepare");
        }
        executor.send();
        // Dropped with the NoCommit executes in flight (or answered and not polled).
    }
    // Every row is free again: inserting them all succeeds once the rollbacks have run (a
    // lock still held would make an insert wait, then fail with 266; retry until the
    // rollbacks have reached the data node).
    rndb_tests::wait_until(
        "the rollbacks to free every row",
        Duration::from_secs(10),
        || {
            let mut tx = api.start_transaction()?;
            for id in 0..50u32 {
                tx.insert(&table, &[Value::UInt32(id), Value::Int64(1)])?;
            }
            match tx.execute(ExecType::Commit) {
                Ok(()) => Ok(Some(())),
                Err(e) if e.is_temporary() => Ok(None),
                Err(e) => Err(e.into()),
            }
        },
    )
    .expect("every row inserted after the rollback");
}
