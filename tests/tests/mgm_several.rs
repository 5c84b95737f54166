//! Proves that a cluster runs with two management servers as NDB's does: with two `[ndb_mgmd]`
//! sections (NodeIds 49 and 48) and data nodes started from connectstrings naming both, SHOW
//! through either server lists every data node and both management servers connected, line for
//! line, and each server's cluster log records the starts; an API node connects through a
//! connectstring whose first server is dead; after SIGKILL of one server the other serves SHOW,
//! a data node RESTART (asked through a connectstring whose first server is the dead one) and
//! logs it, and the restarted node fetches its config by failing over; a server started again
//! sees the whole cluster again; a RESTART asked through both servers at once restarts the node
//! once, and both servers log it; a server restarted with another config is refused by the
//! other server and by the data nodes' reports, and both cluster logs say why; started again
//! with the cluster's config it is accepted; a data node's failure is in both cluster logs; and
//! SHUTDOWN through one server stops the data nodes and both servers.

use std::fs;
use std::time::Duration;

use rndb_api::{ColumnDef, ColumnType, ConnectOptions, ExecType, TableDef, Value};
use rndb_tests::processes::{run, text, wait_listening, write_two_mgm_config, Processes};
use rndb_tests::{free_port, wait_until};

/// How long a start or restart may take (debug builds on a shared 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a server may take to see a change (reports come every 200 ms, reconnects every 1 s).
const SEE_TIMEOUT: Duration = Duration::from_secs(30);
const VERSION: &str = concat!("rndb-", env!("CARGO_PKG_VERSION"));

