//! Proves that many threads sharing one API connection each get exactly their own answers —
//! past eight waiting threads the connection hands reading to its receive thread, and while
//! large executes hand their answers over in slices — and that a bank-style workload of
//! concurrent transfers, most of which commit, keeps the total unchanged.

use rndb_api::{ColumnDef, ColumnType, ExecType, LockMode, TableDef, TransporterKind, Value};
use rndb_tests::ops::{insert_committed, read_with, recreate_table};
use rndb_tests::{ClusterSpec, TestCluster};

const THREADS: u32 = 64;
const ROUNDS: u32 = 50;
/// Threads making transfers in the bank test, and the transfers each tries.
const TRANSFER_THREADS: u32 = 16;
const TRANSFER_ROUNDS: u32 = 40;

fn table_def(name: &str) -> TableDef {
    TableDef::new(
        name,
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::Int64),
        ],
    )
}

#[test]
fn sixty_four_threads_on_one_connection_see_their_own_rows() {
    let cluster = TestCluster::start(ClusterSpec::new()).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &table_def("own_rows")).expect("create the table");
    let rows: Vec<Vec<Value>> = (0..THREADS)
        .map(|i| vec![Value::UInt32(i), Value::Int64(0)])
        .collect();
    insert_committed(&api, &table, &rows).expect("insert");
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (api, table) = (&api, &table);
            scope.spawn(move || {
                for round in 1..=ROUNDS {
                    let value = i64::from(thread) * 1000 + i64::from(round);
                    let mut tx = api.start_transaction().expect("start");
                    tx.update(table, &[Value::UInt32(thread)], &[(1, Value::Int64(value))])
                        .expect("define update");
                    let read = tx
                        .read(table, &[Value::UInt32(thread)], LockMode::Read)
                        .expect("define read");
                    tx.execute(ExecType::Commit).expect("commit");
                    assert_eq!(
                        tx.row(read),
                        Some(&[Value::UInt32(thread), Value::Int64(value)][..]),
                        "thread {thread} round {round} reads its own write"
                    );
                }
            });
        }
    });
    for thread in 0..THREADS {
        let row = read_with(
            &api,
            &table,
            &[Value::UInt32(thread)],
            LockMode::CommittedRead,
        )
        .expect("read back");
        assert_eq!(
            row[1],
            Value::Int64(i64::from(thread) * 1000 + i64::from(ROUNDS))
        );
    }
}

/// Sixteen threads on one connection, each reading a different 500-row range in one execute,
/// twenty times, over SHM and over TCP: every thread gets every row of its own range.
#[test]
fn threads_streaming_large_executes_on_one_connection_get_their_own_rows() {
    const STREAMERS: u32 = 16;
    const RANGE: u32 = 500;
    let cluster = TestCluster::start(ClusterSpec::new().use_shm(true)).expect("start the cluster");
    let shm = cluster
        .connect_over(TransporterKind::Shm)
        .expect("connect over SHM");
    let tcp = cluster
        .connect_over(TransporterKind::Tcp)
        .expect("connect over TCP");
    let table = recreate_table(&shm, &table_def("streamed")).expect("create the table");
    let rows: Vec<Vec<Value>> = (0..STREAMERS * RANGE)
        .map(|i| vec![Value::UInt32(i), Value::Int64(i64::from(i) * 3)])
        .collect();
    for chunk in rows.chunks(1000) {
        insert_committed(&shm, &table, chunk).expect("insert");
    }
    for api in [&shm, &tcp] {
        let table = api.get_table("streamed").expect("find the table");
        std::thread::scope(|scope| {
            for thread in 0..STREAMERS {
                let table = &table;
                scope.spawn(move || {
                    let first = thread * RANGE;
                    for _ in 0..20 {
                        let mut tx = api.start_transaction().expect("start");
                        let ops: Vec<_> = (first..first + RANGE)
                            .map(|id| {
                                tx.read(table, &[Value::UInt32(id)], LockMode::CommittedRead)
                                    .expect("define a read")
                            })
                            .collect();
                        tx.execute(ExecType::Commit)
                            .expect("one execute of 500 reads");
                        for (id, op) in (first..first + RANGE).zip(ops) {
                            assert_eq!(
                                tx.row(op),
                                Some(&[Value::UInt32(id), Value::Int64(i64::from(id) * 3)][..]),
                                "thread {thread}, row {id}"
                            );
                        }
                    }
                });
            }
        });
    }
}

