//! Proves that a transaction committed before a global checkpoint was saved survives the loss of
//! every data node at once: a two-node cluster under a bank workload (each transfer moves money
//! between two accounts and records itself in a ledger, in one transaction) is killed with
//! SIGKILL, restarted without `--initial`, and every transfer acknowledged before two later
//! checkpoints were saved is there, the ledger and the balances agree, and the total is
//! unchanged; the schema comes back with the rows. And that a durable commit
//! (`Transaction::set_durable_commit`) is kept at once: commits report GCIs that grow, every
//! durable commit acknowledged (hundreds, many in flight) is acknowledged only once every node's
//! sysfile names its checkpoint, and every one acknowledged before the same kill is there after
//! the restart, with no later checkpoint waited for. A table's creation and drop are
//! acknowledged only once saved: a SIGKILL of every node right after either keeps it.
//! Local checkpoints let a small redo log
//! carry far more writes than it holds, and a disk that fills refuses writes with a temporary
//! error, or, where another replica serves, stops its node while the cluster goes on, or, where
//! none does, leaves durable commits answered 4012 once their save is overdue (root only).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rndb_api::{
    AbortOption, Cluster, ColumnDef, ColumnType, ExecType, LockMode, Table, TableDef, Value,
};
use rndb_config::NodeId;
use rndb_tests::ops::{insert_committed, read_committed, recreate_table};
use rndb_tests::{restorable_gci, wait_until, ClusterSpec, TestCluster};

const ACCOUNTS: u32 = 10;
const START_BALANCE: i64 = 1000;

fn spec() -> ClusterSpec {
    ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .data_node_param("TimeBetweenGlobalCheckpoints", "100")
        .data_node_param("TimeBetweenEpochs", "20")
        // A local checkpoint every 4 KiB of redo: several run, and restarts load one.
        .data_node_param("TimeBetweenLocalCheckpoints", "10")
}

fn tables(api: &Cluster) -> (Table, Table) {
    let accounts = TableDef::new(
        "accounts",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("balance", ColumnType::Int64),
        ],
    );
    let ledger = TableDef::new(
        "ledger",
        vec![
            ColumnDef::key("transfer", ColumnType::UInt32),
            ColumnDef::new("source", ColumnType::UInt32),
            ColumnDef::new("target", ColumnType::UInt32),
        ],
    );
    (
        recreate_table(api, &accounts).expect("create accounts"),
        recreate_table(api, &ledger).expect("create ledger"),
    )
}

/// Transfer `n`: one unit from one account to another, recorded in the ledger.
fn transfer(api: &Cluster, accounts: &Table, ledger: &Table, n: u32) -> bool {
    let (source, target) = (n % ACCOUNTS, (n * 7 + 3) % ACCOUNTS);
    let source = if source == target {
        (source + 1) % ACCOUNTS
    } else {
        source
    };
    let run = || -> Result<(), rndb_api::Error> {
        let mut t = api.start_transaction()?;
        let a = t.read(accounts, &[Value::UInt32(source)], LockMode::Exclusive)?;
        let b = t.read(accounts, &[Value::UInt32(target)], LockMode::Exclusive)?;
        t.execute(ExecType::NoCommit)?;
        let balance = |op| match t.row(op).map(|row| row[1].clone()) {
            Some(Value::Int64(v)) => v,
            other => panic!("balance {other:?}"),
        };
        let (a, b) = (balance(a), balance(b));
        t.update(
            accounts,
            &[Value::UInt32(source)],
            &[(1, Value::Int64(a - 1))],
        )?;
        t.update(
            accounts,
            &[Value::UInt32(target)],
            &[(1, Value::Int64(b + 1))],
        )?;
        t.insert(
            ledger,
            &[
                Value::UInt32(n),
                Value::UInt32(source),
                Value::UInt32(target),
            ],
        )?;
        t.execute(ExecType::Commit)
    };
    run().is_ok()
}

/// Kills every data node with SIGKILL, starts them again without `--initial`, and connects.
fn kill_every_node_and_restart(cluster: &mut TestCluster) -> Cluster {
    cluster.kill_all_nodes().expect("SIGKILL");
    cluster
        .restart_stopped_nodes()
        .expect("restart without --initial");
    cluster.connect().expect("connect after the restart")
}