fn mgm(cs: &str, command: &str) -> String {
    let out = run(
        "ndb_mgm",
        &["-c", cs, "--connect-retries", "0", "-e", command],
    );
    assert!(
        out.status.success(),
        "ndb_mgm -c {cs} -e {command:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Polls SHOW through `cs` (one server) until it is `expected`; panics with the last SHOW
/// otherwise.
fn wait_show(cs: &str, expected: &str) {
    let expected = format!("Connected to Management Server at: {cs}\n{expected}");
    let mut last = String::new();
    let seen = wait_until(&format!("SHOW through {cs}"), SEE_TIMEOUT, || {
        let out = run(
            "ndb_mgm",
            &["-c", cs, "--connect-retries", "0", "-e", "SHOW"],
        );
        let shown = text(&out.stdout);
        let matches = shown == expected;
        last = shown + &text(&out.stderr);
        Ok(matches.then_some(()))
    });
    assert!(
        seen.is_ok(),
        "SHOW through {cs}:\n{last}\nexpected:\n{expected}"
    );
}

/// SHOW's text: `connected` management servers (besides none) and API nodes as listed.
fn expected_show(mgm_connected: &[u16], api_connected: &[u16], master: u16) -> String {
    let data = |id: u16| {
        let star = if id == master { ", *" } else { "" };
        format!("id={id}\t@127.0.0.1  ({VERSION}, Nodegroup: 0{star})\n")
    };
    let mgm = |id: u16| {
        if mgm_connected.contains(&id) {
            format!("id={id}\t@127.0.0.1  ({VERSION})\n")
        } else {
            format!("id={id} (not connected, accepting connect from 127.0.0.1)\n")
        }
    };
    let api = |id: u16| {
        if api_connected.contains(&id) {
            format!("id={id}\t@127.0.0.1  ({VERSION})\n")
        } else {
            format!("id={id} (not connected, accepting connect from any host)\n")
        }
    };
    format!(
        "Cluster Configuration\n---------------------\n\
         [ndbd(NDB)]\t2 node(s)\n{}{}\n\
         [ndb_mgmd(MGM)]\t2 node(s)\n{}{}\n\
         [mysqld(API)]\t2 node(s)\n{}{}",
        data(1),
        data(2),
        mgm(48),
        mgm(49),
        api(50),
        api(51)
    )
}

fn cluster_log(procs: &Processes, id: u16) -> String {
    fs::read_to_string(procs.path(&format!("mgm{id}/ndb_{id}_cluster.log"))).unwrap_or_default()
}

/// Waits until server `id`'s cluster log has a line ending in `-- <event>`, after the first
/// `skip` bytes.
fn wait_logged(procs: &Processes, id: u16, skip: usize, event: &str) {
    let wanted = format!("-- {event}\n");
    let found = wait_until(
        &format!("ndb_{id}_cluster.log to record {event:?}"),
        SEE_TIMEOUT,
        || {
            let log = cluster_log(procs, id);
            Ok(log
                .get(skip..)
                .unwrap_or("")
                .contains(&wanted)
                .then_some(()))
        },
    );
    assert!(
        found.is_ok(),
        "ndb_{id}_cluster.log lacks {event:?} after byte {skip}:\n{}",
        cluster_log(procs, id)
    );
}

/// `ndb_waiter` through `cs` until every data node is started.
fn wait_started(cs: &str) {
    let timeout = START_TIMEOUT.as_secs().to_string();
    let out = run("ndb_waiter", &["-c", cs, "--timeout", &timeout]);
    assert!(
        out.status.success(),
        "ndb_waiter -c {cs}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn two_management_servers_serve_track_and_outlive_each_other() {
    let mut procs = Processes::new();
    let (config, [port_49, port_48]) = write_two_mgm_config(procs.dir.path(), "", 2);
    let config_arg = config.display().to_string();
    for (id, name) in [(49, "ndb_mgmd-49"), (48, "ndb_mgmd-48")] {
        procs.spawn(
            name,
            "ndb_mgmd",
            &["-f", &config_arg, "--ndb-nodeid", &id.to_string()],
        );
    }
    wait_listening(port_49);
    wait_listening(port_48);
    let only_49 = format!("127.0.0.1:{port_49}");
    let only_48 = format!("127.0.0.1:{port_48}");
    let both = format!("127.0.0.1:{port_49},127.0.0.1:{port_48}");
    let dead_48_first = format!("127.0.0.1:{port_48},127.0.0.1:{port_49}");
    procs.spawn("ndbd-1", "ndbd", &["-c", &both, "--ndb-nodeid", "1"]);
    procs.spawn(
        "ndbd-2",
        "ndbd",
        &["-c", &dead_48_first, "--ndb-nodeid", "2"],
    );
    wait_started(&only_49);
    wait_started(&only_48);

    // Each server sees both data nodes and the other server, and logged the starts.
    let all_up = expected_show(&[48, 49], &[], 1);
    wait_show(&only_49, &all_up);
    wait_show(&only_48, &all_up);
    for (id, other) in [(49, 48), (48, 49)] {
        for event in [
            "Node 1: Started (version ".to_string() + VERSION + ")",
            "Node 2: Started (version ".to_string() + VERSION + ")",
            format!("Node {id}: Node {other} Connected"),
        ] {
            wait_logged(&procs, id, 0, &event);
        }
    }

    // An API node connects although the first server of its connectstring is dead, and both
    // servers hear of it.
    let dead = format!("127.0.0.1:{}", free_port());
    let api = rndb_api::Cluster::connect_mgm(
        &format!("nodeid=50,{dead},{only_49}"),
        ConnectOptions {
            connect_timeout: START_TIMEOUT,
            ..ConnectOptions::default()
        },
    )
    .expect("an API node connects past a dead management server");
    let table = api
        .create_table(&TableDef::new(
            "several",
            vec![
                ColumnDef::key("id", ColumnType::UInt32),
                ColumnDef::new("value", ColumnType::Int64),
            ],
        ))
        .expect("create a table");
    let mut transaction = api.start_transaction().expect("start a transaction");
    transaction
        .insert(&table, &[Value::UInt32(1), Value::Int64(7)])
        .expect("define an insert");
    transaction.execute(ExecType::Commit).expect("commit");
    drop(transaction);
    let with_api = expected_show(&[48, 49], &[50], 1);
    wait_show(&only_49, &with_api);
    wait_show(&only_48, &with_api);
    drop(api);
    wait_show(&only_49, &all_up);

    // SIGKILL of server 48: server 49 sees it go and serves on.
    procs.kill("ndb_mgmd-48");
    wait_show(&only_49, &expected_show(&[49], &[], 1));
    wait_logged(&procs, 49, 0, "Node 49: Node 48 Disconnected");

    // 2 RESTART through a connectstring whose first server is the dead one: ndb_mgm fails over
    // to 49, node 2's angel fetches its config again the same way, and 49 logs the restart.
    let before = cluster_log(&procs, 49).len();
    assert_eq!(
        mgm(&dead_48_first, "2 RESTART"),
        "Node 2: Node shutdown initiated\n\
         Node 2: Node shutdown completed, restarting.\n\
         Node 2 is being restarted\n"
    );
    wait_started(&dead_48_first);
    wait_logged(
        &procs,
        49,
        before,
        "Node 2: Node shutdown completed, restarting",
    );
    wait_logged(
        &procs,
        49,
        before,
        &format!("Node 2: Started (version {VERSION})"),
    );

    // Server 48 started again (from its config cache) sees the whole cluster again: the data
    // nodes report to it once it listens.
    procs.spawn(
        "ndb_mgmd-48b",
        "ndb_mgmd",
        &["-f", &config_arg, "--ndb-nodeid", "48"],
    );
    wait_listening(port_48);
    wait_show(&only_48, &all_up);
    wait_show(&only_49, &all_up);

    // 1 RESTART asked through both servers at once: node 1 restarts once, and both servers
    // see it stop for a restart and start again.
    let before_49 = cluster_log(&procs, 49).len();
    let before_48 = cluster_log(&procs, 48).len();
    let children_before = count(&procs.log("ndbd-1"), "started child:");
    let requests: Vec<_> = [only_49.clone(), only_48.clone()]
        .into_iter()
        .map(|cs| {
            std::thread::spawn(move || {
                run(
                    "ndb_mgm",
                    &["-c", &cs, "--connect-retries", "0", "-e", "1 RESTART"],
                )
            })
        })
        .collect();
    let mut restarted = 0;
    for request in requests {
        let out = request.join().expect("a request thread");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if out.status.success() {
            assert!(stdout.contains("Node 1 is being restarted"), "{stdout}");
            restarted += 1;
        } else {
            // The second server may already have seen node 1 stopping.
            assert!(
                stderr.contains("Node 1 is already stopping or restarting"),
                "{stdout}{stderr}"
            );
        }
    }
    assert!(restarted >= 1, "neither server restarted node 1");
    wait_started(&both);
    for (id, before) in [(49, before_49), (48, before_48)] {
        wait_logged(
            &procs,
            id,
            before,
            "Node 1: Node shutdown completed, restarting",
        );
        wait_logged(
            &procs,
            id,
            before,
            &format!("Node 1: Started (version {VERSION})"),
        );
    }
    let node_1_log = procs.log("ndbd-1");
    assert_eq!(
        count(&node_1_log, "started child:"),
        children_before + 1,
        "node 1 was not restarted exactly once:\n{node_1_log}"
    );
    wait_show(&only_49, &all_up);
    wait_show(&only_48, &all_up);

    // Server 48 started again from another config (other settings, same nodes): server 49 and
    // the data nodes are refused by it, it is refused by 49, and both logs say why.
    procs.kill("ndb_mgmd-48b");
    let other = procs.path("other.ini");
    let text_now = fs::read_to_string(&config).expect("read the config");
    fs::write(&other, text_now.replace("DataMemory=16M", "DataMemory=24M"))
        .expect("write another config");
    let before_49 = cluster_log(&procs, 49).len();
    let before_48 = cluster_log(&procs, 48).len();
    procs.spawn(
        "ndb_mgmd-48c",
        "ndb_mgmd",
        &[
            "-f",
            &other.display().to_string(),
            "--ndb-nodeid",
            "48",
            "--reload",
        ],
    );
    wait_listening(port_48);
    let mismatch = |node: &str| {
        format!("config mismatch: {node} (at 127.0.0.1) runs another config than ndb_mgmd")
    };
    for (id, before, node) in [
        (48, before_48, "data node 1"),
        (48, before_48, "data node 2"),
        (48, before_48, "management node 49"),
        (49, before_49, "management node 48"),
    ] {
        let found = wait_until(
            &format!("ndb_{id}_cluster.log to refuse {node}"),
            SEE_TIMEOUT,
            || {
                let log = cluster_log(&procs, id);
                Ok(log
                    .get(before..)
                    .unwrap_or("")
                    .lines()
                    .any(|l| l.contains(&mismatch(node)) && l.contains("other settings"))
                    .then_some(()))
            },
        );
        assert!(
            found.is_ok(),
            "ndb_{id}_cluster.log does not refuse {node}:\n{}",
            cluster_log(&procs, id)
        );
    }
    // Nothing of the cluster is mixed into server 48's view.
    let refused = expected_show(&[48], &[], 0)
        .replace(
            &format!("id=1\t@127.0.0.1  ({VERSION}, Nodegroup: 0)\n"),
            "id=1 (not connected, accepting connect from 127.0.0.1)\n",
        )
        .replace(
            &format!("id=2\t@127.0.0.1  ({VERSION}, Nodegroup: 0)\n"),
            "id=2 (not connected, accepting connect from 127.0.0.1)\n",
        );
    wait_show(&only_48, &refused);
    wait_show(&only_49, &expected_show(&[49], &[], 1));
    for node in ["ndbd-1", "ndbd-2"] {
        let log = procs.log(node);
        assert!(
            log.contains("ndb_mgmd 48 at")
                && log.contains("refused this node's reports: config mismatch"),
            "{node} does not log the refusal:\n{log}"
        );
    }

    // Started again from the cluster's config, server 48 is accepted again; SHUTDOWN through it
    // stops the data nodes, then server 49, then itself.
    procs.kill("ndb_mgmd-48c");
    procs.spawn(
        "ndb_mgmd-48d",
        "ndb_mgmd",
        &["-f", &config_arg, "--ndb-nodeid", "48", "--reload"],
    );
    wait_listening(port_48);
    wait_show(&only_48, &all_up);
    wait_show(&only_49, &all_up);

    // A data node failure (SIGKILL of node 2's angel takes its data node with it) is in both
    // cluster logs: the server's own view and the survivor's.
    let before_49 = cluster_log(&procs, 49).len();
    let before_48 = cluster_log(&procs, 48).len();
    procs.kill("ndbd-2");
    for (id, before) in [(49, before_49), (48, before_48)] {
        wait_logged(
            &procs,
            id,
            before,
            &format!("Node {id}: Node 2 Disconnected"),
        );
        wait_logged(&procs, id, before, "Node 1: Node 2 Disconnected");
    }
    assert_eq!(
        mgm(&only_48, "SHUTDOWN"),
        "1 NDB Cluster node(s) have shutdown.\n\
         Disconnecting to allow management server to shutdown.\n\
         NDB Cluster management server shutdown.\n"
    );
    for name in ["ndbd-1", "ndb_mgmd-49", "ndb_mgmd-48d"] {
        let status = procs.wait_exit(name, SEE_TIMEOUT);
        assert!(status.success(), "{name} exited with {status}");
    }
    wait_logged(&procs, 49, 0, "Node 49: Node shutdown completed");
}

#[test]
fn every_server_tried_is_named_when_none_answers() {
    let (a, b) = (free_port(), free_port());
    let cs = format!("127.0.0.1:{a},127.0.0.1:{b}");
    let out = run(
        "ndb_mgm",
        &["-c", &cs, "--connect-retries", "0", "-e", "SHOW"],
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    for port in [a, b] {
        assert!(
            stderr.contains(&format!("127.0.0.1:{port}: ")),
            "the error does not name 127.0.0.1:{port}: {stderr}"
        );
    }
    let error = match rndb_api::Cluster::connect_mgm(&cs, ConnectOptions::default()) {
        Ok(_) => panic!("an API node connected with no management server"),
        Err(e) => e.to_string(),
    };
    for port in [a, b] {
        assert!(
            error.contains(&format!("127.0.0.1:{port}: ")),
            "the error does not name 127.0.0.1:{port}: {error}"
        );
    }
}
