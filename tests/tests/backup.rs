//! Proves online backup and restore end to end: `START BACKUP` through ndb_mgm, taken while a
//! client writes, restores with `ndb_restore` into a second cluster as exactly the table
//! state at the end of the backup's stop GCP (every acknowledged write of that GCP or before,
//! none after), with its unique and ordered indexes and its auto-increment counter past every
//! id restored; a SNAPSHOTSTART backup restores as exactly the table state at the end of its
//! StartGCP; backup ids go up, an existing backup's
//! id is refused (1350); a damaged backup file is reported with its name and offset; and a
//! running backup refuses DROP TABLE (761), ends on ABORT BACKUP (1321) and when a data node
//! is killed (1326), without stopping the cluster; a backup directory that cannot be written
//! fails the backup (1325), not the data nodes; and after every data node and ndb_mgmd are
//! killed during a backup, the cluster restarts and the next backup takes the next id; and a
//! table with BLOB and TEXT columns restores whole, its parts tables under other table ids.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rndb_api::{
    Cluster, ColumnDef, ColumnType, ConnectOptions, EventDef, ExecType, IndexDef, LockMode,
    ScanOptions, Table, TableDef, Value,
};
use rndb_tests::processes::{run, start_mgmd, text, Processes};
use rndb_tests::wait_until;

/// How long a start may take (two data nodes in debug builds on a shared 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(90);
const VERSION: &str = concat!("rndb-", env!("CARGO_PKG_VERSION"));
/// Global checkpoints saved every 300 ms: a backup's stop GCP is soon restorable.
const QUICK_CHECKPOINTS: &str = "TimeBetweenGlobalCheckpoints=300\n";
/// Keys the writer uses.
const KEYS: u32 = 400;
/// Rows from this key on the writer leaves alone, and how many.
const BULK_FROM: u32 = 1_000_000;
const BULK: u32 = 30_000;
/// The SNAPSHOTSTART test's clusters: global checkpoints as often as they go.
const SNAPSHOT_CLUSTER: &str = "TimeBetweenGlobalCheckpoints=20\nTimeBetweenEpochs=10\n";

