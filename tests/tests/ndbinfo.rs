//! Proves that the ndbinfo tables tell what a running cluster of real processes did: the
//! counters go up by exactly the transactions, reads, writes, scans and aborts a client ran;
//! memoryusage, pools and cluster_transactions show the rows and the open transaction it
//! holds, and cluster_locks who holds a row and who waits for it; table_fragments where each
//! fragment's primary is, and the takeover when a node fails; transporters show each link up
//! (bytes, address, type) or down, and count a node's links again after it restarts; every
//! node's rows come node by node, the cluster's tables once; and `ndbinfo_select_all` prints
//! them as NDB's tool does, refusing an unknown table with error 709 while printing the
//! others.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use rndb_api::ndbinfo::InfoValue;
use rndb_api::{
    Cluster, ColumnDef, ColumnType, ExecType, IndexDef, LockMode, ScanOptions, TableDef, Value,
};
use rndb_config::NodeId;
use rndb_tests::{binary_path, wait_until, ClusterSpec, TestCluster};

/// A node's restart, in debug builds on a shared 2-core machine.
const RESTART_TIMEOUT: Duration = Duration::from_secs(120);

fn ndbinfo_select_all(config: &Path, args: &[&str]) -> Output {
    let exe = binary_path("ndbinfo_select_all").expect("find ndbinfo_select_all");
    Command::new(exe)
        .arg("--config-file")
        .arg(config)
        .args(args)
        .output()
        .expect("run ndbinfo_select_all")
}

type Row = BTreeMap<&'static str, InfoValue>;

/// The rows of `table` as maps from column name to value.
fn rows(cluster: &Cluster, table: &str) -> Vec<Row> {
    try_rows(cluster, table).unwrap_or_else(|e| panic!("read {table}: {e}"))
}

/// As [`rows`], `None` on a temporary error (a node failing while it is read).
fn rows_when_served(cluster: &Cluster, table: &str) -> anyhow::Result<Option<Vec<Row>>> {
    match try_rows(cluster, table) {
        Ok(rows) => Ok(Some(rows)),
        Err(e) if e.is_temporary() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn try_rows(cluster: &Cluster, table: &str) -> Result<Vec<Row>, rndb_api::Error> {
    let read = cluster.ndbinfo(table)?;
    Ok(read
        .rows
        .into_iter()
        .map(|row| {
            assert_eq!(row.len(), read.table.columns.len(), "{table}: {row:?}");
            read.table.columns.iter().map(|c| c.name).zip(row).collect()
        })
        .collect())
}

fn number(row: &Row, column: &str) -> u64 {
    match row.get(column) {
        Some(InfoValue::Number(v)) => *v,
        other => panic!("{column}: {other:?} in {row:?}"),
    }
}

fn text<'a>(row: &'a Row, column: &str) -> &'a str {
    match row.get(column) {
        Some(InfoValue::Text(v)) => v,
        other => panic!("{column}: {other:?} in {row:?}"),
    }
}

/// Each counter summed over the data nodes, by name.
fn counters(cluster: &Cluster) -> BTreeMap<String, u64> {
    let mut sums = BTreeMap::new();
    for row in rows(cluster, "counters") {
        *sums
            .entry(text(&row, "counter_name").to_string())
            .or_default() += number(&row, "val");
    }
    sums
}

fn table_def() -> TableDef {
    TableDef::new(
        "items",
        vec![
            ColumnDef::key("id", ColumnType::UInt32),
            ColumnDef::new("payload", ColumnType::Varchar(200)),
        ],
    )
}

fn row(id: u32) -> Vec<Value> {
    vec![Value::UInt32(id), Value::Varchar(format!("{id:>150}"))]
}

