//! Proves that interpreted updates (NDB's interpretedUpdateTuple) change integer columns in the
//! data node under the row's lock: conditions hold or fail with the program's exit code, NULLs
//! and overflows fail with 878 leaving the row as it was, interpreted reads and deletes read or
//! delete only a row meeting their condition, an interpreted write (rndb's) writes a missing
//! row or one meeting its condition, the API refuses ill-formed programs,
//! and concurrent increments from many threads on two replicas lose no acknowledged one and
//! break no cap through a data node's SIGKILL and restart, with both replicas equal after.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rndb_api::{
    Cluster, CmpOp, ColumnDef, ColumnType, ConnectOptions, ExecType, Filter, InterpretedCode,
    LockMode, NodeId, Table, TableDef, Value,
};
use rndb_tests::ops::{insert_committed, read_committed, recreate_table};
use rndb_tests::{assert_ndb_code, wait_until, ClusterSpec, TestCluster, START_TIMEOUT};

/// `counters(id UInt32 key, n Int64, cap_n UInt32, maybe Int32 NULL, label Varchar(8))`.
fn counters_def() -> TableDef {
    TableDef::new(
        "counters",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("n", ColumnType::Int64),
            ColumnDef::new("capped", ColumnType::UInt32),
            ColumnDef::nullable("maybe", ColumnType::Int32),
            ColumnDef::new("label", ColumnType::Varchar(8)),
        ],
    )
}

const N: usize = 1;
const CAPPED: usize = 2;
const MAYBE: usize = 3;
const LABEL: usize = 4;

fn counter_row(id: u32, n: i64) -> Vec<Value> {
    vec![
        Value::UInt32(id),
        Value::Int64(n),
        Value::UInt32(0),
        Value::Null,
        Value::Varchar(format!("c{id}")),
    ]
}

fn key(id: u32) -> [Value; 1] {
    [Value::UInt32(id)]
}

/// Runs `code` (and `set`) against row `id` in a transaction of its own and commits.
fn run(
    api: &Cluster,
    table: &Table,
    id: u32,
    set: &[(usize, Value)],
    code: &InterpretedCode,
) -> Result<(), rndb_api::Error> {
    let mut tx = api.start_transaction()?;
    tx.interpreted_update(table, &key(id), set, code)?;
    tx.execute(ExecType::Commit)
}

fn add(table: &Table, column: usize, delta: i64) -> InterpretedCode {
    let mut code = InterpretedCode::new(table);
    code.add_value(column, delta).expect("a well-formed change");
    code
}

