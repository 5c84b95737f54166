//! Proves that a cluster runs from a management server as NDB's does: `ndb_mgmd -f` serves the
//! config, data nodes and an API node start with a connectstring only, `ndb_waiter` returns 0
//! once all started, `ndb_mgm -e SHOW` lists them in NDB's layout, `N STOP` stops a node (and
//! SHOW says so, and the cluster log records it), a stop that would take a node group down is
//! refused, SHUTDOWN ends everything; and that bad connectstrings, commands and configs get
//! clear errors and non-zero exit codes, and a restarted ndb_mgmd serves its cached config.

use std::fs;
use std::net::TcpStream;
use std::process::Output;
use std::time::{Duration, Instant};

use rndb_tests::processes::{run, text, write_mgm_config, Processes};
use rndb_tests::{free_port, wait_until};

/// How long a start may take (two data nodes in debug builds on a shared 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(90);
const VERSION: &str = concat!("rndb-", env!("CARGO_PKG_VERSION"));

fn wait_for_port(port: u16) {
    wait_until("ndb_mgmd to listen", Duration::from_secs(20), || {
        Ok(TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ()))
    })
    .expect("ndb_mgmd listens");
}

fn show(connectstring: &str) -> String {
    let out = run("ndb_mgm", &["-c", connectstring, "-e", "SHOW"]);
    assert!(out.status.success(), "SHOW failed: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn a_cluster_started_from_ndb_mgmd_is_shown_waited_for_and_stopped_through_it() {
    let mut procs = Processes::new();
    let (config, port) = write_mgm_config(procs.dir.path(), "", 2);
    let cs = format!("127.0.0.1:{port}");
    let config_arg = config.display().to_string();
    procs.spawn("ndb_mgmd", "ndb_mgmd", &["-f", &config_arg]);
    wait_for_port(port);
    procs.spawn("ndbd-1", "ndbd", &["-c", &cs, "--ndb-nodeid", "1"]);
    procs.spawn(
        "ndbd-2",
        "ndbd",
        &["--ndb-connectstring", &format!("nodeid=2,{cs}")],
    );

    let timeout = START_TIMEOUT.as_secs().to_string();
    let waiter = run("ndb_waiter", &["-c", &cs, "--timeout", &timeout]);
    let waited = text(&waiter.stdout);
    assert!(
        waiter.status.success(),
        "ndb_waiter: {waited}{}",
        text(&waiter.stderr)
    );
    assert!(
        waited.contains("Node 1: STARTED") && waited.contains("Node 2: STARTED"),
        "{waited}"
    );

    // An API node with a connectstring only; it shows once a data node reports its link.
    let api = rndb_api::Cluster::connect_mgm(&cs, rndb_api::ConnectOptions::default())
        .expect("an API node connects through ndb_mgmd");
    assert_eq!(api.node_id().0, 50);
    let shown = wait_until("SHOW to list API node 50", Duration::from_secs(10), || {
        let out = show(&cs);
        Ok(out.contains("id=50\t@").then_some(out))
    })
    .expect("API node 50 shows as connected");
    let expected = format!(
        "Connected to Management Server at: {cs}\n\
         Cluster Configuration\n\
         ---------------------\n\
         [ndbd(NDB)]\t2 node(s)\n\
         id=1\t@127.0.0.1  ({VERSION}, Nodegroup: 0, *)\n\
         id=2\t@127.0.0.1  ({VERSION}, Nodegroup: 0)\n\
         \n\
         [ndb_mgmd(MGM)]\t1 node(s)\n\
         id=49\t@127.0.0.1  ({VERSION})\n\
         \n\
         [mysqld(API)]\t2 node(s)\n\
         id=50\t@127.0.0.1  ({VERSION})\n\
         id=51 (not connected, accepting connect from any host)\n"
    );
    for (got, want) in shown.lines().zip(expected.lines()) {
        assert_eq!(got, want, "SHOW:\n{shown}");
    }
    assert_eq!(
        shown.lines().count(),
        expected.lines().count(),
        "SHOW:\n{shown}"
    );
    drop(api);

    let stop = run("ndb_mgm", &["-c", &cs, "-e", "2 STOP"]);
    assert!(stop.status.success(), "2 STOP: {}", text(&stop.stderr));
    assert_eq!(text(&stop.stdout), "Node 2 has shutdown.\n");
    assert!(procs.wait_exit("ndbd-2", Duration::from_secs(30)).success());
    let shown = show(&cs);
    assert!(
        shown.contains("id=2 (not connected, accepting connect from 127.0.0.1)\n"),
        "{shown}"
    );
    let status = run("ndb_mgm", &["-c", &cs, "-e", "ALL STATUS"]);
    assert_eq!(
        text(&status.stdout),
        format!("Node 1: started ({VERSION})\nNode 2: not connected\n")
    );

    // Node 1 is its node group's last started node: stopping it is refused, and says why.
    let refused = run("ndb_mgm", &["-c", &cs, "-e", "1 STOP"]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("Node shutdown would cause system crash"),
        "{}",
        text(&refused.stderr)
    );
    let log = fs::read_to_string(procs.path("mgm/ndb_49_cluster.log")).expect("the cluster log");
    for line in [
        "[MgmtSrvr] INFO     -- Node 1: Started (version",
        "[MgmtSrvr] INFO     -- Node 2: Node shutdown completed",
        "[MgmtSrvr] ALERT    -- Node 49: Node 2 Disconnected",
        "[MgmtSrvr] INFO     -- Node 49: Node 50: API rndb-",
    ] {
        assert!(log.contains(line), "the cluster log lacks {line:?}:\n{log}");
    }

    let shutdown = run("ndb_mgm", &["-c", &cs, "-e", "SHUTDOWN"]);
    assert!(shutdown.status.success(), "{}", text(&shutdown.stderr));
    assert!(text(&shutdown.stdout).starts_with("1 NDB Cluster node(s) have shutdown."));
    assert!(procs.wait_exit("ndbd-1", Duration::from_secs(30)).success());
    assert!(procs
        .wait_exit("ndb_mgmd", Duration::from_secs(30))
        .success());
}

#[test]
fn bad_connectstrings_commands_and_configs_get_clear_errors() {
    let mut procs = Processes::new();
    let unused = format!("127.0.0.1:{}", free_port());
    let check = |out: Output, expected: &str| {
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "succeeded; expected {expected:?}");
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in:\n{stderr}"
        );
    };
    check(
        run("ndb_mgm", &["-c", "localhost:nope", "-e", "SHOW"]),
        "port \"nope\"",
    );
    check(
        run(
            "ndb_mgm",
            &["-c", &unused, "--connect-retries", "0", "-e", "SHOW"],
        ),
        "Unable to connect with connect string",
    );
    check(
        run("ndbd", &["-c", &unused, "--connect-retries", "0"]),
        "fetch the config from ndb_mgmd",
    );
    check(
        run("ndb_show_tables", &["-c", &unused]),
        "could not connect to a management server",
    );
    check(
        run("ndb_desc", &["-c", &unused, "t"]),
        "could not connect to a management server",
    );
    let no_mgm = procs.path("no-mgm.ini");
    fs::write(&no_mgm, "[ndbd]\nNodeId=1\nNoOfReplicas=1\n[api]\n").expect("write");
    check(
        run("ndb_mgmd", &["-f", &no_mgm.display().to_string()]),
        "has no [ndb_mgmd] section",
    );

    let (config, port) = write_mgm_config(procs.dir.path(), "", 2);
    let cs = format!("127.0.0.1:{port}");
    procs.spawn(
        "ndb_mgmd",
        "ndb_mgmd",
        &["-f", &config.display().to_string()],
    );
    wait_for_port(port);
    check(
        run("ndb_mgm", &["-c", &cs, "-e", "frobnicate"]),
        "Invalid command: frobnicate",
    );
    check(
        run("ndb_mgm", &["-c", &cs, "-e", "2 RESTART"]),
        "Node 2 is not connected: nothing to restart",
    );
    check(
        run("ndb_mgm", &["-c", &cs, "-e", "ALL RESTART"]),
        "no data node is connected: nothing to restart",
    );
    check(
        run("ndb_mgm", &["-c", &cs, "-e", "2 START"]),
        "Node 2 is not connected",
    );
    check(
        run(
            "ndbd",
            &[
                "-f",
                &config.display().to_string(),
                "--ndb-nodeid",
                "1",
                "--nostart",
            ],
        ),
        "--nostart needs --ndb-connectstring",
    );
    check(
        run("ndb_mgm", &["-c", &cs, "-e", "2 STOP"]),
        "Node 2 is not connected",
    );
    check(
        run("ndb_mgm", &["-c", &cs, "-e", "51 STOP"]),
        "is an API node",
    );
    check(
        run("ndbd", &["-c", &cs, "--ndb-nodeid", "7"]),
        "node 7 is not a data node ([ndbd] NodeId)",
    );
    let waiter = run("ndb_waiter", &["-c", &cs, "--timeout", "1"]);
    assert_eq!(waiter.status.code(), Some(1), "{}", text(&waiter.stdout));
    assert!(text(&waiter.stderr).contains("timed out after 1 s waiting for state STARTED"));

    // Restarted without -f, ndb_mgmd serves the config it cached in its DataDir.
    let shutdown = run("ndb_mgm", &["-c", &cs, "-e", "SHUTDOWN"]);
    assert!(shutdown.status.success(), "{}", text(&shutdown.stderr));
    assert!(procs
        .wait_exit("ndb_mgmd", Duration::from_secs(30))
        .success());
    let configdir = procs.path("mgm").display().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    // The port was just released: the restart may find it in TIME_WAIT's grip for a moment.
    loop {
        procs.spawn("ndb_mgmd-2", "ndb_mgmd", &["--configdir", &configdir]);
        std::thread::sleep(Duration::from_millis(300));
        let running = procs.children.last_mut().expect("started").1.try_wait();
        if matches!(running, Ok(None)) || Instant::now() > deadline {
            break;
        }
        procs.children.pop();
    }
    wait_for_port(port);
    assert!(show(&cs).contains("[ndbd(NDB)]\t2 node(s)"));
    assert!(procs
        .log("ndb_mgmd-2")
        .contains("serving the cached config"));
}