#[test]
fn every_node_killed_with_sigkill_restarts_with_every_transfer_saved_before() {
    let mut cluster = TestCluster::start(spec()).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let (accounts, ledger) = tables(&api);
    let rows: Vec<Vec<Value>> = (0..ACCOUNTS)
        .map(|id| vec![Value::UInt32(id), Value::Int64(START_BALANCE)])
        .collect();
    insert_committed(&api, &accounts, &rows).expect("open the accounts");
    // Phase 1: transfers acknowledged, then two global checkpoints saved after them.
    let mut acknowledged = BTreeSet::new();
    for n in 0..200 {
        if transfer(&api, &accounts, &ledger, n) {
            acknowledged.insert(n);
        }
    }
    assert!(acknowledged.len() > 150, "most transfers commit");
    cluster
        .wait_for_saved_checkpoints(NodeId(1), 2)
        .expect("two global checkpoints are saved");
    // Phase 2: more transfers, cut short by the kill.
    let deadline = Instant::now() + Duration::from_millis(300);
    let mut n = 1000;
    while Instant::now() < deadline {
        transfer(&api, &accounts, &ledger, n);
        n += 1;
    }
    drop(api);
    let api = kill_every_node_and_restart(&mut cluster);
    let accounts = api
        .get_table("accounts")
        .expect("the accounts table survives");
    let ledger = api.get_table("ledger").expect("the ledger table survives");
    let mut balances = vec![START_BALANCE; ACCOUNTS as usize];
    let mut present = BTreeSet::new();
    for n in (0..200).chain(1000..n) {
        if let Ok(row) = read_committed(&api, &ledger, &[Value::UInt32(n)]) {
            present.insert(n);
            let (Value::UInt32(source), Value::UInt32(target)) = (&row[1], &row[2]) else {
                panic!("ledger row {row:?}");
            };
            balances[*source as usize] -= 1;
            balances[*target as usize] += 1;
        }
    }
    let missing: Vec<&u32> = acknowledged.difference(&present).collect();
    assert!(
        missing.is_empty(),
        "acknowledged and saved transfers lost: {missing:?}"
    );
    for id in 0..ACCOUNTS {
        let row = read_committed(&api, &accounts, &[Value::UInt32(id)]).expect("account");
        assert_eq!(
            row[1],
            Value::Int64(balances[id as usize]),
            "account {id} agrees with the ledger"
        );
    }
    assert_eq!(
        balances.iter().sum::<i64>(),
        START_BALANCE * i64::from(ACCOUNTS)
    );
}

/// A CREATE TABLE and a DROP TABLE acknowledged just before every data node is killed with
/// SIGKILL are both there after the restart, with global checkpoints far apart (32 s, the most NDB allows):
/// the answer to each waits until a global checkpoint that holds it is saved, as NDB's DICT
/// waits for one.
#[test]
fn a_table_created_or_dropped_just_before_a_sigkill_of_every_node_stays_so() {
    let spec = ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .data_node_param("TimeBetweenGlobalCheckpoints", "32000");
    let mut cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let def = |name: &str| {
        TableDef::new(
            name,
            vec![
                ColumnDef::key("id", ColumnType::UInt32),
                ColumnDef::new("value", ColumnType::Int64),
            ],
        )
    };
    api.create_table(&def("dropped")).expect("create dropped");
    api.drop_table("dropped").expect("drop dropped");
    api.create_table(&def("created")).expect("create created");
    drop(api);
    let api = kill_every_node_and_restart(&mut cluster);
    api.get_table("created")
        .expect("the table created before the kill is there");
    let gone = api.get_table("dropped");
    assert!(
        matches!(&gone, Err(e) if e.code() == Some(709)),
        "the table dropped before the kill stays dropped: {gone:?}"
    );
}

