//! Proves that API nodes reach a data node over shared memory when the config says so, that a
//! client killed with SIGKILL mid-transaction costs the data node nothing — it notices within a
//! bounded wait, unmaps that client's segment, releases its locks and goes on serving — that no
//! segment file is left in /dev/shm, and that one execute of thousands of reads, a third of
//! them for missing rows, files every row and every 626 under its own operation over SHM and
//! TCP alike.
//!
//! The killed client is this test executable run again in a child role.

use std::time::Duration;

use rndb_api::{
    AbortOption, ColumnDef, ColumnType, ConnectOptions, ExecType, LockMode, NodeId, TableDef,
    TransporterKind, Value,
};
use rndb_tests::ops::{insert_committed, read_with, recreate_table};
use rndb_tests::{wait_until, ChildTest, ClusterSpec, TestCluster};

/// Set in the child's environment to the config path; the child test does nothing without it.
const CHILD_CONFIG_ENV: &str = "RNDB_TEST_SHM_CHILD_CONFIG";
/// What the child prints once it holds its lock over SHM.
const LOCKED_LINE: &str = "rndb-shm-child: locked over SHM";
/// How long the child holds the lock if nobody kills it.
const CHILD_HOLD: Duration = Duration::from_secs(60);
/// The bound on every wait of this test.
const WAIT: Duration = Duration::from_secs(15);

fn table_def() -> TableDef {
    TableDef::new(
        "shm_held",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::UInt32),
        ],
    )
}

/// The child role: connects over SHM, locks row 1 with an uncommitted update, says so, waits.
#[test]
fn hold_a_lock_over_shm_as_child() {
    let Some(config) = std::env::var_os(CHILD_CONFIG_ENV) else {
        return;
    };
    let api =
        rndb_api::Cluster::connect(&config, ConnectOptions::default()).expect("child: connect");
    assert_eq!(
        api.transporter_kind(),
        TransporterKind::Shm,
        "child: the config makes this link SHM"
    );
    let table = api.get_table("shm_held").expect("child: find the table");
    let mut transaction = api.start_transaction().expect("child: start");
    transaction
        .update(&table, &[Value::UInt32(1)], &[(1, Value::UInt32(666))])
        .expect("define");
    transaction
        .execute(ExecType::NoCommit)
        .expect("child: lock the row");
    println!("{LOCKED_LINE}");
    std::thread::sleep(CHILD_HOLD);
}

fn spawn_child(cluster: &TestCluster) -> ChildTest {
    let env = (CHILD_CONFIG_ENV, cluster.config_path().as_os_str());
    let mut child =
        ChildTest::spawn("hold_a_lock_over_shm_as_child", env).expect("spawn the child");
    child
        .wait_for_line(LOCKED_LINE, WAIT)
        .expect("the child holds the lock");
    child
}

/// How many shared-memory segments the process maps (a segment stays mapped, its file already
/// unlinked, while its link lives).
fn mapped_segments(pid: u32) -> usize {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .filter(|line| line.contains("/dev/shm/rndb-"))
        .count()
}

fn segment_files() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("rndb-"))
        .collect()
}

#[test]
fn a_client_killed_over_shm_frees_its_segment_and_locks() {
    let spec = ClusterSpec::new().use_shm(true).deadlock_timeout_ms(200);
    let mut cluster = TestCluster::start(spec).expect("start the cluster");
    let data_node = cluster.data_node_ids()[0];
    let pid = cluster.pid(data_node).expect("the data node runs");
    let api = cluster.connect().expect("connect");
    assert_eq!(api.transporter_kind(), TransporterKind::Shm);
    let table = recreate_table(&api, &table_def()).expect("create the table");
    insert_committed(&api, &table, &[vec![Value::UInt32(1), Value::UInt32(1)]]).expect("insert");
    assert_eq!(mapped_segments(pid), 1, "one SHM client, one segment");

    let mut child = spawn_child(&cluster);
    assert_eq!(
        mapped_segments(pid),
        2,
        "a second SHM client maps a second segment"
    );
    let blocked = read_with(&api, &table, &[Value::UInt32(1)], LockMode::Exclusive);
    assert_eq!(
        blocked.map_err(|e| e.code()).err(),
        Some(Some(266)),
        "the child holds the lock"
    );

    child.kill().expect("kill -9 the child");
    wait_until(
        "the data node unmaps the dead client's segment",
        WAIT,
        || Ok((mapped_segments(pid) == 1).then_some(())),
    )
    .expect("segment unmapped");
    let row = wait_until("the dead client's lock is released", WAIT, || {
        Ok(read_with(&api, &table, &[Value::UInt32(1)], LockMode::Exclusive).ok())
    })
    .expect("lock released");
    assert_eq!(
        row,
        vec![Value::UInt32(1), Value::UInt32(1)],
        "the uncommitted update is gone"
    );
    assert!(cluster.is_running(data_node), "the data node stays up");

    // The slot the child held is free again, and a new SHM client works through it.
    let again = cluster
        .connect_with(ConnectOptions {
            node_id: Some(NodeId(51)),
            ..ConnectOptions::default()
        })
        .expect("reconnect over SHM");
    assert_eq!(again.transporter_kind(), TransporterKind::Shm);
    let config_pid_files: Vec<String> = segment_files()
        .into_iter()
        .filter(|f| f.contains(&format!("-{pid}-")))
        .collect();
    assert!(
        config_pid_files.is_empty(),
        "no segment file outlives set-up: {config_pid_files:?}"
    );
}