fn mgm(cs: &str, command: &str) -> (bool, String, String) {
    let out = run("ndb_mgm", &["-c", cs, "-e", command]);
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Starts ndb_mgmd and data nodes 1 and 2 in `procs` (with `defaults` for them); returns
/// the connectstring.
fn start_cluster_with(procs: &mut Processes, defaults: &str) -> String {
    let cs = start_mgmd(procs, defaults, 2);
    procs.spawn("ndbd-1", "ndbd", &["-c", &cs, "--ndb-nodeid", "1"]);
    procs.spawn("ndbd-2", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    let want = format!("Node 1: started ({VERSION})\nNode 2: started ({VERSION})\n");
    wait_until("both data nodes to start", START_TIMEOUT, || {
        Ok((mgm(&cs, "ALL STATUS").1 == want).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}; last: {}", mgm(&cs, "ALL STATUS").1));
    cs
}

/// A cluster as `start_cluster_with` starts it, an API node connected, and table `accounts`.
fn cluster_with_table(procs: &mut Processes, defaults: &str) -> (String, Cluster, Table) {
    let cs = start_cluster_with(procs, defaults);
    let cluster = Cluster::connect_mgm(&cs, ConnectOptions::default()).expect("connect");
    let table = cluster
        .create_table(&table_def())
        .expect("create the table");
    (cs, cluster, table)
}

fn start_cluster(procs: &mut Processes) -> String {
    start_cluster_with(procs, QUICK_CHECKPOINTS)
}

fn table_def() -> TableDef {
    TableDef::new(
        "accounts",
        vec![
            ColumnDef::key("id", ColumnType::UInt32).with_auto_increment(),
            ColumnDef::new("balance", ColumnType::Int64),
            ColumnDef::new("email", ColumnType::Varchar(40)),
        ],
    )
}

fn row(id: u32, balance: i64) -> Vec<Value> {
    vec![
        Value::UInt32(id),
        Value::Int64(balance),
        Value::Varchar(format!("user{id}@example.com")),
    ]
}

/// Every row of `accounts`, by id.
fn all_rows(cluster: &Cluster) -> BTreeMap<u32, Vec<Value>> {
    let table = cluster.get_table("accounts").expect("the table");
    let mut tx = cluster.start_transaction().expect("start");
    let rows = tx
        .scan_table(&table, &ScanOptions::default())
        .expect("scan")
        .collect::<Result<Vec<_>, _>>()
        .expect("scan rows");
    rows.into_iter()
        .map(|r| match r[0] {
            Value::UInt32(id) => (id, r),
            ref other => panic!("id {other:?}"),
        })
        .collect()
}

/// A field of ndb_mgm's START BACKUP output: the word after `label`.
fn field(out: &str, label: &str) -> u32 {
    let at = out
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {out}"));
    out[at + label.len()..]
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in {out}"))
}

fn backup_dir(procs: &Processes, node: u32, id: u32) -> PathBuf {
    procs.path(&format!("n{node}/BACKUP/BACKUP-{id}"))
}

/// Runs ndb_restore of node `node`'s files of backup `id` in `dir` with `what` (-m, -r,
/// --rebuild-indexes).
fn restore(cs: &str, node: u32, id: u32, dir: &Path, what: &[&str]) -> (bool, String, String) {
    let (node, id, dir) = (node.to_string(), id.to_string(), dir.display().to_string());
    let mut args = vec!["-c", cs, "-n", &node, "-b", &id, "--backup-path", &dir];
    args.extend(what);
    let out = run("ndb_restore", &args);
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Every acknowledged change of [`backup_under_writes`]'s writer: its GCI, the key, and the
/// row after it (`None`: deleted).
type History = Vec<(u64, u32, Option<Vec<Value>>)>;

/// Runs ndb_mgm `command` (a START BACKUP) while one client inserts, updates and deletes rows
/// of `accounts` (keys below `KEYS / 2` there at first, with balance 1000, then changed by
/// `history`), adds the client's changes to `history` in commit order (one thread, so later
/// commits have GCIs no older), and returns ndb_mgm's outcome.
fn backup_under_writes(
    cs: &str,
    cluster: &Cluster,
    table: &Table,
    command: &str,
    history: &mut History,
) -> (bool, String, String) {
    let stop = AtomicBool::new(false);
    let now = rows_at(history, u32::MAX);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut history = History::new();
            let mut present: Vec<bool> = (0..KEYS).map(|id| now.contains_key(&id)).collect();
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) || history.len() < 50 {
                i += 1;
                let id = i.wrapping_mul(7919) % KEYS;
                let mut tx = cluster.start_transaction().expect("start");
                let change = match (present[id as usize], i % 5) {
                    (true, 0) => {
                        tx.delete(table, &[Value::UInt32(id)]).expect("define");
                        None
                    }
                    (true, _) => {
                        let set = [(1, Value::Int64(i64::from(i)))];
                        tx.update(table, &[Value::UInt32(id)], &set)
                            .expect("define");
                        Some(row(id, i64::from(i)))
                    }
                    (false, _) => {
                        tx.insert(table, &row(id, i64::from(i))).expect("define");
                        Some(row(id, i64::from(i)))
                    }
                };
                tx.execute(ExecType::Commit)
                    .unwrap_or_else(|e| panic!("change {i} of id {id}: {e}"));
                present[id as usize] = change.is_some();
                history.push((tx.gci().expect("a write's GCI"), id, change));
            }
            history
        });
        let out = mgm(cs, command);
        stop.store(true, Ordering::Relaxed);
        history.extend(writer.join().expect("the writer"));
        out
    })
}

