//! Proves that an API node whose `[api]` slot another API node took while it had no link (a
//! system restart while it was stopped) is not shut out for ever: without a chosen node id it
//! takes another free slot and serves again; with one (`--ndb-nodeid`), its requests fail
//! with 4010 naming the refusal (1702) until the slot is free, and then it serves again.
//! The first API node is an `rndb-redis` gateway, a process of its own, stopped with SIGSTOP
//! over the restart so that the second one connects first.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rndb_api::{Cluster, NodeId};
use rndb_tests::gateway::Gateway;
use rndb_tests::{wait_until, ClusterSpec, TestCluster, API_NODE_ID_FIRST};

/// A system restart, and an API node linking again after it.
const STEP_TIMEOUT: Duration = Duration::from_secs(90);

/// How long a Redis call may wait for the gateway's reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to the gateway whose calls time out rather than hang.
fn connection(gateway: &Gateway) -> Result<redis::Connection, String> {
    let client = redis::Client::open(gateway.url()).map_err(|e| e.to_string())?;
    let connection = client
        .get_connection_with_timeout(REPLY_TIMEOUT)
        .map_err(|e| e.to_string())?;
    connection
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(|e| e.to_string())?;
    Ok(connection)
}

/// SETs `key` to `value` through the gateway: its reply, or the error's text.
fn set(gateway: &Gateway, key: &str, value: &str) -> Result<(), String> {
    let mut connection = connection(gateway)?;
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<String>(&mut connection)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn get(gateway: &Gateway, key: &str) -> Option<String> {
    let mut connection = connection(gateway).expect("connect to the gateway");
    redis::cmd("GET")
        .arg(key)
        .query(&mut connection)
        .expect("GET")
}

fn signal(gateway: &Gateway, signal: Signal) {
    let pid = Pid::from_raw(i32::try_from(gateway.child.id()).expect("a pid"));
    kill(pid, signal).expect("signal the gateway");
}

/// Starts a one-node cluster with three API slots and a gateway (which takes the first,
/// `API_NODE_ID_FIRST`) started with `args`; its tables are in a saved checkpoint. Stops the
/// gateway, restarts the cluster from its files, and connects another API node, which takes
/// the gateway's slot. Then lets the gateway go on.
fn slot_taken_over_a_system_restart(args: &[&str]) -> (TestCluster, Gateway, Cluster) {
    let mut cluster =
        TestCluster::start(ClusterSpec::new().api_slots(3)).expect("start a data node");
    let gateway = Gateway::start_with(&cluster, args);
    assert_eq!(gateway.node_id, API_NODE_ID_FIRST);
    set(&gateway, "before", "1").expect("SET before the restart");
    cluster
        .wait_for_saved_checkpoints(NodeId(1), 2)
        .expect("the gateway's tables in a saved checkpoint");
    signal(&gateway, Signal::SIGSTOP);
    cluster.kill_all_nodes().expect("kill the data node");
    cluster
        .restart_stopped_nodes()
        .expect("start it from its files");
    let other = cluster.connect().expect("connect another API node");
    assert_eq!(
        other.node_id(),
        NodeId(API_NODE_ID_FIRST),
        "the other API node takes the stopped one's slot"
    );
    signal(&gateway, Signal::SIGCONT);
    (cluster, gateway, other)
}

#[test]
fn an_api_node_whose_slot_was_taken_takes_another() {
    let (cluster, gateway, other) = slot_taken_over_a_system_restart(&["--port", "0"]);
    wait_until("the gateway to serve again", STEP_TIMEOUT, || {
        Ok(set(&gateway, "after", "2").ok())
    })
    .expect("the gateway serves again under another slot");
    assert_eq!(get(&gateway, "before").as_deref(), Some("1"));
    assert_eq!(get(&gateway, "after").as_deref(), Some("2"));
    let log = std::fs::read_to_string(Gateway::log_path(&cluster)).expect("the gateway's log");
    let moved = format!("it is API node {} from now on", API_NODE_ID_FIRST + 1);
    assert!(log.contains(&moved), "{moved:?} not in the log: {log}");
    // Both API nodes work, each under its own id.
    other.ping().expect("the other API node still serves");
}

#[test]
fn an_api_node_with_a_chosen_id_names_the_refusal_and_serves_once_its_slot_is_free() {
    let id = API_NODE_ID_FIRST.to_string();
    let (cluster, gateway, other) =
        slot_taken_over_a_system_restart(&["--port", "0", "--ndb-nodeid", &id]);
    let refused = wait_until(
        "the gateway's requests to name the refusal",
        STEP_TIMEOUT,
        || {
            Ok(set(&gateway, "after", "2")
                .err()
                .filter(|e| e.contains("1702")))
        },
    )
    .expect("a request names the refusal");
    assert!(refused.contains("4010"), "{refused}");
    // The gateway keeps its chosen id: it never moves.
    let log = std::fs::read_to_string(Gateway::log_path(&cluster)).expect("the gateway's log");
    assert!(!log.contains("from now on"), "{log}");
    drop(other);
    wait_until("the gateway to serve again", STEP_TIMEOUT, || {
        Ok(set(&gateway, "after", "2").ok())
    })
    .expect("the gateway serves again once its slot is free");
    assert_eq!(get(&gateway, "before").as_deref(), Some("1"));
}