#[test]
fn tcp_and_shm_clients_share_one_data_node() {
    let spec = ClusterSpec::new().use_shm(true);
    let cluster = TestCluster::start(spec).expect("start the cluster");
    // The config's choice, not asked for.
    let shm = cluster.connect().expect("connect");
    assert_eq!(shm.transporter_kind(), TransporterKind::Shm);
    let tcp = cluster
        .connect_over(TransporterKind::Tcp)
        .expect("connect over TCP on an SHM link");
    let table = recreate_table(&shm, &table_def()).expect("create the table");
    let rows: Vec<Vec<Value>> = (0..100)
        .map(|i| vec![Value::UInt32(i), Value::UInt32(i * 7)])
        .collect();
    insert_committed(&shm, &table, &rows).expect("insert over SHM");
    let table_seen_by_tcp = tcp.get_table("shm_held").expect("find the table over TCP");
    for i in 0..100 {
        let row = read_with(
            &tcp,
            &table_seen_by_tcp,
            &[Value::UInt32(i)],
            LockMode::CommittedRead,
        )
        .expect("read over TCP");
        assert_eq!(row, vec![Value::UInt32(i), Value::UInt32(i * 7)]);
    }
}

/// 3000 reads in one execute, every third of a missing row: each row and each 626 must land on
/// its own operation. (The answers, some 60 KB, are sent early and taken in slices; this test
/// checks the outcome, not that slicing happened.)
#[test]
fn a_large_execute_streams_every_answer_to_its_operation() {
    const ROWS: u32 = 3000;
    let spec = ClusterSpec::new().use_shm(true);
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let shm = cluster
        .connect_over(TransporterKind::Shm)
        .expect("connect over SHM");
    let tcp = cluster
        .connect_over(TransporterKind::Tcp)
        .expect("connect over TCP on an SHM link");
    let table = recreate_table(&shm, &table_def()).expect("create the table");
    let present = |i: u32| !i.is_multiple_of(3);
    let rows: Vec<Vec<Value>> = (0..ROWS)
        .filter(|&i| present(i))
        .map(|i| vec![Value::UInt32(i), Value::UInt32(i * 7)])
        .collect();
    for chunk in rows.chunks(1000) {
        insert_committed(&shm, &table, chunk).expect("insert a chunk");
    }
    for api in [&shm, &tcp] {
        let table = api.get_table("shm_held").expect("find the table");
        let mut transaction = api.start_transaction().expect("start");
        let ops: Vec<_> = (0..ROWS)
            .map(|i| {
                transaction
                    .read(&table, &[Value::UInt32(i)], LockMode::Read)
                    .expect("define a read")
            })
            .collect();
        transaction
            .execute_with(ExecType::NoCommit, AbortOption::IgnoreError)
            .expect("one execute of 3000 reads");
        for (i, op) in (0..ROWS).zip(ops) {
            if present(i) {
                assert_eq!(
                    transaction.row(op),
                    Some(&[Value::UInt32(i), Value::UInt32(i * 7)][..]),
                    "row {i} over {:?}",
                    api.transporter_kind()
                );
                assert!(transaction.op_error(op).is_none());
            } else {
                assert_eq!(transaction.row(op), None, "row {i} does not exist");
                assert_eq!(transaction.op_error(op).map(|e| e.code), Some(626));
            }
        }
        transaction.close();
    }
}