/// What `accounts` held at the end of global checkpoint `gcp`, after `history`'s changes.
fn rows_at(history: &History, gcp: u32) -> BTreeMap<u32, Vec<Value>> {
    let mut rows: BTreeMap<u32, Vec<Value>> = (0..KEYS / 2).map(|id| (id, row(id, 1000))).collect();
    for (gci, id, change) in history {
        if (gci >> 32) as u32 <= gcp {
            match change {
                Some(r) => rows.insert(*id, r.clone()),
                None => rows.remove(id),
            };
        }
    }
    rows
}

/// Loads keys below `KEYS / 2` with balance 1000; returns the load's GCI.
fn load(cluster: &Cluster, table: &Table) -> u64 {
    let mut tx = cluster.start_transaction().expect("start");
    for id in 0..KEYS / 2 {
        tx.insert(table, &row(id, 1000)).expect("define");
    }
    tx.execute(ExecType::Commit).expect("load");
    tx.gci().expect("a write's GCI")
}

#[test]
fn a_snapshotstart_backup_restores_as_of_its_start_gcp() {
    let mut source = Processes::new();
    // Global checkpoints as often as they go: a backup may span two.
    let (cs, cluster, table) = cluster_with_table(&mut source, SNAPSHOT_CLUSTER);
    // The rows the writer leaves alone first, so that each fragment's scan meets the writer's
    // rows last. (The scan here is too quick to meet changes of a later global checkpoint;
    // `a_snapshotstart_backup_takes_back_the_changes_its_scan_met` in the kernel's tests holds
    // it back until it does.)
    for first in (BULK_FROM..BULK_FROM + BULK).step_by(1000) {
        let mut tx = cluster.start_transaction().expect("start");
        for id in first..first + 1000 {
            tx.insert(&table, &row(id, 7)).expect("define");
        }
        tx.execute(ExecType::Commit).expect("load");
    }
    let loaded_gci = load(&cluster, &table);
    // A named event's row is in the backup; ndb_restore leaves it out, as NDB's does.
    cluster
        .create_event(&EventDef::new("accounts_changes", "accounts"))
        .expect("create an event");
    // A backup may begin and end in one global checkpoint (then a restore to its start and
    // one to its end are the same): taken again until the table changed between the two.
    let mut history = History::new();
    let mut outs = Vec::new();
    let (id, start_gcp, stop_gcp) = (1..=10)
        .find_map(|_| {
            let (ok, out, err) = backup_under_writes(
                &cs,
                &cluster,
                &table,
                "START BACKUP SNAPSHOTSTART",
                &mut history,
            );
            assert!(ok, "START BACKUP SNAPSHOTSTART failed: {out}{err}");
            let id = field(&out, "Backup ");
            let (start, stop) = (field(&out, "StartGCP: "), field(&out, "StopGCP: "));
            assert!(start <= stop, "{out}");
            outs.push(out);
            let changed = rows_at(&history, start) != rows_at(&history, stop);
            changed.then_some((id, start, stop))
        })
        .unwrap_or_else(|| panic!("no backup spanned two global checkpoints: {outs:#?}"));
    assert!(
        (loaded_gci >> 32) as u32 <= start_gcp,
        "the load precedes the backup: {outs:?}"
    );
    let after = (history.iter())
        .filter(|(gci, ..)| (gci >> 32) as u32 > start_gcp)
        .count();
    let expected = rows_at(&history, start_gcp);

    let mut target = Processes::new();
    let target_cs = start_cluster_with(&mut target, SNAPSHOT_CLUSTER);
    for (node, what) in [(1, &["-m", "-r"][..]), (2, &["-r"][..])] {
        let dir = backup_dir(&source, node, id);
        let (ok, out, err) = restore(&target_cs, node, id, &dir, what);
        assert!(ok, "ndb_restore -n {node} {what:?}: {out}{err}");
        let point =
            format!("Backup taken SNAPSHOTSTART: restored as of the end of GCP {start_gcp}\n");
        assert!(out.contains(&point), "{out}");
    }
    let target_cluster =
        Cluster::connect_mgm(&target_cs, ConnectOptions::default()).expect("connect");
    assert_eq!(target_cluster.list_events().expect("list"), Vec::new());
    let mut restored = all_rows(&target_cluster);
    let bulk = restored.split_off(&BULK_FROM);
    assert_eq!(bulk.len(), BULK as usize, "the rows the writer left alone");
    assert!(bulk.iter().all(|(id, r)| *r == row(*id, 7)));
    assert_eq!(
        restored.len(),
        expected.len(),
        "rows as of the end of GCP {start_gcp} ({after} of {} writes after it)",
        history.len()
    );
    assert_eq!(
        restored, expected,
        "as of the end of GCP {start_gcp}, not of the stop GCP {stop_gcp}"
    );
}

