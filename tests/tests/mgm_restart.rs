//! Proves that `ndb_mgm` restarts data nodes as NDB's does, through each node's angel: on a
//! cluster of two data nodes (NoOfReplicas=2) started from ndb_mgmd, `2 RESTART` while an API
//! node inserts brings node 2 back STARTED; `2 RESTART -n` leaves it waiting in NOT_STARTED
//! (`ndb_waiter --not-started` sees it) until `2 START`; a rolling restart (1 RESTART, then 2
//! RESTART) loses no acknowledged insert, and both replicas then hold the same rows; `ALL
//! RESTART` (a system restart) brings both back STARTED with every row committed before it
//! (durable or acknowledged in memory only: the nodes save it as they stop), and
//! `ALL RESTART -n` leaves both waiting until `ALL START`; the
//! cluster log records each restart; SIGKILL of an angel leaves no data node process behind
//! and SIGTERM of an angel stops its node gracefully; with StopOnError=0 an angel starts a
//! data node process killed with SIGKILL again, and it rejoins without losing a write; and a
//! data node stopped before the other saved more global checkpoints, started again with it,
//! is started a second time by its angel and rejoins by node restart with every row (and
//! `ndb_desc -c` describes the table through ndb_mgmd); and that `1 STOP` answers at once,
//! with NDB's "Node shutdown would cause system crash", when node 2 fails during the stop
//! (node 1 serves on), and node 1 stops once node 2 is back.

use std::collections::BTreeSet;
use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rndb_api::{
    AbortOption, Cluster, ColumnDef, ColumnType, ConnectOptions, ExecType, Table, TableDef, Value,
};
use rndb_tests::processes::{self, run, text, Processes};
use rndb_tests::wait_until;

/// How long a start or restart may take (debug builds on a shared 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a request may wait for its answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the writer keeps failing before it connects a new API node (an API node holds a
/// data node it saw fail as failed, so after a rolling restart only a new one sees both).
const RECONNECT_AFTER: Duration = Duration::from_secs(1);
/// The replica indexes of `read_from_replica`.
const PRIMARY: usize = 0;
const BACKUP: usize = 1;

fn mgm(cs: &str, command: &str) -> String {
    let out = run("ndb_mgm", &["-c", cs, "-e", command]);
    assert!(
        out.status.success(),
        "{command}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn mgm_refused(cs: &str, command: &str, expected: &str) {
    let out = run("ndb_mgm", &["-c", cs, "-e", command]);
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "{command} succeeded: {}",
        text(&out.stdout)
    );
    assert!(
        stderr.contains(expected),
        "{command}: expected {expected:?} in {stderr}"
    );
}

/// `ndb_waiter` with `args`; asserts that it succeeded.
fn wait_for(cs: &str, args: &[&str]) {
    let timeout = START_TIMEOUT.as_secs().to_string();
    let mut all = vec!["-c", cs, "--timeout", &timeout];
    all.extend_from_slice(args);
    let out = run("ndb_waiter", &all);
    assert!(
        out.status.success(),
        "ndb_waiter {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn connect(cs: &str) -> Result<Cluster, rndb_api::Error> {
    Cluster::connect_mgm(
        cs,
        ConnectOptions {
            request_timeout: REQUEST_TIMEOUT,
            connect_timeout: START_TIMEOUT,
            ..ConnectOptions::default()
        },
    )
}

fn table_def() -> TableDef {
    TableDef::new(
        "restarted",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("value", ColumnType::Int64),
        ],
    )
}

fn value_of(id: u32) -> i64 {
    i64::from(id) * 3 + 1
}