#[test]
fn interpreted_updates_change_rows_under_conditions_and_refuse_what_they_must() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start a data node");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &counters_def()).expect("create counters");
    insert_committed(&api, &table, &[counter_row(1, 10), counter_row(2, 0)]).expect("insert");
    let row_of = |id| read_committed(&api, &table, &key(id)).expect("read");

    // A change, and a second program that sets a column beside its change.
    run(&api, &table, 1, &[], &add(&table, N, 5)).expect("add 5");
    run(
        &api,
        &table,
        1,
        &[(LABEL, Value::Varchar("x".into()))],
        &add(&table, CAPPED, 3),
    )
    .expect("add 3 and set the label");
    assert_eq!(
        row_of(1),
        vec![
            Value::UInt32(1),
            Value::Int64(15),
            Value::UInt32(3),
            Value::Null,
            Value::Varchar("x".into())
        ]
    );

    // A read later in the same transaction sees what the program left; a rollback undoes it.
    let mut tx = api.start_transaction().expect("start");
    tx.interpreted_update(&table, &key(1), &[], &add(&table, N, -20))
        .expect("define");
    let read = tx.read(&table, &key(1), LockMode::Read).expect("define");
    tx.execute(ExecType::NoCommit).expect("no-commit");
    assert_eq!(tx.row(read).expect("its row")[N], Value::Int64(-5));
    tx.execute(ExecType::Rollback).expect("rollback");
    assert_eq!(row_of(1)[N], Value::Int64(15));

    // Conditions: the program's exit code, or 626 by default; the row is left as it was.
    let mut at_least_100 = add(&table, N, -100);
    at_least_100
        .condition(Filter::cmp(N as u16, CmpOp::Ge, Value::Int64(100)))
        .expect("a well-formed condition");
    assert_ndb_code(run(&api, &table, 1, &[], &at_least_100), 626, "below 100");
    at_least_100.exit_nok(6000).expect("a user exit code");
    assert_ndb_code(run(&api, &table, 1, &[], &at_least_100), 6000, "below 100");
    let mut at_least_15 = add(&table, N, -15);
    at_least_15
        .condition(Filter::cmp(N as u16, CmpOp::Ge, Value::Int64(15)))
        .expect("a well-formed condition");
    run(&api, &table, 1, &[], &at_least_15).expect("15 is at least 15");
    assert_eq!(row_of(1)[N], Value::Int64(0));

    // In the data node: a missing row, a NULL, and sums out of the column's range.
    assert_ndb_code(
        run(&api, &table, 99, &[], &add(&table, N, 1)),
        626,
        "no row",
    );
    assert_ndb_code(
        run(&api, &table, 2, &[], &add(&table, MAYBE, 1)),
        878,
        "NULL",
    );
    assert_ndb_code(
        run(&api, &table, 2, &[], &add(&table, CAPPED, -1)),
        878,
        "below 0",
    );
    run(&api, &table, 2, &[], &add(&table, N, i64::MAX)).expect("up to the maximum");
    assert_ndb_code(
        run(&api, &table, 2, &[], &add(&table, N, 1)),
        878,
        "past it",
    );
    assert_eq!(row_of(2), {
        let mut row = counter_row(2, i64::MAX);
        row[CAPPED] = Value::UInt32(0);
        row
    });

    // Interpreted reads: the row if it meets the condition, else the exit code; committed or
    // locked.
    let mut if_big = InterpretedCode::new(&table);
    if_big
        .condition(Filter::cmp(N as u16, CmpOp::Gt, Value::Int64(1000)))
        .expect("a well-formed condition")
        .exit_nok(6003)
        .expect("a user exit code");
    let read = |id, lock, code: &InterpretedCode| {
        let mut tx = api.start_transaction()?;
        let op = tx.interpreted_read(&table, &key(id), lock, code)?;
        tx.execute(ExecType::Commit)?;
        Ok::<_, rndb_api::Error>(tx.row(op).map(<[Value]>::to_vec))
    };
    for lock in [LockMode::CommittedRead, LockMode::Read, LockMode::Exclusive] {
        assert_eq!(read(2, lock, &if_big).expect("big"), Some(row_of(2)));
        assert_ndb_code(read(1, lock, &if_big), 6003, "n is 0");
        assert_ndb_code(read(99, lock, &if_big), 626, "no row");
    }
    assert_ndb_code(
        read(2, LockMode::Read, &add(&table, N, 1)),
        4116,
        "a read that changes",
    );

    // Interpreted deletes: the condition fails (the row stays), then holds (the row goes).
    let mut if_zero = InterpretedCode::new(&table);
    if_zero
        .condition(Filter::cmp(N as u16, CmpOp::Eq, Value::Int64(0)))
        .expect("a well-formed condition")
        .exit_nok(6002)
        .expect("a user exit code");
    let delete = |id, code: &InterpretedCode| {
        let mut tx = api.start_transaction()?;
        tx.interpreted_delete(&table, &key(id), code)?;
        tx.execute(ExecType::Commit)
    };
    assert_ndb_code(delete(2, &if_zero), 6002, "n is not 0");
    assert_eq!(row_of(2)[N], Value::Int64(i64::MAX));
    delete(1, &if_zero).expect("n is 0");
    assert_ndb_code(read_committed(&api, &table, &key(1)), 626, "deleted");
    assert_ndb_code(delete(1, &if_zero), 626, "no row");
    assert_ndb_code(delete(2, &add(&table, N, 1)), 4116, "a delete that changes");

    // In the API: a key column, a text column, a change of a column also set, another table's
    // program, an unknown column, a condition that does not fit its column.
    let mut code = InterpretedCode::new(&table);
    assert_ndb_code(code.add_value(0, 1).map(drop), 4004, "a key column");
    assert_ndb_code(code.add_value(LABEL, 1).map(drop), 4209, "a text column");
    assert_ndb_code(code.add_value(9, 1).map(drop), 4004, "no such column");
    assert_ndb_code(code.sub_value(N, i64::MIN).map(drop), 4209, "-i64::MIN");
    for bad in [0, 266, 4012, 7000] {
        assert_ndb_code(
            code.exit_nok(bad).map(drop),
            4116,
            "an exit code of NDB's own",
        );
    }
    assert_ndb_code(
        code.condition(Filter::cmp(N as u16, CmpOp::Eq, Value::Int32(1)))
            .map(drop),
        4209,
        "an Int32 constant for an Int64 column",
    );
    assert_ndb_code(
        run(&api, &table, 1, &[(N, Value::Int64(1))], &add(&table, N, 1)),
        4209,
        "set and changed",
    );
    let other = recreate_table(&api, &TableDef::new("other", counters_def().columns))
        .expect("create other");
    assert_ndb_code(
        run(&api, &other, 1, &[], &add(&table, N, 1)),
        4116,
        "another table's program",
    );
}