#[test]
fn a_backup_taken_under_writes_restores_as_of_its_stop_gcp() {
    let mut source = Processes::new();
    let (cs, cluster, table) = cluster_with_table(&mut source, QUICK_CHECKPOINTS);
    cluster
        .create_index(&table, &IndexDef::unique("email_idx", &["email"]))
        .expect("unique index");
    cluster
        .create_index(&table, &IndexDef::ordered("balance_idx", &["balance"]))
        .expect("ordered index");
    let loaded_gci = load(&cluster, &table);
    // SYSTAB_0 is in the backup (with this cluster's counter of `accounts`); the restore
    // leaves it out.
    cluster
        .auto_increment_value(&table)
        .expect("an auto-increment value");

    let mut history = History::new();
    let (ok, out, err) = backup_under_writes(&cs, &cluster, &table, "START BACKUP", &mut history);
    assert!(ok, "START BACKUP failed: {out}{err}");
    assert!(
        out.starts_with("Waiting for completed, this may take several minutes\n"),
        "{out}"
    );
    let id = field(&out, "Backup ");
    assert_eq!(id, 1, "the first backup's id: {out}");
    assert!(
        out.contains("Backup 1 started from node 49 completed\n"),
        "{out}"
    );
    let (start_gcp, stop_gcp) = (field(&out, "StartGCP: "), field(&out, "StopGCP: "));
    assert!(start_gcp <= stop_gcp, "{out}");
    assert!(
        (loaded_gci >> 32) as u32 <= stop_gcp,
        "the load precedes the backup: {out}"
    );
    let after: Vec<_> = history
        .iter()
        .filter(|(gci, ..)| (gci >> 32) as u32 > stop_gcp)
        .collect();
    let before = history.len() - after.len();
    assert!(before > 0, "no write committed up to the stop GCP: {out}");
    assert!(
        !after.is_empty(),
        "no write after the stop GCP ({before} before): the test shows nothing left out"
    );

    let expected = rows_at(&history, stop_gcp);
    let records = field(&out, "#Records: ");
    assert!(records as usize >= KEYS as usize / 4, "{out}");

    // Backup ids go up; a backup's id cannot be taken again.
    let (ok, second, err) = mgm(&cs, "START BACKUP WAIT STARTED");
    assert!(ok, "{second}{err}");
    assert_eq!(field(&second, "Backup "), 2, "{second}");
    wait_until("backup 2 to end", START_TIMEOUT, || {
        let (ok, out, err) = mgm(&cs, "START BACKUP 1");
        let out = out + &err;
        Ok((!out.contains("1302")).then_some((ok, out)))
    })
    .map(|(ok, out)| {
        assert!(!ok, "backup 1 again: {out}");
        assert!(out.contains("1350"), "{out}");
    })
    .expect("START BACKUP 1 answered");

    // Restore into a second cluster: the schema from node 1's files, the rows of both.
    let mut target = Processes::new();
    let target_cs = start_cluster(&mut target);
    // The unique index waits for every node's rows (a fuzzy scan may hold two rows with one
    // email between the data and the log).
    for (node, what) in [
        (1, &["-m", "-r"][..]),
        (2, &["-r"][..]),
        (1, &["--rebuild-indexes"][..]),
    ] {
        let dir = backup_dir(&source, node, id);
        let (ok, out, err) = restore(&target_cs, node, id, &dir, what);
        assert!(ok, "ndb_restore -n {node} {what:?}: {out}{err}");
        assert!(
            out.contains(&format!("Stop GCP of Backup: {stop_gcp}\n")),
            "{out}"
        );
        assert!(out.ends_with("NDBT_ProgramExit: 0 - OK\n"), "{out}");
        assert!(!out.contains("SYSTAB_0"), "SYSTAB_0 restored: {out}");
        if what[0] == "-m" {
            for line in [
                "Successfully restored table `accounts`",
                "Successfully created index `balance_idx` on `accounts`",
                "Unique index `email_idx` on `accounts` waits for --rebuild-indexes",
            ] {
                assert!(out.contains(line), "{out}");
            }
        }
        if what[0] == "--rebuild-indexes" {
            let created = "Successfully created index `email_idx` on `accounts`\n";
            assert!(out.contains(created), "{out}");
            assert!(!out.contains("balance_idx"), "created again: {out}");
        }
    }
    // Printed without a cluster, the two nodes' files hold the same rows.
    let mut printed = BTreeMap::new();
    for node in [1, 2] {
        let (node_arg, id_arg) = (node.to_string(), id.to_string());
        let dir = backup_dir(&source, node, id).display().to_string();
        let out = run(
            "ndb_restore",
            &[
                "-n",
                &node_arg,
                "-b",
                &id_arg,
                "--print-data",
                "--print-meta",
                "--backup-path",
                &dir,
            ],
        );
        let text = text(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains(
                "Table `accounts`: id UInt32 NOT NULL PRIMARY KEY AUTO_INCREMENT, balance Int64 NOT NULL"
            ),
            "{text}"
        );
        assert!(
            text.contains("Index `email_idx` on `accounts`: unique (email)"),
            "{text}"
        );
        let rows = text
            .split("-- accounts --\nid\tbalance\temail\n")
            .nth(1)
            .expect("rows");
        for line in rows.lines().take_while(|l| !l.is_empty()) {
            let f: Vec<&str> = line.split('\t').collect();
            let id: u32 = f[0].parse().expect("an id");
            let balance: i64 = f[1].parse().expect("a balance");
            let row = vec![
                Value::UInt32(id),
                Value::Int64(balance),
                Value::Varchar(f[2].into()),
            ];
            assert!(
                printed.insert(id, row).is_none(),
                "id {id} in both nodes' files"
            );
        }
    }
    assert_eq!(printed, expected, "--print-data, as of StopGCP {stop_gcp}");
    let dir = backup_dir(&source, 1, id).display().to_string();
    let args = [
        "-n",
        "1",
        "-b",
        "1",
        "--print-data",
        "--exclude-tables",
        "TEST_DB.accounts",
    ];
    let out = run(
        "ndb_restore",
        &[&args[..], &["--backup-path", &dir]].concat(),
    );
    assert!(out.status.success());
    assert!(
        !text(&out.stdout).contains("accounts"),
        "{}",
        text(&out.stdout)
    );
    let restored = Cluster::connect_mgm(&target_cs, ConnectOptions::default()).expect("connect");
    let got = all_rows(&restored);
    assert_eq!(got.len(), expected.len(), "rows restored");
    assert_eq!(got, expected, "the table as of StopGCP {stop_gcp}");
    // The auto-increment counter was moved past every id restored (rows of both nodes).
    let table = restored.get_table("accounts").expect("table");
    let next = restored.auto_increment_value(&table).expect("a value");
    let max = expected.keys().max().copied().unwrap_or(0);
    assert!(
        u64::from(max) < next,
        "next auto-increment value {next}, restored ids up to {max}"
    );
    // The indexes were built over the restored rows.
    let index = restored
        .get_index(&table, "email_idx")
        .expect("the unique index");
    let (&some_id, some_row) = expected.iter().next().expect("a row");
    let mut tx = restored.start_transaction().expect("start");
    let op = tx
        .read_unique(&index, &[some_row[2].clone()], LockMode::CommittedRead)
        .expect("define");
    tx.execute(ExecType::Commit)
        .expect("read by the unique index");
    assert_eq!(
        tx.row(op).map(<[Value]>::to_vec),
        Some(some_row.clone()),
        "id {some_id}"
    );

    // A damaged file: the restore names it and the offset, and writes nothing.
    let copy = target.path("damaged");
    std::fs::create_dir_all(&copy).expect("mkdir");
    let source_dir = backup_dir(&source, 2, id);
    for entry in std::fs::read_dir(&source_dir).expect("the backup directory") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), copy.join(entry.file_name())).expect("copy");
    }
    let data = copy.join(format!("BACKUP-{id}-0.2.Data"));
    let mut bytes = std::fs::read(&data).expect("read");
    bytes[32 + 20] ^= 0x10;
    std::fs::write(&data, &bytes).expect("write");
    let (ok, out, err) = restore(&target_cs, 2, id, &copy, &["-r"]);
    assert!(!ok, "a damaged file restores nothing: {out}");
    assert!(
        err.contains(&format!("{}: at offset 32: ", data.display())),
        "{err}"
    );
}