#[test]
fn ndbinfo_tables_show_what_the_cluster_did() {
    let spec = ClusterSpec::new()
        .data_nodes(2)
        .replicas(2)
        .data_memory("16M")
        // A lock wait lasts until the test ends it.
        .deadlock_timeout_ms(60_000);
    let mut test = TestCluster::start(spec).expect("start the cluster");
    let cluster = test.connect().expect("connect");
    let me = u64::from(cluster.node_id().0);
    let table = cluster
        .create_table(&table_def())
        .expect("create the table");

    // Every node's rows, node by node; the cluster's tables once.
    let nodes = rows(&cluster, "nodes");
    assert_eq!(
        nodes
            .iter()
            .map(|r| number(r, "node_id"))
            .collect::<Vec<_>>(),
        [1, 2]
    );
    for node in &nodes {
        assert_eq!(text(node, "status"), "STARTED");
        assert_eq!(number(node, "start_phase"), 0);
    }
    assert_eq!(rows(&cluster, "backup_id").len(), 1);
    assert_eq!(number(&rows(&cluster, "backup_id")[0], "id"), 0);
    let tables = rows(&cluster, "tables");
    assert!(tables
        .iter()
        .any(|t| text(t, "table_name") == "transporters"));
    let columns = rows(&cluster, "columns");
    let of_nodes: Vec<&str> = columns
        .iter()
        .filter(|c| number(c, "table_id") == 2)
        .map(|c| text(c, "column_name"))
        .collect();
    assert_eq!(of_nodes, ["node_id", "uptime", "status", "start_phase"]);
    let errors = rows(&cluster, "error_messages");
    let full = errors
        .iter()
        .find(|e| number(e, "error_code") == 1324)
        .expect("error 1324 listed");
    assert_eq!(text(full, "error_description"), "Backup log buffer full");

    let by_payload = cluster
        .create_index(&table, &IndexDef::ordered("by_payload", &["payload"]))
        .expect("create the ordered index");
    // Each node's config, joined with the catalogue of parameters by number.
    let params = rows(&cluster, "config_params");
    let number_of = |name: &str| {
        let p = (params.iter())
            .find(|p| text(p, "param_name") == name)
            .unwrap_or_else(|| panic!("{name} in config_params"));
        number(p, "param_number")
    };
    let values = rows(&cluster, "config_values");
    for (name, expected) in [
        ("DataMemory", 16u64 << 20),
        ("TransactionDeadlockDetectionTimeout", 60_000),
        ("NoOfReplicas", 2),
    ] {
        let param = number_of(name);
        let of_param: Vec<_> = (values.iter())
            .filter(|v| number(v, "config_param") == param)
            .map(|v| (number(v, "node_id"), text(v, "config_value").to_string()))
            .collect();
        assert_eq!(
            of_param,
            [(1, expected.to_string()), (2, expected.to_string())],
            "{name}"
        );
    }
    let ignored = (params.iter())
        .find(|p| text(p, "param_name") == "BackupMemory")
        .unwrap();
    assert_eq!(text(ignored, "param_status"), "recognised");
    let memory_before = rows(&cluster, "memoryusage");
    let before = counters(&cluster);

    // 10 transactions of 20 inserts each.
    for batch in 0..10u32 {
        let mut tx = cluster.start_transaction().unwrap();
        for id in batch * 20..batch * 20 + 20 {
            tx.insert(&table, &row(id)).unwrap();
        }
        tx.execute(ExecType::Commit).expect("insert");
    }
    // 50 locked reads in one transaction, 30 committed reads in another.
    let mut tx = cluster.start_transaction().unwrap();
    for id in 0..50 {
        tx.read(&table, &[Value::UInt32(id)], LockMode::Read)
            .unwrap();
    }
    tx.execute(ExecType::Commit).expect("locked reads");
    let mut tx = cluster.start_transaction().unwrap();
    for id in 0..30 {
        tx.read(&table, &[Value::UInt32(id)], LockMode::CommittedRead)
            .unwrap();
    }
    tx.execute(ExecType::Commit).expect("committed reads");
    // A table scan.
    let mut tx = cluster.start_transaction().unwrap();
    let scanned = tx
        .scan_table(&table, &ScanOptions::default())
        .unwrap()
        .count();
    assert_eq!(scanned, 200);
    tx.execute(ExecType::Commit)
        .expect("commit the scan's transaction");
    // A range scan of an ordered index (created before the counters were read).
    let mut tx = cluster.start_transaction().unwrap();
    let ranged = tx
        .scan_index(&by_payload, &ScanOptions::default())
        .unwrap()
        .count();
    assert_eq!(ranged, 200);
    tx.execute(ExecType::Commit)
        .expect("commit the range scan's transaction");
    // A write rolled back.
    let mut tx = cluster.start_transaction().unwrap();
    tx.insert(&table, &row(1000)).unwrap();
    tx.execute(ExecType::NoCommit).unwrap();
    tx.execute(ExecType::Rollback).expect("roll back");

    let after = counters(&cluster);
    let delta = |name: &str| after[name] - before.get(name).copied().unwrap_or(0);
    assert_eq!(delta("WRITES"), 201, "{after:?}");
    assert_eq!(delta("READS"), 50, "{after:?}");
    assert_eq!(delta("SIMPLE_READS"), 30, "{after:?}");
    assert_eq!(delta("TABLE_SCANS"), 1, "{after:?}");
    assert_eq!(delta("RANGE_SCANS"), 1, "{after:?}");
    assert_eq!(delta("TRANSACTIONS"), 15, "{after:?}");
    assert_eq!(delta("COMMITS"), 14, "{after:?}");
    assert_eq!(delta("ABORTS"), 1, "{after:?}");
    // Each write runs on both replicas; each read on one.
    assert_eq!(delta("OPERATIONS"), 2 * 201 + 80, "{after:?}");
    // A transaction runs on its first key's primary replica: its operations on rows whose
    // primary is that node are local.
    let primary = |id: u32| cluster.replicas_of(&table, &[Value::UInt32(id)]).unwrap()[0];
    let local = |keys: &[u32]| {
        keys.iter()
            .filter(|&&k| primary(k) == primary(keys[0]))
            .count()
    };
    let batches: Vec<Vec<u32>> = (0..10).map(|b| (b * 20..b * 20 + 20).collect()).collect();
    let local_writes: usize = batches.iter().map(|b| local(b)).sum::<usize>() + local(&[1000]);
    let local_reads = local(&(0..50).collect::<Vec<_>>()) + local(&(0..30).collect::<Vec<_>>());
    assert_eq!(delta("LOCAL_WRITES"), local_writes as u64, "{after:?}");
    assert_eq!(delta("LOCAL_READS"), local_reads as u64, "{after:?}");
    assert!(
        local_writes < 201 && local_reads < 80,
        "both nodes are primaries of some rows"
    );

    // DataMemory holds the rows now, on both nodes.
    let memory_after = rows(&cluster, "memoryusage");
    for (was, is) in memory_before.iter().zip(&memory_after) {
        assert_eq!(text(is, "memory_type"), "Data memory");
        assert_eq!(number(is, "total"), 16 << 20);
        assert_eq!(number(is, "total_pages"), 512);
        assert!(
            number(is, "used") > number(was, "used") + 200 * 150,
            "{is:?}"
        );
        assert_eq!(
            number(is, "used_pages"),
            number(is, "used").div_ceil(32 << 10)
        );
    }
    // The redo log took the writes: some part of each node holds bytes.
    let spaces = rows(&cluster, "logspaces");
    assert_eq!(spaces.len(), 2 * 4, "{spaces:?}");
    for node in [1, 2] {
        let used: u64 = spaces
            .iter()
            .filter(|s| number(s, "node_id") == node)
            .map(|s| number(s, "used"))
            .sum();
        assert!(used > 200 * 150, "node {node}: {spaces:?}");
    }
    assert!(spaces.iter().all(|s| number(s, "total") == 16 * (16 << 20)));
    let buffers = rows(&cluster, "logbuffers");
    assert_eq!(buffers.len(), 2);
    assert!(buffers.iter().all(|b| number(b, "total") == 32 << 20));

    // An open transaction shows, with its operations and its API node.
    let mut open = cluster.start_transaction().unwrap();
    for id in 2000..2003 {
        open.insert(&table, &row(id)).unwrap();
    }
    open.execute(ExecType::NoCommit).unwrap();
    let mine: Vec<_> = rows(&cluster, "cluster_transactions")
        .into_iter()
        .filter(|t| number(t, "client_node_id") == me)
        .collect();
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(text(&mine[0], "state"), "Started");
    assert_eq!(number(&mine[0], "count_operations"), 3);
    assert_eq!(number(&mine[0], "outstanding_operations"), 0);
    assert_eq!(number(&mine[0], "transid") >> 32, me);
    let in_use: u64 = rows(&cluster, "pools")
        .iter()
        .filter(|p| text(p, "pool_name") == "Transaction Record")
        .map(|p| {
            assert_eq!(text(p, "config_param"), "MaxNoOfConcurrentTransactions");
            number(p, "used")
        })
        .sum();
    assert_eq!(in_use, 1);
    open.execute(ExecType::Commit).unwrap();
    assert!(rows(&cluster, "cluster_transactions").is_empty());

    // A lock wait: the holder's update and the waiter's read, on the row's primary replica,
    // the waiter pointing at the holder; the backup replica holds the update's lock too.
    let before = counters(&cluster);
    let mut holder = cluster.start_transaction().unwrap();
    let changed = [(1, Value::Varchar("changed".into()))];
    holder
        .update(&table, &[Value::UInt32(5)], &changed)
        .unwrap();
    holder.execute(ExecType::NoCommit).unwrap();
    let primary = u64::from(cluster.replicas_of(&table, &[Value::UInt32(5)]).unwrap()[0].0);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let mut tx = cluster.start_transaction().unwrap();
            tx.read(&table, &[Value::UInt32(5)], LockMode::Read)
                .unwrap();
            tx.execute(ExecType::Commit)
        });
        let locks = wait_until("the read to wait for the lock", RESTART_TIMEOUT, || {
            let locks = rows(&cluster, "cluster_locks");
            Ok(locks
                .iter()
                .any(|l| text(l, "state") == "W")
                .then_some(locks))
        })
        .unwrap();
        let on_primary: Vec<_> = locks
            .iter()
            .filter(|l| number(l, "node_id") == primary)
            .collect();
        assert_eq!(on_primary.len(), 2, "{locks:?}");
        let (held, waiting) = (on_primary[0], on_primary[1]);
        assert_eq!(
            (
                text(held, "mode"),
                text(held, "state"),
                text(held, "detail"),
                text(held, "op")
            ),
            ("X", "H", "*", "UPDATE"),
            "{held:?}"
        );
        assert_eq!(
            (
                text(waiting, "mode"),
                text(waiting, "state"),
                text(waiting, "op")
            ),
            ("S", "W", "READ-SH"),
            "{waiting:?}"
        );
        assert_eq!(number(waiting, "waiting_for"), number(held, "transid"));
        assert_eq!(number(held, "rowid"), number(waiting, "rowid"));
        assert_ne!(number(held, "transid"), number(waiting, "transid"));
        let on_backup: Vec<_> = locks
            .iter()
            .filter(|l| number(l, "node_id") != primary)
            .collect();
        assert_eq!(on_backup.len(), 1, "{locks:?}");
        assert_eq!(text(on_backup[0], "state"), "H");
        assert_eq!(number(on_backup[0], "transid"), number(held, "transid"));
        holder.execute(ExecType::Commit).unwrap();
        waiter.join().unwrap().expect("the read after the commit");
    });
    assert!(rows(&cluster, "cluster_locks").is_empty());
    // The read that waited counts once: OPERATIONS are the update on both replicas and the
    // read, however long it waited.
    let after = counters(&cluster);
    let delta = |name: &str| after[name] - before[name];
    assert_eq!(delta("OPERATIONS"), 3, "{after:?}");
    assert_eq!((delta("READS"), delta("WRITES")), (1, 1), "{after:?}");
    assert_eq!(
        (delta("TRANSACTIONS"), delta("COMMITS")),
        (2, 2),
        "{after:?}"
    );

    // Node 1's links: node 2 and this API node up, the other API slots down.
    let links: Vec<_> = rows(&cluster, "transporters")
        .into_iter()
        .filter(|t| number(t, "node_id") == 1)
        .collect();
    let peers: Vec<u64> = links.iter().map(|t| number(t, "remote_node_id")).collect();
    let mut expected: Vec<u64> = vec![2];
    expected.extend(test.api_node_ids().iter().map(|n| u64::from(n.0)));
    assert_eq!(peers, expected);
    for link in &links {
        let up = [2, me].contains(&number(link, "remote_node_id"));
        assert_eq!(
            text(link, "status"),
            if up { "CONNECTED" } else { "DISCONNECTED" }
        );
        assert_eq!(text(link, "type"), "TCP");
        if up {
            assert_eq!(text(link, "remote_address"), "127.0.0.1", "{link:?}");
            assert!(number(link, "bytes_sent") > 0 && number(link, "bytes_received") > 0);
            assert_eq!(number(link, "connect_count"), 1, "{link:?}");
        } else {
            assert_eq!(text(link, "remote_address"), "");
            assert_eq!(number(link, "connect_count"), 0);
        }
    }

    // Each node's view of the table's fragments: both replicas alive, each primary where
    // the config puts it, half of them on each node.
    let fragments_of = |rows: Vec<Row>| -> Vec<Row> {
        (rows.into_iter())
            .filter(|f| number(f, "node_id") == 1 && number(f, "table_id") == u64::from(table.id()))
            .collect()
    };
    let fragments = fragments_of(rows(&cluster, "table_fragments"));
    assert!(fragments.len() >= 2, "{fragments:?}");
    for f in &fragments {
        assert_eq!(
            number(f, "current_primary"),
            number(f, "preferred_primary"),
            "{f:?}"
        );
        assert_eq!(
            (
                number(f, "num_alive_replicas"),
                number(f, "num_dead_replicas")
            ),
            (2, 0)
        );
        assert_ne!(number(f, "current_first_backup"), 0, "{f:?}");
        assert_eq!(number(f, "no_of_replicas"), 2);
    }
    assert!(fragments
        .iter()
        .any(|f| number(f, "preferred_primary") == 2));

    // Node 2 restarts: its link to node 1 comes up a second time.
    test.kill_node(NodeId(2)).expect("kill node 2");
    wait_until("node 1 to see node 2 gone", RESTART_TIMEOUT, || {
        let Some(links) = rows_when_served(&cluster, "transporters")? else {
            return Ok(None);
        };
        let down = links.into_iter().any(|t| {
            number(&t, "node_id") == 1
                && number(&t, "remote_node_id") == 2
                && text(&t, "status") == "DISCONNECTED"
        });
        Ok(down.then_some(()))
    })
    .unwrap();
    wait_until("node 1's rows alone", RESTART_TIMEOUT, || {
        let nodes = rows_when_served(&cluster, "nodes")?;
        Ok(nodes.filter(|n| n.len() == 1).map(|_| ()))
    })
    .unwrap();
    // Node 1 took over node 2's primaries: every fragment's one live replica.
    for f in fragments_of(rows(&cluster, "table_fragments")) {
        assert_eq!(number(&f, "current_primary"), 1, "{f:?}");
        assert_eq!(number(&f, "current_first_backup"), 0, "{f:?}");
        assert_eq!(
            (
                number(&f, "num_alive_replicas"),
                number(&f, "num_dead_replicas")
            ),
            (1, 1)
        );
    }
    test.restart_node(NodeId(2)).expect("restart node 2");
    wait_until("node 2 to start again", RESTART_TIMEOUT, || {
        let nodes = rows_when_served(&cluster, "nodes")?.unwrap_or_default();
        Ok(
            (nodes.len() == 2 && nodes.iter().all(|n| text(n, "status") == "STARTED"))
                .then_some(()),
        )
    })
    .unwrap();
    let again = rows(&cluster, "transporters")
        .into_iter()
        .find(|t| number(t, "node_id") == 1 && number(t, "remote_node_id") == 2)
        .unwrap();
    assert_eq!(number(&again, "connect_count"), 2, "{again:?}");
    assert_eq!(text(&again, "status"), "CONNECTED");

    // The tool: a header of column names, then each node's row, tab-separated; an unknown
    // table is refused with 709 and the others still print.
    let out = ndbinfo_select_all(test.config_path(), &["nodes", "no_such_table", "backup_id"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "node_id\tuptime\tstatus\tstart_phase", "{stdout}");
    assert!(
        lines[1].starts_with("1\t") && lines[1].ends_with("\tSTARTED\t0"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("2\t") && lines[2].ends_with("\tSTARTED\t0"),
        "{stdout}"
    );
    assert_eq!(&lines[3..], ["id", "0"], "{stdout}");
    assert!(
        stderr.contains("709")
            && stderr.contains("no_such_table")
            && stderr.contains("memoryusage"),
        "{stderr}"
    );
}