/// On two replicas, an interpreted update setting one column many times over (as many set
/// values as a table may have columns) besides its change: the backups get each column once,
/// and both replicas hold the same row.
#[test]
fn a_program_beside_many_set_values_reaches_both_replicas() {
    let spec = ClusterSpec::new().data_nodes(2).replicas(2).api_slots(2);
    let cluster = TestCluster::start(spec).expect("start two data nodes");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &counters_def()).expect("create counters");
    let rows: Vec<_> = (0..8).map(|id| counter_row(id, 0)).collect();
    insert_committed(&api, &table, &rows).expect("insert");
    let set: Vec<(usize, Value)> = (0..128)
        .map(|i| (LABEL, Value::Varchar(format!("x{}", i % 3))))
        .collect();
    // Eight keys: some have their primary on each node.
    for id in 0..8 {
        run(&api, &table, id, &set, &add(&table, N, 1)).expect("set and change");
        let replicas: Vec<Vec<Value>> = (0..2)
            .map(|replica| {
                let mut tx = api.start_transaction().expect("start");
                let op = tx
                    .read_from_replica(&table, &key(id), replica)
                    .expect("define");
                tx.execute(ExecType::Commit).expect("read a replica");
                tx.row(op).expect("the row").to_vec()
            })
            .collect();
        assert_eq!(
            replicas[0], replicas[1],
            "counter {id}: the replicas differ"
        );
        assert_eq!(replicas[0][N], Value::Int64(1));
        assert_eq!(
            replicas[0][LABEL],
            Value::Varchar("x1".into()),
            "the last set wins"
        );
    }
}