#[test]
fn concurrent_transfers_keep_the_total() {
    const ACCOUNTS: u32 = 20;
    let cluster = TestCluster::start(ClusterSpec::new().deadlock_timeout_ms(500)).expect("start");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &table_def("accounts")).expect("create the table");
    let rows: Vec<Vec<Value>> = (0..ACCOUNTS)
        .map(|i| vec![Value::UInt32(i), Value::Int64(1000)])
        .collect();
    insert_committed(&api, &table, &rows).expect("insert");
    let (attempted, committed) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..TRANSFER_THREADS)
            .map(|thread| {
                let (api, table) = (&api, &table);
                scope.spawn(move || {
                    let (mut attempted, mut committed) = (0u32, 0u32);
                    for round in 0..TRANSFER_ROUNDS {
                        let from = (thread * 7 + round) % ACCOUNTS;
                        let to = (thread * 3 + round * 5 + 1) % ACCOUNTS;
                        if from == to {
                            continue;
                        }
                        attempted += 1;
                        // A transfer that hits a lock wait timeout (266) is rolled back whole;
                        // any other error fails the test.
                        match transfer(api, table, from, to, i64::from(round % 7 + 1)) {
                            Ok(()) => committed += 1,
                            Err(e) => {
                                assert_eq!(e.code(), Some(266), "transfer {from} -> {to}: {e}")
                            }
                        }
                    }
                    (attempted, committed)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a transfer thread panicked"))
            .fold((0, 0), |(a, c), (wa, wc)| (a + wa, c + wc))
    });
    // An unchanged total proves nothing if no transfer committed: most of them must have (a
    // 266 needs a lock wait of the whole deadlock timeout, or a deadlock between two threads).
    assert!(
        committed * 2 >= attempted,
        "only {committed} of {attempted} transfers committed"
    );
    let total: i64 = (0..ACCOUNTS)
        .map(|i| {
            match read_with(&api, &table, &[Value::UInt32(i)], LockMode::CommittedRead)
                .expect("read")[1]
            {
                Value::Int64(v) => v,
                ref other => panic!("balance is {other:?}"),
            }
        })
        .sum();
    assert_eq!(
        total,
        i64::from(ACCOUNTS) * 1000,
        "transfers neither create nor destroy money"
    );
}

fn transfer(
    api: &rndb_api::Cluster,
    table: &rndb_api::Table,
    from: u32,
    to: u32,
    amount: i64,
) -> Result<(), rndb_api::Error> {
    let mut tx = api.start_transaction()?;
    let a = tx.read(table, &[Value::UInt32(from)], LockMode::Exclusive)?;
    let b = tx.read(table, &[Value::UInt32(to)], LockMode::Exclusive)?;
    tx.execute(ExecType::NoCommit)?;
    let balance = |op| match tx.row(op).map(|r| r[1].clone()) {
        Some(Value::Int64(v)) => v,
        other => panic!("balance is {other:?}"),
    };
    let (from_balance, to_balance) = (balance(a), balance(b));
    tx.update(
        table,
        &[Value::UInt32(from)],
        &[(1, Value::Int64(from_balance - amount))],
    )?;
    tx.update(
        table,
        &[Value::UInt32(to)],
        &[(1, Value::Int64(to_balance + amount))],
    )?;
    tx.execute(ExecType::Commit)
}
