//! Proves that when a client process dies in the middle of a transaction, the data node notices
//! the closed link, aborts the transaction and releases its locks, and goes on serving; that a
//! client that stops (SIGSTOP, its socket open) is disconnected after missing its heartbeats
//! (HeartbeatIntervalDbApi), with the same outcome; and that a request to a data node that
//! stops fails with 4010 after the API's heartbeats go unanswered, long before its timeout.
//!
//! The client is this test executable run again in a child role: the parent re-executes itself
//! with `--exact hold_a_lock_as_child` and an environment variable naming the config.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use rndb_api::{ColumnDef, ColumnType, ExecType, LockMode, TableDef, Value};
use rndb_tests::ops::{insert_committed, read_with, recreate_table};
use rndb_tests::{wait_until, ChildTest, ClusterSpec, TestCluster};

/// Set in the child's environment to the config path; the child test does nothing without it.
const CHILD_CONFIG_ENV: &str = "RNDB_TEST_DISCONNECT_CHILD_CONFIG";
/// What the child prints once it holds the lock. libtest prints "test name ... " without a
/// newline before the test runs, so the parent looks for this text anywhere in a line.
const LOCKED_LINE: &str = "rndb-disconnect-child: locked";
/// How long the child holds the lock if nobody kills it.
const CHILD_HOLD: Duration = Duration::from_secs(60);
/// How long the parent waits for the child to say it holds the lock.
const CHILD_READY_TIMEOUT: Duration = Duration::from_secs(30);

fn table_def() -> TableDef {
    TableDef::new(
        "held",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::UInt32),
        ],
    )
}

/// The child role: connects, locks row 1 with an update that is never committed, says so, and
/// waits to be killed. Run normally (without the environment variable) it does nothing.
#[test]
fn hold_a_lock_as_child() {
    let Some(config) = std::env::var_os(CHILD_CONFIG_ENV) else {
        return;
    };
    let api = rndb_api::Cluster::connect(&config, rndb_api::ConnectOptions::default())
        .expect("child: connect");
    let table = api.get_table("held").expect("child: find the table");
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

/// Starts a one-node cluster of `spec` with row 1 of `held`, and a child client that holds it
/// locked with an uncommitted update.
fn cluster_with_a_locked_row(
    spec: ClusterSpec,
) -> (TestCluster, rndb_api::Cluster, rndb_api::Table, ChildTest) {
    let cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = recreate_table(&api, &table_def()).expect("create the table");
    insert_committed(&api, &table, &[vec![Value::UInt32(1), Value::UInt32(1)]]).expect("insert");
    let mut child = ChildTest::spawn(
        "hold_a_lock_as_child",
        (CHILD_CONFIG_ENV, cluster.config_path().as_os_str()),
    )
    .expect("spawn the child client");
    child
        .wait_for_line(LOCKED_LINE, CHILD_READY_TIMEOUT)
        .expect("the child holds the lock");
    (cluster, api, table, child)
}

/// Waits until row 1 can be locked again (its holder is gone) and returns it.
fn row_once_released(api: &rndb_api::Cluster, table: &rndb_api::Table, what: &str) -> Vec<Value> {
    wait_until(what, Duration::from_secs(20), || {
        match read_with(api, table, &[Value::UInt32(1)], LockMode::Exclusive) {
            Ok(row) => Ok(Some(row)),
            Err(e) if e.code() == Some(266) => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
    .unwrap_or_else(|e| panic!("{what}: {e:#}"))
}

#[test]
fn a_killed_client_releases_its_locks() {
    let spec = ClusterSpec::new().deadlock_timeout_ms(200);
    let (mut cluster, api, table, mut child) = cluster_with_a_locked_row(spec);
    let blocked = read_with(&api, &table, &[Value::UInt32(1)], LockMode::Exclusive);
    assert_eq!(
        blocked.map_err(|e| e.code()).err(),
        Some(Some(266)),
        "the child holds the lock"
    );

    child.kill().expect("kill -9 the child");
    let row = row_once_released(&api, &table, "the dead client's lock to be released");
    assert_eq!(
        row[1],
        Value::UInt32(1),
        "the dead client's update was rolled back"
    );
    let node = cluster.data_node_ids()[0];
    assert!(
        cluster.is_running(node),
        "the data node survived the client's death"
    );
}

/// HeartbeatIntervalDbApi of the heartbeat tests: 4 missed make about a second.
const API_HEARTBEAT_MS: &str = "200";

#[test]
fn a_stopped_client_is_disconnected_by_heartbeats_and_releases_its_locks() {
    let spec = ClusterSpec::new()
        .deadlock_timeout_ms(200)
        .data_node_param("HeartbeatIntervalDbApi", API_HEARTBEAT_MS);
    let (cluster, api, table, mut child) = cluster_with_a_locked_row(spec);
    // Stopped, the child keeps its socket open but sends no heartbeat.
    let pid = Pid::from_raw(child.pid() as i32);
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP the child");
    let row = row_once_released(&api, &table, "the stopped client's lock to be released");
    assert_eq!(
        row[1],
        Value::UInt32(1),
        "the stopped client's update was rolled back"
    );
    let node = cluster.data_node_ids()[0];
    let log = cluster.log(node);
    assert!(
        log.contains("missed 4 heartbeats"),
        "the data node says why it dropped the client:\n{log}"
    );
    let _ = kill(pid, Signal::SIGCONT);
    child.kill().expect("kill the child");
}

#[test]
fn a_request_to_a_stopped_data_node_fails_when_heartbeats_go_unanswered() {
    let spec = ClusterSpec::new().data_node_param("HeartbeatIntervalDbApi", API_HEARTBEAT_MS);
    let mut cluster = TestCluster::start(spec).expect("start the cluster");
    let request_timeout = Duration::from_secs(60);
    let api = cluster
        .connect_with(rndb_api::ConnectOptions {
            request_timeout,
            ..rndb_api::ConnectOptions::default()
        })
        .expect("connect");
    let table = recreate_table(&api, &table_def()).expect("create the table");
    insert_committed(&api, &table, &[vec![Value::UInt32(1), Value::UInt32(1)]]).expect("insert");
    let node = cluster.data_node_ids()[0];
    let pid = Pid::from_raw(cluster.pid(node).expect("the data node runs") as i32);
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP the data node");
    let asked = Instant::now();
    let read = read_with(&api, &table, &[Value::UInt32(1)], LockMode::Read);
    let waited = asked.elapsed();
    let _ = kill(pid, Signal::SIGCONT);
    assert_eq!(
        read.map_err(|e| e.code()).err(),
        Some(Some(4010)),
        "the read fails as on a lost link"
    );
    // About 4 intervals of 200 ms; the request timeout is a minute.
    assert!(
        waited < request_timeout / 3,
        "the read failed only after {waited:?}"
    );
    assert!(cluster.is_running(node), "the data node runs on");
}