/// An interpreted write (rndb's) writes a row that is missing or meets its condition, leaves
/// one that does not (the exit code), reaches both replicas alike, and refuses a program that
/// changes columns.
#[test]
fn an_interpreted_write_writes_a_missing_row_or_one_meeting_its_condition() {
    let spec = ClusterSpec::new().data_nodes(2).replicas(2);
    let cluster = TestCluster::start(spec).expect("start two data nodes");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &counters_def()).expect("create counters");
    let mut held = counter_row(1, 7);
    held[MAYBE] = Value::Int32(3);
    insert_committed(&api, &table, &[counter_row(0, 5), held.clone()]).expect("insert");
    let mut code = InterpretedCode::new(&table);
    (code
        .condition(Filter::IsNull(MAYBE as u16))
        .expect("condition"))
    .exit_nok(6001)
    .expect("exit code");
    let write = |id: u32, n: i64| {
        let mut tx = api.start_transaction()?;
        tx.interpreted_write(&table, &counter_row(id, n), &code)?;
        tx.execute(ExecType::Commit)
    };
    write(0, 50).expect("a row meeting the condition");
    write(2, 20).expect("a missing row");
    assert_ndb_code(write(1, 70), 6001, "a row failing the condition");
    for (id, expected) in [(0, counter_row(0, 50)), (1, held), (2, counter_row(2, 20))] {
        let replicas: Vec<Vec<Value>> = (0..2)
            .map(|replica| {
                let mut tx = api.start_transaction().expect("start");
                let op = (tx.read_from_replica(&table, &key(id), replica)).expect("define");
                tx.execute(ExecType::Commit).expect("read a replica");
                tx.row(op).expect("the row").to_vec()
            })
            .collect();
        assert_eq!(replicas, vec![expected.clone(), expected], "row {id}");
    }
    let mut tx = api.start_transaction().expect("start");
    assert_ndb_code(
        tx.interpreted_write(&table, &counter_row(3, 1), &add(&table, N, 1)),
        4116,
        "a write's program that changes a column",
    );
}

/// An interpreted write on a table with a unique index keeps the index right: it moves the
/// entry of a row it writes, leaves it when its condition fails, adds one for a row it
/// inserts, and a collision fails it (893) on a missing row and an existing one alike.
#[test]
fn an_interpreted_write_keeps_a_unique_index() {
    use rndb_api::{AbortOption, IndexDef};
    let spec = ClusterSpec::new().data_nodes(2).replicas(2);
    let cluster = TestCluster::start(spec).expect("start two data nodes");
    let api = cluster.connect().expect("connect");
    let def = TableDef::new(
        "uniq",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("u", ColumnType::Int64),
            ColumnDef::nullable("maybe", ColumnType::Int32),
        ],
    );
    let table = recreate_table(&api, &def).expect("create");
    let index = api
        .create_index(&table, &IndexDef::unique("uniq_u", &["u"]))
        .expect("unique index");
    let row = |id: u32, u: i64, maybe: Option<i32>| {
        vec![
            Value::UInt32(id),
            Value::Int64(u),
            maybe.map_or(Value::Null, Value::Int32),
        ]
    };
    insert_committed(&api, &table, &[row(1, 10, None), row(2, 30, Some(3))]).expect("insert");
    let mut code = InterpretedCode::new(&table);
    (code.condition(Filter::IsNull(2)).expect("condition"))
        .exit_nok(6001)
        .expect("exit");
    let write = |r: Vec<Value>| {
        let mut tx = api.start_transaction()?;
        tx.interpreted_write(&table, &r, &code)?;
        tx.execute(ExecType::Commit)
    };
    let by_u = |u: i64| -> Option<Vec<Value>> {
        let mut tx = api.start_transaction().expect("start");
        let op = tx
            .read_unique(&index, &[Value::Int64(u)], LockMode::Read)
            .expect("define");
        tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)
            .expect("execute");
        tx.row(op).map(<[Value]>::to_vec)
    };
    write(row(1, 20, None)).expect("existing row meeting the condition");
    assert_eq!(by_u(20), Some(row(1, 20, None)));
    assert_eq!(by_u(10), None, "old entry gone");
    assert_ndb_code(write(row(2, 40, None)), 6001, "condition fails");
    assert_eq!(by_u(30), Some(row(2, 30, Some(3))));
    assert_eq!(by_u(40), None);
    assert_ndb_code(write(row(3, 20, None)), 893, "missing row colliding");
    assert_eq!(by_u(20), Some(row(1, 20, None)));
    write(row(4, 50, None)).expect("missing row");
    assert_eq!(by_u(50), Some(row(4, 50, None)));
    // Existing row whose new unique value collides.
    assert_ndb_code(write(row(4, 20, None)), 893, "existing row colliding");
    assert_eq!(by_u(50), Some(row(4, 50, None)));
    // IgnoreError: a failed conditional write in a transaction that commits others.
    let mut tx = api.start_transaction().expect("start");
    let failed = tx
        .interpreted_write(&table, &row(2, 60, None), &code)
        .expect("define");
    let ok = tx
        .interpreted_write(&table, &row(5, 60, None), &code)
        .expect("define");
    tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)
        .expect("commit");
    assert_eq!(tx.op_error(failed).map(|e| e.code), Some(6001));
    assert!(tx.op_error(ok).is_none());
    assert_eq!(by_u(60), Some(row(5, 60, None)));
    assert_eq!(by_u(30), Some(row(2, 30, Some(3))));
    // The same key twice in one transaction: the first write's row is what the second sees.
    let mut tx = api.start_transaction().expect("start");
    tx.interpreted_write(&table, &row(6, 70, Some(1)), &code)
        .expect("define");
    let second = tx
        .interpreted_write(&table, &row(6, 71, None), &code)
        .expect("define");
    tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)
        .expect("commit");
    assert_eq!(tx.op_error(second).map(|e| e.code), Some(6001));
    assert_eq!(by_u(70), Some(row(6, 70, Some(1))));
    assert_eq!(by_u(71), None);
    // Both replicas alike.
    for id in 1..=6 {
        let replicas: Vec<Option<Vec<Value>>> = (0..2)
            .map(|replica| {
                let mut tx = api.start_transaction().expect("start");
                let op = tx
                    .read_from_replica(&table, &key(id), replica)
                    .expect("define");
                tx.execute_with(ExecType::Commit, AbortOption::IgnoreError)
                    .expect("read");
                tx.row(op).map(<[Value]>::to_vec)
            })
            .collect();
        assert_eq!(replicas[0], replicas[1], "row {id}");
    }
}