/// Waits until the cluster log holds `text`.
fn wait_for_log(procs: &Processes, text: &str) {
    let path = procs.path("mgm/ndb_49_cluster.log");
    let read = || std::fs::read_to_string(&path).unwrap_or_default();
    wait_until(
        &format!("the cluster log to say {text:?}"),
        START_TIMEOUT,
        || Ok(read().contains(text).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e}:\n{}", read()));
}

#[test]
fn a_running_backup_refuses_drop_table_and_ends_on_abort_or_a_killed_node() {
    let mut procs = Processes::new();
    // Checkpoints saved every 4 s: a backup waits that long for its stop GCP.
    let (cs, cluster, table) =
        cluster_with_table(&mut procs, "TimeBetweenGlobalCheckpoints=4000\n");
    let mut tx = cluster.start_transaction().expect("start");
    for id in 0..20 {
        tx.insert(&table, &row(id, 10)).expect("define");
    }
    tx.execute(ExecType::Commit).expect("load");
    drop(tx);

    let (ok, out, err) = mgm(&cs, "START BACKUP WAIT STARTED");
    assert!(ok, "{out}{err}");
    assert_eq!(field(&out, "Backup "), 1, "{out}");
    let status = mgm(&cs, "ALL REPORT BackupStatus").1;
    for node in [1, 2] {
        let line = format!("Node {node}: Local backup status: backup 1 ");
        assert!(status.contains(&line), "{status}");
    }
    let dropped = cluster.drop_table("accounts");
    assert_eq!(
        dropped.as_ref().err().and_then(|e| e.code()),
        Some(761),
        "DROP TABLE during a backup: {dropped:?}"
    );
    let (ok, out, err) = mgm(&cs, "START BACKUP NOWAIT");
    assert!(!ok && (out.clone() + &err).contains("1302"), "{out}{err}");
    let (ok, out, err) = mgm(&cs, "ABORT BACKUP 1");
    assert!(ok, "{out}{err}");
    assert_eq!(out, "Abort of backup 1 ordered\n");
    wait_for_log(
        &procs,
        "Backup 1 started from 49 has been aborted. Error: 1321",
    );
    let (ok, out, _) = mgm(&cs, "ABORT BACKUP 1");
    assert!(!ok, "a backup already ended: {out}");
    wait_until("the nodes to give backup 1 up", START_TIMEOUT, || {
        let status = mgm(&cs, "ALL REPORT BackupStatus").1;
        Ok((status == "Node 1: Backup not started\nNode 2: Backup not started\n").then_some(()))
    })
    .expect("REPORT BackupStatus after the abort");

    // A data node killed while a backup runs: the backup fails, the other node serves.
    let started = wait_until("backup 2 to start", START_TIMEOUT, || {
        let (ok, out, err) = mgm(&cs, "START BACKUP WAIT STARTED");
        let all = out + &err;
        match ok {
            true => Ok(Some(all)),
            false if all.contains("1302") => Ok(None),
            false => panic!("START BACKUP: {all}"),
        }
    })
    .expect("backup 2 started");
    assert_eq!(field(&started, "Backup "), 2, "{started}");
    procs.kill("ndbd-2");
    wait_for_log(
        &procs,
        "Backup 2 started from 49 has been aborted. Error: 1326",
    );
    let read = wait_until("node 1 to serve alone", START_TIMEOUT, || {
        let mut tx = cluster.start_transaction()?;
        let op = tx.read(&table, &[Value::UInt32(7)], LockMode::CommittedRead)?;
        Ok(tx
            .execute(ExecType::Commit)
            .ok()
            .and_then(|()| tx.row(op).map(<[Value]>::to_vec)))
    })
    .expect("a read after the failure");
    assert_eq!(read, row(7, 10));
    // The table can be dropped again once no backup runs.
    wait_until("the drop to be allowed", START_TIMEOUT, || {
        Ok(cluster.drop_table("accounts").is_ok().then_some(()))
    })
    .expect("DROP TABLE after the backups");
}

#[test]
fn a_backup_directory_that_cannot_be_written_fails_the_backup_not_the_node() {
    let mut procs = Processes::new();
    // BackupDataDir names a file: no BACKUP directory can be made under it.
    let not_a_dir = procs.path("not-a-directory");
    std::fs::write(&not_a_dir, b"a file").expect("write");
    let defaults = format!(
        "TimeBetweenGlobalCheckpoints=300\nBackupDataDir={}\n",
        not_a_dir.display()
    );
    let (cs, cluster, table) = cluster_with_table(&mut procs, &defaults);
    let (ok, out, err) = mgm(&cs, "START BACKUP");
    assert!(!ok, "{out}");
    let all = out + &err;
    assert!(
        all.contains("Backup failed") && all.contains("1325"),
        "{all}"
    );
    assert!(
        all.contains("not-a-directory"),
        "the error names the path: {all}"
    );
    // Both data nodes still serve, and write.
    let want = format!("Node 1: started ({VERSION})\nNode 2: started ({VERSION})\n");
    assert_eq!(mgm(&cs, "ALL STATUS").1, want);
    let mut tx = cluster.start_transaction().expect("start");
    tx.insert(&table, &row(1, 5)).expect("define");
    tx.execute(ExecType::Commit)
        .expect("a write after the failed backup");
}

#[test]
fn a_cluster_killed_during_a_backup_restarts_and_the_next_backup_takes_the_next_id() {
    let mut procs = Processes::new();
    let (cs, cluster, table) =
        cluster_with_table(&mut procs, "TimeBetweenGlobalCheckpoints=4000\n");
    // Answered once saved on every data node's disk, so the cluster's restart keeps it.
    let mut tx = cluster.start_transaction().expect("start");
    tx.set_durable_commit(true);
    for id in 0..50 {
        tx.insert(&table, &row(id, 1)).expect("define");
    }
    tx.execute(ExecType::Commit).expect("load");
    drop(tx);
    drop(cluster);
    let (ok, out, err) = mgm(&cs, "START BACKUP WAIT STARTED");
    assert!(ok, "{out}{err}");
    assert_eq!(field(&out, "Backup "), 1, "{out}");
    // Every data node dies with SIGKILL while backup 1 waits for its stop GCP.
    procs.kill("ndbd-1");
    procs.kill("ndbd-2");
    wait_for_log(
        &procs,
        "Backup 1 started from 49 has been aborted. Error: 1326",
    );
    for node in [1, 2] {
        let dir = backup_dir(&procs, node, 1);
        let ctl = dir.join(format!("BACKUP-1.{node}.ctl"));
        assert!(
            !ctl.exists(),
            "{} of a backup that never completed",
            ctl.display()
        );
    }
    // ndb_mgmd too starts again (it forgets the ids it gave), then the cluster from its
    // files: backup ids go on from the BACKUP-<id> directories the data nodes find.
    procs.kill("ndb_mgmd");
    let config = procs.path("config.ini").display().to_string();
    procs.spawn("ndb_mgmd", "ndb_mgmd", &["-f", &config]);
    procs.spawn("ndbd-1", "ndbd", &["-c", &cs, "--ndb-nodeid", "1"]);
    procs.spawn("ndbd-2", "ndbd", &["-c", &cs, "--ndb-nodeid", "2"]);
    let want = format!("Node 1: started ({VERSION})\nNode 2: started ({VERSION})\n");
    wait_until("the cluster to start again", START_TIMEOUT, || {
        Ok((mgm(&cs, "ALL STATUS").1 == want).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}; last: {}", mgm(&cs, "ALL STATUS").1));
    let (ok, out, err) = mgm(&cs, "START BACKUP");
    assert!(ok, "{out}{err}");
    assert_eq!(field(&out, "Backup "), 2, "{out}");
    assert_eq!(field(&out, "#Records: "), 50, "{out}");
}

/// A table with BLOB and TEXT columns is backed up with its parts tables and restored whole,
/// into a cluster where it gets other table ids (a table created there first): each parts
/// table's rows go to the parts table of the same column of the restored table.
#[test]
fn a_table_with_blobs_restores_whole_under_other_ids() {
    let mut source = Processes::new();
    let cs = start_cluster(&mut source);
    let cluster = Cluster::connect_mgm(&cs, ConnectOptions::default()).expect("connect");
    let def = TableDef::new(
        "docs",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::nullable("body", ColumnType::Blob(rndb_api::BlobSize::Blob)),
            ColumnDef::nullable("story", ColumnType::Text(rndb_api::BlobSize::Medium)),
        ],
    );
    let table = cluster.create_table(&def).expect("create");
    let doc = |id: u32| {
        let len = id as usize * 997;
        vec![
            Value::UInt32(id),
            Value::Varbinary((0..len).map(|i| (i + id as usize) as u8).collect()),
            match id % 3 {
                0 => Value::Null,
                _ => Value::Varchar("ü".repeat(len / 2 + 1)),
            },
        ]
    };
    let mut tx = cluster.start_transaction().expect("start");
    for id in 0..20 {
        tx.insert(&table, &doc(id)).expect("define");
    }
    tx.execute(ExecType::Commit).expect("load");
    drop(tx);
    let (ok, out, err) = mgm(&cs, "START BACKUP");
    assert!(ok, "START BACKUP failed: {out}{err}");
    let id = field(&out, "Backup ");

    let mut target = Processes::new();
    let target_cs = start_cluster(&mut target);
    let restored = Cluster::connect_mgm(&target_cs, ConnectOptions::default()).expect("connect");
    let pad = TableDef::new("pad", vec![ColumnDef::key("k", ColumnType::Int32)]);
    restored.create_table(&pad).expect("a table first");
    for (node, what) in [(1, &["-m", "-r"][..]), (2, &["-r"][..])] {
        let dir = backup_dir(&source, node, id);
        let (ok, out, err) = restore(&target_cs, node, id, &dir, what);
        assert!(ok, "ndb_restore -n {node} {what:?}: {out}{err}");
        assert!(
            !out.contains("Successfully restored table `NDB$BLOB"),
            "{out}"
        );
    }
    let table = restored.get_table("docs").expect("restored");
    assert_ne!(
        table.id(),
        cluster.get_table("docs").expect("source").id(),
        "other ids"
    );
    let mut tx = restored.start_transaction().expect("start");
    let mut rows = tx
        .scan_table(&table, &ScanOptions::default())
        .expect("scan")
        .collect::<Result<Vec<_>, _>>()
        .expect("rows");
    rows.sort_by_key(|r| match r[0] {
        Value::UInt32(id) => id,
        _ => u32::MAX,
    });
    assert_eq!(rows, (0..20).map(doc).collect::<Vec<_>>());
}