/// Inserts ids 0, 1, 2, ... until `stop`, one per transaction; returns the acknowledged ids.
/// A failed insert is tried again with the same id: a duplicate key (630) then means that the
/// failed attempt committed after all. After failing for [`RECONNECT_AFTER`] it connects a new
/// API node, as an application would.
fn insert_until(cs: &str, stop: &AtomicBool) -> BTreeSet<u32> {
    let mut api = connect(cs).expect("the writer connects");
    let mut table = api.get_table("restarted").expect("the table");
    let mut acknowledged = BTreeSet::new();
    let mut id = 0;
    let mut retrying = false;
    let mut failing_since: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        let result = (|| {
            let mut transaction = api.start_transaction()?;
            transaction.insert(&table, &[Value::UInt32(id), Value::Int64(value_of(id))])?;
            transaction.execute(ExecType::Commit)
        })();
        match result {
            Ok(()) => {}
            Err(e) if retrying && e.code() == Some(630) => {}
            Err(e) => {
                assert!(
                    e.is_temporary() || e.code().is_none() || e.code() == Some(4009),
                    "insert {id}: {e}"
                );
                retrying = true;
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= RECONNECT_AFTER {
                    if let Ok(fresh) = connect(cs) {
                        if let Ok(t) = fresh.get_table("restarted") {
                            (api, table) = (fresh, t);
                        }
                    }
                    failing_since = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        }
        acknowledged.insert(id);
        id += 1;
        retrying = false;
        failing_since = None;
    }
    acknowledged
}

/// Every row with an id below `end`, read from replica `replica`.
fn replica_rows(api: &Cluster, table: &Table, end: u32, replica: usize) -> BTreeSet<(u32, i64)> {
    let ids: Vec<u32> = (0..end).collect();
    let mut rows = BTreeSet::new();
    for chunk in ids.chunks(200) {
        let mut transaction = api.start_transaction().expect("start");
        let ops: Vec<_> = chunk
            .iter()
            .map(|&id| {
                transaction
                    .read_from_replica(table, &[Value::UInt32(id)], replica)
                    .expect("define a replica read")
            })
            .collect();
        transaction
            .execute_with(ExecType::Commit, AbortOption::IgnoreError)
            .unwrap_or_else(|e| panic!("read from replica {replica}: {e}"));
        for (&id, op) in chunk.iter().zip(ops) {
            match transaction.op_error(op) {
                None => match transaction.row(op).expect("a read row") {
                    [Value::UInt32(_), Value::Int64(value)] => {
                        rows.insert((id, *value));
                    }
                    other => panic!("key {id}: unexpected row {other:?}"),
                },
                Some(e) if e.code == 626 => {}
                Some(e) => panic!("read key {id} from replica {replica}: {e}"),
            }
        }
    }
    rows
}

/// The data node process an angel started last, from its `Angel pid: A started child: C` line.
fn child_pid(log: &str) -> Option<i32> {
    log.lines()
        .rev()
        .find_map(|line| line.split("started child: ").nth(1)?.trim().parse().ok())
}

/// True once process `pid` is gone (or a zombie its new parent has not reaped yet).
fn is_gone(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Waits until node 1 has started the arbitrator (ndb_mgmd 49): without one, the survivor of
/// two data nodes stops when the other fails (2305, as NDB's).
fn wait_for_arbitrator(procs: &Processes) {
    wait_until("node 1 to start the arbitrator", START_TIMEOUT, || {
        Ok(procs
            .log("ndbd-1")
            .contains("Started arbitrator node 49")
            .then_some(()))
    })
    .expect("an arbitrator runs");
}

/// SIGKILL of the data node process the angel `name` runs (its angel lives on); its pid.
fn kill_data_node_process(procs: &Processes, name: &str) -> i32 {
    let pid = child_pid(&procs.log(name)).expect("the angel names its child");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9 the data node process");
    pid
}

/// Starts ndb_mgmd on a config of two data nodes with `defaults` in `[ndbd default]`, and
/// waits until it listens; returns its connectstring.
fn start_mgmd(procs: &mut Processes, defaults: &str) -> String {
    processes::start_mgmd(procs, defaults, 4)
}

/// Creates the table and starts a thread inserting into it until `stop` is set.
fn start_writer(api: &Cluster, cs: &str, stop: &Arc<AtomicBool>) -> JoinHandle<BTreeSet<u32>> {
    api.create_table(&table_def()).expect("create the table");
    let (cs, stop) = (cs.to_string(), stop.clone());
    std::thread::spawn(move || insert_until(&cs, &stop))
}

/// Stops the writer; then every insert it had acknowledged must be on both replicas, the
/// replicas agreeing row for row, read by a new API node. Returns those rows.
fn stop_writer_and_check(
    cs: &str,
    stop: &AtomicBool,
    writer: JoinHandle<BTreeSet<u32>>,
    api: Cluster,
) -> BTreeSet<(u32, i64)> {
    stop.store(true, Ordering::Relaxed);
    let acknowledged = writer.join().expect("the writer thread");
    assert!(
        acknowledged.len() > 10,
        "only {} inserts were acknowledged",
        acknowledged.len()
    );
    drop(api);
    let fresh = connect(cs).expect("a new API node connects");
    let table = fresh.get_table(&table_def().name).expect("the table");
    let end = acknowledged.last().map_or(0, |id| id + 2);
    let on_primary = replica_rows(&fresh, &table, end, PRIMARY);
    let on_backup = replica_rows(&fresh, &table, end, BACKUP);
    assert_eq!(
        on_primary, on_backup,
        "the replicas differ after the restarts"
    );
    let stored: BTreeSet<u32> = on_primary.iter().map(|(id, _)| *id).collect();
    let lost: Vec<&u32> = acknowledged.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged inserts lost: {lost:?}");
    on_primary
}

#[test]
fn data_nodes_restart_through_ndb_mgm_and_lose_no_acknowledged_write() {
    let mut procs = Processes::new();
    let cs = start_mgmd(&mut procs, "");
    procs.spawn(
        "ndbd-1",
        "ndbd",
        &["-c", &cs, "--ndb-nodeid", "1", "--nodaemon"],
    );
    procs.spawn("ndbd-2", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_for(&cs, &[]);

    let api = connect(&cs).expect("an API node connects");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer(&api, &cs, &stop);

    // 2 RESTART while the writer inserts: node 2 stops gracefully and its angel starts it.
    let angel_2 = procs.child("ndbd-2").id();
    assert_eq!(
        mgm(&cs, "2 RESTART"),
        "Node 2: Node shutdown initiated\n\
         Node 2: Node shutdown completed, restarting.\n\
         Node 2 is being restarted\n"
    );
    wait_for(&cs, &[]);
    assert!(
        procs.child("ndbd-2").try_wait().expect("poll").is_none(),
        "the angel of node 2 (pid {angel_2}) is still running"
    );
    mgm_refused(&cs, "2 START", "Node 2 is STARTED, not NOT_STARTED");

    // 2 RESTART -n: node 2 waits in NOT_STARTED until START.
    assert_eq!(
        mgm(&cs, "2 RESTART -n"),
        "Node 2: Node shutdown initiated\n\
         Node 2: Node shutdown completed, restarting, no start.\n\
         Node 2 is being restarted\n"
    );
    wait_for(&cs, &["--not-started", "--wait-nodes", "2"]);
    let status = mgm(&cs, "2 STATUS");
    assert!(status.starts_with("Node 2: not started ("), "{status}");
    assert!(mgm(&cs, "SHOW").contains("not started, Nodegroup: 0)"));
    assert_eq!(mgm(&cs, "2 START"), "Database node 2 is being started.\n");
    wait_for(&cs, &[]);

    // A rolling restart: node 1, then node 2, each once the other is started.
    mgm(&cs, "1 RESTART");
    wait_for(&cs, &[]);
    mgm(&cs, "2 RESTART -i");
    wait_for(&cs, &[]);

    // Every acknowledged insert is on both replicas, and the replicas agree row for row.
    let rows = stop_writer_and_check(&cs, &stop, writer, api);
    for (id, value) in &rows {
        assert_eq!(*value, value_of(*id), "key {id}");
    }

    // ALL RESTART: a system restart. A durable commit first: its global checkpoint, and so
    // every insert acknowledged before it, is then on disk.
    let api = connect(&cs).expect("an API node connects");
    let table = api.get_table(&table_def().name).expect("the table");
    let marker = rows.last().map_or(0, |(id, _)| id + 10);
    let mut tx = api.start_transaction().unwrap();
    tx.set_durable_commit(true);
    tx.insert(
        &table,
        &[Value::UInt32(marker), Value::Int64(value_of(marker))],
    )
    .unwrap();
    tx.execute(ExecType::Commit).expect("a durable commit");
    drop(tx);
    // And one acknowledged in memory only, right before: ALL RESTART saves it too (each node
    // saves what it answered before it stops).
    let mut tx = api.start_transaction().unwrap();
    tx.insert(
        &table,
        &[
            Value::UInt32(marker + 1),
            Value::Int64(value_of(marker + 1)),
        ],
    )
    .unwrap();
    tx.execute(ExecType::Commit).expect("a commit");
    drop(tx);
    drop(api);
    assert_eq!(
        mgm(&cs, "ALL RESTART"),
        "Executing RESTART on all nodes.\n\
         Starting shutdown. This may take a while. Please wait...\n\
         Node 1: Node shutdown initiated\n\
         Node 1: Node shutdown completed, restarting.\n\
         Node 1 is being restarted\n\
         Node 2: Node shutdown initiated\n\
         Node 2: Node shutdown completed, restarting.\n\
         Node 2 is being restarted\n\
         NDB Cluster is being restarted.\n"
    );
    wait_for(&cs, &[]);
    let api = connect(&cs).expect("an API node connects after the system restart");
    let table = api.get_table(&table_def().name).expect("the table");
    let mut expected = rows.clone();
    expected.insert((marker, value_of(marker)));
    expected.insert((marker + 1, value_of(marker + 1)));
    for replica in [PRIMARY, BACKUP] {
        assert_eq!(replica_rows(&api, &table, marker + 2, replica), expected);
    }
    drop(api);
    // ALL RESTART -n: every node waits in NOT_STARTED until ALL START.
    mgm(&cs, "ALL RESTART -n");
    wait_for(&cs, &["--not-started"]);
    assert_eq!(mgm(&cs, "ALL START"), "NDB Cluster is being started.\n");
    wait_for(&cs, &[]);
    // Node 1 survives node 2's SIGKILL below only with an arbitrator (half of the data nodes):
    // its president (either node) started one since the restart.
    wait_until("an arbitrator after the restart", START_TIMEOUT, || {
        let started = ["ndbd-1", "ndbd-2"].iter().any(|name| {
            let log = procs.log(name);
            let since = log.rsplit("data node started at GCI").next().unwrap_or("");
            since.contains("Started arbitrator node 49")
        });
        Ok(started.then_some(()))
    })
    .expect("an arbitrator runs");

    let log = fs::read_to_string(procs.path("mgm/ndb_49_cluster.log")).expect("the cluster log");
    for line in [
        "-- Node 2: Node shutdown completed, restarting\n",
        "-- Node 2: Node shutdown completed, restarting, no start\n",
        "-- Node 1: Node shutdown completed, restarting\n",
        "-- Node 2: Node shutdown completed, restarting, initial\n",
    ] {
        assert!(log.contains(line), "the cluster log lacks {line:?}:\n{log}");
    }

    // SIGKILL of an angel takes its data node process with it.
    let child_2 = child_pid(&procs.log("ndbd-2")).expect("node 2's angel names its child");
    assert!(
        !is_gone(child_2),
        "node 2's data node process {child_2} runs"
    );
    procs
        .child("ndbd-2")
        .kill()
        .expect("kill -9 node 2's angel");
    procs.child("ndbd-2").wait().expect("reap node 2's angel");
    wait_until(
        "node 2's data node process to die with its angel",
        Duration::from_secs(10),
        || Ok(is_gone(child_2).then_some(())),
    )
    .expect("no orphan data node");

    // SIGTERM of an angel stops its node gracefully, and the angel exits 0 (node 1, its
    // group's last node, stops every data node: itself).
    let child_1 = child_pid(&procs.log("ndbd-1")).expect("node 1's angel names its child");
    let angel_1 = nix::unistd::Pid::from_raw(procs.child("ndbd-1").id() as i32);
    nix::sys::signal::kill(angel_1, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    assert!(procs.wait_exit("ndbd-1", Duration::from_secs(60)).success());
    assert!(
        is_gone(child_1),
        "node 1's data node process {child_1} outlived its angel"
    );
}

#[test]
fn with_stop_on_error_0_the_angel_starts_a_killed_data_node_again_and_it_rejoins() {
    let mut procs = Processes::new();
    let cs = start_mgmd(&mut procs, "StopOnError=0\n");
    procs.spawn("ndbd-1", "ndbd", &["-c", &cs, "--ndb-nodeid", "1"]);
    procs.spawn("ndbd-2", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_for(&cs, &[]);

    let api = connect(&cs).expect("an API node connects");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer(&api, &cs, &stop);

    // SIGKILL of node 2's data node process, twice: each time its angel starts it again and
    // it rejoins by node restart while the writer inserts. Each kill waits for the arbitrator
    // (without one, the survivor of two data nodes stops too: 2305, as NDB's).
    wait_for_arbitrator(&procs);
    for round in 1..=2 {
        let killed = kill_data_node_process(&procs, "ndbd-2");
        wait_until(
            "node 2's angel to start a new data node process, and it to rejoin",
            START_TIMEOUT,
            || {
                let log = procs.log("ndbd-2");
                let Some(new) = child_pid(&log).filter(|&pid| pid != killed) else {
                    return Ok(None);
                };
                // What the new process logged: it joined by node restart and serves.
                let since = log.split(&format!("started child: {new}")).nth(1);
                Ok(since
                    .is_some_and(|since| since.contains("node restart complete"))
                    .then_some(()))
            },
        )
        .unwrap_or_else(|e| panic!("round {round}: {e}: {}", procs.log("ndbd-2")));
        wait_for(&cs, &[]);
    }
    assert!(
        procs.child("ndbd-2").try_wait().expect("poll").is_none(),
        "node 2's angel still runs"
    );
    let log = procs.log("ndbd-2");
    assert_eq!(
        log.matches("Angel restarting child process").count(),
        2,
        "{log}"
    );

    stop_writer_and_check(&cs, &stop, writer, api);
}

/// Rows `ids` with their values, as `replica_rows` reads them.
fn rows_of(ids: impl IntoIterator<Item = u32>) -> BTreeSet<(u32, i64)> {
    ids.into_iter().map(|id| (id, value_of(id))).collect()
}

#[test]
fn a_data_node_stopped_before_the_others_saved_more_rejoins_after_the_system_restart() {
    let mut procs = Processes::new();
    let cs = start_mgmd(&mut procs, "TimeBetweenGlobalCheckpoints=200\n");
    procs.spawn("ndbd-1", "ndbd", &["-c", &cs, "--ndb-nodeid", "1"]);
    procs.spawn("ndbd-2", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_for(&cs, &[]);
    let api = connect(&cs).expect("an API node connects");
    let table = api.create_table(&table_def()).expect("create the table");
    // Written (not inserted), so that a try again after a temporary error (a node stopping)
    // cannot fail on a row its first try committed.
    let insert = |ids: std::ops::Range<u32>| {
        wait_until("a durable commit", START_TIMEOUT, || {
            let mut tx = api.start_transaction()?;
            tx.set_durable_commit(true);
            for id in ids.clone() {
                tx.write(&table, &[Value::UInt32(id), Value::Int64(value_of(id))])?;
            }
            match tx.execute(ExecType::Commit) {
                Ok(()) => Ok(Some(())),
                Err(e) if e.is_temporary() => Ok(None),
                Err(e) => Err(e.into()),
            }
        })
        .expect("a durable commit");
    };
    insert(0..100);

    // Node 1 stops; node 2 alone saves global checkpoints that node 1's files do not have.
    mgm(&cs, "1 STOP");
    assert!(procs.wait_exit("ndbd-1", START_TIMEOUT).success());
    insert(100..200);
    mgm(&cs, "2 STOP -f");
    assert!(procs.wait_exit("ndbd-2", START_TIMEOUT).success());
    drop(api);

    // Both started again: the system restart restores node 2's newest GCI, which node 1
    // cannot; its angel starts it again (StopOnError=1 notwithstanding) and it joins by node
    // restart.
    procs.spawn("ndbd-1b", "ndbd", &["-c", &cs, "--ndb-nodeid", "1"]);
    procs.spawn("ndbd-2b", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_for(&cs, &[]);
    let log = procs.log("ndbd-1b");
    assert!(
        log.contains("starting it again, to join by node restart"),
        "node 1 took part in the system restart: {log}"
    );
    let api = connect(&cs).expect("an API node connects after the restart");
    let table = api.get_table(&table_def().name).expect("the table");
    for replica in [PRIMARY, BACKUP] {
        assert_eq!(replica_rows(&api, &table, 200, replica), rows_of(0..200));
    }
    // ndb_desc finds the cluster through ndb_mgmd too.
    let desc = run("ndb_desc", &["-c", &cs, "-p", &table_def().name]);
    let described = text(&desc.stdout);
    assert!(desc.status.success(), "{described}{}", text(&desc.stderr));
    assert!(
        described.contains("-- Per partition info --"),
        "{described}"
    );
}

/// Node 1's STOP is put off when node 2, its node group's other member, fails during it:
/// leaving too would leave the group without a live node. `1 STOP` says so at once (before,
/// it waited its 120 s and said the node did not stop); node 1 serves on, and once node 2's
/// angel has started it again and it rejoined, node 1's stop goes on and it exits.
#[test]
fn a_stop_put_off_by_a_failed_peer_is_reported_and_ends_once_the_peer_is_back() {
    let mut procs = Processes::new();
    let cs = start_mgmd(&mut procs, "StopOnError=0\n");
    procs.spawn("ndbd-1", "ndbd", &["-c", &cs, "--ndb-nodeid", "1"]);
    procs.spawn("ndbd-2", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    wait_for(&cs, &[]);
    wait_for_arbitrator(&procs);
    let api = connect(&cs).expect("an API node connects");
    let table = api.create_table(&table_def()).expect("create the table");
    // Transactions left open hold node 1's stop (at most STOP_DRAIN_MAX, 5 s) after it began
    // to refuse new work: sixteen keys, so that some have node 1 as their TC.
    let mut open = Vec::new();
    for id in 0..16 {
        let mut transaction = api.start_transaction().expect("a transaction");
        transaction
            .insert(&table, &[Value::UInt32(id), Value::Int64(value_of(id))])
            .expect("an insert");
        transaction.execute(ExecType::NoCommit).expect("NoCommit");
        open.push(transaction);
    }
    let stop = {
        let cs = cs.clone();
        std::thread::spawn(move || run("ndb_mgm", &["-c", &cs, "-e", "1 STOP"]))
    };
    wait_until("node 1 to refuse new work", START_TIMEOUT, || {
        Ok(procs
            .log("ndbd-1")
            .contains("refusing new transactions (280) from now on")
            .then_some(()))
    })
    .expect("node 1 stops");
    kill_data_node_process(&procs, "ndbd-2");
    let began = Instant::now();
    let out = stop.join().expect("ndb_mgm");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "1 STOP succeeded: {said}");
    assert!(
        said.contains("Node shutdown would cause system crash") && said.contains("put off"),
        "{said}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(60),
        "{:?}",
        began.elapsed()
    );
    assert!(
        procs.log("ndbd-1").contains("graceful stop put off"),
        "{}",
        procs.log("ndbd-1")
    );
    drop(open);
    // Node 2's angel starts it again; once it rejoined, node 1's stop goes on.
    let status = procs.wait_exit("ndbd-1", START_TIMEOUT);
    assert!(status.success(), "{status:?}: {}", procs.log("ndbd-1"));
    assert!(
        procs.log("ndbd-2").contains("node restart complete"),
        "{}",
        procs.log("ndbd-2")
    );
}