/// Data nodes in the increment test: one node group of two.
const DATA_NODE_COUNT: u16 = 2;
/// Counters, and the threads incrementing them.
const COUNTER_COUNT: u32 = 4;
const THREAD_COUNT: u32 = 6;
/// The capped column of every counter never passes this.
const CAP: u32 = 1000;
/// How long the increments run before and after the kill, at least.
const HALF_RUN: Duration = Duration::from_millis(1500);
/// A node restart, from start to its primaries moved back.
const RESTART_TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn concurrent_increments_lose_no_acknowledged_one_through_a_data_node_kill() {
    let spec = ClusterSpec::new()
        .data_nodes(DATA_NODE_COUNT)
        .replicas(2)
        .api_slots(2);
    let mut cluster = TestCluster::start(spec).expect("start two data nodes");
    let api = cluster
        .connect_with(ConnectOptions {
            request_timeout: Duration::from_secs(10),
            connect_timeout: START_TIMEOUT,
            ..ConnectOptions::default()
        })
        .expect("connect");
    let table = recreate_table(&api, &counters_def()).expect("create counters");
    let rows: Vec<_> = (0..COUNTER_COUNT).map(|id| counter_row(id, 0)).collect();
    insert_committed(&api, &table, &rows).expect("insert the counters");

    // Per counter: increments acknowledged, and failed ones (which may or may not have
    // committed: a commit whose coordinator died has an unknown outcome).
    let acked: Vec<AtomicU64> = (0..COUNTER_COUNT).map(|_| AtomicU64::new(0)).collect();
    let failed: Vec<AtomicU64> = (0..COUNTER_COUNT).map(|_| AtomicU64::new(0)).collect();
    let capped_out = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let mut one_up = add(&table, N, 1);
    one_up
        .add_value(CAPPED, 1)
        .expect("a second change")
        .condition(Filter::cmp(CAPPED as u16, CmpOp::Lt, Value::UInt32(CAP)))
        .expect("the cap")
        .exit_nok(6001)
        .expect("a user exit code");
    let just_n = add(&table, N, 1);
    let restarted = std::thread::scope(|scope| {
        for thread in 0..THREAD_COUNT {
            let (api, table, stop) = (&api, &table, &stop);
            let (acked, failed, capped_out) = (&acked, &failed, &capped_out);
            let (one_up, just_n) = (&one_up, &just_n);
            scope.spawn(move || {
                let mut i = thread;
                while !stop.load(Ordering::Relaxed) {
                    let id = i % COUNTER_COUNT;
                    i = i.wrapping_mul(31).wrapping_add(7);
                    match run(api, table, id, &[], one_up) {
                        Ok(()) => acked[id as usize].fetch_add(1, Ordering::Relaxed),
                        Err(e) if e.code() == Some(6001) => {
                            // At the cap: n alone goes on.
                            capped_out.fetch_add(1, Ordering::Relaxed);
                            match run(api, table, id, &[], just_n) {
                                Ok(()) => acked[id as usize].fetch_add(1, Ordering::Relaxed),
                                Err(_) => failed[id as usize].fetch_add(1, Ordering::Relaxed),
                            }
                        }
                        Err(_) => failed[id as usize].fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
        let result = (|| {
            let began = Instant::now();
            wait_until("increments before the kill", HALF_RUN * 20, || {
                let done: u64 = acked.iter().map(|a| a.load(Ordering::Relaxed)).sum();
                Ok((began.elapsed() >= HALF_RUN && done > 0).then_some(()))
            })?;
            cluster.kill_node(NodeId(2))?;
            cluster.start_node(NodeId(2))?;
            wait_until("the node restart", RESTART_TIMEOUT, || {
                let log = cluster.log(NodeId(2));
                Ok(
                    (log.contains("node restart complete") && log.contains("primaries moved back"))
                        .then_some(()),
                )
            })?;
            let after = acked.iter().map(|a| a.load(Ordering::Relaxed)).sum::<u64>();
            let began = Instant::now();
            wait_until("increments after the restart", HALF_RUN * 20, || {
                let done: u64 = acked.iter().map(|a| a.load(Ordering::Relaxed)).sum();
                Ok((began.elapsed() >= HALF_RUN && done > after).then_some(()))
            })
        })();
        stop.store(true, Ordering::Relaxed);
        result
    });
    if let Err(e) = restarted {
        panic!("{e:#}\n--- node 2 ---\n{}", cluster.log(NodeId(2)));
    }

    for id in 0..COUNTER_COUNT {
        let (acked, failed) = (
            acked[id as usize].load(Ordering::Relaxed),
            failed[id as usize].load(Ordering::Relaxed),
        );
        let mut replicas = Vec::new();
        for replica in 0..2 {
            let mut tx = api.start_transaction().expect("start");
            let op = tx
                .read_from_replica(&table, &key(id), replica)
                .expect("define");
            tx.execute(ExecType::Commit).expect("read a replica");
            replicas.push(tx.row(op).expect("the counter's row").to_vec());
        }
        assert_eq!(
            replicas[0], replicas[1],
            "counter {id}: the replicas differ"
        );
        let Value::Int64(n) = replicas[0][N] else {
            panic!("counter {id}: {:?}", replicas[0]);
        };
        let Value::UInt32(capped) = replicas[0][CAPPED] else {
            panic!("counter {id}: {:?}", replicas[0]);
        };
        eprintln!("counter {id}: n {n}, capped {capped}, acknowledged {acked}, failed {failed}");
        assert!(
            n as u64 >= acked && n as u64 <= acked + failed,
            "counter {id}: n is {n}, with {acked} increments acknowledged and {failed} failed"
        );
        assert!(
            capped <= CAP,
            "counter {id}: capped is {capped}, past {CAP}"
        );
        assert!(capped as i64 <= n, "counter {id}: capped {capped} > n {n}");
    }
    eprintln!("at the cap: {} times", capped_out.load(Ordering::Relaxed));
}