/// Writes far more redo than the log's files hold (3 files of 4 MiB in each of 4 parts): local
/// checkpoints release the log behind them, so writes refused with 410 while the log is full
/// (this writer outruns the checkpoints) succeed when retried, the node keeps to its 3 files
/// per part, and a restart after SIGKILL finds every row's last saved value.
#[test]
fn local_checkpoints_keep_a_small_redo_log_from_filling() {
    const KEYS: u32 = 64;
    const VALUE_BYTES: usize = 8000;
    let spec = ClusterSpec::new()
        .data_nodes(1)
        .replicas(1)
        .data_memory("64M")
        .data_node_param("NoOfFragmentLogFiles", "3")
        .data_node_param("FragmentLogFileSize", "4M")
        .data_node_param("TimeBetweenGlobalCheckpoints", "100")
        .data_node_param("TimeBetweenLocalCheckpoints", "18");
    let mut cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let def = TableDef::new(
        "blobs",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("round", ColumnType::UInt32),
            ColumnDef::new("value", ColumnType::Varbinary(VALUE_BYTES as u16)),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");
    let row = |id: u32, round: u32| {
        vec![
            Value::UInt32(id),
            Value::UInt32(round),
            Value::Varbinary(vec![(id + round) as u8; VALUE_BYTES]),
        ]
    };
    // 64 × 8000 bytes per round: 160 rounds are about 80 MiB of redo, against 48 MiB of files.
    const ROUNDS: u32 = 160;
    let mut refused = 0u32;
    for round in 0..ROUNDS {
        for batch in (0..KEYS).collect::<Vec<_>>().chunks(8) {
            let what = format!("round {round}'s writes, retried while the redo log is full");
            wait_until(&what, Duration::from_secs(60), || {
                let mut t = api.start_transaction()?;
                for &id in batch {
                    t.write(&table, &row(id, round))?;
                }
                match t.execute(ExecType::Commit) {
                    Ok(()) => Ok(Some(())),
                    Err(e) if e.code() == Some(410) => {
                        refused += 1;
                        Ok(None)
                    }
                    Err(e) => Err(e.into()),
                }
            })
            .expect("the writes commit");
        }
    }
    cluster
        .wait_for_saved_checkpoints(NodeId(1), 2)
        .expect("two global checkpoints are saved");
    let fs = cluster.file_system(NodeId(1));
    for part in 0..4 {
        let dir = fs.join(format!("D{}/DBLQH", 8 + part));
        let files = std::fs::read_dir(&dir)
            .expect("redo part directory")
            .count();
        assert!(files <= 3, "{} holds {files} files", dir.display());
    }
    eprintln!("writes refused with 410 and retried: {refused}");
    let log = cluster.log(NodeId(1));
    assert!(
        log.contains("local checkpoint"),
        "no local checkpoint ran:\n{log}"
    );
    assert!(
        !log.contains("overran"),
        "the redo log overran its files:\n{log}"
    );
    drop(api);
    cluster.kill_node(NodeId(1)).expect("SIGKILL");
    cluster
        .restart_stopped_nodes()
        .expect("restart without --initial");
    let api = cluster.connect().expect("connect after the restart");
    let table = api.get_table("blobs").expect("the table survives");
    for id in 0..KEYS {
        let found = read_committed(&api, &table, &[Value::UInt32(id)]).expect("the row");
        assert_eq!(found, row(id, ROUNDS - 1), "row {id} has its last value");
    }
}

/// A tmpfs of a few MiB mounted for the test and removed when it ends.
struct SmallDisk {
    path: std::path::PathBuf,
}

impl SmallDisk {
    fn mount(path: &Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(path).expect("mount point");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a tmpfs at {}", path.display());
        SmallDisk {
            path: path.to_path_buf(),
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

/// `spec` with 64 MiB of DataMemory, a small redo log (3 files of 4 MiB per part) and a
/// global checkpoint every 100 ms.
fn small_redo(spec: ClusterSpec) -> ClusterSpec {
    spec.data_memory("64M")
        .data_node_param("NoOfFragmentLogFiles", "3")
        .data_node_param("FragmentLogFileSize", "4M")
        .data_node_param("TimeBetweenGlobalCheckpoints", "100")
}

/// Commits row `id` of a `fill_table` table with 8000 bytes of value, in a transaction of
/// its own.
fn insert_8000_bytes(api: &Cluster, table: &Table, id: u32) -> Result<(), rndb_api::Error> {
    let mut t = api.start_transaction().expect("start");
    t.insert(table, &[Value::UInt32(id), Value::Varbinary(vec![7; 8000])])
        .expect("define");
    t.execute(ExecType::Commit)
}

/// Table `name` (`id` key, an 8000-byte `value`), made anew.
fn fill_table(api: &Cluster, name: &str) -> Table {
    let def = TableDef::new(
        name,
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("value", ColumnType::Varbinary(8000)),
        ],
    );
    recreate_table(api, &def).expect("create the table")
}

/// A data node whose disk fills while it runs refuses writes with a temporary error (1234 once a
/// file request failed, or 410/1221 before), keeps serving reads of what it holds, and does not
/// stop.
#[test]
#[ignore = "needs root: mounts a small tmpfs (scripts/test runs it as root)"]
fn a_full_disk_refuses_writes_with_a_temporary_error_and_reads_go_on() {
    let base = tempfile::tempdir().expect("temporary directory");
    let disk_path = base.path().join("small-disk");
    let _disk = SmallDisk::mount(&disk_path, "6m");
    let spec = small_redo(ClusterSpec::new().data_nodes(1).replicas(1))
        .data_node_param("FileSystemPath", &disk_path.display().to_string());
    let mut cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = fill_table(&api, "fill");
    let mut refused = None;
    let mut committed = Vec::new();
    for id in 0..20_000u32 {
        match insert_8000_bytes(&api, &table, id) {
            Ok(()) => committed.push(id),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let error = refused.expect("a 6 MiB disk refuses 160 MB of writes");
    eprintln!("after {} rows: {error}", committed.len());
    assert!(
        matches!(error.code(), Some(1234 | 410 | 1221)),
        "a temporary redo error: {error}"
    );
    assert!(error.is_temporary(), "{error}");
    for &id in committed.iter().step_by(50) {
        read_committed(&api, &table, &[Value::UInt32(id)]).expect("a committed row reads");
    }
    assert!(cluster.is_running(NodeId(1)), "the node keeps running");
}

/// A data node of two replicas whose disk fills stops with NDB's 2810 once the other replica
/// serves alone, and the cluster goes on: writes commit, and a durable commit is answered (its
/// global checkpoint is saved without the stopped node).
#[test]
#[ignore = "needs root: mounts a small tmpfs (scripts/test runs it as root)"]
fn a_node_whose_disk_fills_is_stopped_and_its_group_goes_on_saving() {
    let spec = small_redo(ClusterSpec::new().data_nodes(2).replicas(2));
    let mut cluster = TestCluster::start(spec).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let table = fill_table(&api, "fill2");
    // Node 2 starts again over an empty 6 MiB file system: every row is copied to it.
    cluster.stop_node(NodeId(2)).expect("stop node 2");
    let _disk = SmallDisk::mount(&cluster.file_system(NodeId(2)), "6m");
    cluster.restart_node(NodeId(2)).expect("restart node 2");
    wait_until("node 2's node restart", Duration::from_secs(60), || {
        Ok(cluster
            .log(NodeId(2))
            .contains("node restart complete")
            .then_some(()))
    })
    .expect("node 2 rejoins");
    // Writes go on (some refused with a temporary error while node 2 is being stopped) until
    // node 2 is gone. Each insert takes a new key: one that failed with the node may still
    // have committed.
    let mut id = 0u32;
    let mut committed = 0;
    let mut refused = Vec::new();
    wait_until("node 2 to stop", Duration::from_secs(60), || {
        id += 1;
        let mut t = api.start_transaction()?;
        t.insert(
            &table,
            &[Value::UInt32(id), Value::Varbinary(vec![7; 8000])],
        )?;
        match t.execute(ExecType::Commit) {
            Ok(()) => committed += 1,
            Err(e) if e.is_temporary() => refused.push(e.to_string()),
            Err(e) => return Err(e.into()),
        }
        Ok((!cluster.is_running(NodeId(2))).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n--- node 2 ---\n{}", cluster.log(NodeId(2))));
    eprintln!("{committed} rows committed; refused: {refused:?}");
    let log = cluster.log(NodeId(2));
    assert!(
        log.contains("error 2810: The file system is full"),
        "node 2 stops with NDB's 2810:\n{log}"
    );
    assert!(cluster.is_running(NodeId(1)), "node 1 goes on");
    // Node 1 alone commits, and saves: a durable commit is answered.
    wait_until(
        "a durable commit on node 1 alone",
        Duration::from_secs(30),
        || {
            id += 1;
            let mut t = api.start_transaction()?;
            t.set_durable_commit(true);
            t.insert(&table, &[Value::UInt32(id), Value::Varbinary(vec![8; 10])])?;
            match t.execute(ExecType::Commit) {
                Ok(()) => Ok(Some(())),
                Err(e) if e.is_temporary() => Ok(None),
                Err(e) => Err(e.into()),
            }
        },
    )
    .expect("node 1 commits durably without node 2");
    read_committed(&api, &table, &[Value::UInt32(id)]).expect("the durable row reads");
}

/// Durable commits the workload keeps in flight at once.
const DURABLE_IN_FLIGHT: usize = 128;
/// Durable commits acknowledged before the kill.
const DURABLE_ACKNOWLEDGED_MIN: usize = 400;

/// Commits plain inserts of keys from `next` on until one reports a larger GCI than `after`;
/// every GCI reported is at least `after`. Returns the larger GCI.
fn commit_until_gci_grows(api: &Cluster, table: &Table, next: &mut u32, after: u64) -> u64 {
    wait_until("a commit in a later epoch", Duration::from_secs(30), || {
        let mut t = api.start_transaction()?;
        t.insert(table, &[Value::UInt32(*next), Value::UInt32(0)])?;
        t.execute(ExecType::NoCommit)?;
        assert_eq!(t.gci(), None, "no GCI before the commit");
        t.execute(ExecType::Commit)?;
        *next += 1;
        let gci = t.gci().expect("a commit reports its GCI");
        assert!(gci >= after, "GCI {gci:#x} after {after:#x}");
        Ok((gci > after).then_some(gci))
    })
    .expect("GCIs grow")
}

/// Runs durable inserts of keys 0, 1, ... with `DURABLE_IN_FLIGHT` in flight through the
/// asynchronous API until the nodes are being `killed` (then it waits for those in flight),
/// recording each acknowledged key with its GCI. Each acknowledgement must find the commit's
/// checkpoint named by every node's sysfile, and nothing may fail before the kill.
fn durable_workload(
    api: &Cluster,
    table: &Table,
    file_systems: &[PathBuf],
    acknowledged: &Mutex<BTreeMap<u32, u64>>,
    acknowledged_count: &AtomicUsize,
    killed: &AtomicBool,
) {
    let mut executor = api.async_executor();
    let mut next = 0u32;
    loop {
        while !killed.load(Ordering::Relaxed) && executor.len() < DURABLE_IN_FLIGHT {
            let Ok(mut t) = api.start_transaction() else {
                break;
            };
            t.set_durable_commit(true);
            if t.insert(table, &[Value::UInt32(next), Value::UInt32(next)])
                .is_err()
            {
                break;
            }
            let prepared = executor.prepare(
                t,
                ExecType::Commit,
                AbortOption::AbortOnError,
                u64::from(next),
            );
            assert!(prepared.is_ok(), "room for {DURABLE_IN_FLIGHT}");
            next += 1;
        }
        if executor.is_empty() {
            break;
        }
        for done in executor.send_poll(1, Duration::from_millis(100)) {
            if let Err(e) = &done.result {
                assert!(
                    killed.load(Ordering::Relaxed),
                    "key {} failed before the kill: {e}",
                    done.tag
                );
                continue;
            }
            let gci = done
                .transaction
                .gci()
                .expect("a durable commit reports its GCI");
            let saved = file_systems.iter().map(|fs| restorable_gci(fs)).min();
            assert!(
                saved >= Some((gci >> 32) as u32),
                "key {} acknowledged in GCI {gci:#x} before every sysfile named its checkpoint \
                 (saved: {saved:?})",
                done.tag
            );
            acknowledged
                .lock()
                .expect("not poisoned")
                .insert(done.tag as u32, gci);
            acknowledged_count.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn every_durable_commit_acknowledged_before_a_sigkill_of_every_node_survives() {
    let mut cluster = TestCluster::start(spec()).expect("start the cluster");
    let api = cluster.connect().expect("connect");
    let def = TableDef::new(
        "durable",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("v", ColumnType::UInt32),
        ],
    );
    let table = recreate_table(&api, &def).expect("create the table");
    // Plain commits: GCIs that grow from epoch to epoch.
    let mut plain = 1_000_000;
    let first = commit_until_gci_grows(&api, &table, &mut plain, 0);
    let second = commit_until_gci_grows(&api, &table, &mut plain, first);
    commit_until_gci_grows(&api, &table, &mut plain, second);
    // Durable commits, until enough are acknowledged; then every node is killed while more
    // are in flight.
    let file_systems: Vec<PathBuf> = cluster
        .data_node_ids()
        .into_iter()
        .map(|id| cluster.file_system(id))
        .collect();
    let acknowledged = Mutex::new(BTreeMap::new());
    let acknowledged_count = AtomicUsize::new(0);
    let killed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            durable_workload(
                &api,
                &table,
                &file_systems,
                &acknowledged,
                &acknowledged_count,
                &killed,
            )
        });
        let enough = wait_until(
            "durable commits acknowledged",
            Duration::from_secs(120),
            || {
                let count = acknowledged_count.load(Ordering::Relaxed);
                if worker.is_finished() {
                    anyhow::bail!("the workload ended after {count} acknowledged");
                }
                Ok((count >= DURABLE_ACKNOWLEDGED_MIN).then_some(()))
            },
        );
        killed.store(true, Ordering::Relaxed);
        // All at once: killed and reaped one by one, the last node ran on alone for a few
        // milliseconds, saved two more global checkpoints, and the first, its files now behind
        // the restart GCI, stopped at the restart as it should (it joins by node restart).
        cluster.kill_all_nodes().expect("SIGKILL");
        let joined = worker.join();
        enough.expect("enough durable commits are acknowledged");
        if let Err(panic) = joined {
            std::panic::resume_unwind(panic);
        }
    });
    drop(api);
    let acknowledged = acknowledged.into_inner().expect("not poisoned");
    cluster
        .restart_stopped_nodes()
        .expect("restart without --initial");
    let api = cluster.connect().expect("connect after the restart");
    let table = api.get_table("durable").expect("the table survives");
    let missing: Vec<(u32, u64)> = acknowledged
        .iter()
        .filter(
            |&(&key, _)| match read_committed(&api, &table, &[Value::UInt32(key)]) {
                Ok(row) => {
                    assert_eq!(row[1], Value::UInt32(key), "the row key {key} committed");
                    false
                }
                Err(e) if e.code() == Some(626) => true,
                Err(e) => panic!("read key {key}: {e}"),
            },
        )
        .map(|(&key, &gci)| (key, gci))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged durable commits lost (key, GCI): {missing:x?}",
        missing.len(),
        acknowledged.len()
    );
}

/// Two node groups of one node each, node 2's file system a 6 MiB tmpfs mounted at its
/// `ndb_2_fs` (which `--initial` empties, the mount point staying) that fills: node 2 is its
/// group's last server, so it runs on, refusing writes, and no global checkpoint can be
/// saved any more. A durable commit on node 1's rows is then answered 4012 (committed,
/// durability unknown) twice TimeBetweenGlobalCheckpointsTimeout after it was held, instead of
/// keeping its transaction record for good; plain commits there go on, and the row reads.
#[test]
#[ignore = "needs root: mounts a small tmpfs (scripts/test runs it as root)"]
fn a_durable_commit_no_save_can_answer_ends_with_4012() {
    let spec = small_redo(ClusterSpec::new().data_nodes(2).replicas(1))
        .data_node_param("TimeBetweenGlobalCheckpointsTimeout", "1000");
    let mut cluster = TestCluster::start_without(spec, &[NodeId(2)]).expect("start node 1");
    let _disk = SmallDisk::mount(&cluster.file_system(NodeId(2)), "6m");
    cluster.start_node(NodeId(2)).expect("start node 2");
    let api = cluster.connect().expect("connect");
    let table = fill_table(&api, "unsaved");
    // Fill node 2's disk: half the keys go there.
    let mut refused = None;
    for id in 0..20_000u32 {
        if let Err(e) = insert_8000_bytes(&api, &table, id) {
            refused = Some(e);
            break;
        }
    }
    let error = refused.expect("a 6 MiB disk refuses 80 MB of writes");
    assert!(error.is_temporary(), "{error}");
    // Durable inserts of new keys: those on node 2 are refused (1234), the first on node 1
    // waits for a save that never comes.
    let mut answered = None;
    for id in 100_000..100_064u32 {
        let mut t = api.start_transaction().expect("start");
        t.set_durable_commit(true);
        t.insert(&table, &[Value::UInt32(id), Value::Varbinary(vec![9; 10])])
            .expect("define");
        let began = Instant::now();
        match t.execute(ExecType::Commit) {
            Err(e) if e.code() == Some(4012) => {
                answered = Some((id, e, began.elapsed()));
                break;
            }
            Err(e) if e.is_temporary() => continue,
            other => panic!(
                "durable insert of {id}: {other:?}\n--- node 1 ---\n{}\n--- node 2 ---\n{}",
                cluster.log(NodeId(1)),
                cluster.log(NodeId(2))
            ),
        }
    }
    let (id, error, waited) = answered.expect("a key on node 1");
    eprintln!("durable insert of {id} after {waited:?}: {error}");
    assert!(error.to_string().contains("durable is unknown"), "{error}");
    assert!(
        waited >= Duration::from_millis(2000),
        "answered after twice the timeout, not before: {waited:?}"
    );
    read_committed(&api, &table, &[Value::UInt32(id)]).expect("committed in memory: it reads");
    assert!(cluster.is_running(NodeId(1)) && cluster.is_running(NodeId(2)));
}
