//! Proves that one thread keeps many transactions in flight with the asynchronous executor
//! (NDB's executeAsynchPrepare / sendPollNdb), all of them at once (held at a locked row until
//! every one was sent), on one data node and spread over four by their keys: every execute
//! completes with its own rows and errors, the executor refuses more than
//! MaxNoOfConcurrentTransactions with 4006, and dropping it rolls back what was in flight.

use std::collections::BTreeMap;
use std::time::Duration;

use rndb_api::{
    AbortOption, AsyncExecutor, Cluster, ColumnDef, ColumnType, Completion, ExecType, LockMode,
    NodeId, Table, TableDef, Value,
};
use rndb_tests::ops::{insert_committed, recreate_table};
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

/// A row apart from the ids the tests insert. `many_in_flight`'s inserts each also read it
/// under a shared lock while another API node holds it exclusively (the gate is closed), so
/// none of them can complete before that API node lets go.
const GATE_ID: u32 = u32::MAX;
/// How long `many_in_flight` polls for completions, none allowed, while the gate is closed.
const GATE_CLOSED_FOR: Duration = Duration::from_millis(300);
/// TransactionDeadlockDetectionTimeout for the tests that close the gate: far longer than it
/// stays closed, so the reads waiting at it do not time out (266).
const GATE_DEADLOCK_TIMEOUT_MS: u32 = 20_000;

/// Inserts `ids` (one transaction each, all in flight at once) and reads them back the same
/// way; a duplicate insert among them fails alone. Every insert's transaction also reads the
/// gate row, locked by a second API node (the gatekeeper) until all of them have been sent:
/// none may complete before it lets go. `while_gated` runs meanwhile, with the gatekeeper's
/// API node, to check what the data nodes hold. Returns how many inserts each data node
/// coordinated.
fn many_in_flight(
    cluster: &TestCluster,
    api: &Cluster,
    table: &Table,
    count: u32,
    while_gated: impl FnOnce(&Cluster),
) -> BTreeMap<NodeId, u32> {
    insert_committed(api, table, &[vec![Value::UInt32(GATE_ID), Value::Int64(0)]])
        .expect("insert the gate row");
    let gatekeeper_api = cluster.connect().expect("connect the gatekeeper");
    let mut gate = gatekeeper_api.start_transaction().expect("start");
    gate.read(table, &[Value::UInt32(GATE_ID)], LockMode::Exclusive)
        .expect("define");
    gate.execute(ExecType::NoCommit).expect("close the gate");

    let mut executor = api.async_executor();
    let mut coordinators = BTreeMap::new();
    for id in 0..count {
        let mut tx = api.start_transaction().expect("start");
        // The first operation's key places the transaction on its row's primary.
        tx.insert(table, &[Value::UInt32(id), Value::Int64(i64::from(id) * 3)])
            .expect("define");
        tx.read(table, &[Value::UInt32(GATE_ID)], LockMode::Read)
            .expect("define");
        let node = tx.connected_node_id().expect("a coordinator once defined");
        coordinators.insert(u64::from(id), node);
        executor
            .prepare(
                tx,
                ExecType::Commit,
                AbortOption::AbortOnError,
                u64::from(id),
            )
            .expect("prepare");
    }
    executor.send();
    let early = executor.poll(1, GATE_CLOSED_FOR);
    let early_tags: Vec<u64> = early.iter().map(|c| c.tag).collect();
    assert!(
        early.is_empty(),
        "executes completed while the gate was closed: {early_tags:?}"
    );
    assert_eq!(executor.len(), count as usize, "every execute is held");
    while_gated(&gatekeeper_api);
    gate.execute(ExecType::Rollback).expect("open the gate");

    let done = drain(&mut executor);
    assert_eq!(done.len(), count as usize);
    for (tag, completion) in &done {
        assert!(
            completion.result.is_ok(),
            "insert {tag}: {:?}",
            completion.result
        );
        assert_eq!(
            completion.transaction.connected_node_id(),
            Some(coordinators[tag]),
            "insert {tag} was coordinated where it was placed"
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
    // One more insert of an existing key, in flight with the reads.
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
    let mut by_node = BTreeMap::new();
    for node in coordinators.into_values() {
        *by_node.entry(node).or_default() += 1;
    }
    by_node
}

/// The data node's TC has room for the 500 transactions and the gatekeeper's, and no more:
/// while the gate is closed a new transaction must be refused (233), which proves the data node
/// holds all 500 at once, not only the executor.
#[test]
fn one_thread_keeps_hundreds_of_transactions_in_flight() {
    const COUNT: u32 = 500;
    let spec = ClusterSpec::new()
        .deadlock_timeout_ms(GATE_DEADLOCK_TIMEOUT_MS)
        .data_node_param("MaxNoOfConcurrentTransactions", &(COUNT + 1).to_string());
    let (cluster, api, table) = start(spec);
    let by_node = many_in_flight(&cluster, &api, &table, COUNT, |gatekeeper_api| {
        let table = gatekeeper_api.get_table("items").expect("find items");
        let mut probe = gatekeeper_api.start_transaction().expect("start");
        probe
            .read(&table, &[Value::UInt32(GATE_ID)], LockMode::CommittedRead)
            .expect("define");
        assert_ndb_code(
            probe.execute(ExecType::Commit),
            233,
            "a transaction past the 500 in flight and the gatekeeper's",
        );
    });
    assert_eq!(by_node, BTreeMap::from([(NodeId(1), COUNT)]));
}

#[test]
fn in_flight_transactions_spread_over_four_data_nodes() {
    const COUNT: u32 = 300;
    let spec = ClusterSpec::new()
        .data_nodes(4)
        .replicas(2)
        .deadlock_timeout_ms(GATE_DEADLOCK_TIMEOUT_MS);
    let (cluster, api, table) = start(spec);
    let by_node = many_in_flight(&cluster, &api, &table, COUNT, |_| {});
    // Keys hash evenly over the four primaries: each coordinates about a quarter; fewer than
    // an eighth would mean the executes were not placed by their keys.
    let nodes: Vec<NodeId> = by_node.keys().copied().collect();
    assert_eq!(nodes, cluster.data_node_ids(), "coordinators: {by_node:?}");
    assert!(
        by_node.values().all(|&n| n >= COUNT / 8),
        "in flight at once per data node: {by_node:?}"
    );
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
